"""Maps as typed mappings on the real kernel: BTF types, per-CPU values, batches, sizing, pinning, stacks."""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest

from pylibbpf import BPFError, BPFObject, ClosedError, EventDef, LoadError, _libbpf, ffi, lib
from pylibbpf.maps import ENOTSUPP

pytestmark = pytest.mark.usefixtures("bpf_privileged")
NCPUS = lib.libbpf_num_possible_cpus()


@pytest.fixture
def obj(bpf_objects: dict[str, Path]) -> Iterator[BPFObject]:
    with BPFObject.open(bpf_objects["maps"]) as o:
        o.maps["counts"].max_entries = 1000
        o.globals["targ_tgid"] = os.getpid()  # on_getpid counts this process only
        o.load()
        yield o


def flow(pid: int, port: int = 80, proto: int = 6) -> dict[str, int]:
    return {"pid": pid, "port": port, "proto": proto}


def test_typed_hash_with_struct_keys_and_values(obj: BPFObject) -> None:
    flows = obj.maps["flows"]
    assert isinstance(flows, MutableMapping)
    key_type, value_type = flows.key_type, flows.value_type
    assert isinstance(key_type, EventDef) and key_type.fields == ["pid", "port", "proto"] and key_type.size == 8
    assert isinstance(value_type, EventDef) and value_type.fields == ["packets", "bytes", "comm"]
    flows[flow(1)] = {"packets": 2, "bytes": 300, "comm": "curl"}
    value = flows[flow(1)]
    assert (value.packets, value.bytes, value.comm) == (2, 300, "curl")
    # The key read back is a record; it finds the same element (padding written as zero).
    (key,) = list(flows)
    assert (key.pid, key.port, key.proto) == (1, 80, 6)
    assert flows[key] == value and key in flows and flow(1) in flows and flow(2) not in flows
    assert flows.raw[struct.pack("<IHBx", 1, 80, 6)][:16] == struct.pack("<QQ", 2, 300)
    flows[key] = value._asdict() | {"packets": 3}  # a mapping with the fields' names
    assert flows[flow(1)].packets == 3
    assert flows.get(flow(9)) is None and flows.get(flow(9), "none") == "none" and flows.lookup(flow(9)) is None
    with pytest.raises(KeyError):
        flows[flow(9)]
    flows.update(flow(2), {"packets": 1}, flags=lib.BPF_NOEXIST)
    with pytest.raises(BPFError) as info:
        flows.update(flow(2), {"packets": 5}, flags=lib.BPF_NOEXIST)
    assert info.value.errno == errno.EEXIST
    with pytest.raises(BPFError) as info:
        flows.update(flow(3), {"packets": 5}, flags=lib.BPF_EXIST)
    assert info.value.errno == errno.ENOENT
    flows.update({key_type.parse(struct.pack("<IHBx", 4, 53, 17)): {"bytes": 8}})  # dict.update's form
    assert len(flows) == 3
    assert sorted(k.pid for k in flows.keys()) == [1, 2, 4]
    assert sorted(v.packets for v in flows.values()) == [0, 1, 3]
    assert {k.pid: v.bytes for k, v in flows.items()} == {1: 300, 2: 0, 4: 8}
    del flows[flow(2)]
    with pytest.raises(KeyError):
        del flows[flow(2)]
    flows.clear()
    assert len(flows) == 0 and list(flows) == []


def test_scalar_maps_and_untyped_maps(obj: BPFObject) -> None:
    counts, untyped = obj.maps["counts"], obj.maps["untyped"]
    assert (counts.key_type, counts.value_type) == ("u32", "u64")
    counts[7] = 2**64 - 1
    assert counts[7] == 2**64 - 1 and counts.raw[7] == b"\xff" * 8
    assert untyped.key_type is None and untyped.value_type is None  # no BTF type: bytes
    untyped[1] = b"abcdefgh"
    assert dict(untyped.items()) == {b"\1\0\0\0": b"abcdefgh"}
    assert untyped[b"\1\0\0\0"] == untyped.raw[1] == b"abcdefgh"


def test_array_maps_have_every_element(obj: BPFObject) -> None:
    slots = obj.maps["slots"]
    assert len(slots) == slots.max_entries == 16
    assert list(slots) == list(range(16)) and slots[3] == 0 and 15 in slots and 16 not in slots
    slots[3] = -42
    assert slots[3] == -42
    with pytest.raises(TypeError, match=r"map 'slots' is an array map: its elements always exist"):
        del slots[3]
    with pytest.raises(TypeError, match="cannot be deleted"):
        slots.delete_batch([3])
    slots.clear()  # zeroed, not removed
    assert slots.lookup_batch() == [(i, 0) for i in range(16)]


def test_per_cpu_values_are_one_per_possible_cpu(obj: BPFObject) -> None:
    bump = obj.programs["bump"]
    online = sorted(os.sched_getaffinity(0))[:2]
    for n, cpu in enumerate(online, 1):
        bump.test_run(ctx=struct.pack("<QQ", 5, 10 * n), cpu=cpu)
    values = obj.maps["pcpu_counts"][5]
    assert isinstance(values, tuple) and len(values) == NCPUS
    assert [values[cpu] for cpu in online] == [10 * n for n in range(1, len(online) + 1)]
    assert sum(values) == sum(10 * n for n in range(1, len(online) + 1))
    array = obj.maps["pcpu_array"]
    assert array[1] == tuple(values[c] if c in online else 0 for c in range(NCPUS))
    per_cpu = tuple(range(100, 100 + NCPUS))
    obj.maps["pcpu_counts"][6] = per_cpu
    assert obj.maps["pcpu_counts"][6] == per_cpu
    assert obj.maps["pcpu_counts"].raw[6] == tuple(struct.pack("<Q", v) for v in per_cpu)
    with pytest.raises(ValueError, match=f"takes {NCPUS} value\\(s\\), one per possible CPU, got 1"):
        obj.maps["pcpu_counts"][6] = [1]
    with pytest.raises(TypeError, match="is per-CPU: its value is a sequence"):
        obj.maps["pcpu_counts"][6] = 1
    # An array's pop_items reads, then zeroes.
    before = array[1]
    assert any(before) and dict(array.pop_items())[1] == before
    assert all(v == (0,) * NCPUS for _, v in array.lookup_batch())


def _fill(m: Any, n: int) -> dict[int, int]:
    data = {i: i * 3 + 1 for i in range(n)}
    m.update_batch(data)
    return data


def test_batches_match_the_per_element_path(obj: BPFObject, monkeypatch: pytest.MonkeyPatch) -> None:
    counts = obj.maps["counts"]
    data = _fill(counts, 600)  # more than one batch call (256 elements each)
    walked = {k: counts[k] for k in counts}
    assert walked == data
    # The batch path is the kernel's: no per-element lookup while it runs.
    with monkeypatch.context() as mp:
        mp.setattr(_libbpf, "bpf_map_lookup_elem", _refuse)
        mp.setattr(_libbpf, "bpf_map_get_next_key", _refuse)
        batched = counts.lookup_batch()
        assert dict(counts.items()) == data
    assert len(batched) == 600 and dict(batched) == data
    # The per-element fallback gives the same, for a map type without batches (faked here).
    with monkeypatch.context() as mp:
        mp.setattr(_libbpf, "bpf_map_lookup_batch", _no_batch)
        mp.setattr(_libbpf, "bpf_map_lookup_and_delete_batch", _no_batch)
        mp.setattr(_libbpf, "bpf_map_update_batch", _no_batch)
        mp.setattr(_libbpf, "bpf_map_delete_batch", _no_batch)
        assert dict(counts.lookup_batch()) == data
        assert counts.delete_batch([*range(0, 600, 2), 5000]) == 300
        assert dict(counts.lookup_batch()) == {k: v for k, v in data.items() if k % 2}
        assert dict(counts.pop_items()) == {k: v for k, v in data.items() if k % 2}
        assert len(counts) == 0
        counts.update_batch({1: 2, 3: 4})
        assert dict(counts.items()) == {1: 2, 3: 4}
    counts.clear()
    # The same through the kernel's batch commands.
    _fill(counts, 600)
    with monkeypatch.context() as mp:
        mp.setattr(_libbpf, "bpf_map_delete_elem", _refuse)
        mp.setattr(_libbpf, "bpf_map_lookup_and_delete_elem", _refuse)
        assert counts.delete_batch([*range(0, 600, 2), 5000]) == 300  # 5000: not there, skipped
        assert dict(counts.lookup_batch()) == {k: v for k, v in data.items() if k % 2}
        popped = counts.pop_items()
    assert dict(popped) == {k: v for k, v in data.items() if k % 2} and len(popped) == 300
    assert len(counts) == 0 and counts.pop_items() == []
    with pytest.raises(BPFError) as info:
        counts.update_batch({i: 0 for i in range(1001)})  # one more than max_entries
    assert info.value.errno == errno.E2BIG
    assert len(counts) == 1000  # the ones before the failing element were written


def _refuse(*args: Any) -> Any:
    raise AssertionError("the per-element path was used")


def _no_batch(*args: Any) -> Any:
    raise BPFError(ENOTSUPP, "Unknown error 524", "faked")


def test_maps_without_batches_take_the_per_element_path(obj: BPFObject) -> None:
    routes = obj.maps["routes"]  # LPM tries have no batch commands
    assert isinstance(routes.key_type, EventDef) and routes.value_type == "u64"
    routes.update_batch([({"prefixlen": 24, "addr": [10, 0, 0, 0]}, 5), ({"prefixlen": 16, "addr": [10, 1]}, 6)])
    expected = {(24, (10, 0, 0, 0)): 5, (16, (10, 1, 0, 0)): 6}
    assert {(k.prefixlen, k.addr): v for k, v in routes.lookup_batch()} == expected
    assert {(k.prefixlen, k.addr): v for k, v in routes.pop_items()} == expected
    assert len(routes) == 0


def test_pop_items_reads_counters_each_interval(obj: BPFObject) -> None:
    counts, pid = obj.maps["counts"], os.getpid()
    links = obj.attach_all()
    try:
        for calls in (3, 5):
            counts.pop_items()  # start of an interval
            for _ in range(calls):
                os.getpid()
            popped = dict(counts.pop_items())
            assert set(popped) == {pid} and popped[pid] >= calls  # this process only (targ_tgid)
            assert pid not in counts  # popped: the next interval starts from zero
    finally:
        for link in links:
            link.destroy()


def test_max_entries_takes_effect_and_is_refused_after_load(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["maps"]) as obj:
        counts = obj.maps["counts"]
        assert counts.max_entries == 8
        obj.load()
        counts.update_batch({i: i for i in range(8)})
        with pytest.raises(BPFError) as info:
            counts[8] = 8
        assert info.value.errno == errno.E2BIG
        with pytest.raises(BPFError, match=r"map 'counts' is already created: max_entries can only be set before"):
            counts.max_entries = 100
        with pytest.raises(BPFError, match=r"value_size can only be set before") as info:
            counts.value_size = 16
        assert info.value.errno == errno.EBUSY
    with BPFObject.open(bpf_objects["maps"]) as obj:
        obj.maps["counts"].max_entries = 100
        obj.maps["untyped"].value_size = 16
        obj.load()
        assert obj.maps["counts"].max_entries == 100 and obj.maps["untyped"].value_size == 16
        obj.maps["counts"].update_batch({i: i for i in range(100)})
        assert len(obj.maps["counts"]) == 100
        obj.maps["untyped"][1] = bytes(range(16))
        assert obj.maps["untyped"][1] == bytes(range(16))
        with pytest.raises(ValueError, match="max_entries must be >= 1, got 0"):
            obj.maps["counts"].max_entries = 0


def test_map_that_cannot_be_created_is_named(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["maps"]) as obj:
        obj.maps["routes"].value_size = 1 << 30  # beyond what an LPM trie takes
        with pytest.raises(LoadError) as info:
            obj.load()
    assert (info.value.stage, info.value.name) == ("map", "routes")
    message = str(info.value)
    assert "map 'routes' could not be created" in message and "failed to create" in message
    assert "verifier log" not in message and "libbpf log" in message


def test_pin_reuse_from_a_second_object_and_unpin(bpf_objects: dict[str, Path], bpffs_dir: Path) -> None:
    path = bpffs_dir / "counts"
    with BPFObject.open(bpf_objects["maps"]) as first:
        first.maps["counts"].pin(path)
        assert first.maps["counts"].pin_path == str(path)
        first.load()
        assert path.exists()
        first.maps["counts"][1] = 11
        with BPFObject.open(bpf_objects["maps"]) as second:
            second.maps["counts"].reuse_pinned(path)
            second.load()
            assert second.maps["counts"][1] == 11  # the same kernel map
            second.maps["counts"][2] = 22
            with pytest.raises(BPFError, match=r"reuse_pinned\(\) can only be set before") as info:
                second.maps["counts"].reuse_pinned(path)
            assert info.value.errno == errno.EBUSY
        assert first.maps["counts"][2] == 22
        with BPFObject.open(bpf_objects["maps"]) as third:
            with pytest.raises(ValueError, match=r"pinned at .* is a hash with 4-byte keys and 8-byte values, "
                                                 r"map 'flows' is a hash with 8-byte keys and 32-byte values"):
                third.maps["flows"].reuse_pinned(path)
        first.maps["counts"].unpin()
        assert not path.exists()
        with pytest.raises(BPFError, match="not pinned"):
            first.maps["slots"].unpin()
        first.maps["slots"].pin(bpffs_dir / "slots")  # after load: pinned at once
        assert (bpffs_dir / "slots").exists()
        first.maps["slots"].unpin()
        assert not (bpffs_dir / "slots").exists()
        with pytest.raises(BPFError, match="not on BPF FS") as info:
            first.maps["slots"].pin("/tmp/pylibbpf-not-bpffs")
        assert info.value.errno == errno.EINVAL
    with BPFObject.open(bpf_objects["maps"]) as obj:
        with pytest.raises(BPFError) as info:
            obj.maps["counts"].reuse_pinned(bpffs_dir / "nothing-here")
        assert info.value.errno == errno.ENOENT
        obj.maps["counts"].pin(bpffs_dir / "later")
        obj.maps["counts"].unpin()  # before load: forget the path
        assert obj.maps["counts"].pin_path is None
        obj.load()
        assert not (bpffs_dir / "later").exists()


def test_stack_trace_map(obj: BPFObject) -> None:
    links = obj.attach_all()
    try:
        os.getpid()
    finally:
        for link in links:
            link.destroy()
    stacks = obj.maps["stacks"]
    stack_id = obj.globals["last_stack_id"]
    assert stack_id >= 0
    frames = stacks.stack(stack_id)
    assert frames and all(addr >= 0xFFFF800000000000 for addr in frames)  # kernel addresses, no trailing 0
    assert len(frames) <= stacks.value_size // 8
    missing = next(i for i in range(64) if i not in set(stacks))
    with pytest.raises(KeyError):
        stacks.stack(missing)
    with pytest.raises(ValueError, match=r"stack_id -14 is an error from bpf_get_stackid\(\): EFAULT"):
        stacks.stack(-14)
    with pytest.raises(TypeError, match="map 'counts' is hash, not stack_trace"):
        obj.maps["counts"].stack(0)


def test_rings_have_no_elements(obj: BPFObject) -> None:
    for name, reader in (("rb", "RingBuffer"), ("perf", "PerfBuffer")):
        m = obj.maps[name]
        accesses = (lambda m: m[0], lambda m: m.lookup_batch(), lambda m: list(m), lambda m: m.update(0, b""))
        for access in accesses:
            with pytest.raises(TypeError, match=f"map '{name}' is a .* map: it has no elements .*{reader}"):
                access(m)


def test_bad_keys_and_values_name_what_is_wrong(obj: BPFObject) -> None:
    flows, counts = obj.maps["flows"], obj.maps["counts"]
    with pytest.raises(TypeError, match=r"map 'counts' key \(u32\) must be an int, got 'x'"):
        counts["x"]
    with pytest.raises(ValueError, match=r"map 'counts' key \(u32\) must be <= 4294967295, got 4294967296"):
        counts[2**32] = 1
    with pytest.raises(ValueError, match=r"map 'counts' value \(u64\) must be >= 0, got -1"):
        counts[1] = -1
    with pytest.raises(ValueError, match=r"value 70000 out of range for field 'port'"):
        flows[flow(1, port=70000)] = {}
    with pytest.raises(ValueError, match=r"field 'comm' holds 16 bytes, got 17"):
        flows[flow(1)] = {"comm": "x" * 17}
    with pytest.raises(TypeError, match=r"map 'flows' key \(struct tflow_key\) must be a record or a mapping"):
        flows[1] = {}
    with pytest.raises(TypeError, match="update takes \\(key, value\\) or one mapping"):
        counts.update(1, 2, 3, 4)
    with pytest.raises(ValueError, match="flags must be <= "):
        counts.update(1, 2, flags=2**64)
    with pytest.raises(TypeError, match="keys must be an iterable of keys, got bytes"):
        obj.maps["untyped"].delete_batch(b"\0\0\0\0")


def test_use_before_load_and_after_close(bpf_objects: dict[str, Path]) -> None:
    obj = BPFObject.open(bpf_objects["maps"])
    counts = obj.maps["counts"]
    assert ffi.string(lib.bpf_map__name(counts.c_ptr)) == b"counts"  # the C handle, for raw libbpf calls
    assert ffi.string(lib.bpf_object__name(obj.c_ptr)) == b"maps"
    with pytest.raises(BPFError, match=r"not created: call BPFObject\.load"):
        counts[1]
    obj.close()
    for action in (lambda: counts[1], lambda: counts.c_ptr, lambda: obj.c_ptr, lambda: counts.lookup_batch(),
                   lambda: obj.globals["targ_tgid"], lambda: counts.pin("/sys/fs/bpf/x")):
        with pytest.raises(ClosedError):
            action()
