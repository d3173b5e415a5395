/* cdef/system.h - the C library's and the kernel's names that the Python layer
 * uses beside the shim (written by hand: no plb_ declaration belongs here, those
 * are generated into cdef/shim.h). Load before cdef/shim.h, whose merge source
 * points at the perf control page. Values and layouts are left to the compiler. */

/* errno values the Python layer compares against (from <errno.h>). */
#define ECANCELED ...
#define EINTR ...
#define ENOENT ...
#define EINVAL ...
#define ENOMEM ...
#define E2BIG ...
#define EBADF ...
#define EAGAIN ...
#define EOPNOTSUPP ...
#define ESRCH ...
#define EBADMSG ...
#define EMSGSIZE ...
#define EPIPE ...
#define EEXIST ...

/* the clock for PERF_SAMPLE_TIME (use_clockid) and bpf_ktime_get_ns() */
#define CLOCK_MONOTONIC ...

/* The kernel's perf ring control page and record header (linux/perf_event.h),
 * completed here so that tests can build synthetic rings. */
struct perf_event_mmap_page {
    __u64 data_head;
    __u64 data_tail;
    __u64 data_offset;
    __u64 data_size;
    ...;
};

struct perf_event_header {
    __u32 type;
    __u16 misc;
    __u16 size;
    ...;
};

/* enum perf_event_type */
static const int PERF_RECORD_LOST;
static const int PERF_RECORD_SAMPLE;

/* perf_event_open(2)'s event types and the generic events of the table in
 * Program.attach_perf_event (enum perf_type_id, perf_sw_ids, perf_hw_id). */
static const int PERF_TYPE_HARDWARE;
static const int PERF_TYPE_SOFTWARE;
static const int PERF_COUNT_SW_CPU_CLOCK;
static const int PERF_COUNT_SW_TASK_CLOCK;
static const int PERF_COUNT_SW_PAGE_FAULTS;
static const int PERF_COUNT_SW_CONTEXT_SWITCHES;
static const int PERF_COUNT_SW_CPU_MIGRATIONS;
static const int PERF_COUNT_SW_PAGE_FAULTS_MIN;
static const int PERF_COUNT_SW_PAGE_FAULTS_MAJ;
static const int PERF_COUNT_HW_CPU_CYCLES;
static const int PERF_COUNT_HW_INSTRUCTIONS;
static const int PERF_COUNT_HW_CACHE_REFERENCES;
static const int PERF_COUNT_HW_CACHE_MISSES;
static const int PERF_COUNT_HW_BRANCH_INSTRUCTIONS;
static const int PERF_COUNT_HW_BRANCH_MISSES;

/* XDP attach modes (linux/if_link.h). */
#define XDP_FLAGS_SKB_MODE ...
#define XDP_FLAGS_DRV_MODE ...

/* setns(2) and the network namespace flag (<sched.h>): a legacy tc filter is
 * removed over netlink from the namespace it was added in. */
int setns(int fd, int nstype);
#define CLONE_NEWNET ...
