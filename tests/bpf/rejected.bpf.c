// SPDX-License-Identifier: GPL-2.0
/* Compiles, but the verifier must refuse it: a map value is used without the
 * NULL check bpf_map_lookup_elem requires (a hash map: for an array with a
 * constant in-range key the verifier knows the value exists). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} values SEC(".maps");

SEC("syscall")
int no_null_check(void *ctx)
{
	__u32 zero = 0;
	__u64 *v = bpf_map_lookup_elem(&values, &zero);

	return *v;
}

char LICENSE[] SEC("license") = "GPL";
