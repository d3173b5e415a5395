// SPDX-License-Identifier: GPL-2.0
/* A sampling profiler's BPF side (examples/profile.py): on every perf event
 * sample, count (process, kernel stack, user stack). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

struct sample_key {
	__u32 pid;
	__s32 kernel_stack;
	__s32 user_stack;
	char comm[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, 127 * sizeof(__u64));
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct sample_key);
	__type(value, __u64);
} samples SEC(".maps");

/* target[0]: the only tgid to sample (0: every process). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} target SEC(".maps");

SEC("perf_event")
int on_sample(void *ctx)
{
	__u32 zero = 0, *want = bpf_map_lookup_elem(&target, &zero);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct sample_key key = {};
	__u64 one = 1, *n;

	if (!tgid || (want && *want && *want != tgid))
		return 0; /* idle, or not the process asked for */
	key.pid = tgid;
	key.kernel_stack = bpf_get_stackid(ctx, &stacks, 0);
	key.user_stack = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
	bpf_get_current_comm(key.comm, sizeof(key.comm));
	n = bpf_map_lookup_elem(&samples, &key);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&samples, &key, &one, BPF_NOEXIST);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
