// SPDX-License-Identifier: GPL-2.0
/* execsnoop: one event per exec() (the sched:sched_process_exec tracepoint),
 * as the Skeletons page of the docs walks through: a filter in .rodata, a
 * counter in .bss, a hash map of execs per user, events through a ring buffer.
 * Its typed skeleton is execsnoop_skel.py (`pylibbpf skel`, kept current by
 * `make build`). */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

struct event {
	__u32 pid;
	__u32 ppid;
	__u32 uid;
	char comm[16];
	char filename[128];	/* the path given to exec() */
};

/* Keeps struct event in BTF; the skeleton reads it as the ring buffer's record. */
struct event *keep_event __attribute__((unused));

const volatile __u32 targ_ppid = 0;	/* only the children of this process (0: every process) */
__u64 execs = 0;			/* every exec() seen, filtered or not */

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);	/* uid */
	__type(value, __u64);	/* exec() calls */
} by_uid SEC(".maps");

SEC("tp/sched/sched_process_exec")
int handle_exec(struct trace_event_raw_sched_process_exec *ctx)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	__u32 ppid = BPF_CORE_READ(task, real_parent, tgid);
	__u32 uid = (__u32)bpf_get_current_uid_gid();
	__u64 one = 1, *n;
	struct event *e;
	unsigned int loc;

	__sync_fetch_and_add(&execs, 1);
	if (targ_ppid && ppid != targ_ppid)
		return 0;
	n = bpf_map_lookup_elem(&by_uid, &uid);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&by_uid, &uid, &one, BPF_NOEXIST);
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return 0;
	e->pid = bpf_get_current_pid_tgid() >> 32;
	e->ppid = ppid;
	e->uid = uid;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	loc = BPF_CORE_READ(ctx, __data_loc_filename) & 0xffff;	/* __data_loc: offset in the low 16 bits */
	bpf_probe_read_kernel_str(e->filename, sizeof(e->filename), (void *)ctx + loc);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
