"""The checked layer of the attach calls: libbpf's attach functions under their C names.

As :mod:`pylibbpf._libbpf` (whose error helpers these share): a NULL link or
a negative return becomes a :class:`~pylibbpf.errors.BPFError` with the errno
and libbpf's own last complaint; nothing here decides policy. Every call that
takes a BPF cookie (``bpf_get_attach_cookie()`` in the program) takes it as
``cookie``; 0 is the kernel's "none".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._ffi import ffi, lib
from ._libbpf import attached, check, cstr

CData = Any


def _opts(ctype: str, **fields: Any) -> CData:
    """A libbpf ``*_opts`` struct with its ``sz`` set and ``fields`` filled."""
    opts = ffi.new(f"struct {ctype} *")
    opts.sz = ffi.sizeof(f"struct {ctype}")
    for name, value in fields.items():
        setattr(opts, name, value)
    return opts


def bpf_program__attach_tracepoint_opts(prog: CData, category: str, name: str, cookie: int, what: str) -> CData:
    opts = _opts("bpf_tracepoint_opts", bpf_cookie=cookie)
    return attached(lib.bpf_program__attach_tracepoint_opts, what, prog, cstr(category), cstr(name), opts)


def bpf_program__attach_raw_tracepoint_opts(prog: CData, name: str, cookie: int, what: str) -> CData:
    opts = _opts("bpf_raw_tracepoint_opts", cookie=cookie)
    return attached(lib.bpf_program__attach_raw_tracepoint_opts, what, prog, cstr(name), opts)


def bpf_program__attach_trace_opts(prog: CData, cookie: int, what: str) -> CData:
    return attached(lib.bpf_program__attach_trace_opts, what, prog, _opts("bpf_trace_opts", cookie=cookie))


def bpf_program__attach_kprobe_opts(prog: CData, func: str, retprobe: bool, offset: int, cookie: int,
                                    what: str) -> CData:
    opts = _opts("bpf_kprobe_opts", retprobe=retprobe, offset=offset, bpf_cookie=cookie)
    return attached(lib.bpf_program__attach_kprobe_opts, what, prog, cstr(func), opts)


def bpf_program__attach_uprobe_opts(prog: CData, pid: int, binary: str, offset: int, symbol: str | None,
                                    retprobe: bool, cookie: int, what: str) -> CData:
    csym = cstr(symbol)  # kept alive for the call
    opts = _opts("bpf_uprobe_opts", retprobe=retprobe, func_name=csym, bpf_cookie=cookie)
    return attached(lib.bpf_program__attach_uprobe_opts, what, prog, pid, cstr(binary), offset, opts)


def bpf_program__attach_perf_event_opts(prog: CData, pfd: int, cookie: int, what: str) -> CData:
    opts = _opts("bpf_perf_event_opts", bpf_cookie=cookie)
    return attached(lib.bpf_program__attach_perf_event_opts, what, prog, pfd, opts)


def _multi(opts: CData, symbols: Sequence[str] | None, offsets: Sequence[int] | None,
           cookies: Sequence[int] | None, keep: list[CData]) -> None:
    """Fill the syms/offsets/cookies arrays (and cnt) of a multi-probe opts; ``keep`` holds the memory."""
    if symbols is not None:
        names = [cstr(s) for s in symbols]
        keep += names
        arr = ffi.new("const char *[]", names)
        keep.append(arr)
        opts.syms, opts.cnt = arr, len(names)
    if offsets is not None:
        arr = ffi.new("unsigned long[]", list(offsets))
        keep.append(arr)
        opts.offsets, opts.cnt = arr, len(offsets)
    if cookies is not None:
        arr = ffi.new("__u64[]", list(cookies))
        keep.append(arr)
        opts.cookies = arr


def bpf_program__attach_kprobe_multi_opts(prog: CData, pattern: str | None, symbols: Sequence[str] | None,
                                          cookies: Sequence[int] | None, retprobe: bool, what: str) -> CData:
    opts = _opts("bpf_kprobe_multi_opts", retprobe=retprobe)
    keep: list[CData] = []
    _multi(opts, symbols, None, cookies, keep)
    return attached(lib.bpf_program__attach_kprobe_multi_opts, what, prog, cstr(pattern), opts)


def bpf_program__attach_uprobe_multi(prog: CData, pid: int, binary: str, pattern: str | None,
                                     symbols: Sequence[str] | None, offsets: Sequence[int] | None,
                                     cookies: Sequence[int] | None, retprobe: bool, what: str) -> CData:
    opts = _opts("bpf_uprobe_multi_opts", retprobe=retprobe)
    keep: list[CData] = []
    _multi(opts, symbols, offsets, cookies, keep)
    return attached(lib.bpf_program__attach_uprobe_multi, what, prog, pid, cstr(binary), cstr(pattern), opts)


# --- legacy tc (clsact qdisc + a direct-action filter, over netlink) --------------------------------

def _tc_hook(ifindex: int, attach_point: int) -> CData:
    return _opts("bpf_tc_hook", ifindex=ifindex, attach_point=attach_point)


def bpf_tc_hook_create(ifindex: int, what: str) -> bool:
    """Add a clsact qdisc to the interface: True when this call added it, False when it was there."""
    ret = lib.bpf_tc_hook_create(_tc_hook(ifindex, lib.BPF_TC_INGRESS))
    if ret == -lib.EEXIST:
        return False
    check(ret, what)
    return True


def bpf_tc_hook_destroy(ifindex: int, what: str) -> None:
    """Remove the interface's clsact qdisc, with every filter on it (ingress and egress)."""
    check(lib.bpf_tc_hook_destroy(_tc_hook(ifindex, lib.BPF_TC_INGRESS | lib.BPF_TC_EGRESS)), what)


def bpf_tc_attach(ifindex: int, attach_point: int, prog_fd: int, priority: int, handle: int,
                  what: str) -> tuple[int, int]:
    """Add a direct-action filter running ``prog_fd``: its (handle, priority), as the kernel chose them."""
    opts = _opts("bpf_tc_opts", prog_fd=prog_fd, priority=priority, handle=handle)
    check(lib.bpf_tc_attach(_tc_hook(ifindex, attach_point), opts), what)
    return int(opts.handle), int(opts.priority)


def bpf_tc_detach(ifindex: int, attach_point: int, handle: int, priority: int, what: str) -> None:
    opts = _opts("bpf_tc_opts", priority=priority, handle=handle)
    check(lib.bpf_tc_detach(_tc_hook(ifindex, attach_point), opts), what)


def setns(fd: int, nstype: int, what: str) -> None:
    """Move the calling thread into the namespace ``fd`` (setns(2))."""
    if lib.setns(fd, nstype) != 0:
        check(-(ffi.errno or lib.EINVAL), what)


# --- attachments by target fd, struct_ops ------------------------------------------------------------

def bpf_prog_attach(prog_fd: int, target_fd: int, attach_type: int, flags: int, what: str) -> None:
    check(lib.bpf_prog_attach(prog_fd, target_fd, attach_type, flags), what)


def bpf_prog_detach2(prog_fd: int, target_fd: int, attach_type: int, what: str) -> None:
    check(lib.bpf_prog_detach2(prog_fd, target_fd, attach_type), what)


def bpf_program__attach_netns(prog: CData, netns_fd: int, what: str) -> CData:
    return attached(lib.bpf_program__attach_netns, what, prog, netns_fd)


def bpf_program__attach_netfilter(prog: CData, pf: int, hooknum: int, priority: int, flags: int,
                                  what: str) -> CData:
    opts = _opts("bpf_netfilter_opts", pf=pf, hooknum=hooknum, priority=priority, flags=flags)
    return attached(lib.bpf_program__attach_netfilter, what, prog, opts)


def bpf_program__attach_freplace(prog: CData, target_fd: int, func: str, what: str) -> CData:
    return attached(lib.bpf_program__attach_freplace, what, prog, target_fd, cstr(func))


def bpf_program__set_attach_target(prog: CData, target_fd: int, func: str | None, what: str) -> None:
    check(lib.bpf_program__set_attach_target(prog, target_fd, cstr(func)), what)


def bpf_map__attach_struct_ops(m: CData, what: str) -> CData:
    return attached(lib.bpf_map__attach_struct_ops, what, m)
