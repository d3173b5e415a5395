/* test_columns.c - records -> columns (csrc/plb_columns.c) over synthetic
 * records: every value of every column against a byte-by-byte model, by
 * start offsets and by stride, records longer than the event (cut), strings
 * cut at their first NUL or full width, the non-ASCII flag, what is refused
 * (short records, records or fields out of bounds, bad kinds) before anything
 * is written, and the Arrow view: its shape, and a block freed exactly once
 * whichever way it is released (top first, a child moved out and released
 * after the parent), 8-byte columns paired across two records, and the spare
 * block kept for the next allocation. ASan checks every access and the leaks.
 * Unity build: includes the code under test. */
#include "../../csrc/plb_block.c"
#include "../../csrc/plb_columns.c"

#include <stdio.h>

#include "check.h"

#define NREC 37
#define REC 40      /* the event: u8 @0, u16 @2, u32 @4, u64 @8, char[12] @16, u16[4] @28, u32 @36 */
#define NCOLS 7

static const struct plb_column FIELDS[NCOLS] = {
	{ .offset = 0, .size = 1, .kind = PLB_COL_FIXED, .count = 1 },
	{ .offset = 2, .size = 2, .kind = PLB_COL_FIXED, .count = 1 },
	{ .offset = 4, .size = 4, .kind = PLB_COL_FIXED, .count = 1 },
	{ .offset = 8, .size = 8, .kind = PLB_COL_FIXED, .count = 1 },
	{ .offset = 16, .size = 12, .kind = PLB_COL_STRING, .count = 12 },
	{ .offset = 28, .size = 8, .kind = PLB_COL_FIXED, .count = 4 },
	{ .offset = 36, .size = 4, .kind = PLB_COL_FIXED, .count = 1 },
};

/* Record i's bytes: a pattern, with a string of length i % 14 (12 and 13:
 * full width, no NUL) and a non-ASCII byte in record 20's string only. */
static void fill(uint8_t *p, uint32_t i, uint32_t len)
{
	for (uint32_t k = 0; k < len; k++)
		p[k] = (uint8_t)(i * 13u + k * 5u + 1u) & 0x7f;
	uint32_t slen = i % 14;
	for (uint32_t k = 0; k < 12; k++)
		p[16 + k] = k < slen ? (uint8_t)('a' + (i + k) % 26) : (k == slen ? 0 : 'z');
	if (i == 20)
		p[16] = 0xc3;
}

/* n records, each len[i] bytes (>= REC), 8-aligned starts, in one exact-size malloc. */
struct recs {
	uint8_t *base;
	uint64_t size;
	uint32_t starts[NREC], lens[NREC];
};

static void recs_make(struct recs *r, uint32_t extra_every)
{
	uint64_t at = 0;

	for (uint32_t i = 0; i < NREC; i++) {
		r->lens[i] = REC + (extra_every && i % extra_every == 0 ? 5 + i : 0);
		r->starts[i] = (uint32_t)at;
		at += (r->lens[i] + 7) & ~7u;
	}
	r->size = r->starts[NREC - 1] + r->lens[NREC - 1];
	r->base = malloc(r->size);
	CHECK(r->base);
	for (uint32_t i = 0; i < NREC; i++)
		fill(r->base + r->starts[i], i, r->lens[i]);
}

/* Every column against the records, value by value. */
static void check_columns_model(const struct plb_column *cols, const uint8_t *base,
				const uint32_t *starts, uint64_t stride, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *rec = base + (starts ? starts[i] : i * stride);

		for (uint32_t c = 0; c < NCOLS; c++) {
			const struct plb_column *col = &cols[c];
			const uint8_t *src = rec + col->offset;

			if (col->kind == PLB_COL_FIXED) {
				CHECK(memcmp(col->values + (uint64_t)i * col->size, src, col->size) == 0);
				continue;
			}
			uint32_t len = 0;
			while (len < col->size && src[len])
				len++;
			CHECK(col->offsets[i + 1] - col->offsets[i] == (int32_t)len);
			CHECK(memcmp(col->values + col->offsets[i], src, len) == 0);
		}
	}
	CHECK(cols[4].offsets[0] == 0);
}

static void alloc_columns(struct plb_column *cols, uint32_t n)
{
	memcpy(cols, FIELDS, sizeof(FIELDS));
	for (uint32_t c = 0; c < NCOLS; c++) {
		/* exact sizes: one value too many is an ASan report */
		cols[c].values = malloc((uint64_t)n * cols[c].size);
		CHECK(cols[c].values);
		cols[c].offsets = cols[c].kind == PLB_COL_STRING ? malloc((n + 1) * sizeof(int32_t)) : NULL;
	}
}

static void free_columns(struct plb_column *cols)
{
	for (uint32_t c = 0; c < NCOLS; c++) {
		free(cols[c].values);
		free(cols[c].offsets);
	}
}

static void test_scatter_by_starts(void)
{
	struct recs r;
	struct plb_column cols[NCOLS];
	uint32_t shortest = 0;

	recs_make(&r, 3); /* every third record longer than the event: cut */
	alloc_columns(cols, NREC);
	CHECK(plb_columns_scatter(r.base, r.size, r.starts, r.lens, 0, 0, NREC, REC, cols, NCOLS,
				  &shortest) == 0);
	check_columns_model(cols, r.base, r.starts, 0, NREC);
	CHECK(cols[4].high == 1);

	/* without record 20, no non-ASCII byte is kept */
	CHECK(plb_columns_scatter(r.base, r.size, r.starts, r.lens, 0, 0, 20, REC, cols, NCOLS,
				  &shortest) == 0);
	CHECK(cols[4].high == 0);
	check_columns_model(cols, r.base, r.starts, 0, 20);
	free_columns(cols);
	free(r.base);
}

static void test_scatter_by_stride(void)
{
	uint8_t *base = malloc(NREC * REC);
	struct plb_column cols[NCOLS];

	CHECK(base);
	for (uint32_t i = 0; i < NREC; i++)
		fill(base + i * REC, i, REC);
	alloc_columns(cols, NREC);
	CHECK(plb_columns_scatter(base, NREC * REC, NULL, NULL, 0, REC, NREC, REC, cols, NCOLS,
				  NULL) == 0);
	check_columns_model(cols, base, NULL, REC, NREC);
	/* one byte short of the last record: refused, nothing read past the end */
	CHECK(plb_columns_scatter(base, NREC * REC - 1, NULL, NULL, 0, REC, NREC, REC, cols,
				  NCOLS, NULL) == -EINVAL);
	/* no records: nothing read, the string offsets are [0] */
	cols[4].offsets[0] = -1;
	CHECK(plb_columns_scatter(NULL, 0, NULL, NULL, 0, REC, 0, REC, cols, NCOLS, NULL) == 0);
	CHECK(cols[4].offsets[0] == 0);
	free_columns(cols);
	free(base);
}

/* 8-byte columns by stride: two side by side (offsets 0 and 8) go in one
 * pass, two records at a time; one alone (offset 16) pairs two records'
 * values; the same pair declared in the other order, or out of line (by
 * starts), is copied column by column. Odd counts leave one record for the
 * scalar tail. Every value against the record it came from. */
static void test_pairs_of_u64(void)
{
	enum { N = 37, R = 32 };
	uint8_t *base = malloc(N * R);
	uint32_t starts[N];
	uint64_t v[3][N];

	CHECK(base);
	for (uint32_t i = 0; i < N * R; i++)
		base[i] = (uint8_t)(i * 7u + 3u);
	for (uint32_t i = 0; i < N; i++)
		starts[i] = (N - 1 - i) * R; /* out of line: reversed */
	for (int order = 0; order < 3; order++) {
		/* order 0: 0, 8, 16; 1: 8, 0, 16; 2: 0, 8, 16 by starts */
		struct plb_column cols[3] = {
			{ .offset = order == 1 ? 8 : 0, .size = 8, .kind = PLB_COL_FIXED, .count = 1 },
			{ .offset = order == 1 ? 0 : 8, .size = 8, .kind = PLB_COL_FIXED, .count = 1 },
			{ .offset = 16, .size = 8, .kind = PLB_COL_FIXED, .count = 1 },
		};

		for (uint64_t n = 1; n <= N; n += N - 2) { /* 1 and 36 records; then 37 below */
			for (int c = 0; c < 3; c++)
				cols[c].values = (uint8_t *)v[c];
			memset(v, 0xee, sizeof(v));
			CHECK(plb_columns_scatter(base, N * R, order == 2 ? starts : NULL, NULL, 0,
						  order == 2 ? 0 : R, n, R, cols, 3, NULL) == 0);
			for (uint64_t i = 0; i < n; i++) {
				const uint8_t *rec = base + (order == 2 ? starts[i] : i * R);

				for (int c = 0; c < 3; c++)
					CHECK(memcmp(&v[c][i], rec + cols[c].offset, 8) == 0);
			}
			if (n < N)
				CHECK(v[0][n] == 0xeeeeeeeeeeeeeeeeull && v[1][n] == v[0][n]);
		}
		for (int c = 0; c < 3; c++)
			cols[c].values = (uint8_t *)v[c];
		CHECK(plb_columns_scatter(base, N * R, order == 2 ? starts : NULL, NULL, 0,
					  order == 2 ? 0 : R, N, R, cols, 3, NULL) == 0);
		for (uint64_t i = 0; i < N; i++)
			for (int c = 0; c < 3; c++)
				CHECK(memcmp(&v[c][i], base + (order == 2 ? starts[i] : i * R) + cols[c].offset,
					     8) == 0);
	}
	free(base);
}

static void test_refused_before_writing(void)
{
	struct recs r;
	struct plb_column cols[NCOLS];
	uint32_t shortest = 0;

	recs_make(&r, 0);
	alloc_columns(cols, NREC);
	for (uint32_t c = 0; c < NCOLS; c++)
		memset(cols[c].values, 0xee, (uint64_t)NREC * cols[c].size);

	r.lens[5] = REC - 3;
	r.lens[9] = REC - 1;
	CHECK(plb_columns_scatter(r.base, r.size, r.starts, r.lens, 0, 0, NREC, REC, cols, NCOLS,
				  &shortest) == -EMSGSIZE);
	CHECK(shortest == REC - 3);
	r.lens[5] = r.lens[9] = REC;

	r.starts[NREC - 1] += 1; /* its last byte past base_len */
	CHECK(plb_columns_scatter(r.base, r.size, r.starts, r.lens, 0, 0, NREC, REC, cols, NCOLS,
				  &shortest) == -EINVAL);
	r.starts[NREC - 1] -= 1;

	struct plb_column bad[NCOLS];

	memcpy(bad, cols, sizeof(bad));
	bad[6].offset = 37; /* 37 + 4 > REC */
	CHECK(plb_columns_scatter(r.base, r.size, r.starts, r.lens, 0, 0, NREC, REC, bad, NCOLS,
				  &shortest) == -EINVAL);
	memcpy(bad, cols, sizeof(bad));
	bad[2].size = 0;
	CHECK(plb_columns_scatter(r.base, r.size, r.starts, r.lens, 0, 0, NREC, REC, bad, NCOLS,
				  &shortest) == -EINVAL);
	memcpy(bad, cols, sizeof(bad));
	bad[3].kind = 7;
	CHECK(plb_columns_scatter(r.base, r.size, r.starts, r.lens, 0, 0, NREC, REC, bad, NCOLS,
				  &shortest) == -EINVAL);
	/* a string column whose int32 offsets could overflow */
	CHECK(plb_columns_scatter(r.base, r.size, NULL, NULL, 0, 0, (1u << 31) / 12 + 1, REC, cols,
				  NCOLS, &shortest) == -EINVAL);
	/* a stride that walks past the end */
	CHECK(plb_columns_scatter(r.base, r.size, NULL, NULL, 0, UINT64_MAX / 2, 3, REC, cols,
				  NCOLS, &shortest) == -EINVAL);

	for (uint32_t c = 0; c < NCOLS; c++)
		for (uint64_t k = 0; k < (uint64_t)NREC * cols[c].size; k++)
			CHECK(cols[c].values[k] == 0xee);
	free_columns(cols);
	free(r.base);
}

static void check_arrow_shape(const struct plb_arrow_array *top, const struct plb_column *cols,
			      uint32_t n)
{
	CHECK(top->length == n && top->n_buffers == 1 && top->buffers[0] == NULL);
	CHECK(top->n_children == NCOLS && top->release && !top->dictionary);
	for (uint32_t c = 0; c < NCOLS; c++) {
		const struct plb_arrow_array *a = top->children[c];

		CHECK(a->length == n && a->null_count == 0 && a->offset == 0 && a->buffers[0] == NULL);
		CHECK(a->release);
		if (cols[c].kind == PLB_COL_STRING) {
			CHECK(a->n_buffers == 3 && a->n_children == 0);
			CHECK(a->buffers[1] == cols[c].offsets && a->buffers[2] == cols[c].values);
		} else if (cols[c].count > 1) {
			CHECK(a->n_buffers == 1 && a->n_children == 1);
			const struct plb_arrow_array *k = a->children[0];
			CHECK(k->length == (int64_t)n * cols[c].count && k->n_buffers == 2);
			CHECK(k->buffers[1] == cols[c].values && k->n_children == 0 && k->release);
		} else {
			CHECK(a->n_buffers == 2 && a->n_children == 0 && a->buffers[1] == cols[c].values);
		}
		CHECK(((uintptr_t)cols[c].values & (PLB_COL_ALIGN - 1)) == 0);
	}
}

static void test_arrow(void)
{
	struct recs r;
	struct plb_column cols[NCOLS];
	struct plb_arrow_array top, moved;
	uint32_t shortest = 0;

	recs_make(&r, 4);
	for (int way = 0; way < 3; way++) {
		memcpy(cols, FIELDS, sizeof(FIELDS));
		CHECK(plb_columns_arrow(r.base, r.size, r.starts, r.lens, 0, 0, NREC, REC, cols,
					NCOLS, &shortest, &top) == 0);
		check_arrow_shape(&top, cols, NREC);
		check_columns_model(cols, r.base, r.starts, 0, NREC);
		CHECK(cols[4].high == 1);
		if (way == 0) {
			top.release(&top); /* everything: ASan's leak check sees the block freed */
		} else {
			/* a consumer keeps one child (moved out), releases the parent first */
			struct plb_arrow_array *kid = top.children[way == 1 ? 5 : 2];

			moved = *kid;
			kid->release = NULL;
			top.release(&top);
			CHECK(!top.release);
			/* the moved child's memory is still there until it is released */
			CHECK(memcmp(moved.n_children ? moved.children[0]->buffers[1] : moved.buffers[1],
				     r.base + r.starts[0] + (way == 1 ? 28 : 4), 4) == 0);
			moved.release(&moved);
			CHECK(!moved.release);
		}
	}
	/* refusals leave *out untouched (nothing to release) */
	memcpy(cols, FIELDS, sizeof(FIELDS));
	memset(&top, 0, sizeof(top));
	r.lens[3] = 1;
	CHECK(plb_columns_arrow(r.base, r.size, r.starts, r.lens, 0, 0, NREC, REC, cols, NCOLS,
				&shortest, &top) == -EMSGSIZE);
	CHECK(shortest == 1 && !top.release);
	cols[5].count = 3; /* 8 bytes are not 3 elements */
	r.lens[3] = REC;
	CHECK(plb_columns_arrow(r.base, r.size, r.starts, r.lens, 0, 0, NREC, REC, cols, NCOLS,
				&shortest, &top) == -EINVAL);
	CHECK(!top.release);
	/* an empty batch: valid, zero-length columns, offsets [0] */
	memcpy(cols, FIELDS, sizeof(FIELDS));
	CHECK(plb_columns_arrow(NULL, 0, NULL, NULL, 0, 0, 0, REC, cols, NCOLS, &shortest, &top) == 0);
	check_arrow_shape(&top, cols, 0);
	CHECK(cols[4].offsets[0] == 0);
	top.release(&top);
	free(r.base);
}

/* The spare block: a released block comes back to the next allocation of
 * about its size (the same memory), not to a much smaller one; of two
 * released blocks the larger is kept; one above PLB_BLOCK_SPARE_MAX is freed.
 * The spare is emptied at the end, so ASan's leak check sees every block. */
static uint8_t *spare_alloc(uint64_t rows, struct plb_arrow_array *out)
{
	struct plb_column col = { .offset = 0, .size = 8, .kind = PLB_COL_FIXED, .count = 1 };

	CHECK(plb_columns_arrow_alloc(rows, 8, &col, 1, out) == 0);
	memset(col.values, 0x5a, rows * 8); /* the whole block is writable (ASan) */
	return col.values;
}

static void test_spare(void)
{
	struct plb_arrow_array a, b, c, big;
	uint8_t *pa, *pb, *pc;

	plb_block_spare_free(&columns_spare); /* from the tests before */
	pa = spare_alloc(1000, &a);
	a.release(&a);
	CHECK(columns_spare.large != NULL && columns_spare.small == NULL);
	CHECK(spare_alloc(1000, &a) == pa); /* the same block again */
	CHECK(columns_spare.large == NULL);
	a.release(&a);
	CHECK(spare_alloc(600, &b) == pa);  /* fewer rows: within twice their size, reused */
	b.release(&b);
	pb = spare_alloc(100, &b);          /* far smaller: a block of its own */
	CHECK(pb != pa && columns_spare.large != NULL);
	CHECK(spare_alloc(1000, &a) == pa);
	b.release(&b);                      /* parked */
	a.release(&a);                      /* the larger: the large spare, b the small one */
	CHECK(spare_alloc(1000, &a) == pa && spare_alloc(100, &b) == pb); /* both come back */
	b.release(&b);
	a.release(&a);
	pc = spare_alloc(200, &c);          /* neither fits 200 rows: a third block */
	CHECK(pc != pa && pc != pb);
	c.release(&c);                      /* the small spare now, b freed */
	CHECK(spare_alloc(200, &c) == pc && spare_alloc(1000, &a) == pa);
	c.release(&c);
	a.release(&a);
	spare_alloc((PLB_BLOCK_SPARE_MAX >> 3) + 1, &big); /* too large to keep */
	CHECK(columns_spare.large != NULL);               /* the parked block stayed */
	big.release(&big);
	CHECK(spare_alloc(1000, &a) == pa);
	a.release(&a);
	plb_block_spare_free(&columns_spare);
	CHECK(columns_spare.large == NULL && columns_spare.small == NULL);
}

/* A block of a little under a huge page is a mapping of its own, aligned to
 * the huge page (plb_block_new); it is parked and reused like any block, and
 * unmapped when displaced by a larger one. One just over a huge page (most
 * of a second one would be wasted) and a small one come from malloc. */
static void test_huge_block(void)
{
	struct plb_arrow_array a, b;
	uint64_t rows = (PLB_BLOCK_HUGE - 4096) / 8; /* the head and alignment fit in the rest */
	unsigned char vec[1];
	uint8_t *pa;
	void *blk_a;

	pa = spare_alloc(rows, &a);
	blk_a = a.private_data;
	CHECK(((struct plb_block *)blk_a)->mapped == PLB_BLOCK_HUGE);
	CHECK((uintptr_t)blk_a % PLB_BLOCK_HUGE == 0);
	a.release(&a);
	CHECK(columns_spare.large == blk_a);
	CHECK(spare_alloc(rows, &a) == pa); /* parked, reused */
	spare_alloc(PLB_BLOCK_HUGE / 8 + 64, &b); /* just over a huge page: malloc's */
	CHECK(((struct plb_block *)b.private_data)->mapped == 0);
	b.release(&b);
	CHECK(mincore(blk_a, 4096, vec) == 0); /* still mapped, still a's */
	a.release(&a); /* smaller than the large spare: the small one */
	CHECK(columns_spare.large && columns_spare.large->mapped == 0 && columns_spare.small == blk_a);
	spare_alloc(1000, &b); /* small: malloc's; released, it displaces a's block, which is unmapped */
	CHECK(((struct plb_block *)b.private_data)->mapped == 0);
	b.release(&b);
	CHECK(mincore(blk_a, 4096, vec) == -1 && errno == ENOMEM);
	plb_block_spare_free(&columns_spare);
}

int main(void)
{
	test_scatter_by_starts();
	test_scatter_by_stride();
	test_pairs_of_u64();
	test_refused_before_writing();
	test_arrow();
	test_spare();
	test_huge_block();
	printf("test_columns: ok\n");
	return 0;
}
