// SPDX-License-Identifier: GPL-2.0
/* Ring buffer test programs, run with BPF_PROG_TEST_RUN (SEC("syscall")).
 * The test passes a struct emit_args as ctx_in and reads back what arrives. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "test_events.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} rb SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 * 1024);
} rb2 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} failed_reserves SEC(".maps");

struct emit_ctx {
	struct emit_args *args;
	void *ring;
};

static long emit_one(__u64 i, struct emit_ctx *c)
{
	struct emit_args *a = c->args;
	struct rb_event *e;

	e = bpf_ringbuf_reserve(c->ring, sizeof(*e), 0);
	if (!e) {
		__u32 zero = 0;
		__u64 *failed = bpf_map_lookup_elem(&failed_reserves, &zero);

		if (failed)
			__sync_fetch_and_add(failed, 1);
		return 0;
	}
	e->seq = a->first_seq + i;
	e->value = a->value;
	e->ring = a->target;
	if (a->discard_every && (i % a->discard_every) == a->discard_every - 1)
		bpf_ringbuf_discard(e, a->flags);
	else
		bpf_ringbuf_submit(e, a->flags);
	return 0;
}

SEC("syscall")
int emit(struct emit_args *args)
{
	struct emit_ctx c = { .args = args, .ring = args->target ? (void *)&rb2 : (void *)&rb };

	bpf_loop(args->count, emit_one, &c, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
