/* plb_columns.c - records -> columns in one pass (see plb_columns.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "plb_block_internal.h"
#include "plb_columns.h"
#include "plb_vectorise.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define PLB_COL_ALIGN PLB_BLOCK_ALIGN /* 64: Arrow's recommended buffer alignment */

static int check_columns(uint64_t n, uint32_t rec_size, const struct plb_column *cols,
			 uint32_t ncols)
{
	if (n > UINT32_MAX) /* a batch's count is a u32; keeps n * size in 64 bits */
		return -EINVAL;
	for (uint32_t c = 0; c < ncols; c++) {
		const struct plb_column *col = &cols[c];

		if (!col->size || (uint64_t)col->offset + col->size > rec_size)
			return -EINVAL;
		if (col->kind == PLB_COL_STRING) {
			/* int32 offsets: the packed bytes can be up to n * size */
			if (n * (uint64_t)col->size > INT32_MAX)
				return -EINVAL;
		} else if (col->kind != PLB_COL_FIXED) {
			return -EINVAL;
		}
	}
	return 0;
}

/* The index checks below are reductions over every record (plb_vectorise.h). */

PLB_VECTORISE static uint32_t min_u32(const uint32_t *v, uint64_t n)
{
	uint32_t lo = UINT32_MAX;

	for (uint64_t i = 0; i < n; i++)
		lo = v[i] < lo ? v[i] : lo;
	return lo;
}

/* The largest start, and whether starts[i] == starts[0] + i * step for all i. */
PLB_VECTORISE static uint32_t max_start(const uint32_t *starts, uint64_t n, uint32_t step,
					int *even)
{
	uint32_t hi = 0, off = 0, s0 = starts[0];

	for (uint64_t i = 0; i < n; i++) {
		hi = starts[i] > hi ? starts[i] : hi;
		off |= starts[i] ^ (uint32_t)(s0 + (uint32_t)i * step);
	}
	*even = off == 0;
	return hi;
}

/* Every record at least rec_size long (else -EMSGSIZE and the shortest) and
 * its rec_size bytes inside base_len (else -EINVAL). A pass over the small
 * index arrays only, before any byte is written. Evenly spaced starts (what
 * the C collectors make of equal records) become *first and *stride, with
 * *starts NULL: the copy loops then compute addresses instead of loading them. */
static int check_records(uint64_t base_len, const uint32_t **starts_p, const uint32_t *lens,
			 uint64_t *first_p, uint64_t *stride_p, uint64_t n, uint32_t rec_size,
			 uint32_t *shortest)
{
	const uint32_t *starts = *starts_p;
	uint64_t first = *first_p, stride = *stride_p;

	if (!n)
		return 0;
	if (lens) {
		uint32_t lo = min_u32(lens, n);

		if (lo < rec_size) {
			if (shortest)
				*shortest = lo;
			return -EMSGSIZE;
		}
	}
	if (rec_size > base_len)
		return -EINVAL;
	if (starts) {
		uint32_t step = n > 1 && starts[1] >= starts[0] ? starts[1] - starts[0] : 0;
		int even;

		/* base_len - rec_size: the highest valid start */
		if (max_start(starts, n, step, &even) > base_len - rec_size)
			return -EINVAL;
		/* compared in 32 bits above: they are starts[0] + i * step exactly
		 * when that sum never passes 2^32 - 1 */
		if (even && (n == 1 || (uint64_t)starts[0] + (n - 1) * (uint64_t)step <= UINT32_MAX)) {
			*starts_p = NULL;
			*first_p = starts[0];
			*stride_p = step;
		}
		return 0;
	}
	/* first + (n - 1) * stride + rec_size <= base_len, without overflow */
	if (first > base_len - rec_size)
		return -EINVAL;
	if (stride && n - 1 > (base_len - rec_size - first) / stride)
		return -EINVAL;
	return 0;
}

/* Records [i0, i1) of one FIXED column of size bytes at offset off. One
 * loop per usual size, so that each copy is a single load and store with
 * everything in registers (a byte store may alias anything, so a general
 * loop would reload its descriptor after every value). */
#define PLB_FIXED_LOOP(SIZE)                                                             \
	do {                                                                             \
		if (starts)                                                              \
			for (uint64_t i = i0; i < i1; i++)                               \
				memcpy(out + i * (SIZE), base + starts[i] + off, (SIZE)); \
		else                                                                     \
			for (uint64_t i = i0; i < i1; i++)                               \
				memcpy(out + i * (SIZE), base + first + i * stride + off, \
				       (SIZE));                                          \
	} while (0)

/* An 8-byte column by stride, two records at a time: their values paired
 * into one 16-byte store. Stores bound these loops (a record's fields are
 * already in L1 after the block's first column): the benchmark's 32-byte
 * record (u64, u64, u8[16]) into columns, C alone, 1.0 -> 0.83 ns, and 0.70
 * with fixed8x2_strided; in the benchmark's drain to_arrow +11%, read_arrow
 * +5-10% (docs/performance.md). SSE2 is part of every x86-64; elsewhere the
 * scalar loop does it all. */
static void fixed8_strided(uint8_t *restrict out, const uint8_t *restrict src, uint64_t stride,
			   uint64_t i0, uint64_t i1)
{
	uint64_t i = i0;
#ifdef __SSE2__
	for (; i + 2 <= i1; i += 2) {
		__m128i a = _mm_loadl_epi64((const __m128i *)(src + i * stride));
		__m128i b = _mm_loadl_epi64((const __m128i *)(src + (i + 1) * stride));

		_mm_storeu_si128((__m128i *)(out + i * 8), _mm_unpacklo_epi64(a, b));
	}
#endif
	for (; i < i1; i++)
		memcpy(out + i * 8, src + i * stride, 8);
}

/* Two 8-byte columns side by side in the record (offsets off, off + 8), two
 * records at a time: one 16-byte load a record, the halves paired across the
 * two records, one 16-byte store a column. */
static void fixed8x2_strided(uint8_t *restrict out0, uint8_t *restrict out1,
			     const uint8_t *restrict src, uint64_t stride, uint64_t k)
{
	uint64_t i = 0;
#ifdef __SSE2__
	for (; i + 2 <= k; i += 2) {
		__m128i a = _mm_loadu_si128((const __m128i *)(src + i * stride));
		__m128i b = _mm_loadu_si128((const __m128i *)(src + (i + 1) * stride));

		_mm_storeu_si128((__m128i *)(out0 + i * 8), _mm_unpacklo_epi64(a, b));
		_mm_storeu_si128((__m128i *)(out1 + i * 8), _mm_unpackhi_epi64(a, b));
	}
#endif
	for (; i < k; i++) {
		memcpy(out0 + i * 8, src + i * stride, 8);
		memcpy(out1 + i * 8, src + i * stride + 8, 8);
	}
}

static void fixed_block(uint8_t *restrict out, const uint8_t *restrict base,
			const uint32_t *restrict starts, uint64_t first, uint64_t stride,
			uint64_t i0, uint64_t i1, uint32_t off, uint32_t size)
{
	switch (size) {
	case 1: PLB_FIXED_LOOP(1); break;
	case 2: PLB_FIXED_LOOP(2); break;
	case 4: PLB_FIXED_LOOP(4); break;
	case 8:
		if (!starts)
			fixed8_strided(out, base + first + off, stride, i0, i1);
		else
			PLB_FIXED_LOOP(8);
		break;
	case 16: PLB_FIXED_LOOP(16); break;
	default: PLB_FIXED_LOOP(size); break;
	}
}

/* Records [i0, i1) of one STRING column: the bytes of each char[size] before
 * its first NUL, appended from offsets[i]; returns the OR of those bytes
 * (bit 7 set: not plain ASCII). */
static uint8_t string_block(uint8_t *restrict values, int32_t *restrict offsets,
			    const uint8_t *restrict base, const uint32_t *restrict starts,
			    uint64_t first, uint64_t stride, uint64_t i0, uint64_t i1, uint32_t off,
			    uint32_t size)
{
	int32_t at = offsets[i0];
	uint8_t any = 0;

	for (uint64_t i = i0; i < i1; i++) {
		const uint8_t *src = base + (starts ? starts[i] : first + i * stride) + off;
		const uint8_t *nul = memchr(src, 0, size);
		uint32_t len = nul ? (uint32_t)(nul - src) : size;

		memcpy(values + at, src, len);
		for (uint32_t k = 0; k < len; k++)
			any |= src[k];
		at += (int32_t)len;
		offsets[i + 1] = at;
	}
	return any;
}

/* Bytes of records one block covers: the block's records stay in L1 while
 * each of its columns is written, so the records are fetched from memory
 * once however many fields they have. */
#define PLB_BLOCK_BYTES 16384

/* Before the first row: no string bytes kept yet (offsets[0] = 0), .high
 * the OR of the kept string bytes, 0 so far. */
static void columns_start(struct plb_column *cols, uint32_t ncols)
{
	for (uint32_t c = 0; c < ncols; c++) {
		cols[c].high = 0;
		if (cols[c].kind == PLB_COL_STRING)
			cols[c].offsets[0] = 0;
	}
}

/* After the last row: .high reduced to a flag (a kept byte >= 0x80). */
static void columns_end(struct plb_column *cols, uint32_t ncols)
{
	for (uint32_t c = 0; c < ncols; c++)
		cols[c].high = (cols[c].high & 0x80) != 0;
}

/* One record, row `row` of each column: the block loops over one record at
 * rec (stride 0), without the block's offsets (see plb_columns.h). */
void plb_columns_put_one(const uint8_t *rec, uint64_t row, struct plb_column *cols, uint32_t ncols)
{
	for (uint32_t c = 0; c < ncols; c++) {
		struct plb_column *col = &cols[c];

		if (col->kind == PLB_COL_FIXED)
			fixed_block(col->values, rec, NULL, 0, 0, row, row + 1, col->offset, col->size);
		else
			col->high |= string_block(col->values, col->offsets + row, rec, NULL, 0, 0, 0, 1,
						  col->offset, col->size);
	}
}

static void scatter(const uint8_t *base, const uint32_t *starts, uint64_t first, uint64_t stride,
		    uint64_t n, uint32_t rec_size, struct plb_column *cols, uint32_t ncols)
{
	uint64_t per_block = rec_size < PLB_BLOCK_BYTES ? PLB_BLOCK_BYTES / rec_size : 1;

	columns_start(cols, ncols);
	/* block by block of records (plb_columns_put: column by column within one) */
	for (uint64_t i0 = 0; i0 < n; i0 += per_block)
		plb_columns_put(base, starts ? starts + i0 : NULL, first + i0 * stride, stride,
				n - i0 < per_block ? n - i0 : per_block, i0, cols, ncols);
	columns_end(cols, ncols);
}

int plb_columns_scatter(const uint8_t *base, uint64_t base_len, const uint32_t *starts,
			const uint32_t *lens, uint64_t first, uint64_t stride, uint64_t n,
			uint32_t rec_size, struct plb_column *cols, uint32_t ncols,
			uint32_t *shortest)
{
	int err = check_columns(n, rec_size, cols, ncols);

	if (!err)
		err = check_records(base_len, &starts, lens, &first, &stride, n, rec_size, shortest);
	if (err)
		return err;
	scatter(base, starts, first, stride, n, rec_size, cols, ncols);
	return 0;
}

/* --- the Arrow C data interface view ------------------------------------------------------ */

/* The block's head: every array of the batch but the top one (which is the
 * caller's), and a count of the arrays not released yet. A consumer may move
 * a child out and release the parent first (the C data interface allows it),
 * so the block is freed when the last array referring to it is released:
 * kept as a spare for the next RecordBatch of about its size
 * (plb_block_internal.h), or freed. read_arrow's blocks, a little under a
 * huge page, are mappings of their own (plb_block_new). */
struct plb_columns_block {
	struct plb_block base;
	int64_t refs;
	uint32_t narrays;
	struct plb_arrow_array *arrays; /* in the block */
};

/* Released column blocks: the next allocation takes one when it needs between
 * half its size and its size (a caller may keep a small RecordBatch for long:
 * it must not pin a large block). */
static struct plb_spare columns_spare;

static void block_unref(struct plb_columns_block *blk)
{
	if (__atomic_sub_fetch(&blk->refs, 1, __ATOMIC_ACQ_REL) == 0)
		plb_block_put(&columns_spare, &blk->base);
}

/* Release an array: its children first (those not moved out nor released),
 * then its reference to the block. */
static void array_release(struct plb_arrow_array *a)
{
	for (int64_t k = 0; k < a->n_children; k++)
		if (a->children[k]->release)
			a->children[k]->release(a->children[k]);
	a->release = NULL;
	block_unref(a->private_data);
}

static uint64_t align_up(uint64_t x)
{
	return (x + PLB_COL_ALIGN - 1) & ~(uint64_t)(PLB_COL_ALIGN - 1);
}

static void array_init(struct plb_arrow_array *a, struct plb_columns_block *blk, int64_t length,
		       const void **buffers, int64_t n_buffers, struct plb_arrow_array **children,
		       int64_t n_children)
{
	a->length = length;
	a->null_count = 0;
	a->offset = 0;
	a->n_buffers = n_buffers;
	a->n_children = n_children;
	a->buffers = buffers;
	a->children = children;
	a->dictionary = NULL;
	a->release = array_release;
	a->private_data = blk;
	buffers[0] = NULL; /* no validity bitmap: no nulls */
}

/* The block for n rows of the (checked) columns, and *out describing it;
 * cols[].values/.offsets point into it. 0, -EINVAL or -ENOMEM. */
static int columns_alloc(uint64_t n, struct plb_column *cols, uint32_t ncols,
			 struct plb_arrow_array *out)
{
	uint64_t narrays = ncols, nslots = 1 + ncols, data = 0, head;
	struct plb_columns_block *blk;
	struct plb_arrow_array *arr;
	const void **slot;
	uint8_t *mem;

	/* n <= 2^32 and size < 2^32: each column's bytes fit in 64 bits; the sum is checked */
	for (uint32_t c = 0; c < ncols; c++) {
		const struct plb_column *col = &cols[c];
		uint64_t bytes = align_up(n * col->size);

		if (col->kind == PLB_COL_STRING) {
			bytes += align_up((n + 1) * sizeof(int32_t));
			nslots += 3;
		} else if (col->count > 1) {
			if (col->size % col->count)
				return -EINVAL;
			narrays++;           /* the list's child */
			nslots += 1 + 1 + 2; /* list buffers, its children pointer, child buffers */
		} else {
			nslots += 2;
		}
		if (__builtin_add_overflow(data, bytes, &data))
			return -ENOMEM;
	}
	head = align_up(sizeof(*blk) + narrays * sizeof(*arr) + nslots * sizeof(void *));
	if (__builtin_add_overflow(head, data, &data) || data > SIZE_MAX)
		return -ENOMEM;
	blk = (struct plb_columns_block *)plb_block_take(&columns_spare, data, 2 * data);
	if (!blk && !(blk = (struct plb_columns_block *)plb_block_new(data))) /* data >= head > 0 */
		return -ENOMEM;
	mem = (uint8_t *)blk;
	arr = (struct plb_arrow_array *)(mem + sizeof(*blk));
	slot = (const void **)(arr + narrays);
	blk->narrays = (uint32_t)narrays;
	blk->arrays = arr;
	blk->refs = 1 + (int64_t)narrays; /* the top array and every other one */

	/* the top array: a struct array, one child per column */
	struct plb_arrow_array **top_children = (struct plb_arrow_array **)slot;
	slot += ncols;
	array_init(out, blk, (int64_t)n, slot, 1, top_children, ncols);
	slot += 1;

	uint8_t *p = mem + head;
	struct plb_arrow_array *next = arr + ncols; /* the lists' children */

	for (uint32_t c = 0; c < ncols; c++) {
		struct plb_column *col = &cols[c];
		struct plb_arrow_array *a = &arr[c];

		top_children[c] = a;
		col->values = p;
		p += align_up(n * col->size);
		if (col->kind == PLB_COL_STRING) {
			col->offsets = (int32_t *)p;
			p += align_up((n + 1) * sizeof(int32_t));
			array_init(a, blk, (int64_t)n, slot, 3, NULL, 0);
			slot[1] = col->offsets;
			slot[2] = col->values;
			slot += 3;
		} else if (col->count > 1) {
			struct plb_arrow_array **kids = (struct plb_arrow_array **)slot;

			slot += 1;
			array_init(a, blk, (int64_t)n, slot, 1, kids, 1);
			slot += 1;
			kids[0] = next;
			array_init(next, blk, (int64_t)(n * col->count), slot, 2, NULL, 0);
			slot[1] = col->values;
			slot += 2;
			next++;
		} else {
			col->offsets = NULL;
			array_init(a, blk, (int64_t)n, slot, 2, NULL, 0);
			slot[1] = col->values;
			slot += 2;
		}
	}
	return 0;
}

int plb_columns_arrow(const uint8_t *base, uint64_t base_len, const uint32_t *starts,
		      const uint32_t *lens, uint64_t first, uint64_t stride, uint64_t n,
		      uint32_t rec_size, struct plb_column *cols, uint32_t ncols,
		      uint32_t *shortest, struct plb_arrow_array *out)
{
	int err = check_columns(n, rec_size, cols, ncols);

	if (!err)
		err = check_records(base_len, &starts, lens, &first, &stride, n, rec_size, shortest);
	if (!err)
		err = columns_alloc(n, cols, ncols, out);
	if (err)
		return err;
	scatter(base, starts, first, stride, n, rec_size, cols, ncols);
	return 0;
}

/* --- columns filled as records are read ---------------------------------------------------- */

int plb_columns_arrow_alloc(uint64_t cap, uint32_t rec_size, struct plb_column *cols,
			    uint32_t ncols, struct plb_arrow_array *out)
{
	int err = check_columns(cap, rec_size, cols, ncols);

	if (!err)
		err = columns_alloc(cap, cols, ncols, out);
	if (err)
		return err;
	columns_start(cols, ncols);
	return 0;
}

void plb_columns_put(const uint8_t *base, const uint32_t *starts, uint64_t first, uint64_t stride,
		     uint64_t k, uint64_t row0, struct plb_column *cols, uint32_t ncols)
{
	/* a block of records (PLB_BLOCK_BYTES): column by column, each in a loop
	 * specialised to its size */
	for (uint32_t c = 0; c < ncols; c++) {
		struct plb_column *col = &cols[c];

		/* two 8-byte columns side by side (a u64 after a u64): one pass */
		if (!starts && c + 1 < ncols && col->kind == PLB_COL_FIXED && col->size == 8 &&
		    col[1].kind == PLB_COL_FIXED && col[1].size == 8 && col[1].offset == col->offset + 8) {
			fixed8x2_strided(col->values + row0 * 8, col[1].values + row0 * 8,
					 base + first + col->offset, stride, k);
			c++;
		} else if (col->kind == PLB_COL_FIXED)
			fixed_block(col->values + row0 * col->size, base, starts, first, stride, 0, k,
				    col->offset, col->size);
		else
			col->high |= string_block(col->values, col->offsets + row0, base, starts,
						  first, stride, 0, k, col->offset, col->size);
	}
}

void plb_columns_arrow_finish(struct plb_arrow_array *out, uint64_t n, struct plb_column *cols,
			      uint32_t ncols)
{
	for (uint32_t c = 0; c < ncols; c++) {
		struct plb_arrow_array *a = out->children[c];

		if (cols[c].kind == PLB_COL_FIXED && cols[c].count > 1) /* a fixed_size_list */
			a->children[0]->length = (int64_t)(n * cols[c].count);
		a->length = (int64_t)n;
	}
	out->length = (int64_t)n;
	columns_end(cols, ncols);
}
