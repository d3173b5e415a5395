/* fuzz_queue.c - libFuzzer target: the bounded record queue (plb_queue_*),
 * one thread, any sequence of create / push / pop_batch / pop_dropped_batch /
 * close / stats.
 *
 * The input chooses the bounds (records, arena bytes, side ring for drops)
 * and the operations: pushes of any length (empty, up to past byte_cap),
 * batch pops with any max and out_cap, close at any point.
 *
 * What is checked, besides ASan/UBSan on every access (all buffers are
 * allocated at their exact size):
 *   - records come out of pop_batch in push order with their bytes, and
 *     dropped records come out of pop_dropped_batch in drop order;
 *   - a batch is the longest prefix that fits out_cap, laid out like
 *     plb_rb_read (8-aligned starts, out_used the end of the last), max 0
 *     takes nothing, -EMSGSIZE reports the head's length and keeps it;
 *   - push never refuses what must fit (an open empty queue takes any record
 *     up to byte_cap; an empty side ring takes any drop up to its bytes) and
 *     never accepts what cannot (closed, count full, longer than byte_cap);
 *   - -EPIPE exactly when closed and empty;
 *   - the stats: pushed == popped + dropped + current_size, dropped ==
 *     dropped_popped + dropped_pending + dropped_unhandled, current_size and
 *     current_bytes and dropped_pending as in the model, high_water, one
 *     queue_full_count per overflow episode, the bounds and closed as given.
 */
#include "plb_queue.c"
#include "fuzz_common.h"

#define MAX_MODEL 4096

/* A FIFO of the records the model expects, by pattern seed and length. */
struct fifo {
	uint32_t seq[MAX_MODEL], len[MAX_MODEL];
	unsigned head, tail;
	uint64_t bytes;
};

struct model {
	uint32_t max_pending, drop_cap;
	size_t byte_cap, drop_byte_cap;
	int closed, was_full;
	uint64_t pushed, popped, dropped, full_count, high_water;
	uint64_t dropped_queued, dropped_popped, dropped_unhandled;
	uint32_t seq;
	struct fifo main, side;
};

static struct model M;
static uint8_t rec[1 << 13];

static unsigned fifo_count(const struct fifo *q)
{
	return q->tail - q->head;
}

static void fifo_push(struct fifo *q, uint32_t seq, uint32_t len)
{
	CHECK(fifo_count(q) < MAX_MODEL);
	q->seq[q->tail % MAX_MODEL] = seq;
	q->len[q->tail % MAX_MODEL] = len;
	q->tail++;
	q->bytes += len;
}

static void check_stats(struct plb_queue *q)
{
	struct plb_queue_stats st;

	plb_queue_stats(q, &st);
	CHECK(st.pushed == st.popped + st.dropped + st.current_size);
	CHECK(st.dropped == st.dropped_popped + st.dropped_pending + st.dropped_unhandled);
	CHECK(st.pushed == M.pushed && st.popped == M.popped && st.dropped == M.dropped);
	CHECK(st.current_size == fifo_count(&M.main) && st.current_bytes == M.main.bytes);
	CHECK(st.dropped_pending == fifo_count(&M.side));
	CHECK(st.dropped_queued == M.dropped_queued && st.dropped_popped == M.dropped_popped &&
	      st.dropped_unhandled == M.dropped_unhandled);
	CHECK(st.queue_full_count == M.full_count && st.queue_full_count <= st.dropped);
	CHECK(st.high_water == M.high_water && st.high_water <= M.max_pending);
	CHECK(st.current_size <= M.max_pending && st.current_bytes <= M.byte_cap);
	CHECK(st.max_pending == M.max_pending && st.byte_cap == M.byte_cap);
	CHECK(st.closed == M.closed);
}

static void push(struct plb_queue *q, struct fz *f)
{
	uint8_t b = fz_u8(f);
	uint32_t len = (b & 0x80) ? fz_u16(f) % (uint32_t)(M.byte_cap + 17) : b & 0x3f;
	uint32_t seq = M.seq++;
	uint64_t side_before = M.dropped_queued;
	struct plb_queue_stats st;
	int rc;

	if (len > sizeof(rec))
		len = sizeof(rec);
	for (uint32_t i = 0; i < len; i++)
		rec[i] = pat(seq, i);
	/* An exact copy: the queue must not read past len. */
	{
		uint8_t *p = malloc(len ? len : 1);

		CHECK(p);
		memcpy(p, rec, len);
		rc = plb_queue_push(q, p, len);
		free(p);
	}
	CHECK(rc == 0 || rc == 1);
	M.pushed++;
	if (M.closed || len > M.byte_cap || fifo_count(&M.main) == M.max_pending)
		CHECK(rc == 0);
	if (!M.closed && len <= M.byte_cap && fifo_count(&M.main) == 0)
		CHECK(rc == 1);
	if (rc == 1) {
		fifo_push(&M.main, seq, len);
		if (fifo_count(&M.main) > M.high_water)
			M.high_water = fifo_count(&M.main);
		M.was_full = 0;
		return;
	}
	M.dropped++;
	if (M.closed) {
		M.dropped_unhandled++;
		return;
	}
	if (len <= M.byte_cap && !M.was_full) {
		M.full_count++;
		M.was_full = 1;
	}
	/* Kept in the side ring or only counted: the stats say which; a side
	 * ring that is empty must take anything up to its bytes. */
	plb_queue_stats(q, &st);
	if (st.dropped_queued != side_before) {
		CHECK(st.dropped_queued == side_before + 1 && M.drop_cap);
		CHECK(fifo_count(&M.side) < M.drop_cap);
		fifo_push(&M.side, seq, len);
		M.dropped_queued++;
	} else {
		CHECK(!M.drop_cap || fifo_count(&M.side) || len > M.drop_byte_cap);
		M.dropped_unhandled++;
	}
}

/* pop_batch (dropped == 0) or pop_dropped_batch, checked against the model. */
static void pop(struct plb_queue *q, struct fz *f, int dropped, int ample)
{
	struct fifo *mf = dropped ? &M.side : &M.main;
	/* Room for any record: the side ring holds ones too big for the queue. */
	size_t big = 2 * (M.byte_cap > M.drop_byte_cap ? M.byte_cap : M.drop_byte_cap) + 64;
	uint8_t b = ample ? 0x18 : fz_u8(f);
	uint32_t max = ample ? 64 : b & 7;
	size_t cap, used = 777;
	uint8_t *out;
	uint32_t *starts, *lens;
	uint64_t off = 0, end = 0;
	unsigned n = 0, avail = fifo_count(mf);
	int rc, timeout = 0;

	switch ((b >> 3) & 3) {
	case 0:
		cap = 0;
		break;
	case 1:
		cap = fz_u8(f);
		break;
	case 2:
		cap = fz_u16(f) % big;
		break;
	default:
		cap = big;
		break;
	}
	/* Waiting would only stall the fuzzer: wait only when a record is
	 * there or the queue is closed (both return at once). */
	if (avail || M.closed)
		timeout = (b & 0x20) ? -1 : (b & 0x40) ? 5 : 0;
	out = cap ? malloc(cap) : NULL;
	starts = max ? malloc(max * sizeof(*starts)) : NULL;
	lens = max ? malloc(max * sizeof(*lens)) : NULL;
	CHECK((!cap || out) && (!max || (starts && lens)));

	rc = dropped ? plb_queue_pop_dropped_batch(q, out, cap, starts, lens, max, &used)
		     : plb_queue_pop_batch(q, out, cap, starts, lens, max, timeout, &used);

	/* The longest prefix that fits, each at the next multiple of 8. */
	while (n < max && n < avail) {
		uint32_t len = mf->len[(mf->head + n) % MAX_MODEL];

		if (off + len > cap)
			break;
		end = off + len;
		off = (end + 7) & ~(uint64_t)7;
		n++;
	}
	if (!avail) {
		CHECK(rc == (!dropped && M.closed ? -EPIPE : 0) && used == 0);
	} else if (max == 0) {
		CHECK(rc == 0 && used == 0);
	} else if (n == 0) {
		CHECK(rc == -EMSGSIZE && used == mf->len[mf->head % MAX_MODEL]);
	} else {
		CHECK(rc == (int)n && used == end);
		for (unsigned i = 0; i < n; i++) {
			uint32_t seq = mf->seq[(mf->head + i) % MAX_MODEL];
			uint32_t len = mf->len[(mf->head + i) % MAX_MODEL];

			CHECK(starts[i] % 8 == 0 && lens[i] == len);
			CHECK(i == 0 ? starts[0] == 0 : starts[i] >= starts[i - 1] + lens[i - 1]);
			for (uint32_t j = 0; j < len; j++)
				CHECK(out[starts[i] + j] == pat(seq, j));
		}
		for (unsigned i = 0; i < n; i++)
			mf->bytes -= mf->len[(mf->head + i) % MAX_MODEL];
		mf->head += n;
		if (dropped)
			M.dropped_popped += n;
		else
			M.popped += n;
	}
	free(out);
	free(starts);
	free(lens);
}

/* Bounds and arguments that must be refused. */
static void invalid(struct plb_queue *q, struct fz *f)
{
	uint8_t b = fz_u8(f), out[8];
	uint32_t s[1], l[1];
	size_t used;

	errno = 0;
	switch (b % 4) {
	case 0:
		CHECK(!plb_queue_create(0, 16, 0, 0) && errno == EINVAL);
		break;
	case 1:
		CHECK(!plb_queue_create(4, 0, 0, 0) && errno == EINVAL);
		break;
	case 2:
		CHECK(!plb_queue_create((1u << 31) + 1, 16, 0, 0) && errno == EINVAL);
		break;
	default:
		CHECK(!plb_queue_create(4, 16, 2, 0) && errno == EINVAL);
		break;
	}
	CHECK(plb_queue_pop_batch(NULL, out, 8, s, l, 1, 0, &used) == -EINVAL);
	CHECK(plb_queue_pop_batch(q, out, 8, s, l, 1, 0, NULL) == -EINVAL);
	CHECK(plb_queue_pop_batch(q, out, 8, NULL, l, 1, 0, &used) == -EINVAL);
	CHECK(plb_queue_pop_batch(q, NULL, 8, s, l, 1, 0, &used) == -EINVAL);
	CHECK(plb_queue_pop_dropped_batch(q, out, 8, s, NULL, 1, &used) == -EINVAL);
	CHECK(plb_queue_pop_dropped_batch(NULL, out, 8, s, l, 1, &used) == -EINVAL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz f = { data, size };
	uint8_t b = fz_u8(&f);
	struct plb_queue *q;
	unsigned nops = 0;

	memset(&M, 0, sizeof(M));
	M.max_pending = 1 + fz_u8(&f) % ((b & 1) ? 256 : 8);
	M.byte_cap = 1 + fz_u16(&f) % ((b & 2) ? 4096 : 128);
	M.drop_cap = (b & 4) ? fz_u8(&f) % 16 : 0;
	M.drop_byte_cap = M.drop_cap ? 1 + fz_u16(&f) % 1024 : 0;
	q = plb_queue_create(M.max_pending, M.byte_cap, M.drop_cap, M.drop_byte_cap);
	CHECK(q);

	while (fz_more(&f) && nops++ < 512) {
		switch (fz_u8(&f) % 8) {
		case 0:
		case 1:
		case 2:
			push(q, &f);
			break;
		case 3:
		case 4:
			pop(q, &f, 0, 0);
			break;
		case 5:
			pop(q, &f, 1, 0);
			break;
		case 6:
			if (fz_u8(&f) % 4 == 0) {
				plb_queue_close(q);
				M.closed = 1;
			} else {
				invalid(q, &f);
			}
			break;
		default:
			break;
		}
		check_stats(q);
	}
	/* Close and drain both: everything pushed is accounted for. */
	plb_queue_close(q);
	M.closed = 1;
	while (fifo_count(&M.main))
		pop(q, &f, 0, 1);
	while (fifo_count(&M.side))
		pop(q, &f, 1, 1);
	check_stats(q);
	plb_queue_destroy(q);
	plb_queue_destroy(NULL);
	return 0;
}
