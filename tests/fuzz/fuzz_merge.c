/* fuzz_merge.c - libFuzzer target: the ordered k-way merge (plb_merge_*) over
 * synthetic perf rings and BPF ring buffers built from the input.
 *
 * The input chooses a config (timestamp mode and offset, sample_type layout,
 * window L, late policy, pressure threshold), an injected clock (start and a
 * cycle of per-read increments, or a "wild" non-monotone one), 1..6 sources
 * (perf rings of struct perf_event_mmap_page + data, 8 B to 16 KiB, or ring
 * buffers, 1 B to 16 KiB; positions anywhere including across 2^32 and 2^64),
 * and then a sequence of operations: kernel-like production
 * (PERF_RECORD_SAMPLE in the config's layout, PERF_RECORD_LOST, other record
 * types, truncated records, lying raw sizes, BUSY/DISCARD ring buffer records,
 * raw garbage headers), clock steps, and drains with random max_records,
 * buffer sizes and flags -- or consumes (plb_merge_consume) whose callback
 * copies each entry into the same arrays and may stop at any entry.
 * It ends with the producers finishing every record and PLB_MERGE_DRAIN_ALL
 * until nothing is left.
 *
 * What is checked, besides ASan/UBSan on every access:
 *   - consumes: each payload in place (in its ring's memory, or the merge's
 *     scratch copy), LOST entries without one, deadline 0 after a stop;
 *   - the output: entries well formed (ring index, flags, 8-aligned ordered
 *     payloads inside buf, out->used), a sample flagged late exactly when its
 *     ts is below the largest ts emitted before it (so the others come out
 *     non-decreasing), no late sample under PLB_LATE_DROP;
 *   - the counters against the output: emitted, lost_records/lost_samples,
 *     late_events = flagged + dropped_late, max_lateness_ns, forced_flushes,
 *     and the backlog of every ring;
 *   - every ring's consumer position only moves forward, never past its
 *     producer position, by multiples of 8 on a well-formed ring;
 *   - deadlines: a finite one lies after the last clock reading; at that clock
 *     value, with no new data, the next drain makes progress; after
 *     PLB_MERGE_NO_DEADLINE the next drain finds nothing;
 *   - termination: drains return, and the final DRAIN_ALL loop empties every
 *     ring in a bounded number of calls;
 *   - for rings that hold only what the producer wrote ("exact"): each ring's
 *     samples and LOST records come out in ring order with their timestamps
 *     and bytes (minus the samples PLB_LATE_DROP dropped), and malformed,
 *     inversions, lost and dropped counts are exact;
 *   - the rule itself: when every ring is exact, producers keep their own
 *     order and publish each record within L of its timestamp, the pressure
 *     valve never fired and DRAIN_ALL was used only at the end, the output is
 *     sorted by (timestamp, ring index) and nothing is late.
 */
#include "plb_perfring.c"
#include "plb_ringbuf.c"
#include "plb_merge.c"
#include "plb_merge_runs.c"
#include "fuzz_common.h"

#include <errno.h>

#define MAX_SRC 6
#define MAX_ITEMS 512
#define BIG_MAX 256          /* entries per "ample" drain */
#define BIG_BUF (1u << 17)   /* bytes per "ample" drain: any payload fits */
#define MAX_OPS 256
#define FN_BUF (1u << 20)    /* consume: what every source can hold, padded */

enum { IT_SAMPLE, IT_LOST, IT_BAD, IT_SKIP };

/* One record a producer wrote, in ring order. */
struct item {
	uint8_t kind;  /* IT_SAMPLE, IT_LOST, IT_BAD (malformed), IT_SKIP (discarded) */
	uint8_t busy;  /* ring buffer: reserved, not committed yet */
	uint32_t seq;  /* payload pattern */
	uint32_t len;  /* payload length */
	uint64_t ts;   /* IT_SAMPLE: timestamp; IT_LOST: samples lost */
	uint64_t pos;  /* ring buffer: position of its header */
};

struct src {
	uint32_t kind;            /* PLB_SRC_PERF | PLB_SRC_RINGBUF */
	uint64_t size, mask;
	struct perf_event_mmap_page *page; /* perf */
	uint8_t *pdata;
	void *block;              /* perf: page and data in one allocation */
	uint8_t *rdata;           /* ring buffer: 2 * size, mirrored */
	uint64_t *cons, *prod;
	struct plb_rb_view view;
	uint64_t wpos;            /* the producer's write position */
	uint64_t pending_lost;    /* perf: samples refused for lack of room */
	int honest_pos;           /* positions are the producer's: it may write */
	int exact;                /* ...and every record is in items[] */
	int have_ts;
	uint64_t last_ts;         /* last visible valid sample's ts */
	uint64_t inversions;      /* visible valid samples below the previous one */
	uint64_t gen_ts;          /* last ts written (the honest floor) */
	struct item *items;       /* MAX_ITEMS of them */
	unsigned nitems;
	unsigned vis;             /* items[0, vis) are visible to the consumer */
	unsigned cursor;          /* next item the output must match */
};

struct fclock {
	uint64_t now;
	uint64_t delta[4];
	unsigned nd, k;
	int wild;                 /* return delta[] values as they are */
	uint64_t last_read;
};

struct harness {
	struct plb_merge_config cfg;
	uint32_t raw_off, time_off; /* perf sample layout for cfg.sample_type */
	struct fclock clk;
	uint32_t n;
	struct src src[MAX_SRC];
	struct plb_merge *m;
	uint32_t seq;
	uint64_t total_bytes;     /* bytes the producers wrote, for loop bounds */
	/* what the output showed so far */
	int have_max;
	uint64_t runmax;          /* largest ts emitted */
	uint64_t nsamples, nlost, lostsum, nlate, maxlate, nforced, model_dropped;
	int have_key, sorted;
	uint64_t key_ts;
	uint32_t key_ring;
	/* preconditions of the rule's exactness */
	int honest_time, mid_all;
	int quiet;                /* no production since the last drain */
	uint64_t last_deadline;
};

static struct harness H;
static struct item items_store[MAX_SRC][MAX_ITEMS];
static uint8_t rec[1 << 16]; /* a record being built */

static uint64_t fz_clock(void *ctx)
{
	struct fclock *c = ctx;

	if (c->wild)
		c->now = c->nd ? c->delta[c->k++ % c->nd] : 0;
	else if (c->nd)
		c->now = sat_add(c->now, c->delta[c->k++ % c->nd]);
	c->last_read = c->now;
	return c->now;
}

/* ---- producers ---- */

static uint64_t consumer_pos(const struct src *s)
{
	return s->kind == PLB_SRC_PERF
		       ? __atomic_load_n(&s->page->data_tail, __ATOMIC_ACQUIRE)
		       : __atomic_load_n(s->cons, __ATOMIC_ACQUIRE);
}

static uint64_t producer_pos(const struct src *s)
{
	return s->kind == PLB_SRC_PERF
		       ? __atomic_load_n(&s->page->data_head, __ATOMIC_ACQUIRE)
		       : __atomic_load_n(s->prod, __ATOMIC_ACQUIRE);
}

/* Store bytes at a ring position, wrapping (a ring buffer's data is written
 * to both halves: the kernel's double mapping). */
static void src_put(struct src *s, uint64_t pos, const void *p, size_t len)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < len; i++) {
		uint64_t off = (pos + i) & s->mask;

		if (s->kind == PLB_SRC_PERF) {
			s->pdata[off] = b[i];
		} else {
			s->rdata[off] = b[i];
			s->rdata[off + s->size] = b[i];
		}
	}
	H.total_bytes += len;
}

static struct item *new_item(struct src *s, uint8_t kind)
{
	struct item *it;

	if (s->nitems == MAX_ITEMS)
		return NULL;
	it = &s->items[s->nitems++];
	memset(it, 0, sizeof(*it));
	it->kind = kind;
	it->seq = H.seq++;
	return it;
}

/* Records become visible (perf: data_head published; ring buffer: every
 * record up to the first busy one), in ring order; a busy record discarded
 * later never counts. A sample older than clock - L, or older than the one
 * before it in its ring, breaks the promises the rule relies on. */
static void make_visible(struct src *s)
{
	uint64_t floor = sat_sub(H.clk.now, H.cfg.window_ns);

	while (s->vis < s->nitems && !s->items[s->vis].busy) {
		const struct item *it = &s->items[s->vis++];

		if (it->kind != IT_SAMPLE)
			continue;
		if (it->ts < floor)
			H.honest_time = 0;
		if (s->have_ts && it->ts < s->last_ts) {
			s->inversions++;
			H.honest_time = 0;
		}
		s->have_ts = 1;
		s->last_ts = it->ts;
	}
}

/* A timestamp: mostly honest (at or above both the ring's last and clock - L,
 * small steps so rings tie), sometimes late, sometimes anything. */
static uint64_t gen_ts(struct src *s, struct fz *f)
{
	uint8_t b = fz_u8(f);
	uint64_t floor = sat_sub(H.clk.now, H.cfg.window_ns);

	if (s->gen_ts > floor)
		floor = s->gen_ts;
	switch (b & 7) {
	case 6:
		return sat_sub(floor, 1 + (uint64_t)fz_u8(f));
	case 7:
		return fz_u64(f);
	default:
		return sat_add(floor, b >> 3);
	}
}

/* The payload byte j of a sample: its pattern, with the timestamp at
 * ts_offset in PLB_TS_OFFSET mode. */
static uint8_t payload_byte(const struct item *it, uint32_t j)
{
	uint64_t o = H.cfg.ts_offset;

	if (H.cfg.ts_mode == PLB_TS_OFFSET && j >= o && j < o + 8)
		return (uint8_t)(it->ts >> (8 * (j - o)));
	return pat(it->seq, j);
}

static int perf_room(const struct src *s, uint64_t sz)
{
	return s->size - (s->wpos - consumer_pos(s)) >= sz;
}

static void perf_emit(struct src *s, uint32_t total)
{
	src_put(s, s->wpos, rec, total);
	s->wpos += total;
}

/* A PERF_RECORD_LOST {header, u64 id, u64 lost[, sample_id]}; short = a
 * record too small to hold its count. */
static void perf_lost(struct src *s, uint64_t lost, int extra, int short_rec)
{
	struct perf_event_header h = { .type = PERF_RECORD_LOST, .misc = 0 };
	uint64_t id = 0x1d;
	uint32_t total = short_rec ? 8 + 8 * (uint32_t)extra : 24 + 8 * (uint32_t)extra;
	struct item *it;

	if (short_rec && total > 16)
		total = 16;
	if (!perf_room(s, total) || !(it = new_item(s, short_rec ? IT_BAD : IT_LOST)))
		return;
	h.size = (uint16_t)total;
	memset(rec, 0x4c, total);
	memcpy(rec, &h, sizeof(h));
	if (total >= 16)
		memcpy(rec + 8, &id, 8);
	if (total >= 24)
		memcpy(rec + 16, &lost, 8);
	it->ts = lost;
	perf_emit(s, total);
}

/* The kernel writes a LOST record before the next one when it had to refuse
 * samples (perf_output_begin / perf_event_lost). */
static void perf_flush_lost(struct src *s)
{
	if (s->pending_lost && perf_room(s, 24)) {
		perf_lost(s, s->pending_lost, 0, 0);
		s->pending_lost = 0;
	}
}

/* A PERF_RECORD_SAMPLE laid out as perf_output_sample() does for
 * cfg.sample_type: header, fixed 8-byte fields, u32 raw size, raw bytes
 * padded so the record is 8-aligned. It may lie about its raw size, or be cut
 * short by its header's size. */
static void perf_sample(struct src *s, struct fz *f)
{
	static const uint64_t order[] = { PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP,
					  PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
					  PERF_SAMPLE_ADDR, PERF_SAMPLE_ID,
					  PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_CPU,
					  PERF_SAMPLE_PERIOD };
	uint8_t b = fz_u8(f);
	uint32_t want = (b & 0x40) ? fz_u16(f) % 4096 : fz_u8(f) % 48;
	uint32_t total = (H.raw_off + 4 + want + 7) & ~7u, room, claimed, off = 8;
	uint64_t ts = gen_ts(s, f), o = H.cfg.ts_offset;
	struct perf_event_header h = { .type = PERF_RECORD_SAMPLE, .misc = 0 };
	struct item *it;
	int valid;

	room = total - H.raw_off - 4;
	claimed = room;
	if ((b & 0x30) == 0x30) {
		/* A lie: a little more or less than the room, or tiny. */
		uint8_t l = fz_u8(f);

		claimed = (l & 1) ? (uint32_t)(l >> 1) % 16 : room + (uint32_t)(int32_t)(int8_t)l;
	}
	if ((b & 0x0c) == 0x0c)
		total = 8 * (1 + fz_u8(f) % (total / 8)); /* cut short */
	perf_flush_lost(s);
	if (!perf_room(s, total)) {
		s->pending_lost++; /* the kernel drops it and counts it */
		return;
	}
	valid = H.raw_off + 4 <= total && (uint64_t)H.raw_off + 4 + claimed <= total &&
		(H.cfg.ts_mode == PLB_TS_KERNEL || o + 8 <= claimed);
	it = new_item(s, valid ? IT_SAMPLE : IT_BAD);
	if (!it)
		return;
	it->ts = ts;
	it->len = claimed;

	/* Build the whole uncut record, then store its first total bytes. */
	memset(rec, 0, H.raw_off + 4 + room);
	for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
		uint64_t v = order[k] == PERF_SAMPLE_TIME ? ts : 0x1111111111111111ull * (k + 1);

		if (!(H.cfg.sample_type & order[k]))
			continue;
		memcpy(rec + off, &v, 8);
		off += 8;
	}
	CHECK(off == H.raw_off);
	memcpy(rec + off, &claimed, 4);
	for (uint32_t j = 0; j < room; j++)
		rec[off + 4 + j] = pat(it->seq, j);
	if (H.cfg.ts_mode == PLB_TS_OFFSET && o + 8 <= room)
		memcpy(rec + off + 4 + o, &ts, 8);
	h.size = (uint16_t)total;
	memcpy(rec, &h, sizeof(h));
	perf_emit(s, total);
	if (valid)
		s->gen_ts = ts;
}

/* A record of another type (the merge must skip it), or raw garbage. */
static void perf_other(struct src *s, struct fz *f, int garbage)
{
	static const uint32_t types[] = { PERF_RECORD_MMAP, PERF_RECORD_COMM,
					  PERF_RECORD_EXIT, PERF_RECORD_THROTTLE,
					  0xffffffffu };
	uint32_t total = 8 * (1 + fz_u8(f) % 8);
	struct perf_event_header h = { .type = types[fz_u8(f) % 5], .misc = 0 };

	if (!perf_room(s, total))
		return;
	memset(rec, 0x6f, total);
	if (garbage) {
		fz_bytes(f, rec, 8); /* any header at all */
		s->exact = 0;
	} else {
		if (!new_item(s, IT_BAD))
			return;
		h.size = (uint16_t)total;
		memcpy(rec, &h, sizeof(h));
	}
	perf_emit(s, total);
}

static void perf_publish(struct src *s)
{
	__atomic_store_n(&s->page->data_head, s->wpos, __ATOMIC_RELEASE);
	make_visible(s);
}

static uint64_t rb_size(uint32_t len)
{
	return ((uint64_t)len + PLB_RB_HDR_SZ + 7) & ~(uint64_t)7;
}

static void rb_hdr(struct src *s, uint64_t pos, uint32_t len_bits)
{
	uint32_t hdr[2] = { len_bits, 0x5eed };

	src_put(s, pos, hdr, sizeof(hdr));
}

/* A ring buffer record (reserve + commit unless busy), or a garbage header. */
static void rb_record(struct src *s, struct fz *f)
{
	uint8_t b = fz_u8(f);
	uint32_t want = (b & 0x40) ? fz_u16(f) % 4096 : fz_u8(f) % 48, len;
	uint64_t o = H.cfg.ts_offset, ts, cons = consumer_pos(s);
	struct item *it;
	int state = b & 3; /* 0, 1 committed; 2 busy; 3 discard */

	if (((b >> 2) & 7) == 7) {
		uint64_t step = 8 * (1 + (uint64_t)fz_u8(f) % 8);

		if (s->wpos + step - cons > s->mask)
			return;
		rb_hdr(s, s->wpos, fz_u32(f));
		s->wpos += step;
		s->exact = 0;
		__atomic_store_n(s->prod, s->wpos, __ATOMIC_RELEASE);
		return;
	}
	/* Mostly room for the timestamp, sometimes not (malformed). */
	len = (!(b & 0x20) && o <= 4096) ? (uint32_t)o + 8 + want : want;
	ts = gen_ts(s, f);
	/* kernel/bpf/ringbuf.c: reserve fails when new_prod - cons > mask. */
	if (len > sizeof(rec) || s->wpos + rb_size(len) - cons > s->mask)
		return;
	it = new_item(s, state == 3 ? IT_SKIP : o + 8 <= len ? IT_SAMPLE : IT_BAD);
	if (!it)
		return;
	it->ts = ts;
	it->len = len;
	it->pos = s->wpos;
	it->busy = state == 2;
	for (uint32_t j = 0; j < len; j++)
		rec[j] = payload_byte(it, j);
	src_put(s, s->wpos + PLB_RB_HDR_SZ, rec, len);
	rb_hdr(s, s->wpos, len | (state == 2 ? PLB_RB_BUSY_BIT : 0) |
				    (state == 3 ? PLB_RB_DISCARD_BIT : 0));
	s->wpos += rb_size(len);
	__atomic_store_n(s->prod, s->wpos, __ATOMIC_RELEASE);
	if (it->kind == IT_SAMPLE)
		s->gen_ts = ts;
	make_visible(s);
}

/* The producer commits (or discards) its oldest busy record. */
static void rb_commit_busy(struct src *s, int discard)
{
	for (unsigned k = s->vis; k < s->nitems; k++) {
		struct item *it = &s->items[k];

		if (!it->busy)
			continue;
		it->busy = 0;
		if (discard)
			it->kind = IT_SKIP;
		rb_hdr(s, it->pos, it->len | (discard ? PLB_RB_DISCARD_BIT : 0));
		make_visible(s);
		return;
	}
}

static void produce(struct fz *f)
{
	struct src *s = &H.src[fz_u8(f) % H.n];
	unsigned k = 1 + fz_u8(f) % 4;

	if (!s->honest_pos)
		return;
	H.quiet = 0;
	while (k--) {
		if (s->kind == PLB_SRC_RINGBUF) {
			rb_record(s, f);
			continue;
		}
		switch (fz_u8(f) % 8) {
		case 0: {
			uint64_t n = fz_u32(f);

			perf_lost(s, n, fz_u8(f) & 1, 0);
			break;
		}
		case 1:
			perf_lost(s, 1, fz_u8(f) & 1, 1);
			break;
		case 2:
			perf_other(s, f, 0);
			break;
		case 3:
			perf_other(s, f, fz_u8(f) == 0x47); /* rare: garbage */
			break;
		default:
			perf_sample(s, f);
			break;
		}
	}
	if (s->kind == PLB_SRC_PERF)
		perf_publish(s);
}

/* ---- the consumer side ---- */

static int payload_ok(const uint8_t *p, const struct item *it)
{
	for (uint32_t j = 0; j < it->len; j++)
		if (p[j] != payload_byte(it, j))
			return 0;
	return 1;
}

/* Entry k of a drain came from an exact ring: it must be that ring's next
 * item (after malformed ones), unless PLB_LATE_DROP dropped samples first. */
static void model_entry(struct src *s, const struct plb_merge_out *o, uint32_t k)
{
	for (;;) {
		struct item *it;

		while (s->cursor < s->nitems && (s->items[s->cursor].kind == IT_BAD ||
						 s->items[s->cursor].kind == IT_SKIP))
			s->cursor++;
		CHECK(s->cursor < s->vis); /* never beyond what was visible */
		it = &s->items[s->cursor];
		if (o->flags[k] & PLB_MERGE_F_LOST) {
			if (it->kind == IT_LOST) {
				CHECK(it->ts == o->ts[k]);
				s->cursor++;
				return;
			}
		} else if (it->kind == IT_SAMPLE && it->ts == o->ts[k] &&
			   it->len == o->len[k] &&
			   (!it->len || payload_ok(o->buf + o->start[k], it))) {
			s->cursor++;
			return;
		}
		/* Skipped over: only a sample dropped for being late. */
		CHECK(H.cfg.late_policy == PLB_LATE_DROP && it->kind == IT_SAMPLE &&
		      H.have_max && it->ts < H.runmax);
		H.model_dropped++;
		s->cursor++;
	}
}

static void check_stats(void)
{
	struct plb_merge_stats st;
	uint64_t backlog[MAX_SRC + 1];

	backlog[H.n] = 0xb0b0;
	/* Ask for one more than there are: only n are written. */
	plb_merge_stats(H.m, &st, backlog, H.n + 1);
	CHECK(backlog[H.n] == 0xb0b0);
	CHECK(st.emitted == H.nsamples);
	CHECK(st.lost_records == H.nlost && st.lost_samples == H.lostsum);
	CHECK(st.late_events == H.nlate + st.dropped_late);
	CHECK(st.forced_flushes == H.nforced);
	if (H.cfg.late_policy == PLB_LATE_DELIVER) {
		CHECK(st.dropped_late == 0);
		CHECK(st.max_lateness_ns == H.maxlate);
	} else {
		CHECK(H.nlate == 0);
	}
	if (!st.late_events)
		CHECK(st.max_lateness_ns == 0);
	for (uint32_t i = 0; i < H.n; i++)
		CHECK(backlog[i] == producer_pos(&H.src[i]) - consumer_pos(&H.src[i]));
	CHECK(plb_merge_nsources(H.m) == H.n);
}

/* plb_merge_consume's callback: checks the entry is in place (a LOST entry
 * has no payload; a sample lies in its ring's memory or is the merge's
 * scratch copy) and writes it into the plb_merge_out the checks read, as
 * plb_merge_drain would. Stops the consume at entry stop_at (0: never). */
struct fn_sink {
	struct plb_merge_out *o;
	uint32_t n, max, stop_at;
};

static int fz_fn(void *ctx, uint32_t ring, uint64_t ts, uint32_t flags, const void *data,
		 uint32_t len)
{
	struct fn_sink *k = ctx;
	struct plb_merge_out *o = k->o;
	uint64_t at = 0;

	CHECK(k->n < k->max && ring < H.n);
	if (flags & PLB_MERGE_F_LOST) {
		CHECK(data == NULL && len == 0);
	} else {
		const struct src *s = &H.src[ring];
		const uint8_t *p = data, *lo = s->kind == PLB_SRC_PERF ? s->pdata : s->rdata;
		uint64_t span = s->kind == PLB_SRC_PERF ? s->size : 2 * s->size;

		CHECK(p == H.m->scratch || (p >= lo && (uint64_t)(p - lo) + len <= span));
		at = (o->used + 7) & ~7ull;
		CHECK(at + len <= o->buf_size);
		memcpy(o->buf + at, p, len);
		o->used = at + len;
	}
	o->ring[k->n] = ring;
	o->ts[k->n] = ts;
	o->flags[k->n] = flags;
	o->start[k->n] = (uint32_t)at;
	o->len[k->n] = len;
	return ++k->n == k->stop_at;
}

/* One plb_merge_drain (or, with consume, plb_merge_consume stopping at entry
 * stop_at), checked. Returns its result. */
static int drain(uint32_t max, size_t bufsz, uint32_t flags, int consume, uint32_t stop_at)
{
	struct plb_merge_out o;
	uint64_t old[MAX_SRC], prodp[MAX_SRC], end = 0;
	uint32_t cap = bufsz > UINT32_MAX ? UINT32_MAX : (uint32_t)bufsz;
	int rc;

	memset(&o, 0, sizeof(o));
	if (consume) /* no byte limit: room for everything the rings hold */
		bufsz = cap = FN_BUF;
	/* Exact sizes: one entry or byte too many is an ASan report. */
	o.buf = bufsz ? malloc(bufsz) : NULL;
	o.buf_size = bufsz;
	o.ring = malloc(max * sizeof(*o.ring));
	o.ts = malloc(max * sizeof(*o.ts));
	o.flags = malloc(max * sizeof(*o.flags));
	o.start = malloc(max * sizeof(*o.start));
	o.len = malloc(max * sizeof(*o.len));
	CHECK((!bufsz || o.buf) && o.ring && o.ts && o.flags && o.start && o.len);
	for (uint32_t i = 0; i < H.n; i++) {
		old[i] = consumer_pos(&H.src[i]);
		prodp[i] = producer_pos(&H.src[i]);
	}

	if (consume) {
		struct fn_sink k = { &o, 0, max, stop_at };

		rc = plb_merge_consume(H.m, fz_fn, &k, max, flags);
		CHECK(rc == (int)k.n);
		o.deadline_ns = plb_merge_next_deadline(H.m);
		if (stop_at && k.n == stop_at)
			CHECK(o.deadline_ns == 0); /* stopped: call again now */
	} else {
		rc = plb_merge_drain(H.m, &o, max, flags);
	}

	CHECK(rc == -ENOSPC || (rc >= 0 && (uint32_t)rc <= max));
	CHECK(o.deadline_ns == plb_merge_next_deadline(H.m));
	if (rc == -ENOSPC) {
		CHECK(o.need > cap && o.need <= BIG_BUF);
		CHECK(o.deadline_ns == 0);
	}
	for (uint32_t k = 0; rc > 0 && k < (uint32_t)rc; k++) {
		struct src *s;
		uint64_t ts = o.ts[k];

		CHECK(o.ring[k] < H.n);
		s = &H.src[o.ring[k]];
		if (o.flags[k] & PLB_MERGE_F_LOST) {
			CHECK(o.flags[k] == PLB_MERGE_F_LOST);
			CHECK(o.start[k] == 0 && o.len[k] == 0);
			H.nlost++;
			H.lostsum += ts;
			if (s->exact)
				model_entry(s, &o, k);
			continue;
		}
		CHECK(!(o.flags[k] & ~(uint32_t)(PLB_MERGE_F_LATE | PLB_MERGE_F_FORCED)));
		CHECK(o.start[k] % 8 == 0 && o.start[k] >= end);
		CHECK((uint64_t)o.start[k] + o.len[k] <= cap);
		end = (uint64_t)o.start[k] + o.len[k];
		/* Late exactly when below the largest ts emitted before. */
		if (H.have_max && ts < H.runmax) {
			CHECK(o.flags[k] & PLB_MERGE_F_LATE);
			CHECK(H.cfg.late_policy == PLB_LATE_DELIVER);
			H.nlate++;
			if (H.runmax - ts > H.maxlate)
				H.maxlate = H.runmax - ts;
		} else {
			CHECK(!(o.flags[k] & PLB_MERGE_F_LATE));
		}
		if (o.flags[k] & PLB_MERGE_F_FORCED) {
			CHECK(H.cfg.pressure_permille < 1000);
			H.nforced++;
		}
		if (H.have_key && (ts < H.key_ts || (ts == H.key_ts && o.ring[k] < H.key_ring)))
			H.sorted = 0;
		H.have_key = 1;
		H.key_ts = ts;
		H.key_ring = o.ring[k];
		if (s->exact)
			model_entry(s, &o, k);
		if (!H.have_max || ts > H.runmax)
			H.runmax = ts;
		H.have_max = 1;
		H.nsamples++;
	}
	if (rc >= 0)
		CHECK(o.used == end);

	/* Consumer positions: forward, not past the producer. */
	for (uint32_t i = 0; i < H.n; i++) {
		uint64_t now = consumer_pos(&H.src[i]);

		CHECK(producer_pos(&H.src[i]) == prodp[i]);
		CHECK(now - old[i] <= prodp[i] - old[i]);
		if (H.src[i].exact)
			CHECK((now - old[i]) % 8 == 0);
	}
	check_stats();

	/* A finite deadline lies after the clock reading that held the top. */
	if (rc >= 0 && !H.clk.wild && o.deadline_ns != 0 &&
	    o.deadline_ns != PLB_MERGE_NO_DEADLINE && o.deadline_ns != UINT64_MAX - 1)
		CHECK(o.deadline_ns > H.clk.last_read);
	H.last_deadline = o.deadline_ns;
	H.quiet = rc >= 0;

	free(o.buf);
	free(o.ring);
	free(o.ts);
	free(o.flags);
	free(o.start);
	free(o.len);
	return rc;
}

/* A drain with the input's max_records, buffer size and flags. */
static void drain_from(struct fz *f, int allow_all)
{
	uint8_t b = fz_u8(f);
	uint32_t max = (b & 0x80) ? 1 + fz_u8(f) : 1 + (b & 7);
	size_t bufsz;

	switch ((b >> 3) & 3) {
	case 0:
		bufsz = 0;
		break;
	case 1:
		bufsz = fz_u8(f);
		break;
	case 2:
		bufsz = fz_u16(f);
		break;
	default:
		bufsz = BIG_BUF;
		break;
	}
	if (allow_all && (b & 0x20))
		H.mid_all = 1;
	drain(max, bufsz, allow_all && (b & 0x20) ? PLB_MERGE_DRAIN_ALL : 0, !!(b & 0x40),
	      (b & 0x40) && (b & 0x18) == 0x08 ? 1 + (fz_u8(f) & 7) : 0);
}

/* With no new data since the last drain: after PLB_MERGE_NO_DEADLINE nothing
 * is there; at a finite deadline the held-back top becomes emittable. */
static void probe(void)
{
	struct plb_merge_stats a, b;
	uint64_t d = H.last_deadline;
	int rc;

	if (!H.quiet || H.clk.wild || d == 0 || d == UINT64_MAX - 1)
		return;
	plb_merge_stats(H.m, &a, NULL, 0);
	if (d == PLB_MERGE_NO_DEADLINE) {
		rc = drain(BIG_MAX, BIG_BUF, 0, 0, 0);
		plb_merge_stats(H.m, &b, NULL, 0);
		CHECK(rc == 0 && b.malformed == a.malformed &&
		      b.dropped_late == a.dropped_late);
		CHECK(H.last_deadline == PLB_MERGE_NO_DEADLINE);
		return;
	}
	if (H.clk.now < d)
		H.clk.now = d;
	rc = drain(BIG_MAX, BIG_BUF, 0, 0, 0);
	plb_merge_stats(H.m, &b, NULL, 0);
	CHECK(rc > 0 || b.dropped_late > a.dropped_late);
}

/* plb_merge_poll_timeout_ms: the last deadline, in ms rounded up. */
static void poll_timeout(void)
{
	uint64_t d = H.last_deadline;
	int ms = plb_merge_poll_timeout_ms(H.m);

	if (d == PLB_MERGE_NO_DEADLINE) {
		CHECK(ms == -1);
	} else if (d == 0 || d <= H.clk.now) {
		CHECK(ms == 0);
	} else if (!H.clk.wild) {
		/* It read the clock once: H.clk.now is what it saw. */
		uint64_t left = d - H.clk.now;

		CHECK(ms >= 1);
		CHECK(ms == INT32_MAX || (uint64_t)ms * 1000000 >= left);
		CHECK((uint64_t)(ms - 1) * 1000000 < left);
	}
}

/* ---- set-up ---- */

static void setup_source(struct src *s, struct fz *f)
{
	uint8_t b = fz_u8(f);
	uint64_t start = fz_pos(f);

	s->kind = (b & 1) && H.cfg.ts_mode == PLB_TS_OFFSET ? PLB_SRC_RINGBUF : PLB_SRC_PERF;
	/* 8 B .. 16 KiB; a ring buffer view may even claim 1, 2 or 4 bytes. */
	s->size = s->kind == PLB_SRC_PERF ? 8ull << ((b >> 1) % 12) : 1ull << ((b >> 1) % 15);
	s->mask = s->size - 1;
	/* Positions the kernel would never produce: unaligned, or a producer
	 * position more than a ring ahead or behind; stale bytes as records. */
	s->honest_pos = !(b & 0x20);
	s->exact = s->honest_pos;
	if (s->honest_pos)
		start &= ~(uint64_t)7;
	if (s->kind == PLB_SRC_PERF) {
		if (b & 0x40) {
			/* One block, found through plb_merge_source_perf. */
			struct plb_merge_source ms;
			size_t off = sizeof(*s->page);

			s->block = calloc(1, off + s->size);
			CHECK(s->block);
			s->page = s->block;
			s->page->data_offset = off;
			s->page->data_size = s->size;
			CHECK(plb_merge_source_perf(&ms, s->block, off + s->size) == 0);
			CHECK(ms.kind == PLB_SRC_PERF && ms.page == s->page &&
			      ms.data == (uint8_t *)s->block + off && ms.data_size == s->size);
			s->pdata = ms.data;
		} else {
			s->page = calloc(1, sizeof(*s->page));
			s->pdata = malloc(s->size);
			CHECK(s->page && s->pdata);
		}
		if (s->honest_pos)
			memset(s->pdata, 0, s->size);
		else
			fz_bytes(f, s->pdata, s->size);
		s->page->data_tail = start;
		s->page->data_head = s->honest_pos ? start : start + fz_u16(f);
	} else {
		s->rdata = malloc(2 * s->size);
		s->cons = malloc(sizeof(*s->cons));
		s->prod = malloc(sizeof(*s->prod));
		CHECK(s->rdata && s->cons && s->prod);
		if (s->honest_pos)
			memset(s->rdata, 0, s->size);
		else
			fz_bytes(f, s->rdata, s->size);
		memcpy(s->rdata + s->size, s->rdata, s->size);
		*s->cons = start;
		*s->prod = s->honest_pos ? start : (b & 0x80) ? fz_pos(f) : start + fz_u16(f);
		s->view.consumer_pos = s->cons;
		s->view.producer_pos = s->prod;
		s->view.data = s->rdata;
		s->view.mask = s->mask;
	}
	s->wpos = start;
}

static void free_source(struct src *s)
{
	if (s->block) {
		free(s->block);
	} else {
		free(s->page);
		free(s->pdata);
	}
	free(s->rdata);
	free(s->cons);
	free(s->prod);
}

static void setup_config(struct fz *f)
{
	uint8_t b = fz_u8(f), w = fz_u8(f), p = fz_u8(f);
	uint64_t fixed = fz_u16(f) & PLB_MERGE_SAMPLE_FIXED;

	H.cfg.ts_mode = (b & 1) ? PLB_TS_KERNEL : PLB_TS_OFFSET;
	H.cfg.sample_type = PERF_SAMPLE_RAW | fixed;
	if (H.cfg.ts_mode == PLB_TS_KERNEL)
		H.cfg.sample_type |= PERF_SAMPLE_TIME;
	switch ((b >> 1) & 3) {
	case 0:
		H.cfg.ts_offset = 0;
		break;
	case 1:
		H.cfg.ts_offset = fz_u8(f) % 32;
		break;
	case 2:
		H.cfg.ts_offset = fz_u8(f);
		break;
	default:
		H.cfg.ts_offset = 0xfffffff8u - fz_u8(f); /* never fits */
		break;
	}
	switch (w % 6) {
	case 0:
		H.cfg.window_ns = 0;
		break;
	case 1:
		H.cfg.window_ns = 1;
		break;
	case 2:
		H.cfg.window_ns = fz_u16(f);
		break;
	case 3:
		H.cfg.window_ns = PLB_MERGE_DEFAULT_WINDOW_NS;
		break;
	case 4:
		H.cfg.window_ns = UINT64_MAX;
		break;
	default:
		H.cfg.window_ns = UINT64_MAX - fz_u8(f);
		break;
	}
	H.cfg.late_policy = (b & 0x08) ? PLB_LATE_DROP : PLB_LATE_DELIVER;
	switch (p & 3) {
	case 0:
		H.cfg.pressure_permille = 0; /* the default, 750 */
		break;
	case 1:
		H.cfg.pressure_permille = 1000; /* never */
		break;
	case 2:
		H.cfg.pressure_permille = fz_u16(f) % 1200;
		break;
	default:
		H.cfg.pressure_permille = 1 + (p >> 2);
		break;
	}
	/* The clock: a start (0, small, around 2^63, near 2^64) and a cycle of
	 * increments per reading, or, rarely, arbitrary values. */
	H.clk.now = (b & 0x10) ? (1ull << 63) - 0x8000 + fz_u16(f) : fz_pos(f);
	H.clk.nd = fz_u8(f) % 5;
	for (unsigned i = 0; i < H.clk.nd; i++) {
		uint64_t d = fz_u16(f);

		H.clk.delta[i] = d << (fz_u8(f) % 24);
	}
	H.clk.wild = (b & 0xe0) == 0xe0;
	H.cfg.clock = fz_clock;
	H.cfg.clock_ctx = &H.clk;
	/* sample_type 0 means PERF_SAMPLE_RAW: walk that spelling too. */
	if (H.cfg.sample_type == PERF_SAMPLE_RAW && (p & 0x80))
		H.cfg.sample_type = 0;
	/* The layout the merge will assume (perf_event.h's field order). */
	{
		uint64_t st = H.cfg.sample_type ? H.cfg.sample_type : PERF_SAMPLE_RAW;

		H.time_off = 8 + 8 * (uint32_t)__builtin_popcountll(
					 st & (PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP |
					       PERF_SAMPLE_TID));
		H.raw_off = 8 + 8 * (uint32_t)__builtin_popcountll(st & PLB_MERGE_SAMPLE_FIXED);
	}
}

/* Configurations and arguments that must be refused with EINVAL. */
static void invalid(struct fz *f)
{
	struct perf_event_mmap_page page;
	static uint8_t data[64];
	uint64_t c = 0, p = 0;
	struct plb_rb_view v = { &c, &p, data, 63 };
	struct plb_merge_config cfg = { .ts_mode = PLB_TS_OFFSET, .sample_type = PERF_SAMPLE_RAW };
	struct plb_merge_source s = { .kind = PLB_SRC_PERF, .page = &page, .data = data,
				      .data_size = sizeof(data) };
	struct plb_merge *m;
	uint8_t b = fz_u8(f);

	memset(&page, 0, sizeof(page));
	switch (b % 9) {
	case 0:
		cfg.ts_mode = (b & 0x10) ? 0 : 3 + fz_u8(f);
		break;
	case 1:
		cfg.late_policy = 2 + fz_u8(f);
		break;
	case 2:
		cfg.sample_type = PERF_SAMPLE_TIME; /* no RAW */
		break;
	case 3:
		cfg.sample_type = PERF_SAMPLE_RAW | PERF_SAMPLE_CALLCHAIN; /* not fixed */
		break;
	case 4:
		cfg.ts_mode = PLB_TS_KERNEL; /* without PERF_SAMPLE_TIME */
		break;
	case 5:
		/* not a power of two, or too small for a record header */
		s.data_size = (b & 0x10) ? 0 : (b & 0x20) ? 4 : 48;
		break;
	case 6:
		s.kind = PLB_SRC_RINGBUF; /* a ring buffer has no kernel time */
		s.rb = &v;
		cfg.ts_mode = PLB_TS_KERNEL;
		cfg.sample_type |= PERF_SAMPLE_TIME;
		break;
	case 7:
		s.kind = PLB_SRC_RINGBUF;
		v.mask = (b & 0x10) ? 47 : UINT64_MAX; /* size not a power of two */
		s.rb = (b & 0x20) ? NULL : &v;
		break;
	default:
		s.kind = 3 + fz_u8(f);
		break;
	}
	errno = 0;
	CHECK(plb_merge_new(&cfg, &s, 1) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(plb_merge_new(&cfg, &s, 0) == NULL && errno == EINVAL);

	/* plb_merge_source_perf: sizes from the control page, or (old kernels:
	 * zeros there) one page in and the size given. */
	{
		struct plb_merge_source ms;
		uint64_t *blk = calloc(1, 2 * 4096 + 64);

		CHECK(blk);
		CHECK(plb_merge_source_perf(NULL, blk, 64) == -EINVAL);
		CHECK(plb_merge_source_perf(&ms, NULL, 64) == -EINVAL);
		if (sysconf(_SC_PAGESIZE) == 4096) {
			CHECK(plb_merge_source_perf(&ms, blk, 4096) == 0);
			CHECK(ms.data == (uint8_t *)blk + 4096 && ms.data_size == 4096);
		}
		CHECK(plb_merge_source_perf(&ms, blk, 48) == -EINVAL);
		((struct perf_event_mmap_page *)blk)->data_size = 64;
		CHECK(plb_merge_source_perf(&ms, blk, 32) == -EINVAL); /* larger than given */
		free(blk);
	}

	/* Drain arguments, on a valid merge (with the default clock). */
	cfg = (struct plb_merge_config){ .ts_mode = PLB_TS_OFFSET };
	s = (struct plb_merge_source){ .kind = PLB_SRC_PERF, .page = &page, .data = data,
				       .data_size = sizeof(data) };
	m = plb_merge_new(&cfg, &s, 1);
	CHECK(m);
	{
		uint32_t r, fl, st, ln;
		uint64_t ts;
		uint8_t buf[8];
		struct plb_merge_out o = { buf, sizeof(buf), &r, &ts, &fl, &st, &ln, 0, 0, 0 };

		CHECK(plb_merge_drain(m, &o, 0, 0) == -EINVAL);
		CHECK(plb_merge_drain(m, NULL, 1, 0) == -EINVAL);
		CHECK(plb_merge_drain(m, &o, 1, 2) == -EINVAL);
		o.buf = NULL;
		CHECK(plb_merge_drain(m, &o, 1, 0) == -EINVAL);
		o.buf = buf;
		o.len = NULL;
		CHECK(plb_merge_drain(m, &o, 1, 0) == -EINVAL);
		CHECK(plb_merge_drain(NULL, &o, 1, 0) == -EINVAL);
		o.len = &ln;
		CHECK(plb_merge_drain(m, &o, 1, 0) == 0);
		CHECK(o.deadline_ns == PLB_MERGE_NO_DEADLINE);
		CHECK(plb_merge_poll_timeout_ms(m) == -1);
	}
	plb_merge_free(m);
	plb_merge_free(NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz f = { data, size };
	struct plb_merge_source ms[MAX_SRC];
	uint8_t mode = fz_u8(&f);
	unsigned nops = 0, rounds = 0;
	uint64_t limit, all_exact = 1, bad = 0, lost = 0, samples = 0, inv = 0;

	if (mode == 0xff) {
		invalid(&f);
		return 0;
	}
	memset(&H, 0, sizeof(H));
	for (unsigned i = 0; i < MAX_SRC; i++)
		H.src[i].items = items_store[i];
	H.honest_time = H.sorted = 1;
	setup_config(&f);
	H.n = 1 + mode % MAX_SRC;
	for (uint32_t i = 0; i < H.n; i++) {
		struct src *s = &H.src[i];

		setup_source(s, &f);
		memset(&ms[i], 0, sizeof(ms[i]));
		ms[i].kind = s->kind;
		ms[i].page = s->page;
		ms[i].data = s->pdata;
		ms[i].data_size = s->size;
		ms[i].rb = s->kind == PLB_SRC_RINGBUF ? &s->view : NULL;
	}
	/* Some records before the merge starts. */
	for (unsigned k = fz_u8(&f) % 8; k; k--)
		produce(&f);

	H.m = plb_merge_new(&H.cfg, ms, H.n);
	CHECK(H.m);
	H.last_deadline = plb_merge_next_deadline(H.m);
	CHECK(H.last_deadline == PLB_MERGE_NO_DEADLINE);

	while (fz_more(&f) && nops++ < MAX_OPS) {
		switch (fz_u8(&f) % 10) {
		case 0:
		case 1:
		case 2:
			drain_from(&f, 0);
			break;
		case 3:
		case 4:
			produce(&f);
			break;
		case 5: {
			struct src *s = &H.src[fz_u8(&f) % H.n];

			if (s->kind == PLB_SRC_RINGBUF) {
				H.quiet = 0;
				rb_commit_busy(s, fz_u8(&f) & 1);
			}
			break;
		}
		case 6: {
			/* A step around L (where frontiers flip), or any size. */
			uint8_t b = fz_u8(&f);
			int8_t e = (int8_t)fz_u8(&f);
			uint64_t d = (b & 1) ? (e >= 0 ? sat_add(H.cfg.window_ns, (uint64_t)e)
						       : sat_sub(H.cfg.window_ns, (uint64_t)-e))
					     : (uint64_t)fz_u16(&f) << (b >> 3);

			H.clk.now = sat_add(H.clk.now, d);
			break;
		}
		case 7:
			probe();
			break;
		case 8:
			poll_timeout();
			break;
		default:
			drain_from(&f, 1);
			break;
		}
	}

	/* The end: producers finish every record, then DRAIN_ALL until every
	 * ring is empty. Each round emits, skips or unblocks something, so the
	 * bytes written bound the rounds. */
	for (uint32_t i = 0; i < H.n; i++) {
		struct src *s = &H.src[i];

		if (s->kind == PLB_SRC_RINGBUF)
			while (s->vis < s->nitems)
				rb_commit_busy(s, 0);
	}
	limit = 64 + H.total_bytes / 8;
	for (uint32_t i = 0; i < H.n; i++)
		limit += H.src[i].size / 8;
	for (;;) {
		int fixed = 0, rc;

		rc = drain(fz_more(&f) ? 1 + fz_u8(&f) : BIG_MAX, BIG_BUF, PLB_MERGE_DRAIN_ALL, 0, 0);
		CHECK(rc >= 0);
		/* A garbage header with BUSY set blocks its ring: the producer
		 * "finishes" it. */
		for (uint32_t i = 0; i < H.n; i++) {
			struct src *s = &H.src[i];
			uint64_t pos = consumer_pos(s);
			uint32_t raw;

			if (s->kind != PLB_SRC_RINGBUF ||
			    plb_rb_peek(&s->view, pos, NULL, NULL, NULL) != PLB_RB_BUSY)
				continue;
			CHECK(!s->exact);
			memcpy(&raw, s->rdata + (pos & s->mask), sizeof(raw));
			rb_hdr(s, pos, raw & ~PLB_RB_BUSY_BIT);
			fixed = 1;
		}
		if (rc == 0 && H.last_deadline == PLB_MERGE_NO_DEADLINE && !fixed)
			break;
		CHECK(++rounds < limit);
	}

	for (uint32_t i = 0; i < H.n; i++) {
		struct src *s = &H.src[i];

		CHECK(consumer_pos(s) == producer_pos(s));
		if (!s->exact) {
			all_exact = 0;
			continue;
		}
		/* What is left unmatched: malformed records, and samples that
		 * were dropped late. */
		for (; s->cursor < s->nitems; s->cursor++) {
			struct item *it = &s->items[s->cursor];

			if (it->kind == IT_SAMPLE) {
				CHECK(H.cfg.late_policy == PLB_LATE_DROP && H.have_max &&
				      it->ts < H.runmax);
				H.model_dropped++;
			} else {
				CHECK(it->kind == IT_BAD || it->kind == IT_SKIP);
			}
		}
		for (unsigned k = 0; k < s->nitems; k++) {
			bad += s->items[k].kind == IT_BAD;
			lost += s->items[k].kind == IT_LOST;
			samples += s->items[k].kind == IT_SAMPLE;
		}
		inv += s->inversions;
	}
	if (all_exact) {
		struct plb_merge_stats st;

		plb_merge_stats(H.m, &st, NULL, 0);
		CHECK(st.malformed == bad);
		CHECK(st.lost_records == lost);
		CHECK(st.emitted + st.dropped_late == samples);
		CHECK(st.dropped_late == H.model_dropped);
		CHECK(st.inversions == inv);
		/* The rule's promise: exact order, nothing late. */
		if (H.honest_time && !H.mid_all && !H.clk.wild && st.forced_flushes == 0) {
			CHECK(st.late_events == 0);
			CHECK(H.sorted);
		}
	}

	plb_merge_free(H.m);
	for (uint32_t i = 0; i < H.n; i++)
		free_source(&H.src[i]);
	return 0;
}
