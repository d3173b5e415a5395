/* test_merge.c - the ordered merge core over synthetic perf rings and BPF ring
 * buffers in ordinary memory, with an injected clock: order and ties, the
 * window for idle rings, late events (deliver/drop), in-ring inversions, lost
 * records, malformed records, the pressure valve, wrap-around at every
 * position, output limits, and threaded producers (release stores) whose
 * output must be a stable sort of the input except where flagged late.
 * Every test runs through plb_merge_drain and again through plb_merge_consume;
 * test_consume covers what only a callback has (payloads in place, stopping).
 * Unity build: includes the code under test. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create, for synth.h */
#endif
#include "../../csrc/plb_perfring.c"
#include "../../csrc/plb_ringbuf.c"
#include "../../csrc/plb_merge.c"
#include "../../csrc/plb_merge_runs.c"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "synth.h"

/* ---- events: [ts_off bytes of 0x5A][u64 ts][u32 seq][u32 ring][extra] ---- */

static uint32_t ev_make(uint8_t *p, uint32_t ts_off, uint64_t ts, uint32_t seq,
			uint32_t ring, uint32_t extra)
{
	uint32_t i;

	memset(p, 0x5A, ts_off);
	memcpy(p + ts_off, &ts, 8);
	memcpy(p + ts_off + 8, &seq, 4);
	memcpy(p + ts_off + 12, &ring, 4);
	for (i = 0; i < extra; i++)
		p[ts_off + 16 + i] = (uint8_t)(seq + i);
	return ts_off + 16 + extra;
}

static int put_ev(struct fake_ring *f, uint64_t ts, uint32_t seq, uint32_t ring)
{
	uint8_t p[64];
	uint32_t len = ev_make(p, 0, ts, seq, ring, 0);
	int ok = fr_sample(f, 0, p, len);

	fr_publish(f);
	return ok;
}

/* ---- a synthetic BPF ring buffer (data written twice: the double map) ---- */

struct fake_rb {
	uint64_t *cons, *prod;
	uint8_t *data; /* 2 * size */
	uint64_t size;
	uint64_t head;
	struct plb_rb_view view;
};

static void rb_init(struct fake_rb *r, uint64_t size, uint64_t start)
{
	memset(r, 0, sizeof(*r));
	r->cons = calloc(1, 64);
	r->prod = calloc(1, 64);
	r->data = calloc(2, size);
	CHECK(r->cons && r->prod && r->data);
	r->size = size;
	*r->cons = *r->prod = r->head = start;
	r->view.consumer_pos = r->cons;
	r->view.producer_pos = r->prod;
	r->view.data = r->data;
	r->view.mask = size - 1;
}

static void rb_free(struct fake_rb *r)
{
	free(r->cons);
	free(r->prod);
	free(r->data);
}

static void rb_put(struct fake_rb *r, uint64_t pos, const void *src, uint64_t len)
{
	uint64_t i;

	for (i = 0; i < len; i++) {
		uint64_t o = (pos + i) & (r->size - 1);

		r->data[o] = r->data[o + r->size] = ((const uint8_t *)src)[i];
	}
}

static void rb_set_len(struct fake_rb *r, uint64_t pos, uint32_t hdr_len)
{
	uint64_t o = pos & (r->size - 1);

	/* Release, like the kernel's xchg in commit: the payload first. */
	__atomic_store_n((uint32_t *)(void *)(r->data + o), hdr_len, __ATOMIC_RELEASE);
	__atomic_store_n((uint32_t *)(void *)(r->data + o + r->size), hdr_len, __ATOMIC_RELEASE);
}

/* Reserve (BUSY header, release producer_pos), write, and commit unless
 * busy; returns the record's position or UINT64_MAX when full. */
static uint64_t rb_write(struct fake_rb *r, const void *p, uint32_t len, int busy,
			 int discard)
{
	uint64_t pos = r->head, rec = (len + 8 + 7) & ~7ull;
	uint32_t hdr[2] = { len | PLB_RB_BUSY_BIT, 0 };

	if (r->size - (r->head - __atomic_load_n(r->cons, __ATOMIC_ACQUIRE)) < rec)
		return UINT64_MAX;
	rb_put(r, pos, hdr, 8);
	r->head += rec;
	__atomic_store_n(r->prod, r->head, __ATOMIC_RELEASE);
	rb_put(r, pos + 8, p, len);
	if (!busy)
		rb_set_len(r, pos, len | (discard ? PLB_RB_DISCARD_BIT : 0));
	return pos;
}

/* ---- the merge under test ---- */

struct fclock {
	uint64_t now;
};

static uint64_t fclock_fn(void *ctx)
{
	return ((struct fclock *)ctx)->now;
}

#define COL_MAX 4096

struct col {
	uint8_t *buf;
	uint32_t ring[COL_MAX];
	uint64_t ts[COL_MAX];
	uint32_t flags[COL_MAX];
	uint32_t start[COL_MAX];
	uint32_t len[COL_MAX];
	struct plb_merge_out out;
	int n;
};

/* Every test runs twice: draining into arrays (plb_merge_drain), then with
 * the entries handed to a callback (plb_merge_consume) that copies them into
 * the same arrays. The callback has no byte limit: it writes into COL_FN_BUF
 * bytes whatever buf_size the test asked for. */
static int g_consume;
#define COL_FN_BUF (1u << 20)

static struct col *col_new(uint64_t buf_size)
{
	struct col *c = calloc(1, sizeof(*c));

	CHECK(c);
	c->buf = malloc(buf_size > COL_FN_BUF ? buf_size : COL_FN_BUF);
	CHECK(c->buf);
	c->out.buf = c->buf;
	c->out.buf_size = buf_size;
	c->out.ring = c->ring;
	c->out.ts = c->ts;
	c->out.flags = c->flags;
	c->out.start = c->start;
	c->out.len = c->len;
	return c;
}

static void col_free(struct col *c)
{
	free(c->buf);
	free(c);
}

/* plb_merge_consume's callback: the entry, as plb_merge_drain would write it. */
static int col_fn(void *ctx, uint32_t ring, uint64_t ts, uint32_t flags, const void *data,
		  uint32_t len)
{
	struct col *c = ctx;
	uint64_t at = (c->out.used + 7) & ~7ull;

	CHECK(c->n < COL_MAX);
	if (flags & PLB_MERGE_F_LOST) {
		CHECK(data == NULL && len == 0);
		at = 0;
	} else {
		CHECK(data != NULL && at + len <= COL_FN_BUF);
		memcpy(c->buf + at, data, len);
		c->out.used = at + len;
	}
	c->ring[c->n] = ring;
	c->ts[c->n] = ts;
	c->flags[c->n] = flags;
	c->start[c->n] = (uint32_t)at;
	c->len[c->n] = len;
	c->n++;
	return 0;
}

static int drain(struct plb_merge *m, struct col *c, uint32_t max, uint32_t flags)
{
	int i;

	if (g_consume) {
		int n;

		c->n = 0;
		c->out.used = 0;
		n = plb_merge_consume(m, col_fn, c, max, flags);
		CHECK(n < 0 ? c->n == 0 : n == c->n);
		c->n = n;
		c->out.deadline_ns = plb_merge_next_deadline(m);
	} else {
		c->n = plb_merge_drain(m, &c->out, max, flags);
	}
	for (i = 0; i < c->n; i++) {
		CHECK(c->start[i] % 8 == 0);
		CHECK((uint64_t)c->start[i] + c->len[i] <= c->out.used);
	}
	return c->n;
}

static uint32_t col_seq(const struct col *c, int i, uint32_t ts_off)
{
	uint32_t seq;
	uint64_t ts;

	CHECK(c->len[i] >= ts_off + 16);
	memcpy(&ts, c->buf + c->start[i] + ts_off, 8);
	CHECK(ts == c->ts[i]);
	memcpy(&seq, c->buf + c->start[i] + ts_off + 8, 4);
	return seq;
}

static struct plb_merge_config cfg_offset(struct fclock *clk, uint64_t window)
{
	struct plb_merge_config cfg;

	memset(&cfg, 0, sizeof(cfg));
	cfg.ts_mode = PLB_TS_OFFSET;
	cfg.ts_offset = 0;
	cfg.window_ns = window;
	cfg.clock = fclock_fn;
	cfg.clock_ctx = clk;
	return cfg;
}

static struct plb_merge *merge_perf(const struct plb_merge_config *cfg,
				    struct fake_ring *rings, uint32_t n)
{
	struct plb_merge_source src[16];
	struct plb_merge *m;
	uint32_t i;

	CHECK(n <= 16);
	memset(src, 0, sizeof(src));
	for (i = 0; i < n; i++) {
		src[i].kind = PLB_SRC_PERF;
		src[i].page = rings[i].page;
		src[i].data = rings[i].data;
		src[i].data_size = rings[i].size;
	}
	m = plb_merge_new(cfg, src, n);
	CHECK(m);
	return m;
}

static void expect(const struct col *c, int i, uint32_t ring, uint64_t ts, uint32_t flags)
{
	if (c->ring[i] != ring || c->ts[i] != ts || c->flags[i] != flags)
		fprintf(stderr, "entry %d: ring %u ts %llu flags %u; want %u %llu %u\n",
			i, c->ring[i], (unsigned long long)c->ts[i], c->flags[i], ring,
			(unsigned long long)ts, flags);
	CHECK(c->ring[i] == ring && c->ts[i] == ts && c->flags[i] == flags);
}

/* Free a test's merge, then its n perf rings and its collector. */
static void teardown(struct plb_merge *m, struct fake_ring *r, uint32_t n, struct col *c)
{
	plb_merge_free(m); /* before the rings it points into */
	while (n--)
		fr_free(&r[n]);
	col_free(c);
}

/* ---- tests ---- */

static void test_config(void)
{
	struct fake_ring f;
	struct fake_rb rb;
	struct fclock clk = { 0 };
	struct plb_merge_config cfg = cfg_offset(&clk, 0);
	struct plb_merge_source src;
	struct plb_merge *m;

	fr_init(&f, 256, 0);
	rb_init(&rb, 256, 0);
	memset(&src, 0, sizeof(src));
	src.kind = PLB_SRC_PERF;
	src.page = f.page;
	src.data = f.data;
	src.data_size = 256;

	CHECK(!plb_merge_new(&cfg, &src, 0) && errno == EINVAL);
	CHECK(!plb_merge_new(NULL, &src, 1) && errno == EINVAL);
	cfg.ts_mode = 7;
	CHECK(!plb_merge_new(&cfg, &src, 1) && errno == EINVAL);
	cfg.ts_mode = PLB_TS_KERNEL; /* without PERF_SAMPLE_TIME */
	CHECK(!plb_merge_new(&cfg, &src, 1) && errno == EINVAL);
	cfg.sample_type = PERF_SAMPLE_TIME | PERF_SAMPLE_RAW | PERF_SAMPLE_CALLCHAIN;
	CHECK(!plb_merge_new(&cfg, &src, 1) && errno == EINVAL);
	cfg.sample_type = PERF_SAMPLE_TIME; /* no RAW */
	CHECK(!plb_merge_new(&cfg, &src, 1) && errno == EINVAL);
	cfg.sample_type = PERF_SAMPLE_TIME | PERF_SAMPLE_RAW;
	m = plb_merge_new(&cfg, &src, 1);
	CHECK(m);
	plb_merge_free(m);
	cfg = cfg_offset(&clk, 0);
	cfg.late_policy = 9;
	CHECK(!plb_merge_new(&cfg, &src, 1) && errno == EINVAL);
	cfg = cfg_offset(&clk, 0);
	src.data_size = 384;
	CHECK(!plb_merge_new(&cfg, &src, 1) && errno == EINVAL);
	src.data_size = 256;
	src.kind = 0;
	CHECK(!plb_merge_new(&cfg, &src, 1) && errno == EINVAL);
	/* Ring buffers carry no kernel time. */
	src.kind = PLB_SRC_RINGBUF;
	src.rb = &rb.view;
	m = plb_merge_new(&cfg, &src, 1);
	CHECK(m);
	plb_merge_free(m);
	cfg.ts_mode = PLB_TS_KERNEL;
	cfg.sample_type = PERF_SAMPLE_TIME | PERF_SAMPLE_RAW;
	CHECK(!plb_merge_new(&cfg, &src, 1) && errno == EINVAL);
	src.rb = NULL;
	cfg = cfg_offset(&clk, 0);
	CHECK(!plb_merge_new(&cfg, &src, 1) && errno == EINVAL);
	plb_merge_free(NULL);

	/* plb_merge_source_perf reads data_offset/data_size from the page. */
	{
		uint8_t *area = aligned_alloc(4096, 8192);
		struct perf_event_mmap_page *pg = (void *)area;

		CHECK(area);
		memset(area, 0, 4096);
		pg->data_offset = 4096;
		pg->data_size = 512;
		CHECK(plb_merge_source_perf(&src, area, 512) == 0);
		CHECK(src.kind == PLB_SRC_PERF && src.page == pg &&
		      src.data == area + 4096 && src.data_size == 512);
		pg->data_size = 0; /* old kernels: the mapping's size */
		CHECK(plb_merge_source_perf(&src, area, 256) == 0 && src.data_size == 256);
		pg->data_size = 300;
		CHECK(plb_merge_source_perf(&src, area, 512) == -EINVAL);
		free(area);
	}
	rb_free(&rb);
	fr_free(&f);
}

static void test_basic_order(void)
{
	struct fake_ring r[3];
	struct fclock clk = { 1000000 };
	struct plb_merge_config cfg = cfg_offset(&clk, 0);
	struct plb_merge *m;
	struct plb_merge_stats st;
	struct col *c = col_new(65536);
	static const uint64_t want_ts[] = { 10, 20, 30, 40, 50, 60, 70 };
	static const uint32_t want_ring[] = { 0, 1, 2, 0, 1, 2, 0 };
	uint64_t backlog[3];
	int i;

	for (i = 0; i < 3; i++)
		fr_init(&r[i], 1024, (uint64_t)i * 1000);
	m = merge_perf(&cfg, r, 3);
	/* Written in an order unrelated to time. */
	put_ev(&r[2], 30, 0, 2);
	put_ev(&r[0], 10, 0, 0);
	put_ev(&r[0], 40, 1, 0);
	put_ev(&r[1], 20, 0, 1);
	put_ev(&r[2], 60, 1, 2);
	put_ev(&r[1], 50, 1, 1);
	put_ev(&r[0], 70, 2, 0);
	plb_merge_stats(m, &st, backlog, 3);
	CHECK(backlog[0] == 3 * 32 && backlog[1] == 2 * 32 && backlog[2] == 2 * 32);

	CHECK(drain(m, c, 64, 0) == 7);
	for (i = 0; i < 7; i++) {
		expect(c, i, want_ring[i], want_ts[i], 0);
		CHECK(c->len[i] == 20); /* 16 bytes + 4 of the kernel's padding */
	}
	CHECK(col_seq(c, 3, 0) == 1 && col_seq(c, 6, 0) == 2);
	CHECK(c->out.deadline_ns == PLB_MERGE_NO_DEADLINE);
	CHECK(plb_merge_poll_timeout_ms(m) == -1);
	plb_merge_stats(m, &st, backlog, 3);
	CHECK(st.emitted == 7 && st.late_events == 0 && st.inversions == 0 &&
	      st.malformed == 0 && st.forced_flushes == 0);
	CHECK(backlog[0] == 0 && backlog[1] == 0 && backlog[2] == 0);
	/* Everything copied was released to the kernel. */
	for (i = 0; i < 3; i++)
		CHECK(r[i].page->data_tail == r[i].head);
	CHECK(drain(m, c, 64, 0) == 0);
	teardown(m, r, 3, c);
}

static void test_ties(void)
{
	struct fake_ring r[3];
	struct fclock clk = { 1000 };
	struct plb_merge_config cfg = cfg_offset(&clk, 0);
	struct plb_merge *m;
	struct col *c = col_new(65536);
	int i;

	for (i = 0; i < 3; i++)
		fr_init(&r[i], 1024, 0);
	m = merge_perf(&cfg, r, 3);
	put_ev(&r[2], 5, 0, 2);
	put_ev(&r[1], 5, 0, 1);
	put_ev(&r[0], 5, 0, 0);
	put_ev(&r[0], 5, 1, 0);
	put_ev(&r[2], 6, 1, 2);
	put_ev(&r[1], 6, 1, 1);
	CHECK(drain(m, c, 64, 0) == 6);
	expect(c, 0, 0, 5, 0);
	CHECK(col_seq(c, 0, 0) == 0);
	expect(c, 1, 0, 5, 0);
	CHECK(col_seq(c, 1, 0) == 1);
	expect(c, 2, 1, 5, 0);
	expect(c, 3, 2, 5, 0);
	expect(c, 4, 1, 6, 0);
	expect(c, 5, 2, 6, 0);
	teardown(m, r, 3, c);
}

/* An idle ring holds a head back for at most L past its timestamp. */
static void test_window(void)
{
	struct fake_ring r[2];
	struct fclock clk = { 1000 };
	struct plb_merge_config cfg = cfg_offset(&clk, 100);
	struct plb_merge *m;
	struct plb_merge_stats st;
	struct col *c = col_new(65536);
	uint64_t tail0;
	int i;

	for (i = 0; i < 2; i++)
		fr_init(&r[i], 1024, 0);
	m = merge_perf(&cfg, r, 2);

	/* Ring 0: ts 950; ring 1 idle, its frontier is 1000 - 100 = 900. */
	put_ev(&r[0], 950, 0, 0);
	CHECK(drain(m, c, 64, 0) == 0);
	CHECK(c->out.deadline_ns == 1050);
	CHECK(plb_merge_next_deadline(m) == 1050);
	CHECK(plb_merge_poll_timeout_ms(m) == 1); /* 50 ns, rounded up */
	/* The waiting head stays in the ring: data_tail not released past it. */
	tail0 = r[0].page->data_tail;
	CHECK(tail0 == 0);
	clk.now = 1049;
	CHECK(drain(m, c, 64, 0) == 0);
	clk.now = 1050;
	CHECK(plb_merge_poll_timeout_ms(m) == 0);
	CHECK(drain(m, c, 64, 0) == 1);
	expect(c, 0, 0, 950, 0);
	CHECK(c->out.deadline_ns == PLB_MERGE_NO_DEADLINE);
	CHECK(r[0].page->data_tail == r[0].head);

	/* Both rings have data: exact, no added latency (clock irrelevant). */
	clk.now = 0;
	put_ev(&r[0], 2000, 1, 0);
	put_ev(&r[1], 2010, 0, 1);
	CHECK(drain(m, c, 64, 0) == 1);
	expect(c, 0, 0, 2000, 0);
	/* Now ring 0 is empty and its frontier is the 2000 taken from it. */
	CHECK(c->out.deadline_ns == 2111); /* ring 0 < 1 may still tie at 2010 */
	put_ev(&r[0], 2005, 2, 0);
	CHECK(drain(m, c, 64, 0) == 1);
	expect(c, 0, 0, 2005, 0);
	/* A ring whose last timestamp passed the candidate does not block it. */
	put_ev(&r[0], 3000, 3, 0);
	CHECK(drain(m, c, 64, 0) == 1);
	expect(c, 0, 1, 2010, 0);
	/* ring 1 (empty, last 2010) blocks 3000 until the clock passes 3100. */
	CHECK(c->out.deadline_ns == 3100);
	clk.now = 3100;
	CHECK(drain(m, c, 64, 0) == 1);
	expect(c, 0, 0, 3000, 0);

	/* A record published later than L: late, delivered with the flag. */
	put_ev(&r[1], 2990, 1, 1);
	CHECK(drain(m, c, 64, 0) == 1);
	expect(c, 0, 1, 2990, PLB_MERGE_F_LATE);
	plb_merge_stats(m, &st, NULL, 0);
	CHECK(st.late_events == 1 && st.max_lateness_ns == 10 && st.emitted == 6);
	CHECK(st.dropped_late == 0 && st.inversions == 0);

	/* DRAIN_ALL ignores frontiers (close/stop). */
	clk.now = 0;
	put_ev(&r[0], 5000, 4, 0);
	CHECK(drain(m, c, 64, 0) == 0);
	CHECK(drain(m, c, 64, PLB_MERGE_DRAIN_ALL) == 1);
	expect(c, 0, 0, 5000, 0);
	CHECK(drain(m, c, 64, 0x80) == -EINVAL);
	teardown(m, r, 2, c);
}

static void test_late_drop(void)
{
	struct fake_ring r[2];
	struct fclock clk = { 10000 };
	struct plb_merge_config cfg = cfg_offset(&clk, 100);
	struct plb_merge *m;
	struct plb_merge_stats st;
	struct col *c = col_new(65536);
	int i;

	cfg.late_policy = PLB_LATE_DROP;
	for (i = 0; i < 2; i++)
		fr_init(&r[i], 1024, 0);
	m = merge_perf(&cfg, r, 2);
	put_ev(&r[0], 5000, 0, 0);
	CHECK(drain(m, c, 64, 0) == 1);
	put_ev(&r[1], 4000, 0, 1); /* late by 1000 */
	put_ev(&r[1], 4500, 1, 1); /* late by 500 */
	put_ev(&r[0], 6000, 1, 0);
	CHECK(drain(m, c, 64, 0) == 1);
	expect(c, 0, 0, 6000, 0);
	plb_merge_stats(m, &st, NULL, 0);
	CHECK(st.late_events == 2 && st.dropped_late == 2 && st.max_lateness_ns == 1000);
	CHECK(st.emitted == 2);
	/* Dropped records are consumed too. */
	CHECK(r[1].page->data_tail == r[1].head);
	teardown(m, r, 2, c);
}

static void test_inversion(void)
{
	struct fake_ring r[1];
	struct fclock clk = { 10000 };
	struct plb_merge_config cfg = cfg_offset(&clk, 0);
	struct plb_merge *m;
	struct plb_merge_stats st;
	struct col *c = col_new(65536);

	fr_init(&r[0], 1024, 0);
	m = merge_perf(&cfg, r, 1);
	put_ev(&r[0], 100, 0, 0);
	put_ev(&r[0], 90, 1, 0);  /* an interrupt wrote out of order */
	put_ev(&r[0], 95, 2, 0);  /* not an inversion against 90 */
	put_ev(&r[0], 120, 3, 0);
	CHECK(drain(m, c, 64, 0) == 4);
	expect(c, 0, 0, 100, 0);
	expect(c, 1, 0, 90, PLB_MERGE_F_LATE);
	expect(c, 2, 0, 95, PLB_MERGE_F_LATE);
	expect(c, 3, 0, 120, 0);
	plb_merge_stats(m, &st, NULL, 0);
	CHECK(st.inversions == 1 && st.late_events == 2 && st.max_lateness_ns == 10);
	teardown(m, r, 1, c);
}

static void test_lost(void)
{
	struct fake_ring r[2];
	struct fclock clk = { 10000 };
	struct plb_merge_config cfg = cfg_offset(&clk, 0);
	struct plb_merge *m;
	struct plb_merge_stats st;
	struct col *c = col_new(65536);
	int i;

	for (i = 0; i < 2; i++)
		fr_init(&r[i], 1024, 0);
	m = merge_perf(&cfg, r, 2);
	CHECK(fr_lost(&r[0], 5));
	put_ev(&r[0], 10, 0, 0);
	put_ev(&r[1], 5, 0, 1);
	CHECK(fr_lost(&r[1], 3));
	fr_publish(&r[1]);
	CHECK(drain(m, c, 64, 0) == 4);
	expect(c, 0, 0, 5, PLB_MERGE_F_LOST);
	CHECK(c->len[0] == 0);
	expect(c, 1, 1, 5, 0);
	expect(c, 2, 1, 3, PLB_MERGE_F_LOST);
	expect(c, 3, 0, 10, 0);
	plb_merge_stats(m, &st, NULL, 0);
	CHECK(st.lost_records == 2 && st.lost_samples == 8 && st.emitted == 2);

	/* A LOST record never waits for the window: clock far behind. */
	clk.now = 0;
	cfg.window_ns = 0;
	put_ev(&r[0], 100, 1, 0); /* blocked by ring 1's frontier (0) */
	CHECK(fr_lost(&r[1], 4));
	fr_publish(&r[1]);
	CHECK(drain(m, c, 64, 0) == 1);
	expect(c, 0, 1, 4, PLB_MERGE_F_LOST);

	/* With one output slot: LOST first, then the sample behind it. */
	CHECK(fr_lost(&r[1], 6));
	put_ev(&r[1], 101, 1, 1);
	clk.now = 10000;
	CHECK(drain(m, c, 1, 0) == 1);
	CHECK(c->out.deadline_ns == 0);
	expect(c, 0, 1, 6, PLB_MERGE_F_LOST);
	CHECK(drain(m, c, 1, 0) == 1);
	expect(c, 0, 0, 100, 0);
	CHECK(drain(m, c, 1, 0) == 1);
	expect(c, 0, 1, 101, 0);
	plb_merge_stats(m, &st, NULL, 0);
	CHECK(st.lost_records == 4 && st.lost_samples == 18 && st.emitted == 4);
	teardown(m, r, 2, c);
}

static void test_malformed(void)
{
	struct fake_ring r[1];
	struct fclock clk = { 10000 };
	struct plb_merge_config cfg = cfg_offset(&clk, 0);
	struct plb_merge *m;
	struct plb_merge_stats st;
	struct col *c = col_new(65536);
	uint8_t p[64], junk[24] = { 0 };
	uint32_t len;

	fr_init(&r[0], 1024, 0);
	m = merge_perf(&cfg, r, 1);

	/* Skippable: an unknown type, a raw size beyond the record, a raw
	 * sample too short for the timestamp, a LOST record too short. */
	CHECK(fr_record(&r[0], 99, 16, junk, 8));
	len = ev_make(p, 0, 10, 0, 0, 0);
	CHECK(fr_sample_x(&r[0], 0, p, len, 8));
	CHECK(fr_sample(&r[0], 0, p, 2)); /* raw_size 4 < 8 */
	CHECK(fr_record(&r[0], PERF_RECORD_LOST, 16, junk, 8));
	CHECK(fr_sample(&r[0], 0, p, len));
	fr_publish(&r[0]);
	CHECK(drain(m, c, 64, 0) == 1);
	expect(c, 0, 0, 10, 0);
	plb_merge_stats(m, &st, NULL, 0);
	CHECK(st.malformed == 4 && st.emitted == 1 && st.lost_records == 0);

	/* Not walkable: size 0, 12, or beyond head: resync at head. */
	{
		static const uint16_t bad[] = { 0, 12, 512 };
		size_t k;

		for (k = 0; k < 3; k++) {
			CHECK(fr_record(&r[0], PERF_RECORD_SAMPLE, bad[k], junk, 24));
			put_ev(&r[0], 20 + k, 1, 0); /* lost with the resync */
			CHECK(drain(m, c, 64, 0) == 0);
			CHECK(r[0].page->data_tail == r[0].head);
			put_ev(&r[0], 30 + k, 2, 0); /* the ring works again */
			CHECK(drain(m, c, 64, 0) == 1);
			expect(c, 0, 0, 30 + k, 0);
		}
	}
	plb_merge_stats(m, &st, NULL, 0);
	CHECK(st.malformed == 7 && st.emitted == 4);
	teardown(m, r, 1, c);
}

/* A malformed (or LOST) record behind a plain head, in one ring's run and
 * with two rings taking turns: the fast paths stop there and the general path
 * handles it exactly as at a head -- skipped and counted, delivered (LOST), or
 * resynced at head (a size that is not a record). */
static void test_malformed_in_run(void)
{
	enum { RAW_OVER, RAW_SHORT, REC_SHORT, UNKNOWN, LOST, UNALIGNED, BEYOND, NKINDS };
	uint32_t kind, nr;

	for (nr = 1; nr <= 2; nr++) {
		for (kind = 0; kind < NKINDS; kind++) {
			struct fake_ring r[2];
			struct fclock clk = { 10000 };
			struct plb_merge_config cfg = cfg_offset(&clk, 0);
			struct plb_merge *m;
			struct plb_merge_stats st;
			struct col *c = col_new(65536);
			uint8_t p[64], junk[40] = { 0 }, body[40] = { 0 };
			uint32_t len, i, small[2] = { 4, 0 }; /* raw_size 4: no room for the ts */
			uint32_t raw_size = 32;
			int resync = kind == UNALIGNED || kind == BEYOND, k = 0;

			for (i = 0; i < nr; i++)
				fr_init(&r[i], 4096, 0);
			m = merge_perf(&cfg, r, nr);
			/* A sample body (raw_size 32, an event at ts 20) for the
			 * records that are wrong only in their header. */
			memcpy(body, &raw_size, 4);
			ev_make(body + 4, 0, 20, 1, 0, 0);
			len = ev_make(p, 0, 10, 0, 0, 0);
			CHECK(fr_sample(&r[0], 0, p, len));
			switch (kind) {
			case RAW_OVER: /* raw_size 4 bytes past the record */
				CHECK(fr_sample_x(&r[0], 0, p, len, 4));
				break;
			case RAW_SHORT: /* raw_size 4 < 8 */
				CHECK(fr_sample(&r[0], 0, p, 2));
				break;
			case REC_SHORT: /* 16 bytes: shorter than a sample with its ts */
				CHECK(fr_record(&r[0], PERF_RECORD_SAMPLE, 16, small, sizeof(small)));
				break;
			case UNKNOWN: /* a sample but for its type */
				CHECK(fr_record(&r[0], 99, 48, body, 40));
				break;
			case LOST:
				CHECK(fr_lost(&r[0], 3));
				break;
			case UNALIGNED: /* a sample but for a size not a multiple of 8 */
				CHECK(fr_record(&r[0], PERF_RECORD_SAMPLE, 44, body, 36));
				break;
			case BEYOND: /* past the published head */
				CHECK(fr_record(&r[0], PERF_RECORD_SAMPLE, 512, junk, 8));
				break;
			}
			len = ev_make(p, 0, 30, 2, 0, 0);
			CHECK(fr_sample(&r[0], 0, p, len));
			fr_publish(&r[0]);
			for (i = 1; i < nr; i++) {
				CHECK(put_ev(&r[1], 11, 1, 1));
				CHECK(put_ev(&r[1], 21, 2, 1));
				CHECK(put_ev(&r[1], 31, 3, 1));
			}
			CHECK(drain(m, c, 64, PLB_MERGE_DRAIN_ALL) ==
			      2 + 3 * (int)(nr - 1) + (kind == LOST) - resync);
			expect(c, k++, 0, 10, 0);
			if (kind == LOST)
				expect(c, k++, 0, 3, PLB_MERGE_F_LOST);
			if (nr == 2) {
				expect(c, k++, 1, 11, 0);
				expect(c, k++, 1, 21, 0);
			}
			if (!resync)
				expect(c, k++, 0, 30, 0);
			if (nr == 2)
				expect(c, k++, 1, 31, 0);
			plb_merge_stats(m, &st, NULL, 0);
			CHECK(st.malformed == (kind != LOST) && st.lost_samples == (kind == LOST ? 3u : 0u));
			CHECK(st.emitted == 2 + 3 * (nr - 1) - (uint64_t)resync && st.late_events == 0);
			for (i = 0; i < nr; i++)
				CHECK(r[i].page->data_tail == r[i].head);
			teardown(m, r, nr, c);
		}
	}
}

/* After a fast run empties a ring, that ring's frontier floor is the last ts
 * it emitted: a record published later on another ring below that floor goes
 * out at once (late), not held for the window. One ring's run, then two rings
 * taking turns. */
static void test_run_floor(void)
{
	uint32_t nr;

	for (nr = 1; nr <= 2; nr++) {
		struct fake_ring r[3];
		struct fclock clk = { 100 };
		struct plb_merge_config cfg = cfg_offset(&clk, 1000);
		struct plb_merge *m;
		struct plb_merge_stats st;
		struct col *c = col_new(65536);
		uint32_t i;

		for (i = 0; i <= nr; i++)
			fr_init(&r[i], 4096, 0);
		m = merge_perf(&cfg, r, nr + 1);
		for (i = 0; i < nr; i++) {
			CHECK(put_ev(&r[i], 10 + i, 0, i));
			CHECK(put_ev(&r[i], 20 + i, 1, i));
			CHECK(put_ev(&r[i], 30 + i, 2, i));
		}
		CHECK(drain(m, c, 64, PLB_MERGE_DRAIN_ALL) == 3 * (int)nr);
		/* The clock is far behind: only the floor (30, ring 0) lets 25 out. */
		CHECK(put_ev(&r[nr], 25, 0, nr));
		CHECK(drain(m, c, 64, 0) == 1);
		expect(c, 0, nr, 25, PLB_MERGE_F_LATE);
		plb_merge_stats(m, &st, NULL, 0);
		CHECK(st.late_events == 1 && st.emitted == 3 * nr + 1);
		teardown(m, r, nr + 1, c);
	}
}

/* A nearly full ring whose head waits on an idle ring's frontier forces the
 * merge to emit anyway. */
static void test_pressure(void)
{
	int round;

	for (round = 0; round < 3; round++) {
		struct fake_ring r[3];
		struct fclock clk = { 0 };
		struct plb_merge_config cfg = cfg_offset(&clk, 1000);
		struct plb_merge *m;
		struct plb_merge_stats st;
		struct col *c = col_new(65536);
		int i, n, forced = 0;

		cfg.pressure_permille = round == 2 ? 1000 : 500; /* 1000: off */
		for (i = 0; i < 3; i++)
			fr_init(&r[i], 512, 0);
		m = merge_perf(&cfg, r, 3);
		/* 10 records of 32 bytes = 320 > 256 = half the ring. */
		for (i = 0; i < 10; i++)
			put_ev(&r[0], 5000 + (uint64_t)i, (uint32_t)i, 0);
		if (round == 1)
			put_ev(&r[2], 4000, 0, 2); /* the top is another ring */
		n = drain(m, c, 64, 0);
		if (round == 2) {
			CHECK(n == 0);
			CHECK(c->out.deadline_ns == 5000 + 1000);
		} else {
			/* 320 -> 288 -> 256: two of ring 0 leave (and ring 2's
			 * head before them), all flagged forced. */
			CHECK(n == (round == 1 ? 3 : 2));
			if (round == 1)
				expect(c, 0, 2, 4000, PLB_MERGE_F_FORCED);
			for (i = 0; i < n; i++)
				forced += !!(c->flags[i] & PLB_MERGE_F_FORCED);
			CHECK(forced == n);
			expect(c, n - 1, 0, 5001, PLB_MERGE_F_FORCED);
			CHECK(c->out.deadline_ns == 5002 + 1000);
		}
		plb_merge_stats(m, &st, NULL, 0);
		CHECK(st.forced_flushes == (uint64_t)(round == 2 ? 0 : n));
		/* The idle ring then publishes something older: late. */
		put_ev(&r[1], 4500, 0, 1);
		clk.now = 100000;
		n = drain(m, c, 64, 0);
		CHECK(n == (round == 2 ? 11 : 9));
		if (round != 2) {
			expect(c, 0, 1, 4500, PLB_MERGE_F_LATE);
			plb_merge_stats(m, &st, NULL, 0);
			CHECK(st.late_events == 1);
		}
		teardown(m, r, 3, c);
	}
}

/* Records wrapping at every position, a timestamp straddling the end at
 * every offset, both timestamp modes, several sample layouts. */
static void test_wrap_every_offset(void)
{
	static const uint64_t layouts[] = {
		PERF_SAMPLE_RAW,
		PERF_SAMPLE_TIME | PERF_SAMPLE_RAW,
		PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_RAW,
		PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TIME |
			PERF_SAMPLE_PERIOD | PERF_SAMPLE_RAW,
	};
	const uint64_t size = 256;
	size_t l;
	int wrapped_ts = 0;

	for (l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++) {
		int kernel;

		for (kernel = 0; kernel < 2; kernel++) {
			uint64_t start;
			uint32_t ts_off;

			if (kernel && !(layouts[l] & PERF_SAMPLE_TIME))
				continue;
			for (start = (uint64_t)0 - size; start != size; start += 8) {
				for (ts_off = 0; ts_off < 12; ts_off++) {
					struct fake_ring r;
					struct fclock clk = { 0 };
					struct plb_merge_config cfg = cfg_offset(&clk, 0);
					struct plb_merge *m;
					struct col *c = col_new(4096);
					uint8_t p[3][64];
					uint32_t len[3];
					int i;

					fr_init(&r, size, start);
					r.sample_type = layouts[l];
					cfg.sample_type = layouts[l];
					cfg.ts_offset = ts_off;
					if (kernel)
						cfg.ts_mode = PLB_TS_KERNEL;
					m = merge_perf(&cfg, &r, 1);
					for (i = 0; i < 3; i++) {
						uint64_t ts = 1000 + (uint64_t)i;

						len[i] = ev_make(p[i], ts_off, ts, (uint32_t)i, 0,
								 (uint32_t)(start / 8 + i) % 8);
						CHECK(fr_sample(&r, ts, p[i], len[i]));
					}
					fr_publish(&r);
					CHECK(drain(m, c, 64, 0) == 3);
					for (i = 0; i < 3; i++) {
						expect(c, i, 0, 1000 + (uint64_t)i, 0);
						CHECK(c->len[i] >= len[i] && c->len[i] < len[i] + 8);
						CHECK(memcmp(c->buf + c->start[i], p[i], len[i]) == 0);
					}
					/* the first sample's timestamp bytes straddle the end */
					{
						uint32_t raw_off = 8 + 8 * (uint32_t)__builtin_popcountll(
							layouts[l] & PLB_MERGE_SAMPLE_FIXED);
						uint64_t o = (start + raw_off + 4 + ts_off) & (size - 1);

						wrapped_ts += !kernel && o + 8 > size;
					}
					CHECK(r.page->data_tail == r.head);
					teardown(m, &r, 1, c);
				}
			}
		}
	}
	CHECK(wrapped_ts > 0);
}

/* Runs: the drain emits a ring's records without heap operations while its
 * next head still sorts first (plb_merge_runs.c, perf_run). Every way a run can
 * end -- a tie with a higher-indexed ring, the other ring's head, a record
 * below the last emitted (late), a record wrapping the end of the ring, the
 * output's record or byte limit -- must give what the heap alone would:
 * the same entries, flags and counters, for every start position of ring 0
 * (so the wrap falls on every record) and every output limit. */
static void test_runs(void)
{
	static const uint64_t ts0[] = { 1, 2, 3, 4, 5, 5, 6, 3, 7, 8 };
	static const uint64_t ts1[] = { 5, 5, 6, 9 };
	static const uint32_t want_ring[] = { 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 0, 1 };
	static const uint64_t want_ts[] = { 1, 2, 3, 4, 5, 5, 5, 5, 6, 3, 6, 7, 8, 9 };
	static const uint32_t want_seq[] = { 0, 1, 2, 3, 4, 5, 0, 1, 6, 7, 2, 8, 9, 3 };
	const int total = 14;
	uint64_t start;
	uint32_t max, buf_records;

	for (start = 0; start < 1024; start += 8) {
		for (max = 1; max <= 15; max += 2) {
			for (buf_records = 1; buf_records <= 16; buf_records += 5) {
				struct fake_ring r[2];
				struct fclock clk = { 1000000 };
				struct plb_merge_config cfg = cfg_offset(&clk, 0);
				struct plb_merge *m;
				struct plb_merge_stats st;
				/* each payload is 20 bytes, 24 with alignment */
				struct col *c = col_new(24 * buf_records - 4);
				uint32_t k;
				int got = 0, calls = 0;

				fr_init(&r[0], 1024, start);
				fr_init(&r[1], 1024, 0);
				m = merge_perf(&cfg, r, 2);
				for (k = 0; k < sizeof(ts0) / sizeof(ts0[0]); k++)
					CHECK(put_ev(&r[0], ts0[k], k, 0));
				for (k = 0; k < sizeof(ts1) / sizeof(ts1[0]); k++)
					CHECK(put_ev(&r[1], ts1[k], k, 1));
				while (got < total) {
					int n = drain(m, c, max, 0), i;

					CHECK(n > 0 && ++calls <= total);
					for (i = 0; i < n; i++, got++) {
						CHECK(got < total);
						expect(c, i, want_ring[got], want_ts[got],
						       got == 9 ? PLB_MERGE_F_LATE : 0);
						CHECK(col_seq(c, i, 0) == want_seq[got]);
					}
				}
				CHECK(drain(m, c, max, 0) == 0);
				plb_merge_stats(m, &st, NULL, 0);
				CHECK(st.emitted == (uint64_t)total && st.late_events == 1 &&
				      st.max_lateness_ns == 3 && st.inversions == 1 &&
				      st.malformed == 0 && st.forced_flushes == 0);
				CHECK(r[0].page->data_tail == r[0].head &&
				      r[1].page->data_tail == r[1].head);
				teardown(m, r, 2, c);
			}
		}
	}
}

static void test_output_limits(void)
{
	struct fake_ring r[2];
	struct fclock clk = { 100000 };
	struct plb_merge_config cfg = cfg_offset(&clk, 0);
	struct plb_merge *m;
	struct col *c;
	uint8_t p[200];
	uint32_t len;
	int i, got = 0;

	for (i = 0; i < 2; i++)
		fr_init(&r[i], 4096, 0);
	m = merge_perf(&cfg, r, 2);
	for (i = 0; i < 5; i++) {
		len = ev_make(p, 0, 10 + (uint64_t)i, (uint32_t)i, (uint32_t)(i & 1),
			      (uint32_t)(i * 30));
		CHECK(fr_sample(&r[i & 1], 0, p, len));
		fr_publish(&r[i & 1]);
	}
	if (!g_consume) { /* a callback has no buffer to run out of */
		/* A buffer smaller than the first payload (20 bytes): -ENOSPC. */
		c = col_new(16);
		CHECK(plb_merge_drain(m, &c->out, 64, 0) == -ENOSPC);
		CHECK(c->out.need == 20);
		CHECK(r[0].page->data_tail == 0); /* nothing consumed */
		col_free(c);
		/* 64 bytes: 20 at 0, then 52 at 24 does not fit. */
		c = col_new(64);
		CHECK(drain(m, c, 64, 0) == 1);
		CHECK(c->out.deadline_ns == 0);
		expect(c, 0, 0, 10, 0);
		col_free(c);
		got = 1;
	}
	/* max_records bounds a drain; the rest follows in order. */
	c = col_new(65536);
	CHECK(drain(m, c, 2, 0) == 2);
	expect(c, 0, (uint32_t)(got & 1), 10 + (uint64_t)got, 0);
	expect(c, 1, (uint32_t)(~got & 1), 11 + (uint64_t)got, 0);
	CHECK(c->len[0] == (got ? 52 : 20) && c->start[1] == (got ? 56 : 24)); /* 8-aligned */
	CHECK(c->out.deadline_ns == 0);
	got += 2;
	while (drain(m, c, 1, 0) == 1) {
		expect(c, 0, (uint32_t)(got & 1), 10 + (uint64_t)got, 0);
		got++;
	}
	CHECK(got == 5);
	CHECK(c->out.deadline_ns == PLB_MERGE_NO_DEADLINE);
	CHECK(plb_merge_consume(m, col_fn, c, 0, 0) == -EINVAL);
	CHECK(plb_merge_consume(m, NULL, c, 8, 0) == -EINVAL);
	CHECK(plb_merge_consume(m, col_fn, c, 8, 2) == -EINVAL);
	CHECK(plb_merge_consume(NULL, col_fn, c, 8, 0) == -EINVAL);
	CHECK(plb_merge_drain(m, &c->out, 0, 0) == -EINVAL);
	c->out.len = NULL;
	CHECK(plb_merge_drain(m, &c->out, 8, 0) == -EINVAL);
	teardown(m, r, 2, c);
}

/* plb_merge_consume: payloads in place (a pointer into the ring, or into the
 * merge's scratch copy for the one wrapping the end), and a callback that
 * stops: the entry it stopped at is taken, the ring released past it, the
 * deadline 0, and the next consume goes on from there -- also when it stops
 * at a PERF_RECORD_LOST entry. */
struct stop_ctx {
	struct fake_ring *r;
	const uint8_t *scratch;
	int calls, stop_at, in_ring, in_scratch;
	uint32_t ring[8];
	uint64_t ts[8];
	uint32_t flags[8];
};

static int stop_fn(void *ctx, uint32_t ring, uint64_t ts, uint32_t flags, const void *data,
		   uint32_t len)
{
	struct stop_ctx *x = ctx;
	const uint8_t *p = data;

	CHECK(x->calls < 8);
	x->ring[x->calls] = ring;
	x->ts[x->calls] = ts;
	x->flags[x->calls] = flags;
	if (!(flags & PLB_MERGE_F_LOST)) {
		const struct fake_ring *f = &x->r[ring];
		uint64_t got;

		if (p >= f->data && p + len <= f->data + f->size)
			x->in_ring++;
		else if (p == x->scratch)
			x->in_scratch++;
		else
			CHECK(0);
		memcpy(&got, p, sizeof(got)); /* the payload starts with its ts */
		CHECK(got == ts);
	}
	return ++x->calls == x->stop_at;
}

static void test_consume(void)
{
	struct fake_ring r[2];
	struct fclock clk = { 100000 };
	struct plb_merge_config cfg = cfg_offset(&clk, 0);
	struct plb_merge *m;
	struct stop_ctx x;
	uint64_t tail0;
	int i;

	/* Ring 0 starts 24 bytes before its end: its first record wraps. */
	fr_init(&r[0], 4096, 4096 - 24);
	fr_init(&r[1], 4096, 0);
	m = merge_perf(&cfg, r, 2);
	for (i = 0; i < 4; i++)
		CHECK(put_ev(&r[i & 1], 10 + (uint64_t)i, (uint32_t)i, (uint32_t)(i & 1)));
	CHECK(fr_lost(&r[1], 7));
	CHECK(put_ev(&r[1], 20, 9, 1));
	fr_publish(&r[0]);
	fr_publish(&r[1]);

	memset(&x, 0, sizeof(x));
	x.r = r;
	x.scratch = m->scratch;
	x.stop_at = 2;
	CHECK(plb_merge_consume(m, stop_fn, &x, 64, 0) == 2);
	CHECK(plb_merge_next_deadline(m) == 0);
	CHECK(x.ring[0] == 0 && x.ts[0] == 10 && x.ring[1] == 1 && x.ts[1] == 11);
	CHECK(x.in_scratch == 1 && x.in_ring == 1); /* ring 0's first record wraps */
	tail0 = r[0].page->data_tail;
	CHECK(tail0 > 0 && tail0 < r[0].head); /* past ts 10 only */
	/* Stop at the LOST entry: ring 1 holds ts 13, then LOST, then ts 20. */
	x.stop_at = 5;
	CHECK(plb_merge_consume(m, stop_fn, &x, 64, 0) == 3);
	CHECK(plb_merge_next_deadline(m) == 0);
	CHECK(x.ts[2] == 12 && x.ts[3] == 13);
	CHECK(x.ring[4] == 1 && x.flags[4] == PLB_MERGE_F_LOST && x.ts[4] == 7);
	CHECK(r[0].page->data_tail == r[0].head);
	x.stop_at = 0;
	CHECK(plb_merge_consume(m, stop_fn, &x, 64, 0) == 1);
	CHECK(x.ring[5] == 1 && x.ts[5] == 20 && x.flags[5] == 0);
	CHECK(plb_merge_next_deadline(m) == PLB_MERGE_NO_DEADLINE);
	CHECK(r[1].page->data_tail == r[1].head);
	CHECK(x.in_ring == 4 && x.in_scratch == 1);
	plb_merge_free(m);
	fr_free(&r[0]);
	fr_free(&r[1]);
}

/* BPF ring buffers as sources, and mixed with a perf ring. */
static void test_ringbuf(void)
{
	struct fake_rb b[2];
	struct fake_ring pr;
	struct fclock clk = { 1000 };
	struct plb_merge_config cfg = cfg_offset(&clk, 100);
	struct plb_merge_source src[3];
	struct plb_merge *m;
	struct plb_merge_stats st;
	struct col *c = col_new(65536);
	uint8_t p[64];
	uint64_t busy_pos, backlog[3];
	uint32_t len;
	int i;

	cfg.ts_offset = 4;
	rb_init(&b[0], 256, 0);
	rb_init(&b[1], 256, (uint64_t)0 - 64);
	fr_init(&pr, 256, 0);
	memset(src, 0, sizeof(src));
	for (i = 0; i < 2; i++) {
		src[i].kind = PLB_SRC_RINGBUF;
		src[i].rb = &b[i].view;
	}
	src[2].kind = PLB_SRC_PERF;
	src[2].page = pr.page;
	src[2].data = pr.data;
	src[2].data_size = pr.size;
	m = plb_merge_new(&cfg, src, 3);
	CHECK(m);

	len = ev_make(p, 4, 930, 0, 0, 3);
	CHECK(rb_write(&b[0], p, len, 0, 0) != UINT64_MAX);
	len = ev_make(p, 4, 920, 0, 1, 0);
	CHECK(rb_write(&b[1], p, len, 0, 0) != UINT64_MAX);
	len = ev_make(p, 4, 925, 0, 2, 0);
	CHECK(fr_sample(&pr, 0, p, len));
	fr_publish(&pr);
	/* A discarded record is skipped; a busy one blocks its ring. */
	len = ev_make(p, 4, 1, 9, 1, 0);
	CHECK(rb_write(&b[1], p, len, 0, 1) != UINT64_MAX);
	len = ev_make(p, 4, 940, 1, 1, 0);
	busy_pos = rb_write(&b[1], p, len, 1, 0);
	CHECK(busy_pos != UINT64_MAX);
	plb_merge_stats(m, &st, backlog, 3);
	CHECK(backlog[0] == 32 && backlog[1] == 3 * 32 && backlog[2] == 32);

	/* 920 (b1), 925 (perf), 930 (b0); b1's busy head makes it empty with
	 * frontier max(920, 1000 - 100) = 920: nothing else may pass... */
	CHECK(drain(m, c, 64, 0) == 1);
	expect(c, 0, 1, 920, 0);
	CHECK(col_seq(c, 0, 4) == 0);
	/* ...until the clock gives every idle ring a frontier >= 930. */
	clk.now = 1030;
	CHECK(drain(m, c, 64, 0) == 2);
	expect(c, 0, 2, 925, 0);
	expect(c, 1, 0, 930, 0);
	CHECK(c->len[1] == 23); /* a ring buffer record: exactly its length */
	CHECK(*b[0].cons == b[0].head);
	CHECK(*b[1].cons == busy_pos); /* stopped at the busy record */
	/* Commit the busy record: it flows. */
	rb_set_len(&b[1], busy_pos, len);
	clk.now = 1041; /* ring 0 (index 0 < 1) could still tie at 940 */
	CHECK(drain(m, c, 64, 0) == 1);
	expect(c, 0, 1, 940, 0);
	CHECK(*b[1].cons == b[1].head);
	plb_merge_stats(m, &st, NULL, 0);
	CHECK(st.emitted == 4 && st.malformed == 0 && st.late_events == 0);

	/* A record too short for the timestamp is malformed. */
	CHECK(rb_write(&b[0], p, 6, 0, 0) != UINT64_MAX);
	len = ev_make(p, 4, 2000, 2, 0, 0);
	CHECK(rb_write(&b[0], p, len, 0, 0) != UINT64_MAX);
	CHECK(drain(m, c, 64, PLB_MERGE_DRAIN_ALL) == 1);
	expect(c, 0, 0, 2000, 0);
	plb_merge_stats(m, &st, NULL, 0);
	CHECK(st.malformed == 1);

	/* A corrupt length: resync at producer_pos. */
	{
		uint32_t hdr[2] = { 200, 0 };
		uint64_t pos = b[0].head;

		rb_put(&b[0], pos, hdr, 8);
		b[0].head += 16;
		__atomic_store_n(b[0].prod, b[0].head, __ATOMIC_RELEASE);
		CHECK(drain(m, c, 64, 0) == 0);
		CHECK(*b[0].cons == b[0].head);
		plb_merge_stats(m, &st, NULL, 0);
		CHECK(st.malformed == 2);
	}
	plb_merge_free(m);
	for (i = 0; i < 2; i++)
		rb_free(&b[i]);
	fr_free(&pr);
	col_free(c);
}

/* The default clock is CLOCK_MONOTONIC. */
static void test_default_clock(void)
{
	struct fake_ring r[2];
	struct plb_merge_config cfg;
	struct plb_merge *m;
	struct col *c = col_new(4096);
	uint64_t now = plb_clock_monotonic(NULL);
	int i, t;

	CHECK(now > 0 && plb_clock_boottime(NULL) >= now / 2);
	memset(&cfg, 0, sizeof(cfg));
	cfg.ts_mode = PLB_TS_OFFSET;
	cfg.window_ns = 20 * 1000000ull; /* 20 ms */
	for (i = 0; i < 2; i++)
		fr_init(&r[i], 1024, 0);
	m = merge_perf(&cfg, r, 2);
	put_ev(&r[0], now, 0, 0);
	CHECK(drain(m, c, 8, 0) == 0);
	CHECK(c->out.deadline_ns == now + cfg.window_ns);
	t = plb_merge_poll_timeout_ms(m);
	CHECK(t >= 0 && t <= 21);
	while (drain(m, c, 8, 0) == 0) {
		struct timespec ts = { 0, 1000000 };

		CHECK(plb_clock_monotonic(NULL) < now + 30000000000ull); /* generous: the machine may be busy */
		nanosleep(&ts, NULL);
	}
	CHECK(plb_clock_monotonic(NULL) >= now + cfg.window_ns);
	teardown(m, r, 2, c);
}

/* ---- the rule as a property, under a simulated clock ----
 * Producers read the clock (ts = now) and their record becomes visible at most
 * L later, in ring order. Drains happen at random times. The rule then
 * promises: no late events, output == the stable sort by (ts, ring), and after
 * a drain at time T no visible record with ts < T - L is left behind. */

#define PR_RINGS 5
#define PR_EVENTS 4000 /* per seed */

struct pr_rec {
	uint64_t ts, pub;
	uint32_t ring, seq;
};

static uint64_t xorshift(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static int pr_cmp(const void *a, const void *b)
{
	const struct pr_rec *x = a, *y = b;

	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	if (x->ring != y->ring)
		return x->ring < y->ring ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void test_rule_property(void)
{
	uint64_t seed;

	for (seed = 1; seed <= 12; seed++) {
		const uint64_t L = 50 + seed * 10;
		struct fake_ring r[PR_RINGS];
		struct fclock clk = { 0 };
		struct plb_merge_config cfg = cfg_offset(&clk, L);
		struct plb_merge *m;
		struct plb_merge_stats st;
		struct col *c = col_new(1 << 20);
		struct pr_rec *all = calloc(PR_EVENTS, sizeof(*all));
		struct pr_rec *out = calloc(PR_EVENTS, sizeof(*out));
		uint32_t made = 0, published[PR_RINGS] = { 0 }, taken[PR_RINGS] = { 0 };
		uint32_t first_of[PR_RINGS][PR_EVENTS / 4];
		uint32_t nring[PR_RINGS] = { 0 }, nout = 0;
		uint64_t last_pub[PR_RINGS] = { 0 }, rng = seed * 0x9E3779B97F4A7C15ull;
		int i, j;

		CHECK(all && out);
		cfg.pressure_permille = 1000;
		for (i = 0; i < PR_RINGS; i++)
			fr_init(&r[i], 1 << 16, (uint64_t)i << 40);
		m = merge_perf(&cfg, r, PR_RINGS);
		while (nout < PR_EVENTS) {
			clk.now += xorshift(&rng) % 7;
			/* Produce: ring i is active with its own probability, and
			 * ring 0 stays silent for long stretches. */
			for (i = 0; i < PR_RINGS && made < PR_EVENTS; i++) {
				uint64_t p = xorshift(&rng) % 100;
				int active = i == 0 ? ((clk.now / 500) % 4 == 0 && p < 30)
						    : p < (uint64_t)(10 + 10 * i);
				struct pr_rec *e;

				if (!active || nring[i] >= PR_EVENTS / 4)
					continue;
				e = &all[made];
				e->ts = clk.now;
				e->pub = clk.now + xorshift(&rng) % (L + 1);
				if (e->pub < last_pub[i])
					e->pub = last_pub[i]; /* visible in ring order */
				last_pub[i] = e->pub;
				e->ring = (uint32_t)i;
				e->seq = nring[i];
				first_of[i][nring[i]++] = made++;
			}
			/* Publish what is due. */
			for (i = 0; i < PR_RINGS; i++) {
				while (published[i] < nring[i] &&
				       all[first_of[i][published[i]]].pub <= clk.now) {
					struct pr_rec *e = &all[first_of[i][published[i]]];
					uint8_t ev[32];
					uint32_t len = ev_make(ev, 0, e->ts, e->seq, e->ring, 0);

					CHECK(fr_sample(&r[i], 0, ev, len));
					published[i]++;
				}
				fr_publish(&r[i]);
			}
			if (xorshift(&rng) % 5)
				continue;
			/* Drain at time now. */
			CHECK(drain(m, c, COL_MAX, 0) >= 0);
			for (j = 0; j < c->n; j++) {
				CHECK(!(c->flags[j] & ~0u));
				CHECK(nout < PR_EVENTS);
				out[nout].ts = c->ts[j];
				out[nout].ring = c->ring[j];
				out[nout].seq = col_seq(c, j, 0);
				CHECK(out[nout].seq == taken[c->ring[j]]);
				taken[c->ring[j]]++;
				nout++;
			}
			/* Bounded latency: nothing visible with ts < now - L left. */
			for (i = 0; i < PR_RINGS; i++)
				if (taken[i] < published[i])
					CHECK(all[first_of[i][taken[i]]].ts + L >= clk.now);
			if (c->out.deadline_ns != PLB_MERGE_NO_DEADLINE)
				CHECK(c->out.deadline_ns > clk.now);
		}
		CHECK(made == PR_EVENTS);
		qsort(all, PR_EVENTS, sizeof(*all), pr_cmp);
		for (j = 0; j < PR_EVENTS; j++)
			CHECK(all[j].ts == out[j].ts && all[j].ring == out[j].ring &&
			      all[j].seq == out[j].seq);
		plb_merge_stats(m, &st, NULL, 0);
		CHECK(st.late_events == 0 && st.forced_flushes == 0 &&
		      st.emitted == PR_EVENTS && st.inversions == 0);
		plb_merge_free(m);
		for (i = 0; i < PR_RINGS; i++)
			fr_free(&r[i]);
		free(all);
		free(out);
		col_free(c);
	}
}

/* ---- threaded stress: one producer per ring, a shared monotonic counter ----
 * Each producer takes ts = counter++ then writes and publishes its record, as a
 * BPF program takes bpf_ktime_get_ns() then outputs; the merge's clock reads the
 * counter. Output must be a stable sort of the input (timestamps are unique)
 * except for entries flagged late, and every sequence number must arrive once
 * (or be counted lost when the producers drop like the kernel). */

#define ST_RINGS 4

struct st_shared {
	uint64_t counter;
	int done;
};

struct st_prod {
	struct st_shared *sh;
	struct fake_ring f;
	struct fake_rb rb;
	int use_rb;
	uint32_t idx;
	uint32_t n;
	int drop;
	uint64_t dropped;
	int done;
};

static uint64_t st_clock(void *ctx)
{
	return __atomic_load_n(&((struct st_shared *)ctx)->counter, __ATOMIC_ACQUIRE);
}

static void *st_producer(void *arg)
{
	struct st_prod *p = arg;
	uint32_t seq;

	for (seq = 0; seq < p->n; seq++) {
		uint8_t ev[64];
		uint64_t ts = __atomic_fetch_add(&p->sh->counter, 1, __ATOMIC_ACQ_REL);
		uint32_t len = ev_make(ev, 0, ts, seq, p->idx, seq % 13);

		if (p->use_rb) {
			while (rb_write(&p->rb, ev, len, 0, 0) == UINT64_MAX)
				sched_yield();
			continue;
		}
		if (p->drop) {
			/* perf_output_begin(): report earlier losses first. */
			if (p->f.lost_pending && fr_lost(&p->f, p->f.lost_pending))
				p->f.lost_pending = 0;
			if (p->f.lost_pending || !fr_sample(&p->f, 0, ev, len)) {
				p->f.lost_pending++;
				p->dropped++;
			}
		} else {
			while (!fr_sample(&p->f, 0, ev, len))
				sched_yield();
		}
		fr_publish(&p->f);
		if (p->drop && seq % 4 == 0)
			sched_yield(); /* let the consumer keep some of it */
	}
	if (p->drop && p->f.lost_pending) {
		while (!fr_lost(&p->f, p->f.lost_pending))
			sched_yield();
		p->f.lost_pending = 0;
		fr_publish(&p->f);
	}
	__atomic_store_n(&p->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void run_stress(int drop, int use_rb, uint32_t per_ring, uint64_t ring_size,
		       uint64_t window)
{
	struct st_shared sh = { 0, 0 };
	struct st_prod p[ST_RINGS];
	pthread_t t[ST_RINGS];
	struct plb_merge_source src[ST_RINGS];
	struct plb_merge_config cfg;
	struct plb_merge *m;
	struct plb_merge_stats st;
	struct col *c = col_new(1 << 16);
	uint8_t *seen = calloc((size_t)ST_RINGS * per_ring, 1);
	uint32_t next_seq[ST_RINGS] = { 0 };
	uint64_t delivered = 0, lost = 0, late = 0, last_ts = 0, total;
	int have_last = 0, i, joined = 0;

	CHECK(seen);
	memset(&cfg, 0, sizeof(cfg));
	cfg.ts_mode = PLB_TS_OFFSET;
	cfg.window_ns = window;
	cfg.clock = st_clock;
	cfg.clock_ctx = &sh;
	memset(src, 0, sizeof(src));
	for (i = 0; i < ST_RINGS; i++) {
		memset(&p[i], 0, sizeof(p[i]));
		p[i].sh = &sh;
		p[i].idx = (uint32_t)i;
		p[i].n = per_ring;
		p[i].drop = drop;
		p[i].use_rb = use_rb && (i & 1);
		if (p[i].use_rb) {
			rb_init(&p[i].rb, ring_size, (uint64_t)0 - ring_size / 2);
			src[i].kind = PLB_SRC_RINGBUF;
			src[i].rb = &p[i].rb.view;
		} else {
			fr_init(&p[i].f, ring_size, (uint64_t)i * 977 * 8);
			src[i].kind = PLB_SRC_PERF;
			src[i].page = p[i].f.page;
			src[i].data = p[i].f.data;
			src[i].data_size = ring_size;
		}
	}
	m = plb_merge_new(&cfg, src, ST_RINGS);
	CHECK(m);
	for (i = 0; i < ST_RINGS; i++)
		CHECK(pthread_create(&t[i], NULL, st_producer, &p[i]) == 0);

	total = (uint64_t)ST_RINGS * per_ring;
	for (;;) {
		int n, k;

		/* Producers done: flush what the frontiers still hold back. */
		n = drain(m, c, COL_MAX, joined ? PLB_MERGE_DRAIN_ALL : 0);
		CHECK(n >= 0);
		for (k = 0; k < n; k++) {
			uint32_t r = c->ring[k], seq;

			CHECK(r < ST_RINGS);
			if (c->flags[k] & PLB_MERGE_F_LOST) {
				CHECK(c->flags[k] == PLB_MERGE_F_LOST && c->len[k] == 0);
				lost += c->ts[k];
				continue;
			}
			seq = col_seq(c, k, 0);
			CHECK(seq < per_ring);
			CHECK(!seen[(size_t)r * per_ring + seq]);
			seen[(size_t)r * per_ring + seq] = 1;
			/* Each ring's own order is kept. */
			CHECK(seq >= next_seq[r]);
			next_seq[r] = seq + 1;
			if (c->flags[k] & PLB_MERGE_F_LATE) {
				late++;
				CHECK(have_last && c->ts[k] < last_ts);
			} else {
				/* Unique timestamps: sorted == the stable sort. */
				CHECK(!have_last || c->ts[k] > last_ts);
				last_ts = c->ts[k];
				have_last = 1;
			}
			delivered++;
		}
		if (!joined) {
			int all_done = 1;

			for (i = 0; i < ST_RINGS; i++)
				all_done &= __atomic_load_n(&p[i].done, __ATOMIC_ACQUIRE);
			if (all_done) {
				for (i = 0; i < ST_RINGS; i++)
					pthread_join(t[i], NULL);
				joined = 1;
			}
		} else if (n == 0) {
			break;
		}
		if (n == 0)
			sched_yield();
	}
	plb_merge_stats(m, &st, NULL, 0);
	if (!drop) {
		CHECK(delivered == total);
		CHECK(lost == 0 && st.lost_samples == 0);
	} else {
		uint64_t dropped = 0;

		for (i = 0; i < ST_RINGS; i++)
			dropped += p[i].dropped;
		CHECK(delivered + lost == total);
		CHECK(lost == dropped && st.lost_samples == lost);
	}
	CHECK(st.emitted == delivered && st.late_events == late && st.malformed == 0);
	printf("  stress drop=%d rb=%d: %llu delivered, %llu lost, %llu late "
	       "(max %llu ticks), %llu forced, %llu inversions\n",
	       drop, use_rb, (unsigned long long)delivered, (unsigned long long)lost,
	       (unsigned long long)late, (unsigned long long)st.max_lateness_ns,
	       (unsigned long long)st.forced_flushes, (unsigned long long)st.inversions);
	plb_merge_free(m);
	for (i = 0; i < ST_RINGS; i++) {
		if (p[i].use_rb)
			rb_free(&p[i].rb);
		else
			fr_free(&p[i].f);
	}
	free(seen);
	col_free(c);
}

static void run_all(void)
{
	test_config();
	test_basic_order();
	test_ties();
	test_window();
	test_late_drop();
	test_inversion();
	test_lost();
	test_malformed();
	test_malformed_in_run();
	test_run_floor();
	test_pressure();
	test_wrap_every_offset();
	test_runs();
	test_output_limits();
	test_ringbuf();
	test_default_clock();
	test_rule_property();
	run_stress(0, 0, 100000, 4096, 64);
	run_stress(1, 0, 100000, 1024, 64);
	run_stress(0, 1, 100000, 4096, 64);
}

int main(void)
{
	printf("drain (copies into arrays):\n");
	run_all();
	g_consume = 1;
	printf("consume (a callback, in place):\n");
	run_all();
	test_consume();
	printf("test_merge: ok\n");
	return 0;
}
