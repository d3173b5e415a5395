// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Block I/O latency by device, from issue to completion, in microseconds (examples/exporter/biolatency.yaml).
 * Tracepoints only (block:block_rq_issue, block:block_rq_complete). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "exporter.h"

#define MAX_BUCKET 26

struct rq_key {
	__u32 dev;
	__u32 pad;
	__u64 sector;
};

struct lat_key {
	__u32 dev;
	__u32 bucket;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 10240);
	__type(key, struct rq_key);
	__type(value, __u64);
} issued SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct lat_key);
	__type(value, __u64);
} bio_latency SEC(".maps");

SEC("tracepoint/block/block_rq_issue")
int rq_issue(struct trace_event_raw_block_rq *ctx)
{
	struct rq_key key = { .dev = ctx->dev, .sector = ctx->sector };
	__u64 now = bpf_ktime_get_ns();

	bpf_map_update_elem(&issued, &key, &now, BPF_ANY);
	return 0;
}

SEC("tracepoint/block/block_rq_complete")
int rq_complete(struct trace_event_raw_block_rq_completion *ctx)
{
	struct rq_key key = { .dev = ctx->dev, .sector = ctx->sector };
	struct lat_key lat = { .dev = ctx->dev };
	__u64 one = 1, *then = bpf_map_lookup_elem(&issued, &key), *n;

	if (!then)
		return 0;
	lat.bucket = exp2_bucket((bpf_ktime_get_ns() - *then) / 1000, MAX_BUCKET);
	bpf_map_delete_elem(&issued, &key);
	n = bpf_map_lookup_elem(&bio_latency, &lat);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&bio_latency, &lat, &one, BPF_NOEXIST);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
