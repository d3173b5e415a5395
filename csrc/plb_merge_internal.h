/* plb_merge_internal.h - what the merge's two files share (C only: never
 * bound to Python, see tools/gen_cdef.py SHIM_INTERNAL).
 *
 * plb_merge.c holds the rule: the heap of heads, the frontiers, the passes
 * of a drain, and the general path that emits one head and finds the next
 * (emit_head(), fill_head()). plb_merge_runs.c holds the fast paths that
 * emit many records of one or two perf rings without a heap step; its top
 * comment states what they must agree on with the general path. Both parse
 * a sample in place with the helpers below (ring_span(), span_parse(),
 * sample_describe()), so the fast paths and the general path read a record
 * the same way.
 */
#ifndef PLB_MERGE_INTERNAL_H
#define PLB_MERGE_INTERNAL_H

#include <stddef.h>
#include <string.h>

#include "plb_merge.h"

/* One source: its ring cursor, its head (if any) and what the rule needs. */
struct plb_msrc {
	uint32_t kind;
	struct plb_perfring pr;   /* PLB_SRC_PERF */
	struct plb_rb_view rb;    /* PLB_SRC_RINGBUF (our copy) */
	uint64_t rb_pos;          /* ringbuf: local consumer position */
	uint64_t rb_committed;    /* ringbuf: last released consumer_pos */
	uint64_t size;            /* ring data size */
	uint64_t press_thr;       /* fill above this = under pressure */

	/* The head, valid while in_heap: a position in the ring, not a copy. */
	int in_heap;
	uint64_t head_ts;
	uint64_t head_at;         /* perf: ring position of the payload */
	const uint8_t *head_ptr;  /* the payload, when contiguous in the ring
				     (always for a ringbuf); NULL: it wraps */
	uint64_t head_next;       /* ring position just past the record */
	uint32_t head_len;        /* payload bytes */

	int have_prev;
	uint64_t prev_ts;         /* ts of the last record taken (inversions) */
	uint64_t max_ts;          /* largest ts taken: the floor of the frontier */
};

/* Where a PERF_RECORD_SAMPLE of the configured sample_type keeps what the
 * merge reads, from the start of the record (fixed by the config). */
struct plb_sample_layout {
	uint32_t raw_off; /* the u32 raw_size; the raw data follows it */
	uint64_t min_size; /* raw_off + 4 + ts_need: the least record size holding
			      a sample with its timestamp */
	uint64_t ts_at;   /* the u64 timestamp: PERF_SAMPLE_TIME, or ts_offset into
			     the raw data (64 bits: any u32 offset plus raw_off) */
	uint64_t ts_need; /* the least raw_size that holds it (0: kernel time) */
};

struct plb_merge {
	struct plb_merge_config cfg; /* normalised: clock and permille set */
	struct plb_sample_layout lay; /* where a perf sample keeps its fields */
	uint32_t n;
	struct plb_msrc *src;
	uint32_t *heap;              /* source indices, keyed by (head_ts, index) */
	uint32_t nheap;
	int have_emitted;
	uint64_t last_emitted;       /* largest ts emitted so far */
	uint64_t deadline;
	struct plb_merge_stats st;
	uint8_t *scratch;            /* consume: a wrapping perf payload, copied */
};

/* The largest perf payload: raw_size lies within one record, whose size is a
 * u16 (perf_event_header.size). The merge keeps its own buffer of that size,
 * allocated with it, rather than plb_perfring_peek()'s per-ring scratch, which
 * grows on demand: a consume then has no allocation to fail halfway. */
#define PLB_SCRATCH_SIZE 65536

/* A PERF_RECORD_SAMPLE parsed in place (sample_inplace()). */
struct plb_sample {
	const uint8_t *payload; /* the raw data, in the ring */
	uint64_t at;            /* its ring position */
	uint64_t next;          /* the ring position past the record */
	uint64_t ts;
	uint32_t len;           /* raw_size */
};

/* Where one drain delivers: the caller's arrays (plb_merge_drain, fn NULL)
 * or its callback (plb_merge_consume). */
struct plb_drain_ctx {
	struct plb_merge_out *out; /* drain */
	plb_merge_event_fn fn;     /* consume */
	void *fn_ctx;
	uint32_t max;
	uint32_t n;
	uint64_t used;
	uint64_t cap;
	int full;      /* stopped for room: more may be emittable now */
	int nospace;   /* a payload larger than the whole buffer */
	int stopped;   /* the callback asked to stop */
};

/* The smallest (frontier, index) over the empty sources: every record they
 * publish later has a key (ts, index) at or above their pair. */
struct plb_front {
	uint64_t ts;
	uint32_t idx;
};

static inline void front_min(struct plb_front *f, uint64_t ts, uint32_t idx)
{
	if (ts < f->ts || (ts == f->ts && idx < f->idx)) {
		f->ts = ts;
		f->idx = idx;
	}
}

/* (ts, idx) sorts strictly below the pair f. */
static inline int key_below(uint64_t ts, uint32_t idx, const struct plb_front *f)
{
	return ts < f->ts || (ts == f->ts && idx < f->idx);
}

#define PLB_ALIGN8(x) (((x) + 7) & ~(uint64_t)7)

/* A sample with timestamp ts would be late: below the last emitted one. */
static inline int below_last(const struct plb_merge *m, uint64_t ts)
{
	return m->have_emitted && ts < m->last_emitted;
}


/* s's head is now the sample with timestamp ts. */
static inline void note_head(struct plb_merge *m, struct plb_msrc *s, uint64_t ts)
{
	s->head_ts = ts;
	/* The same ring going back in time: an interrupt or a nested program
	 * wrote out of order on one CPU. The merge cannot fix it, only count it. */
	if (s->have_prev && ts < s->prev_ts)
		m->st.inversions++;
}

/* Copy a payload out of the ring. Records are small: fixed-size pieces the
 * compiler inlines beat a libc call per record (2-4x in the merge's loop);
 * 16-byte pieces (one SSE2 move each) rather than 8 took a 36-byte payload's
 * drain from 4.1 to 3.8 ns a record (docs/performance.md).
 * Always inline: left to itself, LTO made it a call per record. */
static inline __attribute__((always_inline)) void
copy_payload(uint8_t *dst, const uint8_t *src, uint32_t len)
{
	if (len > 256) {
		memcpy(dst, src, len);
		return;
	}
	for (; len >= 16; len -= 16, dst += 16, src += 16)
		memcpy(dst, src, 16);
	if (len >= 8) {
		memcpy(dst, src, 8);
		len -= 8, dst += 8, src += 8;
	}
	if (len >= 4) {
		memcpy(dst, src, 4);
		len -= 4, dst += 4, src += 4;
	}
	while (len--)
		*dst++ = *src++;
}

/* The bytes of pr's ring from position tail that are published (below the
 * head acquire-loaded by plb_perfring_refresh() in this pass: written before
 * the kernel published it, so plain loads read them) and contiguous (up to
 * the end of the mapping, where the record that wraps is for the general
 * path): [*p, *end). 0 if tail is not within a ring's size below the head. */
static inline __attribute__((always_inline)) int
ring_span(const struct plb_perfring *pr, uint64_t tail, const uint8_t **p, const uint8_t **end)
{
	uint64_t avail = pr->head - tail, off = tail & pr->mask;

	if (avail > pr->size)
		return 0;
	*p = pr->data + off;
	*end = *p + (avail < pr->size - off ? avail : pr->size - off);
	return 1;
}

/* The plain case, parsed in place with fixed-size loads: the record at p is
 * a well-formed PERF_RECORD_SAMPLE of the configured layout lying whole
 * before end (a ring_span()'s: all but one record per lap). Sets *ts and
 * *next (past it); 0 for anything else (a wrapping, LOST, other or malformed
 * record), for the general path to handle and count. The checks of
 * plb_perfring_peek_header() and perf_sample_head(), folded: end bounds what
 * is published and contiguous, and min_size covers h.size >= sizeof(h) and a
 * raw_size field inside the record, so one unsigned comparison is left for
 * raw_size (it must hold the timestamp and fit the record; below ts_need the
 * difference wraps to a huge value). The merge's hot path: every run step
 * and every head fill. */
static inline __attribute__((always_inline)) int
span_parse(const struct plb_sample_layout *lay, const uint8_t *p, const uint8_t *end,
	   uint64_t *ts, const uint8_t **next)
{
	struct perf_event_header h;
	uint32_t raw_size;

	if (end - p < (ptrdiff_t)sizeof(h))
		return 0;
	memcpy(&h, p, sizeof(h));
	if (h.type != PERF_RECORD_SAMPLE || (h.size & 7) || h.size < lay->min_size ||
	    h.size > end - p)
		return 0;
	memcpy(&raw_size, p + lay->raw_off, sizeof(raw_size));
	if ((uint64_t)raw_size - lay->ts_need > h.size - lay->min_size)
		return 0;
	memcpy(ts, p + lay->ts_at, sizeof(*ts));
	*next = p + h.size;
	return 1;
}

/* Describe the sample span_parse() accepted at rec, ring position pos. */
static inline __attribute__((always_inline)) void
sample_describe(const struct plb_sample_layout *lay, const uint8_t *rec, uint64_t pos,
		uint64_t ts, const uint8_t *next, struct plb_sample *smp)
{
	smp->payload = rec + lay->raw_off + sizeof(smp->len);
	smp->at = pos + lay->raw_off + sizeof(smp->len);
	smp->next = pos + (uint64_t)(next - rec);
	smp->ts = ts;
	memcpy(&smp->len, rec + lay->raw_off, sizeof(smp->len));
}

/* The record at ring position tail of pr, parsed in place into *smp: 1 for
 * the plain case (span_parse()), 0 for anything else. */
static inline __attribute__((always_inline)) int
sample_inplace(const struct plb_sample_layout *lay, const struct plb_perfring *pr,
	       uint64_t tail, struct plb_sample *smp)
{
	const uint8_t *p, *end, *next;
	uint64_t ts;

	if (!ring_span(pr, tail, &p, &end) || !span_parse(lay, p, end, &ts, &next))
		return 0;
	sample_describe(lay, p, tail, ts, next, smp);
	return 1;
}

/* Make a sample parsed in place s's head. */
static inline void set_head_inplace(struct plb_merge *m, struct plb_msrc *s,
			     const struct plb_sample *smp)
{
	s->head_at = smp->at;
	s->head_ptr = smp->payload;
	s->head_len = smp->len;
	s->head_next = smp->next;
	note_head(m, s, smp->ts);
}

/* ---- the fast paths (plb_merge_runs.c) ---- */

/* A run from the perf ring of source i, the heap top: see plb_merge_runs.c.
 * -1: not applicable (nothing done); 1: stopped with i's head valid; 0:
 * stopped with i's head for fill_head() to find. to_fn: consume (1) or drain
 * (0). */
int plb_merge_run(struct plb_merge *m, uint32_t i, const struct plb_front *bound,
		  struct plb_drain_ctx *c, int to_fn);

/* A run over two interleaving perf rings, the heap top and heap[pb]: see
 * plb_merge_runs.c. On 0 or 1 (as plb_merge_run(), for side[0]) the heap is
 * not restored: side[0] goes to the root, side[1] to heap[pb]. -1: not
 * applicable (nothing done). */
int plb_merge_pair(struct plb_merge *m, uint32_t pb, const struct plb_front *bound,
		   struct plb_drain_ctx *c, uint32_t side[2], int to_fn);

#endif
