"""Leaks: open and close (or start and stop) every reader and consumer 1,000 times.

Each cycle creates the reader, carries one record through it (emitted with
BPF_PROG_TEST_RUN, read back) and closes it, so the data path is exercised
too. Buffers, readers and consumers run 1,000 cycles on objects loaded once.
A full ``BPFObject`` open + load + close runs the verifier on every program:
1,000 cycles of the small ringbuf.bpf.o (about 1 ms each), but only
OBJECT_CYCLES (200) of ordered.bpf.o, whose two bpf_loop programs take about
18 ms each to verify (1,000 would take 36 s, more than this whole file's
30 s budget).

Method: WARMUP cycles first (allocator pools, lazily built caches), then a
garbage collection and a measurement: the set of open fd numbers
(/proc/self/fd) and the resident set size (/proc/self/statm). After the
cycles, collect and measure again: the fds must be exactly the same, and the
RSS may grow by less than RSS_SLACK (8 MiB).
"""

from __future__ import annotations

import gc
import mmap
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from progs import ORD_PERF, ORD_RB0, emit_ordered, emit_perf, emit_ring, old_ts

from pylibbpf import (
    BackpressureConsumer,
    BPFObject,
    OrderedReader,
    PerfBuffer,
    PerfReader,
    RingBufConsumer,
    RingBuffer,
    SamplingConsumer,
    map_ringbuf,
    process_events,
    read_ringbuf_events,
)
from pylibbpf.asm import exit_, load_program, mov

pytestmark = pytest.mark.usefixtures("bpf_privileged")

CYCLES = 1000
OBJECT_CYCLES = {"ringbuf": 1000, "ordered": 200}
WARMUP = 50
RSS_SLACK = 8 << 20


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * mmap.PAGESIZE


def fd_set() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def check_flat(name: str, cycle: Callable[[], None], cycles: int) -> None:
    """Warm up, measure, run ``cycles`` cycles, measure: fds identical, RSS within RSS_SLACK."""
    for _ in range(WARMUP):
        cycle()
    gc.collect()
    fds0, rss0 = fd_set(), rss_bytes()
    t0 = time.monotonic()
    for _ in range(cycles):
        cycle()
    elapsed = time.monotonic() - t0
    gc.collect()
    fds1, rss1 = fd_set(), rss_bytes()
    growth = rss1 - rss0
    print(f"\n{name}: {cycles} cycles in {elapsed:.1f} s, fds {len(fds0)} -> {len(fds1)}, "
          f"RSS {rss0 / 2**20:.1f} -> {rss1 / 2**20:.1f} MiB ({growth / 1024:+.0f} KiB)")
    assert fds1 == fds0, f"{name}: fds changed: opened {sorted(fds1 - fds0)}, closed {sorted(fds0 - fds1)}"
    assert growth < RSS_SLACK, f"{name}: RSS grew by {growth / 2**20:.1f} MiB over {cycles} cycles"


@pytest.fixture(scope="module")
def objs(bpf_objects: dict[str, Path]) -> Iterator[dict[str, BPFObject]]:
    opened: dict[str, BPFObject] = {}
    try:
        for name in ("ringbuf", "perfbuf", "ordered"):
            opened[name] = BPFObject.open(bpf_objects[name]).load()
        yield opened
    finally:
        for o in opened.values():
            o.close()


def one_signal() -> tuple[threading.Event, Callable[[object], None]]:
    got = threading.Event()
    return got, lambda _rec: got.set()


def test_ring_buffer(objs: dict[str, BPFObject]) -> None:
    o = objs["ringbuf"]
    emit = o.programs["emit"]

    def cycle() -> None:
        with RingBuffer(o.maps["rb"], lambda _d: None) as rb:
            emit_ring(emit, 1)
            assert rb.poll(5) == 1

    check_flat("RingBuffer", cycle, CYCLES)


def test_perf_buffer(objs: dict[str, BPFObject]) -> None:
    o = objs["perfbuf"]
    emit = o.programs["emit_perf"]

    def cycle() -> None:
        with PerfBuffer(o.maps["events"], lambda _cpu, _d: None, page_cnt=1) as pb:
            emit_perf(emit, 1, cpu=0)
            assert pb.poll(5) == 1

    check_flat("PerfBuffer", cycle, CYCLES)


def test_perf_reader(objs: dict[str, BPFObject]) -> None:
    o = objs["perfbuf"]
    emit = o.programs["emit_perf"]

    def cycle() -> None:
        with PerfReader(o.maps["events"]) as rd:
            emit_perf(emit, 1, cpu=0)
            assert not rd.read(timeout=30).lost_samples

    check_flat("PerfReader", cycle, CYCLES)


def test_ordered_reader_perf(objs: dict[str, BPFObject]) -> None:
    o = objs["ordered"]
    emit = o.programs["emit_ordered"]

    def cycle() -> None:
        with OrderedReader(o.maps["events"], timestamp=0, window_ms=0, page_cnt=1) as rd:
            emit_ordered(emit, 1, ts=old_ts(), step=0, target=ORD_PERF)
            assert rd.read(timeout=30).timestamp > 0

    check_flat("OrderedReader (perf)", cycle, CYCLES)


def test_ordered_reader_ring_buffers(objs: dict[str, BPFObject]) -> None:
    o = objs["ordered"]
    emit = o.programs["emit_ordered"]

    def cycle() -> None:
        with OrderedReader([o.maps["rb0"], o.maps["rb1"]], timestamp=0, window_ms=0) as rd:
            emit_ordered(emit, 1, ts=old_ts(), step=0, target=ORD_RB0)
            assert rd.read(timeout=30).cpu == 0

    check_flat("OrderedReader (ring buffers)", cycle, CYCLES)


def test_mmap_layer(objs: dict[str, BPFObject]) -> None:
    o = objs["ringbuf"]
    emit = o.programs["emit"]

    def cycle() -> None:
        with map_ringbuf(o.maps["rb"]) as layout:
            emit_ring(emit, 1)
            assert len(read_ringbuf_events(layout)) == 1
        emit_ring(emit, 1)
        assert process_events(o.maps["rb"], lambda _r: None, max_events=1, timeout=5) == 1

    check_flat("map_ringbuf + process_events", cycle, CYCLES)


@pytest.mark.parametrize("kind", [RingBufConsumer, BackpressureConsumer, SamplingConsumer])
def test_consumer_start_stop(objs: dict[str, BPFObject], kind: type[Any]) -> None:
    o = objs["ringbuf"]
    emit = o.programs["emit"]
    extra = {"sample_rate": 1.0} if kind is SamplingConsumer else {}

    def cycle() -> None:
        got, callback = one_signal()
        c = kind(o.maps["rb"], callback, **extra)
        c.start()
        try:
            emit_ring(emit, 1)
            assert got.wait(60)
        finally:
            c.stop()

    check_flat(kind.__name__, cycle, CYCLES)


def test_one_consumer_restarted(objs: dict[str, BPFObject]) -> None:
    """The same BackpressureConsumer started and stopped 1,000 times (each run frees its queue)."""
    o = objs["ringbuf"]
    emit = o.programs["emit"]
    got, callback = one_signal()
    c = BackpressureConsumer(o.maps["rb"], callback)

    def cycle() -> None:
        got.clear()
        c.start()
        try:
            emit_ring(emit, 1)
            assert got.wait(60)
        finally:
            c.stop()

    check_flat("BackpressureConsumer restarted", cycle, CYCLES)


def test_assembled_program(bpf_privileged: None) -> None:
    def cycle() -> None:
        with load_program([mov("r0", 7), exit_()], "syscall") as prog:
            assert prog.test_run().retval == 7

    check_flat("asm.load_program", cycle, CYCLES)


@pytest.mark.parametrize("name", ["ringbuf", "ordered"])
def test_object_open_load_close(bpf_objects: dict[str, Path], name: str) -> None:
    """Open (from the path, then from bytes), load and close; one record through the first."""
    path = bpf_objects[name]
    elf = path.read_bytes()

    def cycle() -> None:
        with BPFObject.open(path) as o:
            o.load()
            if name == "ringbuf":
                emit_ring(o.programs["emit"], 1)
                with RingBuffer(o.maps["rb"], lambda _d: None) as rb:
                    assert rb.poll(5) == 1
        with BPFObject.open(elf, object_name=name) as o:
            o.load()

    check_flat(f"BPFObject open+load+close ({name})", cycle, OBJECT_CYCLES[name])
