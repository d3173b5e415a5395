// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* System calls by command and number, and write() sizes by command as an exp2 histogram
 * (examples/exporter/syscalls.yaml). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "exporter.h"

#define MAX_BUCKET 40

struct syscall_key {
	char comm[16];
	__u32 nr;
};

struct size_key {
	char comm[16];
	__u32 bucket;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct syscall_key);
	__type(value, __u64);
} syscalls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct size_key);
	__type(value, __u64);
} write_sizes SEC(".maps");

static __always_inline void add(void *map, void *key)
{
	__u64 one = 1, *count = bpf_map_lookup_elem(map, key);

	if (count)
		__sync_fetch_and_add(count, 1);
	else
		bpf_map_update_elem(map, key, &one, BPF_NOEXIST);
}

SEC("raw_tracepoint/sys_enter")
int count_syscall(struct bpf_raw_tracepoint_args *ctx)
{
	struct syscall_key key = { .nr = (__u32)ctx->args[1] };

	bpf_get_current_comm(key.comm, sizeof(key.comm));
	add(&syscalls, &key);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_write")
int write_size(struct trace_event_raw_sys_enter *ctx)
{
	struct size_key key = { .bucket = exp2_bucket(ctx->args[2], MAX_BUCKET) };

	bpf_get_current_comm(key.comm, sizeof(key.comm));
	add(&write_sizes, &key);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
