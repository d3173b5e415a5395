// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* `pylibbpf trace exec`: one event per successful execve(), from the
 * sched:sched_process_exec tracepoint (fired once the new image is in place,
 * so comm is already the new program's name). */
#include "tools.h"

struct exec_event {
	__u64 ts;			/* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u32 pid;			/* the process (thread group) id */
	__u32 ppid;			/* its parent's process id */
	__u32 uid;
	char comm[TASK_COMM_LEN];
	char filename[TOOL_PATH_LEN];	/* the path given to execve() */
};

/* The command reads the layout from the object's BTF. */
PLB_KEEP_STRUCT(exec_event);

SEC("tp/sched/sched_process_exec")
int handle_exec(struct trace_event_raw_sched_process_exec *ctx)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct exec_event e = {};
	unsigned int loc;

	if (!tool_wanted(tgid))
		return 0;
	e.ts = bpf_ktime_get_ns();
	e.pid = tgid;
	e.ppid = BPF_CORE_READ(task, real_parent, tgid);
	e.uid = (__u32)bpf_get_current_uid_gid();
	bpf_get_current_comm(e.comm, sizeof(e.comm));
	/* __data_loc: the low 16 bits are the string's offset in the record */
	loc = BPF_CORE_READ(ctx, __data_loc_filename) & 0xffff;
	bpf_probe_read_kernel_str(e.filename, sizeof(e.filename), (void *)ctx + loc);
	tool_emit(ctx, &e, sizeof(e));
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
