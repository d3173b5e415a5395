// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Run-queue latency in microseconds as one exp2 histogram (examples/exporter/runqlat.yaml):
 * a task's wakeup time, then the wait when sched_switch runs it. Tracepoints only. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "exporter.h"

#define MAX_BUCKET 26

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 10240);
	__type(key, __u32);
	__type(value, __u64);
} start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_BUCKET + 2);
	__type(key, __u32);
	__type(value, __u64);
} runq_latency SEC(".maps");

static __always_inline void queued(__u32 pid)
{
	__u64 now = bpf_ktime_get_ns();

	if (pid)
		bpf_map_update_elem(&start, &pid, &now, BPF_ANY);
}

SEC("tracepoint/sched/sched_wakeup")
int wakeup(struct trace_event_raw_sched_wakeup_template *ctx)
{
	queued(ctx->pid);
	return 0;
}

SEC("tracepoint/sched/sched_wakeup_new")
int wakeup_new(struct trace_event_raw_sched_wakeup_template *ctx)
{
	queued(ctx->pid);
	return 0;
}

SEC("tracepoint/sched/sched_switch")
int switched(struct trace_event_raw_sched_switch *ctx)
{
	__u32 next = ctx->next_pid, bucket;
	__u64 *then, *count;

	if (ctx->prev_state == 0) /* TASK_RUNNING: preempted, queued again */
		queued(ctx->prev_pid);
	then = bpf_map_lookup_elem(&start, &next);
	if (!then)
		return 0;
	bucket = exp2_bucket((bpf_ktime_get_ns() - *then) / 1000, MAX_BUCKET);
	bpf_map_delete_elem(&start, &next);
	count = bpf_map_lookup_elem(&runq_latency, &bucket);
	if (count)
		*count += 1;
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
