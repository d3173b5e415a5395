// SPDX-License-Identifier: GPL-2.0
/* The benchmark producer: one trigger (BPF_PROG_TEST_RUN) emits `count` events
 * of `size` bytes with bpf_loop. Every event starts with a u64 sequence number
 * and the u64 bpf_ktime_get_ns() of its creation (CLOCK_MONOTONIC).
 *
 * ctx (struct produce_args, four u64 so that the same bytes serve as the
 * raw_tp arguments): count, first_seq, size, flags. flags & PRODUCE_BATCH_WAKEUP
 * submits every ring-buffer event with BPF_RB_NO_WAKEUP except the trigger's
 * last one (BPF_RB_FORCE_WAKEUP): one wakeup per trigger, as throughput runs
 * need (see docs/performance.md); without it the kernel's adaptive wakeup runs.
 *
 * A producer stops at the first failed reserve/output (counted in `failures`:
 * key 0 ring buffer, key 1 perf buffer) and returns how many events it emitted,
 * so the caller can retry the rest later: a full ring throttles the producer
 * instead of leaving holes in the sequence.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#define MAX_EVENT 1024
#define PRODUCE_BATCH_WAKEUP 1

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 128 << 20);   /* holds a drain run's events; a power of 2 pages */
} rb SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u8[MAX_EVENT]);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} failures SEC(".maps");

struct produce_args {
	__u64 count;
	__u64 first_seq;
	__u64 size;
	__u64 flags;
};

struct event_head {
	__u64 seq;
	__u64 ts;
};

/* An event's layout at each size of the suite, as a tool would declare it (the sequence, the time,
 * then text): the typed-skeleton rows read records as these structs (benchmarks/consumers_py.py).
 * The global pointers keep them in BTF. */
struct bench_ev32 { __u64 seq; __u64 ts; char payload[16]; };
struct bench_ev128 { __u64 seq; __u64 ts; char payload[112]; };
struct bench_ev1024 { __u64 seq; __u64 ts; char payload[1008]; };
struct bench_ev32 *keep_ev32 __attribute__((unused));
struct bench_ev128 *keep_ev128 __attribute__((unused));
struct bench_ev1024 *keep_ev1024 __attribute__((unused));

struct loop_ctx {
	__u64 first_seq;
	__u64 count;
	__u64 size;
	__u64 flags;
	void *ctx;
	long emitted;
};

static void count_failure(__u32 key)
{
	__u64 *failed = bpf_map_lookup_elem(&failures, &key);

	if (failed)
		__sync_fetch_and_add(failed, 1);
}

static __u64 submit_flags(struct loop_ctx *c, __u64 i)
{
	if (!(c->flags & PRODUCE_BATCH_WAKEUP))
		return 0;
	return i + 1 == c->count ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

/* bpf_ringbuf_reserve needs a constant size: one loop body per event size. */
#define RING_EMIT(S)								\
static long ring_emit_##S(__u64 i, struct loop_ctx *c)			\
{									\
	struct event_head *e = bpf_ringbuf_reserve(&rb, S, 0);		\
									\
	if (!e) {							\
		count_failure(0);					\
		return 1;						\
	}								\
	e->seq = c->first_seq + i;					\
	e->ts = bpf_ktime_get_ns();					\
	bpf_ringbuf_submit(e, submit_flags(c, i));			\
	c->emitted++;							\
	return 0;							\
}
RING_EMIT(16)
RING_EMIT(32)
RING_EMIT(64)
RING_EMIT(128)
RING_EMIT(256)
RING_EMIT(512)
RING_EMIT(1024)

SEC("syscall")
int produce_ring(struct produce_args *a)
{
	struct loop_ctx c = { .first_seq = a->first_seq, .count = a->count, .flags = a->flags };
	__u64 n = a->count;

	switch (a->size) {
	case 16: bpf_loop(n, ring_emit_16, &c, 0); break;
	case 32: bpf_loop(n, ring_emit_32, &c, 0); break;
	case 64: bpf_loop(n, ring_emit_64, &c, 0); break;
	case 128: bpf_loop(n, ring_emit_128, &c, 0); break;
	case 256: bpf_loop(n, ring_emit_256, &c, 0); break;
	case 512: bpf_loop(n, ring_emit_512, &c, 0); break;
	case 1024: bpf_loop(n, ring_emit_1024, &c, 0); break;
	default: return -1;
	}
	return c.emitted;
}

static long perf_emit(__u64 i, struct loop_ctx *c)
{
	__u32 zero = 0;
	struct event_head *e = bpf_map_lookup_elem(&scratch, &zero);
	__u64 size = c->size;

	if (!e)
		return 1;
	if (size > MAX_EVENT)
		size = MAX_EVENT;
	if (size < sizeof(*e))
		size = sizeof(*e);
	e->seq = c->first_seq + i;
	e->ts = bpf_ktime_get_ns();
	if (bpf_perf_event_output(c->ctx, &events, BPF_F_CURRENT_CPU, e, size) < 0) {
		count_failure(1);
		return 1;
	}
	c->emitted++;
	return 0;
}

/* Run with test_run(cpu=c): the events go to CPU c's perf ring. */
SEC("raw_tp")
int produce_perf(struct bpf_raw_tracepoint_args *ctx)
{
	struct loop_ctx c = {
		.count = ctx->args[0], .first_seq = ctx->args[1], .size = ctx->args[2],
		.flags = ctx->args[3], .ctx = ctx,
	};

	bpf_loop(c.count, perf_emit, &c, 0);
	return c.emitted;
}

char LICENSE[] SEC("license") = "GPL";
