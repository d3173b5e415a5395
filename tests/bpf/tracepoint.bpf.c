// SPDX-License-Identifier: GPL-2.0
/* A program libbpf attaches by its SEC() name: counts getpid() calls of one process. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} calls SEC(".maps");

const volatile __u32 target_tgid = 0;

SEC("tp/syscalls/sys_enter_getpid")
int count_getpid(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 one = 1, *n;

	if (target_tgid && tgid != target_tgid)
		return 0;
	n = bpf_map_lookup_elem(&calls, &tgid);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&calls, &tgid, &one, BPF_NOEXIST);
	return 0;
}

SEC("syscall")
int not_attachable(void *ctx)
{
	return 7;
}

char LICENSE[] SEC("license") = "GPL";
