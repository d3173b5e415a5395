"""PerfReader on the real kernel: read/timeout/read_into/pause/resume/close/iteration and lost records.

The samples come from tests/bpf/ordered.bpf.c (emit_ordered), run with
BPF_PROG_TEST_RUN pinned to a CPU, so each test knows which ring gets what.
"""

from __future__ import annotations

import errno
import functools
import os
import threading
import time

import pytest
from progs import ORD_EVENT as EVENT
from progs import blocked_in_epoll, emit_ordered, epoll_sets, object_fixture, program_fixture, wait_until

from pylibbpf import BPFObject, ClosedError, PerfReader, Program, Record
from pylibbpf.features import online_cpus

pytestmark = pytest.mark.usefixtures("bpf_privileged")

emit = functools.partial(emit_ordered, step=0)  # into the perf array; the reader ignores timestamps


def counter(obj: BPFObject, idx: int) -> int:
    raw = obj.maps["counters"].raw.lookup(idx)
    assert isinstance(raw, bytes)
    return int.from_bytes(raw, "little", signed=idx == 2)


obj = object_fixture("ordered")
prog = program_fixture("emit_ordered")


def test_read_returns_copies_with_the_writing_cpu(obj: BPFObject, prog: Program) -> None:
    with PerfReader(obj.maps["events"]) as rd:
        assert rd.cpus == [0, 1] or len(rd.cpus) >= 1
        for cpu in rd.cpus:
            emit(prog, 3, cpu=cpu, seq=cpu * 100, tag=cpu)
        got = [rd.read(timeout=30) for _ in range(3 * len(rd.cpus))]
    for rec in got:
        assert isinstance(rec.raw_sample, bytes) and rec.lost_samples == 0
        _ts, _seq, sample_cpu, tag, _ = EVENT.unpack_from(rec.raw_sample)
        assert rec.cpu == sample_cpu == tag       # the ring's CPU is the CPU that wrote
        assert len(rec.raw_sample) == 36          # 32 bytes + padding so that size + 4 is 8-aligned
    # one CPU's records keep that CPU's order
    for cpu in {r.cpu for r in got}:
        seqs = [EVENT.unpack_from(r.raw_sample)[1] for r in got if r.cpu == cpu]
        assert seqs == [cpu * 100 + i for i in range(3)]


def test_read_times_out_and_zero_does_not_wait(obj: BPFObject) -> None:
    with PerfReader(obj.maps["events"]) as rd:
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            rd.read(timeout=0.1)
        assert time.monotonic() - start >= 0.09  # it waited (a lower bound: load cannot break it)
        with pytest.raises(TimeoutError):
            rd.read(timeout=0)
        with pytest.raises(ValueError, match="timeout"):
            rd.read(timeout=-1)


def test_read_into_reuses_the_record_and_its_bytearray(obj: BPFObject, prog: Program) -> None:
    with PerfReader(obj.maps["events"]) as rd:
        emit(prog, 1, cpu=0, seq=1)
        emit(prog, 1, cpu=0, seq=2, extra=100)
        emit(prog, 1, cpu=0, seq=3)
        rec = Record()
        rd.read_record_into(rec, timeout=30)
        buf = rec.raw_sample
        assert isinstance(buf, bytearray) and EVENT.unpack_from(buf)[1] == 1
        rd.read_record_into(rec, timeout=30)
        assert rec.raw_sample is buf and len(buf) == 132 and EVENT.unpack_from(buf)[1] == 2
        view = memoryview(buf)   # a live export: the bytearray cannot be resized ...
        with pytest.raises(BufferError):
            rd.read_record_into(rec, timeout=30)
        view.release()
        rd.read_record_into(rec, timeout=30)  # ... and the record was not lost
        assert rec.raw_sample is buf and EVENT.unpack_from(buf)[1] == 3 and len(buf) == 36
        assert rec.cpu == 0 and rec.lost_samples == 0


def test_pause_makes_writes_fail_with_enoent_and_resume_restores(obj: BPFObject, prog: Program) -> None:
    with PerfReader(obj.maps["events"]) as rd:
        emit(prog, 1, cpu=0, seq=1)
        rd.pause()
        rd.pause()  # idempotent
        assert rd.paused
        emit(prog, 2, cpu=0, seq=2)
        assert counter(obj, 0) == 2 and counter(obj, 2) == -errno.ENOENT
        assert EVENT.unpack_from(rd.read(timeout=30).raw_sample)[1] == 1  # already in the ring: still read
        with pytest.raises(TimeoutError):
            rd.read(timeout=0.05)
        rd.resume()
        assert not rd.paused
        emit(prog, 1, cpu=0, seq=4)
        assert EVENT.unpack_from(rd.read(timeout=30).raw_sample)[1] == 4
        assert counter(obj, 0) == 2


def _start_blocked_read(rd: PerfReader) -> tuple[threading.Thread, list[BaseException]]:
    """A thread running ``rd.read()`` (no timeout); what it raised lands in the list."""
    caught: list[BaseException] = []

    def reader() -> None:
        try:
            rd.read()
        except BaseException as e:  # the test inspects it
            caught.append(e)

    thread = threading.Thread(target=reader)
    thread.start()
    return thread, caught


def test_close_interrupts_a_blocked_read_and_is_idempotent(obj: BPFObject) -> None:
    rd = PerfReader(obj.maps["events"])
    thread, caught = _start_blocked_read(rd)
    time.sleep(0.05)
    rd.close()
    thread.join(60)
    assert not thread.is_alive() and isinstance(caught[0], ClosedError)
    rd.close()
    with pytest.raises(ClosedError):
        rd.read(timeout=0)
    with pytest.raises(ClosedError):
        rd.pause()


def test_closing_removes_the_rings_from_the_map(obj: BPFObject, prog: Program) -> None:
    PerfReader(obj.maps["events"]).close()
    emit(prog, 1, cpu=0)
    assert counter(obj, 2) == -errno.ENOENT


def test_iteration_ends_when_closed(obj: BPFObject, prog: Program) -> None:
    rd = PerfReader(obj.maps["events"])
    seen: list[int] = []

    def producer() -> None:
        emit(prog, 5, cpu=0, seq=10)
        deadline = time.monotonic() + 60
        while len(seen) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        rd.close()

    thread = threading.Thread(target=producer)
    thread.start()
    for rec in rd:
        seen.append(EVENT.unpack_from(rec.raw_sample)[1])
    thread.join(60)
    assert seen == [10, 11, 12, 13, 14]


def test_a_full_ring_yields_a_lost_samples_record(obj: BPFObject, prog: Program) -> None:
    with PerfReader(obj.maps["events"], per_cpu_buffer=4096) as rd:
        emit(prog, 200, cpu=0, extra=200)            # 236-byte samples: 4 KiB holds 16
        emit(prog, 1, cpu=0, seq=1000)               # the notice goes out with the next sample that fits
        records = []
        while True:
            try:
                records.append(rd.read(timeout=0.05))
            except TimeoutError:
                break
    lost = [r for r in records if r.lost_samples]
    samples = [r for r in records if not r.lost_samples]
    assert lost and all(r.cpu == 0 and r.raw_sample == b"" for r in lost)
    failed = counter(obj, 0)
    assert failed > 0 and sum(r.lost_samples for r in lost) == failed
    assert len(samples) + failed == 201
    assert EVENT.unpack_from(samples[-1].raw_sample)[1] == 1000


def _read_while(rd: PerfReader, timeout: float | None, action: object) -> tuple[Record, float]:
    """Start a blocking read in a thread, run action() once it sleeps in epoll_wait; the record and how
    long the read took. ``timeout=None``: only a wakeup can end the read; not woken within 30 s, the
    reader is closed and the test fails."""
    out: list[tuple[Record, float]] = []

    def reader() -> None:
        start = time.monotonic()
        rec = rd.read(timeout=timeout)
        out.append((rec, time.monotonic() - start))

    thread = threading.Thread(target=reader)
    thread.start()
    assert wait_until(lambda: not thread.is_alive() or (thread.native_id is not None
                                                        and blocked_in_epoll(thread.native_id)))
    action()  # type: ignore[operator]
    thread.join(30 if timeout is None else timeout + 30)
    if thread.is_alive():
        rd.close()
        thread.join()
        pytest.fail("the read was not woken")
    assert out, "the read raised"
    return out[0]


def test_watermark_holds_wakeups_until_enough_bytes(obj: BPFObject, prog: Program) -> None:
    with PerfReader(obj.maps["events"], per_cpu_buffer=8192, watermark=1024) as rd:
        assert rd.buffer_size == 8192
        # one sample, below the watermark: no wakeup; the read drains the ring when its time is up
        rec, took = _read_while(rd, 2.0, lambda: emit(prog, 1, cpu=0, seq=1))
        assert took >= 1.99 and EVENT.unpack_from(rec.raw_sample)[1] == 1
        # 40 * 36 bytes: over the watermark, the reader wakes at once
        rec, _ = _read_while(rd, None, lambda: emit(prog, 40, cpu=0, seq=2))
        assert EVENT.unpack_from(rec.raw_sample)[1] == 2


def test_every_sample_wakes_by_default(obj: BPFObject, prog: Program) -> None:
    with PerfReader(obj.maps["events"]) as rd:
        rec, _ = _read_while(rd, None, lambda: emit(prog, 1, cpu=1, seq=7))
        assert rec.cpu == 1 and EVENT.unpack_from(rec.raw_sample)[1] == 7


def test_wakeup_events_and_buffer_rounding(obj: BPFObject, prog: Program) -> None:
    with PerfReader(obj.maps["events"], per_cpu_buffer=9000, wakeup_events=4) as rd:
        assert rd.buffer_size == 4 * 4096        # 3 pages -> the next power of two
        emit(prog, 4, cpu=0)
        assert len([rd.read(timeout=30) for _ in range(4)]) == 4
    with PerfReader(obj.maps["events"], per_cpu_buffer=1) as rd:
        assert rd.buffer_size == 4096


def test_wrong_map_type_and_bad_options(obj: BPFObject) -> None:
    with pytest.raises(TypeError, match="needs a perf_event_array map; map 'rb0' is ringbuf"):
        PerfReader(obj.maps["rb0"])
    with pytest.raises(ValueError, match="per_cpu_buffer"):
        PerfReader(obj.maps["events"], per_cpu_buffer=0)
    with pytest.raises(ValueError, match="watermark"):
        PerfReader(obj.maps["events"], per_cpu_buffer=4096, watermark=4096)
    with pytest.raises(ValueError, match="cannot both"):
        PerfReader(obj.maps["events"], watermark=100, wakeup_events=2)
    with pytest.raises(ValueError, match="wakeup_events"):
        PerfReader(obj.maps["events"], wakeup_events=0)


def test_a_blocked_read_wakes_for_a_sample_on_each_cpu(obj: BPFObject, prog: Program) -> None:
    # The wait watches each CPU ring's perf event fd itself: a sample on any ring wakes it.
    with PerfReader(obj.maps["events"]) as rd:
        for cpu in online_cpus():
            rec, _ = _read_while(rd, None, lambda cpu=cpu: emit(prog, 1, cpu=cpu, seq=50 + cpu))
            assert rec.cpu == cpu and EVENT.unpack_from(rec.raw_sample)[1] == 50 + cpu


def test_the_wait_watches_the_perf_fds_directly_not_a_nested_epoll_set(obj: BPFObject) -> None:
    # While a read blocks, no epoll set of the process watches another epoll set (libbpf's, which
    # also holds the rings: it would add a wakeup hop and take wakeups, a perf fd reporting each
    # to one poll only), and one set holds a perf event fd per ring.
    rd = PerfReader(obj.maps["events"])
    thread, caught = _start_blocked_read(rd)
    try:
        assert wait_until(lambda: thread.native_id is not None and blocked_in_epoll(thread.native_id))
        sets = epoll_sets()
        assert not [fd for fd, targets in sets.items() if set(targets) & set(sets)]
        kinds = {fd: [os.readlink(f"/proc/self/fd/{t}") for t in targets] for fd, targets in sets.items()}
        assert [fd for fd, k in kinds.items() if k.count("anon_inode:[perf_event]") == len(rd.cpus)]
    finally:
        rd.close()
        thread.join(60)
    assert not thread.is_alive() and isinstance(caught[0], ClosedError)


def test_read_into_fills_rows_and_the_record_form_is_deprecated(obj: BPFObject, prog: Program) -> None:
    import numpy as np

    with PerfReader(obj.maps["events"]) as rd:
        emit(prog, 2, cpu=0, seq=10)
        emit(prog, 1, cpu=0, seq=12, extra=100)  # another size: handed back
        emit(prog, 1, cpu=0, seq=13)
        out = np.zeros(8, dtype=[("ts", "<u8"), ("seq", "<u8"), ("cpu", "<u4"), ("tag", "<u4"),
                                 ("gseq", "<u8")])  # struct ord_event
        assert rd.read_into(out, 30, record_size=None) == 3
        assert list(out["seq"][:3]) == [10, 11, 13]
        assert [(o.row, EVENT.unpack_from(o.data)[1]) for o in rd.take_odd()] == [(2, 12)]
        assert rd.read_into(out, 0) == 0  # nothing left: no wait
        emit(prog, 1, cpu=0, seq=20)
        rec = Record()
        with pytest.warns(DeprecationWarning, match=r"read_into\(record\) is deprecated: use read_record_into"):
            rd.read_into(rec, timeout=30)
        assert EVENT.unpack_from(rec.raw_sample)[1] == 20
