/* plb_btf.h - BTF written out as C declarations (a vmlinux.h), for
 * pylibbpf.build.vmlinux_h() where bpftool is not installed. */
#ifndef PLB_BTF_H
#define PLB_BTF_H

#include <bpf/btf.h>

/* Write every type of `btf` as C (btf_dump's output, types in id order, as
 * `bpftool btf dump ... format c` does) to the file descriptor `fd`, which
 * stays open. Returns 0 or a negative errno. The caller writes the header
 * guard and the preserve_access_index pragma around it. */
int plb_btf_dump_c(const struct btf *btf, int fd);

#endif
