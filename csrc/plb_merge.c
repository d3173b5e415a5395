/* plb_merge.c - the ordered k-way merge core: the rule (see plb_merge.h and
 * docs/ordering.md), the heap of heads and the general path. The fast paths
 * for runs of plain perf records are in plb_merge_runs.c. */
#include "plb_merge_internal.h"
#include "plb_vectorise.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	if (clock_gettime(id, &ts))
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t plb_clock_monotonic(void *ctx)
{
	(void)ctx;
	return clock_ns(CLOCK_MONOTONIC);
}

uint64_t plb_clock_boottime(void *ctx)
{
	(void)ctx;
	return clock_ns(CLOCK_BOOTTIME);
}

int plb_merge_source_perf(struct plb_merge_source *src, void *base, size_t size)
{
	struct perf_event_mmap_page *page = base;
	uint64_t off, dsize;

	if (!src || !base)
		return -EINVAL;
	/* data_offset/data_size are set by the kernel at mmap time and constant
	 * afterwards: plain reads. */
	off = page->data_offset;
	dsize = page->data_size;
	if (!off) {
		long psz = sysconf(_SC_PAGESIZE);

		off = psz > 0 ? (uint64_t)psz : 4096;
	}
	if (!dsize)
		dsize = size;
	if (!dsize || (dsize & (dsize - 1)) || (size && dsize > size))
		return -EINVAL;
	memset(src, 0, sizeof(*src));
	src->kind = PLB_SRC_PERF;
	src->page = page;
	src->data = (uint8_t *)base + off;
	src->data_size = dsize;
	return 0;
}

/* ---- the heap: at most one head per source, keyed by (ts, index) ---- */

static int head_less(const struct plb_merge *m, uint32_t a, uint32_t b)
{
	uint64_t ta = m->src[a].head_ts, tb = m->src[b].head_ts;

	return ta < tb || (ta == tb && a < b);
}

static void heap_sift_up(struct plb_merge *m, uint32_t k)
{
	uint32_t x = m->heap[k];

	while (k > 0) {
		uint32_t p = (k - 1) / 2;

		if (!head_less(m, x, m->heap[p]))
			break;
		m->heap[k] = m->heap[p];
		k = p;
	}
	m->heap[k] = x;
}

static inline __attribute__((always_inline)) void
heap_sift_down(struct plb_merge *m, uint32_t k)
{
	uint32_t x = m->heap[k];

	for (;;) {
		uint32_t c = 2 * k + 1;

		if (c >= m->nheap)
			break;
		if (c + 1 < m->nheap && head_less(m, m->heap[c + 1], m->heap[c]))
			c++;
		if (!head_less(m, m->heap[c], x))
			break;
		m->heap[k] = m->heap[c];
		k = c;
	}
	m->heap[k] = x;
}

static void heap_push(struct plb_merge *m, uint32_t i)
{
	m->heap[m->nheap++] = i;
	heap_sift_up(m, m->nheap - 1);
}

static void heap_pop(struct plb_merge *m)
{
	m->heap[0] = m->heap[--m->nheap];
	if (m->nheap)
		heap_sift_down(m, 0);
}

/* ---- per-source ring access ---- */

/* Bytes the producer has published and we have not taken. For a perf ring
 * this uses the head acquire-loaded by the last refresh; for a ring buffer it
 * loads producer_pos now (relaxed: only a size, no data is read through it). */
static uint64_t src_fill(const struct plb_msrc *s)
{
	if (s->kind == PLB_SRC_PERF)
		return plb_perfring_pending(&s->pr);
	return __atomic_load_n(s->rb.producer_pos, __ATOMIC_RELAXED) - s->rb_pos;
}

/* The pressure valve's test: is some source with a waiting head fuller than
 * its threshold? Asked only when the rule holds the top back, so the scan
 * costs nothing on the path that emits. */
static int any_pressured(const struct plb_merge *m)
{
	uint32_t k;

	for (k = 0; k < m->nheap; k++) {
		const struct plb_msrc *s = &m->src[m->heap[k]];

		if (s->press_thr != UINT64_MAX && src_fill(s) > s->press_thr)
			return 1;
	}
	return 0;
}

/* Deliver a PERF_RECORD_LOST entry; 0 if the output has no slot left (or
 * the callback has asked to stop). */
static int out_lost(struct plb_drain_ctx *c, uint32_t i, uint64_t lost)
{
	struct plb_merge_out *o = c->out;

	if (c->stopped)
		return 0;
	if (c->n >= c->max) {
		c->full = 1;
		return 0;
	}
	if (c->fn) {
		if (c->fn(c->fn_ctx, i, lost, PLB_MERGE_F_LOST, NULL, 0))
			c->stopped = 1;
		c->n++;
		return 1;
	}
	o->ring[c->n] = i;
	o->ts[c->n] = lost;
	o->flags[c->n] = PLB_MERGE_F_LOST;
	o->start[c->n] = 0; /* no payload */
	o->len[c->n] = 0;
	c->n++;
	return 1;
}

/* Parse the PERF_RECORD_SAMPLE at rec into s's head; 0 if malformed. The
 * record lies below the acquire-loaded head, so plain reads are safe. */
static int perf_sample_head(struct plb_merge *m, struct plb_msrc *s,
			    const struct plb_perf_rec *rec)
{
	const struct plb_sample_layout *lay = &m->lay;
	uint32_t raw_size;
	uint64_t ts;

	if ((uint64_t)lay->raw_off + sizeof(raw_size) > rec->size)
		return 0;
	plb_perfring_read(&s->pr, rec->pos + lay->raw_off, &raw_size, sizeof(raw_size));
	if ((uint64_t)lay->raw_off + sizeof(raw_size) + raw_size > rec->size ||
	    lay->ts_need > raw_size)
		return 0;
	/* Unaligned and possibly wrapping: a wrap-aware memcpy. */
	plb_perfring_read(&s->pr, rec->pos + lay->ts_at, &ts, sizeof(ts));
	s->head_at = rec->pos + lay->raw_off + sizeof(raw_size);
	/* In place when contiguous; else copied with plb_perfring_read(). */
	s->head_ptr = (s->head_at & s->pr.mask) + raw_size <= s->pr.size
			      ? s->pr.data + (s->head_at & s->pr.mask)
			      : NULL;
	s->head_len = raw_size;
	s->head_next = rec->pos + rec->size;
	note_head(m, s, ts);
	return 1;
}

/* Find s's next head, consuming LOST (as output entries) and malformed
 * records on the way. 1: head set; 0: nothing (more) visible; -1: a LOST
 * record needs an output slot that is not there. */
static int fill_head_perf_slow(struct plb_merge *m, struct plb_msrc *s, uint32_t i,
			       struct plb_drain_ctx *c)
{
	struct plb_perf_rec rec;
	int ret;

	for (;;) {
		ret = plb_perfring_peek_header(&s->pr, &rec);
		if (ret == PLB_PR_EMPTY)
			return 0;
		if (ret != PLB_PR_RECORD) {
			/* A size that is not a record: nothing after it can be
			 * found, so give the rest up to head back to the kernel. */
			m->st.malformed++;
			plb_perfring_skip_to_head(&s->pr);
			return 0;
		}
		if (rec.type == PERF_RECORD_SAMPLE) {
			if (perf_sample_head(m, s, &rec))
				return 1;
			m->st.malformed++;
		} else if (rec.type == PERF_RECORD_LOST) {
			/* {header, u64 id, u64 lost, sample_id}: no timestamp,
			 * so it never waits; delivered where it is found. */
			uint64_t lost;

			if (rec.size < sizeof(struct perf_event_header) + 2 * sizeof(uint64_t)) {
				m->st.malformed++;
			} else {
				plb_perfring_read(&s->pr,
						  rec.pos + sizeof(struct perf_event_header) +
							  sizeof(uint64_t),
						  &lost, sizeof(lost));
				if (!out_lost(c, i, lost))
					return -1;
				m->st.lost_records++;
				m->st.lost_samples += lost;
			}
		} else {
			m->st.malformed++;
		}
		plb_perfring_advance(&s->pr, &rec);
	}
}

/* Find s's next head (see fill_head_perf_slow): the plain case in place. */
static inline __attribute__((always_inline)) int
fill_head_perf(struct plb_merge *m, struct plb_msrc *s, uint32_t i, struct plb_drain_ctx *c)
{
	struct plb_sample smp;

	if (sample_inplace(&m->lay, &s->pr, s->pr.tail, &smp)) {
		set_head_inplace(m, s, &smp);
		return 1;
	}
	return fill_head_perf_slow(m, s, i, c);
}

static int fill_head_rb(struct plb_merge *m, struct plb_msrc *s)
{
	for (;;) {
		const void *data;
		uint32_t len;
		uint64_t next, ts;
		/* plb_rb_peek acquire-loads producer_pos and the record header:
		 * this is where the ring is re-checked. */
		int ret = plb_rb_peek(&s->rb, s->rb_pos, &data, &len, &next);

		switch (ret) {
		case PLB_RB_EMPTY:
		case PLB_RB_BUSY: /* being written: it blocks what follows */
			return 0;
		case PLB_RB_DISCARD:
			s->rb_pos = next;
			continue;
		case PLB_RB_RECORD:
			if ((uint64_t)m->cfg.ts_offset + sizeof(ts) > len) {
				m->st.malformed++;
				s->rb_pos = next;
				continue;
			}
			memcpy(&ts, (const uint8_t *)data + m->cfg.ts_offset, sizeof(ts));
			s->head_ptr = data;
			s->head_len = len;
			s->head_next = next;
			note_head(m, s, ts);
			return 1;
		default:
			/* A length that cannot fit: resynchronise at the producer
			 * position, a record boundary. */
			m->st.malformed++;
			s->rb_pos = __atomic_load_n(s->rb.producer_pos, __ATOMIC_ACQUIRE);
			return 0;
		}
	}
}

static inline __attribute__((always_inline)) int
fill_head(struct plb_merge *m, uint32_t i, struct plb_drain_ctx *c)
{
	struct plb_msrc *s = &m->src[i];

	if (s->kind == PLB_SRC_PERF)
		return fill_head_perf(m, s, i, c);
	return fill_head_rb(m, s);
}

/* The frontier of an empty source: nothing it publishes later can be older
 * than clk - L (clk read before its producer position was re-checked), nor,
 * if it keeps its own order, older than what we already took from it. */
static uint64_t empty_frontier(const struct plb_merge *m, const struct plb_msrc *s,
			       uint64_t clk)
{
	uint64_t f = clk > m->cfg.window_ns ? clk - m->cfg.window_ns : 0;

	if (s->have_prev && s->max_ts > f)
		f = s->max_ts;
	return f;
}

/* The head of s has been delivered or dropped: move past it locally. The
 * ring's consumer position is released only at the end of the drain, after
 * the copy, so the kernel cannot reuse the bytes while we read them. */
static void take_head(struct plb_msrc *s)
{
	uint64_t ts = s->head_ts;

	if (s->kind == PLB_SRC_PERF)
		s->pr.tail = s->head_next;
	else
		s->rb_pos = s->head_next;
	if (!s->have_prev || ts > s->max_ts)
		s->max_ts = ts;
	s->prev_ts = ts;
	s->have_prev = 1;
}

/* A sample with timestamp ts below the last emitted one. */
static void note_late(struct plb_merge *m, uint64_t ts)
{
	m->st.late_events++;
	if (m->last_emitted - ts > m->st.max_lateness_ns)
		m->st.max_lateness_ns = m->last_emitted - ts;
}

/* A sample with timestamp ts has been delivered. */
static void emitted(struct plb_merge *m, uint64_t ts, int forced)
{
	m->st.emitted++;
	if (forced)
		m->st.forced_flushes++;
	if (!m->have_emitted || ts > m->last_emitted)
		m->last_emitted = ts;
	m->have_emitted = 1;
}

/* Emit the head of source i: copy it to the output (to_fn 0) or hand it to
 * the callback (to_fn 1, a constant the caller inlines). 1: taken; -1: no
 * room in the output. */
static inline __attribute__((always_inline)) int
emit_head(struct plb_merge *m, uint32_t i, int forced, struct plb_drain_ctx *c,
	  const int to_fn)
{
	struct plb_msrc *s = &m->src[i];
	struct plb_merge_out *o = c->out;
	uint64_t ts = s->head_ts, off = 0;
	uint32_t len = s->head_len, fl;
	const uint8_t *p = s->head_ptr;
	int late = below_last(m, ts);

	if (late && m->cfg.late_policy == PLB_LATE_DROP) {
		note_late(m, ts);
		m->st.dropped_late++;
		take_head(s);
		return 1;
	}
	if (to_fn) {
		if (c->n >= c->max) {
			c->full = 1;
			return -1;
		}
		if (!p) { /* wraps the end of a perf ring: hand over a copy */
			plb_perfring_read(&s->pr, s->head_at, m->scratch, len);
			p = m->scratch;
		}
	} else {
		off = PLB_ALIGN8(c->used);
		if (c->n >= c->max || off + len > c->cap) {
			c->full = 1;
			if (len > c->cap) {
				c->nospace = 1;
				o->need = len;
			}
			return -1;
		}
		/* Copy out of the ring (two pieces if the payload wraps a perf
		 * ring). Not for an empty payload: buf may be NULL (buf_size 0),
		 * and NULL + 0 or memcpy(NULL, src, 0) is undefined behaviour. */
		if (len) {
			if (p)
				copy_payload(o->buf + off, p, len);
			else
				plb_perfring_read(&s->pr, s->head_at, o->buf + off, len);
		}
	}
	if (late)
		note_late(m, ts);
	emitted(m, ts, forced);
	take_head(s);
	fl = (late ? PLB_MERGE_F_LATE : 0u) | (forced ? PLB_MERGE_F_FORCED : 0u);
	if (to_fn) {
		c->n++;
		/* After the bookkeeping: the callback may end the consume. */
		if (c->fn(c->fn_ctx, i, ts, fl, p, len))
			c->stopped = 1;
		return 1;
	}
	o->ring[c->n] = i;
	o->ts[c->n] = ts;
	o->flags[c->n] = fl;
	o->start[c->n] = (uint32_t)off;
	o->len[c->n] = len;
	c->n++;
	c->used = off + len;
	return 1;
}

static void commit_all(struct plb_merge *m)
{
	uint32_t i;

	for (i = 0; i < m->n; i++) {
		struct plb_msrc *s = &m->src[i];

		if (s->kind == PLB_SRC_PERF) {
			plb_perfring_commit(&s->pr); /* release-store data_tail */
		} else if (s->rb_pos != s->rb_committed) {
			plb_rb_commit(&s->rb, s->rb_pos); /* release-store consumer_pos */
			s->rb_committed = s->rb_pos;
		}
	}
}

/* How many passes in a row may consume records (malformed, dropped late)
 * without writing an entry before drain returns and asks to be called again. */
#define PLB_IDLE_PASSES 8

/* When a blocked top becomes emittable with its blocking sources silent: when
 * clock - L reaches its ts (an empty source with a higher index then no longer
 * blocks it), or passes it (one with a lower index). */
static uint64_t top_deadline(const struct plb_merge *m)
{
	uint32_t top = m->heap[0], j;
	uint64_t ts = m->src[top].head_ts, extra = 0;

	for (j = 0; j < top; j++)
		if (!m->src[j].in_heap)
			extra = 1;
	/* Saturate below PLB_MERGE_NO_DEADLINE. */
	if (m->cfg.window_ns >= UINT64_MAX - 1 - extra ||
	    ts >= UINT64_MAX - 1 - extra - m->cfg.window_ns)
		return UINT64_MAX - 1;
	return ts + m->cfg.window_ns + extra;
}

/* One pass's look at the rings: refresh each perf ring's head, give each
 * source without a head its next one (into the heap), and fold the frontier
 * of each source that has none into front. clk: the clock read for this
 * pass, before any producer position is re-checked in it (an earlier reading
 * only makes a frontier smaller, never wrong). 0, or -1 when a LOST record
 * found no output slot. */
static inline __attribute__((always_inline)) int
pass_fill(struct plb_merge *m, struct plb_drain_ctx *c, struct plb_front *front, uint64_t clk)
{
	uint32_t i;

	for (i = 0; i < m->n; i++) {
		struct plb_msrc *s = &m->src[i];
		int r;

		if (s->kind == PLB_SRC_PERF)
			plb_perfring_refresh(&s->pr); /* acquire data_head */
		if (s->in_heap)
			continue;
		r = fill_head(m, i, c);
		if (r < 0)
			return -1;
		if (r > 0) {
			s->in_heap = 1;
			heap_push(m, i);
		} else {
			front_min(front, empty_frontier(m, s, clk), i);
		}
	}
	return 0;
}

/* May the heap top go? Its key (ts, i) must sort below every empty
 * source's (frontier, index): ties go to the lower index, so an empty source
 * with a lower index and frontier == ts may still publish something that
 * comes first. 0: wait. 1: go, with *bound what the emitted records must
 * stay below and *forced set when only the pressure valve lets it go. */
static int top_may_go(const struct plb_merge *m, const struct plb_front *front, int all,
		      struct plb_front *bound, int *forced)
{
	uint32_t i = m->heap[0];

	bound->ts = UINT64_MAX;
	bound->idx = UINT32_MAX;
	*forced = 0;
	if (all)
		return 1;
	if (key_below(m->src[i].head_ts, i, front)) {
		*bound = *front;
		return 1;
	}
	/* Some empty source may still publish something that sorts first:
	 * wait -- unless a ring is filling up. */
	if (!any_pressured(m))
		return 0;
	*forced = 1;
	return 1;
}

/* The heap position of the next smallest head after the top: 1 or 2. */
static inline uint32_t heap_second(const struct plb_merge *m)
{
	return m->nheap > 2 && head_less(m, m->heap[2], m->heap[1]) ? 2 : 1;
}

/* Records interleaving across two rings: the top and the next smallest head
 * (heap[pb]), bounded by bound and every other head -- by the heap's order,
 * the other child of the root and pb's children. 0: not applicable, nothing
 * done. 1: done; *top is the source left at the root and *r fill_head()'s
 * result for it. */
static inline __attribute__((always_inline)) int
emit_pair(struct plb_merge *m, struct plb_drain_ctx *c, const struct plb_front *bound,
	  uint32_t pb, uint32_t *top, int *r, const int to_fn)
{
	struct plb_front b = *bound;
	uint32_t k, side[2];
	int ret;

	if (3 - pb < m->nheap)
		front_min(&b, m->src[m->heap[3 - pb]].head_ts, m->heap[3 - pb]);
	for (k = 2 * pb + 1; k <= 2 * pb + 2 && k < m->nheap; k++)
		front_min(&b, m->src[m->heap[k]].head_ts, m->heap[k]);
	ret = plb_merge_pair(m, pb, &b, c, side, to_fn);
	if (ret < 0)
		return 0;
	m->heap[0] = side[0];
	m->heap[pb] = side[1];
	heap_sift_down(m, pb); /* that key may have grown past its children's */
	*top = side[0];
	*r = ret ? ret : fill_head(m, side[0], c);
	return 1;
}

/* emit_top(): the output has no room. */
#define PLB_TOP_FULL (-2)

/* Emit from the heap top what the rule allows in one go: a pair of
 * interleaving rings, or a run of the top's ring -- while its next head still
 * sorts below every other waiting head (and, unless forced, the frontier), it
 * is the next top: emitted without touching the heap. A forced emission takes
 * one record, then the rule is asked again. Returns fill_head()'s result for
 * the source left at the top (*top), or PLB_TOP_FULL: the output has no room
 * (the top unchanged). */
static inline __attribute__((always_inline)) int
emit_top(struct plb_merge *m, struct plb_drain_ctx *c, struct plb_front bound, int forced,
	 uint32_t *top, const int to_fn)
{
	uint32_t i = m->heap[0], pb = heap_second(m);
	int r;

	if (!forced && m->nheap > 1 && emit_pair(m, c, &bound, pb, top, &r, to_fn))
		return r;
	if (m->nheap > 1)
		front_min(&bound, m->src[m->heap[pb]].head_ts, m->heap[pb]);
	*top = i;
	do {
		r = forced ? -1 : plb_merge_run(m, i, &bound, c, to_fn);
		if (r < 0) { /* the general path: one record */
			if (emit_head(m, i, forced, c, to_fn) < 0)
				return PLB_TOP_FULL;
			r = 0;
		}
		/* Next head of the same ring, from the head loaded in this pass
		 * (a ring buffer: loaded again now), unless the run left it. */
		if (r == 0)
			r = fill_head(m, i, c);
	} while (r > 0 && !forced && !(to_fn && c->stopped) &&
		 key_below(m->src[i].head_ts, i, &bound));
	return r;
}

/* Put the source i left at the heap top back in order: with its next head
 * (r > 0, fill_head()'s result), or out of the heap with its frontier folded
 * into front. Returns r. */
static int settle_top(struct plb_merge *m, uint32_t i, int r, struct plb_front *front,
		      uint64_t clk)
{
	struct plb_msrc *s = &m->src[i];

	if (r > 0) {
		heap_sift_down(m, 0);
		return r;
	}
	heap_pop(m);
	s->in_heap = 0;
	if (r == 0)
		front_min(front, empty_frontier(m, s, clk), i);
	return r;
}

/* Records consumed from the rings so far: emitted, dropped late, skipped. */
static uint64_t taken_count(const struct plb_merge *m)
{
	return m->st.emitted + m->st.dropped_late + m->st.malformed;
}

/* The passes of one drain or consume (to_fn as for emit_head()): emit what
 * the rule allows until the output is full, the callback stops, or a pass
 * moves nothing. Returns 1 when the idle-pass limit cut it short. */
static inline __attribute__((always_inline)) int
drain_passes(struct plb_merge *m, struct plb_drain_ctx *c, int all, const int to_fn)
{
	int idle_passes = 0;

	for (;;) {
		struct plb_front front = { UINT64_MAX, UINT32_MAX }, bound;
		uint32_t n_before = c->n, top;
		uint64_t taken_before = taken_count(m);
		/* Read once per pass, before pass_fill() re-checks the rings. */
		uint64_t clk = m->cfg.clock(m->cfg.clock_ctx);
		int forced, r = pass_fill(m, c, &front, clk);

		while (r >= 0 && m->nheap && top_may_go(m, &front, all, &bound, &forced)) {
			r = emit_top(m, c, bound, forced, &top, to_fn);
			if (r == PLB_TOP_FULL)
				return 0; /* the top unchanged */
			r = settle_top(m, top, r, &front, clk);
			if (to_fn && c->stopped)
				return 0;
		}
		if (c->full || r < 0)
			return 0;
		if (c->n != n_before) {
			idle_passes = 0;
			continue;
		}
		if (taken_count(m) == taken_before)
			return 0; /* nothing moved: the rule holds everything back */
		if (++idle_passes >= PLB_IDLE_PASSES)
			return 1;
	}
}

/* End a drain or consume: hand the space of everything delivered, skipped or
 * dropped back to the kernel (release stores: our reads of it are done), and
 * set the deadline. */
static uint64_t drain_end(struct plb_merge *m, const struct plb_drain_ctx *c, int more)
{
	commit_all(m);
	if (c->full || c->stopped || more)
		m->deadline = 0;
	else if (!m->nheap)
		m->deadline = PLB_MERGE_NO_DEADLINE;
	else
		m->deadline = top_deadline(m);
	return m->deadline;
}

int plb_merge_drain(struct plb_merge *m, struct plb_merge_out *out,
		    uint32_t max_records, uint32_t flags)
{
	struct plb_drain_ctx c;
	int more;

	if (!m || !out || !max_records || (!out->buf && out->buf_size) ||
	    !out->ring || !out->ts || !out->flags || !out->start || !out->len ||
	    (flags & ~(uint32_t)PLB_MERGE_DRAIN_ALL))
		return -EINVAL;
	memset(&c, 0, sizeof(c));
	c.out = out;
	c.max = max_records;
	c.cap = out->buf_size > UINT32_MAX ? UINT32_MAX : out->buf_size;
	out->need = 0;
	more = drain_passes(m, &c, !!(flags & PLB_MERGE_DRAIN_ALL), 0);
	out->deadline_ns = drain_end(m, &c, more);
	out->used = c.used;
	if (c.nospace && c.n == 0)
		return -ENOSPC;
	return (int)c.n;
}

int plb_merge_consume(struct plb_merge *m, plb_merge_event_fn fn, void *ctx,
		      uint32_t max_records, uint32_t flags)
{
	struct plb_drain_ctx c;
	int more;

	if (!m || !fn || !max_records || (flags & ~(uint32_t)PLB_MERGE_DRAIN_ALL))
		return -EINVAL;
	memset(&c, 0, sizeof(c));
	c.fn = fn;
	c.fn_ctx = ctx;
	c.max = max_records;
	more = drain_passes(m, &c, !!(flags & PLB_MERGE_DRAIN_ALL), 1);
	drain_end(m, &c, more);
	return (int)c.n;
}

/* One pass with no early exit, vectorised (plb_vectorise.h): ~0.3-0.6 ns an
 * entry, ~1.3 as GCC 12 compiles it at -O2 otherwise. */
PLB_VECTORISE int64_t plb_merge_out_uniform(const struct plb_merge_out *out, uint32_t n)
{
	const uint32_t *lens, *starts, *flags;
	uint32_t len, step, at = 0, bad = 0;

	if (!out || !n)
		return -1;
	lens = out->len;
	starts = out->start;
	flags = out->flags;
	len = lens[0];
	if (!len) /* empty payloads share one offset: no stride to describe them by */
		return -1;
	/* 32-bit offsets, as the drain writes them (it never uses more than
	 * 4 GiB, so at cannot wrap where the drain did not). */
	step = (uint32_t)PLB_ALIGN8(len);
	for (uint32_t i = 0; i < n; i++, at += step)
		bad |= (lens[i] ^ len) | (starts[i] ^ at) | flags[i];
	return bad ? -1 : (int64_t)len;
}

int plb_merge_poll_timeout_ms(struct plb_merge *m)
{
	uint64_t now, d;

	if (m->deadline == PLB_MERGE_NO_DEADLINE)
		return -1;
	if (m->deadline == 0)
		return 0;
	now = m->cfg.clock(m->cfg.clock_ctx);
	if (m->deadline <= now)
		return 0;
	/* Round up without overflow: deadline - now can be close to 2^64. */
	d = m->deadline - now;
	d = d / 1000000 + (d % 1000000 != 0);
	return d > INT32_MAX ? INT32_MAX : (int)d;
}

uint64_t plb_merge_next_deadline(const struct plb_merge *m)
{
	return m->deadline;
}

uint32_t plb_merge_nsources(const struct plb_merge *m)
{
	return m->n;
}

void plb_merge_stats(const struct plb_merge *m, struct plb_merge_stats *st,
		     uint64_t *backlog, uint32_t n)
{
	uint32_t i;

	if (st)
		*st = m->st;
	if (!backlog)
		return;
	for (i = 0; i < n && i < m->n; i++) {
		const struct plb_msrc *s = &m->src[i];

		/* Acquire-load the producer position now (no data is read). */
		if (s->kind == PLB_SRC_PERF)
			backlog[i] = __atomic_load_n(&s->pr.page->data_head,
						     __ATOMIC_ACQUIRE) - s->pr.tail;
		else
			backlog[i] = __atomic_load_n(s->rb.producer_pos,
						     __ATOMIC_ACQUIRE) - s->rb_pos;
	}
}

static int valid_rb_view(const struct plb_rb_view *v)
{
	return v && v->consumer_pos && v->producer_pos && v->data &&
	       ((v->mask + 1) & v->mask) == 0 && v->mask + 1 != 0;
}

/* The config and sources plb_merge_new() accepts; the sample_type to use
 * (0 means PERF_SAMPLE_RAW) in *st. */
static int config_valid(const struct plb_merge_config *cfg, const struct plb_merge_source *srcs,
			uint32_t n, uint64_t *st)
{
	uint32_t i;

	if (!cfg || !srcs || !n ||
	    (cfg->ts_mode != PLB_TS_KERNEL && cfg->ts_mode != PLB_TS_OFFSET) ||
	    (cfg->late_policy != PLB_LATE_DELIVER && cfg->late_policy != PLB_LATE_DROP))
		return 0;
	*st = cfg->sample_type ? cfg->sample_type : PERF_SAMPLE_RAW;
	/* Only layouts with fixed 8-byte fields before RAW can be walked. */
	if (!(*st & PERF_SAMPLE_RAW) ||
	    (*st & ~(uint64_t)(PLB_MERGE_SAMPLE_FIXED | PERF_SAMPLE_RAW)) ||
	    (cfg->ts_mode == PLB_TS_KERNEL && !(*st & PERF_SAMPLE_TIME)))
		return 0;
	for (i = 0; i < n; i++) {
		const struct plb_merge_source *s = &srcs[i];

		if (s->kind == PLB_SRC_PERF) {
			if (!s->page || !s->data || !s->data_size ||
			    (s->data_size & (s->data_size - 1)))
				return 0;
		} else if (s->kind == PLB_SRC_RINGBUF) {
			if (cfg->ts_mode == PLB_TS_KERNEL || !valid_rb_view(s->rb))
				return 0;
		} else {
			return 0;
		}
	}
	return 1;
}

/* Where a PERF_RECORD_SAMPLE of sample_type st keeps the raw size and the
 * timestamp: the header, then the fixed fields in perf_event.h's order
 * (IDENTIFIER, IP, TID, TIME, ...), then u32 raw size and the raw data. */
static void sample_layout(struct plb_sample_layout *lay, const struct plb_merge_config *cfg,
			  uint64_t st)
{
	lay->raw_off = sizeof(struct perf_event_header) +
		       8 * (uint32_t)__builtin_popcountll(st & PLB_MERGE_SAMPLE_FIXED);
	if (cfg->ts_mode == PLB_TS_KERNEL) {
		lay->ts_at = sizeof(struct perf_event_header) +
			     8 * (uint32_t)__builtin_popcountll(
					 st & (PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP |
					       PERF_SAMPLE_TID));
		lay->ts_need = 0;
	} else {
		lay->ts_at = (uint64_t)lay->raw_off + sizeof(uint32_t) + cfg->ts_offset;
		lay->ts_need = (uint64_t)cfg->ts_offset + sizeof(uint64_t);
	}
	lay->min_size = (uint64_t)lay->raw_off + sizeof(uint32_t) + lay->ts_need;
}

/* Bind s to the ring src describes, at its current consumer position. */
static int source_init(struct plb_msrc *s, const struct plb_merge_source *src, uint32_t permille)
{
	s->kind = src->kind;
	if (s->kind == PLB_SRC_PERF) {
		if (plb_perfring_init(&s->pr, src->page, src->data, src->data_size))
			return -EINVAL;
		s->size = src->data_size;
	} else {
		s->rb = *src->rb;
		/* consumer_pos is written only by us: a relaxed load. */
		s->rb_pos = __atomic_load_n(s->rb.consumer_pos, __ATOMIC_RELAXED);
		s->rb_committed = s->rb_pos;
		s->size = s->rb.mask + 1;
	}
	s->press_thr = permille >= 1000
			       ? UINT64_MAX
			       : (uint64_t)((unsigned __int128)s->size * permille / 1000);
	return 0;
}

struct plb_merge *plb_merge_new(const struct plb_merge_config *cfg,
				const struct plb_merge_source *srcs, uint32_t n)
{
	struct plb_merge *m;
	uint64_t st;
	uint32_t i;

	if (!config_valid(cfg, srcs, n, &st)) {
		errno = EINVAL;
		return NULL;
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		goto nomem;
	m->src = calloc(n, sizeof(*m->src));
	m->heap = calloc(n, sizeof(*m->heap));
	m->scratch = malloc(PLB_SCRATCH_SIZE);
	if (!m->src || !m->heap || !m->scratch)
		goto nomem;
	m->cfg = *cfg;
	m->cfg.sample_type = st;
	if (!m->cfg.clock) {
		m->cfg.clock = plb_clock_monotonic;
		m->cfg.clock_ctx = NULL;
	}
	if (!m->cfg.pressure_permille)
		m->cfg.pressure_permille = PLB_MERGE_DEFAULT_PRESSURE_PERMILLE;
	sample_layout(&m->lay, cfg, st);
	m->n = n;
	m->deadline = PLB_MERGE_NO_DEADLINE;
	for (i = 0; i < n; i++) {
		if (source_init(&m->src[i], &srcs[i], m->cfg.pressure_permille)) {
			plb_merge_free(m);
			errno = EINVAL;
			return NULL;
		}
	}
	return m;

nomem:
	plb_merge_free(m);
	errno = ENOMEM;
	return NULL;
}

void plb_merge_free(struct plb_merge *m)
{
	uint32_t i;

	if (!m)
		return;
	if (m->src)
		for (i = 0; i < m->n; i++)
			if (m->src[i].kind == PLB_SRC_PERF)
				plb_perfring_release(&m->src[i].pr);
	free(m->src);
	free(m->heap);
	free(m->scratch);
	free(m);
}
