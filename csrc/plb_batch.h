/* plb_batch.h - collect ring-buffer and perf-buffer records in C, hand them to Python in batches.
 *
 * libbpf calls a sample callback once per record. Crossing into Python for each
 * one costs ~1 us (see docs/performance.md), so the callbacks here only copy
 * the record into a growable batch; Python then takes the whole batch in one
 * call and walks it in a loop. A batch owns its memory: it stays valid until
 * the next plb_batch_reset() or plb_batch_free() -- except the record bytes
 * handed over by plb_batch_take_buf(), which the caller then owns.
 */
#ifndef PLB_BATCH_H
#define PLB_BATCH_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

/* One record of a batch: bytes at buf[start, start + len); tag is the ring
 * index (ring buffers) or the CPU (perf buffers); lost > 0 marks a perf
 * lost-samples notice (len 0) carrying that count. */
struct plb_batch {
	uint8_t *buf;        /* record bytes, each record 8-byte aligned */
	size_t used;
	size_t cap;          /* bytes buf can hold (0 after plb_batch_take_buf) */
	size_t next_cap;     /* the size of the buffer the next append allocates when buf is NULL */
	uint32_t *start;
	uint32_t *len;
	uint32_t *tag;
	uint64_t *lost;
	uint32_t n;          /* records in the batch */
	uint32_t ncap;       /* records the arrays can hold */
	int err;             /* first error met while collecting (-ENOMEM, -E2BIG), or 0 */
	size_t byte_limit;   /* ring buffers: stop draining once this many bytes are held (0: no limit) */
	int full;            /* set when byte_limit was reached; the drain stopped on purpose */
	int uniform;         /* set by plb_batch_read_rb: records 1..n-1 are like record 0 (see below) */
};

/* A uniform batch (uniform != 0, n >= 2): only record 0's start/len/tag/lost
 * are written; record i is len[0] bytes at start[0] + i * len[0] (start[0] is
 * 0, len[0] a non-zero multiple of 8: the records lie back to back), tagged
 * tag[0], lost 0. plb_batch_read_rb keeps a batch uniform while its records
 * allow it, so a drain of fixed-size events writes no offsets per record
 * (~20 bytes of the ~52 a 32-byte record cost). Anything that appends another
 * way first writes the implicit entries out (the arrays always have room for
 * them), so only a reader of the arrays needs to know: Python's Batch. */

/* What plb_ringbuf_collect returns to stop ring_buffer__consume_n once the
 * batch holds byte_limit bytes (the record that crossed it is in the batch). */
#define PLB_BATCH_FULL (-ENOSPC)

/* Context libbpf hands back to plb_ringbuf_collect: which batch, which ring. */
struct plb_rb_collect_ctx {
	struct plb_batch *batch;
	uint32_t ring;
};

struct plb_batch *plb_batch_new(uint32_t ncap, size_t cap);
void plb_batch_free(struct plb_batch *b);
void plb_batch_reset(struct plb_batch *b);

/* Hand the record bytes (buf, used bytes long) over to the caller, who frees
 * them with plb_buf_free(); they are no longer the batch's. The batch keeps
 * its records' offsets (start/len/tag/lost, n) until the next reset, and
 * allocates a fresh buffer (next_cap bytes: the size the taken one had) at
 * the first append after it, so memory the caller frees meanwhile can serve
 * it. When the records use at most half of the buffer, it is first shrunk
 * to them (glibc shrinks in place, no copy): a kept batch of one record
 * does not pin the whole buffer. NULL when the batch holds no bytes (used
 * 0; the batch is left as it was). */
uint8_t *plb_batch_take_buf(struct plb_batch *b);

/* Bytes that plb_batch_take_buf() handed out. NULL is a no-op. */
void plb_buf_free(void *p);
/* Shrink p (from plb_batch_take_buf) to size bytes in place
 * where the allocator can (glibc can: it splits the block, no copy). Returns
 * the pointer to use from now on: p itself when it cannot shrink. */
uint8_t *plb_buf_shrink(uint8_t *p, uint64_t size);

struct plb_rb_view;

/* Copy the committed records of one BPF ring buffer (a plb_ringbuf.h view),
 * from its consumer position on, into the batch, tagged ring: what
 * RingBuffer's drains do, in place of libbpf's ring_buffer__consume_n with
 * plb_ringbuf_collect. Stops at an empty ring or a busy head, once the batch
 * holds max records (from every ring: b->n), or after the record that takes
 * it to byte_limit bytes (b->full set, as plb_ringbuf_collect does).
 * Discarded records are skipped. A record that cannot be appended (out of
 * memory: b->err) stays in the ring. The consumer position is released once,
 * after the copies, past every record and discard taken (libbpf releases it
 * after each record). Returns the records taken from this ring, or -EBADMSG
 * for a corrupt head when none was taken (a corrupt head after records is
 * met again by the next call; plb_rb_peek says what corrupt means). */
int plb_batch_read_rb(struct plb_batch *b, struct plb_rb_view *v, uint32_t ring, uint32_t max);

/* ring_buffer_sample_fn: copy one ring-buffer record into the batch. */
int plb_ringbuf_collect(void *ctx, void *data, size_t size);
/* perf_buffer_sample_fn / perf_buffer_lost_fn: copy a sample / note lost samples. */
void plb_perfbuf_collect(void *ctx, int cpu, void *data, uint32_t size);
void plb_perfbuf_collect_lost(void *ctx, int cpu, unsigned long long cnt);

#endif
