// SPDX-License-Identifier: GPL-2.0
/* Compiles, but the verifier must refuse it, after a long log: forty helper
 * calls are verified (each a few lines of register state) before the map
 * value is used without its NULL check. The verifier's reason is on the last
 * lines of a log of several KiB. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} long_values SEC(".maps");

#define MIX(acc) ((acc) = (acc) * 31 + bpf_get_prandom_u32())
#define MIX8(acc) MIX(acc); MIX(acc); MIX(acc); MIX(acc); MIX(acc); MIX(acc); MIX(acc); MIX(acc)

SEC("syscall")
int null_check_after_long_work(void *ctx)
{
	__u32 zero = 0;
	__u64 acc = 0;
	__u64 *v;

	MIX8(acc); MIX8(acc); MIX8(acc); MIX8(acc); MIX8(acc);
	v = bpf_map_lookup_elem(&long_values, &zero);
	return *v + acc;
}

char LICENSE[] SEC("license") = "GPL";
