"""A batch's records are copied once, kernel ring -> the batch's own memory, on the real kernel.

A batch of more than SMALL_BYTES bytes takes over the memory the C drain (or
the ordered merge) wrote the records into, and ``to_numpy`` of records of one
size returns a view of it. What must hold: the array shares the batch's memory
and has the right values; arrays and memoryviews made from a batch stay valid
after the batch and the reader are gone; records of several sizes still parse
right (a copy); nothing handed over leaks.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from progs import ORD_PERF, ORD_RB0, emit_ordered, object_fixture, old_ts, program_fixture

from pylibbpf import BPFObject, OrderedReader, PerfBuffer, Program, RingBuffer, defevent
from pylibbpf._batch import SMALL_BYTES

pytestmark = pytest.mark.usefixtures("bpf_privileged")

EVENT = defevent("ord_event", ("ts", "u64"), ("seq", "u64"), ("cpu", "u32"), ("tag", "u32"), ("gseq", "u64"))
#: Records per batch: well over SMALL_BYTES of 32-byte records, so the batch takes the drain's memory.
MANY = 400


obj = object_fixture("ordered")
prog = program_fixture("emit_ordered")


def ignore(*_: object) -> None:
    pass


def shares(arr: Any, batch: Any) -> bool:
    return bool(np.shares_memory(arr, np.frombuffer(batch.blob, dtype=np.uint8)))


def churn() -> None:
    """Allocate and write over memory the way freed batch memory would be reused, if it were freed."""
    junk = [bytearray(os.urandom(64)) * 1024 for _ in range(64)]
    del junk
    gc.collect()


def test_ringbuf_to_numpy_views_the_batch(obj: BPFObject, prog: Program) -> None:
    assert MANY * EVENT.size > SMALL_BYTES
    with RingBuffer(obj.maps["rb0"], ignore) as rb:
        emit_ordered(prog, MANY, seq=100, ts=7, target=ORD_RB0)
        batch = rb.read_batch(timeout=30)
        assert len(batch) == MANY
        arr = batch.to_numpy(EVENT)
    assert shares(arr, batch) and arr.flags.writeable
    assert arr["seq"].tolist() == list(range(100, 100 + MANY))
    assert arr["ts"].tolist() == list(range(7, 7 + MANY))
    # A view: writing into the array is what batch[i] shows (the memory is the batch's alone).
    arr["seq"][0] = 2**64 - 1
    assert bytes(batch[0][8:16]) == b"\xff" * 8
    assert batch[0].readonly


def test_views_outlive_batch_and_reader(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["ordered"]) as o:
        o.load()
        rb = RingBuffer(o.maps["rb0"], ignore)
        emit_ordered(o.programs["emit_ordered"], MANY, seq=0, ts=1, target=ORD_RB0)
        batch = rb.read_batch(timeout=30)
        arr = batch.to_numpy(EVENT)
        one = batch[5]
        views = list(batch)
        column = arr["seq"]
    del batch
    gc.collect()
    rb.close()
    del rb
    churn()
    # The reader's next drains would have written over a freed buffer; it is closed and gone.
    assert column.tolist() == list(range(MANY)) and arr["ts"].tolist() == list(range(1, MANY + 1))
    assert EVENT.parse(one).seq == 5
    assert [EVENT.parse(v).seq for v in views] == list(range(MANY))


def test_next_drain_does_not_write_over_a_kept_array(obj: BPFObject, prog: Program) -> None:
    with RingBuffer(obj.maps["rb0"], ignore) as rb:
        emit_ordered(prog, MANY, seq=0, target=ORD_RB0)
        first = rb.read_batch(timeout=30).to_numpy(EVENT)
        emit_ordered(prog, MANY, seq=10_000, target=ORD_RB0)
        second = rb.read_batch(timeout=30).to_numpy(EVENT)
    assert not np.shares_memory(first, second)
    assert first["seq"].tolist() == list(range(MANY))
    assert second["seq"].tolist() == list(range(10_000, 10_000 + MANY))


def test_small_batch_is_a_writable_copy(obj: BPFObject, prog: Program) -> None:
    with RingBuffer(obj.maps["rb0"], ignore) as rb:
        emit_ordered(prog, 3, seq=40, target=ORD_RB0)
        batch = rb.read_batch(timeout=30)
        arr = batch.to_numpy(EVENT)
    assert isinstance(batch.blob, bytes) and arr["seq"].tolist() == [40, 41, 42]
    arr["seq"][0] = 1   # writable, and the batch's bytes stay as the kernel wrote them
    assert EVENT.parse(batch[0]).seq == 40


def test_unequal_sizes_are_gathered(obj: BPFObject, prog: Program) -> None:
    with RingBuffer(obj.maps["rb0"], ignore) as rb:
        emit_ordered(prog, MANY // 2, seq=0, target=ORD_RB0)
        emit_ordered(prog, MANY // 2, seq=MANY // 2, extra=12, target=ORD_RB0)  # 44-byte records
        batch = rb.read_batch(timeout=30)
        assert sorted(set(batch.lens)) == [32, 44]
        arr = batch.to_numpy(EVENT)
    assert not shares(arr, batch) and arr.flags.writeable
    assert arr["seq"].tolist() == list(range(MANY))


def test_perfbuffer_to_numpy_views_padded_records(obj: BPFObject, prog: Program) -> None:
    cpu = sorted(os.sched_getaffinity(0))[0]
    with PerfBuffer(obj.maps["events"], ignore) as pb:
        emit_ordered(prog, MANY, seq=3, target=ORD_PERF, cpu=cpu)
        batch = pb.read_batch(timeout=30)
        assert len(batch) == MANY and set(batch.lens) == {36}   # 32 bytes + 4 of perf padding
        arr = batch.to_numpy(EVENT)
    del batch
    gc.collect()
    churn()
    assert arr.strides == (40,) and arr["seq"].tolist() == list(range(3, 3 + MANY))
    assert arr["cpu"].tolist() == [cpu] * MANY


@pytest.mark.parametrize("target", ["perf", "ringbufs"])
def test_ordered_to_numpy_views_the_batch(obj: BPFObject, prog: Program, target: str) -> None:
    cpu = sorted(os.sched_getaffinity(0))[0]
    base = old_ts()
    maps = obj.maps["events"] if target == "perf" else [obj.maps["rb0"], obj.maps["rb1"]]
    rd = OrderedReader(maps, timestamp=0, window_ms=0)
    with rd:
        emit_ordered(prog, MANY, ts=base, seq=0, cpu=cpu, target=ORD_PERF if target == "perf" else ORD_RB0)
        got: list[Any] = []
        batches = []
        while sum(len(b) for b in batches) < MANY:
            batch = rd.read_batch(timeout=30)
            assert len(batch)
            batches.append(batch)
        got = [b.to_numpy(EVENT) for b in batches]
        assert any(shares(a, b) for a, b in zip(got, batches, strict=True))
        # The merge keys and sources, views of the same memory for a large batch: the records' own.
        for arr, b in zip(got, batches, strict=True):
            assert list(b.timestamps) == arr["ts"].tolist()
            assert list(b.tags) == [cpu if target == "perf" else 0] * len(b)
    del batches
    gc.collect()
    churn()
    arr = np.concatenate(got)
    assert arr["seq"].tolist() == list(range(MANY))
    assert arr["ts"].tolist() == list(range(base, base + MANY))


#: Run in a new process, whose spare block (csrc/plb_block.h: one a process, the larger of two kept)
#: no earlier test has left a block in: OrderedReader drains of 256 32-byte records, on one CPU.
_BLOCKS_SCRIPT = """
import gc, json, os, sys
import numpy as np
from pylibbpf import BPFObject, OrderedReader, defevent
sys.path.insert(0, sys.argv[2])
from progs import ORD_PERF, emit_ordered, old_ts

EVENT = defevent("ord_event", ("ts", "u64"), ("seq", "u64"), ("cpu", "u32"), ("tag", "u32"), ("gseq", "u64"))


class DrainsOf256(OrderedReader):
    _MAX_RECORDS = 256


def address(batch):
    return int(np.frombuffer(batch.view, dtype=np.uint8).__array_interface__["data"][0])


cpu, base, out = sorted(os.sched_getaffinity(0))[0], old_ts(), {}
with BPFObject.open(sys.argv[1]) as obj:
    obj.load()
    prog = obj.programs["emit_ordered"]
    with DrainsOf256(obj.maps["events"], timestamp=0, window_ms=0, page_cnt=256) as rd:
        emit_ordered(prog, 5 * 256, ts=base, seq=0, cpu=cpu, target=ORD_PERF)
        first = rd.read_batch(timeout=30)
        out["first"] = address(first)
        del first                       # its block is free before the next read
        second = rd.read_batch(timeout=30)
        third = rd.read_batch(timeout=30)     # second still referenced
        fourth = rd.read_batch(timeout=30)    # second and third still referenced
        out.update(second=address(second), third=address(third), fourth=address(fourth))
        del third
        fifth = rd.read_batch(timeout=30)
        out["fifth"] = address(fifth)
        emit_ordered(prog, 120, ts=base + 5 * 256, seq=5 * 256, cpu=cpu, target=ORD_PERF)
        short = rd.read_batch(timeout=30)     # 4800 bytes: over SMALL_BYTES, under half the block
        out["short_is_bytes"] = type(short.blob) is bytes
    gc.collect()
    junk = [bytearray(os.urandom(64)) * 1024 for _ in range(64)]
    del junk
    out["base"] = base
    out["batches"] = [[len(b), b.to_numpy(EVENT)["seq"].tolist(), list(b.timestamps), list(b.tags),
                       list(b.late)] for b in (second, fourth, fifth, short)]
print(json.dumps(out))
"""


def test_ordered_block_comes_back_once_freed(bpf_objects: dict[str, Path]) -> None:
    """A batch dropped before the next read gives its block back: the next drain writes into the same
    memory. A batch still referenced keeps its block, records, timestamps and CPUs; a drain the rings
    cut short (under half its block) copies its records and leaves the block to the next drain."""
    tests = Path(__file__).parent
    done = subprocess.run([sys.executable, "-c", _BLOCKS_SCRIPT, str(bpf_objects["ordered"]), str(tests)],
                          capture_output=True, text=True, timeout=120, check=True)
    out = json.loads(done.stdout)
    assert out["second"] == out["first"]                 # the freed block, again
    assert out["third"] != out["second"]                 # second kept: a block of its own
    assert out["fourth"] not in (out["second"], out["third"])
    assert out["fifth"] == out["third"]                  # third's, freed before
    assert out["short_is_bytes"]
    cpu, base = sorted(os.sched_getaffinity(0))[0], out["base"]
    for (n, seqs, stamps, tags, late), first in zip(out["batches"], (256, 3 * 256, 4 * 256, 5 * 256),
                                                     strict=True):
        assert n == len(seqs) == (120 if first == 5 * 256 else 256)
        assert seqs == list(range(first, first + n))
        assert stamps == list(range(base + first, base + first + n)) and tags == [cpu] * n and not any(late)


# --- nothing handed over leaks --------------------------------------------------------------------


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                 "fordblks", "keepcost")]


def malloc_in_use() -> int:
    """Bytes malloc has handed out and not had back (glibc's mallinfo2: heap plus mmapped blocks)."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _Mallinfo2
    info = libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)


def flat(cycle: Any, cycles: int = 300) -> int:
    for _ in range(20):
        cycle()
    gc.collect()
    before = malloc_in_use()
    for _ in range(cycles):
        cycle()
    gc.collect()
    return malloc_in_use() - before


def test_handed_over_ring_memory_is_freed(obj: BPFObject, prog: Program) -> None:
    with RingBuffer(obj.maps["rb0"], ignore) as rb:
        def ring_cycle() -> None:
            emit_ordered(prog, MANY, target=ORD_RB0)
            batch = rb.read_batch(timeout=30)
            assert len(batch) == MANY and shares(batch.to_numpy(EVENT), batch)

        # A leak would keep MANY * 32 bytes a cycle: 3.8 MiB over 300 cycles.
        assert flat(ring_cycle) < 1 << 20


def test_handed_over_merge_memory_is_freed(obj: BPFObject, prog: Program) -> None:
    with OrderedReader(obj.maps["events"], timestamp=0, window_ms=0) as rd:
        def ordered_cycle() -> None:
            emit_ordered(prog, MANY, ts=old_ts(), target=ORD_PERF)
            n = 0
            while n < MANY:
                batch = rd.read_batch(timeout=30)
                batch.to_numpy(EVENT)
                n += len(batch)

        # A leak would keep the merge's 2 MiB buffer (or its records) each cycle.
        assert flat(ordered_cycle) < 1 << 20
