/* plb_program.c - helpers for Program's attach calls (see plb_program.h). */
#include "plb_program.h"

#include <string.h>

void plb_iter_info_set_map_fd(union bpf_iter_link_info *info, uint32_t map_fd)
{
	memset(info, 0, sizeof(*info));
	info->map.map_fd = map_fd;
}
