// SPDX-License-Identifier: GPL-2.0
/* The attach kinds of tests/test_attach_peers.py. The cookie programs write
 * bpf_get_attach_cookie() into `cookies` at their own slot (K_* below,
 * mirrored in the test), for the process whose tgid is in target[0] only; the
 * others count their runs in `counts` (N_*). uprobe.multi counts per cookie. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define NF_ACCEPT 1
#define TC_ACT_OK 0

enum { K_TP, K_RAW, K_BTF, K_UPROBE, K_PERF, K_KPROBE, K_MAX = 8 };
enum { N_TC, N_MSG, N_SKB, N_LOOKUP, N_NF, N_MAX = 8 };

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, K_MAX);
	__type(key, __u32);
	__type(value, __u64);
} cookies SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, N_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u64);
	__type(value, __u64);
} by_cookie SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} target SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SOCKMAP);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} socks SEC(".maps");

static __always_inline int is_target(void)
{
	__u32 zero = 0, *tgid = bpf_map_lookup_elem(&target, &zero);

	return tgid && *tgid == (__u32)(bpf_get_current_pid_tgid() >> 32);
}

static __always_inline void put(__u32 slot, __u64 value)
{
	if (is_target())
		bpf_map_update_elem(&cookies, &slot, &value, BPF_ANY);
}

static __always_inline void add(__u32 slot)
{
	__u64 *v = bpf_map_lookup_elem(&counts, &slot);

	if (v)
		__sync_fetch_and_add(v, 1);
}

SEC("tracepoint")
int cookie_tp(void *ctx)
{
	put(K_TP, bpf_get_attach_cookie(ctx));
	return 0;
}

SEC("raw_tp")
int cookie_raw(void *ctx)
{
	put(K_RAW, bpf_get_attach_cookie(ctx));
	return 0;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(cookie_btf, struct pt_regs *regs, long id)
{
	put(K_BTF, bpf_get_attach_cookie(ctx));
	return 0;
}

SEC("uprobe")
int cookie_uprobe(struct pt_regs *ctx)
{
	put(K_UPROBE, bpf_get_attach_cookie(ctx));
	return 0;
}

SEC("perf_event")
int cookie_perf(struct bpf_perf_event_data *ctx)
{
	__u32 slot = K_PERF;
	__u64 value = bpf_get_attach_cookie(ctx);

	/* Any process: the sample interrupts whatever runs on the CPU. */
	bpf_map_update_elem(&cookies, &slot, &value, BPF_ANY);
	return 0;
}

SEC("kprobe")
int cookie_kprobe(struct pt_regs *ctx)
{
	put(K_KPROBE, bpf_get_attach_cookie(ctx));
	return 0;
}

SEC("uprobe.multi")
int multi_uprobe(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx), one = 1, *n;

	if (!is_target())
		return 0;
	n = bpf_map_lookup_elem(&by_cookie, &cookie);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&by_cookie, &cookie, &one, BPF_NOEXIST);
	return 0;
}

SEC("kprobe.multi")
int multi_kprobe(struct pt_regs *ctx)
{
	put(K_KPROBE, bpf_get_attach_cookie(ctx));
	return 0;
}

SEC("tc")
int tc_count(struct __sk_buff *skb)
{
	add(N_TC);
	return TC_ACT_OK;
}

SEC("sk_msg")
int msg_count(struct sk_msg_md *msg)
{
	add(N_MSG);
	return SK_PASS;
}

SEC("sk_skb/stream_verdict")
int skb_count(struct __sk_buff *skb)
{
	add(N_SKB);
	return SK_PASS;
}

SEC("sk_lookup")
int lookup_count(struct bpf_sk_lookup *ctx)
{
	add(N_LOOKUP);
	return SK_PASS;
}

SEC("netfilter")
int nf_count(struct bpf_nf_ctx *ctx)
{
	add(N_NF);
	return NF_ACCEPT;
}

/* The freplace target (freplace.bpf.c replaces decide()): a global function,
 * verified on its own, so another program can take its place. */
__noinline int decide(struct xdp_md *ctx)
{
	return ctx ? XDP_PASS : XDP_ABORTED;
}

SEC("xdp")
int xdp_target(struct xdp_md *ctx)
{
	return decide(ctx);
}

char LICENSE[] SEC("license") = "GPL";
