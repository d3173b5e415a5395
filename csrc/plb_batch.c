/* plb_batch.c - the batch collector behind RingBuffer and PerfBuffer. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plb_batch.h"
#include "plb_ringbuf.h"
#include "plb_ringwalk.h"

#define PLB_ALIGN8(x) (((x) + 7) & ~(size_t)7)

/* Allocate a batch able to hold ncap records and cap bytes before growing. */
struct plb_batch *plb_batch_new(uint32_t ncap, size_t cap)
{
	struct plb_batch *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	if (ncap == 0)
		ncap = 64;
	if (cap < 64)
		cap = 64;
	if (cap > UINT32_MAX)
		cap = UINT32_MAX; /* offsets are 32-bit (plb_batch_reserve) */
	b->buf = malloc(cap);
	b->start = malloc(ncap * sizeof(*b->start));
	b->len = malloc(ncap * sizeof(*b->len));
	b->tag = malloc(ncap * sizeof(*b->tag));
	b->lost = malloc(ncap * sizeof(*b->lost));
	if (!b->buf || !b->start || !b->len || !b->tag || !b->lost) {
		plb_batch_free(b);
		return NULL;
	}
	b->cap = cap;
	b->next_cap = cap;
	b->ncap = ncap;
	return b;
}

/* Free a batch and everything it owns; NULL is ignored. */
void plb_batch_free(struct plb_batch *b)
{
	if (!b)
		return;
	free(b->buf);
	free(b->start);
	free(b->len);
	free(b->tag);
	free(b->lost);
	free(b);
}

/* Empty the batch, keeping its memory for the next drain. */
void plb_batch_reset(struct plb_batch *b)
{
	b->used = 0;
	b->n = 0;
	b->err = 0;
	b->full = 0;
	b->uniform = 0;
}

uint8_t *plb_batch_take_buf(struct plb_batch *b)
{
	uint8_t *buf = b->buf;

	if (!buf || !b->used)
		return NULL;
	if (b->used <= b->cap / 2)
		buf = plb_buf_shrink(buf, b->used);
	b->next_cap = b->cap;
	b->buf = NULL;
	b->cap = 0;
	return buf;
}

void plb_buf_free(void *p)
{
	free(p);
}

uint8_t *plb_buf_shrink(uint8_t *p, uint64_t size)
{
	uint8_t *smaller;

	if (!p || size > SIZE_MAX)
		return p;
	smaller = realloc(p, size ? (size_t)size : 1);
	/* A failed realloc leaves p as it was: still valid, merely larger. */
	return smaller ? smaller : p;
}

/* Grow by doubling; offsets are 32-bit, so a batch stays below 4 GiB: cap
 * never exceeds UINT32_MAX, which is what lets plb_batch_append's fast path
 * test only cap. */
static __attribute__((noinline)) int plb_batch_reserve(struct plb_batch *b, size_t bytes)
{
	size_t need = PLB_ALIGN8(b->used) + bytes;

	if (need > UINT32_MAX)
		return -E2BIG;
	if (need > b->cap) {
		/* After plb_batch_take_buf (buf NULL, cap 0): a fresh buffer of the taken one's size. */
		size_t cap = b->cap ? b->cap : b->next_cap;
		uint8_t *buf;

		while (cap < need)
			cap = cap > UINT32_MAX / 2 ? UINT32_MAX : cap * 2;
		buf = realloc(b->buf, cap);
		if (!buf)
			return -ENOMEM;
		b->buf = buf;
		b->cap = cap;
		b->next_cap = cap;
	}
	if (b->n == b->ncap) {
		uint32_t ncap = b->ncap * 2;
		uint32_t *start = realloc(b->start, ncap * sizeof(*start));
		uint32_t *len, *tag;
		uint64_t *lost;

		if (!start)
			return -ENOMEM;
		b->start = start;
		len = realloc(b->len, ncap * sizeof(*len));
		if (!len)
			return -ENOMEM;
		b->len = len;
		tag = realloc(b->tag, ncap * sizeof(*tag));
		if (!tag)
			return -ENOMEM;
		b->tag = tag;
		lost = realloc(b->lost, ncap * sizeof(*lost));
		if (!lost)
			return -ENOMEM;
		b->lost = lost;
		b->ncap = ncap;
	}
	return 0;
}

/* Write a uniform batch's implicit entries out (plb_batch.h): the batch is an
 * ordinary one after it. plb_batch_reserve kept the arrays able to hold every
 * record, so this cannot fail. */
static void plb_batch_spell_out(struct plb_batch *b)
{
	uint32_t i, len = b->len[0];

	for (i = 1; i < b->n; i++) {
		b->start[i] = b->start[0] + i * len;
		b->len[i] = len;
		b->tag[i] = b->tag[0];
		b->lost[i] = 0;
	}
	b->uniform = 0;
}

/* Append one record (data may be NULL when size is 0). Inline, with the growth
 * out of line: it runs once per record, and a record that fits (all but a few
 * per batch) needs only the two compares here (a call to plb_batch_reserve per
 * record made plb_batch_read_rb ~40% slower). */
static inline int plb_batch_append(struct plb_batch *b, const void *data, size_t size, uint32_t tag,
				   uint64_t lost)
{
	size_t at = PLB_ALIGN8(b->used);

	if (b->uniform)
		plb_batch_spell_out(b);
	if (at + size > b->cap || b->n == b->ncap) {
		int err = plb_batch_reserve(b, size);

		if (err) {
			if (!b->err)
				b->err = err;
			return err;
		}
		at = PLB_ALIGN8(b->used);
	}
	if (size)
		memcpy(b->buf + at, data, size);
	b->start[b->n] = (uint32_t)at;
	b->len[b->n] = (uint32_t)size;
	b->tag[b->n] = tag;
	b->lost[b->n] = lost;
	b->n++;
	b->used = at + size;
	return 0;
}

/* Whether a ring buffer drain stops after the record just appended: the batch
 * holds byte_limit bytes (full set). Large batches cost page faults on every
 * copy out (a fresh mapping per drain); stopping near byte_limit keeps each
 * batch cache-sized. */
static inline int plb_batch_reached_limit(struct plb_batch *b)
{
	if (!b->byte_limit || b->used < b->byte_limit)
		return 0;
	b->full = 1;
	return 1;
}

/* libbpf has already made the record visible to us (it acquire-loaded the
 * header); it advances consumer_pos after we return, so the copy must be made
 * here. A negative return stops ring_buffer__consume_n with this record
 * consumed, which only happens when memory runs out (recorded in b->err). */
int plb_ringbuf_collect(void *ctx, void *data, size_t size)
{
	struct plb_rb_collect_ctx *c = ctx;
	struct plb_batch *b = c->batch;
	int err = plb_batch_append(b, data, size, c->ring, 0);

	if (err)
		return err;
	return plb_batch_reached_limit(b) ? PLB_BATCH_FULL : 0;
}

/* Whether a batch of one record may turn uniform: record 0 at offset 0, a
 * non-zero multiple of 8 bytes long (so the next record lands right after it),
 * not a lost notice. */
static inline int plb_batch_can_be_uniform(const struct plb_batch *b)
{
	return b->n == 1 && b->start[0] == 0 && b->len[0] && !(b->len[0] & 7) && !b->lost[0];
}

/* plb_batch_read_rb's run of records like record 0 of a batch that is (or may
 * turn) uniform: data/next are the first one's, already stepped to. Copies
 * each record's bytes, with the batch's fields in locals: the compiler must
 * assume a memcpy into the buffer may change any field of *b, and would load
 * them all again after every copy. Stops before the first record that is not
 * like record 0 or cannot be read (*pos is then at it, for the caller to look
 * at again), at max records, or after the record that reaches byte_limit
 * (b->full). Returns 0, or -errno when the buffer could not grow (b->err; the
 * record stays in the ring). */
static int plb_batch_uniform_run(struct plb_batch *b, const struct plb_rb_view *v, uint64_t *pos,
				 uint64_t *prod, const void *data, uint64_t next, uint32_t max)
{
	uint32_t size = b->len[0], n = b->n, ncap = b->ncap, len;
	uint64_t step = plb_rb_expect_step(size);
	size_t used = b->used, cap = b->cap, limit = b->byte_limit ? b->byte_limit : SIZE_MAX;
	uint8_t *buf = b->buf;
	int err = 0;

	for (;;) {
		if (used + size > cap || n == ncap) {
			b->used = used;
			b->n = n;
			err = plb_batch_reserve(b, size);
			if (err) {
				if (!b->err)
					b->err = err;
				break;
			}
			buf = b->buf;
			cap = b->cap;
			ncap = b->ncap;
		}
		memcpy(buf + used, data, size);
		used += size;
		n++;
		*pos = next;
		if (used >= limit) {
			b->full = 1;
			break;
		}
		if (n >= max)
			break;
		data = plb_rb_expect(v, *pos, *prod, size, step);
		if (data)
			next = *pos + step;
		else if (plb_rb_next_record(v, pos, prod, &data, &len, &next, NULL) != PLB_RB_RECORD ||
			 len != size)
			break;
	}
	b->used = used;
	b->n = n;
	b->uniform = n > 1;
	return err;
}

int plb_batch_read_rb(struct plb_batch *b, struct plb_rb_view *v, uint32_t ring, uint32_t max)
{
	uint64_t start, pos, next, prod;
	uint32_t first = b->n, len;
	const void *data;
	int rc, err = 0;

	start = prod = pos = plb_rb_consumer_pos(v);
	while (b->n < max) {
		/* The acquire loads of producer_pos and of the header (plb_ringwalk.h)
		 * make the record's bytes visible before the copy below. */
		rc = plb_rb_next_record(v, &pos, &prod, &data, &len, &next, NULL);
		if (rc != PLB_RB_RECORD) {
			err = rc == PLB_RB_CORRUPT ? -EBADMSG : 0;
			break;
		}
		if (b->n && len == b->len[0] && ring == b->tag[0] && (b->uniform || plb_batch_can_be_uniform(b))) {
			/* Records like record 0, right after the last one: their bytes only. */
			rc = plb_batch_uniform_run(b, v, &pos, &prod, data, next, max);
			if (rc < 0 || b->full)
				break;
			continue; /* a record unlike record 0, or none: looked at again above */
		}
		if (plb_batch_append(b, data, len, ring, 0))
			break; /* b->err says why; the record stays in the ring */
		pos = next;
		if (plb_batch_reached_limit(b))
			break;
	}
	/* One release store, after every copy above: the producer may reuse the
	 * space below pos only once our reads of it are done. */
	if (pos != start)
		plb_rb_commit(v, pos);
	return err && b->n == first ? err : (int)(b->n - first);
}

/* perf samples arrive with the raw size the kernel wrote, padded to 8 bytes
 * together with its u32 size field, so up to 7 trailing bytes are padding. */
void plb_perfbuf_collect(void *ctx, int cpu, void *data, uint32_t size)
{
	plb_batch_append(ctx, data, size, (uint32_t)cpu, 0);
}

/* PERF_RECORD_LOST: the kernel dropped cnt samples on this CPU's ring. */
void plb_perfbuf_collect_lost(void *ctx, int cpu, unsigned long long cnt)
{
	plb_batch_append(ctx, NULL, 0, (uint32_t)cpu, cnt ? cnt : 1);
}
