/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* What the bundled tools (exec, exit, open) share: the load-time configuration,
 * the in-kernel filters and the two output paths.
 *
 * The configuration is one `const volatile` struct in .rodata, written by the
 * `pylibbpf` command before the object is loaded: the verifier then sees the
 * values as constants and prunes the filters and the unused output path. It
 * must stay the only .rodata variable (the command checks that the section's
 * size is sizeof(struct tool_config)). */
#ifndef PYLIBBPF_TOOLS_H
#define PYLIBBPF_TOOLS_H

#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <pylibbpf/bpf_tools.h>

#define TASK_COMM_LEN PLB_COMM_LEN
#define TOOL_PATH_LEN 256

struct tool_config {
	__u32 target_tgid;		/* only this process (0: every process) */
	__u32 exclude_tgid;		/* never this process: the tracer itself */
	char target_comm[TASK_COMM_LEN];	/* only this command name ("": every name) */
	__u8 use_perf;			/* 1: write to events_perf, 0: to the events ring buffer */
	__u8 _pad[7];
};

const volatile struct tool_config cfg = {};

/* The default output: a BPF ring buffer (one ring shared by every CPU). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");

/* The --ordered output: one perf ring per CPU, merged by timestamp in user space. */
struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} events_perf SEC(".maps");

/* True when the current task passes the --pid / --comm filters. */
static __always_inline bool tool_wanted(__u32 tgid)
{
	if (cfg.exclude_tgid && tgid == cfg.exclude_tgid)
		return false;
	return plb_pid_wanted((__u64)tgid << 32, cfg.target_tgid, 0) && plb_comm_wanted(cfg.target_comm);
}

/* Events the ring buffer refused because it was full, one counter per CPU
 * (so a plain increment is safe); the command adds them up at the end. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} dropped SEC(".maps");

/* Write one event to the output chosen at load time. A full perf ring counts
 * the loss itself (user space sees a lost-samples record); a full ring buffer
 * does not, so its refusals are counted in `dropped`. */
static __always_inline void tool_emit(void *ctx, void *event, __u64 size)
{
	__u32 zero = 0;
	__u64 *count;

	if (cfg.use_perf) {
		bpf_perf_event_output(ctx, &events_perf, BPF_F_CURRENT_CPU, event, size);
		return;
	}
	if (bpf_ringbuf_output(&events, event, size, 0)) {
		count = bpf_map_lookup_elem(&dropped, &zero);
		if (count)
			*count += 1;
	}
}

#endif /* PYLIBBPF_TOOLS_H */
