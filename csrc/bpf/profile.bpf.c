// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* `pylibbpf profile`: a sampling profiler. The command opens a cpu-clock perf
 * event per CPU at the chosen frequency and attaches `on_sample` to each; on
 * every sample the program counts (process, kernel stack, user stack, command
 * name) in `counts`, the stacks' frames being kept in the `stacks` map under
 * the ids bpf_get_stackid returns.
 *
 * A stack id is negative when no stack was stored: -EFAULT for a user stack of
 * a kernel thread (it has none), -EEXIST when another stack already holds the
 * same hash bucket, -ENOMEM when the stack map is full. The command names those
 * frames as missed. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <pylibbpf/bpf_tools.h>

#define TASK_COMM_LEN PLB_COMM_LEN
/* PERF_MAX_STACK_DEPTH: the deepest stack bpf_get_stackid records. */
#define MAX_STACK_DEPTH 127

/* Written by the command before load (obj.globals): constants for the verifier. */
const volatile __u32 target_tgid = 0;	/* only this process (0: every process) */
const volatile bool include_idle = false;	/* count the idle task (pid 0) too */
const volatile bool kernel_stacks = true;	/* record kernel stacks (-U: no) */
const volatile bool user_stacks = true;	/* record user stacks (-K: no) */

struct sample_key {
	__u32 pid;		/* the process (tgid) */
	__s32 kernel_stack;	/* id in `stacks`, or a negative errno (-1: not recorded) */
	__s32 user_stack;	/* id in `stacks`, or a negative errno (-1: not recorded) */
	char comm[TASK_COMM_LEN];	/* the sampled thread's name */
};

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, MAX_STACK_DEPTH * sizeof(__u64));
} stacks SEC(".maps");

/* The samples: (pid, stacks, comm) -> how many. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 40960);
	__type(key, struct sample_key);
	__type(value, __u64);
} counts SEC(".maps");

SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct sample_key key = {};
	__u64 one = 1, *n;

	if (!tid && !include_idle)
		return 0;
	if (!plb_pid_wanted(id, target_tgid, 0))
		return 0;
	key.pid = tgid;
	key.kernel_stack = kernel_stacks ? bpf_get_stackid(ctx, &stacks, 0) : -1;
	key.user_stack = user_stacks ? bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK) : -1;
	bpf_get_current_comm(key.comm, sizeof(key.comm));
	n = bpf_map_lookup_elem(&counts, &key);
	if (n) {
		__sync_fetch_and_add(n, 1);
		return 0;
	}
	/* A concurrent first insert on another CPU wins the race (EEXIST): add to its entry. */
	if (bpf_map_update_elem(&counts, &key, &one, BPF_NOEXIST)) {
		n = bpf_map_lookup_elem(&counts, &key);
		if (n)
			__sync_fetch_and_add(n, 1);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
