// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* exec() and process exits by command (examples/exporter/execs.yaml). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

struct comm_key {
	char comm[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct comm_key);
	__type(value, __u64);
} execs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct comm_key);
	__type(value, __u64);
} exits SEC(".maps");

static __always_inline void count(void *map)
{
	struct comm_key key = {};
	__u64 one = 1, *n;

	bpf_get_current_comm(key.comm, sizeof(key.comm));
	n = bpf_map_lookup_elem(map, &key);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(map, &key, &one, BPF_NOEXIST);
}

SEC("tracepoint/sched/sched_process_exec")
int on_exec(void *ctx)
{
	count(&execs);
	return 0;
}

SEC("tracepoint/sched/sched_process_exit")
int on_exit(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();

	if ((__u32)id == id >> 32) /* the process, not each of its threads */
		count(&exits);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
