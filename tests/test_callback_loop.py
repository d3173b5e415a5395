"""The per-record callback loop of RingBuffer and PerfBuffer over large batches, on the real kernel.

Batches of equal-size records go through cached slices, a chunk at a time
(``pylibbpf._views``); mixed sizes through a slice per record. Every case
runs with the default chunk and with a chunk of 64 records, so stops, raises
and closes land in the middle of a chunk, on its last record and past its end.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from pathlib import Path

import pytest
from progs import ORD_EVENT, ORD_RB0, ORD_RB1, counter, emit_ordered, emit_perf, old_ts, rb_event

import pylibbpf._views as views
from pylibbpf import BPFObject, ClosedError, PerfBuffer, RingBuffer

pytestmark = pytest.mark.usefixtures("bpf_privileged")

BIG = 3000   # records in one drain: more than one default chunk (2048)


@pytest.fixture(params=[views.CHUNK, 64], ids=["chunk-default", "chunk-64"])
def chunk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(views, "CHUNK", request.param)
    return int(request.param)


@pytest.fixture
def ord_obj(bpf_objects: dict[str, Path]) -> Iterator[BPFObject]:
    with BPFObject.open(bpf_objects["ordered"]) as o:
        yield o.load()


def fill(obj: BPFObject, count: int, *, seq: int = 0, extra: int = 0, target: int = ORD_RB0) -> None:
    emit_ordered(obj.programs["emit_ordered"], count, ts=old_ts(), seq=seq, extra=extra, target=target)


def seq_of(data: memoryview) -> int:
    return int(ORD_EVENT.unpack_from(data)[1])


def test_every_record_of_a_large_batch_arrives_once_in_order(ord_obj: BPFObject, chunk: int) -> None:
    kept: list[memoryview] = []
    with RingBuffer(ord_obj.maps["rb0"], kept.append) as rb:
        fill(ord_obj, BIG)
        assert rb.consume() == BIG
        fill(ord_obj, 5, seq=BIG)
        assert rb.consume() == 5
    # The views outlive their callbacks and their batches; each is exactly its record.
    assert [seq_of(v) for v in kept] == list(range(BIG + 5))
    assert all(v.readonly and len(v) == ORD_EVENT.size for v in kept)


@pytest.mark.parametrize("where", ["middle", "chunk-end", "chunk-start", "last"])
def test_a_negative_return_stops_after_its_record_and_the_next_call_resumes(
        ord_obj: BPFObject, chunk: int, where: str) -> None:
    stop_at = {"middle": 1000, "chunk-end": chunk - 1, "chunk-start": chunk, "last": BIG - 1}[where]
    seen: list[int] = []

    def callback(data: memoryview) -> int:
        seq = seq_of(data)
        seen.append(seq)
        return -7 if seq == stop_at else 0

    with RingBuffer(ord_obj.maps["rb0"], callback) as rb:
        fill(ord_obj, BIG)
        assert rb.consume() == stop_at + 1
        assert seen == list(range(stop_at + 1))
        assert rb.consume() == BIG - stop_at - 1
        assert rb.consume() == 0
    assert seen == list(range(BIG))


@pytest.mark.parametrize("stop_at", [0, 63, 64, 1500])
def test_a_raising_callback_stops_the_call_and_its_record_counts_as_delivered(
        ord_obj: BPFObject, chunk: int, stop_at: int) -> None:
    seen: list[int] = []

    def callback(data: memoryview) -> None:
        seq = seq_of(data)
        seen.append(seq)
        if seq == stop_at:
            raise RuntimeError(f"boom at {seq}")

    with RingBuffer(ord_obj.maps["rb0"], callback) as rb:
        fill(ord_obj, BIG)
        with pytest.raises(RuntimeError, match=f"boom at {stop_at}$"):
            rb.poll(1)
        assert seen == list(range(stop_at + 1))
        assert rb.poll(1) == BIG - stop_at - 1  # the rest, without waiting for new records
    assert seen == list(range(BIG))


class Code(enum.IntEnum):
    OK = 0
    MORE = 3
    STOP = -1


@pytest.mark.parametrize("value", [False, True, 0.0, 1.5, "", "0", None.__class__, b"x"])
def test_a_non_int_return_raises_type_error_naming_the_callback(ord_obj: BPFObject, chunk: int,
                                                                   value: object) -> None:
    seen: list[int] = []

    def picky(data: memoryview) -> object:
        seen.append(seq_of(data))
        return value if len(seen) == 100 else None

    with RingBuffer(ord_obj.maps["rb0"], picky) as rb:
        fill(ord_obj, BIG)
        with pytest.raises(TypeError, match=r"callback .*picky must return None or an int"):
            rb.consume()
        assert seen == list(range(100))
        assert rb.consume() == BIG - 100
    assert seen == list(range(BIG))


def test_int_returns_other_than_negative_do_not_stop(ord_obj: BPFObject, chunk: int) -> None:
    """0, positive ints, an int subclass (IntEnum) and big ints go on; a negative IntEnum stops."""
    returns = [0, 1, 2**70, Code.OK, Code.MORE, -(2**70) + 2**70]
    seen: list[int] = []

    def callback(data: memoryview) -> int:
        seen.append(seq_of(data))
        return Code.STOP if len(seen) == 2000 else returns[len(seen) % len(returns)]

    with RingBuffer(ord_obj.maps["rb0"], callback) as rb:
        fill(ord_obj, BIG)
        assert rb.consume() == 2000
        assert rb.consume() == BIG - 2000


def test_mixed_sizes_go_through_the_per_record_path_with_the_same_rules(ord_obj: BPFObject, chunk: int) -> None:
    sizes: list[int] = []

    def callback(data: memoryview) -> int:
        sizes.append(len(data))
        return -1 if len(sizes) == 150 else 0

    with RingBuffer(ord_obj.maps["rb0"], callback) as rb:
        fill(ord_obj, 100)
        fill(ord_obj, 100, seq=100, extra=13)
        fill(ord_obj, 100, seq=200)
        assert rb.consume() == 150
        assert rb.consume() == 150
    size = ORD_EVENT.size
    assert sizes == [size] * 100 + [size + 13] * 100 + [size] * 100


def test_several_rings_each_record_reaches_its_rings_callback(ord_obj: BPFObject, chunk: int) -> None:
    got: dict[int, list[int]] = {0: [], 1: []}

    def on(ring: int) -> object:
        def callback(data: memoryview) -> int:
            got[ring].append(seq_of(data))
            return -1 if ring == 1 and len(got[1]) == 700 else 0
        return callback

    with RingBuffer(ord_obj.maps["rb0"], on(0)) as rb:  # type: ignore[arg-type]
        rb.add(ord_obj.maps["rb1"], on(1))  # type: ignore[arg-type]
        fill(ord_obj, 1000, target=ORD_RB0)
        fill(ord_obj, 1000, seq=10_000, target=ORD_RB1)
        first = rb.consume()
        assert got[1][-1] == 10_000 + 699 and first == len(got[0]) + len(got[1])
        rest = rb.consume()
        assert first + rest == 2000
    assert got == {0: list(range(1000)), 1: list(range(10_000, 11_000))}


def test_closing_in_a_callback_finishes_the_batch_then_the_reader_is_closed(ord_obj: BPFObject,
                                                                            chunk: int) -> None:
    seen: list[int] = []

    def callback(data: memoryview) -> None:
        seen.append(seq_of(data))
        if len(seen) == 70:
            rb.close()

    rb = RingBuffer(ord_obj.maps["rb0"], callback)
    fill(ord_obj, BIG)
    assert rb.consume() == BIG  # the batch already drained is delivered (its memory is Python's)
    assert seen == list(range(BIG))
    with pytest.raises(ClosedError):
        rb.consume()


# --- PerfBuffer ----------------------------------------------------------------------------------

@pytest.fixture
def perf_obj(bpf_objects: dict[str, Path]) -> Iterator[BPFObject]:
    with BPFObject.open(bpf_objects["perfbuf"]) as o:
        yield o.load()


@pytest.mark.parametrize("stop_at", [0, 63, 64, 1500])
def test_perf_a_raising_callback_keeps_the_rest_of_a_large_batch(perf_obj: BPFObject, chunk: int,
                                                                 stop_at: int) -> None:
    seen: list[tuple[int, int]] = []

    def callback(cpu: int, data: memoryview) -> None:
        seen.append((cpu, rb_event(data)[0]))
        if len(seen) == stop_at + 1:
            raise RuntimeError("boom")

    with PerfBuffer(perf_obj.maps["events"], callback, page_cnt=64) as pb:
        emit_perf(perf_obj.programs["emit_perf"], BIG, cpu=0)
        assert counter(perf_obj, "failed_outputs") == 0
        with pytest.raises(RuntimeError, match="boom"):
            pb.poll(1)
        assert len(seen) == stop_at + 1
        assert pb.poll(1) == BIG - stop_at - 1
    assert seen == [(0, i) for i in range(BIG)]
