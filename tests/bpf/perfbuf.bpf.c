// SPDX-License-Identifier: GPL-2.0
/* Perf buffer test programs: SEC("raw_tp") run with BPF_PROG_TEST_RUN, pinned to
 * a CPU with BPF_F_TEST_RUN_ON_CPU. ctx_in: args[0] = count, args[1] = first
 * seq, args[2] = value, args[3] = extra payload bytes (0..1024). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "test_events.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u8[sizeof(struct perf_sample) + 1024]);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} failed_outputs SEC(".maps");

struct perf_ctx {
	void *ctx;
	__u64 first_seq;
	__u64 value;
	__u64 extra;
};

static long output_one(__u64 i, struct perf_ctx *c)
{
	__u32 zero = 0;
	struct perf_sample *e = bpf_map_lookup_elem(&scratch, &zero);
	__u64 size = sizeof(*e) + (c->extra & 1023);

	if (!e)
		return 1;
	e->seq = c->first_seq + i;
	e->value = c->value;
	e->cpu = bpf_get_smp_processor_id();
	if (size > sizeof(*e) + 1023)
		size = sizeof(*e) + 1023;
	if (bpf_perf_event_output(c->ctx, &events, BPF_F_CURRENT_CPU, e, size) < 0) {
		__u64 *failed = bpf_map_lookup_elem(&failed_outputs, &zero);

		if (failed)
			__sync_fetch_and_add(failed, 1);
	}
	return 0;
}

SEC("raw_tp")
int emit_perf(struct bpf_raw_tracepoint_args *ctx)
{
	struct perf_ctx c = {
		.ctx = ctx, .first_seq = ctx->args[1], .value = ctx->args[2], .extra = ctx->args[3],
	};

	bpf_loop(ctx->args[0], output_one, &c, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
