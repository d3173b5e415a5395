"""EventDef.parse's raw_chars (a bool or a set of char fields) and the input it refuses by name."""

from __future__ import annotations

import pytest

from pylibbpf import defevent

E = defevent("E", ("pid", "u32"), ("comm", "char", 8), ("path", "char", 6))
BUF = E.serialize({"pid": 7, "comm": "sh", "path": "/tmp"})


def test_raw_chars_takes_a_set_of_char_fields() -> None:
    assert E.parse(BUF, raw_chars={"comm"}) == (7, b"sh" + bytes(6), "/tmp")
    assert E.parse(BUF, raw_chars=frozenset({"path"})) == (7, "sh", b"/tmp\0\0")
    assert E.parse(BUF, raw_chars=set()) == E.parse(BUF) == (7, "sh", "/tmp")
    assert E.parse(BUF, raw_chars=True) == (7, b"sh" + bytes(6), b"/tmp\0\0")


def test_raw_chars_set_applies_to_a_partial_record() -> None:
    short = BUF[:E.offset("path") + 3]  # the trailing char array cut short
    assert E.parse(short, partial=True, raw_chars={"path"}).path == b"/tm"
    assert E.parse(short, partial=True, raw_chars={"comm"}).path == "/tm"


def test_raw_chars_refuses_what_is_not_a_char_field() -> None:
    with pytest.raises(ValueError, match=r"raw_chars names 'pid', which is not a char field "
                                         r"\(char fields: comm, path\)"):
        E.parse(BUF, raw_chars={"pid"})
    with pytest.raises(ValueError, match=r"raw_chars names 'nope'"):
        E.parse(BUF, raw_chars={"nope"})
    with pytest.raises(TypeError, match=r"raw_chars must be a bool or a set of field names, got 'comm' \(str\)"):
        E.parse(BUF, raw_chars="comm")  # type: ignore[arg-type]


def test_a_strided_view_is_refused_by_name_not_with_buffer_error() -> None:
    view = memoryview(bytearray(2 * E.size))[::2]
    for partial in (False, True):
        with pytest.raises(TypeError, match=r"event 'E': cannot parse a non-contiguous buffer"):
            E.parse(view, partial=partial)


def test_a_lone_surrogate_names_the_field() -> None:
    with pytest.raises(ValueError,
                       match=r"field 'comm' \(char\[8\]\) cannot be encoded as UTF-8: '\\ud800' at position 1"):
        E.serialize({"comm": "a\ud800"})
