// SPDX-License-Identifier: GPL-2.0
/* A paced producer for the consumer tests and benchmarks/backpressure.py:
 * one BPF_PROG_TEST_RUN (SEC("syscall")) offers `count` 32-byte events with
 * consecutive sequence numbers to a 256 KiB ring buffer, with the kernel's
 * adaptive wakeup. A failed reserve is counted and the event skipped, as a
 * real tracer would lose it.
 *
 * counters[0]: events offered; [1]: failed reserves; [2]: discarded (every
 * discard_every-th reserved event). Submitted = offered - failed - discarded.
 * (Nothing is counted on the loop's stack: a counter there changes on every
 * iteration, so the verifier's states for the bpf_loop callback never
 * converge and the load fails as "too complex".)
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

struct rate_args {
	__u64 count;
	__u64 first_seq;
	__u64 discard_every;  /* 0: never */
};

struct rate_event {
	__u64 seq;
	__u64 ts;
	__u64 value;
	__u64 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} rb SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static void add(__u32 key, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &key);

	if (v)
		__sync_fetch_and_add(v, n);
}

struct loop_ctx {
	struct rate_args *a;  /* the loop context must be on the stack; it only points at ctx */
};

static long emit_one(__u64 i, struct loop_ctx *c)
{
	struct rate_args *a = c->a;
	struct rate_event *e = bpf_ringbuf_reserve(&rb, sizeof(*e), 0);
	__u64 every = a->discard_every;

	if (!e) {
		add(1, 1);
		return 0;
	}
	e->seq = a->first_seq + i;
	e->ts = bpf_ktime_get_ns();
	e->value = i;
	e->pad = 0;
	if (every && (i % every) == every - 1) {
		bpf_ringbuf_discard(e, 0);
		add(2, 1);
		return 0;
	}
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("syscall")
int produce(struct rate_args *a)
{
	struct loop_ctx c = { .a = a };

	bpf_loop(a->count, emit_one, &c, 0);
	add(0, a->count);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
