/* plb_log.c - route libbpf's printf-style messages to Python's logging.
 *
 * libbpf hands its print callback a format and a va_list, which cannot cross
 * CFFI; the message is formatted here and passed to Python as one string.
 * A message is never cut: the verifier log of a refused program arrives as one
 * message of up to libbpf's 16 MiB log buffer, and its reason is on its last
 * lines. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <bpf/libbpf.h>

#include "pylibbpf_shim.h"

static int plb_log_max_level = LIBBPF_INFO;

static int plb_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
	char small[1024];
	char *msg = small;
	va_list again;
	int len;

	if ((int)level > plb_log_max_level)
		return 0;
	/* Most messages fit the stack buffer; a longer one is formatted a second
	 * time into memory of its exact size, so a va_list copy is kept for it. */
	va_copy(again, args);
	len = vsnprintf(small, sizeof(small), fmt, args);
	if (len >= (int)sizeof(small)) {
		char *big = malloc((size_t)len + 1);

		if (big) {
			vsnprintf(big, (size_t)len + 1, fmt, again);
			msg = big;
		}
		/* Out of memory: the first 1023 bytes are still worth logging. */
	}
	va_end(again);
	if (len >= 0)
		plb_py_log((int)level, msg);
	if (msg != small)
		free(msg);
	return 0;
}

void plb_log_install(int max_level)
{
	plb_log_max_level = max_level;
	libbpf_set_print(plb_print);
}
