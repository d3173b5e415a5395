/* plb_merge_runs.c - the merge's fast paths: runs of plain records from one
 * perf ring (plb_merge_run) or from two interleaving ones (plb_merge_pair),
 * emitted without a heap step.
 *
 * The contract. The general path of plb_merge.c emits the heap top with
 * emit_head(), finds that ring's next head with fill_head(), and asks the
 * rule again. A run must emit exactly the entries, in exactly the order and
 * with exactly the payloads, flags and counters that those steps would:
 *   - it starts only where the general path would emit the head now: a perf
 *     source at the top, not forced by the pressure valve, whose head is the
 *     plain case (below), not late, with a key (ts, index) below the run's
 *     bound (the frontier of the empty sources and every other waiting
 *     head) and room in the output -- else it returns -1 and does nothing;
 *   - it goes on only while the next record is the plain case: a
 *     PERF_RECORD_SAMPLE of the configured layout lying whole before the end
 *     of the ring and below the head acquire-loaded in this pass (span_parse()),
 *     not below the last emitted timestamp (so never late, never an
 *     inversion, flags always 0), with a key below the bound, and room left;
 *     anything else (LOST, malformed, wrapping, late, the end of the
 *     published data) stops it, and the general path handles that record;
 *   - it leaves the source as the general path would: tail, prev_ts/max_ts,
 *     the merge's emitted count and last emitted timestamp, and either a
 *     valid head (returns 1) or none yet (returns 0: the caller's fill_head()
 *     finds it, counting what it skips).
 * The fast paths keep the cursors, the output position and the counts in
 * registers (a local copy of the drain context, and of the output's pointers
 * in a drain) and parse each record once.
 * tests/c/test_merge.c (test_runs, test_malformed_in_run, test_run_floor)
 * and the fuzz target tests/fuzz/fuzz_merge.c check this agreement against
 * a model of the rule.
 */
#include "plb_merge_internal.h"
#include "plb_vectorise.h"

/* One perf ring in a run, as a span of the mapping: the records from rec up
 * to end lie published (below the head acquire-loaded in this pass) and
 * contiguous (before the end of the ring), so the run walks them with a
 * pointer and one bounds check per record; the ring position follows from
 * how far rec moved. */
struct plb_span {
	const uint8_t *rec;  /* the head's record */
	const uint8_t *next; /* just past it */
	const uint8_t *end;  /* published and contiguous up to here */
	const uint8_t *rec0; /* rec when the run began, at ring position pr.tail */
	uint64_t ts;         /* the head's timestamp */
	uint64_t last;       /* that of the last record emitted (if rec moved) */
	uint64_t lim;        /* the head may be emitted while ts <= lim: its key
				(ts, idx) then sorts below the run's bound */
	uint32_t idx;        /* source index */
};

/* Start a span over source i's ring at its head, for a run bounded by
 * bound. 0 when the fast path does not apply: not a perf ring, a head that
 * is not plain in place, or one that no key below bound can be. */
static inline __attribute__((always_inline)) int
span_begin(struct plb_span *x, const struct plb_merge *m, uint32_t i,
	   const struct plb_front *bound)
{
	const struct plb_msrc *s = &m->src[i];

	if (s->kind != PLB_SRC_PERF || (bound->ts == 0 && i >= bound->idx) ||
	    !ring_span(&s->pr, s->pr.tail, &x->rec, &x->end))
		return 0;
	x->rec0 = x->rec;
	x->last = 0;
	/* key_below(ts, i, bound), as one comparison per record. */
	x->lim = bound->ts - (i >= bound->idx);
	x->idx = i;
	return span_parse(&m->lay, x->rec, x->end, &x->ts, &x->next);
}

/* Store what the run took from x's ring (what take_head() records, once)
 * and, when head_valid, its head as the span holds it (else fill_head() is
 * to find it). Returns head_valid. */
static inline __attribute__((always_inline)) int
span_end(struct plb_merge *m, const struct plb_span *x, const struct plb_sample_layout *lay,
	 int head_valid)
{
	struct plb_msrc *s = &m->src[x->idx];
	struct plb_sample smp;

	if (x->rec != x->rec0) { /* it emitted */
		s->pr.tail += (uint64_t)(x->rec - x->rec0);
		s->prev_ts = s->max_ts = x->last; /* each ts taken was >= all before */
		s->have_prev = 1;
	}
	if (head_valid) {
		sample_describe(lay, x->rec, s->pr.tail, x->ts, x->next, &smp);
		set_head_inplace(m, s, &smp);
	}
	return head_valid;
}

/* A run works on a copy r of the drain context, a local the output stores
 * and the callback cannot alias, so its fields stay in registers; this stores
 * it back, with what emit_head() records in the merge, once for the run. n0:
 * the entries before the run; last: the ts of the last record emitted. */
static inline __attribute__((always_inline)) void
run_end(struct plb_merge *m, struct plb_drain_ctx *c, const struct plb_drain_ctx *r, uint32_t n0,
	uint64_t last)
{
	if (r->n != n0) {
		m->last_emitted = last;
		m->have_emitted = 1;
	}
	m->st.emitted += r->n - n0;
	*c = *r;
}

/* The output has room for x's head. */
static inline __attribute__((always_inline)) int
run_room(const struct plb_drain_ctx *r, const struct plb_span *x, const struct plb_sample_layout *lay,
	 const int to_fn)
{
	uint32_t len;

	if (to_fn)
		return r->n < r->max;
	memcpy(&len, x->rec + lay->raw_off, sizeof(len));
	return r->n < r->max && PLB_ALIGN8(r->used) + len <= r->cap;
}

/* A drain run's output: plb_merge_out's buffer and arrays, loaded once per
 * run. Read through out, every store into them would make the compiler load
 * them again (a payload copy may alias plb_merge_out itself). Kept out of the
 * drain context, whose run copy must stay small enough to live in registers:
 * a consume run (to_fn 1) never loads it. */
struct plb_run_out {
	uint8_t *buf;
	uint32_t *ring;
	uint64_t *ts;
	uint32_t *flags;
	uint32_t *start;
	uint32_t *len;
};

static inline __attribute__((always_inline)) void
run_out_load(struct plb_run_out *o, const struct plb_drain_ctx *c, const int to_fn)
{
	if (to_fn)
		return;
	o->buf = c->out->buf;
	o->ring = c->out->ring;
	o->ts = c->out->ts;
	o->flags = c->out->flags;
	o->start = c->out->start;
	o->len = c->out->len;
}

/* Entries [n0, n) of a drain run: their flags 0 (a run emits plain
 * records only) and, with set_ring, their source idx (a one-ring run: a
 * pair's span_take stores each entry's). Once per run, in vector stores,
 * rather than two of the five scalar stores per entry in the run's loop
 * (C alone, 32-byte records: 3.65 -> 3.56 ns an entry from one ring, 3.73
 * -> 3.56 interleaved; docs/performance.md). */
static PLB_VECTORISE void run_out_fill_arrays(uint32_t *ring, uint32_t *flags, uint32_t n0,
					       uint32_t n, uint32_t idx, int set_ring)
{
	for (uint32_t j = n0; j < n; j++)
		flags[j] = 0;
	if (set_ring)
		for (uint32_t j = n0; j < n; j++)
			ring[j] = idx;
}

static inline __attribute__((always_inline)) void
run_out_fill(const struct plb_run_out *o, uint32_t n0, uint32_t n, uint32_t idx, int set_ring,
	     const int to_fn)
{
	if (!to_fn)
		run_out_fill_arrays(o->ring, o->flags, n0, n, idx, set_ring);
}

/* One step of a run for side x: emit its head if its key sorts below the
 * run's bound and the output has room -- copied to the output (to_fn 0) or in
 * place to the callback (to_fn 1) -- then parse that ring's next record.
 * Returns 0 to go on; 1: stopped with x's head valid (not below the bound,
 * out of room, or the next record is below the last emitted: late or an
 * inversion, for the general path to flag); 2: stopped with x's head for
 * fill_head() to find (not the plain case, or the callback stopped).
 * A drain entry gets its payload, ts, start and len here, and its ring here
 * only in a pair (else run_out_fill() writes ring and flags after the run). */
static inline __attribute__((always_inline)) int
span_take(struct plb_span *x, const struct plb_sample_layout *lay, struct plb_drain_ctx *r,
	  const struct plb_run_out *o, const int to_fn, const int pair)
{
	const uint8_t *payload = x->rec + lay->raw_off + sizeof(uint32_t);
	uint32_t len;
	uint64_t ts;

	if (x->ts > x->lim || !run_room(r, x, lay, to_fn))
		return 1;
	memcpy(&len, x->rec + lay->raw_off, sizeof(len));
	if (to_fn) {
		r->n++;
		if (r->fn(r->fn_ctx, x->idx, x->ts, 0, payload, len))
			r->stopped = 1;
	} else {
		uint64_t at = PLB_ALIGN8(r->used);

		if (len)
			copy_payload(o->buf + at, payload, len);
		if (pair)
			o->ring[r->n] = x->idx;
		o->ts[r->n] = x->ts;
		o->start[r->n] = (uint32_t)at;
		o->len[r->n] = len;
		r->n++;
		r->used = at + len;
	}
	x->last = x->ts;
	x->rec = x->next;
	if ((to_fn && r->stopped) || !span_parse(lay, x->rec, x->end, &ts, &x->next))
		return 2;
	x->ts = ts;
	return ts < x->last;
}

/* The merge's hot loop, for a perf source at the top (not forced): emits its
 * head and the records that follow it in the ring for as long as each is the
 * plain case -- a PERF_RECORD_SAMPLE lying whole before the end of the ring,
 * well formed, not below the last emitted timestamp (so neither late nor an
 * inversion), with a key below bound (the next other waiting head or the
 * frontier), and with room in the output. Every record it emits is exactly
 * what emit_head() then fill_head() would emit; it only keeps the cursor, the
 * output position and the counters in registers, and parses each record
 * once. Plain loads: everything read lies below the head acquire-loaded by
 * plb_perfring_refresh() in this pass. to_fn as for emit_head().
 * Returns -1: the head itself is not plain or has no room (nothing done; use
 * emit_head()); 1: stopped with s's head valid; 0: stopped with it for
 * fill_head() to find (or by the callback). */
static inline __attribute__((always_inline)) int
perf_run(struct plb_merge *m, uint32_t i, const struct plb_front *bound,
	 struct plb_drain_ctx *c, const int to_fn)
{
	const struct plb_sample_layout lay = m->lay;
	struct plb_drain_ctx r = *c;
	struct plb_run_out o;
	struct plb_span a;
	int ret;

	/* The head must be emittable, else the caller would ask again. */
	if (!span_begin(&a, m, i, bound) || below_last(m, a.ts) || a.ts > a.lim ||
	    !run_room(&r, &a, &lay, to_fn))
		return -1;
	run_out_load(&o, c, to_fn);
	while (!(ret = span_take(&a, &lay, &r, &o, to_fn, 0)))
		;
	run_out_fill(&o, c->n, r.n, i, 1, to_fn);
	ret = span_end(m, &a, &lay, ret == 1);
	run_end(m, c, &r, c->n, a.last);
	return ret;
}

/* The hot loop when records interleave: the top a = heap[0] and the next
 * smallest head b = heap[pb], both perf rings with plain heads. Emits the
 * smaller of the two heads, in key order, while it sorts below bound (the
 * frontier and every other waiting head) and each next record is the plain
 * case -- exactly what the general path would emit, with both cursors in
 * registers and one predictable branch per record instead of a heap step.
 * Returns the side it stopped at (x) in side[0], for the root, and the other
 * in side[1], for heap[pb]; the caller restores the heap and settles the
 * root as after perf_run(). Returns -1: not applicable (nothing done); 1:
 * x's head is valid; 0: x's head is for fill_head() to find. */
static inline __attribute__((always_inline)) int
perf_pair(struct plb_merge *m, uint32_t pb, const struct plb_front *bound,
	  struct plb_drain_ctx *c, uint32_t side[2], const int to_fn)
{
	const struct plb_sample_layout lay = m->lay;
	struct plb_drain_ctx r = *c;
	struct plb_run_out o;
	struct plb_span a, b, t;
	int ret, x_a;

	if (!span_begin(&a, m, m->heap[0], bound) || !span_begin(&b, m, m->heap[pb], bound) ||
	    below_last(m, a.ts) || below_last(m, b.ts) || a.ts > a.lim ||
	    !run_room(&r, &a, &lay, to_fn))
		return -1;
	/* Name the sides by index, a the lower, so the tie rule is one
	 * comparison per record: at equal timestamps a comes first. */
	if (a.idx > b.idx) {
		t = a;
		a = b;
		b = t;
	}
	run_out_load(&o, c, to_fn);
	/* The first step emits the top's head: it sorts below the other. */
	do {
		/* Two calls, not one through a selected pointer: each side's
		 * state then stays in its own registers and the branch is
		 * predicted, where a select would chain every record's loads
		 * to the previous comparison (about 4x slower interleaved). */
		if (a.ts <= b.ts) {
			x_a = 1;
			ret = span_take(&a, &lay, &r, &o, to_fn, 1);
		} else {
			x_a = 0;
			ret = span_take(&b, &lay, &r, &o, to_fn, 1);
		}
	} while (!ret);
	run_out_fill(&o, c->n, r.n, 0, 0, to_fn);
	{
		struct plb_span *x = x_a ? &a : &b, *y = x_a ? &b : &a;
		uint64_t last = 0;

		/* Emission is in key order: the last emitted holds the largest ts. */
		if (x->rec != x->rec0)
			last = x->last;
		if (y->rec != y->rec0 && y->last > last)
			last = y->last;
		run_end(m, c, &r, c->n, last);
		/* The other side's head is whole (parsed, not yet emitted). */
		span_end(m, y, &lay, 1);
		side[0] = x->idx;
		side[1] = y->idx;
		return span_end(m, x, &lay, ret == 1);
	}
}

int plb_merge_run(struct plb_merge *m, uint32_t i, const struct plb_front *bound,
		  struct plb_drain_ctx *c, int to_fn)
{
	/* Two instances, each with to_fn a constant. */
	return to_fn ? perf_run(m, i, bound, c, 1) : perf_run(m, i, bound, c, 0);
}

int plb_merge_pair(struct plb_merge *m, uint32_t pb, const struct plb_front *bound,
		   struct plb_drain_ctx *c, uint32_t side[2], int to_fn)
{
	return to_fn ? perf_pair(m, pb, bound, c, side, 1) : perf_pair(m, pb, bound, c, side, 0);
}
