/* cdef/shim_queue.h - the bounded queue (csrc/plb_queue.h) and the native
 * reader thread (csrc/plb_reader.h). Load after cdef/shim_ringbuf.h, which
 * declares struct plb_rb_view and the errno constants used here
 * (EPIPE: closed and empty; EMSGSIZE: head record larger than out_cap). */

struct plb_queue;

struct plb_queue_stats {
    uint64_t pushed;
    uint64_t popped;
    uint64_t dropped;
    uint64_t queue_full_count;
    uint64_t dropped_queued;
    uint64_t dropped_popped;
    uint64_t dropped_pending;
    uint64_t dropped_unhandled;
    uint64_t current_size;
    uint64_t current_bytes;
    uint64_t high_water;
    uint64_t max_pending;
    uint64_t byte_cap;
    int closed;
};

struct plb_queue *plb_queue_create(uint32_t max_pending, size_t byte_cap,
                                   uint32_t drop_cap, size_t drop_byte_cap);
int plb_queue_destroy(struct plb_queue *q);
int plb_queue_push(struct plb_queue *q, const void *data, uint32_t len);
int plb_queue_pop_batch(struct plb_queue *q, uint8_t *out, size_t out_cap,
                        uint32_t *starts, uint32_t *lens, uint32_t max,
                        int timeout_ms, size_t *out_used);
int plb_queue_pop_dropped_batch(struct plb_queue *q, uint8_t *out,
                                size_t out_cap, uint32_t *starts,
                                uint32_t *lens, uint32_t max, size_t *out_used);
void plb_queue_close(struct plb_queue *q);
void plb_queue_stats(struct plb_queue *q, struct plb_queue_stats *out);

struct plb_reader;

struct plb_reader_stats {
    uint64_t records_read;
    uint64_t records_dropped;
    uint64_t discarded;
    uint64_t batches;
    uint64_t wakeups;
    uint64_t timeouts;
    uint64_t busy_waits;
    uint64_t corrupt;
    int error;
    int running;
};

#define PLB_READER_DEFAULT_TIMEOUT_MS ...

int plb_reader_start(struct plb_reader **out, struct plb_rb_view view,
                     int wake_fd, struct plb_queue *q, uint32_t batch_size);
void plb_reader_set_timeout(struct plb_reader *r, int timeout_ms);
int plb_reader_stop(struct plb_reader *r);
void plb_reader_destroy(struct plb_reader *r);
void plb_reader_stats(struct plb_reader *r, struct plb_reader_stats *out);
