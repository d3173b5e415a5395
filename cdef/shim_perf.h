/* cdef/shim_perf.h - csrc/plb_perfattr.h: perf event attributes, the raw perf
 * record callbacks and the ring buffer wait helpers behind PerfReader and
 * OrderedReader; plus the kernel's perf ring control page and record header
 * (linux/perf_event.h), completed here so that tests can build synthetic
 * rings. Load after shim_merge.h (which declares the page opaque). Layouts and
 * values are left to the compiler (`...`). */

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
/* the clock for PERF_SAMPLE_TIME (use_clockid) and bpf_ktime_get_ns() */
#define CLOCK_MONOTONIC ...

struct perf_event_attr *plb_perf_attr_new(uint64_t sample_type, uint32_t wakeup_events,
                                          uint32_t watermark_bytes, int clockid);
void plb_perf_attr_free(struct perf_event_attr *attr);
int plb_perf_event_open(uint32_t type, uint64_t config, uint64_t period_or_freq, int freq,
                        int pid, int cpu);

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
enum bpf_perf_event_ret plb_perf_event_ignore(void *ctx, int cpu, struct perf_event_header *ev);
enum bpf_perf_event_ret plb_perf_event_collect(void *ctx, int cpu, struct perf_event_header *ev);
int plb_epoll_add_edge(int epfd, int fd);
void plb_full_fence(void);
