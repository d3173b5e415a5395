/* plb_log.c - route libbpf's printf-style messages to Python's logging.
 *
 * libbpf hands its print callback a format and a va_list, which cannot cross
 * CFFI; the message is formatted here and passed to Python as one string. */
#include <stdarg.h>
#include <stdio.h>

#include <bpf/libbpf.h>

#include "pylibbpf_shim.h"

static int plb_log_max_level = LIBBPF_INFO;

static int plb_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
	char msg[1024];

	if ((int)level > plb_log_max_level)
		return 0;
	vsnprintf(msg, sizeof(msg), fmt, args);
	plb_py_log((int)level, msg);
	return 0;
}

void plb_log_install(int max_level)
{
	plb_log_max_level = max_level;
	libbpf_set_print(plb_print);
}
