/* plb_into.h - drain fixed-size records from a kernel ring straight into the
 * rows of a caller's array: one copy per record (ring -> row), no batch.
 *
 * The caller describes its array (a numpy structured array, or any writable
 * C-contiguous buffer) as rows of rec_size bytes in a struct plb_into and
 * calls one of the fill functions, which walk a ring from its consumer
 * position and copy each record whose size matches into the next row:
 *   plb_into_rb     a BPF ring buffer (plb_ringbuf.h view);
 *   plb_into_perf   one perf ring (a perf_buffer__buffer() region);
 *   plb_into_merge  the ordered merge (plb_merge.h), timestamps and flags
 *                   written to optional parallel columns.
 *
 * What "the same size" means:
 *   - ring buffer: the record's length equals rec_size exactly;
 *   - perf ring: the kernel stores a raw sample as u32 size + data, padded
 *     so that the pair is a multiple of 8; a sample matches when its stored
 *     size equals round_up(rec_size + 4, 8) - 4, the size the kernel stores
 *     for a rec_size-byte output (so a program's output 1..7 bytes shorter
 *     than rec_size with the same rounding also matches: the padding cannot
 *     tell them apart). The first rec_size bytes are copied.
 *
 * A record of another size is never truncated or dropped: the fill copies it
 * whole into st->odd (grown as needed), consumes it, and stops with
 * PLB_INTO_ODD, so the caller takes it and calls again. Out of memory for
 * that copy stops with -ENOMEM before consuming it (it stays in the ring).
 *
 * With st->cols (plb_into_rb only; the others return -EINVAL), a row is a
 * row of Arrow columns (plb_columns.h) rather than rec_size bytes of out:
 * each record's fields go straight from the ring into their columns
 * (plb_columns_put, a block of records at a time while they are in cache).
 *
 * Each call writes rows from st->n on (st->n is advanced) and never past
 * st->rows; it stops with PLB_INTO_FULL without consuming anything it did not
 * copy. Discarded ring buffer records are skipped (and consumed); a busy
 * ring buffer head stops the fill (PLB_INTO_EMPTY) and stays. The consumer
 * position is released once per call, after the copies.
 *
 * Threads: one caller per ring and per struct at a time; nothing blocks, no
 * global state, so the fill runs without the GIL.
 */
#ifndef PLB_INTO_H
#define PLB_INTO_H

#include <stddef.h>
#include <stdint.h>

#include "plb_columns.h"
#include "plb_merge.h"
#include "plb_ringbuf.h"

/* plb_into.stop: why the last call stopped. */
enum plb_into_stop {
	PLB_INTO_EMPTY = 0, /* nothing more to read now (empty ring, busy head,
			       or the merge holds its head back) */
	PLB_INTO_FULL = 1,  /* every row up to st->rows is filled */
	PLB_INTO_ODD = 2,   /* a record of another size is in st->odd (consumed) */
	PLB_INTO_LOST = 3,  /* perf ring: a lost-samples notice, count in st->lost
			       (consumed) */
};

struct plb_into {
	/* in: the rows */
	uint8_t *out;         /* row 0 */
	uint64_t rows;        /* rows out holds */
	uint32_t rec_size;    /* bytes per row = the record size taken (>= 1) */
	uint32_t perf_pad;    /* merge only: sources are perf rings (padded sizes) */
	uint64_t *ts;         /* merge only, optional: the timestamp of each row */
	uint8_t *flags;       /* merge only, optional: PLB_MERGE_F_* of each row;
				 with it a lost notice becomes a zero-filled row
				 with PLB_MERGE_F_LOST and ts = samples lost */
	struct plb_column *cols; /* ring buffer only, optional: rows are rows of
				    these columns (plb_columns_arrow_alloc'd for
				    rows rows, rec_size the event's size), out unused */
	uint32_t ncols;
	/* in/out */
	uint64_t n;           /* rows filled: each call appends from row n on */
	uint64_t discarded;   /* ring buffer records the producer discarded, skipped */
	uint64_t skipped;     /* perf records that are neither samples nor lost
			         notices, skipped */
	/* out of the last call */
	int stop;             /* enum plb_into_stop */
	uint64_t lost;        /* PLB_INTO_LOST: samples the notice counts */
	uint8_t *odd;         /* PLB_INTO_ODD: the record, odd_len bytes (malloc'd,
				 owned by the struct: plb_into_release) */
	uint32_t odd_len;
	uint32_t odd_cap;
	uint32_t odd_ring;    /* merge: its source index */
	uint64_t odd_ts;      /* merge: its timestamp */
	uint32_t odd_flags;   /* merge: its PLB_MERGE_F_* */
};

/* round_up(rec_size + 4, 8) - 4: the raw size the kernel stores for a perf
 * sample of rec_size bytes. */
uint32_t plb_into_perf_raw_size(uint32_t rec_size);

/* Make st->odd hold at least cap bytes (the merge's callback cannot allocate
 * without losing the record on failure: reserve the largest record first).
 * 0 or -ENOMEM. */
int plb_into_reserve(struct plb_into *st, uint32_t cap);

/* Free st->odd (the rows are the caller's); safe to call twice. */
void plb_into_release(struct plb_into *st);

/* Fill from a BPF ring buffer. Returns the rows written by this call (>= 0),
 * or, only when none was: -EBADMSG (corrupt head, nothing consumed), -ENOMEM,
 * -EINVAL (bad arguments). A failure after some rows returns them; the next
 * call reports it. */
int plb_into_rb(struct plb_rb_view *v, struct plb_into *st);

/* Fill from one perf ring, base and size as perf_buffer__buffer() gives them
 * (the control page, then the data). Samples must carry PERF_SAMPLE_RAW only
 * (libbpf's perf_buffer__new). Returns as plb_into_rb. */
int plb_into_perf(void *base, size_t size, struct plb_into *st);

/* Fill from the ordered merge, in merged order, up to the rows left; flags as
 * plb_merge_consume (PLB_MERGE_DRAIN_ALL or 0). A lost notice without
 * st->flags is counted by the merge only (plb_merge_stats), not written.
 * The deadline for the next wait is plb_merge_poll_timeout_ms(m). Returns
 * the rows written (>= 0), or -EINVAL. st->odd must have been reserved for
 * the largest record (plb_into_reserve): a larger one is cut to odd_cap and
 * its odd_len says its real size. */
int plb_into_merge(struct plb_merge *m, struct plb_into *st, uint32_t flags);

#endif
