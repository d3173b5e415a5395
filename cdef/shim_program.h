/* cdef/shim_program.h - csrc/plb_program.h: the iterator's map target and the
 * XDP attach modes (linux/if_link.h), values left to the compiler. */

void plb_iter_info_set_map_fd(union bpf_iter_link_info *info, uint32_t map_fd);

#define XDP_FLAGS_SKB_MODE ...
#define XDP_FLAGS_DRV_MODE ...
