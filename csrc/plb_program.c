/* plb_program.c - helpers for Program's attach calls (see plb_program.h). */
#include "plb_program.h"

#include <errno.h>
#include <string.h>

#include <bpf/bpf.h>

void plb_iter_info_set_map_fd(union bpf_iter_link_info *info, uint32_t map_fd)
{
	memset(info, 0, sizeof(*info));
	info->map.map_fd = map_fd;
}

int plb_multi_link_create(int prog_fd, enum bpf_attach_type attach_type, const char *target,
			  unsigned long offset)
{
	LIBBPF_OPTS(bpf_link_create_opts, opts);
	const char *syms[1] = { target };
	unsigned long offsets[1] = { offset };
	int fd;

	if (attach_type == BPF_TRACE_KPROBE_MULTI) {
		opts.kprobe_multi.syms = syms;
		opts.kprobe_multi.cnt = 1;
	} else if (attach_type == BPF_TRACE_UPROBE_MULTI) {
		opts.uprobe_multi.path = target;
		opts.uprobe_multi.offsets = offsets;
		opts.uprobe_multi.cnt = 1;
	} else {
		return -EINVAL;
	}
	fd = bpf_link_create(prog_fd, 0, attach_type, &opts);
	return fd < 0 ? -errno : fd;
}
