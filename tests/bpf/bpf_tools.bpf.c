// SPDX-License-Identifier: GPL-2.0
/* <pylibbpf/bpf_tools.h> exercised from SEC("syscall") programs (run with test_run, in the
 * caller's task): log2 slots of a batch of values, the filters, a kept struct. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <pylibbpf/bpf_tools.h>

#define BATCH 64
#define HIST_SLOTS 12

PLB_FILTER_GLOBALS();

/* `slots` reads values[] and writes the slots of each (.bss, read and written by the test). */
__u64 values[BATCH];
__u32 out_log2[BATCH];		/* plb_log2((__u32)value) */
__u32 out_log2l[BATCH];		/* plb_log2l(value) */
__u32 out_added[BATCH];		/* plb_hist_add(hist, HIST_SLOTS, value) */
__u32 hist[HIST_SLOTS];		/* the histogram plb_hist_add counts into */

SEC("syscall")
int slots(void *ctx)
{
	for (int i = 0; i < BATCH; i++) {
		__u64 v = values[i];

		out_log2[i] = plb_log2((__u32)v);
		out_log2l[i] = plb_log2l(v);
		out_added[i] = plb_hist_add(hist, HIST_SLOTS, v);
	}
	return 0;
}

/* 1 when the calling thread passes targ_tgid / targ_tid / targ_comm, else 0. */
SEC("syscall")
int filters(void *ctx)
{
	return plb_filters_pass();
}

/* The two filters separately, with arguments from the context. */
struct filter_args {
	__u64 pid_tgid;
	__u32 targ_tgid;
	__u32 targ_tid;
};

SEC("syscall")
int pid_filter(struct filter_args *args)
{
	return plb_pid_wanted(args->pid_tgid, args->targ_tgid, args->targ_tid);
}

/* Only ever a local of the program below: in the BTF through PLB_KEEP_STRUCT alone. */
struct kept_event {
	__u64 ts;
	__u32 pid;
	char comm[PLB_COMM_LEN];
	__u8 flag;
};

PLB_KEEP_STRUCT(kept_event);

/* A local too, and not kept: absent from the BTF. */
struct unkept_event {
	__u64 ts;
	__u32 pid;
};

SEC("syscall")
int uses_locals(void *ctx)
{
	struct kept_event k = {};
	struct unkept_event u = {};

	k.pid = u.pid = bpf_get_current_pid_tgid() >> 32;
	return k.pid == u.pid;
}

char LICENSE[] SEC("license") = "GPL";
