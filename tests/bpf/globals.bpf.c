// SPDX-License-Identifier: GPL-2.0
/* Global variables of every kind, for obj.globals (tests/test_globals.py).
 * Run with BPF_PROG_TEST_RUN: `run` filters on targ_tgid (.rodata), counts in
 * .bss, adds data_step (.data) to data_total, and copies what it sees of the
 * .rodata values into `seen` (.bss), so the test checks what the program read. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

enum tglob_mode { MODE_OFF = 0, MODE_ON = 3, MODE_NEG = -2 };

struct tglob_cfg {
	__u32 level;
	__s16 delta;
	char tag[6];
	struct {
		__u8 lo;
		__u8 hi;
	} range;
};

/* .rodata: set before load through obj.globals, frozen after. */
const volatile __u32 targ_tgid = 0;
const volatile bool enabled = true;
const volatile char targ_comm[16] = "init";
const volatile __s16 small_signed = -5;
const volatile __u8 tiny = 200;
const volatile __s64 big_signed = -1;
const volatile enum tglob_mode mode = MODE_ON;
const volatile __u64 weights[4] = { 1, 2, 3, 4 };
const volatile struct tglob_cfg cfg = { .level = 7, .delta = -3, .tag = "ab", .range = { 1, 9 } };
const volatile void *a_pointer = 0;
/* custom read-only and writable sections */
const volatile __u32 custom_ro SEC(".rodata.custom") = 11;
__u32 custom_rw SEC(".data.custom") = 12;

/* .data and .bss: read and written live after load */
__u64 data_step = 1;
__u64 data_total = 100;
__u64 hits;
__u32 last_tgid;

struct tglob_seen {
	__u32 targ_tgid;
	__u8 enabled;
	__u8 tiny;
	__s16 small_signed;
	__s64 big_signed;
	__s32 mode;
	__u32 custom_ro;
	__u64 weights_sum;
	__u32 cfg_level;
	__s16 cfg_delta;
	__u8 range_hi;
	__u8 comm0;
	__u32 custom_rw;
} seen;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} rb SEC(".maps");

SEC("syscall")
int run(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u32 *ev;
	int i;

	if (!enabled)
		return -1;
	if (targ_tgid && tgid != targ_tgid)
		return -2;
	hits++;
	last_tgid = tgid;
	data_total += data_step;
	seen.targ_tgid = targ_tgid;
	seen.enabled = enabled;
	seen.tiny = tiny;
	seen.small_signed = small_signed;
	seen.big_signed = big_signed;
	seen.mode = mode;
	seen.custom_ro = custom_ro;
	seen.weights_sum = 0;
	for (i = 0; i < 4; i++)
		seen.weights_sum += weights[i];
	seen.cfg_level = cfg.level;
	seen.cfg_delta = cfg.delta;
	seen.range_hi = cfg.range.hi;
	seen.comm0 = targ_comm[0];
	seen.custom_rw = custom_rw;
	ev = bpf_ringbuf_reserve(&rb, sizeof(*ev), 0);
	if (ev) {
		*ev = tgid;
		bpf_ringbuf_submit(ev, 0);
	}
	return hits;
}

char LICENSE[] SEC("license") = "GPL";
