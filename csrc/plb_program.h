/* plb_program.h - what Program's attach calls need beside libbpf: the parts
 * of kernel unions and flags CFFI cannot reach from a generated cdef. */
#ifndef PLB_PROGRAM_H
#define PLB_PROGRAM_H

#include <stdint.h>
#include <linux/bpf.h>
#include <linux/if_link.h>

/* Point a bpf_iter link at a map (map iterators: union bpf_iter_link_info's
 * anonymous `map` member, which the generated cdef leaves opaque). */
void plb_iter_info_set_map_fd(union bpf_iter_link_info *info, uint32_t map_fd);

/* Create a kprobe_multi link on one kernel function (`target`), or a
 * uprobe_multi link on file `target` at `offset` (attach_type says which):
 * the feature probes' only way to learn whether these links work, through
 * bpf_link_create_opts' anonymous union that the generated cdef leaves out.
 * Returns the link fd or -errno. */
int plb_multi_link_create(int prog_fd, enum bpf_attach_type attach_type, const char *target,
			  unsigned long offset);

#endif
