/* cdef/shim_ringbuf.h - the BPF ring buffer walker (csrc/plb_ringbuf.h).
 * Needs nothing else; load it before cdef/shim_queue.h. Counts are >= 0;
 * failures are negative errno values (-EINVAL, -EBADMSG, -EMSGSIZE, ...). */

/* The ring as memory: consumer page, producer page, data mapped twice. */
struct plb_rb_view {
    uint64_t *consumer_pos;
    const uint64_t *producer_pos;
    const uint8_t *data;
    uint64_t mask;
};

enum plb_rb_peek_result {
    PLB_RB_EMPTY, PLB_RB_RECORD, PLB_RB_BUSY, PLB_RB_DISCARD, PLB_RB_CORRUPT, ...
};

/* From include/uapi/linux/bpf.h, as mirrored by csrc/plb_ringbuf.h. */
#define PLB_RB_BUSY_BIT ...
#define PLB_RB_DISCARD_BIT ...
#define PLB_RB_HDR_SZ ...

/* errno values the ring, queue and reader return (from <errno.h>). */
#define EBADMSG ...
#define EMSGSIZE ...
#define EPIPE ...

int plb_rb_peek(const struct plb_rb_view *v, uint64_t pos, const void **data,
                uint32_t *len, uint64_t *next_pos);
void plb_rb_commit(struct plb_rb_view *v, uint64_t pos);
uint64_t plb_rb_consumer_pos(const struct plb_rb_view *v);
uint64_t plb_rb_available(const struct plb_rb_view *v);
int plb_rb_read(struct plb_rb_view *v, uint8_t *out, size_t out_cap,
                uint32_t *starts, uint32_t *lens, uint32_t max_records,
                int consume, size_t *out_used);

/* Filled by plb_rb_map; the view stays valid until plb_rb_unmap. */
struct plb_rb_mapping {
    struct plb_rb_view view;
    void *consumer_page;
    size_t consumer_len;
    void *producer_area;
    size_t producer_len;
    ...;
};
int plb_rb_map(int map_fd, uint32_t data_size, struct plb_rb_mapping *m);
void plb_rb_unmap(struct plb_rb_mapping *m);
