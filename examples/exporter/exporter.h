/* Shared by the exporter examples: the exp2 bucket of a value, as `pylibbpf exporter` reads it.
 * Bucket i counts values in (2^(i-1), 2^i]: ceil(log2(v)), 0 for 0 and 1. */
#ifndef EXPORTER_EXAMPLES_H
#define EXPORTER_EXAMPLES_H

#include <pylibbpf/bpf_tools.h>

static __always_inline __u32 exp2_bucket(__u64 v, __u32 max_bucket)
{
	__u32 b = v <= 1 ? 0 : plb_log2l(v - 1) + 1;

	return b > max_bucket ? max_bucket + 1 : b;
}

#endif
