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
enum bpf_perf_event_ret plb_perf_event_ignore(void *ctx, int cpu, struct perf_event_header *ev);
enum bpf_perf_event_ret plb_perf_event_collect(void *ctx, int cpu, struct perf_event_header *ev);
int plb_epoll_add_edge(int epfd, int fd);
void plb_full_fence(void);
