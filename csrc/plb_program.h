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

#endif
