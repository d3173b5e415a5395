// SPDX-License-Identifier: GPL-2.0
/* Every kind of type a typed skeleton writes a class for (tests/test_skel.py).
 *
 * `emit` (SEC("raw_tp"), run with BPF_PROG_TEST_RUN, on a chosen CPU for the
 * perf buffer) copies the .rodata settings into a struct tskel_event, writes it
 * to the ring buffer `events` and the perf event array `perf_events`, and counts
 * it in the hash map `flows` (struct key, struct value) and `.bss`. The event
 * struct is kept in BTF by a global pointer to it: the skeleton's hint for the
 * two buffers. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

enum tskel_color { TSKEL_RED = 1, TSKEL_GREEN = 2, TSKEL_BLUE = 40 };

struct tskel_point {
	__s32 x;
	__s32 y;
};

struct tskel_event {
	__u64 seq;
	__u32 pid;
	enum tskel_color color;
	char comm[16];
	__u8 mac[6];
	bool ok;
	__u8 _pad;
	struct tskel_point at;
	struct tskel_point path[2];
	__u16 grid[2][3];
	__u32 count;	/* a name tuple methods have */
	__u32 index;
	__u64 bytes;	/* a builtin's name */
};

/* The hint: the ring buffer and the perf event array carry struct tskel_event. */
struct tskel_event *keep_tskel_event __attribute__((unused));

struct tskel_key {
	__u32 pid;
	__u16 port;
	__u8 proto;
};

struct tskel_stats {
	__u64 packets;
	enum tskel_color last;
	char comm[16];
	struct {
		__u32 lo;
		__u32 hi;
	} range;
};

struct tskel_bits {
	__u32 a : 4;
	__u32 b : 28;
};

union tskel_num {
	__u64 u;
	__s64 i;
};

struct tskel_cfg {
	__u32 level;
	char tag[8];
	struct tskel_point origin;
};

/* .rodata: set before load */
const volatile __u32 targ_pid = 0;
const volatile bool verbose = false;
const volatile char label[12] = "none";
const volatile enum tskel_color color = TSKEL_GREEN;
const volatile struct tskel_cfg cfg = { .level = 3, .tag = "t", .origin = { -1, 2 } };
const volatile __u64 weights[3] = { 1, 2, 3 };
const volatile struct tskel_point corners[2] = { { 1, 2 }, { 3, 4 } };

/* .data / .bss: live after load */
__u64 emitted = 0;
__u64 step = 1;
struct tskel_bits bits;
union tskel_num num;
double ratio = 0.5;
__u32 custom SEC(".data.custom") = 7;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} perf_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct tskel_key);
	__type(value, struct tskel_stats);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct tskel_point);
} points SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8);
	__type(key, enum tskel_color);
	__type(value, __u64);
} by_color SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, char[16]);
} names SEC(".maps");

SEC("raw_tp")
int emit(void *ctx)
{
	struct tskel_key key = { .pid = targ_pid, .port = 80, .proto = 6 };
	struct tskel_stats zero = {}, *stats;
	struct tskel_event e = {};
	__u64 *n;
	int i;

	e.seq = emitted;
	e.pid = targ_pid;
	e.color = color;
	for (i = 0; i < sizeof(label); i++)	/* volatile reads: the value set before load */
		e.comm[i] = label[i];
	e.mac[0] = 0xaa;
	e.mac[5] = 0x01;
	e.ok = verbose;
	e.at.x = cfg.origin.x;
	e.at.y = cfg.origin.y;
	e.path[1].x = corners[1].x;
	e.path[1].y = corners[1].y;
	e.grid[1][2] = (__u16)weights[2];
	e.count = cfg.level;
	e.index = 9;
	e.bytes = step;
	bpf_ringbuf_output(&events, &e, sizeof(e), 0);
	bpf_perf_event_output(ctx, &perf_events, BPF_F_CURRENT_CPU, &e, sizeof(e));

	stats = bpf_map_lookup_elem(&flows, &key);
	if (!stats) {
		bpf_map_update_elem(&flows, &key, &zero, BPF_NOEXIST);
		stats = bpf_map_lookup_elem(&flows, &key);
		if (!stats)
			return 0;
	}
	stats->packets += 1;
	stats->last = color;
	for (i = 0; i < sizeof(label); i++)
		stats->comm[i] = label[i];
	stats->range.hi = cfg.level;

	n = bpf_map_lookup_elem(&by_color, (void *)&color);
	if (n)
		__sync_fetch_and_add(n, 1);
	emitted += step;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
