// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* `pylibbpf runqlat`: how long runnable tasks wait on a run queue before they
 * run, as a log2 histogram.
 *
 * A task enters the run queue when it is woken (sched_wakeup, or
 * sched_wakeup_new for a new task) or when it is switched out while still
 * runnable (preempted: sched_switch with prev in TASK_RUNNING). It leaves the
 * queue when sched_switch picks it as next. The time between the two is
 * counted in the slot log2(delta) of the `hists` map, keyed by (pid, slot),
 * pid being 0 unless the histogram is per process.
 *
 * Each tracepoint has two programs: tp_btf (typed arguments, the kernel's
 * BTF) and raw_tp (every kernel with raw tracepoints). The command loads one
 * set (autoload) after checking which the kernel takes. */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <pylibbpf/bpf_tools.h>

#define TASK_COMM_LEN PLB_COMM_LEN
#define TASK_RUNNING 0

/* Written by the command before load (the only .rodata variable). */
struct runqlat_config {
	__u32 target_tgid;	/* only this process (0: every process) */
	__u8 per_process;	/* 1: one histogram per process (key pid = tgid), 0: one histogram */
	__u8 milliseconds;	/* 1: slots of milliseconds, 0: of microseconds */
	__u8 _pad[2];
};

const volatile struct runqlat_config cfg = {};

/* When each queued thread entered the run queue (bpf_ktime_get_ns), by thread id. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} start SEC(".maps");

struct hist_key {
	__u32 pid;	/* the process (tgid) with --per-process, else 0 */
	__u32 slot;	/* log2 of the latency in the chosen unit */
};

/* The counts: (pid, slot) -> number of waits. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct hist_key);
	__type(value, __u64);
} hists SEC(".maps");

/* The command name of each process counted with --per-process. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, char[TASK_COMM_LEN]);
} comms SEC(".maps");

/* Before 5.14 the field was `long state`. */
struct task_struct___pre514 {
	long state;
} __attribute__((preserve_access_index));

static __always_inline long task_state(struct task_struct *t)
{
	if (bpf_core_field_exists(t->__state))
		return BPF_CORE_READ(t, __state);
	return BPF_CORE_READ((struct task_struct___pre514 *)t, state);
}

static __always_inline void enqueue(struct task_struct *p)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);
	__u32 tid = BPF_CORE_READ(p, pid);
	__u64 now;

	if (!tid)
		return;	/* the idle task */
	if (!plb_pid_wanted((__u64)tgid << 32, cfg.target_tgid, 0))
		return;
	now = bpf_ktime_get_ns();
	bpf_map_update_elem(&start, &tid, &now, BPF_ANY);
}

static __always_inline void count(struct task_struct *next)
{
	__u32 tid = BPF_CORE_READ(next, pid);
	struct hist_key key = {};
	__u64 *tsp, *val, delta, one = 1;

	tsp = bpf_map_lookup_elem(&start, &tid);
	if (!tsp)
		return;
	delta = bpf_ktime_get_ns() - *tsp;
	bpf_map_delete_elem(&start, &tid);
	delta /= cfg.milliseconds ? 1000000 : 1000;
	key.slot = plb_log2l(delta);	/* the slot pylibbpf.Histogram.log2 reads */
	if (cfg.per_process) {
		key.pid = BPF_CORE_READ(next, tgid);
		if (!bpf_map_lookup_elem(&comms, &key.pid)) {
			char comm[TASK_COMM_LEN];

			BPF_CORE_READ_STR_INTO(&comm, next, group_leader, comm);
			bpf_map_update_elem(&comms, &key.pid, &comm, BPF_NOEXIST);
		}
	}
	val = bpf_map_lookup_elem(&hists, &key);
	if (val) {
		__sync_fetch_and_add(val, 1);
		return;
	}
	/* A concurrent first insert wins the race (EEXIST): add to its entry. */
	if (bpf_map_update_elem(&hists, &key, &one, BPF_NOEXIST)) {
		val = bpf_map_lookup_elem(&hists, &key);
		if (val)
			__sync_fetch_and_add(val, 1);
	}
}

static __always_inline void switched(struct task_struct *prev, struct task_struct *next)
{
	if (task_state(prev) == TASK_RUNNING)
		enqueue(prev);	/* preempted: back on the run queue */
	count(next);
}

/* The three programs of one attach kind (tp_btf or raw_tp): their bodies are
 * the same, only the section and the way the arguments arrive differ. */
#define RUNQLAT_PROGRAMS(kind)							\
SEC(#kind "/sched_wakeup")							\
int BPF_PROG(kind##_wakeup, struct task_struct *p)				\
{										\
	enqueue(p);								\
	return 0;								\
}										\
SEC(#kind "/sched_wakeup_new")							\
int BPF_PROG(kind##_wakeup_new, struct task_struct *p)				\
{										\
	enqueue(p);								\
	return 0;								\
}										\
SEC(#kind "/sched_switch")							\
int BPF_PROG(kind##_switch, bool preempt, struct task_struct *prev,		\
	     struct task_struct *next)						\
{										\
	switched(prev, next);							\
	return 0;								\
}

RUNQLAT_PROGRAMS(tp_btf)
RUNQLAT_PROGRAMS(raw_tp)

char LICENSE[] SEC("license") = "GPL";
