/* cdef/shim_merge.h - the ordered merge across perf rings / ring buffers
 * (csrc/plb_merge.h; set_source must #include "plb_merge.h"). Layouts and
 * values are left to the C compiler (`...`). struct plb_rb_view is declared in
 * full by the ring buffer cdef; here only a pointer to it is used. */

struct perf_event_mmap_page;
struct plb_rb_view;
struct plb_merge;

/* plb_merge_source.kind */
static const int PLB_SRC_PERF;
static const int PLB_SRC_RINGBUF;
/* plb_merge_config.ts_mode */
static const int PLB_TS_KERNEL;
static const int PLB_TS_OFFSET;
/* plb_merge_config.late_policy */
static const int PLB_LATE_DELIVER;
static const int PLB_LATE_DROP;
/* plb_merge_out.flags[i] */
static const int PLB_MERGE_F_LATE;
static const int PLB_MERGE_F_LOST;
static const int PLB_MERGE_F_FORCED;
/* plb_merge_drain() flags */
static const int PLB_MERGE_DRAIN_ALL;
/* out.deadline_ns when nothing waits; defaults for the config */
static const uint64_t PLB_MERGE_NO_DEADLINE;
static const uint64_t PLB_MERGE_DEFAULT_WINDOW_NS;
static const unsigned int PLB_MERGE_DEFAULT_PRESSURE_PERMILLE;
/* perf sample_type bits for plb_merge_config.sample_type (perf_event.h) */
static const uint64_t PLB_PERF_SAMPLE_RAW;
static const uint64_t PLB_PERF_SAMPLE_TIME;

typedef uint64_t (*plb_clock_fn)(void *ctx);

struct plb_merge_config {
    uint32_t ts_mode;
    uint32_t ts_offset;
    uint64_t sample_type;
    uint64_t window_ns;
    uint32_t late_policy;
    uint32_t pressure_permille;
    plb_clock_fn clock;
    void *clock_ctx;
    ...;
};

struct plb_merge_source {
    uint32_t kind;
    struct perf_event_mmap_page *page;
    uint8_t *data;
    uint64_t data_size;
    const struct plb_rb_view *rb;
    ...;
};

struct plb_merge_out {
    uint8_t *buf;
    uint64_t buf_size;
    uint32_t *ring;
    uint64_t *ts;
    uint32_t *flags;
    uint32_t *start;
    uint32_t *len;
    uint64_t used;
    uint64_t deadline_ns;
    uint32_t need;
    ...;
};

struct plb_merge_stats {
    uint64_t emitted;
    uint64_t late_events;
    uint64_t max_lateness_ns;
    uint64_t dropped_late;
    uint64_t inversions;
    uint64_t lost_records;
    uint64_t lost_samples;
    uint64_t malformed;
    uint64_t forced_flushes;
    ...;
};

uint64_t plb_clock_monotonic(void *ctx);
uint64_t plb_clock_boottime(void *ctx);
int plb_merge_source_perf(struct plb_merge_source *src, void *base, size_t size);
struct plb_merge *plb_merge_new(const struct plb_merge_config *cfg,
                                const struct plb_merge_source *srcs, uint32_t n);
void plb_merge_free(struct plb_merge *m);
int plb_merge_drain(struct plb_merge *m, struct plb_merge_out *out,
                    uint32_t max_records, uint32_t flags);
typedef int (*plb_merge_event_fn)(void *ctx, uint32_t ring, uint64_t ts, uint32_t flags,
                                  const void *data, uint32_t len);
int plb_merge_consume(struct plb_merge *m, plb_merge_event_fn fn, void *ctx,
                      uint32_t max_records, uint32_t flags);
int plb_merge_poll_timeout_ms(struct plb_merge *m);
uint64_t plb_merge_next_deadline(const struct plb_merge *m);
void plb_merge_stats(const struct plb_merge *m, struct plb_merge_stats *st,
                     uint64_t *backlog, uint32_t n);
uint32_t plb_merge_nsources(const struct plb_merge *m);
