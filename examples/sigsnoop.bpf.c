// SPDX-License-Identifier: GPL-2.0
/* sigsnoop: signals as they are generated (tracepoint signal/signal_generate).
 * Filters are `const volatile` globals (.rodata), set by the Python side before
 * load; events go through a ring buffer; per (sender, signal) counts are kept in
 * a hash map that the Python side reads and empties each interval. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

struct sig_event {
	__u64 ts;
	__u32 pid;      /* sender (thread group id) */
	__u32 tpid;     /* target */
	__s32 sig;
	__s32 result;   /* TRACE_SIGNAL_* : 0 delivered, 1 ignored, 2 already pending... */
	char comm[16];  /* sender's command */
};

struct sig_key {
	__u32 pid;
	__s32 sig;
};

/* Filters: 0 / false means "no filter". */
const volatile __u32 targ_pid = 0;
const volatile __s32 targ_sig = 0;
const volatile bool failed_only = false;

/* Keeps struct sig_event in the object's BTF, where the Python side reads its layout. */
struct sig_event *keep_sig_event __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 10240);
	__type(key, struct sig_key);
	__type(value, __u64);
} counts SEC(".maps");

__u64 dropped; /* events the ring buffer had no room for (.bss, read live) */

SEC("tp/signal/signal_generate")
int on_signal_generate(struct trace_event_raw_signal_generate *ctx)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	struct sig_key key = {};
	struct sig_event *e;
	__u64 one = 1, *n;

	if (targ_pid && pid != targ_pid)
		return 0;
	if (targ_sig && ctx->sig != targ_sig)
		return 0;
	if (failed_only && ctx->result == 0)
		return 0;
	key.pid = pid;
	key.sig = ctx->sig;
	n = bpf_map_lookup_elem(&counts, &key);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&counts, &key, &one, BPF_ANY);
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&dropped, 1);
		return 0;
	}
	e->ts = bpf_ktime_get_ns();
	e->pid = pid;
	e->tpid = ctx->pid;
	e->sig = ctx->sig;
	e->result = ctx->result;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
