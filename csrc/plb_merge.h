/* plb_merge.h - the ordered k-way merge across per-CPU perf rings or BPF ring
 * buffers (docs/ordering.md, "The rule").
 *
 * Each source is one ring: a perf ring (one CPU's ring of a
 * BPF_MAP_TYPE_PERF_EVENT_ARRAY, from perf_buffer__buffer()) or a BPF ring
 * buffer (BPF_MAP_TYPE_RINGBUF, walked with plb_ringbuf.h). A binary heap keyed
 * by (timestamp, source index) holds at most one head per source, as a position
 * in that ring: nothing is copied until delivery.
 *
 * The rule. Records are ordered by the key (timestamp, source index). A
 * source's frontier is a lower bound on the timestamps it can still deliver:
 * its head's timestamp if it has a visible head, else max(largest timestamp
 * taken from it, T - L), where T is the clock read before its producer
 * position was last re-checked and L (window_ns) the allowed publish delay
 * (time between a BPF program reading the clock and its record becoming
 * visible). The heap top (t, i) is emitted when, for every empty source j with
 * frontier f, t < f, or t == f and i < j (so equal timestamps leave in source
 * order even when the lower-indexed one arrives later). The order is thus exact
 * whenever every source has data or has passed the candidate, with no added
 * latency; otherwise the wait is at most L (+1 ns) plus one drain. An
 * event below the last emitted timestamp is late: counted, and delivered with
 * PLB_MERGE_F_LATE or dropped (late_policy). PERF_RECORD_LOST records carry no
 * timestamp: they never block and are delivered as their own entries.
 * Pressure valve: while some source with a waiting head is fuller than
 * pressure_permille of its size, the heap top is emitted without waiting
 * (PLB_MERGE_F_FORCED, forced_flushes) -- losing order beats losing data.
 *
 * Clock. Timestamps and the clock must share a time base. bpf_ktime_get_ns()
 * is CLOCK_MONOTONIC (kernel/bpf/helpers.c: ktime_get_mono_fast_ns()), the
 * default clock here. A perf sample's PERF_SAMPLE_TIME is local_clock() unless
 * the event was opened with attr.use_clockid = 1, attr.clockid =
 * CLOCK_MONOTONIC (kernel/events/core.c: perf_clock(), perf_event_set_clock());
 * kernel-time mode assumes the opener did that. Use plb_clock_boottime for
 * bpf_ktime_get_boot_ns(), or any function for tests.
 *
 * Threads: a merge is owned by one thread at a time (no internal locking, no
 * global state); drain never blocks and may run without the GIL. The caller
 * waits (epoll on the rings' fds plus an eventfd, with the timeout from
 * plb_merge_poll_timeout_ms()) and then drains.
 */
#ifndef PLB_MERGE_H
#define PLB_MERGE_H

#include <stddef.h>
#include <stdint.h>
#include <linux/perf_event.h>

#include "plb_perfring.h"
#include "plb_ringbuf.h"

/* plb_merge_source.kind */
enum plb_merge_source_kind {
	PLB_SRC_PERF = 1,    /* page, data, data_size */
	PLB_SRC_RINGBUF = 2, /* rb */
};

/* plb_merge_config.ts_mode */
enum plb_merge_ts_mode {
	PLB_TS_KERNEL = 1, /* PERF_SAMPLE_TIME of a perf sample (perf sources only) */
	PLB_TS_OFFSET = 2, /* u64 at ts_offset in the raw sample / ringbuf record */
};

/* plb_merge_config.late_policy */
enum plb_merge_late_policy {
	PLB_LATE_DELIVER = 0, /* deliver with PLB_MERGE_F_LATE (default) */
	PLB_LATE_DROP = 1,    /* consume, count in dropped_late, do not deliver */
};

/* plb_merge_out.flags[i] */
enum plb_merge_flags {
	PLB_MERGE_F_LATE = 1u << 0,   /* ts below an already emitted ts */
	PLB_MERGE_F_LOST = 1u << 1,   /* a PERF_RECORD_LOST: ts[i] = samples lost */
	PLB_MERGE_F_FORCED = 1u << 2, /* emitted by the pressure valve */
};

/* plb_merge_drain() flags */
enum plb_merge_drain_flags {
	PLB_MERGE_DRAIN_ALL = 1u << 0, /* ignore frontiers: emit every visible
					  head in heap order (close/stop) */
};

#define PLB_MERGE_NO_DEADLINE UINT64_MAX
#define PLB_MERGE_DEFAULT_WINDOW_NS 5000000ull  /* L = 5 ms */
#define PLB_MERGE_DEFAULT_PRESSURE_PERMILLE 750u
/* The perf sample_type bits the merge can walk: RAW, and these fixed 8-byte
 * fields that precede RAW in a PERF_RECORD_SAMPLE (perf_event.h). */
#define PLB_MERGE_SAMPLE_FIXED                                                 \
	(PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID |          \
	 PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR | PERF_SAMPLE_ID |               \
	 PERF_SAMPLE_STREAM_ID | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD)

/* perf's sample_type bits, for callers without <linux/perf_event.h>. */
#define PLB_PERF_SAMPLE_RAW ((uint64_t)PERF_SAMPLE_RAW)
#define PLB_PERF_SAMPLE_TIME ((uint64_t)PERF_SAMPLE_TIME)

typedef uint64_t (*plb_clock_fn)(void *ctx);

struct plb_merge_config {
	uint32_t ts_mode;           /* PLB_TS_KERNEL | PLB_TS_OFFSET */
	uint32_t ts_offset;         /* PLB_TS_OFFSET: byte offset of the u64 */
	uint64_t sample_type;       /* perf sources: the attr's sample_type;
				       0 = PERF_SAMPLE_RAW (libbpf's default) */
	uint64_t window_ns;         /* L, the allowed publish delay */
	uint32_t late_policy;       /* PLB_LATE_DELIVER | PLB_LATE_DROP */
	uint32_t pressure_permille; /* 0 = default (750); >= 1000 = never */
	plb_clock_fn clock;         /* NULL = plb_clock_monotonic */
	void *clock_ctx;
};

struct plb_merge_source {
	uint32_t kind;                      /* PLB_SRC_PERF | PLB_SRC_RINGBUF */
	struct perf_event_mmap_page *page;  /* perf: the mmapped control page */
	uint8_t *data;                      /* perf: page + data_offset */
	uint64_t data_size;                 /* perf: a power of two */
	const struct plb_rb_view *rb;       /* ringbuf: copied by plb_merge_new */
};

/* The output of one drain: the caller provides buf and the five arrays (each
 * at least max_records long); entry i is
 *   ring[i]   source index (0..n-1; map it to the CPU yourself),
 *   ts[i]     the timestamp, or for PLB_MERGE_F_LOST the number of samples lost,
 *   flags[i]  PLB_MERGE_F_*,
 *   start[i]  byte offset of its payload in buf (a multiple of 8),
 *   len[i]    payload length (start and len are 0 for PLB_MERGE_F_LOST).
 * A perf sample's payload is its raw data as the kernel stored it (raw_size
 * bytes, the program's bytes plus up to 7 of padding, as libbpf's sample
 * callback gets it); a ringbuf record's is the record. Payloads are copies:
 * they stay valid until the caller reuses buf. */
struct plb_merge_out {
	uint8_t *buf;         /* in */
	uint64_t buf_size;    /* in (only the first 4 GiB are used) */
	uint32_t *ring;       /* in */
	uint64_t *ts;         /* in */
	uint32_t *flags;      /* in */
	uint32_t *start;      /* in */
	uint32_t *len;        /* in */
	uint64_t used;        /* out: bytes of buf used */
	uint64_t deadline_ns; /* out: see plb_merge_drain() */
	uint32_t need;        /* out: on -ENOSPC, bytes the next payload needs */
};

struct plb_merge_stats {
	uint64_t emitted;         /* samples written to the output (late included) */
	uint64_t late_events;     /* samples below the last emitted timestamp */
	uint64_t max_lateness_ns; /* largest (last emitted - late ts) */
	uint64_t dropped_late;    /* late samples dropped by PLB_LATE_DROP */
	uint64_t inversions;      /* a ring's head below an earlier ts of that ring */
	uint64_t lost_records;    /* PERF_RECORD_LOST records seen */
	uint64_t lost_samples;    /* sum of their counts */
	uint64_t malformed;       /* records skipped: bad size/type/layout */
	uint64_t forced_flushes;  /* samples emitted by the pressure valve */
};

struct plb_merge;

/* CLOCK_MONOTONIC / CLOCK_BOOTTIME in ns (ctx unused): clocks for the config. */
uint64_t plb_clock_monotonic(void *ctx);
uint64_t plb_clock_boottime(void *ctx);

/* Fill a perf source from perf_buffer__buffer(pb, i, &base, &size): the data
 * area is at base + data_offset, data_size long (per the control page; kernels
 * before 4.1 lack them: one page in, size long). 0 or -EINVAL. */
int plb_merge_source_perf(struct plb_merge_source *src, void *base, size_t size);

/* Create a merge over n sources (copied; their memory must outlive the merge).
 * Starts at each ring's current consumer position. Returns NULL with errno
 * EINVAL (bad config or source) or ENOMEM. */
struct plb_merge *plb_merge_new(const struct plb_merge_config *cfg,
				const struct plb_merge_source *srcs, uint32_t n);

/* Free the merge (not the rings). Heads not yet drained stay unconsumed in
 * their rings (data_tail was never released past them). NULL is a no-op. */
void plb_merge_free(struct plb_merge *m);

/* Copy up to max_records entries that the rule allows into out, in merged
 * order, then release each ring's consumer position past what was copied,
 * skipped or dropped. Never blocks. flags: PLB_MERGE_DRAIN_ALL or 0.
 * Returns the number of entries (>= 0), -EINVAL (bad arguments), or -ENOSPC
 * when not even the first payload fits in buf (out->need says how much does).
 * out->deadline_ns, in the clock's time base: 0 = call again now (the output
 * filled up, or only skipped/dropped records moved); PLB_MERGE_NO_DEADLINE =
 * nothing is waiting, sleep until a ring wakes you; else the clock value at
 * which the waiting top becomes emittable even if the rings blocking it stay
 * silent: top timestamp + L, + 1 when an empty source with a lower index could
 * still tie with it. Drain again then (or when a ring wakes you) -- a perf
 * ring's fd reports each wakeup once, so data already visible but held back
 * does not wake epoll again. */
int plb_merge_drain(struct plb_merge *m, struct plb_merge_out *out,
		    uint32_t max_records, uint32_t flags);

/* The callback of plb_merge_consume(), once per entry in merged order: ring
 * is the source index, ts the timestamp (for PLB_MERGE_F_LOST the number of
 * samples lost), flags PLB_MERGE_F_*. data/len is the payload as
 * plb_merge_out describes it, in place: a pointer into the ring (or, for a
 * perf record that wraps the end of its ring, into the merge's scratch copy),
 * valid only until the callback returns -- the ring's consumer position is
 * released after the consume, so the kernel cannot reuse those bytes while
 * the callback runs. NULL and 0 for a PERF_RECORD_LOST. Return 0 to go on;
 * anything else stops the consume after this entry (which counts as taken).
 * The callback must not call into the merge. */
typedef int (*plb_merge_event_fn)(void *ctx, uint32_t ring, uint64_t ts, uint32_t flags,
				  const void *data, uint32_t len);

/* plb_merge_drain() without the copy, for consumers written in C (as libbpf's
 * perf_buffer__consume() hands its callback a pointer into the ring): hand up
 * to max_records entries that the rule allows to fn, in merged order, then
 * release each ring's consumer position past them. The same rule, counters,
 * flags and deadline as plb_merge_drain(); there is no output buffer, so no
 * -ENOSPC. Never blocks, but holds the rings' space until fn has seen the
 * whole consume: a slow fn wants a small max_records. Returns the number of
 * entries handed to fn (>= 0) or -EINVAL (bad arguments); the deadline is
 * plb_merge_next_deadline() (0 as well when fn stopped the consume). */
int plb_merge_consume(struct plb_merge *m, plb_merge_event_fn fn, void *ctx,
		      uint32_t max_records, uint32_t flags);

/* The length every one of out's first n entries has, when they are samples
 * of one length of at least one byte laid back to back from offset 0 (each
 * at the previous start plus the length rounded up to 8: how a drain lays
 * them out) with no flags (none late, lost or forced); else -1 (also for
 * n == 0). A reader then describes the entries by that length alone,
 * without their arrays. One pass over three of the arrays, right after the
 * drain wrote them. */
int64_t plb_merge_out_uniform(const struct plb_merge_out *out, uint32_t n);

/* The epoll timeout, in ms rounded up, for the last drain's deadline: -1 (no
 * deadline), 0 (now), or the ms until it (capped at INT32_MAX). */
int plb_merge_poll_timeout_ms(struct plb_merge *m);

/* The last drain's out->deadline_ns. */
uint64_t plb_merge_next_deadline(const struct plb_merge *m);

/* Counters, and (if backlog is not NULL) bytes pending in each of the first
 * min(n, nsources) rings: producer position (acquire-loaded now) minus the
 * merge's read position. Call from the thread that drains. */
void plb_merge_stats(const struct plb_merge *m, struct plb_merge_stats *st,
		     uint64_t *backlog, uint32_t n);

uint32_t plb_merge_nsources(const struct plb_merge *m);

#endif
