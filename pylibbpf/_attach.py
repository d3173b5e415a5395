"""The attach family of :class:`~pylibbpf.Program`: every ``attach_*`` call and the Link it returns.

:class:`Attaching` is the part of Program that attaches; each method is one
checked call (``_libbpf`` / ``_libbpf_attach``) whose result becomes a
:class:`~pylibbpf.Link`, handed to the program's object, which keeps it
until ``obj.close()``. The calls that take a BPF cookie take it as
``cookie=`` (``cookies=`` for the multi-probes): the program reads it with
``bpf_get_attach_cookie(ctx)``. Attachments the kernel keeps without a link
(legacy tc filters, ``bpf_prog_attach`` to a sockmap) are Links whose
``destroy()`` undoes them.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from . import _check, _libbpf, _libbpf_attach, _shim, features
from ._ffi import lib
from .errors import BPFError
from .link import Link, new_link

CData = Any

class LinkKeeper(Protocol):
    """What keeps the links a program makes: its object (see :meth:`~pylibbpf.BPFObject.keep_link`)."""

    def keep_link(self, link: Link) -> None: ...


class HasFd(Protocol):
    """What ``attach_iter(map=)`` needs of a map: its fd and its name."""

    @property
    def fd(self) -> int: ...

    name: str


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


class Attaching:
    """The attach calls of :class:`~pylibbpf.Program` (a Program is one; see there)."""

    name: str
    section: str
    _keeper: LinkKeeper | None

    if TYPE_CHECKING:  # defined by Program
        def _check(self) -> CData: ...
        def _object_ptr(self, what: str) -> CData: ...
        def _loaded_fd(self, what: str) -> int: ...
        def attach_hint(self) -> str: ...
        @property
        def fd(self) -> int: ...
        @property
        def type(self) -> int: ...
        @property
        def type_name(self) -> str: ...

    def _attach_ptr(self, what: str) -> CData:
        """The bpf_program of a loaded object program (what libbpf's attach calls take)."""
        ptr = self._object_ptr(what)
        self._loaded_fd(what)
        return ptr

    # --- attaching ------------------------------------------------------------------------------

    def _new_link(self, ptr: CData, *, fd: int | None = None, iterator: bool = False,
                  detach: Callable[[], None] | None = None) -> Link:
        """A Link for what an attach call made, handed to the object that keeps it until it closes."""
        link = new_link(ptr, self.name, fd=fd, iterator=iterator, detach=detach)
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

    def attach_tracepoint(self, category: str, name: str, *, cookie: int = 0) -> Link:
        """Attach to the tracepoint ``category:name`` (as under tracefs ``events/``).

        ``cookie``: what ``bpf_get_attach_cookie(ctx)`` returns in the program.
        BPFError (ENOENT) naming the tracepoint when the kernel has none such.
        """
        _check.string(category, "category")
        _check.string(name, "name")
        cookie = _cookie(cookie)
        what = f"bpf_program__attach_tracepoint({self.name}, {category}/{name})"
        ptr = self._attach_ptr(what)
        try:
            return self._new_link(_libbpf_attach.bpf_program__attach_tracepoint_opts(
                ptr, category, name, cookie, what))
        except BPFError as e:
            if e.errno == errno.ENOENT:
                raise BPFError(e.errno, f"no tracepoint {category}/{name} (see {features.tracefs_dir()}"
                               "/events)", what) from None
            raise

    def attach_raw_tracepoint(self, name: str, *, cookie: int = 0) -> Link:
        """Attach to the raw tracepoint ``name`` (``sys_enter``, ``sched_switch``, ...).

        ``cookie``: what ``bpf_get_attach_cookie(ctx)`` returns (kernels 6.10
        and later; a nonzero cookie is refused before). BPFError (ENOENT)
        naming it when the kernel has none such.
        """
        _check.string(name, "name")
        cookie = _cookie(cookie)
        what = f"bpf_program__attach_raw_tracepoint({self.name}, {name})"
        ptr = self._attach_ptr(what)
        try:
            return self._new_link(_libbpf_attach.bpf_program__attach_raw_tracepoint_opts(ptr, name, cookie,
                                                                                          what))
        except BPFError as e:
            if e.errno == errno.ENOENT:
                raise BPFError(e.errno, f"no raw tracepoint {name!r}", what) from None
            raise

    def attach_kprobe(self, func: str, *, retprobe: bool = False, offset: int = 0, cookie: int = 0) -> Link:
        """Attach a kprobe (or kretprobe) to the kernel function ``func`` at ``offset``.

        ``cookie``: what ``bpf_get_attach_cookie(ctx)`` returns. BPFError
        (EOPNOTSUPP) saying so on kernels built without kprobes; BPFError
        naming the function when the kernel does not know it.
        """
        _check.string(func, "func")
        offset = _check.integer(offset, "offset", lo=0, hi=_check.UINT32_MAX)
        cookie = _cookie(cookie)
        what = f"bpf_program__attach_kprobe_opts({self.name}, {func})"
        ptr = self._attach_ptr(what)
        missing = features.kprobes_missing()
        if missing:
            raise BPFError(errno.EOPNOTSUPP, missing, what)
        return self._new_link(_libbpf_attach.bpf_program__attach_kprobe_opts(ptr, func, bool(retprobe), offset,
                                                                             cookie, what))

    def attach_uprobe(self, binary: str | os.PathLike[str], symbol: str | None = None, *, offset: int = 0,
                      pid: int = -1, retprobe: bool = False, cookie: int = 0) -> Link:
        """Attach a uprobe (or uretprobe) to ``symbol`` (+ ``offset``) in ``binary``.

        ``binary`` is a path, a program name found in ``PATH``, or a library
        name (``"libc"``, ``"libc.so.6"``) found where the dynamic loader looks.
        ``symbol`` is resolved in the ELF by libbpf (``func_name``); without
        it, ``offset`` is a file offset. ``pid`` limits the probe to one
        process (-1: every process that maps the binary). ``cookie``: what
        ``bpf_get_attach_cookie(ctx)`` returns. BPFError (ENOENT) naming the
        binary or the symbol that was not found.
        """
        path = resolve_binary(_check.path(binary, "binary"), "attach_uprobe")
        cookie = _cookie(cookie)
        if symbol is not None:
            _check.string(symbol, "symbol")
        offset = _check.integer(offset, "offset", lo=0, hi=_check.UINT64_MAX)
        if symbol is None and offset == 0:
            raise ValueError("attach_uprobe needs symbol= or a file offset=")
        pid = _check.integer(pid, "pid", lo=-1, hi=_check.INT32_MAX)
        what = f"bpf_program__attach_uprobe_opts({self.name}, {path}:{symbol or hex(offset)})"
        ptr = self._attach_ptr(what)
        try:
            link = _libbpf_attach.bpf_program__attach_uprobe_opts(ptr, pid, path, offset, symbol, bool(retprobe),
                                                                  cookie, what)
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
                          pid: int = -1, cookie: int = 0) -> list[Link]:
        """Open a sampling perf event on each CPU and run this ``SEC("perf_event")`` program on its samples.

        ``event``: a name of :data:`PERF_EVENTS` (software: cpu-clock,
        task-clock, page-faults, minor-faults, major-faults, context-switches,
        cpu-migrations; hardware: cycles, instructions, cache-references,
        cache-misses, branch-instructions, branch-misses) or a ``(type,
        config)`` pair as perf_event_open(2) takes. ``frequency`` (samples a
        second) or ``period`` (one sample every N events), not both; neither:
        :data:`DEFAULT_FREQUENCY` a second. ``cpus``: the CPUs to sample
        (default: every online CPU; with a ``pid`` and no ``cpus``, one event
        that follows the process). ``cookie``: what
        ``bpf_get_attach_cookie(ctx)`` returns. Returns one Link per event; each owns its
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
        cookie = _cookie(cookie)
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
                    links.append(self._new_link(_libbpf_attach.bpf_program__attach_perf_event_opts(
                        ptr, pfd, cookie, what)))
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


    def attach_trace(self, *, cookie: int = 0) -> Link:
        """Attach this BTF-typed tracing program (``SEC("tp_btf/...")``, fentry, fexit, fmod_ret)
        to the target its SEC() names, with a cookie (``bpf_program__attach_trace_opts``).

        ``cookie``: what ``bpf_get_attach_cookie(ctx)`` returns (tp_btf:
        kernels 6.10 and later). ``attach()`` does the same without a cookie.
        BPFError (ENOTSUPP/EOPNOTSUPP) where the kernel cannot attach the
        program's kind (fentry and fexit need a kernel with BPF trampolines).
        """
        cookie = _cookie(cookie)
        what = f"bpf_program__attach_trace_opts({self.name})"
        return self._new_link(_libbpf_attach.bpf_program__attach_trace_opts(self._attach_ptr(what), cookie, what))

    def attach_kprobe_multi(self, pattern: str | None = None, *, symbols: Sequence[str] | None = None,
                            cookies: Sequence[int] | None = None, retprobe: bool = False) -> Link:
        """Attach this ``SEC("kprobe.multi")`` program to many kernel functions through one link.

        Give ``pattern`` (a glob over the kernel's function names: ``*`` and
        ``?``) or
        ``symbols`` (names); ``cookies``: one per symbol, what
        ``bpf_get_attach_cookie(ctx)`` returns when that function runs.
        ValueError naming the parameter for a bad combination; BPFError
        (EOPNOTSUPP) saying so on kernels built without kprobes.
        """
        _, symbols, _, cookies = _multi_targets(pattern, symbols, None, cookies, "attach_kprobe_multi")
        what = f"bpf_program__attach_kprobe_multi_opts({self.name}, {pattern or f'{len(symbols or ())} symbols'})"
        ptr = self._attach_ptr(what)
        missing = features.kprobes_missing()
        if missing:
            raise BPFError(errno.EOPNOTSUPP, missing, what)
        return self._new_link(_libbpf_attach.bpf_program__attach_kprobe_multi_opts(
            ptr, pattern, symbols, cookies, bool(retprobe), what))

    def attach_uprobe_multi(self, binary: str | os.PathLike[str], pattern: str | None = None, *,
                            symbols: Sequence[str] | None = None, offsets: Sequence[int] | None = None,
                            pid: int = -1, cookies: Sequence[int] | None = None, retprobe: bool = False) -> Link:
        """Attach this ``SEC("uprobe.multi")`` program to many functions of ``binary`` through one link.

        Give one of ``pattern`` (a glob over the ELF's function symbols:
        ``*`` and ``?``),
        ``symbols`` (names) or ``offsets`` (file offsets). ``cookies``: one per
        symbol or offset, what ``bpf_get_attach_cookie(ctx)`` returns when that
        one fires. ``binary`` and ``pid`` as :meth:`attach_uprobe`. libbpf
        looks ``symbols`` up by exact name, which misses a stripped library's
        versioned symbols (libc's ``getpid@@GLIBC_2.2.5``): a pattern without
        wildcards finds those. ValueError
        naming the parameter for a bad combination; BPFError (ENOENT) naming a
        binary or symbol that was not found (a pattern that matches nothing).
        """
        path = resolve_binary(_check.path(binary, "binary"), "attach_uprobe_multi")
        # libbpf looks a bare name up only for a pattern: the symbols' and offsets' forms need a path.
        path = path if "/" in path else _full_path(path) or path
        _, symbols, offsets, cookies = _multi_targets(pattern, symbols, offsets, cookies, "attach_uprobe_multi")
        pid = _check.integer(pid, "pid", lo=-1, hi=_check.INT32_MAX)
        count = len(symbols or offsets or ())
        what = f"bpf_program__attach_uprobe_multi({self.name}, {path}:{pattern or f'{count} targets'})"
        ptr = self._attach_ptr(what)
        try:
            link = _libbpf_attach.bpf_program__attach_uprobe_multi(ptr, pid, path, pattern, symbols, offsets,
                                                                   cookies, bool(retprobe), what)
        except BPFError as e:
            if e.errno == errno.ENOENT and not _binary_found(path):
                raise BPFError(e.errno, f"binary {path!r} not found", what) from None
            if e.errno == errno.ENOENT:
                hint = "" if pattern else " (libbpf finds a library's versioned symbols by pattern only)"
                raise BPFError(e.errno, f"no function {pattern or symbols!r} in {path}{hint}", what) from None
            raise
        return self._new_link(link)

    def attach_tc(self, interface: str | int, direction: str = "ingress", *, priority: int = 0,
                  handle: int = 0) -> Link:
        """Attach this ``SEC("tc")`` program as a legacy tc filter (clsact qdisc, direct action).

        For kernels before 6.6, which have no tcx (:meth:`attach_tcx`), or to
        run beside filters the ``tc`` command manages. ``priority`` (1 to
        65535) and ``handle``: 0 lets the kernel choose. The clsact qdisc is
        added when the interface has none; destroying the Link removes the
        filter, and the qdisc only if this process added it (once its last
        filter from here is gone; filters others added to that qdisc go with
        it). The kernel holds the filter, not an fd: it stays after the
        process exits unless the Link is destroyed (``obj.close()`` does).
        The Link has no fd. The network namespace is the calling thread's;
        ``destroy()`` removes the filter there from any thread. BPFError
        (ENODEV) naming an interface that does not exist, (EEXIST) when a
        filter has that handle and priority.
        """
        _check.choice(direction, "direction", ("ingress", "egress"))
        priority = _check.integer(priority, "priority", lo=0, hi=0xFFFF)
        handle = _check.integer(handle, "handle", lo=0, hi=_check.UINT32_MAX)
        ifindex = interface_index(interface, f"attach_tc({self.name})")
        what = f"bpf_tc_attach({self.name}, {interface}, {direction})"
        prog_fd = self._loaded_fd(what)
        point = lib.BPF_TC_INGRESS if direction == "ingress" else lib.BPF_TC_EGRESS
        netns = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            key = (os.fstat(netns).st_ino, ifindex)
            with _tc_lock:
                if _libbpf_attach.bpf_tc_hook_create(ifindex, f"bpf_tc_hook_create({interface})"):
                    _tc_ours[key] = 0
                ours = key in _tc_ours
                if ours:
                    _tc_ours[key] += 1
            try:
                handle, priority = _libbpf_attach.bpf_tc_attach(ifindex, point, prog_fd, priority, handle, what)
            except BaseException:
                _tc_release(key, ifindex, interface)
                raise
        except BaseException:
            os.close(netns)
            raise

        def detach() -> None:
            try:
                _in_netns(netns, lambda: _tc_remove(key, ifindex, interface, point, handle, priority))
            finally:
                os.close(netns)

        return self._new_link(None, detach=detach)

    def attach_sockmap(self, map: SockMap) -> Link:
        """Attach this ``SEC("sk_msg")`` / ``SEC("sk_skb/...")`` program to a sockmap or sockhash.

        ``bpf_prog_attach`` to the map; the attach type comes from the SEC()
        (``sk_msg``, ``sk_skb/stream_verdict``, ``sk_skb/stream_parser``,
        ``sk_skb/verdict``). Sockets are added by writing their fds into the
        map (``map[0] = sock.fileno()``). The Link has no fd; ``destroy()``
        detaches the program (``bpf_prog_detach2``). BPFError (EINVAL) for a
        map that is not a sockmap or sockhash, or a SEC() with no attach type.
        """
        what = f"bpf_prog_attach({self.name}, {getattr(map, 'name', map)!r})"
        if not all(hasattr(map, attr) for attr in ("fd", "name", "type")):
            raise TypeError(f"map must be a Map, not {type(map).__name__}")
        prog_fd = self._loaded_fd(what)
        if map.type not in (lib.BPF_MAP_TYPE_SOCKMAP, lib.BPF_MAP_TYPE_SOCKHASH):
            raise BPFError(errno.EINVAL, f"map {map.name!r} is not a sockmap or sockhash", what)
        map_fd = map.fd
        if map_fd < 0:
            raise BPFError(errno.EINVAL, f"map {map.name!r} is not created: call BPFObject.load() first", what)
        attach_type = self._sockmap_attach_type(what)
        # Both fds are duplicated: the detach needs them after the object may have closed.
        fds = (_libbpf.dup(prog_fd, what), _libbpf.dup(map_fd, what))
        try:
            _libbpf_attach.bpf_prog_attach(fds[0], fds[1], attach_type, 0, what)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise

        def detach() -> None:
            try:
                _libbpf_attach.bpf_prog_detach2(fds[0], fds[1], attach_type, f"bpf_prog_detach2({what})")
            finally:
                for fd in fds:
                    os.close(fd)

        return self._new_link(None, detach=detach)

    def _sockmap_attach_type(self, what: str) -> int:
        ptr = self._check()
        kinds = (lib.BPF_SK_MSG_VERDICT, lib.BPF_SK_SKB_STREAM_PARSER, lib.BPF_SK_SKB_STREAM_VERDICT,
                 lib.BPF_SK_SKB_VERDICT)
        if ptr is not None and _libbpf.bpf_program__expected_attach_type(ptr) in kinds:
            return _libbpf.bpf_program__expected_attach_type(ptr)
        if self.type == lib.BPF_PROG_TYPE_SK_MSG:
            return int(lib.BPF_SK_MSG_VERDICT)
        raise BPFError(errno.EINVAL, f"{self.type_name} program {self.name!r} says no sockmap attach type: "
                       "use SEC(\"sk_msg\") or SEC(\"sk_skb/stream_verdict\"), SEC(\"sk_skb/stream_parser\"), "
                       "SEC(\"sk_skb/verdict\")", what)

    def attach_netns(self, netns: int | str | os.PathLike[str]) -> Link:
        """Attach this ``SEC("sk_lookup")`` (or flow dissector) program to a network namespace.

        ``netns``: an fd of the namespace, or a path to one
        (``/proc/PID/ns/net``, ``/run/netns/NAME``). The link holds the
        namespace; the fd or path may go. BPFError (ENOENT) for a missing path.
        """
        what = f"bpf_program__attach_netns({self.name}, {netns})"
        if isinstance(netns, int) and not isinstance(netns, bool):
            return self._new_link(_libbpf_attach.bpf_program__attach_netns(self._attach_ptr(what), netns, what))
        p = _check.path(netns, "netns")
        ptr = self._attach_ptr(what)
        try:
            fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise BPFError(e.errno or errno.ENOENT, f"cannot open network namespace {p}: {e.strerror}",
                           what) from None
        try:
            return self._new_link(_libbpf_attach.bpf_program__attach_netns(ptr, fd, what))
        finally:
            os.close(fd)

    def attach_netfilter(self, pf: int | str, hooknum: int | str, priority: int, *, flags: int = 0) -> Link:
        """Attach this ``SEC("netfilter")`` program to a netfilter hook of the calling thread's namespace.

        ``pf``: ``"ipv4"``, ``"ipv6"`` or an ``NFPROTO_*`` number; ``hooknum``:
        ``"prerouting"``, ``"local_in"``, ``"forward"``, ``"local_out"``,
        ``"postrouting"`` or its number; ``priority``: as nftables' (the
        kernel refuses INT_MIN and INT_MAX); ``flags``:
        ``BPF_F_NETFILTER_IP_DEFRAG``. BPFError (EINVAL) for a hook the
        kernel refuses, (EOPNOTSUPP) on kernels before 6.4.
        """
        pf = _named(pf, "pf", _NF_PROTOS)
        hooknum = _named(hooknum, "hooknum", _NF_HOOKS)
        priority = _check.integer(priority, "priority", lo=-(1 << 31), hi=_check.INT32_MAX)
        flags = _check.integer(flags, "flags", lo=0, hi=_check.UINT32_MAX)
        what = f"bpf_program__attach_netfilter({self.name}, pf={pf}, hook={hooknum}, priority={priority})"
        return self._new_link(_libbpf_attach.bpf_program__attach_netfilter(self._attach_ptr(what), pf, hooknum,
                                                                           priority, flags, what))

    def set_attach_target(self, target: HasFd | int | None, func_name: str | None = None) -> None:
        """Set what this program attaches to, before load (``bpf_program__set_attach_target``).

        ``target``: a loaded program (or its fd) whose global function
        ``func_name`` a ``SEC("freplace")`` program replaces; None for a
        kernel function (fentry/fexit, BTF-typed tracepoints). BPFError
        (EBUSY) once loaded; (ESRCH) naming a function the target has not.
        """
        target_fd = 0 if target is None else _prog_fd(target, "target")
        if func_name is not None:
            _check.string(func_name, "func_name")
        what = f"bpf_program__set_attach_target({self.name}, {func_name})"
        ptr = self._object_ptr(what)
        if self.fd >= 0:
            raise BPFError(errno.EBUSY, f"program {self.name!r} is already loaded: set the attach target before "
                           "load()", what)
        _libbpf_attach.bpf_program__set_attach_target(ptr, target_fd, func_name, what)

    def attach_freplace(self, target: HasFd | int | None = None, func_name: str | None = None) -> Link:
        """Run this ``SEC("freplace/...")`` program in place of the global function ``func_name`` of
        ``target`` (a loaded program or its fd); both None: the target given before load.

        Until the Link is destroyed, every call of that function in the target
        runs this program instead. BPFError (EINVAL) when the types do not
        match or the target has no such global function.
        """
        if (target is None) != (func_name is None):
            raise ValueError("attach_freplace needs target and func_name together (or neither: the target "
                             "set before load)")
        target_fd = 0 if target is None else _prog_fd(target, "target")
        if func_name is not None:
            _check.string(func_name, "func_name")
        what = f"bpf_program__attach_freplace({self.name}, {func_name})"
        ptr = self._attach_ptr(what)
        if func_name is None:
            return self._new_link(_libbpf_attach.bpf_program__attach_trace_opts(ptr, 0, what))
        return self._new_link(_libbpf_attach.bpf_program__attach_freplace(ptr, target_fd, func_name, what))

class SockMap(Protocol):
    """What ``attach_sockmap`` needs of a map: its fd, name and type."""

    @property
    def fd(self) -> int: ...

    @property
    def type(self) -> int: ...

    name: str


def _cookie(value: int, name: str = "cookie") -> int:
    return _check.integer(value, name, lo=0, hi=_check.UINT64_MAX)


def _prog_fd(target: HasFd | int, name: str) -> int:
    """The fd of a loaded program given as a Program or an fd."""
    if isinstance(target, int) and not isinstance(target, bool):
        return _check.integer(target, name, lo=0, hi=_check.INT32_MAX)
    if isinstance(target, (bool, int)) or not hasattr(target, "fd"):
        raise TypeError(f"{name} must be a Program or a program fd, not {type(target).__name__}")
    fd = target.fd
    if fd < 0:
        raise BPFError(errno.EINVAL, f"{name} program {getattr(target, 'name', '?')!r} is not loaded",
                       f"{name}.fd")
    return fd


def _multi_targets(pattern: str | None, symbols: Sequence[str] | None, offsets: Sequence[int] | None,
                   cookies: Sequence[int] | None, who: str) -> tuple[str | None, list[str] | None,
                                                                     list[int] | None, list[int] | None]:
    """The checked targets of a multi-probe: exactly one of pattern/symbols/offsets, cookies to match."""
    given = [n for n, v in (("pattern", pattern), ("symbols", symbols), ("offsets", offsets)) if v is not None]
    if len(given) != 1:
        raise ValueError(f"{who} needs exactly one of pattern, symbols= or offsets= (got "
                         f"{', '.join(given) or 'none'})")
    syms = offs = cks = None
    if pattern is not None:
        _check.string(pattern, "pattern")
        if cookies is not None:
            raise ValueError(f"{who}: cookies= needs symbols= or offsets= (one cookie each), not a pattern")
    for name, seq in (("symbols", symbols), ("offsets", offsets), ("cookies", cookies)):
        if seq is not None and (isinstance(seq, (str, bytes)) or not isinstance(seq, Iterable)):
            raise TypeError(f"{name} must be a sequence, got {seq!r}")
    if symbols is not None:
        syms = [_check.string(s, "symbols[]") for s in symbols]
    if offsets is not None:
        offs = [_check.integer(o, "offsets[]", lo=1, hi=_check.UINT64_MAX) for o in offsets]
    targets = syms if syms is not None else offs
    if targets is not None and not targets:
        raise ValueError(f"{who}: {given[0]} is empty")
    if cookies is not None:
        cks = [_cookie(c, "cookies[]") for c in cookies]
        if targets is not None and len(cks) != len(targets):
            raise ValueError(f"{who}: cookies has {len(cks)} values for {len(targets)} {given[0]}")
    return pattern, syms, offs, cks


#: Netfilter protocol families and hooks by name (linux/netfilter.h: NFPROTO_*, NF_INET_*).
_NF_PROTOS = {"ipv4": 2, "ipv6": 10}
_NF_HOOKS = {"prerouting": 0, "local_in": 1, "forward": 2, "local_out": 3, "postrouting": 4}


def _named(value: int | str, name: str, table: dict[str, int]) -> int:
    if isinstance(value, str):
        if value not in table:
            raise ValueError(f"{name} must be one of {', '.join(table)} or a number, got {value!r}")
        return table[value]
    return _check.integer(value, name, lo=0, hi=_check.UINT32_MAX)


# The clsact qdiscs this process added, by (network namespace inode, ifindex): how many of its
# filters are on each. The qdisc goes with the last of them (one that was there stays).
_tc_lock = threading.Lock()
_tc_ours: dict[tuple[int, int], int] = {}


def _tc_release(key: tuple[int, int], ifindex: int, interface: str | int) -> None:
    """One filter fewer on ``key``'s qdisc: remove the qdisc when it was ours and that was the last."""
    with _tc_lock:
        if key not in _tc_ours:
            return
        _tc_ours[key] -= 1
        if _tc_ours[key] > 0:
            return
        del _tc_ours[key]
    try:
        _libbpf_attach.bpf_tc_hook_destroy(ifindex, f"bpf_tc_hook_destroy({interface})")
    except BPFError as e:
        if e.errno not in _GONE:
            raise


#: What a detach finds when the filter or its interface went first (netns or veth deleted): done.
_GONE = (errno.ENOENT, errno.ENODEV, errno.EINVAL)


def _tc_remove(key: tuple[int, int], ifindex: int, interface: str | int, point: int, handle: int,
               priority: int) -> None:
    try:
        _libbpf_attach.bpf_tc_detach(ifindex, point, handle, priority, f"bpf_tc_detach({interface})")
    except BPFError as e:
        if e.errno not in _GONE:
            raise
    finally:
        _tc_release(key, ifindex, interface)


def _in_netns(netns_fd: int, call: Callable[[], None]) -> None:
    """Run ``call`` in the network namespace ``netns_fd``: here when it is this thread's, else in a
    short-lived thread moved there (setns changes only the calling thread)."""
    if os.fstat(netns_fd).st_ino == os.stat("/proc/thread-self/ns/net").st_ino:
        call()
        return
    failed: list[BaseException] = []

    def run() -> None:
        try:
            _libbpf_attach.setns(netns_fd, lib.CLONE_NEWNET, "setns(CLONE_NEWNET)")
            call()
        except BaseException as e:  # raised in the caller's thread below
            failed.append(e)

    thread = threading.Thread(target=run, name="plb-netns")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]

def _said(e: BPFError) -> str:
    """libbpf's own explanation carried by an attach error (' (libbpf: ...)'), or ''."""
    text = str(e.strerror)
    at = text.find(" (libbpf: ")
    return text[at:] if at >= 0 else ""


def _binary_found(binary: str) -> bool:
    """Whether libbpf can find ``binary``: a path that exists, a program in PATH, or a library."""
    if "/" in binary:
        return os.path.exists(binary)
    return _full_path(binary) is not None


def _full_path(binary: str) -> str | None:
    """Where a bare name is, as libbpf looks: a program in PATH, else a library in its directories."""
    found = shutil.which(binary)
    if found is not None:
        return found
    dirs = [*os.environ.get("LD_LIBRARY_PATH", "").split(":"), "/usr/lib64", "/usr/lib", "/lib64", "/lib",
            "/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu"]
    return next((os.path.join(d, binary) for d in dirs if d and os.path.exists(os.path.join(d, binary))), None)


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
