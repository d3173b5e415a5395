"""Addresses to symbol names: the kernel's (``/proc/kallsyms``) and a process's (its ELF files).

``KernelSymbols().resolve(addr)`` and ``ProcessSymbols(pid).resolve(addr)``
return a :class:`Symbol` ``(name, offset, module)`` or None, the way bcc's
``ksym``/``sym`` and libbpf-tools' ``ksyms``/``syms`` do, for stack traces and
instruction pointers a BPF program reports.

Kernel: every symbol of ``/proc/kallsyms`` (absolute symbols aside) sorted by
address, looked up by binary search; ``module`` is ``"kernel"`` for the core
image, else the module's name (``"bpf"`` for JIT-ed BPF programs). The list is
read once; :meth:`KernelSymbols.refresh` reads it again (after a module or a
BPF program was loaded).

Process: ``/proc/PID/maps`` says which file (and which part of it) backs an
address. The file offset of the address, ``addr - start + mapping offset``,
falls in one ``PT_LOAD`` segment of the ELF file, which gives its virtual
address ``p_vaddr + (file offset - p_offset)``: the address the symbol table
(``.symtab``, else ``.dynsym``) speaks of. That one rule covers position-
dependent executables, PIE executables and shared libraries at any load bias.
The ``[vdso]`` is read from the process's memory (``/proc/PID/mem``), where the
kernel maps it. ELF files are parsed with pyelftools and cached per file
(device, inode, modification time, size), for every ProcessSymbols of the
interpreter.
"""

from __future__ import annotations

import bisect
import dataclasses
import errno
import io
import os
import stat
import struct
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import IO, NamedTuple

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from . import _check

#: Where the kernel lists its symbols.
KALLSYMS = "/proc/kallsyms"
#: The ``module`` of a core-kernel symbol.
KERNEL_MODULE = "kernel"
#: The ``module`` of an address in an anonymous mapping (JIT code, heap, stacks have their own names).
ANON_MODULE = "[anon]"
#: Shared anonymous memory shows a file name in /proc/PID/maps (MAP_SHARED|MAP_ANONYMOUS, memfd_create,
#: System V shared memory): no ELF file behind it.
_ANON_FILES = ("/dev/zero", "/memfd:", "/SYSV")
#: How many parsed ELF files stay cached.
ELF_CACHE_SIZE = 128


class Symbol(NamedTuple):
    """A resolved address: ``name`` (None when no symbol covers it), ``offset`` from the symbol's start
    (or, with no name, the address within the module: an ELF virtual address for files, the offset
    in the mapping for anonymous memory), ``module`` (``"kernel"``, a module name, a file path,
    ``"[vdso]"``, ``"[anon]"``...)."""

    name: str | None
    offset: int
    module: str


# --- the kernel ------------------------------------------------------------------------------

class KernelSymbols:
    """The kernel's symbols from ``/proc/kallsyms``; resolve() is a binary search.

    Reading needs the addresses to be visible: with ``kernel.kptr_restrict``
    (or without CAP_SYSLOG) the kernel shows them as zeros and the constructor
    raises PermissionError saying so. ``path`` reads another file in the same
    format (a saved copy). Safe to share between threads.
    """

    def __init__(self, path: str | os.PathLike[str] = KALLSYMS) -> None:
        self._path = _check.path(path, "path")
        self._lock = threading.Lock()
        self._addrs: list[int] = []
        self._names: list[str] = []
        self._modules: list[str] = []
        self._by_name: dict[str, int] | None = None
        self.refresh()

    def refresh(self) -> None:
        """Read the symbol list again (a module or BPF program loaded since). PermissionError when the
        addresses are hidden, OSError when the file cannot be read."""
        rows: list[tuple[int, int, str, str]] = []
        hidden = 0
        with open(self._path, encoding="utf-8", errors="replace") as f:
            for seq, line in enumerate(f):
                parts = line.split()
                if len(parts) < 3:
                    continue
                kind = parts[1]
                if kind in ("a", "A", "U"):  # absolute values (per-CPU offsets) and undefined: not code
                    continue
                addr = int(parts[0], 16)
                if addr == 0:
                    hidden += 1
                    continue
                module = parts[3].strip("[]") if len(parts) > 3 else KERNEL_MODULE
                # Several names at one address: global (upper-case type) first, then file order.
                rows.append((addr, seq + (0 if kind.isupper() else 1 << 32), parts[2], module))
        if not rows:
            if hidden:
                raise PermissionError(errno.EACCES, f"{self._path} shows every address as 0: the kernel hides "
                                      "them (kernel.kptr_restrict, or the reader lacks CAP_SYSLOG); run as root "
                                      "with `sysctl kernel.kptr_restrict=0`", self._path)
            raise ValueError(f"{self._path} holds no symbols")
        rows.sort()
        addrs: list[int] = []
        names: list[str] = []
        modules: list[str] = []
        for addr, _, name, module in rows:
            if addrs and addrs[-1] == addr:
                continue  # an alias: the preferred name is already there
            addrs.append(addr)
            names.append(name)
            modules.append(module)
        with self._lock:
            self._addrs, self._names, self._modules = addrs, names, modules
            self._by_name = None

    def __len__(self) -> int:
        return len(self._addrs)

    def resolve(self, addr: int) -> Symbol | None:
        """The symbol at or below ``addr``; None below the first kernel symbol (a user-space address)."""
        addr = _check.integer(addr, "addr", lo=0, hi=_check.UINT64_MAX)
        with self._lock:
            i = bisect.bisect_right(self._addrs, addr) - 1
            if i < 0:
                return None
            return Symbol(self._names[i], addr - self._addrs[i], self._modules[i])

    def address(self, name: str) -> int | None:
        """The address of the symbol called ``name`` (its first, for names defined twice), or None."""
        name = _check.string(name, "name")
        with self._lock:
            if self._by_name is None:
                self._by_name = {}
                for i in range(len(self._names) - 1, -1, -1):
                    self._by_name[self._names[i]] = self._addrs[i]
            return self._by_name.get(name)


# --- ELF files --------------------------------------------------------------------------------

_FUNC_TYPES = frozenset({"STT_FUNC", "STT_GNU_IFUNC", "STT_OBJECT"})


@dataclasses.dataclass(frozen=True)
class _ElfSymbols:
    """What resolution needs from one ELF file: its PT_LOAD segments and sorted symbols."""

    segments: tuple[tuple[int, int, int], ...]  # (p_offset, p_filesz, p_vaddr)
    starts: tuple[int, ...]
    ends: tuple[int, ...]  # start + size, or the next symbol's start for a size-0 symbol
    names: tuple[str, ...]

    @classmethod
    def parse(cls, stream: IO[bytes]) -> _ElfSymbols:
        elf = ELFFile(stream)
        segments = tuple((seg["p_offset"], seg["p_filesz"], seg["p_vaddr"]) for seg in elf.iter_segments()
                         if seg["p_type"] == "PT_LOAD")
        # start -> (preference, size, name): one name per address, preferring functions, global
        # bindings, the larger size and a name without a leading underscore (printf over _IO_printf)
        found: dict[int, tuple[tuple[int, bool, int], int, str]] = {}
        for section_name in (".symtab", ".dynsym"):
            section = elf.get_section_by_name(section_name)
            if not isinstance(section, SymbolTableSection):
                continue
            for sym in section.iter_symbols():
                value, info = sym["st_value"], sym["st_info"]
                if not value or not sym.name or info["type"] not in _FUNC_TYPES or sym["st_shndx"] == "SHN_UNDEF":
                    continue
                rank = ((0 if info["type"] != "STT_OBJECT" else 2) + (0 if info["bind"] == "STB_GLOBAL" else 1),
                        sym.name.startswith("_"), -sym["st_size"])
                best = found.get(value)
                if best is None or rank < best[0]:
                    found[value] = (rank, sym["st_size"], sym.name)
        starts = sorted(found)
        ends = [s + found[s][1] if found[s][1] else (starts[i + 1] if i + 1 < len(starts) else s + 1)
                for i, s in enumerate(starts)]
        return cls(segments, tuple(starts), tuple(ends), tuple(found[s][2] for s in starts))

    def vaddr(self, file_offset: int) -> int | None:
        """The virtual address the ELF gives the byte at ``file_offset``, None outside every PT_LOAD."""
        for offset, size, vaddr in self.segments:
            if offset <= file_offset < offset + size:
                return vaddr + file_offset - offset
        return None

    def lookup(self, vaddr: int) -> tuple[str, int] | None:
        """(name, offset) of the symbol that covers ``vaddr``."""
        i = bisect.bisect_right(self.starts, vaddr) - 1
        if i >= 0 and vaddr < self.ends[i]:
            return self.names[i], vaddr - self.starts[i]
        return None


_NOT_ELF = _ElfSymbols((), (), (), ())

_cache_lock = threading.Lock()
_cache: OrderedDict[tuple[object, ...], _ElfSymbols] = OrderedDict()


def _cached(key: tuple[object, ...], stream: IO[bytes]) -> _ElfSymbols:
    """The parsed symbols for ``key``, parsing ``stream`` on a miss (a file that is not ELF: no symbols)."""
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    try:
        parsed = _ElfSymbols.parse(stream)
    except (ELFError, OSError, ValueError, EOFError, KeyError, AttributeError, IndexError, TypeError,
            OverflowError, struct.error):
        # not an ELF file (a locale archive, a font mapped by a process), a truncated one, or a header
        # whose offsets point nowhere (pyelftools then seeks before the start: OSError): no symbols,
        # its addresses resolve to the module and an offset
        parsed = _NOT_ELF
    with _cache_lock:
        _cache[key] = parsed
        while len(_cache) > ELF_CACHE_SIZE:
            _cache.popitem(last=False)
    return parsed


# --- processes -------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Mapping:
    start: int
    end: int
    offset: int
    path: str  # "" for anonymous memory, "[heap]", "[vdso]", ... for the kernel's names
    inode: int = 0  # of the mapped file (0: none)


def _read_maps(pid: int) -> list[_Mapping]:
    mappings = []
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            parts = line.rstrip("\n").split(maxsplit=5)
            if len(parts) < 5:
                continue
            lo, _, hi = parts[0].partition("-")
            mappings.append(_Mapping(int(lo, 16), int(hi, 16), int(parts[2], 16), parts[5] if len(parts) > 5 else "",
                                     int(parts[4]) if parts[4].isdigit() else 0))
    return mappings


def _open_mapped(path: str, inode: int) -> int | None:
    """A read-only fd on the regular file ``path`` names if it is inode ``inode``, else None.

    The name is first opened with O_PATH: nothing of the file is opened yet (a FIFO does not block,
    a device is not opened), so its type and inode are checked before any read; the very object
    checked is then reopened through /proc/self/fd. A name someone else replaced or points
    elsewhere (a symlink, a FIFO, another file) is refused whatever it resolves to.
    """
    try:
        handle = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(handle)
        if not stat.S_ISREG(st.st_mode) or (inode and st.st_ino != inode):
            return None
        return os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    finally:
        os.close(handle)


class ProcessSymbols:
    """The symbols of process ``pid``, from the ELF files and the ``[vdso]`` its memory maps.

    The mappings are read at construction and by :meth:`refresh` (call it
    after the process loaded a library); each ELF file is parsed the first time
    an address falls in it. Reading another process's mappings and memory
    needs the rights ptrace would (root, or the same user). Raises
    ProcessLookupError when there is no process ``pid``. Safe to share between
    threads.

    Mapped files are read through ``/proc/PID/map_files/`` (or the process's
    root, or, once it exited, their names): only the regular file with the
    inode the mapping had is read, never a FIFO, device or other file someone
    put at that name. A file that cannot be read or parsed resolves as one
    without symbols (module and offset); resolve() does not raise for it.
    """

    def __init__(self, pid: int) -> None:
        self.pid = _check.integer(pid, "pid", lo=1, hi=_check.INT32_MAX)
        self._lock = threading.Lock()
        self._starts: list[int] = []
        self._mappings: list[_Mapping] = []
        self._vdso: _ElfSymbols | None = None
        self.refresh()

    def refresh(self) -> None:
        """Read ``/proc/PID/maps`` again. ProcessLookupError once the process is gone."""
        try:
            mappings = _read_maps(self.pid)
        except FileNotFoundError:
            raise ProcessLookupError(errno.ESRCH, f"no process {self.pid}") from None
        mappings.sort(key=lambda m: m.start)
        with self._lock:
            self._mappings = mappings
            self._starts = [m.start for m in mappings]

    def _mapping(self, addr: int) -> _Mapping | None:
        with self._lock:
            i = bisect.bisect_right(self._starts, addr) - 1
            if i >= 0 and addr < self._mappings[i].end:
                return self._mappings[i]
        return None

    def resolve(self, addr: int) -> Symbol | None:
        """The symbol covering ``addr`` in the process, or None when nothing is mapped there.

        An address in a file without a symbol for it (a stripped binary) gives
        ``Symbol(None, vaddr, path)`` with the ELF virtual address (what
        ``addr2line -e path`` takes); anonymous memory (JIT code) gives
        ``Symbol(None, offset in the mapping, "[anon]")``, the heap and stacks
        their kernel names (``[heap]``, ``[stack]``).
        """
        addr = _check.integer(addr, "addr", lo=0, hi=_check.UINT64_MAX)
        m = self._mapping(addr)
        if m is None:
            return None
        if m.path == "[vdso]":
            elf = self._vdso_symbols(m)
            module = m.path
        elif m.path.startswith("/") and not m.path.startswith(_ANON_FILES):
            elf = self._file_symbols(m)
            module = m.path.removesuffix(" (deleted)")
        else:
            named = m.path.startswith("[")  # [heap], [stack], [anon:name]: the kernel's names
            return Symbol(None, addr - m.start, m.path if named else ANON_MODULE)
        file_offset = addr - m.start + m.offset
        vaddr = elf.vaddr(file_offset)
        if vaddr is None:  # not an ELF file, or bytes no segment loads: the offset in the file
            return Symbol(None, file_offset, module)
        found = elf.lookup(vaddr)
        if found is None:
            return Symbol(None, vaddr, module)
        return Symbol(found[0], found[1], module)

    def _file_symbols(self, m: _Mapping) -> _ElfSymbols:
        # /proc/PID/map_files/ opens the very file mapped (deleted, replaced, or in another mount
        # namespace) while the process lives; the path through its root, then the path as written
        # (after it exited: the frames of short-lived processes) are the fall-backs. The names can
        # be anyone's: only the regular file with the inode the mapping had is read.
        path = m.path.removesuffix(" (deleted)")
        candidates = (f"/proc/{self.pid}/map_files/{m.start:x}-{m.end:x}", f"/proc/{self.pid}/root{path}", path)
        for candidate in candidates:
            fd = _open_mapped(candidate, m.inode)
            if fd is None:
                continue
            with open(fd, "rb") as f:
                st = os.fstat(f.fileno())
                return _cached(("file", st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size), f)
        return _NOT_ELF

    def _vdso_symbols(self, m: _Mapping) -> _ElfSymbols:
        if self._vdso is None:
            try:
                with open(f"/proc/{self.pid}/mem", "rb") as mem:
                    mem.seek(m.start)
                    image = mem.read(m.end - m.start)
            except OSError:
                image = b""
            # The same kernel maps the same image in every process: one parse per image.
            self._vdso = _cached(("vdso", hash(image), len(image)), io.BytesIO(image))
        return self._vdso

    def modules(self) -> Sequence[str]:
        """The distinct files and names mapped in the process, in address order."""
        with self._lock:
            return list(dict.fromkeys(m.path for m in self._mappings if m.path))
