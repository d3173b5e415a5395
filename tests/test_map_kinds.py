"""Queues, stacks, bloom filters, maps of fds, bytes on typed maps, and map lifetimes, on the real kernel.

tests/bpf/map_kinds.bpf.c: ``fold`` pops ``fifo``'s head (a struct pair), pushes a+b on ``lifo`` and
adds it to the bloom filter ``seen``; ``jump`` tail-calls slot 0 of ``jumps``.
"""

from __future__ import annotations

import errno
import socket
import struct
from pathlib import Path

import pytest
from test_program import pin_dir

from pylibbpf import BPFError, BPFObject, ClosedError

pytestmark = pytest.mark.usefixtures("bpf_privileged")
__all__ = ["pin_dir"]

XDP_TX, XDP_PASS = 3, 2


BPF_OBJECT = "map_kinds"  # the obj fixture (tests/conftest.py) loads it


def fold(obj: BPFObject) -> int:
    return obj.programs["fold"].test_run(data=bytes(64)).retval


def test_a_queue_a_stack_and_a_bloom_filter_typed_from_btf(obj: BPFObject) -> None:
    fifo, lifo, seen = obj.maps["fifo"], obj.maps["lifo"], obj.maps["seen"]
    assert fifo.peek() is None and fifo.pop() is None  # empty
    fifo.push({"a": 1, "b": 2})
    fifo.push(struct.pack("<II", 30, 40))  # exact-size bytes: the raw value
    assert (fifo.peek().a, fifo.peek().b) == (1, 2)
    assert fold(obj) == 3  # the program popped {1, 2}
    assert (fifo.pop().a, fifo.pop()) == (30, None)
    lifo.push(7)
    assert (lifo.pop(), lifo.pop(), lifo.pop()) == (7, 3, None)  # newest first
    assert 3 in seen and 4 not in seen
    seen.add(4)
    assert 4 in seen
    assert fifo.raw.pop() is None
    fifo.raw.push(struct.pack("<II", 5, 6))
    assert fifo.raw.peek() == struct.pack("<II", 5, 6)


def test_keyless_maps_refuse_mapping_operations_by_name(obj: BPFObject) -> None:
    fifo = obj.maps["fifo"]
    for use in (lambda: fifo[0], lambda: list(fifo), lambda: fifo.raw.lookup(b""), lambda: len(fifo),
                lambda: fifo.items()):
        with pytest.raises(TypeError, match=r"map 'fifo' is a queue map: it has no keys; use push\(\), pop\(\)"):
            list(use())  # type: ignore[call-overload]
    with pytest.raises(TypeError, match=r"map 'inner_a' is a array map, not a queue or stack map"):
        obj.maps["inner_a"].push(1)
    with pytest.raises(TypeError, match=r"map 'fifo' is a queue map, not a bloom_filter map"):
        obj.maps["fifo"].add(1)
    assert obj.maps["inner_a"].pop(9, "none") == "none"  # with a key: dict.pop


def test_fd_valued_maps_take_objects_and_fds(obj: BPFObject) -> None:
    jumps = obj.maps["jumps"]
    assert obj.programs["jump"].test_run(data=bytes(64)).retval == XDP_PASS  # slot 0 empty
    jumps[0] = obj.programs["landed"]
    assert obj.programs["jump"].test_run(data=bytes(64)).retval == XDP_TX  # the tail call landed
    assert jumps[0] > 0  # read back: the program's id
    jumps[1] = obj.programs["landed"].fd  # an int fd
    del jumps[1]
    outer = obj.maps["outer"]
    outer[1] = obj.maps["inner_b"]
    with outer[1] as inner_b, outer[0] as inner_a:  # read back: each inner map, opened by its id
        assert inner_b.info().id == obj.maps["inner_b"].info().id != inner_a.info().id
        assert inner_a.info().id == obj.maps["inner_a"].info().id
    assert int.from_bytes(outer.raw[1], "little") == obj.maps["inner_b"].info().id  # the raw value: the id
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        obj.maps["socks"][0] = sock  # its fileno()
        assert obj.maps["socks"][0] > 0  # its cookie
    with pytest.raises(TypeError, match=r"map 'jumps' value must be a program: an fd or an object with one"):
        jumps[0] = "landed"


def test_a_map_is_typed_the_same_before_and_after_load(bpf_objects: dict[str, Path]) -> None:
    for touch_before_load in (True, False):
        with BPFObject.open(bpf_objects["map_kinds"]) as o:
            if touch_before_load:
                assert o.maps["cgroups"].key_type == "u32"
            o.load()
            assert o.maps["cgroups"].key_type == "u32"  # libbpf cleared its BTF ids at creation
            assert o.maps["inner_a"].value_type == "u64"


def test_typed_maps_take_exact_size_bytes(obj: BPFObject) -> None:
    m = obj.maps["inner_a"]  # u32 -> u64
    m[struct.pack("<I", 0)] = struct.pack("<Q", 5)
    assert m.lookup(struct.pack("<I", 0)) == 5 and m[0] == 5  # the value read back is typed
    m[0] = bytearray(struct.pack("<Q", 6))
    assert m[memoryview(struct.pack("<I", 0))] == 6
    with pytest.raises(ValueError, match=r"key is 3 bytes, map 'inner_a' has 4-byte keys"):
        m[b"abc"] = 1
    with pytest.raises(ValueError, match=r"value is 4 bytes, map 'inner_a' has 8-byte values"):
        m[0] = b"abcd"


def test_iterating_a_map_of_a_closed_object_raises(bpf_objects: dict[str, Path]) -> None:
    o = BPFObject.open(bpf_objects["map_kinds"]).load()
    keys = iter(o.maps["jumps"])
    assert next(keys) == 0
    o.close()
    with BPFObject.open(bpf_objects["map_kinds"]) as other:  # may reuse the closed map's fd number
        other.load()
        with pytest.raises(ClosedError):
            next(keys)


def test_reuse_pinned_and_unpin_check_what_is_pinned(obj: BPFObject, bpf_objects: dict[str, Path],
                                                     pin_dir: Path) -> None:
    prog_pin = pin_dir / "prog"
    obj.programs["landed"].pin(prog_pin)
    with BPFObject.open(bpf_objects["map_kinds"]) as fresh:
        with pytest.raises(BPFError, match=r"prog holds a pinned program, not a map") as info:
            fresh.maps["inner_a"].reuse_pinned(prog_pin)
        assert info.value.errno == errno.EINVAL
    path = pin_dir / "m"
    obj.maps["inner_a"].pin(path)
    path.unlink()
    obj.maps["inner_b"].pin(path)  # another map now pinned where inner_a was
    with pytest.raises(BPFError, match=r"m pins another map .*not this one") as info:
        obj.maps["inner_a"].unpin()
    assert info.value.errno == errno.EINVAL and path.exists()
    obj.maps["inner_b"].unpin()
    assert not path.exists()
