"""Building BPF programs: libbpf's BPF-side headers, a vmlinux.h for this kernel, clang.

::

    pylibbpf.include_dir()          # -I this: <bpf/bpf_helpers.h>, ..., <pylibbpf/bpf_tools.h>
    pylibbpf.build.vmlinux_h()      # path of a vmlinux.h for the running kernel (cached)
    pylibbpf.build.compile("prog.bpf.c")             # -> Path("prog.bpf.o")
    BPFObject.compile(source_or_path, cflags=())     # compile and open, bcc-style one-file tools
    pylibbpf.build.event_def(header_text, "struct event")   # = EventDef.from_c: a C struct's layout
    pylibbpf.build.skeleton("prog.bpf.o")            # -> Path("prog_skel.py"), a typed skeleton

Only compiling needs clang (with the BPF target, any version from 14 on);
installing pylibbpf and loading prebuilt objects needs no compiler. The
``bpf/`` headers are libbpf's own, from the pinned libbpf the package is
linked with, copied into the package when it is built; ``pylibbpf/bpf_tools.h``
is the package's own (log2 histogram slots, pid and comm filters, keeping an
event struct in BTF).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path

from . import _check, _libbpf, _shim, events
from ._skelemit import generate
from ._skelmodel import EventSpec, stem_of
from .btf import struct_event_def, struct_names
from .events import EventDef

#: The running kernel's BTF: what vmlinux.h is generated from.
VMLINUX_BTF = Path("/sys/kernel/btf/vmlinux")
#: Searched in this order when $CLANG is not set (the newest versioned name first).
CLANG_NAMES = ("clang", *(f"clang-{v}" for v in range(21, 13, -1)))

_log = logging.getLogger("pylibbpf.build")
_INCLUDE = Path(__file__).resolve().parent / "include"
# uname -m -> the __TARGET_ARCH_* bpf_tracing.h expects (PT_REGS_* macros).
_TARGET_ARCH = {"x86_64": "x86", "aarch64": "arm64", "s390x": "s390", "ppc64le": "powerpc",
                "riscv64": "riscv", "loongarch64": "loongarch", "armv7l": "arm", "mips64": "mips"}
_VMLINUX_HEAD = """\
#ifndef __VMLINUX_H__
#define __VMLINUX_H__

#ifndef BPF_NO_PRESERVE_ACCESS_INDEX
#pragma clang attribute push (__attribute__((preserve_access_index)), apply_to = record)
#endif

"""
_VMLINUX_TAIL = """\
#ifndef BPF_NO_PRESERVE_ACCESS_INDEX
#pragma clang attribute pop
#endif

#endif /* __VMLINUX_H__ */
"""


class CompileError(RuntimeError):
    """clang is missing or refused the program.

    ``command`` is the clang command line (empty when clang was not found),
    ``output`` clang's diagnostics.
    """

    def __init__(self, message: str, command: Sequence[str] = (), output: str = "") -> None:
        super().__init__(message)
        self.command = list(command)
        self.output = output


class CompileWarning(UserWarning):
    """A diagnostic clang printed for a program it did compile (``warning:``, with its notes).

    The message is clang's own text for it: ``file:line:column: warning: ... [-Wflag]``, the
    source line and the caret, and the notes that follow (C text passed as a string is named
    ``<source>``). One is issued per diagnostic through :mod:`warnings`, so the usual filters
    apply (``-W error::pylibbpf.build.CompileWarning`` makes them fatal).
    """


# A line that opens a diagnostic: "file:line:col: warning: ..." or "clang: warning: ..." (not a
# source line, which clang indents). Notes belong to the diagnostic before them.
_DIAGNOSTIC = re.compile(r"^\S(?:.*?: )?(warning|error|fatal error|remark|note): ")
_INCLUDED_FROM = "In file included from "
_SUMMARY = re.compile(r"^\d+ (?:warnings?|errors?)(?: and \d+ errors?)? generated\.$")


def diagnostics(stderr: str) -> list[str]:
    """clang's stderr cut into diagnostics, each with its source lines, carets and notes;
    the "N warnings generated." summary left out."""
    found: list[list[str]] = []
    include_chain: list[str] = []
    for line in stderr.splitlines():
        head = _DIAGNOSTIC.match(line)
        if line.startswith(_INCLUDED_FROM) or (include_chain and line.lstrip().startswith("from ")):
            include_chain.append(line)  # "In file included from a.c:1:" and its "   from b.h:2:" lines
        elif _SUMMARY.match(line):
            continue
        elif head and (head.group(1) != "note" or not found):
            found.append([*include_chain, line])
            include_chain = []
        elif found:
            found[-1].append(line)
    return ["\n".join(lines).rstrip() for lines in found]


def include_dir() -> str:
    """The directory to pass to clang as ``-I``: it holds ``bpf/bpf_helpers.h``, ``bpf/bpf_tracing.h``,
    ``bpf/bpf_core_read.h``, ``bpf/bpf_endian.h``, ``bpf/bpf_helper_defs.h`` and ``bpf/usdt.bpf.h``,
    libbpf's own (the version :func:`pylibbpf.libbpf_version` reports), and
    ``pylibbpf/bpf_tools.h``, the package's helpers for tools (see the
    Building page), all shipped in the package. Raises FileNotFoundError when
    the package was built without libbpf's (a source tree where ``make build``
    has not run yet).
    """
    if not (_INCLUDE / "bpf" / "bpf_helpers.h").is_file():
        raise FileNotFoundError(f"libbpf's BPF headers are missing from {_INCLUDE / 'bpf'}: "
                                "rebuild the package (`make build` or `pip install`)")
    return str(_INCLUDE)


def cache_dir() -> Path:
    """Where generated files (vmlinux.h) are kept: $PYLIBBPF_CACHE_DIR, else $XDG_CACHE_HOME/pylibbpf,
    else ~/.cache/pylibbpf."""
    explicit = os.environ.get("PYLIBBPF_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pylibbpf"


@functools.lru_cache(maxsize=8)
def _digest(path: str, size: int, mtime_ns: int, inode: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:24]


def btf_identity(btf_path: str | os.PathLike[str] = VMLINUX_BTF) -> str:
    """A short hash of the BTF's bytes: two kernels share a vmlinux.h exactly when their BTF is the same.

    Hashed once per process for each (path, size, mtime, inode). Raises
    FileNotFoundError when the file is missing (a kernel without
    CONFIG_DEBUG_INFO_BTF).
    """
    path = _check.path(btf_path, "btf_path")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is missing: this kernel has no BTF (CONFIG_DEBUG_INFO_BTF), "
                                "so there is no vmlinux.h to generate") from None
    return _digest(path, st.st_size, st.st_mtime_ns, st.st_ino)


def _bpftool() -> str | None:
    found = shutil.which("bpftool")
    if found:
        return found
    # Debian installs it in sbin, which a non-root PATH lacks.
    return next((p for p in ("/usr/sbin/bpftool", "/sbin/bpftool") if os.access(p, os.X_OK)), None)


def _dump_with_bpftool(bpftool: str, btf_path: str, out: Path) -> None:
    with open(out, "wb") as f:
        proc = subprocess.run([bpftool, "btf", "dump", "file", btf_path, "format", "c"], stdout=f,
                              stderr=subprocess.PIPE, text=False, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"bpftool btf dump file {btf_path} format c failed (exit {proc.returncode}): "
                           f"{proc.stderr.decode(errors='replace').strip()}")


def _dump_with_libbpf(btf_path: str, out: Path) -> None:
    btf = _libbpf.btf__parse(btf_path, f"btf__parse({btf_path})")
    with open(out, "w") as f:
        f.write(_VMLINUX_HEAD)
        f.flush()
        _shim.plb_btf_dump_c(btf, f.fileno(), f"btf_dump({btf_path})")
        f.write(_VMLINUX_TAIL)


def vmlinux_h(*, btf_path: str | os.PathLike[str] = VMLINUX_BTF, using: str = "auto") -> str:
    """The path of a ``vmlinux.h`` declaring every type of the running kernel (of ``btf_path``).

    Generated on the first call for a given BTF (see :func:`btf_identity`) and
    cached in ``cache_dir()/vmlinux/<identity>/vmlinux.h``; later calls, in this
    process or another, return the cached file. Blocks while generating (about
    a second). ``using``: ``"bpftool"`` (``bpftool btf dump ... format c``),
    ``"libbpf"`` (libbpf's btf_dump, linked in: no tool needed) or ``"auto"``
    (bpftool when installed, else libbpf); both write the same declarations.

    Raises FileNotFoundError when there is no BTF, BPFError when libbpf cannot
    parse it, RuntimeError when bpftool fails or ``using="bpftool"`` and it is
    not installed, ValueError for another ``using``.
    """
    path = _check.path(btf_path, "btf_path")
    _check.choice(using, "using", ("auto", "bpftool", "libbpf"))
    header = cache_dir() / "vmlinux" / btf_identity(path) / "vmlinux.h"
    if header.is_file():
        return str(header)
    bpftool = _bpftool() if using != "libbpf" else None
    if using == "bpftool" and bpftool is None:
        raise RuntimeError("bpftool is not installed (using='bpftool'); using='libbpf' needs no tool")
    header.parent.mkdir(parents=True, exist_ok=True)
    # Written beside it and renamed: a concurrent caller sees no file or a whole one.
    tmp = header.with_name(f".vmlinux.h.{os.getpid()}.{threading.get_ident()}")
    try:
        if bpftool is not None:
            _dump_with_bpftool(bpftool, path, tmp)
        else:
            _dump_with_libbpf(path, tmp)
        os.replace(tmp, header)
    finally:
        tmp.unlink(missing_ok=True)
    return str(header)


def find_clang() -> str:
    """The clang to compile with: $CLANG when set, else the first of CLANG_NAMES on PATH.

    Raises CompileError naming what was looked for when there is none.
    """
    explicit = os.environ.get("CLANG")
    if explicit:
        found = shutil.which(explicit)
        if found is None:
            raise CompileError(f"clang not found: $CLANG is {explicit!r}, which is not an executable")
        return found
    for name in CLANG_NAMES:
        found = shutil.which(name)
        if found:
            return found
    raise CompileError("clang not found (looked for clang, clang-21 ... clang-14 on PATH and $CLANG): "
                       "compiling BPF C needs clang with the BPF target (Debian: apt-get install clang-19); "
                       "loading prebuilt .bpf.o files needs no compiler")


def _cflags(cflags: object) -> list[str]:
    if isinstance(cflags, (str, bytes)) or not isinstance(cflags, Sequence):
        raise TypeError(f"cflags must be a sequence of str (e.g. ['-DMAX=8']), got {cflags!r}")
    for flag in cflags:
        _check.string(flag, "cflags item")
    return list(cflags)


def _source_path(source_or_path: object) -> Path | None:
    """The source file named by ``source_or_path``, or None when it is the C text itself."""
    if isinstance(source_or_path, (bytes, bytearray, memoryview)):
        return None
    if isinstance(source_or_path, str) and "\n" in source_or_path:
        return None
    path = Path(_check.path(source_or_path, "source_or_path"))
    if not path.is_file():
        raise FileNotFoundError(f"source_or_path: no such file {str(path)!r} (C source text must contain "
                                "a newline to be taken as source)")
    return path


def default_output(source: str | os.PathLike[str]) -> Path:
    """``x.bpf.c`` -> ``x.bpf.o`` (``x.c`` -> ``x.o``) beside the source."""
    path = Path(source)
    return path.with_suffix(".o") if path.suffix == ".c" else path.with_name(path.name + ".o")


def compile(source_or_path: str | os.PathLike[str] | bytes, output: str | os.PathLike[str] | None = None, *,
            cflags: Sequence[str] = (), skel: bool = False, events: Sequence[str] = (),
            raw_chars: Sequence[str] = ()) -> Path:
    """Compile one BPF C program into a CO-RE object with clang; returns the object's path.

    ``source_or_path`` is a path to the ``.bpf.c`` file, or the C text itself
    (``bytes``, or a ``str`` containing a newline). The include path holds, in
    order: the source's directory (for a file), the directory of
    :func:`vmlinux_h` (``#include "vmlinux.h"``; generated when the kernel has
    BTF), :func:`include_dir` (``#include <bpf/bpf_helpers.h>``); ``cflags``
    come after the defaults (``-g -O2 -target bpf -D__TARGET_ARCH_<arch>``)
    and can add ``-I``/``-D``/``-W`` options. ``output`` defaults to the
    source's name with ``.o`` (``prog.bpf.c`` -> ``prog.bpf.o``); C text needs
    an ``output``.

    Each diagnostic clang prints for a program it compiles (``x == 1;`` where
    ``x = 1;`` was meant) is issued as a :class:`CompileWarning`.

    ``skel=True`` also writes the object's typed skeleton beside it
    (:func:`skeleton`, ``prog_skel.py``, the object embedded), ``events``
    naming the struct of each ring or perf buffer (``"events=struct event"``),
    ``raw_chars`` the char arrays it reads as bytes.

    Blocks while clang runs. Raises CompileError when clang is missing or
    fails (``.output`` holds its diagnostics), FileNotFoundError for a missing
    source file, TypeError/ValueError for bad arguments.
    """
    specs = _event_specs(events)
    raw = _names(raw_chars, "raw_chars")
    if (specs or raw) and not skel:
        raise ValueError("events and raw_chars describe a skeleton: they need skel=True")
    out, stderr = _compile(source_or_path, output, cflags)
    _warn(stderr)
    if skel:
        skeleton(out, events=specs, raw_chars=raw)
    return out


def _names(names: Sequence[str], param: str) -> list[str]:
    if isinstance(names, (str, bytes)) or not isinstance(names, Sequence):
        raise TypeError(f"{param} must be a sequence of names, got {names!r:.60}")
    return [_check.string(n, f"{param} item") for n in names]


def _event_specs(events: Sequence[str | EventSpec]) -> list[EventSpec]:
    if isinstance(events, (str, bytes)) or not isinstance(events, Sequence):
        raise TypeError(f"events must be a sequence of 'MAP=struct NAME' strings, got {events!r:.60}")
    return [e if isinstance(e, EventSpec) else EventSpec.parse(_check.string(e, "events item")) for e in events]


def default_skeleton(object_path: str | os.PathLike[str], name: str | None = None) -> Path:
    """``x.bpf.o`` -> ``x_skel.py`` beside the object (``NAME_skel.py`` with a ``name``)."""
    path = Path(object_path)
    return path.with_name(f"{name or stem_of(path.name)}_skel.py")


def skeleton(object_path: str | os.PathLike[str], output: str | os.PathLike[str] | None = None, *,
             name: str | None = None, events: Sequence[str | EventSpec] = (), embed: bool = True,
             raw_chars: Sequence[str] = ()) -> Path:
    """Write the typed skeleton module of a compiled object; returns the module's path.

    ``output`` defaults to ``<stem>_skel.py`` beside the object (``run_qlat.bpf.o``
    -> ``run_qlat_skel.py``, class ``RunQlatSkel``); ``name`` replaces the stem.
    ``events`` say which struct each ring buffer or perf event array carries
    (``"events=struct event"``; see :mod:`pylibbpf.skel` for the BTF hint that
    does without). ``raw_chars`` names the ``char`` arrays read as ``bytes``
    (every byte, NULs included) rather than ``str``: ``struct.field`` (the
    struct's C name), a global variable, ``map.key``/``map.value``, or ``"*"``
    for every one. ``embed=True`` puts the object's bytes in the module (base64:
    the module alone is enough to run); ``embed=False`` makes it open the object
    from where it is now, relative to the module's directory.

    The same object and options give the same bytes. The file is replaced
    only when its text changes. Raises FileNotFoundError for a missing object,
    BPFError when libbpf cannot open it, ValueError when it has no BTF or an
    event names a map that is not a ring or perf buffer or a ``raw_chars``
    name no char array, KeyError for a struct its BTF lacks.
    """
    obj = Path(_check.path(object_path, "object_path"))
    if name is not None and not re.fullmatch(r"[A-Za-z_]\w*", _check.string(name, "name")):
        raise ValueError(f"name must be an identifier (the class is NAMESkel), got {name!r}")
    out = Path(_check.path(output, "output")) if output is not None else default_skeleton(obj, name)
    if out.suffix != ".py" or not out.stem.isidentifier():
        raise ValueError(f"output must be a module file NAME.py with NAME an identifier, got {str(out)!r}")
    if not obj.is_file():
        raise FileNotFoundError(f"object_path: no such file {str(obj)!r}")
    data = obj.read_bytes()
    relative = None if embed else os.path.relpath(obj.resolve(), out.resolve().parent)
    text = generate(data, object_name=obj.name, module_name=out.stem, events=_event_specs(events),
                    name=name, object_path=relative, raw_chars=_names(raw_chars, "raw_chars"))
    if not out.exists() or out.read_text() != text:
        tmp = out.with_name(f".{out.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            tmp.write_text(text)
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
    return out


def _warn(stderr: str) -> None:
    """One CompileWarning per diagnostic of a successful compile, attributed to the first caller
    outside the package (``BPFObject.compile``'s caller, not object.py)."""
    texts = diagnostics(stderr)
    if not texts:
        return
    package = os.path.dirname(__file__) + os.sep
    frame, level = sys._getframe(0), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    for text in texts:
        warnings.warn(CompileWarning(text), stacklevel=level)


def _compile(source_or_path: str | os.PathLike[str] | bytes, output: str | os.PathLike[str] | None,
             cflags: Sequence[str]) -> tuple[Path, str]:
    """Run clang as :func:`compile` describes: (the object's path, clang's diagnostics)."""
    flags = _cflags(cflags)
    src = _source_path(source_or_path)
    if output is None:
        if src is None:
            raise ValueError("output is required when source_or_path is C text, not a file")
        out = default_output(src)
    else:
        out = Path(_check.path(output, "output"))
    label = "the C source text" if src is None else str(src)
    clang = find_clang()
    with tempfile.TemporaryDirectory(prefix="pylibbpf-compile-") as tmp:
        text_file = None
        if src is None:
            src = text_file = Path(tmp) / "source.bpf.c"
            text = source_or_path
            src.write_bytes(text.encode() if isinstance(text, str) else bytes(text))  # type: ignore[arg-type]
            includes = []
        else:
            includes = [f"-I{src.resolve().parent}"]
        if VMLINUX_BTF.exists():
            includes.append(f"-I{Path(vmlinux_h()).parent}")
        # usdt.bpf.h includes <asm/errno.h>, which Debian keeps in the multiarch directory that
        # clang does not search for -target bpf; searched last, so it never shadows vmlinux.h.
        multiarch = Path(f"/usr/include/{platform.machine()}-linux-gnu")
        if multiarch.is_dir():
            flags = [*flags, f"-idirafter{multiarch}"]
        arch = _TARGET_ARCH.get(platform.machine(), platform.machine())
        command = [clang, "-g", "-O2", "-target", "bpf", f"-D__TARGET_ARCH_{arch}", *includes,
                   f"-I{include_dir()}", *flags, "-c", str(src), "-o", str(out)]
        _log.info("%s", shlex.join(command))
        proc = subprocess.run(command, capture_output=True, text=True, check=False)
    # C text lived in a temporary file whose name means nothing to the caller.
    stderr = proc.stderr.replace(str(text_file), "<source>") if text_file is not None else proc.stderr
    if proc.returncode != 0:
        raise CompileError(f"clang could not compile {label} (exit {proc.returncode}):\n{stderr.rstrip()}",
                           command, stderr)
    return out, stderr


def compile_bytes(source_or_path: str | os.PathLike[str] | bytes, *, cflags: Sequence[str] = ()) -> tuple[bytes, str]:
    """Compile like :func:`compile` into memory: (the object's bytes, a name for it: the source file's
    name up to its first dot, or ``"source"`` for C text). clang's diagnostics are issued as
    :class:`CompileWarning` as there."""
    src = _source_path(source_or_path)
    name = src.name.split(".", 1)[0] if src is not None else "source"
    with tempfile.TemporaryDirectory(prefix="pylibbpf-compile-") as tmp:
        out, stderr = _compile(source_or_path, Path(tmp) / f"{name}.bpf.o", cflags)
        data = out.read_bytes()
    _warn(stderr)
    return data, name


# --- event layouts from C declarations --------------------------------------------------------

_STRUCT_NAME = re.compile(r"\s*(?:struct\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*")
# C's keywords: not a struct's name, and the compiler would report them confusingly.
_C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if inline int long "
    "register restrict return short signed sizeof static struct switch typedef union unsigned void volatile "
    "while _Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary _Noreturn _Static_assert "
    "_Thread_local".split())
#: EventDefs already built, by the hash of everything that went into them (see event_def).
_EVENT_DEFS: dict[str, EventDef] = {}
_EVENT_DEFS_MAX = 256
_event_defs_lock = threading.Lock()


def _include_dirs(include_dirs: object) -> list[str]:
    if isinstance(include_dirs, (str, bytes, os.PathLike)) or not isinstance(include_dirs, Sequence):
        raise TypeError(f"include_dirs must be a sequence of directories (e.g. ['include']), got {include_dirs!r}")
    return [str(Path(_check.path(d, "include_dirs item")).resolve()) for d in include_dirs]


def event_def(header_text: str, struct: str, *, include_dirs: Sequence[str | os.PathLike[str]] = (),
              cflags: Sequence[str] = ()) -> EventDef:
    """``struct`` (``"struct event"`` or ``"event"``) of the C declarations ``header_text``, as an
    EventDef laid out by clang for BPF: what :meth:`EventDef.from_c` calls.

    ``header_text`` is compiled as a BPF program that includes ``vmlinux.h``
    (when the kernel has BTF) and ``<pylibbpf/bpf_tools.h>`` first, so it can
    use the kernel's types (``pid_t``, ``__u64``, ``bool``) as a tool's own
    header does; its ``#include "x.h"`` lines are looked up in
    ``include_dirs``, and ``cflags`` are passed to clang after them (``-D``
    for the macros the header expects). The struct is kept in the compiled
    object's BTF and read back with the code behind
    :meth:`BPFObject.btf_struct`, so offsets, padding and the size are the
    compiler's.

    The result is cached in this process by a hash of ``header_text``,
    ``struct``, ``include_dirs``, ``cflags`` and the kernel's BTF: a second
    call with the same arguments runs no compiler (a header included from
    ``include_dirs`` that changed since is not noticed). Blocks while clang
    runs (a fraction of a second; the first call in a cache directory also
    generates ``vmlinux.h``, about a second).

    Raises FileNotFoundError when clang is not installed (naming the
    package), ValueError with clang's diagnostics when the text does not
    compile, KeyError when it compiles but does not define the struct,
    ValueError for a struct an EventDef cannot hold (a bitfield, a float
    member), TypeError/ValueError for bad arguments.
    """
    text = _check.string(header_text, "header_text")
    match = _STRUCT_NAME.fullmatch(_check.string(struct, "struct"))
    if match is None or match.group(1) in _C_KEYWORDS:
        raise ValueError(f"struct must be a struct's name, 'struct NAME' or 'NAME', got {struct!r}")
    name = match.group(1)
    dirs, flags = _include_dirs(include_dirs), _cflags(cflags)
    has_btf = VMLINUX_BTF.exists()
    key = hashlib.sha256(repr((text, name, dirs, flags, btf_identity() if has_btf else None)).encode(
        "utf-8", "surrogatepass")).hexdigest()
    with _event_defs_lock:
        cached = _EVENT_DEFS.get(key)
    if cached is not None:
        return cached
    try:
        find_clang()
    except CompileError as exc:
        raise FileNotFoundError(f"EventDef.from_c: {exc}") from None
    # The header first, then the struct kept in BTF (an unused function taking a pointer to it:
    # PLB_KEEP_STRUCT); `struct name;` before it declares the name at file scope when the header
    # does not define it, which leaves a forward declaration in BTF instead of a compile error.
    # The #line directives make clang's messages name the header text's own lines.
    source = "".join([
        '#include "vmlinux.h"\n' if has_btf else "",
        "#include <pylibbpf/bpf_tools.h>\n",
        '#line 1 "<header_text>"\n', text, "\n",
        f'#line 1 "<from_c>"\nstruct {name};\nPLB_KEEP_STRUCT({name});\n',
    ])
    include_flags = [f"-I{d}" for d in dirs]
    try:
        data, _ = compile_bytes(source, cflags=[*include_flags, *flags])
    except CompileError as exc:
        # The first error on the first line (what a one-line report shows), every diagnostic after it.
        first = next((line for line in exc.output.splitlines() if "error:" in line), "")
        raise ValueError(f"EventDef.from_c: clang could not compile header_text: {first}\n"
                         f"{exc.output.rstrip()}") from None
    with tempfile.TemporaryDirectory(prefix="pylibbpf-from-c-") as tmp:
        path = Path(tmp) / "struct.bpf.o"
        path.write_bytes(data)
        btf = _libbpf.btf__parse(str(path), "btf__parse(EventDef.from_c)")
    if name not in struct_names(btf):
        raise KeyError(f"EventDef.from_c: header_text does not define struct {name}")
    result = struct_event_def(btf, name, "header_text")
    with _event_defs_lock:
        if len(_EVENT_DEFS) >= _EVENT_DEFS_MAX:
            _EVENT_DEFS.pop(next(iter(_EVENT_DEFS)))  # the oldest: dicts keep insertion order
        _EVENT_DEFS[key] = result
    return result


# EventDef.from_c is this module's event_def: events.py is above this module in the import order
# (it cannot import the compiler code), so it calls what is set here when the package is imported.
events.c_struct_compiler = event_def
