// SPDX-License-Identifier: GPL-2.0
/* A TCP congestion control as struct_ops (tests/test_attach_peers.py): Reno,
 * through the kernel's own functions. The test renames it before load so that
 * concurrent runs do not collide on the name. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

extern __u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

SEC("struct_ops")
__u32 BPF_PROG(plb_ssthresh, struct sock *sk)
{
	return tcp_reno_ssthresh(sk);
}

SEC("struct_ops")
void BPF_PROG(plb_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	tcp_reno_cong_avoid(sk, ack, acked);
}

SEC("struct_ops")
__u32 BPF_PROG(plb_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops plb_cc = {
	.ssthresh = (void *)plb_ssthresh,
	.cong_avoid = (void *)plb_cong_avoid,
	.undo_cwnd = (void *)plb_undo_cwnd,
	.name = "plb_cc",
};

char LICENSE[] SEC("license") = "GPL";
