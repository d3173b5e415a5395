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
from collections.abc import Callable
from typing import Any

from . import _check, _close, _kernel, _libbpf, loaded
from ._attach import DEFAULT_FREQUENCY as DEFAULT_FREQUENCY  # reachable as pylibbpf.program.*
from ._attach import PERF_EVENTS as PERF_EVENTS
from ._attach import Attaching, LinkKeeper
from ._ffi import ffi, lib
from .errors import BPFError, ClosedError
from .link import Link as Link  # also reachable as pylibbpf.program.Link

CData = Any


# Program types whose BPF_PROG_TEST_RUN writes the context back to ctx_out (net/bpf/test_run.c:
# the skb, xdp, flow dissector and sk_lookup runners); SEC("syscall") writes it into ctx_in.
_CTX_OUT_TYPES = frozenset(getattr(lib, f"BPF_PROG_TYPE_{name}") for name in (
    "SOCKET_FILTER", "SCHED_CLS", "SCHED_ACT", "CGROUP_SKB", "LWT_IN", "LWT_OUT", "LWT_XMIT",
    "LWT_SEG6LOCAL", "XDP", "FLOW_DISSECTOR", "SK_LOOKUP"))


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


#: Which attach_* call a program type needs when its SEC() says nothing attachable.
_ATTACH_HINTS = {
    "perf_event": "attach_perf_event()",
    "xdp": "attach_xdp()",
    "sched_cls": "attach_tcx() or attach_tc()",
    "kprobe": "attach_kprobe(), attach_uprobe(), attach_uprobe_multi() or attach_usdt()",
    "tracepoint": "attach_tracepoint()",
    "raw_tracepoint": "attach_raw_tracepoint()",
    "tracing": "attach_trace() or attach_iter()",
    "sk_msg": "attach_sockmap()",
    "sk_skb": "attach_sockmap()",
    "sk_lookup": "attach_netns()",
    "netfilter": "attach_netfilter()",
    "ext": "attach_freplace()",
    "struct_ops": "obj.struct_ops[name].attach()",
}


class Program(Attaching):
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
