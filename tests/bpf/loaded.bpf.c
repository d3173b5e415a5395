// SPDX-License-Identifier: GPL-2.0
/* Maps in maps, objects opened by id, and one program per kind of link, for tests/test_loaded.py.
 * `by_key` is a hash of maps declared without __array: its inner template is set from Python
 * before load; `inner_value` returns inner[0] of the map at by_key[1]. One program per kind of link
 * the tests make (raw_tp, tp_btf, tracepoint and perf_event, xdp, tcx, cgroup, iter, uprobe_multi). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct pair {
	__u32 a;
	__u32 b;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u32);
} by_key SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8);
	__type(key, struct pair);
	__type(value, __u64);
} pairs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} runs SEC(".maps");

/* inner[0] of the map at by_key[1]; NO_INNER without one, NO_ELEMENT without its element. */
#define NO_INNER 7777
#define NO_ELEMENT 8888

SEC("xdp")
int inner_value(struct xdp_md *ctx)
{
	__u32 key = 1, zero = 0;
	__u64 *value;
	void *inner;

	inner = bpf_map_lookup_elem(&by_key, &key);
	if (!inner)
		return NO_INNER;
	value = bpf_map_lookup_elem(inner, &zero);
	return value ? (int)*value : NO_ELEMENT;
}

SEC("raw_tp/sys_enter")
int on_raw(void *ctx)
{
	return 0;
}

SEC("tp_btf/sys_enter")
int on_tp_btf(void *ctx)
{
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_getpid")
int on_tp(void *ctx)
{
	return 0;
}

SEC("perf_event")
int on_sample(void *ctx)
{
	return 0;
}

SEC("xdp")
int on_xdp(struct xdp_md *ctx)
{
	return XDP_PASS;
}

SEC("tc")
int on_tcx(struct __sk_buff *skb)
{
	return TCX_NEXT;
}

SEC("cgroup/sock_create")
int on_sock(struct bpf_sock *sk)
{
	return 1;
}

SEC("iter/bpf_map_elem")
int walk_runs(struct bpf_iter__bpf_map_elem *ctx)
{
	__u32 *key = ctx->key;
	__u64 *value = ctx->value;

	if (key && value)
		BPF_SEQ_PRINTF(ctx->meta->seq, "%u=%llu\n", *key, *value);
	return 0;
}

SEC("uprobe.multi/libc.so.6:getpid")
int on_getpid(void *ctx)
{
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
