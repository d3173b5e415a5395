"""A failed load says what failed (a map or a program) and leaves the object in a state that says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from pylibbpf import BPFObject, LoadError, lib

pytestmark = pytest.mark.usefixtures("bpf_privileged")


def test_a_map_creation_failure_reads_as_one(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["rejected"]) as obj:
        # A 0-byte key: the kernel refuses to create the map (EINVAL), before any program is loaded.
        raw_map = lib.bpf_object__find_map_by_name(obj._ptr, b"values")
        assert lib.bpf_map__set_key_size(raw_map, 0) == 0
        with pytest.raises(LoadError) as info:
            obj.load()
        err = info.value
        assert err.errno == 22
        assert (err.stage, err.name) == ("map", "values")
        text = str(err)
        assert text.splitlines()[0].endswith("map 'values' could not be created")
        assert "verifier log" not in text and "--- libbpf log (tail) ---" in text
        assert repr(obj) == "<BPFObject 'rejected' load failed>"
        assert not obj.loaded
    assert repr(obj) == "<BPFObject 'rejected' closed>"


def test_a_verifier_rejection_names_the_program(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["rejected"]) as obj:
        assert repr(obj) == "<BPFObject 'rejected' open>"
        with pytest.raises(LoadError) as info:
            obj.load()
        err = info.value
        assert (err.stage, err.name) == ("program", "no_null_check")
        assert str(err).splitlines()[0].endswith("program 'no_null_check' was refused")
        assert "--- verifier log (tail) ---" in str(err)
        assert repr(obj) == "<BPFObject 'rejected' load failed>"


def test_a_loaded_object_says_so(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["ringbuf"]) as obj:
        obj.load()
        assert repr(obj) == "<BPFObject 'ringbuf' loaded>"
