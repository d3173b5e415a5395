/* plb_batch.h - collect ring-buffer and perf-buffer records in C, hand them to Python in batches.
 *
 * libbpf calls a sample callback once per record. Crossing into Python for each
 * one costs ~1 us (see docs/benchmarks.md), so the callbacks here only copy
 * the record into a growable batch; Python then takes the whole batch in one
 * call and walks it in a loop. A batch owns its memory: it stays valid until
 * the next plb_batch_reset() or plb_batch_free().
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
	size_t cap;
	uint32_t *start;
	uint32_t *len;
	uint32_t *tag;
	uint64_t *lost;
	uint32_t n;          /* records in the batch */
	uint32_t ncap;       /* records the arrays can hold */
	int err;             /* first error met while collecting (-ENOMEM, -E2BIG), or 0 */
	size_t byte_limit;   /* ring buffers: stop draining once this many bytes are held (0: no limit) */
	int full;            /* set when byte_limit was reached; the drain stopped on purpose */
};

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

/* ring_buffer_sample_fn: copy one ring-buffer record into the batch. */
int plb_ringbuf_collect(void *ctx, void *data, size_t size);
/* perf_buffer_sample_fn / perf_buffer_lost_fn: copy a sample / note lost samples. */
void plb_perfbuf_collect(void *ctx, int cpu, void *data, uint32_t size);
void plb_perfbuf_collect_lost(void *ctx, int cpu, unsigned long long cnt);

#endif
