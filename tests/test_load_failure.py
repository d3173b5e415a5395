"""A failed load says what failed (a map or a program) and leaves the object in a state that says so."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from pylibbpf import BPFObject, LoadError, asm, lib

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


REASON = "R0 invalid mem access 'map_value_or_null'"


def test_a_long_verifier_log_keeps_its_reason(bpf_objects: dict[str, Path]) -> None:
    """The refused instruction and the reason close a log of several KiB: the text shows them and
    ``verifier_log`` holds the log whole, from the first instruction to the count of processed ones."""
    with BPFObject.open(bpf_objects["rejected_long"]) as obj, pytest.raises(LoadError) as info:
        obj.load()
    err = info.value
    assert (err.stage, err.name) == ("program", "null_check_after_long_work")
    text = str(err)
    assert REASON in text
    assert re.search(r"^\d+: \(79\) r0 = \*\(u64 \*\)\(r0 \+0\)$", text, re.M), text  # the refused instruction
    log = err.verifier_log
    assert len(log) > 4096 and REASON in log
    assert re.search(r"^0: ", log, re.M), log[:200]  # from the first instruction on
    assert log.rstrip("\n").splitlines()[-1].startswith("processed ")
    # The text carries the tail, not the whole log.
    assert text.endswith(log.rstrip("\n").splitlines()[-1]) and len(text) < len(log) // 2


def test_a_libbpf_message_over_1024_bytes_is_logged_whole(bpf_objects: dict[str, Path],
                                                          caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="pylibbpf.libbpf"), \
            BPFObject.open(bpf_objects["rejected_long"]) as obj, pytest.raises(LoadError):
        obj.load()
    logs = [r.getMessage() for r in caplog.records if "-- BEGIN PROG LOAD LOG --" in r.getMessage()]
    assert len(logs) == 1
    assert len(logs[0]) > 4096
    assert logs[0].endswith("-- END PROG LOAD LOG --") and REASON in logs[0]


def test_assembly_refused_carries_its_whole_verifier_log() -> None:
    with pytest.raises(LoadError) as info:
        asm.load_program([asm.exit_()], "syscall")
    assert "R0 !read_ok" in info.value.verifier_log
    assert "--- verifier log (tail) ---" in str(info.value)
