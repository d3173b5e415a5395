// SPDX-License-Identifier: GPL-2.0
/* Ordered-merge and PerfReader test programs: SEC("raw_tp"), run with
 * BPF_PROG_TEST_RUN and pinned to a CPU with BPF_F_TEST_RUN_ON_CPU, so the
 * test decides which CPU's perf ring each record goes to.
 *
 * emit_ordered -- scripted records; ctx_in (struct bpf_raw_tracepoint_args):
 *   args[0] count       records to write
 *   args[1] ts          timestamp of the first record
 *   args[2] ts_step     added per record (u64 arithmetic: wraps to go down)
 *   args[3] seq         sequence number of the first record (+1 per record)
 *   args[4] tag         copied into every record
 *   args[5] extra       payload bytes after the event (0..1023)
 *   args[6] target      0: perf event array `events`; 1: ring buffer rb0; 2: rb1
 * emit_stress -- clock-stamped records; ctx_in:
 *   args[0] count, args[1] tag, args[2] target (0: `events`; 1: rb0 on CPU 0
 *   and rb1 on the others -- per-CPU ring buffers)
 *   ts = bpf_ktime_get_ns(), seq = this CPU's counter, gseq = a global atomic counter.
 * Every failed output is counted in failed_outputs, its error kept in last_error. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

/* The record; tests mirror it as struct.Struct("<QQIIQ"). */
struct ord_event {
	__u64 ts;
	__u64 seq;
	__u32 cpu;
	__u32 tag;
	__u64 gseq;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} rb0 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} rb1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u8[sizeof(struct ord_event) + 1024]);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} cpu_seq SEC(".maps");

/* Index 0: failed outputs; 1: the global sequence counter; 2: last error (s64). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

struct emit_ctx {
	void *ctx;
	__u64 ts, ts_step, seq, tag, extra, target;
};

static __u64 *counter(__u32 idx)
{
	return bpf_map_lookup_elem(&counters, &idx);
}

static void output(void *ctx, __u64 target, struct ord_event *e, __u64 size)
{
	long err;

	if (size > sizeof(*e) + 1023)
		size = sizeof(*e) + 1023;
	if (target == 1)
		err = bpf_ringbuf_output(&rb0, e, size, 0);
	else if (target == 2)
		err = bpf_ringbuf_output(&rb1, e, size, 0);
	else
		err = bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, e, size);
	if (err < 0) {
		__u64 *failed = counter(0), *last = counter(2);

		if (failed)
			__sync_fetch_and_add(failed, 1);
		if (last)
			*last = (__u64)err;
	}
}

static long emit_one(__u64 i, struct emit_ctx *c)
{
	__u32 zero = 0;
	struct ord_event *e = bpf_map_lookup_elem(&scratch, &zero);

	if (!e)
		return 1;
	e->ts = c->ts + i * c->ts_step;
	e->seq = c->seq + i;
	e->cpu = bpf_get_smp_processor_id();
	e->tag = c->tag;
	e->gseq = 0;
	output(c->ctx, c->target, e, sizeof(*e) + (c->extra & 1023));
	return 0;
}

SEC("raw_tp")
int emit_ordered(struct bpf_raw_tracepoint_args *ctx)
{
	struct emit_ctx c = {
		.ctx = ctx, .ts = ctx->args[1], .ts_step = ctx->args[2], .seq = ctx->args[3],
		.tag = ctx->args[4], .extra = ctx->args[5], .target = ctx->args[6],
	};

	bpf_loop(ctx->args[0], emit_one, &c, 0);
	return 0;
}

static long stress_one(__u64 i, struct emit_ctx *c)
{
	__u32 zero = 0;
	struct ord_event *e = bpf_map_lookup_elem(&scratch, &zero);
	__u64 *seq = bpf_map_lookup_elem(&cpu_seq, &zero);
	__u64 *gseq = counter(1);
	__u64 target = c->target;

	if (!e || !seq || !gseq)
		return 1;
	e->gseq = __sync_fetch_and_add(gseq, 1);
	e->ts = bpf_ktime_get_ns();
	e->seq = (*seq)++;
	e->cpu = bpf_get_smp_processor_id();
	e->tag = c->tag;
	if (target)
		target = e->cpu ? 2 : 1;
	output(c->ctx, target, e, sizeof(*e));
	return 0;
}

SEC("raw_tp")
int emit_stress(struct bpf_raw_tracepoint_args *ctx)
{
	struct emit_ctx c = { .ctx = ctx, .tag = ctx->args[1], .target = ctx->args[2] };

	bpf_loop(ctx->args[0], stress_one, &c, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
