// SPDX-License-Identifier: GPL-2.0
/* Count calls of one user-space function per process (examples/uprobe_count.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} calls SEC(".maps");

SEC("uprobe")
int on_call(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 one = 1, *n = bpf_map_lookup_elem(&calls, &tgid);

	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&calls, &tgid, &one, BPF_NOEXIST);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
