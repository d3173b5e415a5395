/* test_into.c - records straight into array rows (csrc/plb_into.c) over
 * synthetic rings: a BPF ring buffer (double mapped, kernel-like producer),
 * perf rings (samples, lost notices, records that wrap the end) and the
 * ordered merge with its timestamp and flag columns. Checks every byte of
 * every row, what stays in the ring (never consumed unless copied), odd
 * sizes handed back whole, discarded records skipped, a busy head stopping;
 * and the ring buffer fill into Arrow columns (st->cols) on the same rings.
 * Unity build: includes the code under test. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "../../csrc/plb_perfring.c"
#include "../../csrc/plb_ringbuf.c"
#include "../../csrc/plb_merge.c"
#include "../../csrc/plb_merge_runs.c"
#include "../../csrc/plb_block.c"
#include "../../csrc/plb_columns.c"
#include "../../csrc/plb_into.c"

#include <stdio.h>

#include "check.h"
#include "synth.h"

/* A record of size bytes for sequence number seq: seq in the first 8 bytes
 * (when it fits), then a pattern. */
static void fill(uint8_t *p, uint64_t seq, uint32_t size)
{
	for (uint32_t i = 0; i < size; i++)
		p[i] = (uint8_t)(seq * 31u + i * 7u + 3u);
	if (size >= 8)
		memcpy(p, &seq, 8);
}

static int same(const uint8_t *p, uint64_t seq, uint32_t size)
{
	uint8_t want[4096];

	fill(want, seq, size);
	return memcmp(p, want, size) == 0;
}

static void rb_put(struct synth *s, uint64_t seq, uint32_t size, int discard)
{
	void *p = synth_reserve(s, size);

	CHECK(p);
	fill(p, seq, size);
	synth_commit(s, p, discard);
}

static struct plb_into into_new(uint8_t *rows, uint64_t nrows, uint32_t rec_size)
{
	struct plb_into st;

	memset(&st, 0, sizeof(st));
	st.out = rows;
	st.rows = nrows;
	st.rec_size = rec_size;
	return st;
}

/* ---- BPF ring buffer ---- */

static void t_rb_basic(void)
{
	struct synth s;
	uint8_t rows[8 * 24];
	struct plb_into st = into_new(rows, 8, 24);

	synth_init(&s, 4096);
	CHECK(plb_into_rb(&s.v, &st) == 0 && st.stop == PLB_INTO_EMPTY && st.n == 0);
	rb_put(&s, 1, 24, 0);
	rb_put(&s, 2, 24, 1); /* discarded: skipped */
	rb_put(&s, 3, 24, 0);
	CHECK(plb_into_rb(&s.v, &st) == 2);
	CHECK(st.stop == PLB_INTO_EMPTY && st.n == 2 && st.discarded == 1);
	CHECK(same(rows, 1, 24) && same(rows + 24, 3, 24));
	CHECK(*s.cons == *s.prod); /* everything consumed */
	plb_into_release(&st);
	synth_free(&s);
}

static void t_rb_busy(void)
{
	struct synth s;
	uint8_t rows[8 * 16];
	struct plb_into st = into_new(rows, 8, 16);
	void *busy;
	uint64_t at;

	synth_init(&s, 4096);
	rb_put(&s, 1, 16, 0);
	at = s.prod_local;
	busy = synth_reserve(&s, 16); /* reserved, not committed */
	CHECK(busy);
	rb_put(&s, 3, 16, 0); /* committed behind the busy head */
	CHECK(plb_into_rb(&s.v, &st) == 1 && st.stop == PLB_INTO_EMPTY);
	CHECK(*s.cons == at); /* stopped at the busy head, nothing past it consumed */
	fill(busy, 2, 16);
	synth_commit(&s, busy, 0);
	CHECK(plb_into_rb(&s.v, &st) == 2 && st.n == 3);
	CHECK(same(rows, 1, 16) && same(rows + 16, 2, 16) && same(rows + 32, 3, 16));
	plb_into_release(&st);
	synth_free(&s);
}

static void t_rb_odd(void)
{
	struct synth s;
	uint8_t rows[8 * 16];
	struct plb_into st = into_new(rows, 8, 16);
	uint64_t after_odd;

	synth_init(&s, 4096);
	rb_put(&s, 1, 16, 0);
	rb_put(&s, 2, 300, 0); /* longer: handed back whole */
	after_odd = s.prod_local;
	rb_put(&s, 3, 16, 0);
	rb_put(&s, 4, 5, 0);   /* shorter, and not a multiple of 8 */
	rb_put(&s, 5, 0, 0);   /* empty record */
	rb_put(&s, 6, 16, 0);
	CHECK(plb_into_rb(&s.v, &st) == 1 && st.stop == PLB_INTO_ODD);
	CHECK(st.odd_len == 300 && same(st.odd, 2, 300));
	CHECK(*s.cons == after_odd); /* the odd one consumed, the next not */
	CHECK(plb_into_rb(&s.v, &st) == 1 && st.stop == PLB_INTO_ODD);
	CHECK(st.odd_len == 5 && same(st.odd, 4, 5));
	CHECK(plb_into_rb(&s.v, &st) == 0 && st.stop == PLB_INTO_ODD && st.odd_len == 0);
	CHECK(plb_into_rb(&s.v, &st) == 1 && st.stop == PLB_INTO_EMPTY);
	CHECK(st.n == 3 && same(rows, 1, 16) && same(rows + 16, 3, 16) && same(rows + 32, 6, 16));
	plb_into_release(&st);
	synth_free(&s);
}

/* A run of equal records, the walk's predicted step (plb_rb_expect): every
 * record that is not plainly committed, of the size and below the producer
 * (discarded, busy, another size, a corrupt length) falls back to the full
 * step, after the rows before it. */
static void t_rb_expect(void)
{
	struct synth s;
	uint8_t rows[32 * 24];
	struct plb_into st = into_new(rows, 32, 24);
	uint64_t at, seq;
	uint32_t *hdr;
	void *busy;

	synth_init(&s, 4096);
	for (seq = 0; seq < 10; seq++)
		rb_put(&s, seq, 24, seq == 4); /* seq 4 discarded, same length */
	at = s.prod_local;
	busy = synth_reserve(&s, 24);  /* a busy record of the same length */
	CHECK(busy);
	rb_put(&s, 11, 24, 0);
	CHECK(plb_into_rb(&s.v, &st) == 9 && st.stop == PLB_INTO_EMPTY && st.discarded == 1);
	CHECK(*s.cons == at);
	for (seq = 0; seq < 9; seq++)
		CHECK(same(rows + seq * 24, seq < 4 ? seq : seq + 1, 24));
	fill(busy, 10, 24);
	synth_commit(&s, busy, 0);
	rb_put(&s, 12, 32, 0);         /* another size: handed back */
	rb_put(&s, 13, 24, 0);
	CHECK(plb_into_rb(&s.v, &st) == 2 && st.stop == PLB_INTO_ODD && st.odd_len == 32);
	CHECK(same(rows + 9 * 24, 10, 24) && same(rows + 10 * 24, 11, 24) && same(st.odd, 12, 32));
	rb_put(&s, 14, 24, 0);
	at = s.prod_local;
	rb_put(&s, 15, 24, 0);
	rb_put(&s, 16, 24, 0);
	hdr = (uint32_t *)(void *)(s.data + (at & s.v.mask));
	hdr[0] = 4000;                 /* seq 15's length runs past the producer */
	CHECK(plb_into_rb(&s.v, &st) == 2 && st.stop == PLB_INTO_EMPTY && *s.cons == at);
	CHECK(same(rows + 11 * 24, 13, 24) && same(rows + 12 * 24, 14, 24));
	CHECK(plb_into_rb(&s.v, &st) == -EBADMSG && *s.cons == at && st.n == 13);
	synth_free(&s);

	/* the last record's length says 24 where 16 were reserved: its footprint
	 * (32) runs 8 bytes past the producer */
	synth_init(&s, 4096);
	rb_put(&s, 20, 24, 0);
	at = s.prod_local;
	rb_put(&s, 21, 16, 0);
	hdr = (uint32_t *)(void *)(s.data + (at & s.v.mask));
	hdr[0] = 24;
	st.n = 0;
	CHECK(plb_into_rb(&s.v, &st) == 1 && *s.cons == at && same(rows, 20, 24));
	CHECK(plb_into_rb(&s.v, &st) == -EBADMSG && *s.cons == at && st.n == 1);
	plb_into_release(&st);
	synth_free(&s);
}

static void t_rb_full(void)
{
	struct synth s;
	uint8_t rows[3 * 40];
	struct plb_into st = into_new(rows, 3, 40);
	uint64_t seq, got = 0;

	synth_init(&s, 4096);
	for (seq = 0; seq < 7; seq++)
		rb_put(&s, seq, 40, seq == 2);
	/* 6 committed records (seq 2 discarded) into 3 rows at a time */
	while (got < 6) {
		uint64_t before = *s.cons;
		int n = plb_into_rb(&s.v, &st);

		CHECK(n == 3 && st.n == 3 && st.stop == PLB_INTO_FULL);
		for (int i = 0; i < 3; i++) {
			uint64_t want = got + (uint64_t)i + (got + (uint64_t)i >= 2);

			CHECK(same(rows + 40 * i, want, 40));
		}
		CHECK(*s.cons > before);
		got += 3;
		/* full again: nothing is consumed */
		before = *s.cons;
		CHECK(plb_into_rb(&s.v, &st) == 0 && st.stop == PLB_INTO_FULL && *s.cons == before);
		st.n = 0;
	}
	CHECK(plb_into_rb(&s.v, &st) == 0 && st.stop == PLB_INTO_EMPTY);
	/* zero rows: no-op, nothing consumed */
	rb_put(&s, 9, 40, 0);
	st = into_new(rows, 0, 40);
	CHECK(plb_into_rb(&s.v, &st) == 0 && st.stop == PLB_INTO_FULL && *s.cons != *s.prod);
	plb_into_release(&st);
	synth_free(&s);
}

static void t_rb_wrap(void)
{
	/* Records crossing the end of the data area, at every 8-byte offset,
	 * and positions around the 2^32 and 2^64 wraps. */
	static const uint64_t bases[] = { 0, (1ull << 32) - 4096, UINT64_MAX - 4095 };
	uint8_t rows[4 * 56];

	for (size_t b = 0; b < sizeof(bases) / sizeof(bases[0]); b++) {
		for (uint64_t off = 0; off < 4096; off += 8) {
			struct synth s;
			struct plb_into st = into_new(rows, 4, 56);
			uint64_t start = (bases[b] & ~(uint64_t)4095) + 4096 - 64 + off % 128;

			synth_init(&s, 4096);
			synth_set_pos(&s, start + off);
			for (uint64_t k = 0; k < 4; k++)
				rb_put(&s, start + k, 56, 0);
			CHECK(plb_into_rb(&s.v, &st) == 4);
			for (int k = 0; k < 4; k++)
				CHECK(same(rows + 56 * k, start + (uint64_t)k, 56));
			CHECK(*s.cons == *s.prod);
			plb_into_release(&st);
			synth_free(&s);
		}
	}
}

static void t_rb_bad(void)
{
	struct synth s;
	uint8_t rows[16];
	struct plb_into st = into_new(rows, 1, 16);
	uint32_t *hdr;

	synth_init(&s, 4096);
	CHECK(plb_into_rb(NULL, &st) == -EINVAL);
	CHECK(plb_into_rb(&s.v, NULL) == -EINVAL);
	st.rec_size = 0;
	CHECK(plb_into_rb(&s.v, &st) == -EINVAL);
	st = into_new(NULL, 1, 16);
	CHECK(plb_into_rb(&s.v, &st) == -EINVAL);
	st = into_new(rows, 1, 16);
	st.n = 2;
	CHECK(plb_into_rb(&s.v, &st) == -EINVAL);
	/* a corrupt head: a length running past the producer */
	st = into_new(rows, 1, 16);
	rb_put(&s, 1, 16, 0);
	hdr = (uint32_t *)(void *)s.data;
	hdr[0] = 4000;
	CHECK(plb_into_rb(&s.v, &st) == -EBADMSG && *s.cons == 0 && st.n == 0);
	plb_into_release(&st);
	synth_free(&s);
}

/* ---- BPF ring buffer into columns (st->cols) ---- */

/* The columns of a 40-byte record: its seq (8 bytes), its last 32 bytes as one
 * fixed column, and bytes 8..23 as a string column (cut at a NUL). Checks row
 * `row` against record seq. */
static int cols_same(const struct plb_column *cols, uint64_t row, uint64_t seq)
{
	uint8_t want[40];
	uint32_t len;

	fill(want, seq, 40);
	len = (uint32_t)strnlen((const char *)want + 8, 16);
	return memcmp(cols[0].values + row * 8, want, 8) == 0 &&
	       memcmp(cols[1].values + row * 32, want + 8, 32) == 0 &&
	       (uint32_t)(cols[2].offsets[row + 1] - cols[2].offsets[row]) == len &&
	       memcmp(cols[2].values + cols[2].offsets[row], want + 8, len) == 0;
}

static void cols_init(struct plb_column *cols, struct plb_arrow_array *out, uint64_t cap)
{
	memset(cols, 0, 3 * sizeof(*cols));
	cols[0] = (struct plb_column){ .offset = 0, .size = 8, .kind = PLB_COL_FIXED, .count = 1 };
	cols[1] = (struct plb_column){ .offset = 8, .size = 32, .kind = PLB_COL_FIXED, .count = 32 };
	cols[2] = (struct plb_column){ .offset = 8, .size = 16, .kind = PLB_COL_STRING, .count = 1 };
	CHECK(plb_columns_arrow_alloc(cap, 40, cols, 3, out) == 0);
	CHECK(out->length == (int64_t)cap && cols[2].offsets[0] == 0);
}

static void t_rb_columns(void)
{
	/* Blocks of even records (computed addresses) and uneven ones (a discarded
	 * record, the wrap), an odd record, rows full, then the Arrow lengths. */
	for (uint64_t off = 0; off < 4096; off += 48 * 8 + 8) {
		struct synth s;
		struct plb_column cols[3];
		struct plb_arrow_array out;
		struct plb_into st = into_new(NULL, 0, 40);
		uint64_t seq = 0, rows = 0, want[200];

		cols_init(cols, &out, 150);
		st.cols = cols;
		st.ncols = 3;
		st.rows = 150;
		synth_init(&s, 4096);
		synth_set_pos(&s, off);
		/* 90 records (the ring holds 85 of 48 bytes): fill, drain, fill */
		for (int round = 0; round < 2; round++) {
			for (int k = 0; k < 45; k++, seq++) {
				int discard = seq % 37 == 5;

				rb_put(&s, seq, 40, discard);
				if (!discard)
					want[rows++] = seq;
			}
			if (round == 0) {
				rb_put(&s, 1000, 24, 0); /* odd: stops the fill, handed back */
				CHECK(plb_into_rb(&s.v, &st) > 0 && st.stop == PLB_INTO_ODD);
				CHECK(st.odd_len == 24 && same(st.odd, 1000, 24) && st.n == rows);
			}
		}
		CHECK(plb_into_rb(&s.v, &st) > 0 && st.stop == PLB_INTO_EMPTY && st.n == rows);
		CHECK(*s.cons == *s.prod);
		for (uint64_t r = 0; r < rows; r++)
			CHECK(cols_same(cols, r, want[r]));
		/* more records than rows left (87 rows written): full, the rest stays */
		CHECK(150 - rows < 70);
		for (uint64_t k = 0; k < 70; k++) /* 70 x 48 bytes: the ring holds them */
			rb_put(&s, 500 + k, 40, 0);
		CHECK(plb_into_rb(&s.v, &st) == (int)(150 - rows) && st.stop == PLB_INTO_FULL);
		CHECK(*s.cons != *s.prod);
		for (uint64_t r = rows; r < 150; r++)
			CHECK(cols_same(cols, r, 500 + r - rows));
		plb_columns_arrow_finish(&out, 100, cols, 3);
		CHECK(out.length == 100 && out.children[0]->length == 100);
		CHECK(out.children[1]->length == 100 && out.children[1]->children[0]->length == 3200);
		CHECK(out.children[2]->length == 100 && cols[2].high <= 1);
		out.release(&out);
		plb_into_release(&st);
		synth_free(&s);
	}
	/* columns are for ring buffers only */
	{
		struct plb_column cols[3];
		struct plb_arrow_array out;
		struct plb_into st = into_new(NULL, 4, 40);
		uint8_t page[8192] = { 0 };

		cols_init(cols, &out, 4);
		st.cols = cols;
		st.ncols = 3;
		CHECK(plb_into_perf(page, sizeof(page), &st) == -EINVAL);
		out.release(&out);
	}
}

/* ---- perf rings ---- */

static uint64_t perf_base_size(struct fake_ring *f, uint8_t **base)
{
	/* perf_buffer__buffer() hands out the control page and the data after
	 * it; the merge's source helper reads data_offset from the page. */
	f->page->data_offset = (uint64_t)(f->data - (uint8_t *)f->page);
	*base = (uint8_t *)f->page;
	return f->size;
}

static void t_perf(void)
{
	struct fake_ring f;
	uint8_t rows[8 * 20], raw[64], *base;
	struct plb_into st = into_new(rows, 8, 20);
	size_t size;

	CHECK(plb_into_perf_raw_size(20) == 20 && plb_into_perf_raw_size(21) == 28 &&
	      plb_into_perf_raw_size(4) == 4 && plb_into_perf_raw_size(1) == 4 &&
	      plb_into_perf_raw_size(5) == 12);
	fr_init(&f, 4096, 0);
	size = perf_base_size(&f, &base);
	fill(raw, 1, 20);
	CHECK(fr_sample(&f, 0, raw, 20));
	fill(raw, 2, 17); /* 17 bytes: the same stored size as 20 (20) */
	CHECK(fr_sample(&f, 0, raw, 17));
	fill(raw, 3, 40); /* another size: handed back with its padding */
	CHECK(fr_sample(&f, 0, raw, 40));
	CHECK(fr_lost(&f, 77));
	CHECK(fr_record(&f, PERF_RECORD_COMM, 16, raw, 8)); /* neither: skipped */
	fill(raw, 4, 20);
	CHECK(fr_sample(&f, 0, raw, 20));
	fr_publish(&f);

	CHECK(plb_into_perf(base, size, &st) == 2 && st.stop == PLB_INTO_ODD);
	CHECK(same(rows, 1, 20));
	CHECK(same(rows + 20, 2, 17) && rows[20 + 17] == 0); /* the kernel's zero padding */
	CHECK(st.odd_len == 44 && same(st.odd, 3, 40)); /* raw size: round_up(40 + 4, 8) - 4 */
	CHECK(plb_into_perf(base, size, &st) == 0 && st.stop == PLB_INTO_LOST && st.lost == 77);
	CHECK(plb_into_perf(base, size, &st) == 1 && st.stop == PLB_INTO_EMPTY && st.skipped == 1);
	CHECK(st.n == 3 && same(rows + 40, 4, 20));
	CHECK(f.page->data_tail == f.head);
	plb_into_release(&st);
	fr_free(&f);
}

static void t_perf_wrap_full(void)
{
	uint8_t rows[3 * 100], raw[128], *base;

	for (uint64_t start = 0; start < 1024; start += 8) {
		struct fake_ring f;
		struct plb_into st = into_new(rows, 3, 100);
		uint64_t seq = 0, got = 0, tail;
		size_t size;

		fr_init(&f, 1024, (1ull << 32) - 512 + start);
		size = perf_base_size(&f, &base);
		for (seq = 0; seq < 7; seq++) {
			fill(raw, seq, 100);
			CHECK(fr_sample(&f, 0, raw, 100)); /* 112 bytes: 7 fit in 1024 */
		}
		fr_publish(&f);
		while (got < 7) {
			int n = plb_into_perf(base, size, &st);

			CHECK(n == (got + 3 <= 7 ? 3 : 1));
			for (int i = 0; i < n; i++)
				CHECK(same(rows + 100 * i, got + (uint64_t)i, 100));
			got += (uint64_t)n;
			tail = f.page->data_tail;
			CHECK(tail == f.page->data_head - (7 - got) * 112); /* not one more */
			st.n = 0;
		}
		CHECK(plb_into_perf(base, size, &st) == 0 && st.stop == PLB_INTO_EMPTY);
		plb_into_release(&st);
		fr_free(&f);
	}
}

static void t_perf_bad(void)
{
	struct fake_ring f;
	uint8_t rows[16], *base;
	struct plb_into st = into_new(rows, 1, 16);
	size_t size;
	uint8_t raw[16] = { 0 };

	fr_init(&f, 4096, 0);
	size = perf_base_size(&f, &base);
	CHECK(plb_into_perf(NULL, size, &st) == -EINVAL);
	CHECK(fr_record(&f, PERF_RECORD_SAMPLE, 12, raw, 16)); /* size not a multiple of 8 */
	fr_publish(&f);
	CHECK(plb_into_perf(base, size, &st) == -EBADMSG && f.page->data_tail == 0);
	plb_into_release(&st);
	fr_free(&f);
}

/* ---- the ordered merge ---- */

static uint64_t zero_clock(void *ctx)
{
	(void)ctx;
	return 0;
}

static void t_merge(void)
{
	struct fake_ring f[2];
	struct plb_merge_source src[2];
	struct plb_merge_config cfg;
	struct plb_merge *m;
	uint8_t rows[8 * 20], raw[64], *base;
	uint64_t ts[8];
	uint8_t fl[8];
	struct plb_into st = into_new(rows, 8, 20);
	/* (ring, ts) of the samples, in the order written per ring */
	static const uint64_t ts0[] = { 10, 30, 50 }, ts1[] = { 20, 40 };

	memset(&cfg, 0, sizeof(cfg));
	cfg.ts_mode = PLB_TS_OFFSET;
	cfg.ts_offset = 0;
	cfg.clock = zero_clock;
	for (int r = 0; r < 2; r++) {
		size_t size;

		fr_init(&f[r], 4096, 0);
		size = perf_base_size(&f[r], &base);
		CHECK(plb_merge_source_perf(&src[r], base, size) == 0);
	}
	for (int k = 0; k < 3; k++) {
		fill(raw, ts0[k], 20);
		CHECK(fr_sample(&f[0], 0, raw, 20));
	}
	for (int k = 0; k < 2; k++) {
		fill(raw, ts1[k], k == 1 ? 36 : 20); /* ts 40 has another size */
		CHECK(fr_sample(&f[1], 0, raw, k == 1 ? 36 : 20));
	}
	CHECK(fr_lost(&f[1], 9));
	fr_publish(&f[0]);
	fr_publish(&f[1]);
	m = plb_merge_new(&cfg, src, 2);
	CHECK(m);
	st.perf_pad = 1;
	st.ts = ts;
	st.flags = fl;
	CHECK(plb_into_reserve(&st, 4096) == 0);
	/* only two rows: the merge must not consume a third entry */
	st.rows = 2;
	CHECK(plb_into_merge(m, &st, PLB_MERGE_DRAIN_ALL) == 2 && st.stop == PLB_INTO_FULL);
	CHECK(ts[0] == 10 && ts[1] == 20 && fl[0] == 0 && fl[1] == 0);
	CHECK(same(rows, 10, 20) && same(rows + 20, 20, 20));
	st.rows = 8;
	CHECK(plb_into_merge(m, &st, PLB_MERGE_DRAIN_ALL) == 1 && st.stop == PLB_INTO_ODD);
	CHECK(ts[2] == 30 && same(rows + 40, 30, 20));
	CHECK(st.odd_ts == 40 && st.odd_ring == 1 && st.odd_len == 36 && same(st.odd, 40, 36));
	/* next: ts 50 on ring 0 and the lost notice of ring 1 (in some order) */
	CHECK(plb_into_merge(m, &st, PLB_MERGE_DRAIN_ALL) == 2);
	CHECK(st.n == 5);
	for (int i = 3; i < 5; i++) {
		if (fl[i] & PLB_MERGE_F_LOST) {
			CHECK(ts[i] == 9);
			for (int b = 0; b < 20; b++)
				CHECK(rows[20 * i + b] == 0);
		} else {
			CHECK(ts[i] == 50 && fl[i] == 0 && same(rows + 20 * i, 50, 20));
		}
	}
	CHECK(fl[3] != fl[4]);
	CHECK(plb_into_merge(m, &st, PLB_MERGE_DRAIN_ALL) == 0 && st.stop == PLB_INTO_EMPTY);
	CHECK(f[0].page->data_tail == f[0].head && f[1].page->data_tail == f[1].head);
	plb_merge_free(m);

	/* without a flags column, lost notices are not rows */
	fill(raw, 60, 20);
	CHECK(fr_lost(&f[0], 3));
	CHECK(fr_sample(&f[0], 0, raw, 20));
	fr_publish(&f[0]);
	m = plb_merge_new(&cfg, src, 2);
	CHECK(m);
	st.n = 0;
	st.flags = NULL;
	st.ts = NULL;
	CHECK(plb_into_merge(m, &st, PLB_MERGE_DRAIN_ALL) == 1 && st.n == 1 && same(rows, 60, 20));
	CHECK(plb_into_merge(NULL, &st, 0) == -EINVAL);
	plb_merge_free(m);
	plb_into_release(&st);
	plb_into_release(&st); /* twice: no-op */
	fr_free(&f[0]);
	fr_free(&f[1]);
}

/* Records of a block's size or more make blocks of one record: 600-byte
 * records, a string column among them. */
static void t_rb_columns_big(void)
{
	struct synth s;
	struct plb_column cols[4];
	struct plb_arrow_array out;
	struct plb_into st = into_new(NULL, 0, 600);
	uint64_t want[16], rows = 0;

	memset(cols, 0, sizeof(cols));
	cols[0] = (struct plb_column){ .offset = 0, .size = 8, .kind = PLB_COL_FIXED, .count = 1 };
	cols[1] = (struct plb_column){ .offset = 8, .size = 592, .kind = PLB_COL_FIXED, .count = 592 };
	cols[2] = (struct plb_column){ .offset = 8, .size = 16, .kind = PLB_COL_STRING, .count = 1 };
	cols[3] = (struct plb_column){ .offset = 596, .size = 4, .kind = PLB_COL_FIXED, .count = 1 };
	CHECK(plb_columns_arrow_alloc(16, 600, cols, 4, &out) == 0);
	st.cols = cols;
	st.ncols = 4;
	st.rows = 16;
	synth_init(&s, 8192);
	synth_set_pos(&s, 8192 - 1200); /* the third record wraps */
	for (uint64_t seq = 0; seq < 12; seq++) {
		rb_put(&s, seq, 600, seq == 4); /* seq 4 discarded */
		if (seq != 4)
			want[rows++] = seq;
		if (seq == 7) {
			CHECK(plb_into_rb(&s.v, &st) == 7 && st.stop == PLB_INTO_EMPTY);
			rb_put(&s, 99, 30, 0); /* odd */
		}
	}
	CHECK(plb_into_rb(&s.v, &st) == 0 && st.stop == PLB_INTO_ODD && st.odd_len == 30);
	CHECK(plb_into_rb(&s.v, &st) == 4 && st.n == rows && *s.cons == *s.prod);
	for (uint64_t r = 0; r < rows; r++) {
		uint8_t rec[600];
		uint32_t len;

		fill(rec, want[r], 600);
		len = (uint32_t)strnlen((const char *)rec + 8, 16);
		CHECK(memcmp(cols[0].values + r * 8, rec, 8) == 0);
		CHECK(memcmp(cols[1].values + r * 592, rec + 8, 592) == 0);
		CHECK((uint32_t)(cols[2].offsets[r + 1] - cols[2].offsets[r]) == len);
		CHECK(memcmp(cols[2].values + cols[2].offsets[r], rec + 8, len) == 0);
		CHECK(memcmp(cols[3].values + r * 4, rec + 596, 4) == 0);
	}
	plb_columns_arrow_finish(&out, rows, cols, 4);
	CHECK(out.length == (int64_t)rows && out.children[1]->children[0]->length == (int64_t)rows * 592);
	out.release(&out);
	plb_into_release(&st);
	synth_free(&s);
}

int main(void)
{
	t_rb_basic();
	t_rb_busy();
	t_rb_odd();
	t_rb_expect();
	t_rb_full();
	t_rb_wrap();
	t_rb_bad();
	t_rb_columns();
	t_rb_columns_big();
	t_perf();
	t_perf_wrap_full();
	t_perf_bad();
	t_merge();
	printf("test_into: ok\n");
	return 0;
}
