// SPDX-License-Identifier: GPL-2.0
/* One program per attach kind that pylibbpf.features.attach_kind() probes
 * (tests/test_features_attach.py): each test loads one of them alone
 * (autoload) and attaches it, as a tool would, and compares with the probe. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} hits SEC(".maps");

const volatile __u32 target_tgid = 0;

static int count(void)
{
	__u32 zero = 0;
	__u64 *n;

	if ((bpf_get_current_pid_tgid() >> 32) != target_tgid)
		return 0;
	n = bpf_map_lookup_elem(&hits, &zero);
	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_tp_btf) { return count(); }

SEC("fentry/bpf_fentry_test1")
int BPF_PROG(on_fentry) { return count(); }

SEC("fexit/bpf_fentry_test1")
int BPF_PROG(on_fexit) { return count(); }

SEC("lsm/file_open")
int BPF_PROG(on_lsm) { count(); return 0; }

SEC("kprobe")
int on_kprobe(void *ctx) { return count(); }

SEC("kprobe.multi/bpf_fentry_test1")
int on_kprobe_multi(void *ctx) { return count(); }

/* Attached by the test: libc's getpid() in the test's own process. */
SEC("uprobe.multi")
int on_uprobe_multi(void *ctx) { return count(); }

SEC("tcx/ingress")
int on_tcx(struct __sk_buff *skb) { return TCX_NEXT; }

char LICENSE[] SEC("license") = "GPL";
