"""Event layouts read from BTF equal what the compiler laid out (emitted by the program itself)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from pylibbpf import BPFObject
from pylibbpf.events import EventDef

pytestmark = pytest.mark.usefixtures("bpf_privileged")

# The order of layout_info[] in tests/bpf/layout.bpf.c.
LAYOUT_INFO = ["sizeof", "ts", "pid", "ports.sport", "ports.dport", "addr", "comm", "kind", "ptr",
               "matrix", "pairs.0.tag", "pairs.0.value", "pairs.1.tag", "pairs.1.value", "last"]


def compiled_layout(obj: BPFObject) -> dict[str, int]:
    rodata = next(m for name, m in obj.maps.items() if name.endswith(".rodata"))
    raw = rodata.lookup(0)
    assert isinstance(raw, bytes)
    values = struct.unpack_from(f"<{len(LAYOUT_INFO)}Q", raw)
    return dict(zip(LAYOUT_INFO, values))


def test_btf_struct_matches_sizeof_and_offsetof(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["layout"]) as obj:
        obj.load()
        expected = compiled_layout(obj)
        ev = obj.btf_struct("layout_event")
        assert ev.size == expected["sizeof"]
        for field, offset in expected.items():
            if field == "sizeof":
                continue
            name = "addr.v4" if field == "addr" else field
            assert ev.offset(name) == offset, name
        assert ev.field_type("pid") == "u32"             # through the typedef
        assert ev.field_type("kind") == "u32"            # an enum of 4 bytes
        assert ev.field_type("ptr") == "ptr"
        assert (ev.field_type("comm"), ev.field_count("comm")) == ("char", 16)
        assert (ev.field_type("matrix"), ev.field_count("matrix")) == ("i16", 6)
        assert ev.field_type("pairs.1.value") == "i64"


def test_btf_struct_round_trips_a_record(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["layout"]) as obj:
        ev = obj.btf_struct("layout_event")
        assert EventDef.from_btf(obj, "layout_event") == ev
        rec = ev.parse(ev.serialize({"ts": 5, "pid": 42, "comm": "bash", "pairs.1.value": -3}))
        assert (rec.ts, rec.pid, rec.comm, rec.pairs_1_value) == (5, 42, "bash", -3)


def test_bitfields_and_unknown_structs_are_refused(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["layout"]) as obj:
        with pytest.raises(ValueError, match="member 'low' is a bitfield"):
            obj.btf_struct("layout_bitfield")
        with pytest.raises(KeyError, match="no struct named 'nope'"):
            obj.btf_struct("nope")


def test_a_missing_struct_says_why_and_how_to_keep_it(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["layout"]) as obj:
        with pytest.raises(KeyError) as info:
            obj.btf_struct("unused_event")
    message = info.value.args[0]
    assert message.startswith("no struct named 'unused_event' in the BTF of object 'layout'")
    assert "keeps only the types reached from a global variable, a map or a function signature" in message
    assert "struct unused_event *keep_unused_event __attribute__((unused));" in message
    assert "PLB_KEEP_STRUCT(unused_event);" in message
    assert "__type(value, struct unused_event)" in message and "pylibbpf inspect" in message
    assert "known: " in message and "layout_event" in message
