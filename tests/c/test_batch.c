/* test_batch.c - the batch collector and the hand-over of its record bytes
 * (plb_batch_take_buf, plb_buf_*): what was taken stays intact and is the
 * caller's to free (ASan reports a leak, a double free or a use after free),
 * the batch goes on collecting into a fresh buffer. Then RingBuffer's drain
 * (plb_batch_read_rb) over a kernel-like synthetic ring: uniform runs, their
 * spelling out when a record differs, growth mid-run, byte limits. */
#define _GNU_SOURCE /* memfd_create (synth.h) */
#include "plb_batch.c"
#include "plb_ringbuf.c"

#include <string.h>

#include "check.h"
#include "synth.h"

static uint8_t rec[8192];

static void collect(struct plb_batch *b, uint32_t n, uint32_t size, uint8_t first)
{
	struct plb_rb_collect_ctx ctx = { b, 0 };

	for (uint32_t i = 0; i < n; i++) {
		memset(rec, (uint8_t)(first + i), size);
		CHECK(plb_ringbuf_collect(&ctx, rec, size) == 0);
	}
}

/* Record i of the batch (as offsets say) is size bytes of first + i. */
static void check_records(const uint8_t *buf, const struct plb_batch *b, uint32_t size, uint8_t first)
{
	for (uint32_t i = 0; i < b->n; i++) {
		CHECK(b->len[i] == size && b->start[i] % 8 == 0);
		for (uint32_t j = 0; j < size; j++)
			CHECK(buf[b->start[i] + j] == (uint8_t)(first + i));
	}
}

/* Commit one record of size bytes, each byte seq's low byte. */
static void put(struct synth *s, uint32_t size, uint32_t seq)
{
	uint8_t *p = synth_reserve(s, size);

	CHECK(p);
	memset(p, (uint8_t)seq, size);
	synth_commit(s, p, 0);
}

/* Record i of the batch as Python's Batch reads it: offsets written, or implicit in a uniform batch. */
static void record_of(const struct plb_batch *b, uint32_t i, uint32_t *start, uint32_t *len)
{
	if (b->uniform && i > 0) {
		*start = b->start[0] + i * b->len[0];
		*len = b->len[0];
	} else {
		*start = b->start[i];
		*len = b->len[i];
	}
}

/* Drain everything in batches of at most max records and byte_limit bytes; every record read back
 * in order (sizes[i] bytes of i). */
static void drain_all(const uint32_t *sizes, uint32_t n, uint32_t max, size_t byte_limit)
{
	struct synth s;
	struct plb_batch *b = plb_batch_new(2, 64);   /* tiny: grows mid-run */
	uint32_t got = 0;

	synth_init(&s, 1 << 16);
	synth_set_pos(&s, (1 << 16) - 64);           /* records across the wrap too */
	for (uint32_t i = 0; i < n; i++)
		put(&s, sizes[i], i);
	b->byte_limit = byte_limit;
	while (got < n) {
		uint32_t start, len;

		plb_batch_reset(b);
		CHECK(plb_batch_read_rb(b, &s.v, 0, max) == (int)b->n && b->n > 0 && b->n <= max);
		for (uint32_t i = 0; i < b->n; i++, got++) {
			record_of(b, i, &start, &len);
			CHECK(len == sizes[got] && start % 8 == 0 && start + len <= b->used);
			for (uint32_t j = 0; j < len; j++)
				CHECK(b->buf[start + j] == (uint8_t)got);
		}
		/* Anything appended another way writes a uniform batch's entries out first. */
		if (b->uniform) {
			uint32_t k = b->n;

			plb_perfbuf_collect(b, 0, rec, 8);
			CHECK(!b->uniform && b->n == k + 1);
			for (uint32_t i = 1; i < k; i++)
				CHECK(b->start[i] == i * b->len[0] && b->len[i] == b->len[0] && b->lost[i] == 0);
		}
	}
	CHECK(*s.cons == *s.prod);
	plb_batch_reset(b);
	CHECK(plb_batch_read_rb(b, &s.v, 0, max) == 0);
	plb_batch_free(b);
	synth_free(&s);
}

static void test_read_rb(void)
{
	static uint32_t sizes[3000];
	uint32_t n = 0;

	for (uint32_t i = 0; i < 700; i++)   /* a uniform run long enough to grow the buffer and arrays */
		sizes[n++] = 32;
	sizes[n++] = 40;                       /* breaks it */
	for (uint32_t i = 0; i < 300; i++)
		sizes[n++] = 32;
	for (uint32_t i = 0; i < 200; i++)   /* sizes that are not multiples of 8: never uniform */
		sizes[n++] = 5 + i % 3;
	for (uint32_t i = 0; i < 300; i++)
		sizes[n++] = i % 50 == 0 ? 0 : 16;
	drain_all(sizes, n, 1u << 20, 0);
	drain_all(sizes, n, 7, 0);
	drain_all(sizes, n, 1u << 20, 1000);  /* byte limit mid-run */
	drain_all(sizes, n, 1, 0);
}

int main(void)
{
	struct plb_batch *b = plb_batch_new(4, 64);
	uint8_t *taken[8];
	size_t cap;

	CHECK(b);
	CHECK(plb_batch_take_buf(b) == NULL);   /* nothing collected: nothing to take */
	CHECK(b->buf && b->cap == 64);

	/* Grow past the first buffer, take it: the bytes and offsets are intact, the batch has no buffer. */
	collect(b, 50, 100, 1);
	cap = b->cap;
	CHECK(cap >= b->used && b->used > cap / 2);
	taken[0] = plb_batch_take_buf(b);
	CHECK(taken[0] && !b->buf && b->cap == 0 && b->next_cap == cap && b->n == 50);
	check_records(taken[0], b, 100, 1);

	/* The next drain allocates afresh, the size of the taken buffer; the taken bytes are untouched. */
	plb_batch_reset(b);
	collect(b, 3, 24, 200);
	CHECK(b->buf && b->buf != taken[0] && b->cap == cap);
	check_records(b->buf, b, 24, 200);
	/* Mostly empty: shrunk to the records before the hand-over (still the same bytes). */
	taken[1] = plb_batch_take_buf(b);
	CHECK(taken[1] && b->next_cap == cap);
	check_records(taken[1], b, 24, 200);

	/* Take after every drain, with records of every size up to several KiB. */
	for (int k = 2; k < 8; k++) {
		uint32_t size = (uint32_t)(1u << (k + 6)) + (uint32_t)k;   /* 130 .. 8199 bytes */

		plb_batch_reset(b);
		collect(b, (uint32_t)k, size > sizeof(rec) ? sizeof(rec) : size, (uint8_t)k);
		taken[k] = plb_batch_take_buf(b);
		CHECK(taken[k]);
		check_records(taken[k], b, size > sizeof(rec) ? sizeof(rec) : size, (uint8_t)k);
	}
	/* Lost-only batches hold no bytes: nothing to take, the batch keeps going. */
	plb_batch_reset(b);
	plb_perfbuf_collect_lost(b, 1, 5);
	CHECK(b->n == 1 && b->used == 0 && plb_batch_take_buf(b) == NULL);
	for (int k = 0; k < 8; k++)
		plb_buf_free(taken[k]);
	plb_batch_free(b);

	/* plb_buf_shrink: shrinking keeps the prefix, 0 bytes is valid. */
	{
		uint8_t *p = malloc(1 << 20), *q;

		CHECK(p);
		memset(p, 0x5a, 1 << 20);
		q = plb_buf_shrink(p, 100);
		CHECK(q);
		for (int i = 0; i < 100; i++)
			CHECK(q[i] == 0x5a);
		plb_buf_free(q);
		p = malloc(1);
		CHECK(p);
		plb_buf_free(plb_buf_shrink(p, 0));
		plb_buf_free(NULL);
		CHECK(plb_buf_shrink(NULL, 10) == NULL);
	}
	test_read_rb();
	puts("test_batch: ok");
	return 0;
}
