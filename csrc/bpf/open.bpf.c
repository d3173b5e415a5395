// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* `pylibbpf trace open`: one event per openat() call, with its result. The
 * enter tracepoint stashes the arguments under the calling thread's pid_tgid;
 * the exit tracepoint takes them back and reads the path then, when the
 * kernel has already copied it (the user page is resident). */
#include "tools.h"

struct open_args {
	const char *path;
	__s32 flags;
};

struct open_event {
	__u64 ts;			/* bpf_ktime_get_ns() at the syscall's return */
	__u32 pid;
	__u32 tid;
	__s32 flags;			/* open(2) flags */
	__s32 ret;			/* the fd, or -errno */
	char comm[TASK_COMM_LEN];
	char path[TOOL_PATH_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 10240);
	__type(key, __u64);		/* pid_tgid of the thread inside openat() */
	__type(value, struct open_args);
} open_start SEC(".maps");

/* The command reads the layout from the object's BTF. */
PLB_KEEP_STRUCT(open_event);

SEC("tp/syscalls/sys_enter_openat")
int handle_openat_enter(struct trace_event_raw_sys_enter *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct open_args args = {};

	if (!tool_wanted(pid_tgid >> 32))
		return 0;
	args.path = (const char *)BPF_CORE_READ(ctx, args[1]);
	args.flags = (__s32)BPF_CORE_READ(ctx, args[2]);
	bpf_map_update_elem(&open_start, &pid_tgid, &args, BPF_ANY);
	return 0;
}

SEC("tp/syscalls/sys_exit_openat")
int handle_openat_exit(struct trace_event_raw_sys_exit *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct open_args *args;
	struct open_event e = {};

	args = bpf_map_lookup_elem(&open_start, &pid_tgid);
	if (!args)
		return 0;	/* filtered out at entry, or the tracer attached mid-call */
	e.ts = bpf_ktime_get_ns();
	e.pid = pid_tgid >> 32;
	e.tid = (__u32)pid_tgid;
	e.flags = args->flags;
	e.ret = (__s32)BPF_CORE_READ(ctx, ret);
	bpf_get_current_comm(e.comm, sizeof(e.comm));
	bpf_probe_read_user_str(e.path, sizeof(e.path), args->path);
	bpf_map_delete_elem(&open_start, &pid_tgid);
	tool_emit(ctx, &e, sizeof(e));
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
