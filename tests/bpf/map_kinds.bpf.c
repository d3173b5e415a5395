// SPDX-License-Identifier: GPL-2.0
/* Map kinds without keys or with fd values, for tests/test_map_kinds.py: a queue, a stack and a
 * bloom filter typed from BTF; a program array (`jump` tail-calls slot 0), an array of maps, a
 * sockmap and a cgroup array, whose values are written as fds. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

struct pair {
	__u32 a;
	__u32 b;
};

struct {
	__uint(type, BPF_MAP_TYPE_QUEUE);
	__uint(max_entries, 4);
	__type(value, struct pair);
} fifo SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK);
	__uint(max_entries, 4);
	__type(value, __u64);
} lifo SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_BLOOM_FILTER);
	__uint(max_entries, 64);
	__type(value, __u32);
} seen SEC(".maps");

struct inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} inner_a SEC(".maps"), inner_b SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 2);
	__type(key, __u32);
	__array(values, struct inner);
} outer SEC(".maps") = { .values = { [0] = &inner_a } };

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u32);
} jumps SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SOCKMAP);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_CGROUP_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} cgroups SEC(".maps");

SEC("xdp")
int landed(struct xdp_md *ctx)
{
	return XDP_TX;
}

SEC("xdp")
int jump(struct xdp_md *ctx)
{
	bpf_tail_call(ctx, &jumps, 0);
	return XDP_PASS; /* slot 0 empty */
}

/* Pops the queue's head, pushes a+b on the stack and adds it to the bloom filter; returns a+b. */
SEC("xdp")
int fold(struct xdp_md *ctx)
{
	struct pair p;
	__u64 sum;
	__u32 key;

	if (bpf_map_pop_elem(&fifo, &p))
		return -1;
	sum = p.a + p.b;
	key = sum;
	bpf_map_push_elem(&lifo, &sum, 0);
	bpf_map_push_elem(&seen, &key, 0);
	return sum;
}

char LICENSE[] SEC("license") = "GPL";
