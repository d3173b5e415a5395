"""The CFFI builder: libbpf's public API plus pylibbpf's C shim, in one extension.

Out-of-line API mode: the cdef files below are compiled against the real
headers, so the C compiler checks every declaration, fills in every `...`
(struct layouts, enum values) and links libbpf statically. Run directly
(`python build_ffi.py`) to build the extension in place; setuptools runs it
through `cffi_modules` on install.

libbpf comes from vendor/libbpf (built on demand by vendor/libbpf/build.sh);
LIBBPF_SRC / LIBBPF_TARBALL are honoured there.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

from cffi import FFI

ROOT = Path(__file__).resolve().parent
LIBBPF = ROOT / "vendor" / "libbpf"
INSTALL = LIBBPF / "build" / "install"

# cdef files, in dependency order: types before the functions that use them.
CDEFS = [
    "cdef/base.h",            # __u32 and friends
    "cdef/uapi_types.h",      # linux/bpf.h, linux/btf.h (generated)
    "cdef/libbpf_types.h",    # libbpf's structs, enums, callback types (generated)
    "cdef/libbpf_api.h",      # libbpf.h, bpf.h, btf.h functions (generated)
    "cdef/shim.h",            # batch collector, waiter, logging
    "cdef/shim_ringbuf.h",    # BPF ring buffer walker and mmap
    "cdef/shim_queue.h",      # bounded queue and native reader thread (after shim_ringbuf.h)
    "cdef/shim_merge.h",      # ordered k-way merge over perf rings and ring buffers
    "cdef/shim_perf.h",       # perf event attrs, raw perf callbacks (after shim_merge.h)
    "cdef/shim_program.h",    # attach helpers: iterator map target, XDP modes
]
# C shim sources compiled into the same extension.
SOURCES = [
    "csrc/plb_batch.c",
    "csrc/plb_wait.c",
    "csrc/plb_log.c",
    "csrc/plb_ringbuf.c",
    "csrc/plb_queue.c",
    "csrc/plb_reader.c",
    "csrc/plb_perfring.c",
    "csrc/plb_merge.c",
    "csrc/plb_perfattr.c",
    "csrc/plb_program.c",
]


def package_version() -> str:
    text = (ROOT / "pylibbpf" / "_version.py").read_text()
    match = re.search(r'__version__ = "([^"]+)"', text)
    if not match:
        raise RuntimeError("pylibbpf/_version.py has no __version__")
    return match.group(1)


def libbpf_release() -> str:
    """The full libbpf version (x.y.z) from the built libbpf.pc; the C API only has major.minor."""
    text = (INSTALL / "lib" / "pkgconfig" / "libbpf.pc").read_text()
    match = re.search(r"^Version: *(\S+)", text, re.M)
    return match.group(1) if match else "unknown"


def ensure_libbpf() -> None:
    """Build the pinned static libbpf when it is not there yet."""
    subprocess.run([str(LIBBPF / "build.sh")], check=True)


def build_bundled_bpf() -> None:
    """Compile the command's CO-RE programs (csrc/bpf/*.bpf.c) into package data (pylibbpf/bpf/).

    Runs when setuptools loads this builder (before it collects package data)
    and on `python build_ffi.py`; objects newer than their sources are kept.
    vmlinux.h, generated from the running kernel's BTF, stays in build/bpf/:
    it is not package data. On a kernel without BTF the objects are skipped
    with a warning: the library works without them, the command says they are missing.
    """
    spec = importlib.util.spec_from_file_location("build_bpf", ROOT / "tools" / "build_bpf.py")
    if spec is None or spec.loader is None:
        raise RuntimeError("tools/build_bpf.py is missing")
    build_bpf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build_bpf)
    if not build_bpf.VMLINUX_BTF.exists():
        print(f"warning: {build_bpf.VMLINUX_BTF} is missing: the `pylibbpf trace` programs are not built",
              file=sys.stderr)
        return
    build_bpf.build(ROOT / "csrc" / "bpf", ROOT / "pylibbpf" / "bpf", vmlinux_dir=ROOT / "build" / "bpf")


def make_builder(relative_sources: bool = True) -> FFI:
    """The FFI builder. setuptools wants source paths relative to the project;
    ``FFI.compile()`` runs in its tmpdir and needs them absolute."""
    os.chdir(ROOT)
    ensure_libbpf()
    build_bundled_bpf()
    ffibuilder = FFI()
    for name in CDEFS:
        ffibuilder.cdef((ROOT / name).read_text(), override=False)
    version = package_version()
    ffibuilder.set_source(
        "pylibbpf._pylibbpf_cffi",
        f"""
        #include <errno.h>
        #include <bpf/libbpf.h>
        #include <bpf/bpf.h>
        #include <bpf/btf.h>
        #include "pylibbpf_shim.h"
        const char *plb_package_version(void) {{ return "{version}"; }}
        const char *plb_libbpf_release(void) {{ return "{libbpf_release()}"; }}
        """,
        sources=SOURCES if relative_sources else [str(ROOT / src) for src in SOURCES],
        include_dirs=[str(INSTALL / "include"), str(ROOT / "csrc")],
        extra_objects=[str(INSTALL / "lib" / "libbpf.a")],
        libraries=["elf", "z"],
        extra_compile_args=["-std=gnu11", "-O2", "-g", "-flto=auto", "-Wno-unused-parameter",
                            "-Wno-deprecated-declarations"],
        # Link-time optimisation lets the merge inline the perf-ring cursor (another file).
        extra_link_args=["-flto=auto", "-O2"],
    )
    return ffibuilder


ffibuilder = make_builder()

if __name__ == "__main__":
    make_builder(relative_sources=False).compile(tmpdir=str(ROOT / "build" / "cffi"), verbose=False)
    # compile() writes the module under tmpdir/pylibbpf/; it replaces any earlier
    # build in the package (an editable install may have left an abi3 variant).
    built = sorted((ROOT / "build" / "cffi" / "pylibbpf").glob("_pylibbpf_cffi*.so"))
    for old in (ROOT / "pylibbpf").glob("_pylibbpf_cffi*.so"):
        old.unlink()
    for so in built:
        so.replace(ROOT / "pylibbpf" / so.name)
