/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* <pylibbpf/bpf_tools.h>: what every tracing tool's BPF side writes again.
 *
 *   plb_log2(v), plb_log2l(v)        floor(log2(v)), 0 for 0: a log2 histogram's slot
 *   plb_hist_slot(v, max_slots)      that slot, the last one for anything larger
 *   plb_hist_add(slots, max, v)      count v in an array of __u32 slots (atomic)
 *   plb_pid_wanted(id, tgid, tid)    the pid/tgid filter (0: any)
 *   plb_comm_wanted(comm)            the command-name filter ("": any)
 *   PLB_FILTER_GLOBALS()             const volatile targ_tgid, targ_tid, targ_comm
 *                                    and plb_filters_pass() that applies them
 *   PLB_KEEP_STRUCT(name);           keep struct name in the object's BTF
 *
 * Include it after "vmlinux.h" (or <linux/types.h> and <stdbool.h>): it uses
 * __u32/__u64/bool and the helpers of <bpf/bpf_helpers.h>, which it includes.
 * Every function is static __always_inline: the filters' arguments are
 * usually `const volatile` globals set before load, which the verifier sees
 * as constants, so a filter left at its "any" value costs nothing. */
#ifndef PYLIBBPF_BPF_TOOLS_H
#define PYLIBBPF_BPF_TOOLS_H

#include <bpf/bpf_helpers.h>

/* The kernel's TASK_COMM_LEN: the size bpf_get_current_comm() fills. */
#define PLB_COMM_LEN 16

/* floor(log2(v)) of a 64-bit value, 0 for v = 0. Without a branch: the
 * verifier walks each branch of an inlined function as a path of its own,
 * and five compare-and-shift steps per call multiply into thousands of paths
 * when a program takes several logarithms (or one in a loop). The bits below
 * the highest are all set (v | v >> 1 | ... | v >> 32), then counted: with
 * the highest set bit at n, v >> 1 is then 2^n - 1, which has n bits. */
static __always_inline __u32 plb_log2l(__u64 v)
{
	v |= v >> 1;
	v |= v >> 2;
	v |= v >> 4;
	v |= v >> 8;
	v |= v >> 16;
	v |= v >> 32;
	v >>= 1;
	/* population count: bits per 2, per 4, per 8 bits, then the bytes summed into the top byte */
	v -= (v >> 1) & 0x5555555555555555ULL;
	v = (v & 0x3333333333333333ULL) + ((v >> 2) & 0x3333333333333333ULL);
	v = (v + (v >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
	return (__u32)((v * 0x0101010101010101ULL) >> 56);
}

/* floor(log2(v)) of a 32-bit value, 0 for v = 0. */
static __always_inline __u32 plb_log2(__u32 v)
{
	return plb_log2l(v);
}

/* The log2 slot of v in a histogram of max_slots slots: values past the last
 * slot are counted in it (so the index is always below max_slots, which the
 * verifier needs to see for an array access). */
static __always_inline __u32 plb_hist_slot(__u64 v, __u32 max_slots)
{
	__u32 slot = plb_log2l(v);

	return slot < max_slots ? slot : max_slots - 1;
}

/* Count v in slots[plb_hist_slot(v, max_slots)], atomically (several CPUs add
 * to the same histogram). slots is an array of max_slots __u32 counters, e.g.
 * a member of a map value; returns the slot counted. */
static __always_inline __u32 plb_hist_add(__u32 *slots, __u32 max_slots, __u64 v)
{
	__u32 slot = plb_hist_slot(v, max_slots);

	__sync_fetch_and_add(&slots[slot], 1);
	return slot;
}

/* True when the task whose bpf_get_current_pid_tgid() is pid_tgid passes the
 * filter: targ_tgid is a process id (the upper half), targ_tid a thread id
 * (the lower half); 0 lets every process / thread through. */
static __always_inline bool plb_pid_wanted(__u64 pid_tgid, __u32 targ_tgid, __u32 targ_tid)
{
	if (targ_tgid && (__u32)(pid_tgid >> 32) != targ_tgid)
		return false;
	if (targ_tid && (__u32)pid_tgid != targ_tid)
		return false;
	return true;
}

/* True when the current task's command name is targ_comm (PLB_COMM_LEN bytes,
 * compared up to its NUL, as comm is truncated to 15 characters); an empty
 * targ_comm lets every name through. */
static __always_inline bool plb_comm_wanted(const volatile char *targ_comm)
{
	char comm[PLB_COMM_LEN];

	if (!targ_comm[0])
		return true;
	bpf_get_current_comm(comm, sizeof(comm));
	for (int i = 0; i < PLB_COMM_LEN; i++) {
		if (comm[i] != targ_comm[i])
			return false;
		if (!comm[i])
			break;
	}
	return true;
}

/* The usual filter globals, set from user space before load
 * (obj.globals["targ_tgid"] = pid, obj.globals["targ_comm"] = "bash"), and
 * plb_filters_pass(), true when the current task passes all three. Use it
 * once, at file scope. */
#define PLB_FILTER_GLOBALS()							\
	const volatile __u32 targ_tgid = 0;					\
	const volatile __u32 targ_tid = 0;					\
	const volatile char targ_comm[PLB_COMM_LEN] = {};			\
	static __always_inline bool plb_filters_pass(void)			\
	{									\
		return plb_pid_wanted(bpf_get_current_pid_tgid(), targ_tgid,	\
				      targ_tid) && plb_comm_wanted(targ_comm);	\
	}									\
	struct plb_filter_globals

/* Keep `struct name` in the object's BTF, so that user space can read its
 * layout (obj.btf_struct("name")) even when only locals of that type exist
 * (clang records the types of globals, maps and function signatures, not of
 * locals). It emits an empty static function taking a `struct name *`: no
 * global variable, no map, no program. Write it at file scope after the
 * struct's declaration: PLB_KEEP_STRUCT(event); */
#define PLB_KEEP_STRUCT(name)							\
	static __attribute__((used)) void plb_keep_struct_##name(struct name *p)	\
	{									\
		(void)p;							\
	}									\
	struct name

#endif /* PYLIBBPF_BPF_TOOLS_H */
