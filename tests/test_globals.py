"""obj.globals on the real kernel: every kind of global, set before load, live .data/.bss, frozen .rodata."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pylibbpf import BPFError, BPFObject, EventDef, RingBuffer

pytestmark = pytest.mark.usefixtures("bpf_privileged")


@pytest.fixture
def obj(bpf_objects: dict[str, Path]) -> Iterator[BPFObject]:
    with BPFObject.open(bpf_objects["globals"]) as o:
        yield o


def run(obj: BPFObject) -> int:
    return obj.programs["run"].test_run().retval


def test_every_global_is_listed_with_its_section_and_initial_value(obj: BPFObject) -> None:
    g = obj.globals
    assert {n: g.section(n) for n in ("targ_tgid", "custom_ro", "custom_rw", "data_total", "hits")} == {
        "targ_tgid": ".rodata", "custom_ro": ".rodata.custom", "custom_rw": ".data.custom",
        "data_total": ".data", "hits": ".bss"}
    assert {"targ_tgid", "enabled", "targ_comm", "small_signed", "tiny", "big_signed", "mode", "weights", "cfg",
            "a_pointer", "custom_ro", "custom_rw", "data_step", "data_total", "hits", "last_tgid", "seen"} <= set(g)
    assert (g["targ_tgid"], g["enabled"], g["targ_comm"], g["small_signed"], g["tiny"], g["big_signed"]) == (
        0, True, "init", -5, 200, -1)
    assert (g["mode"], g["weights"], g["custom_ro"], g["custom_rw"], g["data_total"]) == (3, (1, 2, 3, 4), 11, 12, 100)
    cfg = g["cfg"]
    assert (cfg.level, cfg.delta, cfg.tag, cfg.range_lo, cfg.range_hi) == (7, -3, "ab", 1, 9)
    assert (g.type_of("enabled"), g.type_of("targ_comm"), g.type_of("weights"), g.type_of("mode")) == (
        "bool", "char[16]", "u64[4]", "i32")
    assert isinstance(g.type_of("cfg"), EventDef) and g.type_of("a_pointer") == "ptr"
    # libbpf names the maps after the object (truncated); the section name finds them too.
    assert obj.maps[".rodata"].name.endswith(".rodata") and obj.maps[".rodata.custom"].name == ".rodata.custom"


def test_values_set_before_load_are_what_the_program_sees(obj: BPFObject) -> None:
    g = obj.globals
    rodata_before = obj.maps[".rodata"].initial_value
    g["targ_tgid"] = os.getpid()
    g["tiny"] = 255
    g["small_signed"] = -32768
    g["big_signed"] = -(2**63)
    g["mode"] = "MODE_NEG"  # an enumerator's name
    g["weights"] = [10, 20]  # the rest zero
    g["cfg"] = {"level": 5, "delta": -7, "range": {"hi": 4}}  # nested mapping; missing fields zero
    g["targ_comm"] = b"z"
    g["custom_rw"] = 13
    g["data_step"] = 5
    rodata = obj.maps[".rodata"].initial_value
    assert rodata is not None and rodata_before is not None and len(rodata) == len(rodata_before)
    assert g["enabled"] is True and g["custom_ro"] == 11  # the other variables are intact
    obj.load()
    assert run(obj) == 1
    seen = g["seen"]
    assert (seen.targ_tgid, seen.enabled, seen.tiny, seen.small_signed, seen.big_signed, seen.mode) == (
        os.getpid(), 1, 255, -32768, -(2**63), -2)
    assert (seen.weights_sum, seen.cfg_level, seen.cfg_delta, seen.range_hi, seen.comm0, seen.custom_ro,
            seen.custom_rw) == (30, 5, -7, 4, ord("z"), 11, 13)
    assert g["data_total"] == 105 and g["last_tgid"] == os.getpid()
    # .rodata is still readable after load
    assert (g["targ_tgid"], g["cfg"].level, g["weights"]) == (os.getpid(), 5, (10, 20, 0, 0))


def test_a_const_volatile_filter_changes_which_events_arrive(bpf_objects: dict[str, Path]) -> None:
    received: dict[int, list[int]] = {}
    for target in (os.getpid(), 1):  # this process, then one that never runs the program here
        with BPFObject.open(bpf_objects["globals"]) as obj:
            obj.globals["targ_tgid"] = target
            obj.load()
            events: list[int] = []
            with RingBuffer(obj.maps["rb"], lambda d, ev=events: ev.append(int.from_bytes(d[:4], "little"))) as rb:
                rets = [run(obj) for _ in range(3)]
                rb.poll(0.0)
            received[target] = events
            assert rets == ([1, 2, 3] if target == os.getpid() else [2**32 - 2] * 3)  # retval is a u32: -2
    assert received == {os.getpid(): [os.getpid()] * 3, 1: []}


def test_bss_and_data_are_read_and_written_live(obj: BPFObject) -> None:
    g = obj.globals
    obj.load()
    assert g["hits"] == 0
    assert [run(obj) for _ in range(3)] == [1, 2, 3]
    assert g["hits"] == 3  # the program's writes, read live
    g["hits"] = 0  # reset live: the program sees it at once
    assert run(obj) == 1 and g["hits"] == 1
    g["data_step"] = 1000
    total = g["data_total"]
    run(obj)
    assert g["data_total"] == total + 1000
    g["custom_rw"] = 99
    run(obj)
    assert g["seen"].custom_rw == 99
    g["seen"] = {}  # a struct written live
    assert g["seen"].custom_rw == 0


def test_rodata_after_load_is_refused_naming_the_variable(obj: BPFObject) -> None:
    obj.load()
    for name in ("targ_tgid", "custom_ro"):
        with pytest.raises(BPFError, match=f"global '{name}' is in .rodata(.custom)?, frozen by BPFObject.load") \
                as info:
            obj.globals[name] = 1
        assert info.value.errno == errno.EPERM


def test_bad_values_name_the_variable(obj: BPFObject) -> None:
    g = obj.globals
    with pytest.raises(KeyError, match=r"no global variable named 'nope' in globals \(known: targ_tgid, enabled"):
        g["nope"]
    with pytest.raises(KeyError, match="no global variable named 'nope'"):
        g["nope"] = 1
    with pytest.raises(ValueError, match=r"global 'tiny' \(u8\) must be <= 255, got 256"):
        g["tiny"] = 256
    with pytest.raises(ValueError, match=r"global 'targ_tgid' \(u32\) must be >= 0, got -1"):
        g["targ_tgid"] = -1
    with pytest.raises(ValueError, match=r"global 'small_signed' \(i16\) must be >= -32768, got -32769"):
        g["small_signed"] = -32769
    with pytest.raises(TypeError, match=r"global 'targ_tgid' \(u32\) must be an int, got '1'"):
        g["targ_tgid"] = "1"
    with pytest.raises(TypeError, match=r"global 'tiny' \(u8\) must be an int, got True"):
        g["tiny"] = True
    with pytest.raises(TypeError, match=r"global 'enabled' \(bool\) must be a bool, got 'yes'"):
        g["enabled"] = "yes"
    with pytest.raises(ValueError, match=r"global 'targ_comm' \(char\[16\]\) holds 16 bytes, got 17"):
        g["targ_comm"] = "x" * 17
    with pytest.raises(TypeError, match=r"global 'targ_comm' \(char\[16\]\) must be a str or bytes, got int"):
        g["targ_comm"] = 5
    with pytest.raises(ValueError, match=r"global 'weights' \(u64\[4\]\) holds 4 items, got 5"):
        g["weights"] = [1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match=r"global 'weights'\[1\] \(u64\) must be >= 0, got -1"):
        g["weights"] = [1, -1]
    with pytest.raises(ValueError, match=r"global 'mode' \(i32\) has no enumerator 'MODE_X' \(known: MODE_OFF"):
        g["mode"] = "MODE_X"
    with pytest.raises(ValueError, match=r"global 'cfg': event 'tglob_cfg': value 70000 out of range"):
        g["cfg"] = {"delta": 70000}
    with pytest.raises(KeyError, match="has no field 'nope'"):
        g["cfg"] = {"nope": 1}
    with pytest.raises(TypeError, match="cannot be deleted"):
        del g["hits"]
    assert g["tiny"] == 200 and g["targ_comm"] == "init"  # nothing was written by the failures
