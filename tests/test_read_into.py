"""read_into(out): records straight from the kernel rings into a caller's array, on the real kernel.

Every reader (RingBuffer, PerfBuffer, OrderedReader, the mmap layer) gets records from
tests/bpf/ordered.bpf.c (struct ord_event, 32 bytes, plus `extra` bytes when asked, so that
sizes can be mixed) and must: fill rows in ring order, hand records of another size back whole
and in place (take_odd), leave what did not fit in the ring, wait and time out as documented,
and refuse bad arguments naming them.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from progs import (
    ORD_EVENT,
    ORD_PERF,
    ORD_RB0,
    ORD_RB1,
    call_blocked,
    emit_ordered,
    object_fixture,
    old_ts,
    program_fixture,
    signal_thrice,
)

from pylibbpf import (
    FLAG_LATE,
    FLAG_LOST,
    BPFObject,
    ClosedError,
    OddRecord,
    OrderedReader,
    PerfBuffer,
    Program,
    Record,
    RingBuffer,
    defevent,
    map_ringbuf,
    read_ringbuf_into,
)

pytestmark = pytest.mark.usefixtures("bpf_privileged")

EV = np.dtype([("ts", "<u8"), ("seq", "<u8"), ("cpu", "<u4"), ("tag", "<u4"), ("gseq", "<u8")])
EVENT = defevent("ord_event", ("ts", "u64"), ("seq", "u64"), ("cpu", "u32"), ("tag", "u32"), ("gseq", "u64"))


obj = object_fixture("ordered")
prog = program_fixture("emit_ordered")


def seq_of(odd: OddRecord) -> int:
    return int(ORD_EVENT.unpack_from(odd.data)[1])


def ignore(*_: object) -> None:
    return None


# --- RingBuffer ----------------------------------------------------------------------------------


def test_ringbuffer_rows_in_order_odd_sizes_handed_back(obj: BPFObject, prog: Program) -> None:
    rb = RingBuffer(obj.maps["rb0"], ignore)
    with rb:
        emit_ordered(prog, 3, seq=0, tag=7, target=ORD_RB0)
        emit_ordered(prog, 1, seq=100, extra=3, target=ORD_RB0)    # 35 bytes
        emit_ordered(prog, 2, seq=3, tag=7, target=ORD_RB0)
        emit_ordered(prog, 1, seq=101, extra=200, target=ORD_RB0)  # 232 bytes
        emit_ordered(prog, 1, seq=5, tag=7, target=ORD_RB0)
        out = np.zeros(10, EV)
        assert rb.read_into(out, timeout=30) == 6
        assert out["seq"][:6].tolist() == [0, 1, 2, 3, 4, 5]
        assert (out["tag"][:6] == 7).all() and (out["seq"][6:] == 0).all()
        odd = rb.take_odd()
        assert [(o.row, len(o.data), seq_of(o), o.ring) for o in odd] == [(3, 35, 100, 0), (5, 232, 101, 0)]
        assert rb.odd_records == 2 and rb.take_odd() == []
        assert rb.read_into(out, timeout=0) == 0


def test_ringbuffer_partial_out_leaves_the_rest_in_the_ring(obj: BPFObject, prog: Program) -> None:
    got: list[int] = []
    rb = RingBuffer(obj.maps["rb0"], lambda d: got.append(ORD_EVENT.unpack_from(d)[1]))
    with rb:
        emit_ordered(prog, 10, seq=0, target=ORD_RB0)
        out = np.zeros(3, EV)
        for first in (0, 3, 6):
            assert rb.read_into(out, timeout=30) == 3
            assert out["seq"].tolist() == [first, first + 1, first + 2]
        # the record left over goes to whoever reads next, once
        assert rb.poll(1) == 1 and got == [9]
        assert rb.read_into(out, timeout=0) == 0


def test_ringbuffer_two_rings_and_pending_records_first(obj: BPFObject, prog: Program) -> None:
    stop_after = 2
    seen: list[int] = []

    def cb(d: memoryview) -> int:
        seen.append(ORD_EVENT.unpack_from(d)[1])
        return -1 if len(seen) == stop_after else 0

    rb = RingBuffer(obj.maps["rb0"], cb)
    with rb:
        rb.add(obj.maps["rb1"], ignore)
        emit_ordered(prog, 5, seq=0, target=ORD_RB0)
        assert rb.poll(1) == 2  # the callback stopped: 3 records drained, pending
        emit_ordered(prog, 2, seq=50, target=ORD_RB1)
        emit_ordered(prog, 1, seq=60, extra=8, target=ORD_RB1)
        out = np.zeros(8, EV)
        n = rb.read_into(out, timeout=30)
        assert n == 5
        assert out["seq"][:5].tolist() == [2, 3, 4, 50, 51]
        odd = rb.take_odd()
        assert [(o.row, o.ring, seq_of(o)) for o in odd] == [(5, 1, 60)]


def test_ringbuffer_discarded_records_skipped(rb_obj: BPFObject) -> None:
    from progs import emit_ring
    rb_ev = np.dtype([("seq", "<u8"), ("value", "<u8"), ("ring", "<u4"), ("pad", "<u4")])
    rb = RingBuffer(rb_obj.maps["rb"], ignore)
    with rb:
        emit_ring(rb_obj.programs["emit"], 9, first_seq=0, value=5, discard_every=3)
        out = np.zeros(16, rb_ev)
        assert rb.read_into(out, timeout=30) == 6
        assert out["seq"][:6].tolist() == [0, 1, 3, 4, 6, 7]
        assert rb.odd_records == 0


def test_ringbuffer_plain_buffer_and_event_def(obj: BPFObject, prog: Program) -> None:
    rb = RingBuffer(obj.maps["rb0"], ignore)
    with rb:
        emit_ordered(prog, 2, seq=40, target=ORD_RB0)
        buf = bytearray(32 * 4)
        assert rb.read_into(buf, timeout=30, record_size=32) == 2
        assert [ORD_EVENT.unpack_from(buf, 32 * i)[1] for i in range(2)] == [40, 41]
        emit_ordered(prog, 1, seq=42, target=ORD_RB0)
        out = np.zeros(2, EVENT.numpy_dtype())
        assert rb.read_into(out, timeout=30, record_size=EVENT) == 1
        assert int(out["seq"][0]) == 42
        assert rb.read_into(np.zeros(0, EV), timeout=None) == 0  # no rows: no wait


def test_ringbuffer_rows_of_any_typed_c_contiguous_buffer(obj: BPFObject, prog: Program) -> None:
    """A 2-d array's rows are its elements in C order; a memoryview of an array is its array."""
    rb = RingBuffer(obj.maps["rb0"], ignore)
    with rb:
        emit_ordered(prog, 5, seq=10, target=ORD_RB0)
        grid = np.zeros((2, 2), EV)
        assert rb.read_into(grid, timeout=30) == 4
        assert grid["seq"].tolist() == [[10, 11], [12, 13]]
        flat = np.zeros(3, EV)
        assert rb.read_into(memoryview(flat), timeout=30) == 1 and int(flat["seq"][0]) == 14
        emit_ordered(prog, 1, seq=15, target=ORD_RB0)
        named = np.zeros(2, [("ts", "<u8"), ("Obj", "<u8"), ("cpu", "<u4"), ("tag", "<u4"), ("gseq", "<u8")])
        assert rb.read_into(named, timeout=30) == 1 and int(named["Obj"][0]) == 15  # a field named O..., no object


def test_ringbuffer_blocks_until_data_and_times_out(obj: BPFObject, prog: Program) -> None:
    rb = RingBuffer(obj.maps["rb0"], ignore)
    with rb:
        out = np.zeros(4, EV)
        start = time.monotonic()
        assert rb.read_into(out, timeout=0.05) == 0
        assert time.monotonic() - start >= 0.05
        result: list[int] = []
        t = threading.Thread(target=lambda: result.append(rb.read_into(out, timeout=None)))
        t.start()
        time.sleep(0.05)
        emit_ordered(prog, 1, seq=77, target=ORD_RB0)
        t.join(60)
        assert result == [1] and int(out["seq"][0]) == 77


def _reader_with_a_last_ring(obj: BPFObject, prog: Program, kind: str) -> tuple[Any, int, Callable[..., None]]:
    """A RingBuffer of rb0 and rb1, or a PerfBuffer; the tag of its last ring (ring buffer 1, the
    last CPU) and ``emit(count, **kw)`` writing there."""
    if kind == "ring":
        rb = RingBuffer(obj.maps["rb0"], ignore)
        rb.add(obj.maps["rb1"], ignore)
        return rb, 1, lambda count, **kw: emit_ordered(prog, count, target=ORD_RB1, **kw)
    cpu = sorted(os.sched_getaffinity(0))[-1]
    return (PerfBuffer(obj.maps["events"], ignore), cpu,
            lambda count, **kw: emit_ordered(prog, count, target=ORD_PERF, cpu=cpu, **kw))


@pytest.mark.parametrize("kind", ["ring", "perf"])
def test_a_blocked_read_into_is_filled_by_the_call_that_waited(obj: BPFObject, prog: Program, kind: str) -> None:
    """The wait and the fill are one C call (plb_rb_wait_into / plb_pb_wait_into): records written
    on the last ring once the reader sleeps in epoll_wait, an odd one first, come back as rows and a
    kept record, the rings before it read on the way."""
    reader, tag, emit = _reader_with_a_last_ring(obj, prog, kind)
    with reader:
        out = np.zeros(4, EV)
        t, result = call_blocked(lambda: reader.read_into(out, timeout=None))
        emit(1, seq=60, extra=9)
        emit(2, seq=50)
        t.join(60)
        assert not t.is_alive() and len(result) == 1 and type(result[0]) is int
        n = result[0]
        deadline = time.monotonic() + 60  # a wakeup may come between the two records of one emit
        while n < 2 and time.monotonic() < deadline:
            n += reader.read_into(out[n:], timeout=0.5)
        assert n == 2 and out["seq"][:2].tolist() == [50, 51]
        assert [(o.row, o.ring, seq_of(o)) for o in reader.take_odd()] == [(0, tag, 60)]
        assert reader.read_into(out, timeout=0) == 0


def test_ringbuffer_a_signal_whose_handler_returns_resumes_a_blocked_read_into(
        obj: BPFObject, prog: Program) -> None:
    """EINTR brings the wait back to Python for the handler; then it waits again, for the time left."""
    handled: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: handled.append(signum))
    main = threading.get_ident()
    out = np.zeros(4, EV)
    try:
        with RingBuffer(obj.maps["rb0"], ignore) as rb:
            for then_emit, timeout in ((True, None), (False, 0.4)):
                t = signal_thrice(main, (lambda: emit_ordered(prog, 1, seq=9, target=ORD_RB0)) if then_emit else None)
                t0 = time.monotonic()
                try:
                    n = rb.read_into(out, timeout=timeout)
                finally:
                    t.join(60)
                if then_emit:
                    assert n == 1 and int(out["seq"][0]) == 9
                else:
                    assert n == 0 and time.monotonic() - t0 >= 0.39  # the whole timeout (a lower bound)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert len(handled) == 6


@pytest.mark.parametrize("kind", ["ring", "perf"])
def test_close_wakes_a_blocked_read_into(obj: BPFObject, prog: Program, kind: str) -> None:
    reader, _, _ = _reader_with_a_last_ring(obj, prog, kind)
    t, result = call_blocked(lambda: reader.read_into(np.zeros(4, EV), timeout=None))
    reader.close()
    t.join(60)
    assert not t.is_alive() and len(result) == 1 and isinstance(result[0], ClosedError)
    with pytest.raises(ClosedError):
        reader.read_into(np.zeros(4, EV), timeout=0)


def test_ringbuffer_read_into_from_its_own_callback(obj: BPFObject, prog: Program) -> None:
    errors: list[BaseException] = []
    rb: RingBuffer

    def cb(_: memoryview) -> None:
        try:
            rb.read_into(np.zeros(1, EV), timeout=0)
        except RuntimeError as e:
            errors.append(e)

    rb = RingBuffer(obj.maps["rb0"], cb)
    with rb:
        emit_ordered(prog, 1, target=ORD_RB0)
        assert rb.poll(1) == 1
    assert len(errors) == 1 and "own callback" in str(errors[0])


def test_read_into_in_a_forked_child(obj: BPFObject) -> None:
    rb = RingBuffer(obj.maps["rb0"], ignore)
    with rb:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                rb.read_into(np.zeros(1, EV), timeout=0)
            except ClosedError:
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0


# --- to_numpy keeps its results ------------------------------------------------------------------


def test_read_batch_to_numpy_matches_read_into(obj: BPFObject, prog: Program) -> None:
    rb = RingBuffer(obj.maps["rb0"], ignore)
    with rb:
        emit_ordered(prog, 20, seq=0, ts=5, target=ORD_RB0)
        batch = rb.read_batch()
        arr = batch.to_numpy(EVENT)
        emit_ordered(prog, 20, seq=0, ts=5, target=ORD_RB0)
        out = np.zeros(20, EVENT.numpy_dtype())
        assert rb.read_into(out, timeout=30) == 20
        assert arr.tobytes() == out.tobytes() and arr.flags.writeable


# --- PerfBuffer ----------------------------------------------------------------------------------


def test_perfbuffer_padding_odd_sizes_and_cpus(obj: BPFObject, prog: Program) -> None:
    cpus = sorted(os.sched_getaffinity(0))[:2]
    pb = PerfBuffer(obj.maps["events"], ignore)
    with pb:
        emit_ordered(prog, 3, seq=0, target=ORD_PERF, cpu=cpus[0])
        # 36 bytes: the kernel stores 32 + 4 bytes of u32 size as 40, like 32 bytes: the same row size
        emit_ordered(prog, 1, seq=3, extra=4, target=ORD_PERF, cpu=cpus[0])
        emit_ordered(prog, 1, seq=90, extra=9, target=ORD_PERF, cpu=cpus[0])  # 41 bytes: odd
        emit_ordered(prog, 1, seq=4, target=ORD_PERF, cpu=cpus[-1])
        out = np.zeros(8, EV)
        n = 0
        deadline = time.monotonic() + 60
        while n < 5 and time.monotonic() < deadline:
            n += pb.read_into(out[n:], timeout=0.5)
        assert n == 5
        rows = sorted(zip(out["seq"][:n].tolist(), out["cpu"][:n].tolist(), strict=True))
        assert rows == [(0, cpus[0]), (1, cpus[0]), (2, cpus[0]), (3, cpus[0]), (4, cpus[-1])]
        odd = pb.take_odd()
        assert [(seq_of(o), o.ring, len(o.data)) for o in odd] == [(90, cpus[0], 44)]
        assert pb.odd_records == 1


def test_perfbuffer_lost_samples_counted(obj: BPFObject, prog: Program) -> None:
    pb = PerfBuffer(obj.maps["events"], ignore, page_cnt=1)
    with pb:
        emit_ordered(prog, 400, seq=0, target=ORD_PERF, cpu=0)  # 48 bytes each into one 4 KiB ring
        out = np.zeros(1000, EV)
        n = pb.read_into(out, timeout=30)
        emit_ordered(prog, 1, seq=400, target=ORD_PERF, cpu=0)  # the kernel writes the lost notice first
        n += pb.read_into(out[n:], timeout=30)
        assert pb.lost_samples > 0
        assert n + pb.lost_samples == 401
        seqs = out["seq"][:n].tolist()
        assert seqs == sorted(seqs) and seqs[-1] == 400


# --- OrderedReader -------------------------------------------------------------------------------


def test_ordered_rows_timestamps_flags_and_odd(obj: BPFObject, prog: Program) -> None:
    cpus = sorted(os.sched_getaffinity(0))[:2]
    base = old_ts()
    with OrderedReader(obj.maps["events"], timestamp=0, window_ms=1) as rd:
        emit_ordered(prog, 3, ts=base, step=2, seq=0, target=ORD_PERF, cpu=cpus[0])
        emit_ordered(prog, 3, ts=base + 1, step=2, seq=10, target=ORD_PERF, cpu=cpus[-1])
        emit_ordered(prog, 1, ts=base + 6, seq=20, extra=20, target=ORD_PERF, cpu=cpus[0])  # odd size
        emit_ordered(prog, 1, ts=base + 7, seq=21, target=ORD_PERF, cpu=cpus[0])
        out, ts, fl = np.zeros(16, EV), np.zeros(16, np.uint64), np.zeros(16, np.uint8)
        n = rd.read_into(out, timeout=30, timestamps=ts, flags=fl)
        deadline = time.monotonic() + 60
        while n < 7 and time.monotonic() < deadline:
            n += rd.read_into(out[n:], timeout=0.5, timestamps=ts[n:], flags=fl[n:])
        assert n == 7
        assert (ts[:n] - base).tolist() == [0, 1, 2, 3, 4, 5, 7]
        assert out["seq"][:n].tolist() == [0, 10, 1, 11, 2, 12, 21]
        assert (ts[:n] == out["ts"][:n]).all() and not fl[:n].any()
        odd = rd.take_odd()
        assert [(o.row, seq_of(o), o.timestamp - base, o.ring, o.flags) for o in odd] == [(6, 20, 6, cpus[0], 0)]
        # a late record: flagged in the column
        emit_ordered(prog, 1, ts=base + 3, seq=30, target=ORD_PERF, cpu=cpus[0])
        assert rd.read_into(out, timeout=30, timestamps=ts, flags=fl) == 1
        assert int(out["seq"][0]) == 30 and fl[0] == FLAG_LATE


def test_ordered_lost_notice_as_a_row(obj: BPFObject, prog: Program) -> None:
    base = old_ts()
    with OrderedReader(obj.maps["events"], timestamp=0, window_ms=1, page_cnt=1) as rd:
        emit_ordered(prog, 300, ts=base, seq=0, target=ORD_PERF, cpu=0)
        out, ts, fl = np.zeros(400, EV), np.zeros(400, np.uint64), np.zeros(400, np.uint8)
        n = rd.read_into(out, timeout=30, timestamps=ts, flags=fl)
        emit_ordered(prog, 1, ts=base + 1, seq=300, target=ORD_PERF, cpu=0)
        deadline = time.monotonic() + 60
        while not (fl[:n] & FLAG_LOST).any() and time.monotonic() < deadline:
            n += rd.read_into(out[n:], timeout=0.5, timestamps=ts[n:], flags=fl[n:])
        lost = fl[:n] & FLAG_LOST != 0
        assert lost.sum() >= 1
        assert out[:n][lost].tobytes() == bytes(int(lost.sum()) * EV.itemsize)
        samples = int(ts[:n][lost].sum())
        assert samples == rd.stats().lost_samples
        assert int((~lost).sum()) + samples == 301


def test_ordered_ring_buffers_and_record_form(obj: BPFObject, prog: Program) -> None:
    base = old_ts()
    with OrderedReader([obj.maps["rb0"], obj.maps["rb1"]], timestamp="ts", event=EVENT, window_ms=1) as rd:
        emit_ordered(prog, 2, ts=base + 1, step=2, seq=0, target=ORD_RB0)
        emit_ordered(prog, 2, ts=base, step=2, seq=10, target=ORD_RB1)
        rec = Record(raw_sample=bytearray())
        keep = rec.raw_sample
        rd.read_record_into(rec, timeout=30)  # the Record form, as PerfReader's
        assert rec.raw_sample is keep and rec.timestamp == base and rec.cpu == 1
        out, ts = np.zeros(8, EV), np.zeros(8, np.uint64)
        n = rd.read_into(out, timeout=30, timestamps=ts)
        deadline = time.monotonic() + 60
        while n < 3 and time.monotonic() < deadline:
            n += rd.read_into(out[n:], timeout=0.5, timestamps=ts[n:])
        assert out["seq"][:n].tolist() == [0, 11, 1]
        assert (ts[:n] - base).tolist() == [1, 2, 3]


# --- the mmap layer ------------------------------------------------------------------------------


def test_layout_read_into_and_read_ringbuf_into(obj: BPFObject, prog: Program) -> None:
    with map_ringbuf(obj.maps["rb0"]) as layout:
        emit_ordered(prog, 2, seq=0, target=ORD_RB0)
        emit_ordered(prog, 1, seq=9, extra=1, target=ORD_RB0)
        emit_ordered(prog, 2, seq=2, target=ORD_RB0)
        out = np.zeros(3, EV)
        assert read_ringbuf_into(layout, out) == 3
        assert out["seq"].tolist() == [0, 1, 2]
        assert [(o.row, seq_of(o)) for o in layout.take_odd()] == [(2, 9)]
        assert layout.read_into(out, timeout=30) == 1 and int(out["seq"][0]) == 3
        assert layout.available() == 0
        assert layout.read_into(out, timeout=0.02) == 0


# --- bad arguments -------------------------------------------------------------------------------


def test_bad_arguments(obj: BPFObject) -> None:
    with RingBuffer(obj.maps["rb0"], ignore) as rb:
        with pytest.raises(TypeError, match="out must be a writable buffer"):
            rb.read_into(b"x" * 64, record_size=32)
        with pytest.raises(TypeError, match="out must be a writable buffer"):
            rb.read_into(None)
        ro = np.zeros(2, EV)
        ro.flags.writeable = False
        with pytest.raises(ValueError, match="out must be writable"):
            rb.read_into(ro)
        with pytest.raises(ValueError, match="C-contiguous"):
            rb.read_into(np.zeros(4, EV)[::2])
        with pytest.raises(ValueError, match="C-contiguous"):
            rb.read_into(np.zeros((2, 2), EV, order="F"))
        with pytest.raises(ValueError, match="record_size"):
            rb.read_into(bytearray(64))
        with pytest.raises(ValueError, match="record_size"):
            rb.read_into(np.zeros(64, np.uint8))  # one-byte items: plain bytes
        with pytest.raises(ValueError, match="record_size"):
            rb.read_into(np.zeros((), EV))  # 0-d
        # items holding Python references: record bytes there would be followed as pointers
        for holds_objects in (np.zeros(4, object), np.zeros(4, [("seq", "<u8"), ("ref", "O"), ("pad", "V16")]),
                              memoryview(np.zeros(4, object))):
            with pytest.raises(TypeError, match="out must not hold Python objects"):
                rb.read_into(holds_objects, timeout=0)
            with pytest.raises(TypeError, match="out must not hold Python objects"):
                rb.read_into(holds_objects, timeout=0, record_size=32)
        with pytest.raises(ValueError, match="record_size is 24 bytes but out's items are 32"):
            rb.read_into(np.zeros(2, EV), record_size=24)
        with pytest.raises(ValueError, match="record_size must be >= 1, got 0"):
            rb.read_into(bytearray(64), record_size=0)
        with pytest.raises(TypeError, match="record_size must be an int"):
            rb.read_into(bytearray(64), record_size=True)
        with pytest.raises(ValueError, match="not a whole number of 24-byte records"):
            rb.read_into(bytearray(64), record_size=24)
        with pytest.raises(ValueError, match="timeout must be >= 0"):
            rb.read_into(np.zeros(2, EV), timeout=-1)
        with pytest.raises(TypeError, match="timeout"):
            rb.read_into(np.zeros(2, EV), timeout="1")  # type: ignore[arg-type]
    with OrderedReader(obj.maps["rb0"], timestamp=0) as rd:
        with pytest.raises(TypeError, match="timestamps must be an array of uint64"):
            rd.read_into(np.zeros(2, EV), timestamps=np.zeros(2, np.int32))
        with pytest.raises(ValueError, match="timestamps has 1 entries, fewer than out's 2 rows"):
            rd.read_into(np.zeros(2, EV), timestamps=np.zeros(1, np.uint64))
        with pytest.raises(TypeError, match="flags must be an array of uint8"):
            rd.read_into(np.zeros(2, EV), flags=np.zeros(2, np.uint64))
        with pytest.raises(TypeError, match="for an array out"):
            rd.read_into(Record(), flags=np.zeros(2, np.uint8))
        rd.close()
        with pytest.raises(ClosedError):
            rd.read_into(np.zeros(2, EV), timeout=0)
    with map_ringbuf(obj.maps["rb0"]) as layout, pytest.raises(ValueError, match="record_size"):
        layout.read_into(bytearray(32))
    with pytest.raises(TypeError, match="layout must be a RingBufLayout"):
        read_ringbuf_into(obj.maps["rb0"], np.zeros(1, EV))  # type: ignore[arg-type]
