"""RingBuffer.read_arrow(event): records straight from the kernel ring into Arrow columns, on the real kernel.

The same RecordBatch as ``read_batch().to_arrow(event)`` (tests/bpf/arrow.bpf.c: integers, a signed
field, a u16 array, a char[16] comm with invalid UTF-8), in ring order across the ring's wrap and
across calls; records of another size handed back in place (tests/bpf/ordered.bpf.c mixes sizes);
discarded records skipped; what an earlier poll left first; waits, timeouts, close and bad arguments.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from progs import (
    ORD_EVENT,
    ORD_RB0,
    ORD_RB1,
    call_blocked,
    emit_ordered,
    emit_ring,
    object_fixture,
    program_fixture,
)
from test_arrow import EVENT as ARROW_EVENT
from test_arrow import TO_RING, arrow_object, check_event_columns, emit

import pylibbpf.ringbuf
from pylibbpf import BPFObject, ClosedError, Program, RingBuffer, defevent

pytestmark = pytest.mark.usefixtures("bpf_privileged")

EVENT = defevent("ord_event", ("ts", "u64"), ("seq", "u64"), ("cpu", "u32"), ("tag", "u32"), ("gseq", "u64"))


def ignore(*_: object) -> None:
    return None


obj = object_fixture("ordered")
prog = program_fixture("emit_ordered")


@pytest.fixture
def arrow_obj(bpf_objects: dict[str, Path]) -> Iterator[BPFObject]:
    with arrow_object(bpf_objects["arrow"]) as o:
        yield o


def test_the_same_record_batch_as_to_arrow(arrow_obj: BPFObject) -> None:
    prog = arrow_obj.programs["emit_arrow"]
    with RingBuffer(arrow_obj.maps["rb"], ignore) as rb:
        emit(prog, 8, target=TO_RING, ts=100)
        got = rb.read_arrow(ARROW_EVENT, timeout=30)
        emit(prog, 8, target=TO_RING, ts=100)
        want = rb.read_batch(30).to_arrow(ARROW_EVENT)
    assert isinstance(got, pa.RecordBatch) and got.num_rows == 8
    got.validate(full=True)
    assert got.schema == want.schema and got.equals(want)
    check_event_columns(got, list(range(8)))
    # the comms: cut at the NUL, invalid UTF-8 replaced as EventDef.parse does
    assert got.column("comm").to_pylist()[:4] == ["bash", "x" * 15 + "\ufffd", "", "café\ufffd\ufffd!"]
    for column in got.columns:   # the columns' own block, Arrow's alignment
        assert all(buf is None or buf.address % 64 == 0 for buf in column.buffers())


def test_ring_order_across_the_wrap_and_calls(obj: BPFObject, prog: Program) -> None:
    # 256 KiB ring, 40 bytes a record: 3 x 5000 records go round it twice
    seqs: list[int] = []
    with RingBuffer(obj.maps["rb0"], ignore) as rb:
        for first in (0, 5000, 10000):
            emit_ordered(prog, 5000, seq=first, tag=7, target=ORD_RB0)
            got = rb.read_arrow(EVENT, timeout=30)
            assert got.num_rows == 5000
            assert got.column("tag").to_pylist() == [7] * 5000
            seqs += got.column("seq").to_pylist()
        assert rb.read_arrow(EVENT, timeout=0).num_rows == 0
    assert seqs == list(range(15000))


def test_at_most_a_block_a_call_the_rest_stays(obj: BPFObject, prog: Program, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pylibbpf.ringbuf, "ARROW_BLOCK_BYTES", 100 * EVENT.size)
    got: list[int] = []
    with RingBuffer(obj.maps["rb0"], lambda d: got.append(ORD_EVENT.unpack_from(d)[1])) as rb:
        emit_ordered(prog, 250, seq=0, target=ORD_RB0)
        assert rb.read_arrow(EVENT, timeout=30).column("seq").to_pylist() == list(range(100))
        assert rb.read_arrow(EVENT, timeout=30).column("seq").to_pylist() == list(range(100, 200))
        assert rb.poll(1) == 50 and got == list(range(200, 250))   # left in the ring, read once


BIG_EVENT = defevent("ord_event_big", ("ts", "u64"), ("seq", "u64"), ("cpu", "u32"), ("tag", "u32"),
                     ("gseq", "u64"), ("payload", "u8", 600))


def test_large_records_and_a_kept_batch_stays_intact(obj: BPFObject, prog: Program,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # 632-byte records go into their rows one at a time; each call's columns may reuse the block a
    # dropped RecordBatch released, never the block of one still referenced
    monkeypatch.setattr(pylibbpf.ringbuf, "ARROW_BLOCK_BYTES", 50 * BIG_EVENT.size)
    with RingBuffer(obj.maps["rb0"], ignore) as rb:
        emit_ordered(prog, 50, seq=1000, tag=9, extra=600, target=ORD_RB0)
        want = rb.read_batch(30).to_arrow(BIG_EVENT)
        emit_ordered(prog, 200, seq=0, tag=9, extra=600, target=ORD_RB0)
        kept = rb.read_arrow(BIG_EVENT, timeout=30)
        for first in (50, 100, 150):   # each dropped before the next call
            assert rb.read_arrow(BIG_EVENT, timeout=30).column("seq").to_pylist() == list(range(first, first + 50))
        assert rb.read_arrow(BIG_EVENT, timeout=0).num_rows == 0 and not rb.take_odd()
    kept.validate(full=True)
    assert kept.schema == want.schema
    assert kept.column("seq").to_pylist() == list(range(50))
    assert kept.column("tag").to_pylist() == [9] * 50
    assert kept.column("payload").equals(want.column("payload"))


def test_odd_sizes_handed_back_in_place(obj: BPFObject, prog: Program) -> None:
    with RingBuffer(obj.maps["rb0"], ignore) as rb:
        emit_ordered(prog, 3, seq=0, target=ORD_RB0)
        emit_ordered(prog, 1, seq=100, extra=3, target=ORD_RB0)    # 35 bytes
        emit_ordered(prog, 2, seq=3, target=ORD_RB0)
        emit_ordered(prog, 1, seq=101, extra=200, target=ORD_RB0)  # 232 bytes
        emit_ordered(prog, 1, seq=5, target=ORD_RB0)
        got = rb.read_arrow(EVENT, timeout=30)
        assert got.column("seq").to_pylist() == [0, 1, 2, 3, 4, 5]
        odd = rb.take_odd()
        assert [(o.row, len(o.data), ORD_EVENT.unpack_from(o.data)[1]) for o in odd] == [(3, 35, 100), (5, 232, 101)]
        assert rb.odd_records == 2
        # only odd records: an empty batch, the record handed back
        emit_ordered(prog, 1, seq=102, extra=8, target=ORD_RB0)
        assert rb.read_arrow(EVENT, timeout=30).num_rows == 0
        assert [o.row for o in rb.take_odd()] == [0]


def test_discarded_records_skipped(rb_obj: BPFObject) -> None:
    rb_event = defevent("rb_event", ("seq", "u64"), ("value", "u64"), ("ring", "u32"), ("pad", "u32"))
    with RingBuffer(rb_obj.maps["rb"], ignore) as rb:
        emit_ring(rb_obj.programs["emit"], 9, first_seq=0, value=5, discard_every=3)
        got = rb.read_arrow(rb_event, timeout=30)
        assert got.column("seq").to_pylist() == [0, 1, 3, 4, 6, 7]
        assert got.column("value").to_pylist() == [5] * 6 and rb.odd_records == 0


def test_two_rings_and_what_a_poll_left_first(obj: BPFObject, prog: Program) -> None:
    seen: list[int] = []

    def stop_at_two(d: memoryview) -> int:
        seen.append(ORD_EVENT.unpack_from(d)[1])
        return -1 if len(seen) == 2 else 0

    with RingBuffer(obj.maps["rb0"], stop_at_two) as rb:
        rb.add(obj.maps["rb1"], ignore)
        emit_ordered(prog, 5, seq=0, target=ORD_RB0)
        assert rb.poll(1) == 2   # the callback stopped: 3 records drained, pending
        emit_ordered(prog, 2, seq=50, target=ORD_RB1)
        assert rb.read_arrow(EVENT, timeout=30).column("seq").to_pylist() == [2, 3, 4]
        assert rb.read_arrow(EVENT, timeout=30).column("seq").to_pylist() == [50, 51]


def test_waits_times_out_and_close_wakes_it(obj: BPFObject, prog: Program) -> None:
    rb = RingBuffer(obj.maps["rb0"], ignore)
    with rb:
        empty = rb.read_arrow(EVENT, timeout=0.05)
        assert empty.num_rows == 0 and empty.schema.names == EVENT.fields

        def blocked_read() -> tuple[threading.Thread, list[object]]:
            return call_blocked(lambda: rb.read_arrow(EVENT, timeout=None).column("seq").to_pylist())

        t, result = blocked_read()
        emit_ordered(prog, 2, seq=77, target=ORD_RB0)
        t.join(60)
        assert result == [[77, 78]]
        t, result = blocked_read()
        rb.close()
        t.join(60)
        assert not t.is_alive() and len(result) == 1 and isinstance(result[0], ClosedError)
    with pytest.raises(ClosedError):
        rb.read_arrow(EVENT, timeout=0)


def test_bad_arguments(obj: BPFObject) -> None:
    with RingBuffer(obj.maps["rb0"], ignore) as rb:
        with pytest.raises(TypeError, match="event_def must be an EventDef"):
            rb.read_arrow(np.dtype([("seq", "<u8")]), timeout=0)
        with pytest.raises(TypeError, match="event_def must be an EventDef"):
            rb.read_arrow(32, timeout=0)
        with pytest.raises(ValueError, match="timeout"):
            rb.read_arrow(EVENT, timeout=-1)


def test_a_record_shorter_than_the_event_is_consumed_and_handed_back(obj: BPFObject, prog: Program) -> None:
    # the ring holds less than one BIG_EVENT's footprint: the call still fills from it, so the short
    # record is consumed and handed back, not left at the head for every later call to return at once
    with RingBuffer(obj.maps["rb0"], ignore) as rb:
        emit_ordered(prog, 1, seq=7, target=ORD_RB0)   # 32 bytes, BIG_EVENT is 632
        assert rb.read_arrow(BIG_EVENT, timeout=30).num_rows == 0
        assert [(o.row, len(o.data), ORD_EVENT.unpack_from(o.data)[1]) for o in rb.take_odd()] == [(0, 32, 7)]
        assert rb.read_arrow(BIG_EVENT, timeout=0).num_rows == 0 and not rb.take_odd()
        emit_ordered(prog, 2, seq=8, extra=600, target=ORD_RB0)
        assert rb.read_arrow(BIG_EVENT, timeout=30).column("seq").to_pylist() == [8, 9]
