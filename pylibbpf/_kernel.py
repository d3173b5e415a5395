"""The checked layer for the kernel's BPF objects by id: ids, fds by id, link info, map creation.

A checked layer as :mod:`pylibbpf._libbpf` is (whose error helpers it uses):
libbpf calls under their C names, each return checked, no policy. Kept apart
because it serves one job, reaching programs, maps, links and BTF objects the
kernel holds, whoever loaded them (``Program.from_id``, ``Map.create``,
``Link.info``, ``pylibbpf.programs()``...).
"""

from __future__ import annotations

import errno
from typing import Any

from . import _libbpf
from ._ffi import capture_log, ffi, lib
from .errors import BPFError

CData = Any

#: The kinds of kernel objects with ids: what each kind's calls are.
KINDS = ("prog", "map", "link", "btf")
_NAME_SIZE = 4096  # PATH_MAX: the longest name a link reports (a uprobe_multi link's path)


def get_next_id(kind: str, start: int, what: str) -> int | None:
    """The next id of ``kind`` after ``start`` (``bpf_prog_get_next_id``...); None after the last."""
    call = {"prog": lib.bpf_prog_get_next_id, "map": lib.bpf_map_get_next_id,
            "link": lib.bpf_link_get_next_id, "btf": lib.bpf_btf_get_next_id}[kind]
    out = ffi.new("__u32 *")
    ret = call(start, out)
    if ret == -errno.ENOENT:
        return None
    _libbpf.check(ret, what)
    return int(out[0])


def get_fd_by_id(kind: str, obj_id: int, what: str) -> int:
    """A new fd for the ``kind`` with id ``obj_id`` (``bpf_prog_get_fd_by_id``...).

    BPFError (ENOENT) when no such object exists (any more).
    """
    call = {"prog": lib.bpf_prog_get_fd_by_id, "map": lib.bpf_map_get_fd_by_id,
            "link": lib.bpf_link_get_fd_by_id, "btf": lib.bpf_btf_get_fd_by_id}[kind]
    return _libbpf.check(call(obj_id), what)


def bpf_link_get_info_by_fd(fd: int, what: str) -> tuple[CData, CData, str]:
    """A link's ``struct bpf_link_info``, its per-kind fields (``struct plb_link_fields``) and its name.

    The name is what the kind carries (a tracepoint's, an iterator target's,
    a uprobe_multi link's path, a perf event's probe): '' for the others. Two
    calls: the first says the kind, the second reads the name into a buffer.
    """
    info = ffi.new("struct bpf_link_info *")
    size = ffi.new("__u32 *", ffi.sizeof("struct bpf_link_info"))
    _libbpf.check(lib.bpf_link_get_info_by_fd(fd, info, size), what)
    buf = ffi.new("char[]", _NAME_SIZE)
    named = lib.plb_link_info_name_buf(info, buf, _NAME_SIZE)
    if named:
        size[0] = ffi.sizeof("struct bpf_link_info")
        _libbpf.check(lib.bpf_link_get_info_by_fd(fd, info, size), what)
    fields = ffi.new("struct plb_link_fields *")
    lib.plb_link_info_fields(info, fields)
    return info, fields, _libbpf.string(buf) if named else ""


def bpf_map_create(map_type: int, name: str | None, key_size: int, value_size: int, max_entries: int,
                   flags: int, inner_map_fd: int | None, what: str) -> int:
    """A new map's fd (``bpf_map_create``); BPFError with the kernel's errno when it refuses."""
    opts = ffi.new("struct bpf_map_create_opts *")
    opts.sz = ffi.sizeof("struct bpf_map_create_opts")
    opts.map_flags = flags
    if inner_map_fd is not None:
        opts.inner_map_fd = inner_map_fd
    cname = _libbpf.cstr(name)
    return _libbpf.check(lib.bpf_map_create(map_type, cname, key_size, value_size, max_entries, opts), what)


def bpf_map__set_inner_map_fd(m: CData, fd: int, what: str) -> None:
    """Give a map-in-map its inner map's template before load (libbpf says why it refuses, logged)."""
    with capture_log() as lines:
        ret = lib.bpf_map__set_inner_map_fd(m, fd)
    if ret < 0:
        said = f" (libbpf: {lines[-1].strip()})" if lines else ""
        raise BPFError(-ret, _libbpf.strerror(-ret) + said, what)


def btf__load_from_kernel_by_id(btf_id: int, what: str) -> CData:
    """The kernel's BTF object ``btf_id`` parsed; free it with :func:`btf__free`."""
    return _libbpf.check_ptr(lib.btf__load_from_kernel_by_id(btf_id), what)


def btf__free(btf: CData) -> None:
    lib.btf__free(btf)


def libbpf_bpf_link_type_str(link_type: int) -> str:
    """libbpf's name of a link type (``"raw_tracepoint"``, ``"tcx"``...), '' when it has none."""
    return _libbpf.string(lib.libbpf_bpf_link_type_str(link_type))


def libbpf_bpf_attach_type_str(attach_type: int) -> str:
    """libbpf's name of an attach type (``"tcx_ingress"``, ``"cgroup_inet_ingress"``...), '' when none."""
    return _libbpf.string(lib.libbpf_bpf_attach_type_str(attach_type))
