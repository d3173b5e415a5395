"""OrderedReader on the real kernel: the merge rule, scripted and under stress.

Scripted: tests/bpf/ordered.bpf.c:emit_ordered writes records whose timestamp
and sequence come from ctx_in, run with BPF_PROG_TEST_RUN on a chosen CPU, so
each test decides exactly what each ring holds. Timestamps are CLOCK_MONOTONIC
nanoseconds, the merge's clock: "old" ones (a second ago) are past every idle
ring's frontier, so only the rings' contents decide the order.
Stress: emit_stress, one thread per CPU, writes {bpf_ktime_get_ns(), per-CPU
seq, cpu, global seq} while the reader merges.
"""

from __future__ import annotations

import gc
import os
import struct
import threading
import time
from pathlib import Path

import pytest
from progs import ORD_EVENT as EVENT
from progs import ORD_PERF as PERF
from progs import ORD_RB0 as RB0
from progs import ORD_RB1 as RB1
from progs import blocked_in_epoll, counter, object_fixture, program_fixture, wait_until
from progs import emit_ordered as emit

from pylibbpf import (
    BPFObject,
    ClosedError,
    Map,
    OrderedBatch,
    OrderedReader,
    PerfReader,
    Program,
    Record,
    defevent,
)

STRESS = struct.Struct("<3Q")   # emit_stress: count, tag, target
ORD_EVENT = defevent("ord_event", ("ts", "u64"), ("seq", "u64"), ("cpu", "u32"), ("tag", "u32"), ("gseq", "u64"))
FAILED, GSEQ = 0, 1             # ordered.bpf.c counters[]: failed outputs, the global sequence

pytestmark = pytest.mark.usefixtures("bpf_privileged")


def now_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def drain(rd: OrderedReader, timeout: float = 0.1) -> list[Record]:
    """read() until nothing comes for `timeout` seconds."""
    out: list[Record] = []
    while True:
        try:
            out.append(rd.read(timeout=timeout))
        except TimeoutError:
            return out


def seqs(records: list[Record]) -> list[tuple[int, int]]:
    """(cpu or ring, seq) of each sample."""
    return [(r.cpu, EVENT.unpack_from(r.raw_sample)[1]) for r in records if not r.lost_samples]


obj = object_fixture("ordered")
prog = program_fixture("emit_ordered")


@pytest.fixture
def cpus() -> list[int]:
    online = sorted(os.sched_getaffinity(0))
    if len(online) < 2:
        pytest.skip("needs two CPUs")
    return online[:2]


# -- the scripted rule ---------------------------------------------------------------------------

def test_interleaved_timestamps_on_two_cpus_come_out_in_exact_order(obj: BPFObject, prog: Program,
                                                                    cpus: list[int]) -> None:
    base = now_ns() - 10**9
    with OrderedReader(obj.maps["events"], timestamp=0) as rd:
        # CPU 1 writes first: arrival order must not matter
        emit(prog, 50, cpu=cpus[1], ts=base + 1, step=2, seq=1000)
        emit(prog, 50, cpu=cpus[0], ts=base, step=2, seq=0)
        got = drain(rd)
    assert [r.timestamp - base for r in got] == list(range(100))
    assert [r.cpu for r in got] == [cpus[0], cpus[1]] * 50
    assert not any(r.late for r in got)
    assert [r.timestamp for r in got] == [EVENT.unpack_from(r.raw_sample)[0] for r in got]
    assert rd.stats().emitted == 100


def test_equal_timestamps_keep_ring_order(obj: BPFObject, prog: Program, cpus: list[int]) -> None:
    base = now_ns() - 10**9
    with OrderedReader(obj.maps["events"], timestamp=0) as rd:
        emit(prog, 3, cpu=cpus[1], ts=base, step=0, seq=100)
        emit(prog, 3, cpu=cpus[0], ts=base, step=0, seq=0)
        emit(prog, 2, cpu=cpus[1], ts=base + 1, step=0, seq=200)
        emit(prog, 2, cpu=cpus[0], ts=base + 1, step=0, seq=10)
        got = seqs(drain(rd))
    c0, c1 = cpus
    assert got == [(c0, 0), (c0, 1), (c0, 2), (c1, 100), (c1, 101), (c1, 102),
                   (c0, 10), (c0, 11), (c1, 200), (c1, 201)]


def test_an_idle_cpu_holds_a_record_for_the_window_asleep(obj: BPFObject, prog: Program,
                                                         cpus: list[int]) -> None:
    """Released by the clock alone (no timeout given, no other record comes), after the window, and the
    reader sleeps in epoll_wait meanwhile instead of spinning."""
    window = 1.0
    with OrderedReader(obj.maps["events"], timestamp=0, window_ms=window * 1000) as rd:
        out: list[tuple[Record, int]] = []
        reader = threading.Thread(target=lambda: out.append((rd.read(), now_ns())))
        ts = now_ns()
        emit(prog, 1, cpu=cpus[0], ts=ts)          # CPU 1 stays idle
        reader.start()
        seen: list[str] = []

        def probe() -> bool:
            if out:
                seen.append("delivered")
            elif reader.native_id is not None and blocked_in_epoll(reader.native_id):
                seen.append("asleep")
            return bool(seen)

        wait_until(probe, timeout=30)
        reader.join(30)
        if reader.is_alive():
            rd.close()
            reader.join()
    assert seen == ["asleep"], "the reader was not seen sleeping in epoll_wait while it held the record"
    assert out, "the record was not released by the clock"
    rec, delivered = out[0]
    assert rec.timestamp == ts
    assert (delivered - ts) / 1e9 >= window       # not before the window (a lower bound: load cannot break it)
    assert rec.timestamp == ts and not rec.late


def test_a_record_waits_for_a_lower_timestamp_that_is_still_possible(obj: BPFObject, prog: Program,
                                                                     cpus: list[int]) -> None:
    with OrderedReader(obj.maps["events"], timestamp=0, window_ms=2000) as rd:
        ts = now_ns()
        emit(prog, 1, cpu=cpus[1], ts=ts + 10, seq=1)
        with pytest.raises(TimeoutError):
            rd.read(timeout=0.05)                  # CPU 0 may still write something older
        emit(prog, 1, cpu=cpus[0], ts=ts, seq=0)  # ... and does
        emit(prog, 1, cpu=cpus[0], ts=ts + 20, seq=2)
        got = [rd.read(timeout=30) for _ in range(2)]
        assert [EVENT.unpack_from(r.raw_sample)[1] for r in got] == [0, 1]
        assert rd.stats().backlog[cpus[0]] > 0    # seq 2 waits for CPU 1 (window 2 s)


def test_a_late_write_is_flagged_and_counted(obj: BPFObject, prog: Program, cpus: list[int]) -> None:
    base = now_ns() - 10**9
    with OrderedReader(obj.maps["events"], timestamp=0) as rd:
        emit(prog, 1, cpu=cpus[0], ts=base + 1000, seq=0)
        first = rd.read(timeout=30)
        emit(prog, 1, cpu=cpus[1], ts=base, seq=1)      # older than what was delivered
        late = rd.read(timeout=30)
        stats = rd.stats()
    assert not first.late and late.late and late.timestamp == base
    assert stats.late_events == 1 and stats.max_lateness_ns == 1000 and stats.dropped_late == 0

    with OrderedReader(obj.maps["events"], timestamp=0, late="drop") as rd:
        emit(prog, 1, cpu=cpus[0], ts=base + 1000, seq=0)
        rd.read(timeout=30)
        emit(prog, 1, cpu=cpus[1], ts=base, seq=1)
        with pytest.raises(TimeoutError):
            rd.read(timeout=0.05)
        stats = rd.stats()
    assert stats.late_events == 1 and stats.dropped_late == 1 and stats.emitted == 1


def test_an_in_ring_inversion_is_counted(obj: BPFObject, prog: Program, cpus: list[int]) -> None:
    base = now_ns() - 10**9
    with OrderedReader(obj.maps["events"], timestamp=0) as rd:
        emit(prog, 2, cpu=cpus[0], ts=base + 10, step=-5)   # base + 10, then base + 5
        got = drain(rd)
        stats = rd.stats()
    assert [r.timestamp - base for r in got] == [10, 5]
    assert stats.inversions == 1 and stats.late_events == 1 and got[1].late


def test_a_full_ring_shows_lost_samples_and_never_blocks_the_merge(obj: BPFObject, prog: Program,
                                                                   cpus: list[int]) -> None:
    base = now_ns() - 10**9
    with OrderedReader(obj.maps["events"], timestamp=0, page_cnt=1) as rd:
        emit(prog, 1, cpu=cpus[1], ts=now_ns() + 10 * 10**9, seq=999)  # held: CPU 0 is behind it
        emit(prog, 200, cpu=cpus[0], ts=base, seq=0, extra=200)        # 4 KiB holds 16 of these
        emit(prog, 1, cpu=cpus[0], ts=base + 1000, seq=500)            # carries the lost notice
        got = drain(rd)
        stats = rd.stats()
        assert stats.backlog[cpus[1]] > 0                             # the held record is still there
    failed = counter(obj, "counters", FAILED)
    lost = [r for r in got if r.lost_samples]
    samples = [r for r in got if not r.lost_samples]
    assert failed > 0 and lost
    assert all(r.cpu == cpus[0] and r.raw_sample == b"" and r.timestamp == 0 for r in lost)
    assert sum(r.lost_samples for r in lost) == failed == stats.lost_samples
    assert len(samples) + failed == 201 and all(r.cpu == cpus[0] for r in samples)
    assert [r.timestamp for r in samples] == sorted(r.timestamp for r in samples)
    assert EVENT.unpack_from(samples[-1].raw_sample)[1] == 500


def test_records_that_wrap_the_ring_arrive_intact(obj: BPFObject, prog: Program, cpus: list[int]) -> None:
    base = now_ns() - 10**9
    expect, got = [], []
    with OrderedReader(obj.maps["events"], timestamp=0, page_cnt=1) as rd:
        for i in range(60):   # 144-byte records in a 4 KiB ring: every position, wrapping often
            emit(prog, 7, cpu=cpus[i % 2], ts=base + 7 * i, seq=7 * i, tag=i, extra=100)
            expect += [(cpus[i % 2], 7 * i + k, i) for k in range(7)]
            got += drain(rd, 0.02)
    assert [(r.cpu, *EVENT.unpack_from(r.raw_sample)[1:4:2]) for r in got] == expect
    assert [r.timestamp - base for r in got] == list(range(420))
    assert all(len(r.raw_sample) == 132 for r in got)


def test_kernel_timestamps_are_the_sample_time_and_non_decreasing(obj: BPFObject, cpus: list[int]) -> None:
    stress = obj.programs["emit_stress"]
    with OrderedReader(obj.maps["events"], timestamp="kernel") as rd:
        start = now_ns()
        for i in range(10):
            stress.test_run(ctx=STRESS.pack(20, i, PERF), cpu=cpus[i % 2])
        got = drain(rd)
        end = now_ns()
    assert len(got) == 200
    stamps = [r.timestamp for r in got]
    assert stamps == sorted(stamps) and not any(r.late for r in got)
    for r in got:
        written = EVENT.unpack_from(r.raw_sample)[0]      # bpf_ktime_get_ns() before the output
        assert start <= written <= r.timestamp <= end     # the sample time, on CLOCK_MONOTONIC


def test_field_name_timestamps_and_read_batch(obj: BPFObject, prog: Program, cpus: list[int]) -> None:
    base = now_ns() - 10**9
    with OrderedReader(obj.maps["events"], timestamp="ts", event=ORD_EVENT) as rd:
        emit(prog, 3, cpu=cpus[1], ts=base + 1, step=2, seq=10)
        emit(prog, 3, cpu=cpus[0], ts=base, step=2, seq=0)
        first = rd.read(timeout=30)                       # one record out of the drained batch ...
        batch = rd.read_batch(timeout=1)                 # ... and the rest of it
    assert isinstance(batch, OrderedBatch) and first.timestamp == base
    assert [t - base for t in batch.timestamps] == [1, 2, 3, 4, 5]
    assert batch.tags == [cpus[1], cpus[0], cpus[1], cpus[0], cpus[1]]
    assert batch.late == [False] * 5 and batch.lost_notices == []
    array = batch.to_numpy(ORD_EVENT)
    assert list(array["seq"]) == [10, 1, 11, 2, 12]
    assert [bytes(v)[:8] for v in batch] == [t.to_bytes(8, "little") for t in batch.timestamps]


def test_read_batch_times_out_empty_and_moves_lost_notices_aside(obj: BPFObject, prog: Program,
                                                                 cpus: list[int]) -> None:
    base = now_ns() - 10**9
    with OrderedReader(obj.maps["events"], timestamp=0, page_cnt=1) as rd:
        start = time.monotonic()
        assert len(rd.read_batch(timeout=0.05)) == 0
        assert time.monotonic() - start >= 0.05
        emit(prog, 100, cpu=cpus[0], ts=base, extra=200)
        emit(prog, 1, cpu=cpus[0], ts=base + 500)
        batches = [rd.read_batch(timeout=0.1) for _ in range(3)]
    notices = [n for b in batches for n in b.lost_notices]
    assert notices and all(cpu == cpus[0] for cpu, _ in notices)
    assert sum(len(b) for b in batches) + sum(n for _, n in notices) == 101
    assert all(not any(b.lost) for b in batches)


def test_ring_buffers_merge_like_cpus(obj: BPFObject, prog: Program) -> None:
    base = now_ns() - 10**9
    with OrderedReader([obj.maps["rb0"], obj.maps["rb1"]], timestamp=0) as rd:
        emit(prog, 20, ts=base + 1, step=2, seq=100, target=RB1)
        emit(prog, 20, ts=base, step=2, seq=0, target=RB0)
        emit(prog, 2, ts=base + 40, step=0, seq=200, target=RB1)   # ties: list order
        emit(prog, 2, ts=base + 40, step=0, seq=300, target=RB0)
        got = drain(rd)
        assert [r.timestamp - base for r in got] == list(range(40)) + [40] * 4
        assert seqs(got)[-4:] == [(0, 300), (0, 301), (1, 200), (1, 201)]
        assert [len(r.raw_sample) for r in got] == [32] * 44   # ring buffer records carry no padding
        # an idle ring buffer holds a record back for the window, asleep
        ts = now_ns()
        emit(prog, 1, ts=ts, target=RB0)
        rec = rd.read(timeout=30)         # released by the clock alone
        held = (now_ns() - ts) / 1e9
    assert rec.timestamp == ts and held >= 0.005


def test_close_interrupts_a_blocked_read_and_ends_iteration(obj: BPFObject, prog: Program) -> None:
    rd = OrderedReader(obj.maps["events"], timestamp=0)
    emit(prog, 3, ts=now_ns() - 10**9, seq=5)
    seen: list[int] = []
    caught: list[BaseException] = []

    def consume() -> None:
        try:
            for rec in rd:
                seen.append(EVENT.unpack_from(rec.raw_sample)[1])
            rd.read()
        except BaseException as e:  # the test inspects it
            caught.append(e)

    thread = threading.Thread(target=consume)
    thread.start()
    deadline = time.monotonic() + 60
    while len(seen) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # blocked in read() now
    rd.close()
    thread.join(60)
    assert not thread.is_alive() and seen == [5, 6, 7] and isinstance(caught[0], ClosedError)
    rd.close()
    with pytest.raises(ClosedError):
        rd.read(timeout=0)
    with pytest.raises(ClosedError):
        rd.read_batch(timeout=0)
    assert rd.stats().emitted == 3              # the final counters stay readable


def test_readers_dropped_without_close_release_everything(obj: BPFObject) -> None:
    """The finalizers are the safety net: no fd or mapping outlives a collected reader (no_fd_leak checks)."""
    OrderedReader(obj.maps["events"], timestamp=0)
    OrderedReader([obj.maps["rb0"], obj.maps["rb1"]], timestamp=0)
    PerfReader(obj.maps["events"])
    gc.collect()


def test_the_bpf_object_may_close_first(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["ordered"]) as o:
        o.load()
        rd = OrderedReader([o.maps["rb0"], o.maps["rb1"]], timestamp=0)
        pr = PerfReader(o.maps["events"])
    with rd, pr:   # the readers hold their own references to the maps
        with pytest.raises(TimeoutError):
            rd.read(timeout=0)
        pr.pause()
        pr.resume()


def test_bad_arguments(obj: BPFObject) -> None:
    events, rb0, rb1 = obj.maps["events"], obj.maps["rb0"], obj.maps["rb1"]
    with pytest.raises(TypeError, match="perf_event_array map or ringbuf maps; map 'counters' is array"):
        OrderedReader(obj.maps["counters"], timestamp=0)
    with pytest.raises(TypeError, match="needs a ringbuf map; map 'events' is perf_event_array"):
        OrderedReader([rb0, events], timestamp=0)
    with pytest.raises(ValueError, match="twice"):
        OrderedReader([rb0, rb0], timestamp=0)
    with pytest.raises(ValueError, match="kernel"):
        OrderedReader([rb0, rb1], timestamp="kernel")
    with pytest.raises(ValueError, match="'cpu' of event 'ord_event' is u32"):
        OrderedReader(events, timestamp="cpu", event=ORD_EVENT)
    with pytest.raises(ValueError, match="no field 'when'"):
        OrderedReader(events, timestamp="when", event=ORD_EVENT)
    with pytest.raises(ValueError, match="needs event="):
        OrderedReader(events, timestamp="ts")
    with pytest.raises(ValueError, match="does not fit"):
        OrderedReader(events, timestamp=28, event=ORD_EVENT)
    with pytest.raises(TypeError):
        OrderedReader(events, timestamp=True)
    with pytest.raises(ValueError, match="late"):
        OrderedReader(events, timestamp=0, late="reorder")
    with pytest.raises(ValueError, match="page_cnt"):
        OrderedReader(events, timestamp=0, page_cnt=3)
    with pytest.raises(ValueError, match="window_ms"):
        OrderedReader(events, timestamp=0, window_ms=-1)


# -- stress ----------------------------------------------------------------------------------------

def _stress(obj: BPFObject, rd: OrderedReader, target: int, cpus: list[int], runs: int = 60,
            per_run: int = 500) -> None:
    """One pinned thread per CPU runs emit_stress while this thread merges; then check the invariants."""
    stress = obj.programs["emit_stress"]

    def producer(cpu: int) -> None:
        os.sched_setaffinity(0, {cpu})
        for _ in range(runs):
            stress.test_run(ctx=STRESS.pack(per_run, 0, target), cpu=cpu)

    threads = [threading.Thread(target=producer, args=(cpu,)) for cpu in cpus]
    for t in threads:
        t.start()
    rows: list[tuple[int, int, bool, int, int]] = []   # (tag, timestamp, late, seq, gseq)
    lost_notices = 0

    def take(batch: OrderedBatch) -> None:
        nonlocal lost_notices
        lost_notices += sum(n for _, n in batch.lost_notices)
        for tag, ts, late, view in zip(batch.tags, batch.timestamps, batch.late, batch, strict=True):
            _ts, seq, _cpu, _tag, gseq = EVENT.unpack_from(view)
            rows.append((tag, ts, late, seq, gseq))

    while any(t.is_alive() for t in threads):
        take(rd.read_batch(timeout=0.02))
    for t in threads:
        t.join()
    while len(batch := rd.read_batch(timeout=0.2)) or batch.lost_notices:
        take(batch)   # empty the rings first, so that the records below fit
    # one more record per CPU: a perf ring writes its pending lost notice with the next sample that fits
    for cpu in cpus:
        stress.test_run(ctx=STRESS.pack(1, 1, target), cpu=cpu)
    while True:
        batch = rd.read_batch(timeout=0.2)
        if not len(batch) and not batch.lost_notices:
            break
        take(batch)
    stats = rd.stats()

    total, failed = counter(obj, "counters", GSEQ), counter(obj, "counters", FAILED)
    gseqs = [r[4] for r in rows]
    assert len(set(gseqs)) == len(gseqs)                        # nothing twice
    assert len(gseqs) + failed == total                          # every global seq arrived or was lost
    assert set(gseqs) <= set(range(total))
    if target == PERF:
        assert lost_notices == failed == stats.lost_samples      # ... and every loss was reported
    flagged = 0
    high = -1
    for _tag, ts, late, _seq, _gseq in rows:                     # non-decreasing except flagged records
        if late:
            flagged += 1
            assert ts < high
        else:
            assert ts >= high
            high = ts
    assert flagged == stats.late_events and stats.emitted == len(rows)
    for tag in {r[0] for r in rows}:                            # each ring keeps its own order
        ring = [r[3] for r in rows if r[0] == tag]
        assert ring == sorted(ring)
    if not stats.late_events:                                    # then: an offline stable sort
        assert [r[1] for r in rows] == sorted(r[1] for r in rows)


@pytest.mark.parametrize("page_cnt", [4, 64])   # 4 pages: losses and forced flushes; 64: few or none
@pytest.mark.parametrize("timestamp", [0, "kernel"])
def test_stress_perf_rings(obj: BPFObject, cpus: list[int], timestamp: int | str, page_cnt: int) -> None:
    with OrderedReader(obj.maps["events"], timestamp=timestamp, page_cnt=page_cnt) as rd:
        _stress(obj, rd, PERF, cpus)


def test_stress_ring_buffers(obj: BPFObject, cpus: list[int]) -> None:
    """Per-CPU ring buffers (rb0 for CPU 0, rb1 for the other), each big enough for its 6001 records."""
    maps: list[Map] = [obj.maps["rb0"], obj.maps["rb1"]]
    with OrderedReader(maps, timestamp="ts", event=ORD_EVENT) as rd:
        _stress(obj, rd, RB0, cpus, runs=60, per_run=100)
    assert counter(obj, "counters", FAILED) == 0
