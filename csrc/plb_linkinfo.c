/* plb_linkinfo.c - the per-kind part of struct bpf_link_info (see plb_linkinfo.h). */
#include "plb_linkinfo.h"

#include <stddef.h>
#include <string.h>

static int has_name(const struct bpf_link_info *info)
{
	switch (info->type) {
	case BPF_LINK_TYPE_RAW_TRACEPOINT:
	case BPF_LINK_TYPE_ITER:
	case BPF_LINK_TYPE_UPROBE_MULTI:
		return 1;
	case BPF_LINK_TYPE_PERF_EVENT:
		return info->perf_event.type != BPF_PERF_EVENT_EVENT && info->perf_event.type != BPF_PERF_EVENT_UNSPEC;
	}
	return 0;
}

int plb_link_info_name_buf(struct bpf_link_info *info, char *buf, uint32_t size)
{
	uint32_t perf_type = info->perf_event.type;
	uint64_t ptr = (uint64_t)(uintptr_t)buf;

	if (!has_name(info))
		return 0; /* the first call's answer is the whole answer: left as it is */
	/* Everything after the common header: the kernel reads its pointers as user buffers. */
	memset((char *)info + offsetof(struct bpf_link_info, raw_tracepoint), 0,
	       sizeof(*info) - offsetof(struct bpf_link_info, raw_tracepoint));
	switch (info->type) {
	case BPF_LINK_TYPE_RAW_TRACEPOINT:
		info->raw_tracepoint.tp_name = ptr;
		info->raw_tracepoint.tp_name_len = size;
		break;
	case BPF_LINK_TYPE_ITER:
		info->iter.target_name = ptr;
		info->iter.target_name_len = size;
		break;
	case BPF_LINK_TYPE_UPROBE_MULTI:
		info->uprobe_multi.path = ptr;
		info->uprobe_multi.path_size = size;
		break;
	case BPF_LINK_TYPE_PERF_EVENT:
		info->perf_event.type = perf_type;
		/* uprobe.file_name, kprobe.func_name and tracepoint.tp_name, by the event's type */
		if (perf_type == BPF_PERF_EVENT_UPROBE || perf_type == BPF_PERF_EVENT_URETPROBE) {
			info->perf_event.uprobe.file_name = ptr;
			info->perf_event.uprobe.name_len = size;
		} else if (perf_type == BPF_PERF_EVENT_KPROBE || perf_type == BPF_PERF_EVENT_KRETPROBE) {
			info->perf_event.kprobe.func_name = ptr;
			info->perf_event.kprobe.name_len = size;
		} else {
			info->perf_event.tracepoint.tp_name = ptr;
			info->perf_event.tracepoint.name_len = size;
		}
		break;
	}
	return 1;
}

static void perf_event_fields(const struct bpf_link_info *info, struct plb_link_fields *out)
{
	out->perf_type = info->perf_event.type;
	switch (info->perf_event.type) {
	case BPF_PERF_EVENT_UPROBE:
	case BPF_PERF_EVENT_URETPROBE:
		out->name_len = info->perf_event.uprobe.name_len;
		out->offset = info->perf_event.uprobe.offset;
		out->cookie = info->perf_event.uprobe.cookie;
		break;
	case BPF_PERF_EVENT_KPROBE:
	case BPF_PERF_EVENT_KRETPROBE:
		out->name_len = info->perf_event.kprobe.name_len;
		out->offset = info->perf_event.kprobe.offset;
		out->addr = info->perf_event.kprobe.addr;
		out->missed = info->perf_event.kprobe.missed;
		out->cookie = info->perf_event.kprobe.cookie;
		break;
	case BPF_PERF_EVENT_TRACEPOINT:
		out->name_len = info->perf_event.tracepoint.name_len;
		out->cookie = info->perf_event.tracepoint.cookie;
		break;
	case BPF_PERF_EVENT_EVENT:
		out->config = info->perf_event.event.config;
		out->event_type = info->perf_event.event.type;
		out->cookie = info->perf_event.event.cookie;
		break;
	}
}

void plb_link_info_fields(const struct bpf_link_info *info, struct plb_link_fields *out)
{
	memset(out, 0, sizeof(*out));
	switch (info->type) {
	case BPF_LINK_TYPE_RAW_TRACEPOINT:
		out->name_len = info->raw_tracepoint.tp_name_len;
		break;
	case BPF_LINK_TYPE_TRACING:
		out->attach_type = info->tracing.attach_type;
		out->target_obj_id = info->tracing.target_obj_id;
		out->target_btf_id = info->tracing.target_btf_id;
		break;
	case BPF_LINK_TYPE_CGROUP:
		out->cgroup_id = info->cgroup.cgroup_id;
		out->attach_type = info->cgroup.attach_type;
		break;
	case BPF_LINK_TYPE_ITER:
		out->name_len = info->iter.target_name_len;
		out->map_id = info->iter.map.map_id;
		/* The second union holds a cgroup's or a task's fields, by the target (named). */
		out->cgroup_id = info->iter.cgroup.cgroup_id;
		out->order = info->iter.cgroup.order;
		out->tid = info->iter.task.tid;
		out->pid = info->iter.task.pid;
		break;
	case BPF_LINK_TYPE_NETNS:
		out->netns_ino = info->netns.netns_ino;
		out->attach_type = info->netns.attach_type;
		break;
	case BPF_LINK_TYPE_XDP:
		out->ifindex = info->xdp.ifindex;
		break;
	case BPF_LINK_TYPE_PERF_EVENT:
		perf_event_fields(info, out);
		break;
	case BPF_LINK_TYPE_KPROBE_MULTI:
		out->count = info->kprobe_multi.count;
		out->flags = info->kprobe_multi.flags;
		out->missed = info->kprobe_multi.missed;
		break;
	case BPF_LINK_TYPE_STRUCT_OPS:
		out->map_id = info->struct_ops.map_id;
		break;
	case BPF_LINK_TYPE_NETFILTER:
		out->pf = info->netfilter.pf;
		out->hooknum = info->netfilter.hooknum;
		out->priority = info->netfilter.priority;
		out->flags = info->netfilter.flags;
		break;
	case BPF_LINK_TYPE_TCX:
		out->ifindex = info->tcx.ifindex;
		out->attach_type = info->tcx.attach_type;
		break;
	case BPF_LINK_TYPE_UPROBE_MULTI:
		out->name_len = info->uprobe_multi.path_size;
		out->count = info->uprobe_multi.count;
		out->flags = info->uprobe_multi.flags;
		out->pid = info->uprobe_multi.pid;
		break;
	case BPF_LINK_TYPE_NETKIT:
		out->ifindex = info->netkit.ifindex;
		out->attach_type = info->netkit.attach_type;
		break;
	case BPF_LINK_TYPE_SOCKMAP:
		out->map_id = info->sockmap.map_id;
		out->attach_type = info->sockmap.attach_type;
		break;
	}
}
