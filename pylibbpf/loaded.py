"""What the kernel has loaded: every BPF program, map and link, whoever loaded it, as typed records.

``pylibbpf.programs()``, ``pylibbpf.maps()`` and ``pylibbpf.links()`` walk the
kernel's ids (``bpf_prog_get_next_id`` and its siblings) and read each
object's info through a short-lived fd:

1. The walk asks for the next id after the last one seen, so objects
   created meanwhile with a higher id are listed, lower ones are not.
2. An object that goes away between its id and its fd (a program unloaded,
   a link destroyed) is skipped, not an error: the list is what was loaded
   while it was read.
3. Each entry is a frozen record of what the kernel says of the object.
   Links give one record class per kind (:class:`TcxLinkInfo`,
   :class:`PerfEventLinkInfo`...), the same :meth:`pylibbpf.Link.info` returns.

Reading other processes' objects needs CAP_SYS_ADMIN (BPFError EPERM).
``Program.from_id``, ``Map.from_id`` and ``Link.from_id`` open one of them.
"""

from __future__ import annotations

import errno
import os
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from . import _kernel, _libbpf
from ._ffi import lib
from .errors import BPFError

CData = Any
T = TypeVar("T")


@dataclass(frozen=True)
class ProgramInfo:
    """A loaded program as the kernel describes it (``struct bpf_prog_info``).

    ``tag``: the hash of its instructions (hex, as bpftool shows it);
    ``btf_id``: its BTF object's id, 0 when it has none.
    """

    id: int
    name: str
    type: int
    type_name: str
    tag: str
    btf_id: int


@dataclass(frozen=True)
class MapInfo:
    """A map as the kernel describes it (``struct bpf_map_info``).

    ``btf_id``: its BTF object's id, 0 when it has no BTF; ``btf_key_type_id``
    and ``btf_value_type_id``: its key's and value's types in that BTF (0: none).
    """

    id: int
    name: str
    type: int
    type_name: str
    key_size: int
    value_size: int
    max_entries: int
    flags: int
    btf_id: int
    btf_key_type_id: int
    btf_value_type_id: int


@dataclass(frozen=True)
class LinkInfo:
    """A link as the kernel describes it (``struct bpf_link_info``): the fields every kind has.

    ``type_name`` is libbpf's name of the kind (``"raw_tracepoint"``,
    ``"tcx"``...). Each kind this kernel reports more of has its own subclass
    with those fields; a kind without one is a plain LinkInfo.
    """

    id: int
    type: int
    type_name: str
    prog_id: int


@dataclass(frozen=True)
class RawTracepointLinkInfo(LinkInfo):
    """A raw tracepoint (``SEC("raw_tp")``, ``SEC("tp_btf")``): the tracepoint's name."""

    tp_name: str


@dataclass(frozen=True)
class TracingLinkInfo(LinkInfo):
    """fentry/fexit/fmod_ret/freplace: the target is type ``target_btf_id`` of BTF object ``target_obj_id``.

    For freplace (``SEC("freplace/...")``) ``target_obj_id`` is the target
    program's id. ``attach_type`` is libbpf's name of the attach type.
    """

    attach_type: str
    target_obj_id: int
    target_btf_id: int


@dataclass(frozen=True)
class CgroupLinkInfo(LinkInfo):
    """A cgroup program: the cgroup's id (its directory's inode number) and the hook."""

    cgroup_id: int
    attach_type: str


@dataclass(frozen=True)
class IterLinkInfo(LinkInfo):
    """A BPF iterator: its target (``"bpf_map_elem"``, ``"task"``...), and what it walks where the kernel says.

    ``map_id`` for map iterators, ``cgroup_id`` for cgroup iterators,
    ``tid``/``pid`` for task iterators given one; 0 otherwise.
    """

    target_name: str
    map_id: int
    cgroup_id: int
    tid: int
    pid: int


@dataclass(frozen=True)
class NetnsLinkInfo(LinkInfo):
    """A network namespace program (flow dissector, sk_lookup): the namespace's inode and the hook."""

    netns_ino: int
    attach_type: str


@dataclass(frozen=True)
class XdpLinkInfo(LinkInfo):
    """An XDP program: the interface's index (in the namespace the link was made in)."""

    ifindex: int


@dataclass(frozen=True)
class PerfEventLinkInfo(LinkInfo):
    """A program on a perf event: ``event`` is ``"tracepoint"``, ``"kprobe"``, ``"kretprobe"``,
    ``"uprobe"``, ``"uretprobe"`` or ``"event"`` (a hardware/software event such as cpu-clock).

    ``name``: the tracepoint's, the kprobe's function or the uprobe's file
    ('' for events); ``offset``/``addr``: where the probe is; ``config`` and
    ``event_type``: the perf event's (for ``"event"``); ``missed``: kprobe
    runs missed; ``cookie``: the BPF cookie.
    """

    event: str
    name: str
    offset: int
    addr: int
    missed: int
    cookie: int
    config: int
    event_type: int


@dataclass(frozen=True)
class KprobeMultiLinkInfo(LinkInfo):
    """A kprobe_multi link: how many functions, its flags (1: return probes), runs missed."""

    count: int
    flags: int
    missed: int


@dataclass(frozen=True)
class StructOpsLinkInfo(LinkInfo):
    """A struct_ops map registered through a link: the map's id."""

    map_id: int


@dataclass(frozen=True)
class NetfilterLinkInfo(LinkInfo):
    """A netfilter hook: protocol family, hook number, priority and flags."""

    pf: int
    hooknum: int
    priority: int
    flags: int


@dataclass(frozen=True)
class TcxLinkInfo(LinkInfo):
    """A tcx program: the interface's index and ``direction`` (``"ingress"`` or ``"egress"``)."""

    ifindex: int
    direction: str


@dataclass(frozen=True)
class UprobeMultiLinkInfo(LinkInfo):
    """A uprobe_multi link: the file probed, how many probes, flags (1: return probes), the pid (0: any)."""

    path: str
    count: int
    flags: int
    pid: int


@dataclass(frozen=True)
class NetkitLinkInfo(LinkInfo):
    """A netkit program: the interface's index and the attach type (``"netkit_primary"``/``"netkit_peer"``)."""

    ifindex: int
    attach_type: str


@dataclass(frozen=True)
class SockmapLinkInfo(LinkInfo):
    """A sockmap/sockhash program: the map's id and the attach type."""

    map_id: int
    attach_type: str


# enum bpf_perf_event_type (include/uapi/linux/bpf.h) -> the word PerfEventLinkInfo.event uses.
_PERF_EVENTS = {
    lib.BPF_PERF_EVENT_UPROBE: "uprobe", lib.BPF_PERF_EVENT_URETPROBE: "uretprobe",
    lib.BPF_PERF_EVENT_KPROBE: "kprobe", lib.BPF_PERF_EVENT_KRETPROBE: "kretprobe",
    lib.BPF_PERF_EVENT_TRACEPOINT: "tracepoint", lib.BPF_PERF_EVENT_EVENT: "event",
}
# The iterator targets whose second union member is a cgroup's or a task's (kernel/bpf/*_iter.c).
_TASK_ITERS = frozenset({"task", "task_file", "task_vma"})
_MAP_ITERS = frozenset({"bpf_map_elem", "bpf_sk_storage_map", "sockmap"})


def _attach_type(value: int) -> str:
    return _kernel.libbpf_bpf_attach_type_str(value) or str(value)


def _link_record(info: CData, f: CData, name: str) -> LinkInfo:
    """The record of one link: its kind's class, from the info and per-kind fields the kernel gave."""
    kind = int(info.type)
    common = (int(info.id), kind, _kernel.libbpf_bpf_link_type_str(kind) or str(kind), int(info.prog_id))
    if kind == lib.BPF_LINK_TYPE_RAW_TRACEPOINT:
        return RawTracepointLinkInfo(*common, tp_name=name)
    if kind == lib.BPF_LINK_TYPE_TRACING:
        return TracingLinkInfo(*common, attach_type=_attach_type(f.attach_type), target_obj_id=int(f.target_obj_id),
                               target_btf_id=int(f.target_btf_id))
    if kind == lib.BPF_LINK_TYPE_CGROUP:
        return CgroupLinkInfo(*common, cgroup_id=int(f.cgroup_id), attach_type=_attach_type(f.attach_type))
    if kind == lib.BPF_LINK_TYPE_ITER:
        task, cgroup = name in _TASK_ITERS, name == "cgroup"
        return IterLinkInfo(*common, target_name=name, map_id=int(f.map_id) if name in _MAP_ITERS else 0,
                            cgroup_id=int(f.cgroup_id) if cgroup else 0, tid=int(f.tid) if task else 0,
                            pid=int(f.pid) if task else 0)
    if kind == lib.BPF_LINK_TYPE_NETNS:
        return NetnsLinkInfo(*common, netns_ino=int(f.netns_ino), attach_type=_attach_type(f.attach_type))
    if kind == lib.BPF_LINK_TYPE_XDP:
        return XdpLinkInfo(*common, ifindex=int(f.ifindex))
    if kind == lib.BPF_LINK_TYPE_PERF_EVENT:
        return PerfEventLinkInfo(*common, event=_PERF_EVENTS.get(int(f.perf_type), str(int(f.perf_type))),
                                 name=name, offset=int(f.offset), addr=int(f.addr), missed=int(f.missed),
                                 cookie=int(f.cookie), config=int(f.config), event_type=int(f.event_type))
    if kind == lib.BPF_LINK_TYPE_KPROBE_MULTI:
        return KprobeMultiLinkInfo(*common, count=int(f.count), flags=int(f.flags), missed=int(f.missed))
    if kind == lib.BPF_LINK_TYPE_STRUCT_OPS:
        return StructOpsLinkInfo(*common, map_id=int(f.map_id))
    if kind == lib.BPF_LINK_TYPE_NETFILTER:
        return NetfilterLinkInfo(*common, pf=int(f.pf), hooknum=int(f.hooknum), priority=int(f.priority),
                                 flags=int(f.flags))
    if kind == lib.BPF_LINK_TYPE_TCX:
        direction = {lib.BPF_TCX_INGRESS: "ingress", lib.BPF_TCX_EGRESS: "egress"}.get(int(f.attach_type))
        return TcxLinkInfo(*common, ifindex=int(f.ifindex), direction=direction or _attach_type(f.attach_type))
    if kind == lib.BPF_LINK_TYPE_UPROBE_MULTI:
        return UprobeMultiLinkInfo(*common, path=name, count=int(f.count), flags=int(f.flags), pid=int(f.pid))
    if kind == lib.BPF_LINK_TYPE_NETKIT:
        return NetkitLinkInfo(*common, ifindex=int(f.ifindex), attach_type=_attach_type(f.attach_type))
    if kind == lib.BPF_LINK_TYPE_SOCKMAP:
        return SockmapLinkInfo(*common, map_id=int(f.map_id), attach_type=_attach_type(f.attach_type))
    return LinkInfo(*common)


def link_info(fd: int, what: str) -> LinkInfo:
    """The record of the link behind ``fd`` (``bpf_link_get_info_by_fd``)."""
    info, fields, name = _kernel.bpf_link_get_info_by_fd(fd, what)
    return _link_record(info, fields, name)


def program_info(fd: int, what: str) -> ProgramInfo:
    """The record of the program behind ``fd`` (``bpf_prog_get_info_by_fd``)."""
    info = _libbpf.bpf_prog_get_info_by_fd(fd, what)
    kind = int(info.type)
    return ProgramInfo(int(info.id), _libbpf.string(info.name), kind, _libbpf.libbpf_prog_type_str(kind),
                       bytes(info.tag).hex(), int(info.btf_id))


def map_info(fd: int, what: str) -> MapInfo:
    """The record of the map behind ``fd`` (``bpf_map_get_info_by_fd``)."""
    info = _libbpf.bpf_map_get_info_by_fd(fd, what)
    kind = int(info.type)
    return MapInfo(int(info.id), _libbpf.string(info.name), kind, _libbpf.libbpf_map_type_str(kind),
                   int(info.key_size), int(info.value_size), int(info.max_entries), int(info.map_flags),
                   int(info.btf_id), int(info.btf_key_type_id), int(info.btf_value_type_id))


def _walk(kind: str, read: Callable[[int, str], T]) -> list[T]:
    """Every object of ``kind`` the kernel holds, read through a short-lived fd; vanished ones skipped."""
    out: list[T] = []
    obj_id = 0
    while True:
        next_id = _kernel.get_next_id(kind, obj_id, f"bpf_{kind}_get_next_id({obj_id})")
        if next_id is None:
            return out
        obj_id = next_id
        what = f"bpf_{kind}_get_fd_by_id({obj_id})"
        try:
            fd = _kernel.get_fd_by_id(kind, obj_id, what)
        except BPFError as e:
            if e.errno == errno.ENOENT:  # gone between its id and its fd
                continue
            raise
        try:
            out.append(read(fd, what))
        finally:
            os.close(fd)


def programs() -> list[ProgramInfo]:
    """Every BPF program loaded in the kernel, by id (``bpf_prog_get_next_id``), as :class:`ProgramInfo`.

    Programs unloaded while the list is read are left out. BPFError (EPERM)
    without CAP_SYS_ADMIN.
    """
    return _walk("prog", program_info)


def maps() -> list[MapInfo]:
    """Every BPF map in the kernel, by id (``bpf_map_get_next_id``), as :class:`MapInfo`.

    Maps freed while the list is read are left out. BPFError (EPERM) without
    CAP_SYS_ADMIN.
    """
    return _walk("map", map_info)


def links() -> list[LinkInfo]:
    """Every BPF link in the kernel, by id (``bpf_link_get_next_id``), each as its kind's record.

    Links destroyed while the list is read are left out. BPFError (EPERM)
    without CAP_SYS_ADMIN.
    """
    return _walk("link", link_info)


class MapsModule(types.ModuleType):
    """The class of the ``pylibbpf.maps`` module: calling it, ``pylibbpf.maps()``, is :func:`maps`.

    The 1.0 API names the listing ``pylibbpf.maps()``; a function of that name in the package would
    hide the module from ``import pylibbpf.maps``, so the module itself answers the call.
    """

    def __call__(self) -> list[MapInfo]:
        """Every map the kernel has loaded, as :func:`maps` gives them."""
        return maps()
