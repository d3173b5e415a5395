"""The event DSL (pylibbpf.events): layouts, parsing, serializing, handlers. No kernel needed."""

from __future__ import annotations

import array
import pickle
import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pylibbpf.events import (
    TYPES,
    EventDef,
    EventRecord,
    UnknownFieldError,
    defevent,
    make_event_def,
    make_event_handler,
    make_event_parser,
    make_event_serializer,
)

SEED_SPECS: list[Any] = [
    ("timestamp", "u64"),
    ("pid", "u32"),
    ("saddr", "u32"),
    ("daddr", "u32"),
    ("sport", "u16"),
    ("dport", "u16"),
    ("protocol", "u8"),
    ("direction", "u8"),
    ("padding", "u8", 2),
    ("comm", "char", 16),
]

ConnectionEvent = defevent("ConnectionEvent", *SEED_SPECS)

ELEM_SIZE = {"u8": 1, "i8": 1, "u16": 2, "i16": 2, "u32": 4, "i32": 4}
ELEM_SIZE |= {"u64": 8, "i64": 8, "ptr": 8, "char": 1}


def type_range(type_name: str) -> tuple[int, int]:
    bits = 8 * ELEM_SIZE[type_name]
    if type_name.startswith("i"):
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


# -- the seed's examples ----------------------------------------------------------


def test_seed_connection_event_layout() -> None:
    assert ConnectionEvent.name == "ConnectionEvent"
    assert ConnectionEvent.size == 44
    assert ConnectionEvent.offset("pid") == 8
    assert ConnectionEvent.field_size("comm") == 16
    assert ConnectionEvent.field_type("pid") == "u32"
    assert ConnectionEvent.field_count("padding") == 2
    assert ConnectionEvent.field_count("pid") == 1
    assert ConnectionEvent.fields == [s[0] for s in SEED_SPECS]
    assert ConnectionEvent.layout == "packed"


def test_make_event_def_equals_defevent() -> None:
    assert make_event_def("ConnectionEvent", SEED_SPECS) == ConnectionEvent
    assert hash(make_event_def("ConnectionEvent", SEED_SPECS)) == hash(ConnectionEvent)
    assert make_event_def("Other", SEED_SPECS) != ConnectionEvent


def test_seed_parser_and_serializer() -> None:
    buf = struct.pack("<IQI", 123, 456789, 42)
    assert make_event_parser(["u32", "u64", "u32"])(buf) == (123, 456789, 42)
    assert make_event_serializer(["u32", "u64", "u32"])((123, 456789, 42)) == buf


def test_positional_spec_with_arrays() -> None:
    spec = ["u16", ("char", 4), ("i8", 3)]
    data = make_event_serializer(spec)((7, "ab", (-1, 2)))
    assert data == struct.pack("<H4s3b", 7, b"ab", -1, 2, 0)
    assert make_event_parser(spec)(data) == (7, "ab", (-1, 2, 0))


def test_positional_serializer_errors() -> None:
    ser = make_event_serializer(["u8", "u8"])
    with pytest.raises(ValueError, match="2 fields, got 1 values"):
        ser((1,))
    with pytest.raises(ValueError, match=r"value 256 out of range for field 'f1'"):
        ser((1, 256))
    with pytest.raises(ValueError, match=r"item #1 must be a type name"):
        make_event_parser(["u8", 5])
    with pytest.raises(ValueError, match="unknown type 'u128'"):
        make_event_parser(["u128"])


# -- layout="c" ---------------------------------------------------------------------


def test_c_layout_seed_by_hand() -> None:
    c = make_event_def("ConnectionEvent", SEED_SPECS, layout="c")
    assert c.size == 48  # 44 bytes of fields, tail-padded to the u64's alignment
    assert [c.offset(f) for f in c.fields] == [0, 8, 12, 16, 20, 22, 24, 25, 26, 28]


def test_c_layout_inserts_padding() -> None:
    e = defevent("E", ("a", "u8"), ("b", "u64"), ("c", "u16"), ("d", "char", 3), layout="c")
    assert [e.offset(f) for f in e.fields] == [0, 8, 16, 18]
    assert e.size == 24
    p = defevent("E", ("a", "u8"), ("b", "u64"), ("c", "u16"), ("d", "char", 3))
    assert [p.offset(f) for f in p.fields] == [0, 1, 9, 11]
    assert p.size == 14


C_TYPES = {
    "u8": "unsigned char",
    "i8": "signed char",
    "u16": "unsigned short",
    "i16": "short",
    "u32": "unsigned int",
    "i32": "int",
    "u64": "unsigned long long",
    "i64": "long long",
    "char": "char",
    "ptr": "void *",
}


def _random_specs(rng: random.Random) -> list[tuple[str, str, int]]:
    return [(f"f{i}", rng.choice(TYPES), rng.choice([1, 1, 1, 2, 3, 5])) for i in range(rng.randint(1, 9))]


def test_layouts_match_the_c_compiler(tmp_path: Path) -> None:
    """Compile each definition as a C struct (natural and packed) and compare sizeof/offsetof."""
    cc = shutil.which("cc")
    assert cc is not None, "a C compiler (cc) is needed for this test"
    rng = random.Random(20240601)
    seed = [(s[0], s[1], s[2] if len(s) == 3 else 1) for s in SEED_SPECS]
    defs: list[list[tuple[str, str, int]]] = [seed]
    defs += [_random_specs(rng) for _ in range(40)]
    lines = ["#include <stdio.h>", "#include <stddef.h>"]
    body = []
    for k, specs in enumerate(defs):
        members = " ".join(f"{C_TYPES[t]} {n}{f'[{c}]' if c > 1 else ''};" for n, t, c in specs)
        for tag, attr in (("c", ""), ("p", " __attribute__((packed))")):
            lines.append(f"struct {tag}{k} {{ {members} }}{attr};")
            offs = " ".join(f'printf(" %zu", offsetof(struct {tag}{k}, {n}));' for n, _, _ in specs)
            body.append(f'printf("{tag}{k} %zu", sizeof(struct {tag}{k})); {offs} printf("\\n");')
    lines.append("int main(void) {")
    lines += body
    lines.append("return 0; }")
    src = tmp_path / "layouts.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "layouts"
    subprocess.run([cc, "-std=c11", "-o", str(exe), str(src)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    answers = {line.split()[0]: [int(x) for x in line.split()[1:]] for line in out.splitlines()}
    for k, specs in enumerate(defs):
        for tag, layout in (("c", "c"), ("p", "packed")):
            e = make_event_def(f"S{k}", specs, layout=layout)
            got = [e.size] + [e.offset(n) for n, _, _ in specs]
            assert got == answers[f"{tag}{k}"], (layout, specs)


# -- parsing ----------------------------------------------------------------------


def _seed_bytes(comm: bytes = b"curl\0junk") -> bytes:
    return struct.pack("<QIIIHHBB2s16s", 10**12, 4242, 0x0100007F, 0x0200007F, 5555, 443, 6, 1, b"\1\2", comm)


def test_parse_record() -> None:
    rec = ConnectionEvent.parse(_seed_bytes())
    assert isinstance(rec, EventRecord)
    assert isinstance(rec, ConnectionEvent.record_type)
    assert rec.timestamp == 10**12
    assert rec.pid == 4242
    assert rec.dport == 443
    assert rec.padding == (1, 2)
    assert rec.comm == "curl"  # cut at the first NUL
    assert rec._asdict()["saddr"] == 0x0100007F
    assert list(rec._asdict()) == ConnectionEvent.fields
    assert repr(rec).startswith("ConnectionEvent(timestamp=1000000000000, pid=4242,")


def test_parse_raw_chars() -> None:
    rec = ConnectionEvent.parse(_seed_bytes(), raw_chars=True)
    assert rec.comm == b"curl\0junk".ljust(16, b"\0")


def test_parse_invalid_utf8_is_replaced() -> None:
    rec = ConnectionEvent.parse(_seed_bytes(b"a\xffb"))
    assert rec.comm == "a\ufffdb"


def test_parse_accepts_buffer_types() -> None:
    data = _seed_bytes()
    expected = ConnectionEvent.parse(data)
    assert ConnectionEvent.parse(bytearray(data)) == expected
    assert ConnectionEvent.parse(memoryview(data)) == expected
    assert ConnectionEvent.parse(memoryview(data).cast("I")) == expected
    assert ConnectionEvent.parse(array.array("I", data)) == expected


def test_parse_accepts_longer_buffers() -> None:
    data = _seed_bytes()
    assert ConnectionEvent.parse(data + b"\xff" * 4) == ConnectionEvent.parse(data)


def test_parse_rejects_short_buffers() -> None:
    with pytest.raises(ValueError, match=r"'ConnectionEvent' needs 44 bytes, buffer has 40"):
        ConnectionEvent.parse(_seed_bytes()[:40])
    with pytest.raises(ValueError, match=r"needs 16 bytes, buffer has 15"):
        make_event_parser(["u32", "u64", "u32"])(b"\0" * 15)


def test_parse_rejects_non_buffers() -> None:
    with pytest.raises(TypeError, match=r"'ConnectionEvent': cannot parse str"):
        ConnectionEvent.parse("x" * 44)


def test_record_pickles_with_its_definition() -> None:
    rec = ConnectionEvent.parse(_seed_bytes())
    back = pickle.loads(pickle.dumps(rec))
    assert back == rec
    assert back.comm == "curl"
    assert pickle.loads(pickle.dumps(ConnectionEvent)) == ConnectionEvent


# -- serializing --------------------------------------------------------------------


def test_serialize_inverse_of_parse() -> None:
    data = _seed_bytes(b"curl")
    rec = ConnectionEvent.parse(data)
    assert ConnectionEvent.serialize(rec) == data
    assert ConnectionEvent.serialize(rec._asdict()) == data


def test_serialize_missing_fields_are_zero() -> None:
    data = ConnectionEvent.serialize({"pid": 7, "padding": [9]})
    assert len(data) == 44
    rec = ConnectionEvent.parse(data)
    assert rec.pid == 7
    assert rec.padding == (9, 0)
    assert rec.timestamp == 0
    assert rec.comm == ""


def test_serialize_bytes_and_full_length_chars() -> None:
    rec = ConnectionEvent.parse(ConnectionEvent.serialize({"comm": b"x" * 16}))
    assert rec.comm == "x" * 16  # no NUL terminator needed


@pytest.mark.parametrize(
    ("values", "exc", "pattern"),
    [
        (
            {"pid": -1},
            ValueError,
            r"value -1 out of range for field 'pid' \(u32: 0\.\.4294967295\)",
        ),
        ({"pid": 1 << 32}, ValueError, r"out of range for field 'pid'"),
        ({"protocol": 256}, ValueError, r"value 256 out of range for field 'protocol'"),
        ({"pid": "7"}, TypeError, r"field 'pid' \(u32\) needs an int, got str"),
        ({"pid": 1.5}, TypeError, r"field 'pid' \(u32\) needs an int, got float"),
        ({"comm": "x" * 17}, ValueError, r"field 'comm' holds 16 bytes, got 17"),
        ({"comm": "é" * 9}, ValueError, r"field 'comm' holds 16 bytes, got 18"),
        ({"comm": 5}, TypeError, r"field 'comm' \(char\[16\]\) needs str or bytes, got int"),
        ({"padding": [1, 2, 3]}, ValueError, r"field 'padding' holds 2 items, got 3"),
        ({"padding": "ab"}, TypeError, r"field 'padding' \(u8\[2\]\) needs a sequence of ints"),
        ({"padding": [1, 300]}, ValueError, r"value 300 out of range for field 'padding'"),
        ({"pidd": 1}, UnknownFieldError, r"'ConnectionEvent' has no field 'pidd'"),
    ],
)
def test_serialize_errors_name_the_field(values: dict[str, Any], exc: type[Exception], pattern: str) -> None:
    with pytest.raises(exc, match=pattern):
        ConnectionEvent.serialize(values)


def test_serialize_rejects_non_mappings() -> None:
    with pytest.raises(TypeError, match="needs a mapping or record, got list"):
        ConnectionEvent.serialize([1, 2])  # type: ignore[arg-type]


def test_signed_ranges() -> None:
    e = defevent("S", ("a", "i8"), ("b", "i64"))
    assert e.parse(e.serialize({"a": -128, "b": -(1 << 63)})) == (-128, -(1 << 63))
    with pytest.raises(ValueError, match="value 128 out of range for field 'a'"):
        e.serialize({"a": 128})


# -- property tests ---------------------------------------------------------------

_chars = st.characters(codec="utf-8", exclude_characters="\x00")


def _fit_utf8(text: str, limit: int) -> str:
    while len(text.encode("utf-8")) > limit:
        text = text[:-1]
    return text


def _value(type_name: str, count: int) -> st.SearchStrategy[Any]:
    if type_name == "char":
        return st.text(_chars, max_size=count).map(lambda s: _fit_utf8(s, count))
    lo, hi = type_range(type_name)
    scalar = st.integers(lo, hi)
    if count == 1:
        return scalar
    return st.tuples(*[scalar] * count)


_field_shapes = st.lists(
    st.tuples(st.sampled_from(TYPES), st.sampled_from([1, 1, 2, 3, 8])), min_size=1, max_size=8
)


@st.composite
def _defs(draw: st.DrawFn) -> EventDef:
    shapes = draw(_field_shapes)
    layout = draw(st.sampled_from(["packed", "c"]))
    return make_event_def("Rand", [(f"f{i}", t, c) for i, (t, c) in enumerate(shapes)], layout)


@st.composite
def _def_and_values(draw: st.DrawFn) -> tuple[EventDef, tuple[Any, ...]]:
    e = draw(_defs())
    infos = e.field_infos
    return e, tuple(draw(_value(f.type, f.count)) for f in infos)


@settings(max_examples=300, deadline=None)
@given(_def_and_values())
def test_parse_inverts_serialize(case: tuple[EventDef, tuple[Any, ...]]) -> None:
    e, values = case
    data = e.serialize(dict(zip(e.fields, values)))
    assert len(data) == e.size
    assert tuple(e.parse(data)) == values
    assert e.parse(data + b"\x55" * 7) == e.parse(data)


def _padding_mask(e: EventDef) -> bytes:
    mask = bytearray(e.size)
    for f in e.field_infos:
        mask[f.offset : f.offset + f.size] = b"\xff" * f.size
    return bytes(mask)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_serialize_inverts_raw_parse(data: st.DataObject) -> None:
    e = data.draw(_defs())
    buf = data.draw(st.binary(min_size=e.size, max_size=e.size))
    expected = bytes(b & m for b, m in zip(buf, _padding_mask(e)))
    assert e.serialize(e.parse(buf, raw_chars=True)) == expected


# -- numpy ---------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_parse_many_matches_parse(data: st.DataObject) -> None:
    np = pytest.importorskip("numpy")
    e = data.draw(_defs())
    count = data.draw(st.integers(0, 5))
    stride = e.size + data.draw(st.sampled_from([0, 0, 3, 8]))
    buf = data.draw(st.binary(min_size=count * stride, max_size=count * stride))
    arr = e.parse_many(buf, count, stride=stride)
    assert arr.dtype == e.numpy_dtype()
    assert arr.dtype.itemsize == e.size
    assert len(arr) == count
    for k in range(count):
        rec = e.parse(buf[k * stride :], raw_chars=True)
        for f in e.field_infos:
            got = arr[f.name][k]
            want = getattr(rec, f.name)
            if f.type == "char":
                assert got == want.rstrip(b"\0")  # numpy's S type drops trailing NULs
            elif f.count > 1:
                assert tuple(int(x) for x in got) == want
            else:
                assert int(got) == want
    assert isinstance(arr, np.ndarray)


def test_parse_many_defaults_and_errors() -> None:
    pytest.importorskip("numpy")
    one = _seed_bytes(b"curl")
    padded = one + b"\0" * 4  # records padded to 48 bytes, as a batch may
    arr = ConnectionEvent.parse_many(padded * 2 + one, stride=48)
    assert len(arr) == 3
    assert arr["comm"].tolist() == [b"curl"] * 3
    assert arr["pid"].tolist() == [4242] * 3
    assert len(ConnectionEvent.parse_many(one * 3 + b"\0" * 43)) == 3
    assert len(ConnectionEvent.parse_many(b"")) == 0
    with pytest.raises(ValueError, match=r"'ConnectionEvent': 2 events with stride 48 need 92 bytes"):
        ConnectionEvent.parse_many(padded, 2, stride=48)
    with pytest.raises(ValueError, match=r"stride 40 is smaller than the event \(44\)"):
        ConnectionEvent.parse_many(one, 1, stride=40)
    with pytest.raises(ValueError, match="count must not be negative"):
        ConnectionEvent.parse_many(one, -1)


def test_parse_many_copies_the_input() -> None:
    pytest.importorskip("numpy")
    buf = bytearray(_seed_bytes())
    arr = ConnectionEvent.parse_many(buf, 1)
    buf[8:12] = b"\0\0\0\0"
    assert int(arr["pid"][0]) == 4242


def test_numpy_dtype_of_explicit_layout() -> None:
    pytest.importorskip("numpy")
    e = EventDef.from_layout("sockaddr_ev", [("addr.sin_port", "u16", 1, 2), ("pid", "u32", 1, 8)], 16)
    dt = e.numpy_dtype()
    assert dt.itemsize == 16
    assert dt.fields["addr.sin_port"][1] == 2
    assert dt.fields["pid"][1] == 8
    assert e.numpy_dtype(itemsize=24).itemsize == 24


def test_numpy_missing_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "numpy", None)
    with pytest.raises(ImportError, match=r"EventDef\.parse_many needs numpy"):
        ConnectionEvent.parse_many(_seed_bytes(), 1)
    with pytest.raises(ImportError, match="numpy"):
        # A definition whose dtype was never made (an event keeps its dtype once made).
        defevent("NoNumpy", ("x", "u32")).numpy_dtype()


def test_numpy_dtype_is_made_once_per_event() -> None:
    e = defevent("Once", ("a", "u64"), ("b", "u32"))
    dt = e.numpy_dtype()
    assert e.numpy_dtype() is dt and e.numpy_dtype(itemsize=12) is dt
    wider = e.numpy_dtype(itemsize=16)
    assert wider.itemsize == 16 and wider is not dt and e.numpy_dtype() is dt


# -- explicit layouts (BTF) ------------------------------------------------------


def test_from_layout_dotted_names() -> None:
    e = EventDef.from_layout(
        "conn",
        [("pid", "u32", 1, 0), ("addr.sin_port", "u16", 1, 6), ("addr.sin_family", "u16", 1, 4)],
        12,
    )
    assert e.layout == "btf"
    assert e.fields == ["pid", "addr.sin_family", "addr.sin_port"]  # ordered by offset
    data = e.serialize({"pid": 1, "addr.sin_port": 80, "addr_sin_family": 2})
    assert data == struct.pack("<IHH4x", 1, 2, 80)
    rec = e.parse(data)
    assert rec.addr_sin_port == 80
    assert rec._asdict() == {"pid": 1, "addr.sin_family": 2, "addr.sin_port": 80}


def test_attribute_names_avoid_keywords_and_own_names() -> None:
    e = EventDef.from_layout("kw", [("from", "u8", 1, 0), ("count", "u8", 1, 1), ("_fields", "u8", 1, 2)], 3)
    rec = e.parse(b"\1\2\3")
    assert (rec.from_, rec.count, rec._fields_) == (1, 2, 3)
    assert rec._fields == ("from", "count", "_fields")
    assert e.serialize({"from_": 1, "count": 2, "_fields": 3}) == b"\1\2\3"


def test_fields_named_like_tuple_and_dict_methods_return_their_values() -> None:
    assert defevent("E", ("count", "u32")).parse(b"\5\0\0\0").count == 5
    names = ("count", "index", "items", "keys", "values", "get", "copy", "pop", "update")
    e = defevent("M", *[(n, "u8") for n in names])
    rec = e.parse(bytes(range(1, len(names) + 1)))
    assert [getattr(rec, n) for n in names] == list(range(1, len(names) + 1))
    assert rec._asdict() == dict(zip(names, range(1, len(names) + 1)))
    assert tuple(rec).count(3) == 1  # the tuple method stays reachable through tuple()
    assert e.serialize(rec) == bytes(range(1, len(names) + 1))


def test_partial_parse_of_a_shorter_trailing_array() -> None:
    exec_event = defevent("X", ("pid", "u32"), ("args_size", "u32"), ("args", "char", 16))
    sample = struct.pack("<II", 7, 9) + b"ls\0-l\0/tmp"
    with pytest.raises(ValueError, match=r"event 'X' needs 24 bytes, buffer has 18"):
        exec_event.parse(sample)
    rec = exec_event.parse(sample, partial=True)
    assert (rec.pid, rec.args_size, rec.args) == (7, 9, "ls")
    assert exec_event.parse(sample, partial=True, raw_chars=True).args == b"ls\0-l\0/tmp"
    full = sample.ljust(24, b"\0")
    assert exec_event.parse(full, partial=True) == exec_event.parse(full)
    ints = defevent("I", ("n", "u32"), ("v", "u16", 4))
    assert ints.parse(struct.pack("<IHH", 2, 10, 20) + b"\1", partial=True).v == (10, 20)  # whole elements
    assert ints.parse(struct.pack("<I", 0), partial=True).v == ()
    with pytest.raises(ValueError, match=r"event 'I' needs 4 bytes, buffer has 3"):
        ints.parse(b"\0\0\0", partial=True)  # the fields before the array must be there
    with pytest.raises(ValueError, match=r"event 'S' needs 8 bytes, buffer has 6"):
        defevent("S", ("a", "u32"), ("b", "u32")).parse(bytes(6), partial=True)  # no trailing array
    with pytest.raises(TypeError, match="need a bytes-like object"):
        ints.parse(5, partial=True)


def test_from_layout_errors() -> None:
    with pytest.raises(ValueError, match=r"field 'b' at offset 2 overlaps field 'a'"):
        EventDef.from_layout("ov", [("a", "u32", 1, 0), ("b", "u8", 1, 2)], 8)
    with pytest.raises(ValueError, match=r"field 'a' at offset 6 with size 4 does not fit in 8"):
        EventDef.from_layout("oob", [("a", "u32", 1, 6)], 8)
    with pytest.raises(ValueError, match=r"field 'a' at offset -1"):
        EventDef.from_layout("neg", [("a", "u8", 1, -1)], 8)
    with pytest.raises(ValueError, match="size must be >= 1, got 0"):
        EventDef.from_layout("z", [("a", "u8", 1, 0)], 0)
    with pytest.raises(ValueError, match=r"fields 'a\.b' and 'a_b' map to the same attribute 'a_b'"):
        EventDef.from_layout("col", [("a.b", "u8", 1, 0), ("a_b", "u8", 1, 1)], 2)
    with pytest.raises(ValueError, match=r"layout row #0 must be \(field, type, count, offset\)"):
        EventDef.from_layout("bad", [("a", "u8", 1)], 2)  # type: ignore[list-item]


# -- bad definitions -----------------------------------------------------------


@pytest.mark.parametrize(
    ("specs", "exc", "pattern"),
    [
        ([("a", "u128")], ValueError, r"unknown type 'u128' for field 'a'"),
        ([("a", "u32"), ("a", "u8")], ValueError, r"duplicate field name 'a'"),
        ([("", "u8")], ValueError, r"field #0 has an empty name"),
        ([("a", "u8"), ("b c", "u8")], ValueError, r"field name 'b c' is not a C identifier"),
        ([("a", "u8", 0)], ValueError, r"count of field 'a' must be >= 1, got 0"),
        ([("a", "u8", -3)], ValueError, r"count of field 'a' must be >= 1, got -3"),
        ([("a", "u8", "2")], TypeError, r"count of field 'a' must be an int"),
        ([("a",)], ValueError, r"field #0 must be \(name, type\) or \(name, type, count\)"),
        (["a"], ValueError, r"field #0 must be"),
        ([(1, "u8")], TypeError, r"field #0 name must be a str"),
        ([], ValueError, r"event 'E' has no fields"),
    ],
)
def test_bad_definitions(specs: list[Any], exc: type[Exception], pattern: str) -> None:
    with pytest.raises(exc, match=pattern):
        make_event_def("E", specs)


def test_bad_event_name_and_layout() -> None:
    with pytest.raises(ValueError, match="event name must not be empty"):
        defevent("", ("a", "u8"))
    with pytest.raises(ValueError, match="unknown layout 'aligned'"):
        defevent("E", ("a", "u8"), layout="aligned")


def test_unknown_field_lookups() -> None:
    for lookup in (
        ConnectionEvent.offset,
        ConnectionEvent.field_size,
        ConnectionEvent.field_type,
        ConnectionEvent.field_count,
    ):
        with pytest.raises(UnknownFieldError, match=r"'ConnectionEvent' has no field 'uid'"):
            lookup("uid")
    with pytest.raises(KeyError):
        ConnectionEvent.offset("uid")
    with pytest.raises(ValueError):
        ConnectionEvent.offset("uid")


def test_event_def_is_immutable() -> None:
    with pytest.raises(AttributeError, match="immutable"):
        ConnectionEvent.size = 3  # type: ignore[misc]
    fields = ConnectionEvent.fields
    fields.append("x")
    assert "x" not in ConnectionEvent.fields
    rec = ConnectionEvent.parse(_seed_bytes())
    with pytest.raises(AttributeError):
        rec.pid = 1  # type: ignore[attr-defined]


def test_repr_lists_fields() -> None:
    text = repr(ConnectionEvent)
    assert "size=44" in text
    assert "pid:u32@8" in text
    assert "comm:char[16]@28" in text


# -- handlers -------------------------------------------------------------------


def test_handler_pipeline() -> None:
    seen: list[Any] = []

    def handler(ev: Any) -> str:
        seen.append(ev)
        return "handled"

    handle = make_event_handler(
        parser=ConnectionEvent,
        filter=lambda ev: ev.dport == 443,
        transform=lambda ev: (ev.pid, ev.comm),
        handler=handler,
    )
    assert handle(_seed_bytes()) == "handled"
    assert seen == [(4242, "curl")]
    other = ConnectionEvent.serialize({"dport": 80})
    assert handle(other) is None
    assert len(seen) == 1


def test_handler_defaults_and_callable_parser() -> None:
    assert make_event_handler(handler=len)(b"abc") == 3
    parse = make_event_parser(["u32", "u64", "u32"])
    h = make_event_handler(parser=parse, handler=lambda t: t[2])
    assert h(struct.pack("<IQI", 1, 2, 3)) == 3


def test_handler_errors_propagate_and_bad_arguments() -> None:
    def boom(ev: Any) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        make_event_handler(handler=boom)(b"")
    with pytest.raises(TypeError, match="handler must be callable"):
        make_event_handler(handler=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="parser must be an EventDef or callable"):
        make_event_handler(handler=print, parser=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="filter must be callable"):
        make_event_handler(handler=print, filter=True)  # type: ignore[arg-type]
