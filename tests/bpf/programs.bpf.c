// SPDX-License-Identifier: GPL-2.0
/* One program per attach call of Program (tests/test_program.py). Each counts
 * its runs in `counts` at its own slot (the C_* indices below, mirrored in the
 * test); the tracing ones count only the process whose tgid is in target[0]. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>

enum {
	C_TP, C_RAW, C_UPROBE, C_URETPROBE, C_USDT, C_SAMPLES, C_OWN_SAMPLES, C_XDP, C_TCX,
	C_SOCK, C_ALT_RAW, C_RUN_ME, C_DRAINED_SUM, C_DRAINED, C_LAST_RET, C_USDT_ARG, C_USDT_COOKIE,
	C_MAX = 20,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, C_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} target SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 1024);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, 127 * sizeof(__u64));
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} stack_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_USER_RINGBUF);
	__uint(max_entries, 4096);
} urb SEC(".maps");

static __always_inline void add(__u32 slot, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&counts, &slot);

	if (v)
		__sync_fetch_and_add(v, n);
}

static __always_inline void set(__u32 slot, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&counts, &slot);

	if (v)
		*v = n;
}

static __always_inline int is_target(void)
{
	__u32 zero = 0, *tgid = bpf_map_lookup_elem(&target, &zero);

	return tgid && *tgid == (__u32)(bpf_get_current_pid_tgid() >> 32);
}

SEC("tracepoint")
int count_tp(void *ctx)
{
	if (is_target())
		add(C_TP, 1);
	return 0;
}

SEC("raw_tp")
int count_raw(void *ctx)
{
	if (is_target())
		add(C_RAW, 1);
	return 0;
}

SEC("raw_tp")
int alt_raw(void *ctx)
{
	if (is_target())
		add(C_ALT_RAW, 1);
	return 0;
}

SEC("kprobe")
int on_kprobe(void *ctx)
{
	return 0;
}

SEC("uprobe")
int on_uprobe(void *ctx)
{
	add(C_UPROBE, 1);
	return 0;
}

SEC("uretprobe")
int BPF_URETPROBE(on_uretprobe, int ret)
{
	add(C_URETPROBE, 1);
	set(C_LAST_RET, ret);
	return 0;
}

/* Names no binary: attach_all() must skip it (libbpf wants uretprobe/BINARY:FUNCTION). */
SEC("uretprobe/readline")
int readline_ret(void *ctx)
{
	return 0;
}

SEC("usdt")
int BPF_USDT(on_usdt, int i)
{
	add(C_USDT, 1);
	set(C_USDT_ARG, i);
	set(C_USDT_COOKIE, bpf_usdt_cookie(ctx));
	return 0;
}

SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx)
{
	__u64 one = 1, *n;
	__u32 id;
	long ret;

	add(C_SAMPLES, 1);
	if (!is_target())
		return 0;
	add(C_OWN_SAMPLES, 1);
	ret = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
	if (ret < 0)
		return 0;
	id = ret;
	n = bpf_map_lookup_elem(&stack_counts, &id);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&stack_counts, &id, &one, BPF_NOEXIST);
	return 0;
}

SEC("xdp")
int xdp_count(struct xdp_md *ctx)
{
	add(C_XDP, 1);
	return XDP_PASS;
}

SEC("tcx/ingress")
int tcx_count(struct __sk_buff *skb)
{
	add(C_TCX, 1);
	return TCX_NEXT;
}

SEC("cgroup/sock_create")
int sock_create(struct bpf_sock *sk)
{
	add(C_SOCK, 1);
	return 1;
}

SEC("iter/task")
int dump_task(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *task = ctx->task;

	if (!task || task->pid != task->tgid)
		return 0;
	BPF_SEQ_PRINTF(seq, "%d %s\n", task->tgid, task->comm);
	return 0;
}

/* The same walk in another format: what link.update_program() swaps in. */
SEC("iter/task")
int dump_pids(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;

	if (task && task->pid == task->tgid)
		BPF_SEQ_PRINTF(ctx->meta->seq, "pid %d\n", task->tgid);
	return 0;
}

SEC("syscall")
int run_me(void *ctx)
{
	add(C_RUN_ME, 1);
	return 0;
}

static long drain_one(struct bpf_dynptr *dynptr, void *ctx)
{
	__u64 value;

	if (bpf_dynptr_read(&value, sizeof(value), dynptr, 0, 0))
		return 1; /* a short record stops the drain */
	add(C_DRAINED_SUM, value);
	add(C_DRAINED, 1);
	return 0;
}

/* Drains the user ring buffer; returns how many records it took. */
SEC("syscall")
int drain_user(void *ctx)
{
	return bpf_user_ringbuf_drain(&urb, drain_one, NULL, 0);
}

char LICENSE[] SEC("license") = "GPL";
