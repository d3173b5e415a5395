// SPDX-License-Identifier: GPL-2.0
/* The GIL test's producer: every getppid() of one target process (tgid set in
 * `target_tgid` after load) reserves and submits one event into a SMALL ring
 * buffer, so that a consumer which stops reading for a few tens of
 * milliseconds makes reserves fail. Failed reserves are counted, not retried.
 *
 * counters[0]: events submitted; counters[1]: failed reserves.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

struct gil_event {
	__u64 seq;   /* 0, 1, 2, ... in submit order (one producer thread) */
	__u64 ts;    /* bpf_ktime_get_ns() */
	__u64 tgid;
	__u64 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);   /* 1638 events of 40 bytes: ~160 ms at 10 k/s */
} rb SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} target_tgid SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static void count(__u32 key)
{
	__u64 *n = bpf_map_lookup_elem(&counters, &key);

	if (n)
		__sync_fetch_and_add(n, 1);
}

SEC("tp/syscalls/sys_enter_getppid")
int on_getppid(void *ctx)
{
	__u32 zero = 0, tgid = bpf_get_current_pid_tgid() >> 32;
	__u32 *target = bpf_map_lookup_elem(&target_tgid, &zero);
	__u64 *submitted = bpf_map_lookup_elem(&counters, &zero);
	struct gil_event *e;

	if (!target || !submitted || *target == 0 || tgid != *target)
		return 0;
	e = bpf_ringbuf_reserve(&rb, sizeof(*e), 0);
	if (!e) {
		count(1);
		return 0;
	}
	e->seq = __sync_fetch_and_add(submitted, 1);
	e->ts = bpf_ktime_get_ns();
	e->tgid = tgid;
	e->pad = 0;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
