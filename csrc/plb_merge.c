/* plb_merge.c - the ordered k-way merge core (see plb_merge.h and
 * shared/ORDERING.md for the rule). */
#include "plb_merge.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

static void front_min(struct plb_front *f, uint64_t ts, uint32_t idx)
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

/* Copy a payload out of the ring. Records are small: fixed-size pieces the
 * compiler inlines beat a libc call per record (2-4x in the merge's loop). */
static inline void copy_payload(uint8_t *dst, const uint8_t *src, uint32_t len)
{
	if (len > 256) {
		memcpy(dst, src, len);
		return;
	}
	for (; len >= 8; len -= 8, dst += 8, src += 8)
		memcpy(dst, src, 8);
	if (len >= 4) {
		memcpy(dst, src, 4);
		len -= 4, dst += 4, src += 4;
	}
	while (len--)
		*dst++ = *src++;
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

static void note_head(struct plb_merge *m, struct plb_msrc *s, uint64_t ts)
{
	s->head_ts = ts;
	/* The same ring going back in time: an interrupt or a nested program
	 * wrote out of order on one CPU. The merge cannot fix it, only count it. */
	if (s->have_prev && ts < s->prev_ts)
		m->st.inversions++;
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
static void set_head_inplace(struct plb_merge *m, struct plb_msrc *s,
			     const struct plb_sample *smp)
{
	s->head_at = smp->at;
	s->head_ptr = smp->payload;
	s->head_len = smp->len;
	s->head_next = smp->next;
	note_head(m, s, smp->ts);
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

/* A sample with timestamp ts would be late: below the last emitted one. */
static inline int below_last(const struct plb_merge *m, uint64_t ts)
{
	return m->have_emitted && ts < m->last_emitted;
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

/* One step of a run for side x: emit its head if its key sorts below the
 * run's bound and the output has room -- copied to the output (to_fn 0) or in
 * place to the callback (to_fn 1) -- then parse that ring's next record.
 * Returns 0 to go on; 1: stopped with x's head valid (not below the bound,
 * out of room, or the next record is below the last emitted: late or an
 * inversion, for the general path to flag); 2: stopped with x's head for
 * fill_head() to find (not the plain case, or the callback stopped). */
static inline __attribute__((always_inline)) int
span_take(struct plb_span *x, const struct plb_sample_layout *lay, struct plb_drain_ctx *r,
	  const int to_fn)
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
		struct plb_merge_out *o = r->out;
		uint64_t at = PLB_ALIGN8(r->used);

		if (len)
			copy_payload(o->buf + at, payload, len);
		o->ring[r->n] = x->idx;
		o->ts[r->n] = x->ts;
		o->flags[r->n] = 0;
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
	struct plb_span a;
	int ret;

	/* The head must be emittable, else the caller would ask again. */
	if (!span_begin(&a, m, i, bound) || below_last(m, a.ts) || a.ts > a.lim ||
	    !run_room(&r, &a, &lay, to_fn))
		return -1;
	while (!(ret = span_take(&a, &lay, &r, to_fn)))
		;
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
 * Then puts the side it stopped at (x, returned in *top) at the root and the
 * other at pb, restoring the heap below pb; the caller settles the root as
 * after perf_run(). Returns -1: not applicable (nothing done); 1: x's head
 * is valid; 0: x's head is for fill_head() to find. */
static inline __attribute__((always_inline)) int
perf_pair(struct plb_merge *m, uint32_t pb, const struct plb_front *bound,
	  struct plb_drain_ctx *c, uint32_t *top, const int to_fn)
{
	const struct plb_sample_layout lay = m->lay;
	struct plb_drain_ctx r = *c;
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
	/* The first step emits the top's head: it sorts below the other. */
	do {
		/* Two calls, not one through a selected pointer: each side's
		 * state then stays in its own registers and the branch is
		 * predicted, where a select would chain every record's loads
		 * to the previous comparison (about 4x slower interleaved). */
		if (a.ts <= b.ts) {
			x_a = 1;
			ret = span_take(&a, &lay, &r, to_fn);
		} else {
			x_a = 0;
			ret = span_take(&b, &lay, &r, to_fn);
		}
	} while (!ret);
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
		m->heap[0] = x->idx;
		m->heap[pb] = y->idx;
		heap_sift_down(m, pb); /* that key may have grown past its children's */
		*top = x->idx;
		return span_end(m, x, &lay, ret == 1);
	}
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

/* The passes of one drain or consume (to_fn as for emit_head()): emit what
 * the rule allows until the output is full, the callback stops, or a pass
 * moves nothing. Returns 1 when the idle-pass limit cut it short. */
static inline __attribute__((always_inline)) int
drain_passes(struct plb_merge *m, struct plb_drain_ctx *c, int all, const int to_fn)
{
	int idle_passes = 0;

	for (;;) {
		struct plb_front front = { UINT64_MAX, UINT32_MAX };
		uint64_t clk;
		uint32_t n_before = c->n, i;
		uint64_t taken_before = m->st.emitted + m->st.dropped_late +
					m->st.malformed;
		int stop = 0;

		/* The clock is read once per pass, before any producer position
		 * is re-checked in it: an earlier reading only makes each empty
		 * source's frontier smaller, never wrong. */
		clk = m->cfg.clock(m->cfg.clock_ctx);
		for (i = 0; i < m->n && !stop; i++) {
			struct plb_msrc *s = &m->src[i];

			if (s->kind == PLB_SRC_PERF)
				plb_perfring_refresh(&s->pr); /* acquire data_head */
			if (!s->in_heap) {
				int r = fill_head(m, i, c);

				if (r > 0) {
					s->in_heap = 1;
					heap_push(m, i);
				} else if (r < 0) {
					stop = 1;
				} else {
					front_min(&front, empty_frontier(m, s, clk), i);
				}
			}
		}
		while (!stop && m->nheap) {
			uint32_t i = m->heap[0];
			struct plb_msrc *s = &m->src[i];
			struct plb_front bound = { UINT64_MAX, UINT32_MAX };
			uint32_t pb; /* the heap position of the next smallest head */
			int forced = 0, r;

			/* The top's key (ts, i) must be below every empty
			 * source's (frontier, index): ties go to the lower index,
			 * so an empty source with a lower index and frontier ==
			 * ts may still publish something that comes first. */
			if (!all) {
				if (!key_below(s->head_ts, i, &front)) {
					/* Some empty source may still publish
					 * something that sorts first. Wait -- unless
					 * a ring is filling up. */
					if (!any_pressured(m))
						break;
					forced = 1;
				} else {
					bound = front;
				}
			}
			/* Records interleaving across two rings: the top and
			 * the next smallest head (pb), bounded by the frontier
			 * and every other head -- by the heap's order, the other
			 * child of the root and pb's children. */
			pb = m->nheap > 2 && head_less(m, m->heap[2], m->heap[1]) ? 2 : 1;
			if (!forced && m->nheap > 1) {
				struct plb_front b3 = bound;
				uint32_t k;

				if (3 - pb < m->nheap)
					front_min(&b3, m->src[m->heap[3 - pb]].head_ts, m->heap[3 - pb]);
				for (k = 2 * pb + 1; k <= 2 * pb + 2 && k < m->nheap; k++)
					front_min(&b3, m->src[m->heap[k]].head_ts, m->heap[k]);
				r = perf_pair(m, pb, &b3, c, &i, to_fn);
				if (r >= 0) {
					s = &m->src[i];
					if (r == 0)
						r = fill_head(m, i, c);
					goto settle;
				}
			}
			/* A run: while the top's ring's next head still sorts
			 * below every other waiting head (and, unless forced, the
			 * frontier), it is the next top: emit it without touching
			 * the heap. A forced emission takes one record, then the
			 * rule is asked again. */
			if (m->nheap > 1)
				front_min(&bound, m->src[m->heap[pb]].head_ts, m->heap[pb]);
			do {
				if (!forced && (r = perf_run(m, i, &bound, c, to_fn)) >= 0) {
					if (r == 0)
						r = fill_head(m, i, c);
					continue; /* to the loop's test */
				}
				if (emit_head(m, i, forced, c, to_fn) < 0)
					return 0; /* out of room; the top is unchanged */
				/* Next head of the same ring, from the head
				 * loaded in this pass (a ring buffer: loaded
				 * again now). */
				r = fill_head(m, i, c);
			} while (r > 0 && !forced && !(to_fn && c->stopped) &&
				 key_below(s->head_ts, i, &bound));
settle:
			if (r > 0) {
				heap_sift_down(m, 0);
			} else {
				heap_pop(m);
				s->in_heap = 0;
				if (r < 0)
					stop = 1;
				else
					front_min(&front, empty_frontier(m, s, clk), i);
			}
			if (to_fn && c->stopped)
				return 0;
		}
		if (c->full || stop)
			return 0;
		if (c->n != n_before) {
			idle_passes = 0;
			continue;
		}
		if (m->st.emitted + m->st.dropped_late + m->st.malformed == taken_before)
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

struct plb_merge *plb_merge_new(const struct plb_merge_config *cfg,
				const struct plb_merge_source *srcs, uint32_t n)
{
	struct plb_merge *m;
	uint64_t st;
	uint32_t i, permille;

	if (!cfg || !srcs || !n ||
	    (cfg->ts_mode != PLB_TS_KERNEL && cfg->ts_mode != PLB_TS_OFFSET) ||
	    (cfg->late_policy != PLB_LATE_DELIVER && cfg->late_policy != PLB_LATE_DROP)) {
		errno = EINVAL;
		return NULL;
	}
	st = cfg->sample_type ? cfg->sample_type : PERF_SAMPLE_RAW;
	/* Only layouts with fixed 8-byte fields before RAW can be walked. */
	if (!(st & PERF_SAMPLE_RAW) || (st & ~(uint64_t)(PLB_MERGE_SAMPLE_FIXED | PERF_SAMPLE_RAW)) ||
	    (cfg->ts_mode == PLB_TS_KERNEL && !(st & PERF_SAMPLE_TIME))) {
		errno = EINVAL;
		return NULL;
	}
	for (i = 0; i < n; i++) {
		const struct plb_merge_source *s = &srcs[i];

		if (s->kind == PLB_SRC_PERF) {
			if (!s->page || !s->data || !s->data_size ||
			    (s->data_size & (s->data_size - 1)))
				break;
		} else if (s->kind == PLB_SRC_RINGBUF) {
			if (cfg->ts_mode == PLB_TS_KERNEL || !valid_rb_view(s->rb))
				break;
		} else {
			break;
		}
	}
	if (i < n) {
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
	permille = cfg->pressure_permille ? cfg->pressure_permille
					  : PLB_MERGE_DEFAULT_PRESSURE_PERMILLE;
	m->cfg.pressure_permille = permille;
	/* PERF_RECORD_SAMPLE: header, then the fixed fields in perf_event.h's
	 * order (IDENTIFIER, IP, TID, TIME, ...), then u32 raw size. */
	m->lay.raw_off = sizeof(struct perf_event_header) +
			 8 * (uint32_t)__builtin_popcountll(st & PLB_MERGE_SAMPLE_FIXED);
	if (cfg->ts_mode == PLB_TS_KERNEL) {
		m->lay.ts_at = sizeof(struct perf_event_header) +
			       8 * (uint32_t)__builtin_popcountll(
					   st & (PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP |
						 PERF_SAMPLE_TID));
		m->lay.ts_need = 0;
	} else {
		m->lay.ts_at = (uint64_t)m->lay.raw_off + sizeof(uint32_t) + cfg->ts_offset;
		m->lay.ts_need = (uint64_t)cfg->ts_offset + sizeof(uint64_t);
	}
	m->lay.min_size = (uint64_t)m->lay.raw_off + sizeof(uint32_t) + m->lay.ts_need;
	m->n = n;
	m->deadline = PLB_MERGE_NO_DEADLINE;

	for (i = 0; i < n; i++) {
		struct plb_msrc *s = &m->src[i];

		s->kind = srcs[i].kind;
		if (s->kind == PLB_SRC_PERF) {
			if (plb_perfring_init(&s->pr, srcs[i].page, srcs[i].data,
					      srcs[i].data_size)) {
				plb_merge_free(m);
				errno = EINVAL;
				return NULL;
			}
			s->size = srcs[i].data_size;
		} else {
			s->rb = *srcs[i].rb;
			/* consumer_pos is written only by us: a relaxed load. */
			s->rb_pos = __atomic_load_n(s->rb.consumer_pos, __ATOMIC_RELAXED);
			s->rb_committed = s->rb_pos;
			s->size = s->rb.mask + 1;
		}
		s->press_thr = permille >= 1000
				       ? UINT64_MAX
				       : (uint64_t)((unsigned __int128)s->size * permille / 1000);
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
