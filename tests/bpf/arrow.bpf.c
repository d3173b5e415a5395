// SPDX-License-Identifier: GPL-2.0
/* Events with integer, array and char fields for the Arrow tests: SEC("raw_tp")
 * run with BPF_PROG_TEST_RUN. ctx_in: args[0] = count, args[1] = first seq,
 * args[2] = first timestamp (record i gets ts + i), args[3] = target (0: the
 * ring buffer rb, 1: the perf event array events). Record i's comm is
 * comms[i % 4], an array the test fills. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

struct arrow_event {
	__u64 seq;
	__u64 ts;
	__s32 delta;     /* -seq */
	__u16 vals[3];   /* seq, seq + 1, 65535 (truncated to 16 bits) */
	__u16 pad;
	char comm[16];
	__u32 tail;      /* 0xdeadbeef */
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} rb SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, char[16]);
} comms SEC(".maps");

struct arrow_ctx {
	void *ctx;
	__u64 first_seq;
	__u64 ts;
	__u64 target;
};

static long emit_one(__u64 i, struct arrow_ctx *c)
{
	struct arrow_event e = {};
	__u32 key = i & 3;
	char *comm = bpf_map_lookup_elem(&comms, &key);

	e.seq = c->first_seq + i;
	e.ts = c->ts + i;
	e.delta = -(__s32)e.seq;
	e.vals[0] = e.seq;
	e.vals[1] = e.seq + 1;
	e.vals[2] = 65535;
	e.tail = 0xdeadbeef;
	if (comm)
		__builtin_memcpy(e.comm, comm, sizeof(e.comm));
	if (c->target)
		bpf_perf_event_output(c->ctx, &events, BPF_F_CURRENT_CPU, &e, sizeof(e));
	else
		bpf_ringbuf_output(&rb, &e, sizeof(e), 0);
	return 0;
}

SEC("raw_tp")
int emit_arrow(struct bpf_raw_tracepoint_args *ctx)
{
	struct arrow_ctx c = { .ctx = ctx, .first_seq = ctx->args[1], .ts = ctx->args[2], .target = ctx->args[3] };

	bpf_loop(ctx->args[0], emit_one, &c, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
