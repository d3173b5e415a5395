/* plb_linkinfo.h - what a link is attached to: the per-kind part of struct
 * bpf_link_info, which sits in anonymous unions the generated cdef leaves
 * opaque, read into one flat struct of our own (Link.info()). */
#ifndef PLB_LINKINFO_H
#define PLB_LINKINFO_H

#include <stdint.h>
#include <linux/bpf.h>

/* The fields of every link kind (enum bpf_link_type), each filled for the
 * kinds named beside it and zero for the others. */
struct plb_link_fields {
	uint32_t attach_type;   /* tracing, cgroup, netns, tcx, netkit, sockmap */
	uint32_t ifindex;       /* xdp, tcx, netkit */
	uint32_t map_id;        /* iter over a map's elements, struct_ops, sockmap */
	uint32_t target_obj_id; /* tracing: the BTF object's id (the program's for freplace) */
	uint32_t target_btf_id; /* tracing: the target's type id in that BTF */
	uint64_t cgroup_id;     /* cgroup, iter over a cgroup */
	uint32_t netns_ino;     /* netns */
	uint32_t pf;            /* netfilter */
	uint32_t hooknum;       /* netfilter */
	int32_t priority;       /* netfilter */
	uint32_t flags;         /* netfilter, kprobe_multi, uprobe_multi */
	uint32_t count;         /* kprobe_multi, uprobe_multi: probes in the link */
	uint32_t pid;           /* uprobe_multi, iter over a task */
	uint32_t tid;           /* iter over a task */
	uint32_t order;         /* iter over a cgroup */
	uint64_t missed;        /* kprobe_multi, perf_event kprobe */
	uint32_t perf_type;     /* perf_event: enum bpf_perf_event_type */
	uint32_t event_type;    /* perf_event event: the perf event's type */
	uint64_t config;        /* perf_event event: the perf event's config */
	uint64_t offset;        /* perf_event probes: the offset from the symbol or in the file */
	uint64_t addr;          /* perf_event kprobe */
	uint64_t cookie;        /* perf_event */
	uint32_t name_len;      /* bytes of the name the kernel reported (with its NUL) */
};

/* Point the name member of info's kind (raw_tracepoint tp_name, iter
 * target_name, uprobe_multi path, perf_event file_name/func_name/tp_name) at
 * buf, after a first bpf_link_get_info_by_fd() filled info->type (and the
 * perf event's type): the rest of the per-kind part is cleared for the second
 * call. Returns 1 when the kind has a name, 0 when it has none. */
int plb_link_info_name_buf(struct bpf_link_info *info, char *buf, uint32_t size);
/* Copy the per-kind part of info into out (zeroed first). */
void plb_link_info_fields(const struct bpf_link_info *info, struct plb_link_fields *out);

#endif
