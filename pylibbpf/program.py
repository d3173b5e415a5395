"""Programs and links: Program (load knobs, the attach family, test_run, stats, pinning), Link, TestRun.

A :class:`Program` is either one program of a :class:`~pylibbpf.BPFObject`
(valid while its object is open) or a program that owns its fd (loaded from
raw instructions by :func:`pylibbpf.asm.load_program`, or reopened from bpffs
by :meth:`Program.open_pinned`). Every ``attach_*`` method returns a
:class:`Link` (a list of them for per-CPU perf events). A program of an
object hands each link it makes to the object, which keeps it until
``obj.close()``: dropping the returned Link does not detach (as a C
skeleton's links). ``link.destroy()`` detaches on purpose; a Link the caller
still holds when the object closes stays attached until it is destroyed, and
the object's libbpf memory, which some links use when they detach (USDT),
stays until the last of them is.

Where the kernel lacks what an attach needs (kprobes, a hardware PMU), the
error says so; :mod:`pylibbpf.features` answers the same questions ahead of time.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
import socket
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from . import _check, _close, _kernel, _libbpf, _shim, features, loaded
from ._ffi import ffi, lib
from .errors import BPFError, ClosedError
from .link import Link as Link  # also reachable as pylibbpf.program.Link
from .link import new_link

CData = Any


# Program types whose BPF_PROG_TEST_RUN writes the context back to ctx_out (net/bpf/test_run.c:
# the skb, xdp, flow dissector and sk_lookup runners); SEC("syscall") writes it into ctx_in.
_CTX_OUT_TYPES = frozenset(getattr(lib, f"BPF_PROG_TYPE_{name}") for name in (
    "SOCKET_FILTER", "SCHED_CLS", "SCHED_ACT", "CGROUP_SKB", "LWT_IN", "LWT_OUT", "LWT_XMIT",
    "LWT_SEG6LOCAL", "XDP", "FLOW_DISSECTOR", "SK_LOOKUP"))


class LinkKeeper(Protocol):
    """What keeps the links a program makes: its object (see :meth:`~pylibbpf.BPFObject.keep_link`)."""

    def keep_link(self, link: Link) -> None: ...


class HasFd(Protocol):
    """What ``attach_iter(map=)`` needs of a map: its fd and its name."""

    @property
    def fd(self) -> int: ...

    name: str


@dataclasses.dataclass(frozen=True)
class TestRun:
    """The result of ``BPF_PROG_TEST_RUN``: return value, ns per run, the data and context out.

    ``data_out``: the packet data as the program left it (``data_size_out``
    bytes at most); ``ctx_out``: the context as the program left it, for the
    types whose test run hands it back (skb and xdp programs, flow
    dissector, sk_lookup, and ``SEC("syscall")``'s argument struct); the
    context as passed for the others, ``b""`` when none was passed.
    """

    __test__ = False  # not a pytest test class

    retval: int
    duration_ns: int
    data_out: bytes
    ctx_out: bytes = b""


@dataclasses.dataclass(frozen=True)
class ProgramStats:
    """How often a program ran and for how long in total (``bpf_prog_info.run_cnt / run_time_ns``).

    The kernel counts only while statistics are enabled (:func:`enable_stats`,
    or ``sysctl kernel.bpf_stats_enabled=1``); the counts never reset.
    """

    run_count: int
    run_time_ns: int


class enable_stats:  # a class used as a function: ``with pylibbpf.enable_stats(): ...``
    """Turn on the kernel's per-program run statistics (``BPF_ENABLE_STATS``) until closed.

    The kernel counts while any holder keeps its fd open (the counting costs
    a clock read per run of every program, so it is off by default).
    ``close()`` is idempotent; a context manager; a finalizer closes a
    forgotten one. BPFError (EPERM without CAP_SYS_ADMIN, EINVAL on kernels
    before 5.8).
    """

    def __init__(self) -> None:
        fd = _libbpf.bpf_enable_stats(lib.BPF_STATS_RUN_TIME, "bpf_enable_stats(BPF_STATS_RUN_TIME)")
        self._fd: int | None = fd
        self._finalizer = _close.finalizer(self, os.close, fd)

    @property
    def closed(self) -> bool:
        return self._fd is None

    def close(self) -> None:
        """Stop holding the statistics on (others may still hold them). Idempotent."""
        self._fd = None
        self._finalizer()

    def __enter__(self) -> enable_stats:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: The perf events :meth:`Program.attach_perf_event` knows by name: name -> (kind, lib constant names).
#: Software events are counted by the kernel itself and exist everywhere; hardware events need
#: the CPU's PMU, which most virtual machines do not expose.
PERF_EVENTS: dict[str, tuple[str, str]] = {
    "cpu-clock": ("PERF_TYPE_SOFTWARE", "PERF_COUNT_SW_CPU_CLOCK"),
    "task-clock": ("PERF_TYPE_SOFTWARE", "PERF_COUNT_SW_TASK_CLOCK"),
    "page-faults": ("PERF_TYPE_SOFTWARE", "PERF_COUNT_SW_PAGE_FAULTS"),
    "minor-faults": ("PERF_TYPE_SOFTWARE", "PERF_COUNT_SW_PAGE_FAULTS_MIN"),
    "major-faults": ("PERF_TYPE_SOFTWARE", "PERF_COUNT_SW_PAGE_FAULTS_MAJ"),
    "context-switches": ("PERF_TYPE_SOFTWARE", "PERF_COUNT_SW_CONTEXT_SWITCHES"),
    "cpu-migrations": ("PERF_TYPE_SOFTWARE", "PERF_COUNT_SW_CPU_MIGRATIONS"),
    "cycles": ("PERF_TYPE_HARDWARE", "PERF_COUNT_HW_CPU_CYCLES"),
    "instructions": ("PERF_TYPE_HARDWARE", "PERF_COUNT_HW_INSTRUCTIONS"),
    "cache-references": ("PERF_TYPE_HARDWARE", "PERF_COUNT_HW_CACHE_REFERENCES"),
    "cache-misses": ("PERF_TYPE_HARDWARE", "PERF_COUNT_HW_CACHE_MISSES"),
    "branch-instructions": ("PERF_TYPE_HARDWARE", "PERF_COUNT_HW_BRANCH_INSTRUCTIONS"),
    "branch-misses": ("PERF_TYPE_HARDWARE", "PERF_COUNT_HW_BRANCH_MISSES"),
}

#: Samples a second when attach_perf_event gets neither frequency nor period (as bcc's profile).
DEFAULT_FREQUENCY = 49


def perf_event_type(event: str | tuple[int, int]) -> tuple[int, int]:
    """(perf type, config) of a name of :data:`PERF_EVENTS` or of a (type, config) pair."""
    if isinstance(event, str):
        if event not in PERF_EVENTS:
            raise ValueError(f"unknown perf event {event!r} (known: {', '.join(PERF_EVENTS)}; "
                             "or give a (type, config) pair)")
        kind, config = PERF_EVENTS[event]
        return int(getattr(lib, kind)), int(getattr(lib, config))
    if isinstance(event, tuple) and len(event) == 2:
        return (_check.integer(event[0], "event type", lo=0, hi=_check.UINT32_MAX),
                _check.integer(event[1], "event config", lo=0, hi=_check.UINT64_MAX))
    raise TypeError(f"event must be a perf event name or a (type, config) pair, got {event!r}")


def interface_index(interface: str | int, what: str) -> int:
    """The index of a network interface given by name or index (in the caller's network namespace)."""
    if isinstance(interface, str):
        _check.string(interface, "interface")
        try:
            return socket.if_nametoindex(interface)
        except OSError:
            raise BPFError(errno.ENODEV, f"no network interface named {interface!r}", what) from None
    index = _check.integer(interface, "interface", lo=1, hi=_check.INT32_MAX)
    try:
        socket.if_indextoname(index)
    except OSError:
        raise BPFError(errno.ENODEV, f"no network interface with index {index}", what) from None
    return index


#: Which attach_* call a program type needs when its SEC() says nothing attachable.
_ATTACH_HINTS = {
    "perf_event": "attach_perf_event()",
    "xdp": "attach_xdp()",
    "sched_cls": "attach_tcx()",
    "kprobe": "attach_kprobe(), attach_uprobe() or attach_usdt()",
    "tracepoint": "attach_tracepoint()",
    "raw_tracepoint": "attach_raw_tracepoint()",
    "tracing": "attach_iter()",
}


class Program:
    """One BPF program: load knobs, attach calls, ``test_run``, statistics and pinning.

    Programs of a :class:`~pylibbpf.BPFObject` are valid while the object is
    open (ClosedError after). Programs that own their fd (``asm.load_program``,
    :meth:`open_pinned`) are closed with :meth:`close` or as a context manager.
    """

    def __init__(self) -> None:
        """Not called directly: a program comes from ``obj.programs``, ``asm.load_program`` or
        :meth:`open_pinned`."""
        raise TypeError("Program objects come from obj.programs[name], asm.load_program() or "
                        "Program.open_pinned(path)")

    def _setup(self, ptr: CData, alive: Callable[[], object] | None, fd: int | None, name: str,
               prog_type: int, keeper: LinkKeeper | None) -> None:
        self._ptr = ptr
        self._alive = alive
        self._keeper = keeper
        self._own_fd = fd
        self._finalizer = _close.finalizer(self, os.close, fd) if fd is not None else None
        if ptr is not None:
            self.name = _libbpf.bpf_program__name(ptr)
            self.section = _libbpf.bpf_program__section_name(ptr)
            self._type = _libbpf.bpf_program__type(ptr)
        else:
            self.name, self.section, self._type = name, "", prog_type

    # --- owning an fd ---------------------------------------------------------------------------

    @classmethod
    def load_raw(cls, insns: bytes, prog_type: int | str, license: str, name: str | None) -> Program:
        """Load raw instructions (``bpf_prog_load``); see :func:`pylibbpf.asm.load_program`."""
        if isinstance(prog_type, str):
            type_id = getattr(lib, f"BPF_PROG_TYPE_{prog_type.upper()}", None)
            if type_id is None:
                raise ValueError(f"unknown program type {prog_type!r}")
        else:
            type_id = prog_type
        label = name or "asm_prog"
        what = f"bpf_prog_load({label})"
        log_size = 1 << 20
        log = ffi.new("char[]", log_size)
        opts = ffi.new("struct bpf_prog_load_opts *")
        opts.sz = ffi.sizeof("struct bpf_prog_load_opts")
        opts.log_buf = log
        opts.log_size = log_size
        if type_id == lib.BPF_PROG_TYPE_SYSCALL:
            opts.prog_flags = lib.BPF_F_SLEEPABLE  # the kernel only takes sleepable syscall programs
        cname, clicense = _libbpf.cstr(label[:15]), _libbpf.cstr(license)
        code = ffi.from_buffer("struct bpf_insn[]", insns)
        fd = _libbpf.bpf_prog_load(type_id, cname, clicense, code, len(insns) // 8, opts, what)
        return new_program(None, fd=fd, name=label, prog_type=int(type_id))

    @classmethod
    def open_pinned(cls, path: str | os.PathLike[str]) -> Program:
        """Reopen a program pinned in bpffs (``bpf_obj_get``): a Program owning a new fd.

        It can be attached with the fd-based calls, run, pinned again and
        asked for stats; close it when done. BPFError (ENOENT) for a missing
        path, (EINVAL) for a pin that is not a program (naming what it is).
        """
        p = _check.path(path, "path")
        what = f"bpf_obj_get({p})"
        fd = _libbpf.bpf_obj_get_kind(p, "prog", what)
        try:
            info = _libbpf.bpf_prog_get_info_by_fd(fd, what)
        except BaseException:
            os.close(fd)
            raise
        return new_program(None, fd=fd, name=_libbpf.string(info.name), prog_type=int(info.type))

    def close(self) -> None:
        """Close the fd of a Program that owns one (object programs close with their object). Idempotent."""
        if self._own_fd is not None:
            self._own_fd = None
            if self._finalizer is not None:
                self._finalizer()

    def __enter__(self) -> Program:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- what it is -----------------------------------------------------------------------------

    def _check(self) -> CData:
        if self._alive is not None:
            self._alive()
        elif self._own_fd is None:
            raise ClosedError(f"program {self.name!r}")
        return self._ptr

    @property
    def c_ptr(self) -> CData:
        """The ``struct bpf_program *`` for ``pylibbpf.lib`` (valid while the object is open);
        ``ffi.NULL`` for a program that owns its fd (use :attr:`fd`)."""
        ptr = self._check()
        return ffi.NULL if ptr is None else ptr

    @property
    def type(self) -> int:
        """The program type (``lib.BPF_PROG_TYPE_*``)."""
        return self._type

    @property
    def type_name(self) -> str:
        return _libbpf.libbpf_prog_type_str(self._type)

    @property
    def fd(self) -> int:
        """The program's fd; -1 before the object is loaded (or when autoload was off)."""
        ptr = self._check()
        if self._own_fd is not None:
            return self._own_fd
        return max(-1, _libbpf.bpf_program__fd(ptr))  # libbpf says -ENOENT before load

    @property
    def autoload(self) -> bool:
        """Whether ``BPFObject.load()`` loads this program (default True). Set it before load."""
        ptr = self._check()
        return ptr is None or _libbpf.bpf_program__autoload(ptr)

    @autoload.setter
    def autoload(self, value: bool) -> None:
        ptr = self._object_ptr("bpf_program__set_autoload")
        if not isinstance(value, bool):
            raise TypeError(f"autoload must be a bool, got {value!r}")
        what = f"bpf_program__set_autoload({self.name})"
        if self.fd >= 0:
            raise BPFError(errno.EBUSY, f"program {self.name!r} is already loaded: set autoload before load()",
                           what)
        _libbpf.bpf_program__set_autoload(ptr, value, what)

    @property
    def autoattach(self) -> bool:
        """Whether ``BPFObject.attach_all()`` attaches this program by its SEC() (default True)."""
        ptr = self._check()
        return ptr is not None and _libbpf.bpf_program__autoattach(ptr)

    @autoattach.setter
    def autoattach(self, value: bool) -> None:
        ptr = self._object_ptr("bpf_program__set_autoattach")
        if not isinstance(value, bool):
            raise TypeError(f"autoattach must be a bool, got {value!r}")
        _libbpf.bpf_program__set_autoattach(ptr, value)

    def attach_hint(self) -> str:
        """Which attach_* call this program's type takes, as a phrase for messages."""
        kind = self.type_name
        if kind.startswith("cgroup") or kind == "sock_ops":
            return "use attach_cgroup()"
        if kind in _ATTACH_HINTS:
            return f"use {_ATTACH_HINTS[kind]}"
        return f"{kind} programs have no attach call here (run them with test_run(), or see pylibbpf.lib)"

    def _object_ptr(self, what: str) -> CData:
        ptr = self._check()
        if ptr is None:
            raise BPFError(errno.EOPNOTSUPP, f"program {self.name!r} was not opened from a BPFObject: "
                           "it has no libbpf program to configure or attach by name", what)
        return ptr

    def _loaded_fd(self, what: str) -> int:
        fd = self.fd
        if fd < 0:
            why = "autoload is off" if not self.autoload else "call BPFObject.load() first"
            raise BPFError(errno.EINVAL, f"program {self.name!r} is not loaded: {why}", what)
        return fd

    def _attach_ptr(self, what: str) -> CData:
        """The bpf_program of a loaded object program (what libbpf's attach calls take)."""
        ptr = self._object_ptr(what)
        self._loaded_fd(what)
        return ptr

    # --- attaching ------------------------------------------------------------------------------

    def _new_link(self, ptr: CData, *, fd: int | None = None, iterator: bool = False) -> Link:
        """A Link for what an attach call made, handed to the object that keeps it until it closes."""
        link = new_link(ptr, self.name, fd=fd, iterator=iterator)
        if self._keeper is not None:
            self._keeper.keep_link(link)
        return link

    def attach(self) -> Link:
        """Attach by the SEC() name (``bpf_program__attach``); the Link detaches when destroyed.

        BPFError (EOPNOTSUPP) when the SEC() does not say where to attach
        (``SEC("perf_event")``, a bare ``SEC("uprobe")``, ...): use the
        attach_* call for the program's type.
        """
        what = f"bpf_program__attach({self.name})"
        ptr = self._attach_ptr(what)
        try:
            return self._new_link(_libbpf.bpf_program__attach(ptr, what))
        except BPFError as e:
            if e.errno == errno.EOPNOTSUPP:
                raise BPFError(e.errno, f"SEC({self.section!r}) does not say where to attach: "
                               f"{self.attach_hint()}", what) from None
            raise

    def attach_tracepoint(self, category: str, name: str) -> Link:
        """Attach to the tracepoint ``category:name`` (as under tracefs ``events/``).

        BPFError (ENOENT) naming the tracepoint when the kernel has none such.
        """
        _check.string(category, "category")
        _check.string(name, "name")
        what = f"bpf_program__attach_tracepoint({self.name}, {category}/{name})"
        ptr = self._attach_ptr(what)
        try:
            return self._new_link(_libbpf.bpf_program__attach_tracepoint(ptr, category, name, what))
        except BPFError as e:
            if e.errno == errno.ENOENT:
                raise BPFError(e.errno, f"no tracepoint {category}/{name} (see {features.tracefs_dir()}"
                               "/events)", what) from None
            raise

    def attach_raw_tracepoint(self, name: str) -> Link:
        """Attach to the raw tracepoint ``name`` (``sys_enter``, ``sched_switch``, ...).

        BPFError (ENOENT) naming it when the kernel has none such.
        """
        _check.string(name, "name")
        what = f"bpf_program__attach_raw_tracepoint({self.name}, {name})"
        ptr = self._attach_ptr(what)
        try:
            return self._new_link(_libbpf.bpf_program__attach_raw_tracepoint(ptr, name, what))
        except BPFError as e:
            if e.errno == errno.ENOENT:
                raise BPFError(e.errno, f"no raw tracepoint {name!r}", what) from None
            raise

    def attach_kprobe(self, func: str, *, retprobe: bool = False, offset: int = 0) -> Link:
        """Attach a kprobe (or kretprobe) to the kernel function ``func`` at ``offset``.

        BPFError (EOPNOTSUPP) saying so on kernels built without kprobes;
        BPFError naming the function when the kernel does not know it.
        """
        _check.string(func, "func")
        offset = _check.integer(offset, "offset", lo=0, hi=_check.UINT32_MAX)
        what = f"bpf_program__attach_kprobe_opts({self.name}, {func})"
        ptr = self._attach_ptr(what)
        missing = features.kprobes_missing()
        if missing:
            raise BPFError(errno.EOPNOTSUPP, missing, what)
        return self._new_link(_libbpf.bpf_program__attach_kprobe_opts(ptr, func, bool(retprobe), offset, what))

    def attach_uprobe(self, binary: str | os.PathLike[str], symbol: str | None = None, *, offset: int = 0,
                      pid: int = -1, retprobe: bool = False) -> Link:
        """Attach a uprobe (or uretprobe) to ``symbol`` (+ ``offset``) in ``binary``.

        ``binary`` is a path, a program name found in ``PATH``, or a library
        name (``"libc"``, ``"libc.so.6"``) found where the dynamic loader looks.
        ``symbol`` is resolved in the ELF by libbpf (``func_name``); without
        it, ``offset`` is a file offset. ``pid`` limits the probe to one
        process (-1: every process that maps the binary). BPFError (ENOENT)
        naming the binary or the symbol that was not found.
        """
        path = resolve_binary(_check.path(binary, "binary"), "attach_uprobe")
        if symbol is not None:
            _check.string(symbol, "symbol")
        offset = _check.integer(offset, "offset", lo=0, hi=_check.UINT64_MAX)
        if symbol is None and offset == 0:
            raise ValueError("attach_uprobe needs symbol= or a file offset=")
        pid = _check.integer(pid, "pid", lo=-1, hi=_check.INT32_MAX)
        what = f"bpf_program__attach_uprobe_opts({self.name}, {path}:{symbol or hex(offset)})"
        ptr = self._attach_ptr(what)
        try:
            link = _libbpf.bpf_program__attach_uprobe_opts(ptr, pid, path, offset, symbol, bool(retprobe), what)
        except BPFError as e:
            if e.errno == errno.ENOENT and not _binary_found(path):
                raise BPFError(e.errno, f"binary {path!r} not found (searched PATH and the library "
                               "directories)", what) from None
            if e.errno == errno.ENOENT and symbol is not None:
                raise BPFError(e.errno, f"no symbol {symbol!r} in {path}", what) from None
            raise
        return self._new_link(link)

    def attach_usdt(self, binary: str | os.PathLike[str], provider: str, name: str, *, pid: int = -1,
                    cookie: int = 0) -> Link:
        """Attach to the USDT probe ``provider:name`` (``DTRACE_PROBE``) of ``binary``.

        The program must be written with libbpf's ``usdt.bpf.h`` (``SEC("usdt")``);
        ``bpf_usdt_cookie()`` returns ``cookie``. BPFError (ENOENT) naming the
        binary or the probe that was not found.
        """
        path = resolve_binary(_check.path(binary, "binary"), "attach_usdt")
        _check.string(provider, "provider")
        _check.string(name, "name")
        pid = _check.integer(pid, "pid", lo=-1, hi=_check.INT32_MAX)
        cookie = _check.integer(cookie, "cookie", lo=0, hi=_check.UINT64_MAX)
        what = f"bpf_program__attach_usdt({self.name}, {path}:{provider}:{name})"
        ptr = self._attach_ptr(what)
        try:
            link = _libbpf.bpf_program__attach_usdt(ptr, pid, path, provider, name, cookie, what)
        except BPFError as e:
            if e.errno == errno.ENOENT:
                raise BPFError(e.errno, f"no USDT probe {provider}:{name} in {path}{_said(e)}", what) from None
            raise
        return self._new_link(link)

    def attach_perf_event(self, event: str | tuple[int, int] = "cpu-clock", *, frequency: int | None = None,
                          period: int | None = None, cpus: Iterable[int] | None = None,
                          pid: int = -1) -> list[Link]:
        """Open a sampling perf event on each CPU and run this ``SEC("perf_event")`` program on its samples.

        ``event``: a name of :data:`PERF_EVENTS` (software: cpu-clock,
        task-clock, page-faults, minor-faults, major-faults, context-switches,
        cpu-migrations; hardware: cycles, instructions, cache-references,
        cache-misses, branch-instructions, branch-misses) or a ``(type,
        config)`` pair as perf_event_open(2) takes. ``frequency`` (samples a
        second) or ``period`` (one sample every N events), not both; neither:
        :data:`DEFAULT_FREQUENCY` a second. ``cpus``: the CPUs to sample
        (default: every online CPU; with a ``pid`` and no ``cpus``, one event
        that follows the process). Returns one Link per event; each owns its
        perf event fd and closes it when destroyed. On any failure the events
        already opened are closed. BPFError (ENOENT) saying so where the PMU
        lacks the event (hardware events in most virtual machines).
        """
        etype, config = perf_event_type(event)
        label = event if isinstance(event, str) else f"type={etype} config={config}"
        if frequency is not None and period is not None:
            raise ValueError("give frequency= or period=, not both")
        if period is not None:
            amount, freq = _check.integer(period, "period", lo=1, hi=_check.UINT64_MAX), False
        else:
            hz = DEFAULT_FREQUENCY if frequency is None else frequency
            amount, freq = _check.integer(hz, "frequency", lo=1, hi=_check.UINT32_MAX), True
        pid = _check.integer(pid, "pid", lo=-1, hi=_check.INT32_MAX)
        online = features.online_cpus()
        if cpus is None:
            targets = [-1] if pid >= 0 else online
        else:
            targets = [_check.integer(c, "cpus[]", lo=0) for c in cpus]
            offline = [c for c in targets if c not in online]
            if offline:
                raise ValueError(f"cpus {offline} are not online (online: {online})")
            if not targets:
                raise ValueError("cpus is empty")
        what = f"bpf_program__attach_perf_event({self.name}, {label})"
        ptr = self._attach_ptr(what)
        links: list[Link] = []
        try:
            for cpu in targets:
                pfd = self._open_perf_event(etype, config, amount, freq, pid, cpu, label)
                try:
                    links.append(self._new_link(_libbpf.bpf_program__attach_perf_event(ptr, pfd, what)))
                except BaseException:
                    os.close(pfd)  # libbpf owns the fd only once the link exists
                    raise
        except BaseException:
            for link in links:
                link.destroy()
            raise
        return links

    @staticmethod
    def _open_perf_event(etype: int, config: int, amount: int, freq: bool, pid: int, cpu: int,
                         label: str) -> int:
        what = f"perf_event_open({label}, cpu={cpu}, pid={pid})"
        try:
            return _shim.plb_perf_event_open(etype, config, amount, freq, pid, cpu, what)
        except BPFError as e:
            if e.errno in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV):
                if etype == lib.PERF_TYPE_HARDWARE and not features.hardware_pmu():
                    why = (f"hardware event {label!r} is not available: this machine exposes no hardware PMU "
                           "(no /sys/bus/event_source/devices/cpu, as in most virtual machines); "
                           "use a software event such as 'cpu-clock'")
                else:
                    why = f"perf event {label!r} is not supported by this machine's PMU"
                raise BPFError(e.errno, why, what) from None
            if e.errno == errno.ESRCH:
                raise BPFError(e.errno, f"no process with pid {pid}", what) from None
            raise

    def attach_xdp(self, interface: str | int, *, mode: str = "default") -> Link:
        """Attach this XDP program to a network interface (name or index) through a BPF link.

        ``mode``: ``"default"`` (the driver's native XDP where it has one,
        else generic), ``"generic"`` (in the kernel's stack, any device) or
        ``"native"`` (in the driver; EOPNOTSUPP where it has none). BPFError
        (ENODEV) naming an interface that does not exist; (EBUSY) when the
        interface already has an XDP program.
        """
        _check.choice(mode, "mode", ("default", "generic", "native"))
        ifindex = interface_index(interface, f"attach_xdp({self.name})")
        what = f"attach_xdp({self.name}, {interface}, {mode})"
        if mode == "default":
            return self._new_link(_libbpf.bpf_program__attach_xdp(self._attach_ptr(what), ifindex, what))
        fd = _libbpf.bpf_link_create(self._loaded_fd(what), ifindex, lib.BPF_XDP, _libbpf.bpf_xdp_flags(mode),
                                     what)
        return self._new_link(None, fd=fd)

    def attach_tcx(self, interface: str | int, direction: str = "ingress") -> Link:
        """Attach this ``SEC("tc")``/``SEC("tcx/...")`` program to an interface's ingress or egress (tcx).

        BPFError (ENODEV) naming an interface that does not exist.
        """
        _check.choice(direction, "direction", ("ingress", "egress"))
        ifindex = interface_index(interface, f"attach_tcx({self.name})")
        what = f"attach_tcx({self.name}, {interface}, {direction})"
        attach_type = lib.BPF_TCX_INGRESS if direction == "ingress" else lib.BPF_TCX_EGRESS
        ptr = self._check()
        if ptr is not None and _libbpf.bpf_program__expected_attach_type(ptr) == attach_type:
            return self._new_link(_libbpf.bpf_program__attach_tcx(self._attach_ptr(what), ifindex, what))
        # The SEC() named the other direction (or none): the kernel takes either for a tc program.
        fd = _libbpf.bpf_link_create(self._loaded_fd(what), ifindex, attach_type, 0, what)
        return self._new_link(None, fd=fd)

    def attach_cgroup(self, path: str | os.PathLike[str]) -> Link:
        """Attach this cgroup program to the cgroup v2 directory ``path`` (its SEC() gives the hook).

        BPFError (ENOENT / ENOTDIR) naming a path that is missing or not a
        cgroup v2 directory.
        """
        p = _check.path(path, "path")
        what = f"bpf_program__attach_cgroup({self.name}, {p})"
        ptr = self._attach_ptr(what)
        if not os.path.exists(p):
            raise BPFError(errno.ENOENT, f"no cgroup directory {p}", what)
        if not os.path.isdir(p) or not os.path.exists(os.path.join(p, "cgroup.procs")):
            raise BPFError(errno.ENOTDIR, f"{p} is not a cgroup v2 directory (cgroup2 is mounted at "
                           f"{features.cgroup2_mount() or 'no place'})", what)
        fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            return self._new_link(_libbpf.bpf_program__attach_cgroup(ptr, fd, what))
        finally:
            os.close(fd)  # the link holds the cgroup

    def attach_iter(self, map: HasFd | None = None) -> Link:
        """Attach this ``SEC("iter/...")`` program as a BPF iterator; read its output with ``link.read()``.

        ``map``: the map a map iterator (``iter/bpf_map_elem``) walks.
        """
        what = f"bpf_program__attach_iter({self.name})"
        ptr = self._attach_ptr(what)
        map_fd = None
        if map is not None:
            map_fd = map.fd
            if map_fd < 0:
                raise BPFError(errno.EINVAL, f"map {map.name!r} is not created: call BPFObject.load() first", what)
        return self._new_link(_libbpf.bpf_program__attach_iter(ptr, map_fd, what), iterator=True)

    # --- running, statistics, pinning -----------------------------------------------------------

    def test_run(self, data: bytes = b"", ctx: bytes = b"", repeat: int = 1, cpu: int | None = None,
                 data_size_out: int | None = None) -> TestRun:
        """Run the program once (or ``repeat`` times) in the kernel with BPF_PROG_TEST_RUN.

        ``cpu`` pins the run to that CPU (``BPF_F_TEST_RUN_ON_CPU``; supported
        for raw_tp programs). ``data_size_out`` sizes the output buffer
        (default: the input's size). Raises BPFError (e.g. ENOTSUPP for program
        types without test-run support).
        """
        what = f"bpf_prog_test_run_opts({self.name})"
        data, ctx = bytes(_check.buffer(data, "data")), bytes(_check.buffer(ctx, "ctx"))
        repeat = _check.integer(repeat, "repeat", lo=1, hi=_check.INT32_MAX)  # struct bpf_test_run_opts: int
        cpu = _check.optional_integer(cpu, "cpu", lo=0, hi=_check.UINT32_MAX)
        data_size_out = _check.optional_integer(data_size_out, "data_size_out", lo=0, hi=_check.UINT32_MAX)
        fd = self._loaded_fd(what)
        opts = ffi.new("struct bpf_test_run_opts *")
        opts.sz = ffi.sizeof("struct bpf_test_run_opts")
        keep = []
        if data:
            din = ffi.from_buffer(bytes(data))
            keep.append(din)
            opts.data_in = din
            opts.data_size_in = len(data)
        out_size = len(data) if data_size_out is None else data_size_out
        if out_size:
            dout = ffi.new("char[]", out_size)
            opts.data_out = dout
            opts.data_size_out = out_size
        ctx_back = self.type in _CTX_OUT_TYPES
        if ctx:
            # A writable copy: SEC("syscall") programs write their context back into ctx_in.
            cin = ffi.new("char[]", ctx)
            keep.append(cin)
            opts.ctx_in = cin
            opts.ctx_size_in = len(ctx)
            if ctx_back:  # the other types (raw_tp, tracing...) refuse a ctx_out buffer: EINVAL
                cout = ffi.new("char[]", len(ctx))
                keep.append(cout)
                opts.ctx_out = cout
                opts.ctx_size_out = len(ctx)
        # The kernel runs once for repeat 0; some types (syscall) refuse any other value.
        opts.repeat = repeat if repeat > 1 else 0
        if cpu is not None:
            opts.flags = lib.BPF_F_TEST_RUN_ON_CPU
            opts.cpu = cpu
        _libbpf.bpf_prog_test_run_opts(fd, opts, what)
        out = bytes(ffi.buffer(opts.data_out, opts.data_size_out)) if out_size else b""
        if not ctx:
            ctx_out = b""
        elif self.type == lib.BPF_PROG_TYPE_SYSCALL:
            ctx_out = bytes(ffi.buffer(opts.ctx_in, len(ctx)))
        elif ctx_back:
            ctx_out = bytes(ffi.buffer(opts.ctx_out, opts.ctx_size_out))
        else:
            ctx_out = ctx  # a context the kernel does not hand back: as it was passed
        return TestRun(int(opts.retval), int(opts.duration), out, ctx_out)

    def stats(self) -> ProgramStats:
        """The kernel's run count and total run time of this program (``bpf_prog_get_info_by_fd``).

        Both stay 0 unless statistics are on (:func:`enable_stats`).
        """
        what = f"bpf_prog_get_info_by_fd({self.name})"
        info = _libbpf.bpf_prog_get_info_by_fd(self._loaded_fd(what), what)
        return ProgramStats(int(info.run_cnt), int(info.run_time_ns))

    def pin(self, path: str | os.PathLike[str]) -> None:
        """Pin the loaded program at ``path`` in bpffs (it then outlives this process).

        BPFError (EEXIST) when something is pinned there, (EINVAL) for a path
        outside bpffs.
        """
        p = _check.path(path, "path")
        ptr = self._check()
        if ptr is not None:
            what = f"bpf_program__pin({self.name}, {p})"
            self._loaded_fd(what)
            _libbpf.bpf_program__pin(ptr, p, what)
        else:
            what = f"bpf_obj_pin({self.name}, {p})"
            _libbpf.bpf_obj_pin(self._loaded_fd(what), p, what)

    def unpin(self, path: str | os.PathLike[str]) -> None:
        """Remove this program's pin at ``path`` (the program stays loaded while anything else holds it).

        ValueError for a path outside bpffs; BPFError (ENOENT) when nothing is
        pinned there, (EINVAL) when what is pinned there is not this program.
        """
        p = _check.bpffs_path(path, "path")
        what = f"unpin({self.name}, {p})"
        _libbpf.check_pinned_is(p, "prog", self._loaded_fd(what), what)
        ptr = self._check()
        if ptr is not None:
            _libbpf.bpf_program__unpin(ptr, p, f"bpf_program__unpin({self.name}, {p})")
        else:
            _libbpf.unlink_pin(p, what)

    def __repr__(self) -> str:
        return f"<Program {self.name!r} {self.type_name} sec={self.section!r}>"

    # --- loaded programs by id or pin -----------------------------------------------------------

    @classmethod
    def from_id(cls, prog_id: int) -> Program:
        """Open the program with kernel id ``prog_id`` (``bpf_prog_get_fd_by_id``): a Program owning a new fd.

        As a program of :meth:`open_pinned`: ``test_run``, ``stats``, ``pin``
        and the attach calls that take an fd (``attach_xdp(mode=...)``,
        ``attach_tcx``) work; close it when done. BPFError (ENOENT) when no
        program has that id, (EPERM) without CAP_SYS_ADMIN.
        """
        prog_id = _check.integer(prog_id, "prog_id", lo=1, hi=_check.UINT32_MAX)
        what = f"bpf_prog_get_fd_by_id({prog_id})"
        fd = _kernel.get_fd_by_id("prog", prog_id, what)
        try:
            info = loaded.program_info(fd, what)
        except BaseException:
            os.close(fd)
            raise
        return new_program(None, fd=fd, name=info.name, prog_type=info.type)

    @classmethod
    def from_pin(cls, path: str | os.PathLike[str]) -> Program:
        """The program pinned at ``path`` in bpffs: the same as :meth:`open_pinned`."""
        return cls.open_pinned(path)

    def info(self) -> loaded.ProgramInfo:
        """What the kernel says of the loaded program (``bpf_prog_get_info_by_fd``): id, name, type, tag."""
        what = f"bpf_prog_get_info_by_fd({self.name})"
        return loaded.program_info(self._loaded_fd(what), what)


def new_program(ptr: CData, *, alive: Callable[[], object] | None = None, fd: int | None = None,
                name: str = "", prog_type: int = -1, keeper: LinkKeeper | None = None) -> Program:
    """A Program: ``ptr``, the ``struct bpf_program *`` (None for an fd-owning program); ``alive``,
    which raises ClosedError once the owner is closed; ``fd``, an fd the Program owns;
    ``keeper``, the object that keeps every link the program makes."""
    prog = Program.__new__(Program)
    prog._setup(ptr, alive, fd, name, prog_type, keeper)
    return prog


def _said(e: BPFError) -> str:
    """libbpf's own explanation carried by an attach error (' (libbpf: ...)'), or ''."""
    text = str(e.strerror)
    at = text.find(" (libbpf: ")
    return text[at:] if at >= 0 else ""


def _binary_found(binary: str) -> bool:
    """Whether libbpf can find ``binary``: a path that exists, a program in PATH, or a library."""
    if "/" in binary:
        return os.path.exists(binary)
    if shutil.which(binary) is not None:
        return True
    dirs = [*os.environ.get("LD_LIBRARY_PATH", "").split(":"), "/usr/lib64", "/usr/lib", "/lib64", "/lib",
            "/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu"]
    return any(d and os.path.exists(os.path.join(d, binary)) for d in dirs)


def resolve_binary(binary: str, who: str) -> str:
    """A path for a uprobe/USDT target: paths are checked, bare names are looked up.

    A library name without ``.so`` (``"libc"``, ``"libssl"``) becomes the
    file the dynamic loader would map (``ctypes.util.find_library``); other
    bare names are left to libbpf, which searches ``PATH`` and the library
    directories. BPFError (ENOENT) naming what was not found.
    """
    if not binary:
        raise ValueError(f"{who}: binary must not be empty")
    if "/" in binary:
        if not os.path.exists(binary):
            raise BPFError(errno.ENOENT, f"binary {binary} not found", who)
        return binary
    if binary.startswith("lib") and ".so" not in binary:
        import ctypes.util

        found = ctypes.util.find_library(binary[3:])
        if found is None:
            raise BPFError(errno.ENOENT, f"library {binary!r} not found", who)
        return found
    return binary


def destroy_all(links: Sequence[Link]) -> None:
    """Destroy every link (on an error path: after one failed, the others are still destroyed)."""
    for link in links:
        link.destroy()
