"""Compile BPF C programs (*.bpf.c) into CO-RE objects with clang-19.

Usage: python tools/build_bpf.py SRC_DIR OUT_DIR [VMLINUX_DIR]

vmlinux.h is generated once per OUT_DIR (or VMLINUX_DIR) from the running kernel's BTF
(/sys/kernel/btf/vmlinux) with bpftool; libbpf's BPF-side headers
(bpf_helpers.h, bpf_core_read.h, ...) come from the pinned libbpf build, <pylibbpf/bpf_tools.h>
from the package.
An object is rebuilt only when its source (or a header beside it) is newer.
Used by the test setup (tests/bpf) and the package build (csrc/bpf).
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIBBPF_INCLUDE = ROOT / "vendor" / "libbpf" / "build" / "install" / "include"
#: pylibbpf's own BPF-side headers (<pylibbpf/bpf_tools.h>), shipped in include_dir() as they are.
PACKAGE_INCLUDE = ROOT / "pylibbpf" / "include"
VMLINUX_BTF = Path("/sys/kernel/btf/vmlinux")
_ARCH = {"x86_64": "x86", "aarch64": "arm64", "s390x": "s390", "ppc64le": "powerpc"}


def _clang_path() -> str | None:
    for name in ("clang-19", "clang"):
        path = shutil.which(name)
        if path:
            return path
    return None


def clang() -> str:
    path = _clang_path()
    if path is None:
        raise RuntimeError("clang-19 not found: run `make setup` (it installs the clang-19 package)")
    return path


def _bpftool_path() -> str | None:
    return shutil.which("bpftool") or next((p for p in ("/usr/sbin/bpftool", "/sbin/bpftool")
                                             if Path(p).exists()), None)


def missing_tools() -> list[str]:
    """What build() needs and this machine lacks: kernel BTF, clang, bpftool."""
    missing = [] if VMLINUX_BTF.exists() else [f"kernel BTF ({VMLINUX_BTF})"]
    return missing + [name for name, path in (("clang", _clang_path()), ("bpftool", _bpftool_path())) if not path]


def vmlinux_h(out_dir: Path) -> Path:
    """Generate OUT_DIR/vmlinux.h from the kernel's BTF (once)."""
    header = out_dir / "vmlinux.h"
    if not header.exists():
        if not VMLINUX_BTF.exists():
            raise RuntimeError(f"{VMLINUX_BTF} is missing: this kernel has no BTF, CO-RE programs cannot build")
        bpftool = _bpftool_path()
        if bpftool is None:
            raise RuntimeError("bpftool not found: it writes vmlinux.h (run `make setup`)")
        text = subprocess.run([bpftool, "btf", "dump", "file", str(VMLINUX_BTF), "format", "c"],
                              check=True, capture_output=True, text=True).stdout
        tmp = header.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(header)
    return header


def build(src_dir: Path, out_dir: Path, vmlinux_dir: Path | None = None, force: bool = False) -> list[Path]:
    """Compile every SRC_DIR/*.bpf.c into OUT_DIR/*.bpf.o; returns the object paths.

    vmlinux.h is generated in VMLINUX_DIR (default: OUT_DIR), so that an output
    directory that is package data need not hold it. ``force`` rebuilds objects
    that look up to date (the prebuilt ones of an sdist).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    header_dir = out_dir if vmlinux_dir is None else vmlinux_dir
    header_dir.mkdir(parents=True, exist_ok=True)
    vmlinux_h(header_dir)
    headers = list(src_dir.glob("*.h")) + list((PACKAGE_INCLUDE / "pylibbpf").glob("*.h"))
    arch = _ARCH.get(platform.machine(), platform.machine())
    # libbpf's usdt.bpf.h includes <asm/errno.h>, which Debian keeps under the multiarch directory;
    # -idirafter lets vmlinux.h and libbpf's headers win over anything found there.
    multiarch = Path(f"/usr/include/{platform.machine()}-linux-gnu")
    system = [f"-idirafter{multiarch}"] if multiarch.is_dir() else []
    objects = []
    for src in sorted(src_dir.glob("*.bpf.c")):
        obj = out_dir / (src.name[:-2] + ".o")
        newest = max([src.stat().st_mtime] + [h.stat().st_mtime for h in headers])
        if force or not obj.exists() or obj.stat().st_mtime < newest:
            subprocess.run([clang(), "-g", "-O2", "-target", "bpf", f"-D__TARGET_ARCH_{arch}",
                            "-Wall", "-Werror", "-Wno-unused-function",
                            f"-I{header_dir}", f"-I{src_dir}", f"-I{LIBBPF_INCLUDE}",
                            f"-I{PACKAGE_INCLUDE}", *system,
                            "-c", str(src), "-o", str(obj)], check=True)
        objects.append(obj)
    return objects


if __name__ == "__main__":
    for path in build(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]) if len(sys.argv) > 3 else None):
        print(path)
