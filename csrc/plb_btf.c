/* plb_btf.c - BTF to C declarations through libbpf's btf_dump.
 *
 * btf_dump prints through a callback that receives a va_list, which cannot
 * cross CFFI: the callback lives here and writes to a stdio stream. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include <bpf/btf.h>

#include "plb_btf.h"

static void plb_btf_vprintf(void *ctx, const char *fmt, va_list args)
{
	vfprintf((FILE *)ctx, fmt, args);
}

int plb_btf_dump_c(const struct btf *btf, int fd)
{
	struct btf_dump *d;
	FILE *out;
	__u32 id, n;
	int dupfd, err = 0;

	dupfd = dup(fd);	/* fclose() below must not close the caller's fd */
	if (dupfd < 0)
		return -errno;
	out = fdopen(dupfd, "w");
	if (!out) {
		err = -errno;
		close(dupfd);
		return err;
	}
	d = btf_dump__new(btf, plb_btf_vprintf, out, NULL);
	if (!d) {
		err = -errno;	/* libbpf 1.x: NULL with errno set */
		fclose(out);
		return err;
	}
	n = btf__type_cnt(btf);
	for (id = 1; id < n && !err; id++)
		err = btf_dump__dump_type(d, id);
	btf_dump__free(d);
	if (ferror(out) && !err)
		err = -EIO;
	if (fclose(out) != 0 && !err)
		err = -errno;
	return err;
}
