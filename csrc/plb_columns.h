/* plb_columns.h - records (rows) -> one contiguous buffer per field (columns),
 * in one pass over the records: what Batch.to_arrow builds Arrow columns from.
 *
 * A batch keeps each record's bytes together; Arrow keeps each field of every
 * record together. plb_columns_scatter walks the records once, in order, and
 * for each record copies every field into its column:
 *   PLB_COL_FIXED   a number or an array of numbers: size bytes per record,
 *                   values[i * size] (an array's elements back to back);
 *   PLB_COL_STRING  a char[size] array cut at its first NUL (all size bytes
 *                   when it has none): the kept bytes packed back to back in
 *                   values, record i's at [offsets[i], offsets[i + 1]) with
 *                   offsets[0] = 0 (Arrow's utf8 layout, int32 offsets).
 *
 * plb_columns_arrow does the same into memory it allocates (one block) and
 * describes the result as an Arrow C data interface struct array (a record
 * batch): a consumer (pyarrow's importer) takes it over and calls its release
 * callback, which frees the block (or keeps it as a spare), once the
 * columns are no longer used.
 *
 * Records: record i starts at base + starts[i] (starts NULL: base + first +
 * i * stride) and is lens[i] bytes long (lens NULL: rec_size). Every record
 * must hold the rec_size bytes the fields lie in (a longer one is cut), and
 * lie inside base_len; nothing is read outside [base, base + base_len).
 *
 * Threads: functions over the caller's memory, run without the GIL; one caller
 * per column array at a time. The one global state is the spare blocks: the
 * largest column block released lately and the last smaller one (at most
 * 4 MiB each), which the next allocation of about their size (need <= its
 * size <= 2 * need) takes instead of new memory; a block of a little under a whole number of huge
 * pages (read_arrow's) is a mapping of its own, advised for transparent huge
 * pages: one page fault at its first touch instead of one a 4 KiB page (both:
 * plb_block_internal.h).
 */
#ifndef PLB_COLUMNS_H
#define PLB_COLUMNS_H

#include <stddef.h>
#include <stdint.h>

enum plb_col_kind {
	PLB_COL_FIXED = 0,
	PLB_COL_STRING = 1,
};

struct plb_column {
	/* in: the field */
	uint32_t offset;    /* its offset in the record */
	uint32_t size;      /* its bytes (a string: the char array's width), >= 1 */
	uint32_t kind;      /* enum plb_col_kind */
	uint32_t count;     /* plb_columns_arrow, FIXED: elements of an array (1: a
			       scalar); the column is then a fixed_size_list of
			       count values of size / count bytes */
	/* in (plb_columns_scatter) or out (plb_columns_arrow): the column's memory */
	uint8_t *values;    /* FIXED: n * size bytes; STRING: room for n * size bytes */
	int32_t *offsets;   /* STRING: n + 1 entries; FIXED: unused */
	/* out */
	uint32_t high;      /* STRING: nonzero when a kept byte is >= 0x80 (the
			       column may hold invalid UTF-8: check it) */
};

/* The Arrow C data interface's ArrowArray (an ABI fixed by Arrow's
 * specification; same layout, our name). */
struct plb_arrow_array {
	int64_t length;
	int64_t null_count;
	int64_t offset;
	int64_t n_buffers;
	int64_t n_children;
	const void **buffers;
	struct plb_arrow_array **children;
	struct plb_arrow_array *dictionary;
	void (*release)(struct plb_arrow_array *);
	void *private_data;
};

/* Copy every field of the n records into cols[0..ncols) (values/offsets in).
 * Returns 0; -EMSGSIZE when a record is shorter than rec_size (*shortest
 * is then the shortest length; nothing written); -EINVAL for a record outside
 * base_len, a field outside rec_size, a size of 0, an unknown kind, or a
 * string column of more than INT32_MAX bytes (n * size); -EINVAL is checked
 * before anything is written. */
int plb_columns_scatter(const uint8_t *base, uint64_t base_len, const uint32_t *starts,
			const uint32_t *lens, uint64_t first, uint64_t stride, uint64_t n,
			uint32_t rec_size, struct plb_column *cols, uint32_t ncols,
			uint32_t *shortest);

/* plb_columns_scatter into one block allocated here (cols[].values and
 * .offsets point into it afterwards), then *out describes the columns as an
 * Arrow struct array of n rows with ncols children (FIXED count 1: a primitive
 * array; count > 1: a fixed_size_list whose child holds n * count values;
 * STRING: utf8), no validity buffers. The caller moves *out to a consumer, or
 * calls out->release itself; the block stays valid until then. Returns what
 * plb_columns_scatter returns, or -ENOMEM, with *out untouched (nothing to
 * release) unless it returns 0. */
int plb_columns_arrow(const uint8_t *base, uint64_t base_len, const uint32_t *starts,
		      const uint32_t *lens, uint64_t first, uint64_t stride, uint64_t n,
		      uint32_t rec_size, struct plb_column *cols, uint32_t ncols,
		      uint32_t *shortest, struct plb_arrow_array *out);

/* The columns filled as records are read, for a reader that copies each
 * record once, from its ring straight into the columns (RingBuffer.read_arrow,
 * through plb_into's cols):
 *
 * plb_columns_arrow_alloc allocates plb_columns_arrow's block for up to cap
 * rows and writes nothing: cols[].values/.offsets point into it (a STRING
 * column's offsets[0] = 0, .high = 0) and *out describes cap rows. Returns 0
 * (the caller owns *out, as after plb_columns_arrow), -EINVAL (the column
 * checks of plb_columns_scatter, with n = cap) or -ENOMEM (*out untouched).
 *
 * plb_columns_put writes k records as rows row0 .. row0 + k - 1: record j at
 * base + starts[j] (starts NULL: base + first + j * stride), holding at least the rec_size bytes the block was made
 * for (the caller checked its length). Rows go in order, each once: a STRING
 * column appends at offsets[row0]. .high keeps the OR of the kept string
 * bytes until plb_columns_arrow_finish.
 *
 * plb_columns_put_one is plb_columns_put for one record at rec, written as
 * row `row`, through the same per-column copy loops: when a reader's block
 * holds one record (plb_into, records over 256 bytes), the block's offsets
 * array and its pairing tests only cost (a 1 KiB record into columns ~14%
 * faster in the benchmark's read_arrow drain than through a block of one,
 * ~2.5% than plb_columns_put with k = 1).
 *
 * plb_columns_arrow_finish cuts *out (and its children) to the n rows
 * written, n <= cap, and turns each .high into 0/1 (1: a kept byte >= 0x80).
 * Only then may *out be handed to a consumer. */
int plb_columns_arrow_alloc(uint64_t cap, uint32_t rec_size, struct plb_column *cols,
			    uint32_t ncols, struct plb_arrow_array *out);
void plb_columns_put(const uint8_t *base, const uint32_t *starts, uint64_t first, uint64_t stride,
		     uint64_t k, uint64_t row0, struct plb_column *cols, uint32_t ncols);
void plb_columns_put_one(const uint8_t *rec, uint64_t row, struct plb_column *cols, uint32_t ncols);
void plb_columns_arrow_finish(struct plb_arrow_array *out, uint64_t n, struct plb_column *cols,
			      uint32_t ncols);

#endif
