// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* `pylibbpf trace exit`: one event per process exit (the thread-group leader's
 * exit, not each thread's), from the sched:sched_process_exit tracepoint. The
 * tracepoint's record layout changed across kernels, so everything is read
 * from the task with CO-RE instead. */
#include "tools.h"

struct exit_event {
	__u64 ts;			/* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u64 lifetime_ns;		/* now - task->start_time (both CLOCK_MONOTONIC) */
	__u32 pid;
	__u32 ppid;
	__u32 exit_code;		/* the status passed to exit() */
	__u32 signal;			/* the signal that killed it (0: it exited) */
	char comm[TASK_COMM_LEN];
};

/* The command reads the layout from the object's BTF. */
PLB_KEEP_STRUCT(exit_event);

SEC("tp/sched/sched_process_exit")
int handle_exit(void *ctx)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	struct exit_event e = {};
	int code;

	if ((__u32)pid_tgid != tgid)
		return 0;	/* a thread, not the process */
	if (!tool_wanted(tgid))
		return 0;
	e.ts = bpf_ktime_get_ns();
	e.lifetime_ns = e.ts - BPF_CORE_READ(task, start_time);
	e.pid = tgid;
	e.ppid = BPF_CORE_READ(task, real_parent, tgid);
	/* wait(2) status layout: exit status in bits 8-15, terminating signal in 0-6 */
	code = BPF_CORE_READ(task, exit_code);
	e.exit_code = (code >> 8) & 0xff;
	e.signal = code & 0x7f;
	bpf_get_current_comm(e.comm, sizeof(e.comm));
	tool_emit(ctx, &e, sizeof(e));
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
