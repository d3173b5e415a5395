// SPDX-License-Identifier: GPL-2.0
/* Maps of several types with BTF key/value types, for the typed Map protocol,
 * batch operations, sizing, pinning and stacks (tests/test_maps.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

struct tflow_key {
	__u32 pid;
	__u16 port;
	__u8 proto;
	/* 1 byte of padding: the typed layer writes it as zero, so equal keys hash equal */
};

struct tflow_stats {
	__u64 packets;
	__u64 bytes;
	char comm[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct tflow_key);
	__type(value, struct tflow_stats);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} pcpu_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u32);
} pcpu_array SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __s64);
} slots SEC(".maps");

struct tlpm_v4 {
	__u32 prefixlen;
	__u8 addr[4];
};

/* No batch operations for LPM tries: the per-element path. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 64);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct tlpm_v4);
	__type(value, __u64);
} routes SEC(".maps");

/* No BTF types: bytes. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__uint(key_size, 4);
	__uint(value_size, 8);
} untyped SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 64);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, 32 * sizeof(__u64));
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} rb SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} perf SEC(".maps");

const volatile __u32 targ_tgid = 0;
__s64 last_stack_id = -1;

/* raw_tp, run with BPF_PROG_TEST_RUN on a chosen CPU: ctx args[0] is the key
 * whose per-CPU counters to increment by args[1]. */
SEC("raw_tp")
int bump(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 key = ctx->args[0];
	__u32 idx = key & 3;
	__u64 add = ctx->args[1], *v;
	__u32 *a;

	v = bpf_map_lookup_elem(&pcpu_counts, &key);
	if (v)
		*v += add;
	else
		bpf_map_update_elem(&pcpu_counts, &key, &add, BPF_NOEXIST);
	a = bpf_map_lookup_elem(&pcpu_array, &idx);
	if (a)
		*a += add;
	return 0;
}

/* Counts this process's getpid() calls and records the kernel stack of the last one. */
SEC("tp/syscalls/sys_enter_getpid")
int on_getpid(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 one = 1, *n;

	if (tgid != targ_tgid)
		return 0;
	n = bpf_map_lookup_elem(&counts, &tgid);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&counts, &tgid, &one, BPF_NOEXIST);
	last_stack_id = bpf_get_stackid(ctx, &stacks, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
