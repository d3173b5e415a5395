"""Maps of maps, maps made at run time, objects opened by id or pin, the kernel's lists, link info.

tests/bpf/loaded.bpf.c: ``by_key`` is a hash of maps declared without ``__array``, so its inner
template is set from Python before load; ``inner_value`` (xdp, run with test_run) returns inner[0]
of the map at by_key[1], NO_INNER without one, NO_ELEMENT without its element. The other programs
make one link of each kind this kernel can create, whose info the tests read back.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_program import child_cgroup, in_netns, veth_pair

import pylibbpf
from pylibbpf import BPFError, BPFObject, ClosedError, EventDef, Link, Map, Program, _kernel, defevent, lib
from pylibbpf.loaded import (
    CgroupLinkInfo,
    IterLinkInfo,
    PerfEventLinkInfo,
    RawTracepointLinkInfo,
    TcxLinkInfo,
    UprobeMultiLinkInfo,
    XdpLinkInfo,
)

pytestmark = pytest.mark.usefixtures("bpf_privileged")
__all__ = ["child_cgroup", "veth_pair"]

NO_INNER, NO_ELEMENT = 7777, 8888
Pair = defevent("Pair", ("a", "u32"), ("b", "u32"))


@pytest.fixture
def obj(bpf_objects: dict[str, Path]) -> Iterator[BPFObject]:
    """loaded.bpf.o, loaded with an array (u32 -> u64) as by_key's inner template."""
    with BPFObject.open(bpf_objects["loaded"]) as o:
        with Map.create("array", 4, 8, 1, name="plb_template") as template:
            o.maps["by_key"].inner_map = template
            assert o.maps["by_key"].inner_map is template
            o.load()  # the template is needed until here only
        yield o


def inner_value(obj: BPFObject) -> int:
    return obj.programs["inner_value"].test_run(data=bytes(64)).retval


# --- maps of maps ------------------------------------------------------------------------------------

def test_inner_maps_made_at_run_time_are_what_the_program_reads(obj: BPFObject) -> None:
    by_key = obj.maps["by_key"]
    assert inner_value(obj) == NO_INNER
    with Map.create("array", 4, 8, 1, key_type="u32", value_type="u64") as inner, \
            Map.create("array", 4, 8, 1) as other:
        inner[0] = 42
        by_key[1] = inner  # a Map
        assert inner_value(obj) == 42
        with by_key[1] as back:  # read back: the inner map, opened by its id, owning its own fd
            assert isinstance(back, Map) and back.info().id == inner.info().id
            assert back.key_type is None and back[0] == (42).to_bytes(8, "little")  # created without BTF: bytes
            back[0] = (43).to_bytes(8, "little")
        assert inner[0] == 43
        other.raw[0] = (7).to_bytes(8, "little")
        by_key[1] = other.fd  # an int fd keeps working
        assert inner_value(obj) == 7
    assert inner_value(obj) == 7  # the outer map holds the inner one: closing our fd frees nothing
    del by_key[1]
    assert inner_value(obj) == NO_INNER


def test_an_inner_map_of_another_shape_is_refused(obj: BPFObject) -> None:
    with Map.create("array", 4, 4, 1) as wrong:
        with pytest.raises(BPFError) as info:
            obj.maps["by_key"][1] = wrong  # u32 values: the template has u64 values
    assert info.value.errno == errno.EINVAL


def test_a_map_of_maps_made_at_run_time() -> None:
    with Map.create("array", 4, 8, 1) as template, \
            Map.create("hash_of_maps", 4, 4, 2, name="plb_outer", key_type="u32", inner_map=template) as outer:
        assert (outer.type, outer.type_name, outer.name) == (lib.BPF_MAP_TYPE_HASH_OF_MAPS, "hash_of_maps",
                                                              "plb_outer")
        outer[5] = template
        assert list(outer) == [5]
        with outer[5] as inner:
            assert inner.info().id == template.info().id


def test_the_inner_template_is_set_before_load_only(obj: BPFObject, bpf_objects: dict[str, Path]) -> None:
    with Map.create("array", 4, 8, 1) as template:
        with pytest.raises(BPFError, match="already created: inner_map can only be set before") as info:
            obj.maps["by_key"].inner_map = template
        assert info.value.errno == errno.EBUSY
        with BPFObject.open(bpf_objects["loaded"]) as fresh:
            with pytest.raises(TypeError, match="map 'pairs' is a hash map, not a map of maps"):
                fresh.maps["pairs"].inner_map = template
            with pytest.raises(TypeError, match="inner_map must be a Map, got int"):
                fresh.maps["by_key"].inner_map = template.fd  # type: ignore[assignment]
        with BPFObject.open(bpf_objects["map_kinds"]) as declared:  # `outer` has __array(values, ...)
            declared.maps["outer"].inner_map = template  # replaces the declared template
            with pytest.raises(BPFError, match="inner_map_fd already specified") as info:
                declared.maps["outer"].inner_map = template
            assert info.value.errno == errno.EINVAL


# --- maps made at run time ---------------------------------------------------------------------------

def test_a_map_made_at_run_time_is_typed_by_the_types_given() -> None:
    with Map.create("hash", 8, 8, 4, name="plb_pairs", key_type=Pair, value_type="u64") as m:
        assert (m.key_type, m.value_type, m.max_entries, m.c_ptr) == (Pair, "u64", 4, pylibbpf.ffi.NULL)
        m[{"a": 1, "b": 2}] = 5
        m.update_batch([({"a": 3, "b": 4}, 6)])
        assert sorted((k.a, k.b, v) for k, v in m.items()) == [(1, 2, 5), (3, 4, 6)]
        assert m.raw[Pair.serialize({"a": 1, "b": 2})] == (5).to_bytes(8, "little")
        info = m.info()
        assert (info.name, info.type_name, info.key_size, info.value_size, info.btf_id) == (
            "plb_pairs", "hash", 8, 8, 0)
    with Map.create(lib.BPF_MAP_TYPE_QUEUE, 0, 4, 2, value_type="i32") as q:
        q.push(-3)
        assert q.pop() == -3


def test_a_map_that_owns_its_fd_closes_once() -> None:
    m = Map.create("array", 4, 4, 1)
    fd = m.fd
    m.close()
    m.close()  # idempotent
    with pytest.raises(OSError):
        os.fstat(fd)  # the fd is closed
    with pytest.raises(ClosedError):
        m[0]
    with pytest.raises(ClosedError):
        m.fd  # noqa: B018
    assert "closed" in repr(m)
    Map.create("array", 4, 4, 1)  # dropped without close(): the finalizer closes it (the fd-leak check)


def test_the_kernel_refuses_a_map_it_cannot_make() -> None:
    with pytest.raises(BPFError, match=r"bpf_map_create\(plb_bad\)") as info:
        Map.create("array", 3, 4, 1, name="plb_bad")  # array keys are u32
    assert info.value.errno == errno.EINVAL


# --- opened by id or pin -----------------------------------------------------------------------------

def test_a_map_opened_by_id_is_typed_from_its_btf_in_the_kernel(obj: BPFObject) -> None:
    pairs = obj.maps["pairs"]
    pairs[{"a": 1, "b": 2}] = 3
    with Map.from_id(pairs.info().id) as again:
        assert isinstance(again.key_type, EventDef) and again.value_type == "u64"
        assert again.key_type.fields == ["a", "b"] and again.name == "pairs"
        assert [(k.a, k.b, v) for k, v in again.items()] == [(1, 2, 3)]
        again[{"a": 5, "b": 6}] = 7
    assert pairs[{"a": 5, "b": 6}] == 7
    with Map.from_id(obj.maps["by_key"].info().id) as by_key, Map.create("array", 4, 8, 1) as inner:
        by_key[1] = inner  # a map of maps opened by id: typed by its map type
        with by_key[1] as back:
            assert back.info().id == inner.info().id


def test_maps_and_programs_from_pins(obj: BPFObject, bpffs_dir: Path) -> None:
    pairs, prog = obj.maps["pairs"], obj.programs["inner_value"]
    pairs.pin(bpffs_dir / "pairs")
    prog.pin(bpffs_dir / "prog")
    with Map.from_pin(bpffs_dir / "pairs") as m:
        assert m.info().id == pairs.info().id and isinstance(m.key_type, EventDef)
        m.pin(bpffs_dir / "again")  # a second pin of the same map
        assert m.pin_path == str(bpffs_dir / "again")
        m.unpin()
        assert m.pin_path is None and not (bpffs_dir / "again").exists()
    with Program.from_pin(bpffs_dir / "prog") as p:
        assert p.info().id == prog.info().id and p.name == "inner_value"
    with pytest.raises(BPFError, match="holds a pinned program, not a map") as info:
        Map.from_pin(bpffs_dir / "prog")
    assert info.value.errno == errno.EINVAL
    with pytest.raises(BPFError) as info:
        Map.from_pin(bpffs_dir / "nothing")
    assert info.value.errno == errno.ENOENT
    pairs.unpin()
    prog.unpin(bpffs_dir / "prog")


def test_a_program_opened_by_id_runs(obj: BPFObject) -> None:
    prog = obj.programs["inner_value"]
    info = prog.info()
    assert (info.name, info.type, info.type_name) == ("inner_value", lib.BPF_PROG_TYPE_XDP, "xdp")
    assert len(info.tag) == 16 and int(info.tag, 16) != 0
    with Program.from_id(info.id) as again:
        assert (again.name, again.type, again.c_ptr) == ("inner_value", lib.BPF_PROG_TYPE_XDP, pylibbpf.ffi.NULL)
        assert again.test_run(data=bytes(64)).retval == NO_INNER
        assert again.info() == info
    with pytest.raises(ClosedError):
        again.test_run(data=bytes(64))


def test_ids_nothing_has_are_refused_with_enoent(obj: BPFObject) -> None:
    link = obj.programs["on_raw"].attach()
    gone = link.info().id
    link.destroy()
    for call in (lambda: Link.from_id(gone), lambda: Map.from_id(0xFFFFFFF0), lambda: Program.from_id(0xFFFFFFF0)):
        with pytest.raises(BPFError) as info:
            call()
        assert info.value.errno == errno.ENOENT


# --- what the kernel has loaded ---------------------------------------------------------------------

def test_the_lists_hold_what_this_process_loaded(obj: BPFObject) -> None:
    prog, pairs = obj.programs["inner_value"], obj.maps["pairs"]
    assert prog.info() in pylibbpf.programs()
    assert pairs.info() in pylibbpf.maps()
    with obj.programs["on_raw"].attach() as link:
        link_id = link.info().id
        listed = [entry for entry in pylibbpf.links() if entry.id == link_id]
        assert listed == [link.info()] and isinstance(listed[0], RawTracepointLinkInfo)
    assert link_id not in [entry.id for entry in pylibbpf.links()]  # destroyed: not listed any more


def test_pylibbpf_maps_stays_the_module_and_lists_when_called(obj: BPFObject) -> None:
    import importlib

    module = importlib.import_module("pylibbpf.maps")
    assert pylibbpf.maps is module and module.Map is pylibbpf.Map  # `import pylibbpf.maps` still works
    assert obj.maps["pairs"].info() in pylibbpf.maps()  # and calling it lists the kernel's maps
    assert all(isinstance(entry, pylibbpf.MapInfo) for entry in pylibbpf.maps())


def test_objects_gone_between_their_id_and_their_fd_are_skipped(obj: BPFObject,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    mine = obj.programs["inner_value"].info().id
    real = _kernel.get_fd_by_id

    def vanishing(kind: str, obj_id: int, what: str) -> int:
        if obj_id == mine:
            raise BPFError(errno.ENOENT, "No such file or directory", what)  # unloaded meanwhile
        return real(kind, obj_id, what)

    monkeypatch.setattr(_kernel, "get_fd_by_id", vanishing)
    ids = [p.id for p in pylibbpf.programs()]
    assert mine not in ids and obj.programs["on_raw"].info().id in ids


# --- link info, per kind ----------------------------------------------------------------------------

def test_tracepoint_links(obj: BPFObject) -> None:
    raw, btf, tp = (obj.programs[n].attach() for n in ("on_raw", "on_tp_btf", "on_tp"))
    try:
        info = raw.info()
        assert isinstance(info, RawTracepointLinkInfo) and info.tp_name == "sys_enter"
        assert (info.type, info.type_name, info.prog_id) == (
            lib.BPF_LINK_TYPE_RAW_TRACEPOINT, "raw_tracepoint", obj.programs["on_raw"].info().id)
        info = btf.info()
        assert isinstance(info, RawTracepointLinkInfo) and info.tp_name == "sys_enter"  # tp_btf: a raw tp link
        info = tp.info()
        assert isinstance(info, PerfEventLinkInfo) and (info.event, info.name) == ("tracepoint", "sys_enter_getpid")
        with Link.from_id(raw.info().id) as again:
            assert again.name == "on_raw" and again.info() == raw.info()
        assert raw.info().id  # destroying the reopened link closed its fd only: still attached
    finally:
        for link in (raw, btf, tp):
            link.destroy()
    with pytest.raises(ClosedError):
        raw.info()


def test_perf_event_links(obj: BPFObject) -> None:
    # context-switches: a software event of the software PMU (newer kernels give cpu-clock its own PMU type)
    links = obj.programs["on_sample"].attach_perf_event("context-switches", period=1_000_000_000, cpus=[0])
    try:
        info = links[0].info()
        assert isinstance(info, PerfEventLinkInfo) and (info.event, info.name) == ("event", "")
        assert (info.event_type, info.config) == (lib.PERF_TYPE_SOFTWARE, lib.PERF_COUNT_SW_CONTEXT_SWITCHES)
    finally:
        for link in links:
            link.destroy()


def test_xdp_and_tcx_links_on_a_veth(obj: BPFObject, veth_pair: tuple[str, str, str]) -> None:
    ns_b, veth_b, _ = veth_pair
    with in_netns(ns_b):
        index = socket.if_nametoindex(veth_b)
        xdp = obj.programs["on_xdp"].attach_xdp(veth_b, mode="generic")
        ingress = obj.programs["on_tcx"].attach_tcx(veth_b, "ingress")
        egress = obj.programs["on_tcx"].attach_tcx(veth_b, "egress")
    try:
        assert xdp.info() == XdpLinkInfo(xdp.info().id, lib.BPF_LINK_TYPE_XDP, "xdp",
                                         obj.programs["on_xdp"].info().id, index)
        assert [(i.ifindex, i.direction) for i in (ingress.info(), egress.info())] == [
            (index, "ingress"), (index, "egress")]
        assert isinstance(ingress.info(), TcxLinkInfo) and ingress.info().type_name == "tcx"
        with Program.from_id(obj.programs["on_xdp"].info().id) as again, in_netns(ns_b):
            xdp.destroy()
            with again.attach_xdp(veth_b, mode="generic") as relinked:  # a program opened by id attaches
                assert relinked.info().ifindex == index
    finally:
        for link in (xdp, ingress, egress):
            link.destroy()


def test_cgroup_links(obj: BPFObject, child_cgroup: Path) -> None:
    with obj.programs["on_sock"].attach_cgroup(child_cgroup) as link:
        info = link.info()
        assert isinstance(info, CgroupLinkInfo)
        assert (info.cgroup_id, info.attach_type) == (os.stat(child_cgroup).st_ino, "cgroup_inet_sock_create")


def test_iterator_links(obj: BPFObject) -> None:
    runs = obj.maps["runs"]
    runs[1] = 9
    with obj.programs["walk_runs"].attach_iter(map=runs) as link:
        info = link.info()
        assert isinstance(info, IterLinkInfo)
        assert (info.target_name, info.map_id, info.tid) == ("bpf_map_elem", runs.info().id, 0)
        assert link.read() == b"0=0\n1=9\n"


def test_uprobe_multi_links(obj: BPFObject) -> None:
    with obj.programs["on_getpid"].attach() as link:  # SEC("uprobe.multi/libc.so.6:getpid")
        info = link.info()
        assert isinstance(info, UprobeMultiLinkInfo) and info.type_name == "uprobe_multi"
        assert (os.path.basename(info.path), info.count, info.pid) == ("libc.so.6", 1, 0)
        assert os.path.isabs(info.path) and os.path.exists(info.path)
