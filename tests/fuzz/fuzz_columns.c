/* fuzz_columns.c - libFuzzer target: records -> columns (plb_columns_scatter,
 * plb_columns_arrow) over synthetic records built from the input.
 *
 * The input chooses the record size (1-64 bytes), 0-8 fields (offset, size,
 * kind; a fixed field's element count), 0-40 records (their starts: packed
 * or anywhere, their lengths: the record size, longer, or shorter), how the
 * records are given (starts or a stride) and the bytes of the buffer, which
 * is allocated at exactly its size.
 *
 * Checked against a model (a byte-by-byte walk), besides ASan/UBSan:
 *   - a call is refused exactly when the model refuses it: -EMSGSIZE with the
 *     shortest length when a record is shorter than the event, -EINVAL for a
 *     field outside the record or a record outside the buffer;
 *   - otherwise every value of every column is the record's bytes (strings:
 *     up to the first NUL, offsets consistent) and the non-ASCII flag is the
 *     model's;
 *   - plb_columns_arrow gives the same columns, and releasing its array
 *     frees everything (ASan's leak check).
 */
#include "plb_block.c"
#include "plb_columns.c"
#include "fuzz_common.h"

#define MAXF 8
#define MAXN 40

static uint64_t col_bytes(const struct plb_column *c, uint64_t n)
{
	return n * c->size;
}

/* The model's verdict: 0, -EMSGSIZE (with *shortest) or -EINVAL. */
static int model_check(const struct plb_column *cols, uint32_t ncols, uint64_t base_len,
		       const uint32_t *starts, const uint32_t *lens, uint64_t stride, uint32_t n,
		       uint32_t rec_size, uint32_t *shortest)
{
	for (uint32_t c = 0; c < ncols; c++)
		if (!cols[c].size || cols[c].offset + (uint64_t)cols[c].size > rec_size ||
		    cols[c].kind > PLB_COL_STRING)
			return -EINVAL;
	if (!n)
		return 0;
	if (lens) {
		uint32_t lo = UINT32_MAX;
		for (uint32_t i = 0; i < n; i++)
			lo = lens[i] < lo ? lens[i] : lo;
		if (lo < rec_size) {
			*shortest = lo;
			return -EMSGSIZE;
		}
	}
	for (uint32_t i = 0; i < n; i++) {
		uint64_t at = starts ? starts[i] : i * stride;
		if (at + rec_size > base_len)
			return -EINVAL;
	}
	return 0;
}

static void model_compare(const struct plb_column *cols, uint32_t ncols, const uint8_t *base,
			  const uint32_t *starts, uint64_t stride, uint32_t n)
{
	for (uint32_t c = 0; c < ncols; c++) {
		const struct plb_column *col = &cols[c];
		uint8_t high = 0;

		if (col->kind == PLB_COL_STRING)
			CHECK(col->offsets[0] == 0);
		for (uint32_t i = 0; i < n; i++) {
			const uint8_t *src = base + (starts ? starts[i] : i * stride) + col->offset;

			if (col->kind == PLB_COL_FIXED) {
				CHECK(memcmp(col->values + (uint64_t)i * col->size, src, col->size) == 0);
				continue;
			}
			uint32_t len = 0;
			while (len < col->size && src[len])
				high |= src[len++];
			CHECK(col->offsets[i + 1] - col->offsets[i] == (int32_t)len);
			CHECK(memcmp(col->values + col->offsets[i], src, len) == 0);
		}
		if (col->kind == PLB_COL_STRING)
			CHECK(col->high == ((high & 0x80) != 0));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz f = { data, size };
	struct plb_column cols[MAXF], acols[MAXF];
	uint32_t starts[MAXN], lens[MAXN];
	uint32_t rec_size = 1 + fz_u8(&f) % 64;
	uint32_t ncols = fz_u8(&f) % (MAXF + 1);
	uint32_t n = fz_u8(&f) % (MAXN + 1);
	uint8_t how = fz_u8(&f);
	int by_starts = how & 1, with_lens = by_starts || (how & 2);
	uint64_t stride = rec_size + (how >> 2) % 9, at = 0, base_len;

	memset(cols, 0, sizeof(cols));
	for (uint32_t c = 0; c < ncols; c++) {
		uint8_t k = fz_u8(&f);
		cols[c].offset = fz_u8(&f) % 72;
		cols[c].size = fz_u8(&f) % 72;
		cols[c].kind = k & 1 ? PLB_COL_STRING : PLB_COL_FIXED;
		if (k == 0xff)
			cols[c].kind = 2; /* unknown */
		cols[c].count = 1 + (k >> 1) % 4;
		if (cols[c].kind == PLB_COL_FIXED && cols[c].size % cols[c].count)
			cols[c].count = 1;
	}
	for (uint32_t i = 0; i < n; i++) {
		uint8_t s = fz_u8(&f);
		lens[i] = rec_size;
		if (s & 1)
			lens[i] = rec_size + (s >> 1) % 16;
		else if ((s & 7) == 2)
			lens[i] = (s >> 3) % (rec_size + 1); /* maybe shorter */
		starts[i] = (s & 0x40) ? fz_u8(&f) : (uint32_t)at; /* anywhere, or packed */
		at = starts[i] + ((lens[i] + 7) & ~7u);
	}
	base_len = by_starts ? at + fz_u8(&f) % 16 : n * stride + fz_u8(&f) % 4;
	if (!by_starts && fz_u8(&f) & 1 && base_len)
		base_len--; /* one byte short, sometimes */
	uint8_t *base = malloc(base_len ? base_len : 1);
	CHECK(base);
	fz_bytes(&f, base, base_len);
	const uint32_t *sp = by_starts ? starts : NULL;
	const uint32_t *lp = with_lens ? lens : NULL;

	uint32_t want_short = 0, got_short = 0;
	int want = model_check(cols, ncols, base_len, sp, lp, stride, n, rec_size, &want_short);

	for (uint32_t c = 0; c < ncols; c++) {
		cols[c].values = malloc(col_bytes(&cols[c], n) + !col_bytes(&cols[c], n));
		cols[c].offsets = malloc((n + 1) * sizeof(int32_t));
		CHECK(cols[c].values && cols[c].offsets);
	}
	int got = plb_columns_scatter(base, base_len, sp, lp, 0, stride, n, rec_size, cols, ncols,
				      &got_short);
	CHECK(got == want);
	if (got == -EMSGSIZE)
		CHECK(got_short == want_short);
	if (!got)
		model_compare(cols, ncols, base, sp, stride, n);

	struct plb_arrow_array out;

	memset(&out, 0, sizeof(out));
	memcpy(acols, cols, sizeof(acols));
	got = plb_columns_arrow(base, base_len, sp, lp, 0, stride, n, rec_size, acols, ncols,
				&got_short, &out);
	CHECK(got == want);
	if (!got) {
		CHECK(out.release && out.length == n && out.n_children == ncols);
		model_compare(acols, ncols, base, sp, stride, n);
		out.release(&out);
		CHECK(!out.release);
	} else {
		CHECK(!out.release);
	}
	for (uint32_t c = 0; c < ncols; c++) {
		free(cols[c].values);
		free(cols[c].offsets);
	}
	free(base);
	return 0;
}
