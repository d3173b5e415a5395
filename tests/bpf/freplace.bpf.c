// SPDX-License-Identifier: GPL-2.0
/* Replaces decide() of peers.bpf.c's xdp_target (tests/test_attach_peers.py). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

SEC("freplace/decide")
int new_decide(struct xdp_md *ctx)
{
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";
