// SPDX-License-Identifier: GPL-2.0
/* A struct with every shape the BTF reader handles, and its layout as the
 * compiler computed it (sizeof/offsetof in .rodata), for tests/test_btf.py. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>


enum layout_kind { KIND_A = 1, KIND_B = 2 };
typedef __u32 layout_pid_t;

struct layout_event {
	__u64 ts;
	layout_pid_t pid;
	struct {
		__u16 sport;
		__u16 dport;
	} ports;
	union {
		__u32 v4;
		__u8 v6[16];
	} addr;
	char comm[16];
	enum layout_kind kind;
	__u32 *ptr;
	__s16 matrix[2][3];
	struct {
		__u8 tag;
		__s64 value;
	} pairs[2];
	__u8 last;
};

struct layout_bitfield {
	__u32 low : 4;
	__u32 high : 28;
};

/* Globals keep both struct types in the object's BTF. */
struct layout_event *keep_event __attribute__((unused));
struct layout_bitfield *keep_bitfield __attribute__((unused));

const volatile __u64 layout_info[] = {
	sizeof(struct layout_event),
	offsetof(struct layout_event, ts),
	offsetof(struct layout_event, pid),
	offsetof(struct layout_event, ports.sport),
	offsetof(struct layout_event, ports.dport),
	offsetof(struct layout_event, addr.v4),
	offsetof(struct layout_event, comm),
	offsetof(struct layout_event, kind),
	offsetof(struct layout_event, ptr),
	offsetof(struct layout_event, matrix),
	offsetof(struct layout_event, pairs[0].tag),
	offsetof(struct layout_event, pairs[0].value),
	offsetof(struct layout_event, pairs[1].tag),
	offsetof(struct layout_event, pairs[1].value),
	offsetof(struct layout_event, last),
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} events SEC(".maps");

SEC("syscall")
int use_types(void *ctx)
{
	/* reference both structs so clang keeps them in BTF */
	struct layout_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	struct layout_bitfield *b;

	if (!e)
		return 0;
	e->ts = layout_info[0];
	bpf_ringbuf_submit(e, 0);
	b = bpf_ringbuf_reserve(&events, sizeof(*b), 0);
	if (b)
		bpf_ringbuf_submit(b, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
