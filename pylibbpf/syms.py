"""Addresses to symbol names: the kernel's (``/proc/kallsyms``) and a process's (its ELF files, perf maps).

``KernelSymbols().resolve(addr)`` and ``ProcessSymbols(pid).resolve(addr)``
return a :class:`Symbol` ``(name, offset, module)`` or None, the way bcc's
``ksym``/``sym`` and libbpf-tools' ``ksyms``/``syms`` do, for stack traces and
instruction pointers a BPF program reports.

Kernel: every symbol of ``/proc/kallsyms`` (absolute symbols aside) sorted by
address, looked up by binary search; ``module`` is ``"kernel"`` for the core
image, else the module's name (``"bpf"`` for JIT-ed BPF programs). Where
several names share one address, :meth:`KernelSymbols.resolve` gives the one
:func:`preferred_kernel_name` picks, :meth:`KernelSymbols.aliases` lists them
all and :meth:`KernelSymbols.address` finds any of them. The list is read once;
:meth:`KernelSymbols.refresh` reads it again (after a module or a BPF program
was loaded).

Process: only code is named. ``/proc/PID/maps`` says which file (and which
part of it) backs an address; an address in a mapping that is not executable
has no name. The file offset of the address, ``addr - start + mapping
offset``, falls in one ``PT_LOAD`` segment of the ELF file, which gives its
virtual address ``p_vaddr + (file offset - p_offset)``: the address the
symbol tables speak of. That one rule covers position-dependent executables,
PIE executables and shared libraries at any load bias. The function symbols
come from ``.symtab``, ``.dynsym``, ``.gnu_debugdata`` (MiniDebugInfo) and a
debug file found by build-id (``pylibbpf._elfsyms`` says how, and which name
wins at a shared address); an address past the end of the function below it
has no name. The ``[vdso]`` is read from the process's memory
(``/proc/PID/mem``). Code in anonymous executable memory (a JIT) is named from
the process's perf map, ``/tmp/perf-PID.map``, which CPython 3.12+ writes with
``-X perf`` and Node and JVM agents write too. ELF files are parsed once and
cached (by build-id) for every ProcessSymbols of the interpreter.
"""

from __future__ import annotations

import bisect
import dataclasses
import errno
import io
import os
import stat
import threading
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from elftools.elf.elffile import ELFFile

from . import _check, _elfsyms
from ._elfsyms import DEBUG_DIRS

__all__ = ["ANON_MODULE", "DEBUG_DIRS", "KALLSYMS", "KERNEL_MODULE", "SYSCALL_OTHER_FORMS", "SYSCALL_WRAPPERS",
           "KernelSymbols", "ProcessSymbols", "Symbol", "elf_has_symbol", "preferred_kernel_name"]

#: Where the kernel lists its symbols.
KALLSYMS = "/proc/kallsyms"
#: The ``module`` of a core-kernel symbol.
KERNEL_MODULE = "kernel"
#: The ``module`` of an address in an anonymous mapping (JIT code, heap, stacks have their own names).
ANON_MODULE = "[anon]"
#: Shared anonymous memory shows a file name in /proc/PID/maps (MAP_SHARED|MAP_ANONYMOUS, memfd_create,
#: System V shared memory): no ELF file behind it.
_ANON_FILES = ("/dev/zero", "/memfd:", "/SYSV")
#: The prefix each architecture's kernel gives a system call's entry point (``__x64_sys_getppid``).
SYSCALL_WRAPPERS = {"x86_64": "__x64_", "aarch64": "__arm64_", "s390x": "__s390x_", "riscv64": "__riscv_"}
#: The other names a system call's code carries at the same address (the 32-bit entry, the body, the
#: sign-extending stub): never preferred over the wrapper.
SYSCALL_OTHER_FORMS = ("__ia32_", "__x32_", "__do_", "__se_")


class Symbol(NamedTuple):
    """A resolved address: ``name`` (None when no symbol covers it), ``offset`` from the symbol's start
    (or, with no name, the address within the module: an ELF virtual address for files, the offset
    in the mapping for anonymous memory), ``module`` (``"kernel"``, a module name, a file path,
    ``"[vdso]"``, ``"[anon]"``...)."""

    name: str | None
    offset: int
    module: str


# --- the kernel ------------------------------------------------------------------------------

def preferred_kernel_name(names: Iterable[tuple[str, bool]], machine: str | None = None) -> str:
    """The name, among ``(name, is_global)`` pairs sharing one address, that ``resolve()`` gives.

    The rule, in order (each step only among the names the step before left):

    1. a global symbol (upper-case type letter in ``/proc/kallsyms``) over a local one;
    2. the architecture's system-call wrapper (``__x64_sys_getppid`` on x86-64, ``__arm64_`` on
       arm64; :data:`SYSCALL_WRAPPERS`) over the other forms of the same call (``__ia32_``, ``__x32_``,
       ``__do_``, ``__se_``: :data:`SYSCALL_OTHER_FORMS`), with or without a ``__pfx_`` in front;
    3. fewer leading underscores (``memset`` over ``__memset``);
    4. the greatest name in byte order (what libbpf-tools' sorted table gives for equal addresses).

    ``machine`` defaults to this machine's (``os.uname().machine``).
    """
    wrapper = SYSCALL_WRAPPERS.get(machine or os.uname().machine, "")

    def rank(entry: tuple[str, bool]) -> tuple[int, int, int]:
        name, is_global = entry
        bare = name.removeprefix("__pfx_")
        form = 0 if wrapper and bare.startswith(wrapper) else 2 if bare.startswith(SYSCALL_OTHER_FORMS) else 1
        return (0 if is_global else 1, form, len(name) - len(name.lstrip("_")))

    entries = list(names)
    if not entries:
        raise ValueError("no names to choose from")
    best = min(rank(e) for e in entries)
    return max(name for name, is_global in entries if rank((name, is_global)) == best)


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
        self._aliases: dict[int, tuple[str, ...]] = {}
        self._by_name: dict[str, int] = {}
        self.refresh()

    def refresh(self) -> None:
        """Read the symbol list again (a module or BPF program loaded since). PermissionError when the
        addresses are hidden, OSError when the file cannot be read."""
        groups: dict[int, list[tuple[str, bool]]] = {}
        module_of: dict[int, str] = {}
        by_name: dict[str, int] = {}
        hidden = 0
        with open(self._path, encoding="utf-8", errors="replace") as f:
            for line in f:
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
                name = parts[2]
                groups.setdefault(addr, []).append((name, kind.isupper()))
                module_of.setdefault(addr, parts[3].strip("[]") if len(parts) > 3 else KERNEL_MODULE)
                by_name.setdefault(name, addr)  # a name defined twice: its first, in the file's order
        if not groups:
            if hidden:
                raise PermissionError(errno.EACCES, f"{self._path} shows every address as 0: the kernel hides "
                                      "them (kernel.kptr_restrict, or the reader lacks CAP_SYSLOG); run as root "
                                      "with `sysctl kernel.kptr_restrict=0`", self._path)
            raise ValueError(f"{self._path} holds no symbols")
        machine = os.uname().machine
        addrs = sorted(groups)
        names: list[str] = []
        aliases: dict[int, tuple[str, ...]] = {}
        for addr in addrs:
            group = groups[addr]
            if len(group) == 1:
                names.append(group[0][0])
                continue
            chosen = preferred_kernel_name(group, machine)
            names.append(chosen)
            aliases[addr] = (chosen, *(n for n, _ in group if n != chosen))
        with self._lock:
            self._addrs, self._names = addrs, names
            self._modules = [module_of[a] for a in addrs]
            self._aliases, self._by_name = aliases, by_name

    def __len__(self) -> int:
        """How many addresses have a symbol (aliases count once)."""
        return len(self._addrs)

    def _index(self, addr: int) -> int:
        addr = _check.integer(addr, "addr", lo=0, hi=_check.UINT64_MAX)
        return bisect.bisect_right(self._addrs, addr) - 1

    def resolve(self, addr: int) -> Symbol | None:
        """The symbol at or below ``addr`` (among aliases, the :func:`preferred_kernel_name`); None below
        the first kernel symbol (a user-space address)."""
        with self._lock:
            i = self._index(addr)
            if i < 0:
                return None
            return Symbol(self._names[i], addr - self._addrs[i], self._modules[i])

    def aliases(self, addr: int) -> tuple[str, ...]:
        """Every name of the symbol at or below ``addr``, the one resolve() gives first; () below the first."""
        with self._lock:
            i = self._index(addr)
            if i < 0:
                return ()
            start = self._addrs[i]
            return self._aliases.get(start, (self._names[i],))

    def address(self, name: str) -> int | None:
        """The address of the symbol called ``name``, whichever alias it is (for names defined twice, the
        first in ``/proc/kallsyms``), or None."""
        name = _check.string(name, "name")
        with self._lock:
            return self._by_name.get(name)


# --- processes -------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Mapping:
    start: int
    end: int
    offset: int
    path: str  # "" for anonymous memory, "[heap]", "[vdso]", ... for the kernel's names
    inode: int = 0  # of the mapped file (0: none)
    executable: bool = True


def _read_maps(pid: int) -> list[_Mapping]:
    mappings = []
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            parts = line.rstrip("\n").split(maxsplit=5)
            if len(parts) < 5:
                continue
            lo, _, hi = parts[0].partition("-")
            mappings.append(_Mapping(int(lo, 16), int(hi, 16), int(parts[2], 16), parts[5] if len(parts) > 5 else "",
                                     int(parts[4]) if parts[4].isdigit() else 0, "x" in parts[1]))
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


@dataclasses.dataclass(frozen=True)
class _PerfMap:
    """A perf map's entries (``START SIZE NAME`` lines, hexadecimal), sorted; the file's identity."""

    identity: tuple[int, ...]
    starts: list[int]
    ends: list[int]
    names: list[str]

    @classmethod
    def parse(cls, identity: tuple[int, ...], text: str) -> _PerfMap:
        entries: dict[int, tuple[int, str]] = {}
        for line in text.splitlines():
            parts = line.split(maxsplit=2)
            if len(parts) < 3:
                continue
            try:
                start, size = int(parts[0], 16), int(parts[1], 16)
            except ValueError:
                continue
            if size > 0:
                entries[start] = (start + size, parts[2])  # code compiled again at one address: the last
        starts = sorted(entries)
        return cls(identity, starts, [entries[s][0] for s in starts], [entries[s][1] for s in starts])

    def lookup(self, addr: int) -> tuple[str, int] | None:
        i = bisect.bisect_right(self.starts, addr) - 1
        if i >= 0 and addr < self.ends[i]:
            return self.names[i], addr - self.starts[i]
        return None


def _namespace_pid(pid: int) -> int:
    """``pid`` as the process sees itself (its innermost PID namespace): the number in its perf map's name."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return pid


class ProcessSymbols:
    """The symbols of process ``pid``: its ELF files, its ``[vdso]``, its perf map.

    The mappings are read at construction and by :meth:`refresh` (call it
    after the process loaded a library); each ELF file is parsed the first time
    an address falls in it. The perf map is read when an address falls in
    anonymous executable memory, and again when the file changed. Reading
    another process's mappings and memory needs the rights ptrace would
    (root, or the same user). Raises ProcessLookupError when there is no
    process ``pid``. Safe to share between threads.

    Mapped files are read through ``/proc/PID/map_files/`` (or the process's
    root, or, once it exited, their names): only the regular file with the
    inode the mapping had is read, never a FIFO, device or other file someone
    put at that name. The perf map is read only when it is a regular file
    owned by the process's user or by root. A file that cannot be read or
    parsed has no symbols; resolve() does not raise for it.
    """

    def __init__(self, pid: int) -> None:
        self.pid = _check.integer(pid, "pid", lo=1, hi=_check.INT32_MAX)
        self._lock = threading.Lock()
        self._starts: list[int] = []
        self._mappings: list[_Mapping] = []
        self._vdso: _elfsyms.ElfSymbols | None = None
        self._perf_map: _PerfMap | None = None
        self._perf_map_name = f"/tmp/perf-{_namespace_pid(self.pid)}.map"  # as the process names it
        self._perf_map_path = f"/proc/{self.pid}/root{self._perf_map_name}"
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
        """The function covering ``addr`` in the process, or None: code only.

        None when nothing is mapped at ``addr``, when its mapping is not
        executable (data, heap, stacks), when no function symbol covers it
        (a stripped file, past the end of the function below it, JIT code
        without a perf map entry). :meth:`locate` says where such an address is.
        """
        addr = _check.integer(addr, "addr", lo=0, hi=_check.UINT64_MAX)
        m = self._mapping(addr)
        if m is None or not m.executable:
            return None
        return self._resolve_in(m, addr)[0]

    def locate(self, addr: int) -> Symbol | None:
        """Where ``addr`` is, named or not: None when nothing is mapped there, else a Symbol.

        The name is what :meth:`resolve` gives; without one, ``Symbol(None,
        offset, module)``: for a file, the ELF virtual address (what
        ``addr2line -e path`` takes, or the offset in the file when no segment
        loads those bytes); for anonymous memory (``"[anon]"``) and the
        kernel's named mappings (``[heap]``, ``[stack]``) the offset in the mapping.
        """
        addr = _check.integer(addr, "addr", lo=0, hi=_check.UINT64_MAX)
        m = self._mapping(addr)
        if m is None:
            return None
        found, where = self._resolve_in(m, addr)
        return found if found is not None and m.executable else where

    def _resolve_in(self, m: _Mapping, addr: int) -> tuple[Symbol | None, Symbol]:
        """(the function at ``addr`` or None, where ``addr`` is) within mapping ``m``."""
        if m.path == "[vdso]":
            elf = self._vdso_symbols(m)
            module = m.path
        elif m.path.startswith("/") and not m.path.startswith(_ANON_FILES):
            elf = self._file_symbols(m)
            module = m.path.removesuffix(" (deleted)")
        else:
            named = m.path.startswith("[") and not m.path.startswith("[anon:")  # [heap], [stack]
            where = Symbol(None, addr - m.start, m.path if named else ANON_MODULE)
            jit = self._perf_map_lookup(addr) if m.executable else None
            return jit, where
        file_offset = addr - m.start + m.offset
        vaddr = elf.vaddr(file_offset)
        if vaddr is None:  # not an ELF file, or bytes no segment loads: the offset in the file
            return None, Symbol(None, file_offset, module)
        found = elf.lookup(vaddr)
        if found is None:
            return None, Symbol(None, vaddr, module)
        symbol = Symbol(found[0], found[1], module)
        return symbol, symbol

    def _file_symbols(self, m: _Mapping) -> _elfsyms.ElfSymbols:
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
                return _elfsyms.cached(f, ("file", st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size))
        return _elfsyms.NOT_ELF

    def _vdso_symbols(self, m: _Mapping) -> _elfsyms.ElfSymbols:
        if self._vdso is None:
            try:
                with open(f"/proc/{self.pid}/mem", "rb") as mem:
                    mem.seek(m.start)
                    image = mem.read(m.end - m.start)
            except OSError:
                image = b""
            # The same kernel maps the same image in every process: one parse per image.
            self._vdso = _elfsyms.cached(io.BytesIO(image), ("vdso", hash(image), len(image)))
        return self._vdso

    def _perf_map_lookup(self, addr: int) -> Symbol | None:
        """The perf map's entry for ``addr``; the file is read again only when it changed (a JIT appends)."""
        try:
            st = os.stat(self._perf_map_path, follow_symlinks=False)
        except OSError:
            return None
        # The owner and type are part of the identity: a refused file made acceptable is read again.
        identity = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_uid, st.st_mode)
        with self._lock:
            current = self._perf_map
        if current is None or current.identity != identity:
            current = _PerfMap.parse(identity, self._read_perf_map())
            with self._lock:
                self._perf_map = current
        found = current.lookup(addr)
        if found is None:
            return None
        return Symbol(found[0], found[1], self._perf_map_name)

    def _read_perf_map(self) -> str:
        """The perf map's text; "" when it is not a regular file owned by the process's user or root
        (a FIFO, or another user's file at a name anyone can create in /tmp) or cannot be read."""
        try:
            fd = os.open(self._perf_map_path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return ""
        with open(fd, "rb") as f:
            st = os.fstat(f.fileno())
            try:
                owner = os.stat(f"/proc/{self.pid}").st_uid
            except OSError:
                owner = 0
            if not stat.S_ISREG(st.st_mode) or st.st_uid not in (0, owner):
                return ""
            return f.read().decode("utf-8", "replace")

    def modules(self) -> Sequence[str]:
        """The distinct files and names mapped in the process, in address order."""
        with self._lock:
            return list(dict.fromkeys(m.path for m in self._mappings if m.path))


# --- one ELF file ------------------------------------------------------------------------------

def elf_has_symbol(path: str | os.PathLike[str], name: str) -> bool:
    """Whether the ELF file at ``path`` defines a function called ``name`` (in ``.symtab`` or
    ``.dynsym``): what ``Program.attach_uprobe(binary, name)`` needs, asked before attaching.

    Raises FileNotFoundError (or another OSError) when the file cannot be opened, ValueError naming
    the path when it is not a readable ELF file, TypeError/ValueError for a bad ``name``.
    """
    where = _check.path(path, "path")
    wanted = _check.string(name, "name").encode()
    if not wanted or b"\0" in wanted:
        raise ValueError(f"name must be a non-empty symbol name without NUL bytes, got {name!r}")
    fd = _elfsyms.open_regular(os.fspath(where))
    with open(fd, "rb") as f:
        try:
            return _elfsyms.defines_function(ELFFile(f), wanted)
        except _elfsyms.PARSE_ERRORS as e:
            raise ValueError(f"{os.fspath(where)!r} is not a readable ELF file: {e}") from None
