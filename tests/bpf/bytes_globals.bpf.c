// SPDX-License-Identifier: GPL-2.0
/* Binary arrays, floats and a resizable section, for obj.globals and typed maps
 * (tests/test_globals_bytes.py). `unsigned char`/__u8 arrays hold data whose
 * zero bytes matter (a MAC address), unlike `char` arrays (text). `double_args`
 * doubles the two members of its context (ctx_out of test_run). `remember`
 * (SEC("syscall")) stores the .rodata MAC as a key of `macs` and copies
 * slots[last_index] of the resizable `slots` array into `last_slot`. `bad` is refused by
 * the verifier (it reads a map value without a NULL check): it makes load() fail
 * when its autoload stays on. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

typedef __u8 mac_t[6];

const volatile mac_t gw_mac = { 0x00, 0x11, 0x00, 0x22, 0x00, 0x00 };
const volatile char gw_name[8] = "gw";
const volatile __u32 limit = 7;
float ratio_f = 0.5;
double ratio_d = 0.25;
__u32 last_slot;
/* .rodata is frozen before the verifier runs, so it checks slots[last_index]
 * against the section's size as resized. */
const volatile __u32 last_index = 0;
/* Its own section, with the array last: libbpf resizes such a section before
 * load (bpf_map__set_value_size) and the array's length follows. */
__u32 slots[1] SEC(".data.slots");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, mac_t);
	__type(value, __u64);
} macs SEC(".maps");

SEC("syscall")
int remember(void *ctx)
{
	mac_t key;
	__u64 one = 1;

	__builtin_memcpy(key, (const void *)gw_mac, sizeof(key));
	bpf_map_update_elem(&macs, key, &one, BPF_ANY);
	last_slot = slots[last_index];
	return limit;
}

struct double_args {
	__u64 a;
	__u64 b;
};

/* Doubles both members of its context in place: test_run hands the context back (ctx_out). */
SEC("syscall")
int double_args(struct double_args *ctx)
{
	ctx->a *= 2;
	ctx->b *= 2;
	return ctx->a + ctx->b;
}

SEC("syscall")
int bad(void *ctx)
{
	mac_t key = {};
	__u64 *v = bpf_map_lookup_elem(&macs, key);

	return *v; /* no NULL check: the verifier refuses the program */
}

char LICENSE[] SEC("license") = "GPL";
