"""<pylibbpf/bpf_tools.h> on the real kernel: log2 slots, the histogram update, the pid and comm
filters, PLB_KEEP_STRUCT (tests/bpf/bpf_tools.bpf.c, its SEC("syscall") programs run with test_run,
which runs them in the calling thread)."""

from __future__ import annotations

import collections
import ctypes
import os
import random
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import pylibbpf
from pylibbpf import BPFObject, Program

pytestmark = pytest.mark.usefixtures("bpf_privileged")

BATCH = 64       # values per run of `slots` (BATCH in the program)
HIST_SLOTS = 12  # the histogram's slots (HIST_SLOTS in the program)


def log2_reference(v: int) -> int:
    """floor(log2(v)), 0 for 0: the slot libbpf-tools' histograms (and Histogram.log2) use."""
    return max(v.bit_length() - 1, 0)


@pytest.fixture
def load(bpf_objects: dict[str, Path]) -> Iterator[Callable[..., BPFObject]]:
    """load(**globals): bpf_tools.bpf.o with those globals set before load (closed after the test)."""
    opened: list[BPFObject] = []

    def _load(**values: Any) -> BPFObject:
        obj = BPFObject.open(bpf_objects["bpf_tools"])
        opened.append(obj)
        for name, value in values.items():
            obj.globals[name] = value
        return obj.load()

    yield _load
    for obj in opened:
        obj.close()


def test_the_header_is_in_include_dir() -> None:
    header = Path(pylibbpf.include_dir()) / "pylibbpf" / "bpf_tools.h"
    assert header.is_file()
    text = header.read_text()
    for name in ("plb_log2", "plb_log2l", "plb_hist_add", "plb_pid_wanted", "plb_comm_wanted",
                 "PLB_FILTER_GLOBALS", "PLB_KEEP_STRUCT"):
        assert name in text


def test_log2_slots_match_bit_length(load: Callable[..., BPFObject]) -> None:
    """plb_log2l, plb_log2 (of the low 32 bits) and plb_hist_add's slot, against int.bit_length,
    for every power of two and its neighbours and for random values of every bit length."""
    rng = random.Random(40)
    values = sorted({v for k in range(65) for v in (2**k - 1, 2**k, 2**k + 1) if 0 <= v < 2**64})
    values += [rng.getrandbits(rng.randint(1, 64)) for _ in range(40 * BATCH - len(values) % BATCH)]
    obj = load()
    run = obj.programs["slots"]
    counted: collections.Counter[int] = collections.Counter()
    for start in range(0, len(values), BATCH):
        chunk = values[start:start + BATCH]
        chunk += [0] * (BATCH - len(chunk))
        obj.globals["values"] = chunk
        assert run.test_run().retval == 0
        g = obj.globals
        assert list(g["out_log2l"]) == [log2_reference(v) for v in chunk]
        assert list(g["out_log2"]) == [log2_reference(v & 0xFFFFFFFF) for v in chunk]
        assert list(g["out_added"]) == [min(log2_reference(v), HIST_SLOTS - 1) for v in chunk]
        counted.update(min(log2_reference(v), HIST_SLOTS - 1) for v in chunk)
    # plb_hist_add counted each value once, past-the-end values in the last slot
    assert list(obj.globals["hist"]) == [counted[i] for i in range(HIST_SLOTS)]
    assert sum(obj.globals["hist"]) == len(values) + (-len(values)) % BATCH


def run_in_thread(program: Program, comm: str | None = None) -> int:
    """program's test_run in a new thread (named ``comm`` in the kernel when given): its retval."""
    result: list[int] = []
    errors: list[BaseException] = []

    def body() -> None:
        try:
            if comm is not None:
                Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text(comm)
            result.append(program.test_run().retval)
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    t = threading.Thread(target=body)
    t.start()
    t.join()
    if errors:
        raise errors[0]
    return result[0]


def test_pid_filter_lets_through_the_target_process_and_thread(load: Callable[..., BPFObject]) -> None:
    me, tid = os.getpid(), threading.get_native_id()
    other = os.getppid()
    cases = [({}, 1), ({"targ_tgid": me}, 1), ({"targ_tgid": other}, 0), ({"targ_tid": tid}, 1),
             ({"targ_tgid": me, "targ_tid": tid}, 1), ({"targ_tgid": me, "targ_tid": tid + 1}, 0)]
    for values, wanted in cases:
        obj = load(**values)
        assert obj.programs["filters"].test_run().retval == wanted, values
        # the same object from another thread of this process: the tid filter refuses it
        in_thread = run_in_thread(obj.programs["filters"])
        assert in_thread == (0 if "targ_tid" in values else wanted), values
        obj.close()


def test_pid_wanted_compares_both_halves(load: Callable[..., BPFObject]) -> None:
    run = load().programs["pid_filter"]
    cases = [((5 << 32) | 7, 0, 0, 1), ((5 << 32) | 7, 5, 0, 1), ((5 << 32) | 7, 7, 0, 0),
             ((5 << 32) | 7, 0, 7, 1), ((5 << 32) | 7, 0, 5, 0), ((5 << 32) | 7, 5, 7, 1),
             ((5 << 32) | 7, 5, 8, 0), ((2**32 - 1) << 32, 2**32 - 1, 0, 1)]
    for pid_tgid, tgid, tid, wanted in cases:
        assert run.test_run(ctx=struct.pack("<QII", pid_tgid, tgid, tid)).retval == wanted, (pid_tgid, tgid, tid)


def test_comm_filter_compares_the_whole_name(load: Callable[..., BPFObject]) -> None:
    name = "plb-comm-test"  # 13 characters: the kernel keeps up to 15
    cases = [("", 1), (name, 1), (name[:-1], 0), (name + "x", 0), ("bash", 0)]
    for targ_comm, wanted in cases:
        obj = load(targ_comm=targ_comm)
        got = run_in_thread(obj.programs["filters"], comm=name)
        assert got == wanted, targ_comm
        obj.close()
    # a name the kernel truncated to 15 characters matches its 15 characters
    long_name = "plb-a-very-long-thread-name"
    obj = load(targ_comm=long_name[:15])
    assert run_in_thread(obj.programs["filters"], comm=long_name) == 1


class KeptEvent(ctypes.Structure):
    """struct kept_event of tests/bpf/bpf_tools.bpf.c, laid out by ctypes (the C ABI) as a reference."""

    _fields_ = [("ts", ctypes.c_uint64), ("pid", ctypes.c_uint32), ("comm", ctypes.c_char * 16),
                ("flag", ctypes.c_uint8)]


def test_keep_struct_puts_a_local_only_struct_in_btf(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["bpf_tools"]) as obj:
        event = obj.btf_struct("kept_event")
        assert event.size == ctypes.sizeof(KeptEvent)
        assert [(f.name, f.offset) for f in event.field_infos] == [
            (name, getattr(KeptEvent, name).offset) for name, _ in KeptEvent._fields_]
        # without the macro a struct only used by locals is not there
        with pytest.raises(KeyError, match="unkept_event"):
            obj.btf_struct("unkept_event")
        # the macro adds no program, no map and no global
        assert set(obj.programs) == {"slots", "filters", "pid_filter", "uses_locals"}
        assert not any("keep" in name for name in obj.globals)
        obj.load()
        assert obj.programs["uses_locals"].test_run().retval == 1
