/* plb_into.c - fixed-size records from a ring straight into array rows (see plb_into.h). */
#include "plb_into.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "plb_perfring.h"
#include "plb_ringwalk.h"

uint32_t plb_into_perf_raw_size(uint32_t rec_size)
{
	return (uint32_t)((((uint64_t)rec_size + 4 + 7) & ~(uint64_t)7) - 4);
}

int plb_into_reserve(struct plb_into *st, uint32_t cap)
{
	uint8_t *p;
	uint32_t c;

	if (st->odd_cap >= cap)
		return 0;
	c = st->odd_cap ? st->odd_cap : 256;
	while (c < cap)
		c = c > UINT32_MAX / 2 ? cap : c * 2;
	p = realloc(st->odd, c);
	if (!p)
		return -ENOMEM;
	st->odd = p;
	st->odd_cap = c;
	return 0;
}

void plb_into_release(struct plb_into *st)
{
	if (!st)
		return;
	free(st->odd);
	st->odd = NULL;
	st->odd_cap = 0;
	st->odd_len = 0;
}

static int plb_into_bad(const struct plb_into *st)
{
	return !st || !st->rec_size || st->n > st->rows || (st->rows && !st->out && !st->cols);
}

/* Records plb_into_rb collects before writing them into columns: a block
 * written column by column while it is in L1. 512 bytes measured best (a
 * 1 KiB record is a block of its own; docs/performance.md),
 * and 1 KiB for the records the walk predicts (plb_rb_expect: up to
 * PLB_RB_EXPECT_MAX bytes), whose headers it now reads ahead (32-byte
 * records 2.5 -> 1.8 ns; docs/performance.md). */
#ifndef PLB_INTO_BLOCK_BYTES
#define PLB_INTO_BLOCK_BYTES 512
#endif
#ifndef PLB_INTO_BLOCK_BYTES_EXPECTED
#define PLB_INTO_BLOCK_BYTES_EXPECTED 1024
#endif
#define PLB_INTO_BLOCK_MAX 512

static inline uint8_t *plb_into_row(const struct plb_into *st)
{
	return st->out + st->n * (uint64_t)st->rec_size;
}

/* A block of k ring buffer records of size bytes (their offsets in v->data,
 * in ring order) into rows row0.. of the columns. Records one footprint
 * apart (no discarded record between, no wrap: the last k - 1 footprints
 * after the first) are evenly spaced: the column loops then compute the
 * addresses instead of loading them. */
static void plb_into_put_block(const struct plb_rb_view *v, const uint32_t *block, uint32_t k,
			       uint64_t row0, uint32_t size, struct plb_column *cols, uint32_t ncols)
{
	uint64_t step = plb_rb_record_size(size);

	if (block[k - 1] >= block[0] && block[k - 1] - block[0] == (uint64_t)(k - 1) * step)
		plb_columns_put(v->data, NULL, block[0], step, k, row0, cols, ncols);
	else
		plb_columns_put(v->data, block, 0, 0, k, row0, cols, ncols);
}

int plb_into_rb(struct plb_rb_view *v, struct plb_into *st)
{
	uint64_t start, pos, next, first, prod, row0, n, rows, discarded, step;
	uint32_t block[PLB_INTO_BLOCK_MAX], k = 0, per_block, size, ncols, len;
	struct plb_column *cols;
	const void *data;
	uint8_t *out;
	int rc, err = 0, stop = PLB_INTO_EMPTY;

	if (!v || plb_into_bad(st))
		return -EINVAL;
	/* What the loop reads of *st, in locals: the compiler cannot rule out
	 * that a copy writes *st, and would load every field again after each
	 * record (~0.5 ns of ~4 a 32-byte record into columns). */
	n = first = row0 = st->n;
	rows = st->rows;
	size = st->rec_size;
	out = st->out;
	cols = st->cols;
	ncols = st->ncols;
	discarded = st->discarded;
	step = plb_rb_expect_step(size);
	per_block = step != UINT64_MAX ? PLB_INTO_BLOCK_BYTES_EXPECTED / size
		  : size >= PLB_INTO_BLOCK_BYTES ? 1 : PLB_INTO_BLOCK_BYTES / size;
	if (per_block > PLB_INTO_BLOCK_MAX)
		per_block = PLB_INTO_BLOCK_MAX;
	start = prod = pos = plb_rb_consumer_pos(v);
	for (;;) {
		if (n >= rows) {
			stop = PLB_INTO_FULL;
			break;
		}
		data = plb_rb_expect(v, pos, prod, size, step);
		if (data) {
			next = pos + step;
		} else {
			rc = plb_rb_next_record(v, &pos, &prod, &data, &len, &next, &discarded);
			if (rc != PLB_RB_RECORD) {
				err = rc == PLB_RB_CORRUPT ? -EBADMSG : 0;
				break;
			}
			if (len != size) {
				/* Copy it whole before the commit below frees its space. */
				if (plb_into_reserve(st, len ? len : 1)) {
					err = -ENOMEM;
					break;
				}
				if (len)
					memcpy(st->odd, data, len);
				st->odd_len = len;
				stop = PLB_INTO_ODD;
				pos = next;
				break;
			}
		}
		if (cols && per_block == 1) {
			/* Blocks of one record (records over half a block): straight
			 * into its row, without the block's offsets and loops
			 * (read_arrow's 1 KiB records: 13.4 -> 15.3 M ev/s in the
			 * benchmark's drain). */
			plb_columns_put_one(data, row0, cols, ncols);
			row0++;
		} else if (cols) {
			/* Its offset in the double-mapped data: below 2 * ring <= 2^32
			 * (max_entries is a u32 power of two). */
			block[k++] = (uint32_t)((const uint8_t *)data - v->data);
			if (k == per_block) {
				plb_into_put_block(v, block, k, row0, size, cols, ncols);
				row0 += k;
				k = 0;
			}
		} else {
			memcpy(out + n * size, data, size);
		}
		n++;
		pos = next;
	}
	if (k) /* the records are still ours: not committed yet */
		plb_into_put_block(v, block, k, row0, size, cols, ncols);
	st->n = n;
	st->discarded = discarded;
	st->stop = stop;
	/* One release store: every copy above happens before the producer may
	 * reuse the space. */
	if (pos != start)
		plb_rb_commit(v, pos);
	if (err && st->n == first && st->stop != PLB_INTO_ODD)
		return err;
	return (int)(st->n - first > INT32_MAX ? INT32_MAX : st->n - first);
}

/* The body of a PERF_RECORD_SAMPLE with PERF_SAMPLE_RAW only: u32 size, then
 * size bytes. 0 when the header's size cannot hold them. */
static int plb_into_raw(const struct plb_perfring *r, const struct plb_perf_rec *rec,
			uint32_t *raw_size)
{
	uint32_t sz;

	if (rec->size < sizeof(struct perf_event_header) + 4)
		return 0;
	plb_perfring_read(r, rec->pos + sizeof(struct perf_event_header), &sz, 4);
	if ((uint64_t)sz + 4 + sizeof(struct perf_event_header) > rec->size)
		return 0;
	*raw_size = sz;
	return 1;
}

int plb_into_perf(void *base, size_t size, struct plb_into *st)
{
	struct plb_merge_source src;
	struct plb_perfring r;
	struct plb_perf_rec rec;
	uint64_t first, body;
	uint32_t want, raw;
	int rc, err = 0;

	if (plb_into_bad(st) || st->cols || plb_merge_source_perf(&src, base, size))
		return -EINVAL;
	if (plb_perfring_init(&r, src.page, src.data, src.data_size))
		return -EINVAL;
	first = st->n;
	st->stop = PLB_INTO_EMPTY;
	want = plb_into_perf_raw_size(st->rec_size);
	for (;;) {
		if (st->n >= st->rows) {
			st->stop = PLB_INTO_FULL;
			break;
		}
		rc = plb_perfring_peek_header(&r, &rec);
		if (rc == PLB_PR_EMPTY)
			break;
		if (rc != PLB_PR_RECORD) {
			err = -EBADMSG;
			break;
		}
		body = rec.pos + sizeof(struct perf_event_header);
		if (rec.type == PERF_RECORD_LOST && rec.size >= sizeof(struct perf_event_header) + 16) {
			plb_perfring_read(&r, body + 8, &st->lost, 8); /* {u64 id, u64 lost} */
			st->stop = PLB_INTO_LOST;
			plb_perfring_advance(&r, &rec);
			break;
		}
		if (rec.type != PERF_RECORD_SAMPLE || !plb_into_raw(&r, &rec, &raw)) {
			st->skipped++; /* libbpf's perf_buffer skips these too */
			plb_perfring_advance(&r, &rec);
			continue;
		}
		if (raw != want) {
			if (plb_into_reserve(st, raw ? raw : 1)) {
				err = -ENOMEM;
				break;
			}
			plb_perfring_read(&r, body + 4, st->odd, raw);
			st->odd_len = raw;
			st->stop = PLB_INTO_ODD;
			plb_perfring_advance(&r, &rec);
			break;
		}
		/* Straight into the row, in two pieces if the sample wraps. */
		plb_perfring_read(&r, body + 4, plb_into_row(st), st->rec_size);
		st->n++;
		plb_perfring_advance(&r, &rec);
	}
	plb_perfring_commit(&r);
	plb_perfring_release(&r);
	if (err && st->n == first && st->stop == PLB_INTO_EMPTY)
		return err;
	return (int)(st->n - first > INT32_MAX ? INT32_MAX : st->n - first);
}

/* plb_merge_consume's callback: one entry in merged order. */
static int plb_into_entry(void *ctx, uint32_t ring, uint64_t ts, uint32_t flags,
			  const void *data, uint32_t len)
{
	struct plb_into *st = ctx;
	uint32_t want = st->perf_pad ? plb_into_perf_raw_size(st->rec_size) : st->rec_size;
	uint8_t *row;

	if (flags & PLB_MERGE_F_LOST) {
		if (!st->flags)
			return 0; /* counted by the merge (lost_records, lost_samples) */
		row = plb_into_row(st);
		memset(row, 0, st->rec_size);
	} else if (len != want) {
		/* The entry is taken once we return: keep it whole. */
		uint32_t keep = len;

		if (plb_into_reserve(st, len ? len : 1))
			keep = st->odd_cap; /* not after plb_into_reserve(largest) */
		if (keep)
			memcpy(st->odd, data, keep);
		st->odd_len = len;
		st->odd_ring = ring;
		st->odd_ts = ts;
		st->odd_flags = flags;
		st->stop = PLB_INTO_ODD;
		return 1;
	} else {
		row = plb_into_row(st);
		memcpy(row, data, st->rec_size);
	}
	if (st->ts)
		st->ts[st->n] = ts;
	if (st->flags)
		st->flags[st->n] = (uint8_t)flags;
	st->n++;
	return 0;
}

int plb_into_merge(struct plb_merge *m, struct plb_into *st, uint32_t flags)
{
	uint64_t first, left;
	int rc;

	if (!m || plb_into_bad(st) || st->cols)
		return -EINVAL;
	first = st->n;
	st->stop = PLB_INTO_EMPTY;
	left = st->rows - st->n;
	if (!left) {
		st->stop = PLB_INTO_FULL;
		return 0;
	}
	/* At most one entry per row left: the merge never hands over (and so
	 * never consumes) an entry we have no row for. */
	rc = plb_merge_consume(m, plb_into_entry, st, left > UINT32_MAX ? UINT32_MAX : (uint32_t)left,
			       flags);
	if (rc < 0)
		return rc;
	if (st->stop != PLB_INTO_ODD && st->n >= st->rows)
		st->stop = PLB_INTO_FULL;
	return (int)(st->n - first > INT32_MAX ? INT32_MAX : st->n - first);
}
