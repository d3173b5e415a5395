/* pylibbpf_shim.h - the C shim compiled into pylibbpf's CFFI extension.
 *
 * Everything here is prefixed plb_. What lives in C is what must not cross
 * into Python once per event or must run without the GIL (see
 * docs/architecture.md). */
#ifndef PYLIBBPF_SHIM_H
#define PYLIBBPF_SHIM_H

#include "plb_batch.h"
#include "plb_wait.h"
#include "plb_ringbuf.h"
#include "plb_queue.h"
#include "plb_reader.h"
#include "plb_merge.h"
#include "plb_into.h"
#include "plb_perfattr.h"
#include "plb_program.h"
#include "plb_linkinfo.h"
#include "plb_btf.h"
#include "plb_columns.h"
#include "plb_block.h"

/* Defined by CFFI (extern "Python+C" in the generated cdef/shim.h:
 * tools/gen_cdef.py SHIM_PYTHON_CALLBACKS): logs one libbpf message. */
void plb_py_log(int level, const char *msg);
/* Send libbpf's messages up to max_level (enum libbpf_print_level) to plb_py_log. */
void plb_log_install(int max_level);
/* The pylibbpf version this extension was built for (checked at import). */
const char *plb_package_version(void);
/* The libbpf release (x.y.z) linked in, from the pin's libbpf.pc. */
const char *plb_libbpf_release(void);

#endif
