"""The mmap ring layer on the real kernel: map_ringbuf, read/peek/process_events, unmap_ringbuf."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from progs import blocked_in_epoll, counter, emit_ring, rb_event, wait_until

from pylibbpf import (
    BPFObject,
    ClosedError,
    RingBuffer,
    RingBufLayout,
    lib,
    map_ringbuf,
    peek_ringbuf_events,
    process_events,
    read_ringbuf_events,
    unmap_ringbuf,
)

pytestmark = pytest.mark.usefixtures("bpf_privileged")

RECORD = 24 + 8  # struct rb_event plus the ring's 8-byte header


BPF_OBJECT = "ringbuf"  # the obj fixture (tests/conftest.py) loads it


def seqs(records: list[bytes]) -> list[int]:
    return [rb_event(r)[0] for r in records]


def test_layout_exposes_the_positions_and_sizes(obj: BPFObject) -> None:
    with map_ringbuf(obj.maps["rb"]) as layout:
        assert isinstance(layout, RingBufLayout)
        assert layout.data_size == 64 * 1024
        assert layout.consumer_pos == layout.producer_pos == 0
        assert layout.available() == 0
        emit_ring(obj.programs["emit"], 10)
        assert layout.producer_pos == 10 * RECORD
        assert layout.available() == 10 * RECORD
        assert layout.consumer_pos == 0
        assert len(read_ringbuf_events(layout)) == 10
        assert layout.consumer_pos == layout.producer_pos == 10 * RECORD
        assert layout.available() == 0


def test_read_consumes_in_order_up_to_max_events(obj: BPFObject) -> None:
    with map_ringbuf(obj.maps["rb"]) as layout:
        assert read_ringbuf_events(layout) == []
        emit_ring(obj.programs["emit"], 10, first_seq=100, value=7)
        first = read_ringbuf_events(layout, max_events=3)
        assert all(isinstance(r, bytes) and len(r) == 24 for r in first)
        assert [rb_event(r) for r in first] == [(100, 7, 0), (101, 7, 0), (102, 7, 0)]
        assert seqs(read_ringbuf_events(layout, max_events=0)) == []
        assert seqs(read_ringbuf_events(layout)) == list(range(103, 110))
        assert read_ringbuf_events(layout) == []


def test_reading_a_full_ring_in_chunks(obj: BPFObject) -> None:
    count = 64 * 1024 // RECORD - 1  # fills the ring (the kernel keeps it below data_size bytes)
    with map_ringbuf(obj.maps["rb"]) as layout:
        emit_ring(obj.programs["emit"], count)
        assert counter(obj, "failed_reserves") == 0
        assert seqs(read_ringbuf_events(layout)) == list(range(count))  # more than one internal chunk


def test_peek_does_not_consume_and_two_peeks_are_equal(obj: BPFObject) -> None:
    rb = obj.maps["rb"]
    emit_ring(obj.programs["emit"], 20, first_seq=1)
    first = peek_ringbuf_events(rb)
    assert seqs(first) == list(range(1, 11))  # max_events defaults to 10
    assert peek_ringbuf_events(rb) == first
    assert seqs(peek_ringbuf_events(rb, max_events=None)) == list(range(1, 21))
    assert peek_ringbuf_events(rb, max_events=0) == []
    assert peek_ringbuf_events(rb, 3, deserializer=rb_event) == [(1, 0, 0), (2, 0, 0), (3, 0, 0)]
    with map_ringbuf(rb) as layout:
        assert peek_ringbuf_events(layout, 2) == first[:2]
        assert seqs(read_ringbuf_events(layout)) == list(range(1, 21))  # still all there
        assert peek_ringbuf_events(layout) == []


def test_discarded_records_are_skipped(obj: BPFObject) -> None:
    rb = obj.maps["rb"]
    emit_ring(obj.programs["emit"], 30, discard_every=3)
    kept = [i for i in range(30) if i % 3 != 2]
    assert seqs(peek_ringbuf_events(rb, None)) == kept
    with map_ringbuf(rb) as layout:
        assert layout.available() == 30 * RECORD  # discarded records occupy the ring too
        assert seqs(read_ringbuf_events(layout, max_events=5)) == kept[:5]
        assert seqs(read_ringbuf_events(layout)) == kept[5:]
        assert layout.available() == 0


def test_process_events_returns_once_max_events_were_delivered(obj: BPFObject) -> None:
    got: list[tuple[int, int, int]] = []
    emit_ring(obj.programs["emit"], 15, first_seq=50)
    # returns with 10 records, not at the timeout: a timeout this long would fail the test's own deadline
    assert process_events(obj.maps["rb"], got.append, max_events=10, timeout=0.01**9, deserializer=rb_event) == 10
    assert [e[0] for e in got] == list(range(50, 60))
    assert seqs(peek_ringbuf_events(obj.maps["rb"], None)) == list(range(60, 65))  # the rest stays


def test_process_events_runs_until_the_timeout_without_max_events(obj: BPFObject) -> None:
    got: list[bytes] = []
    emit_ring(obj.programs["emit"], 5)
    t0 = time.monotonic()
    assert process_events(obj.maps["rb"], got.append, timeout=0.15) == 5
    assert time.monotonic() - t0 >= 0.12  # it waited for the timeout (a lower bound: load cannot break it)
    assert seqs(got) == list(range(5))
    emit_ring(obj.programs["emit"], 2, first_seq=5)
    assert process_events(obj.maps["rb"], got.append, timeout=0.0) == 2  # what is there, without waiting
    assert seqs(got) == list(range(7))


def test_process_events_waits_on_epoll_for_new_records(obj: BPFObject) -> None:
    got: list[int] = []

    main = threading.get_native_id()
    asleep: list[bool] = []

    def later() -> None:
        asleep.append(wait_until(lambda: blocked_in_epoll(main)))  # the records come while it sleeps
        emit_ring(obj.programs["emit"], 3, first_seq=7)

    thread = threading.Thread(target=later)
    thread.start()
    # with no limit on the wait, only the records can end the call (a lost wakeup: the thread's
    # deadline ends the test; process_events still returns within its 100 ms safety net then)
    n = process_events(obj.maps["rb"], lambda e: got.append(e[0]), max_events=3, timeout=None,
                       deserializer=rb_event)
    thread.join()
    assert n == 3 and got == [7, 8, 9]
    assert asleep == [True]  # it waited in epoll_wait, not spinning


def test_process_events_sees_no_wakeup_producers_through_its_safety_net(obj: BPFObject) -> None:
    got: list[bytes] = []

    def later() -> None:
        time.sleep(0.05)
        emit_ring(obj.programs["emit"], 2, flags=lib.BPF_RB_NO_WAKEUP)

    thread = threading.Thread(target=later)
    thread.start()
    n = process_events(obj.maps["rb"], got.append, max_events=2, timeout=3)
    thread.join()
    assert n == 2


def test_process_events_callback_exception_loses_nothing(obj: BPFObject) -> None:
    seen: list[int] = []

    def callback(event: tuple[int, int, int]) -> None:
        seen.append(event[0])
        if event[0] == 3:
            raise RuntimeError("boom at 3")

    emit_ring(obj.programs["emit"], 8)
    with pytest.raises(RuntimeError, match="boom at 3"):
        process_events(obj.maps["rb"], callback, timeout=1, deserializer=rb_event)
    assert seen == [0, 1, 2, 3]
    # the raising record was delivered (consumed); the ones after it are still in the ring
    assert seqs(peek_ringbuf_events(obj.maps["rb"], None)) == [4, 5, 6, 7]


def test_unmapped_layout_raises_closed_error(obj: BPFObject) -> None:
    layout = map_ringbuf(obj.maps["rb"])
    emit_ring(obj.programs["emit"], 2)
    unmap_ringbuf(layout)
    unmap_ringbuf(layout)  # idempotent
    layout.close()
    assert layout.closed
    for action in (lambda: layout.consumer_pos, lambda: layout.producer_pos, lambda: layout.data_size,
                   layout.available, lambda: read_ringbuf_events(layout), lambda: peek_ringbuf_events(layout),
                   layout.view):
        with pytest.raises(ClosedError, match="RingBufLayout is closed"):
            action()
    # nothing was consumed by the closed layout: a new mapping still sees both records
    assert seqs(peek_ringbuf_events(obj.maps["rb"])) == [0, 1]


def test_a_layout_outlives_its_object(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["ringbuf"]) as o:
        o.load()
        layout = map_ringbuf(o.maps["rb"])
        emit_ring(o.programs["emit"], 3, first_seq=9)
    with layout:  # the mapping keeps the ring alive until unmapped
        assert seqs(read_ringbuf_events(layout)) == [9, 10, 11]


def test_layout_and_ring_buffer_share_one_consumer_position(obj: BPFObject) -> None:
    # Documented: not both at once. One after the other, they agree on the position.
    emit_ring(obj.programs["emit"], 4)
    with map_ringbuf(obj.maps["rb"]) as layout:
        assert seqs(read_ringbuf_events(layout, 2)) == [0, 1]
    seen: list[int] = []
    with RingBuffer(obj.maps["rb"], lambda d: seen.append(rb_event(d)[0])) as rb:
        assert rb.consume() == 2
    assert seen == [2, 3]


def test_bad_arguments(obj: BPFObject, bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["perfbuf"]) as perf:
        perf.load()
        with pytest.raises(TypeError, match="needs a ringbuf map; map 'events' is perf_event_array"):
            map_ringbuf(perf.maps["events"])
        with pytest.raises(TypeError, match="perf_event_array"):
            peek_ringbuf_events(perf.maps["events"])
        with pytest.raises(TypeError, match="perf_event_array"):
            process_events(perf.maps["events"], print)
    with pytest.raises(TypeError, match="needs a ringbuf map; map 'failed_reserves' is array"):
        map_ringbuf(obj.maps["failed_reserves"])
    with pytest.raises(TypeError, match="callback must be callable"):
        process_events(obj.maps["rb"], 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="deserializer must be callable"):
        peek_ringbuf_events(obj.maps["rb"], deserializer="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_events"):
        peek_ringbuf_events(obj.maps["rb"], -1)
    with map_ringbuf(obj.maps["rb"]) as layout, pytest.raises(ValueError, match="max_events"):
        read_ringbuf_events(layout, -2)


def test_unloaded_map_is_refused(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["ringbuf"]) as o, pytest.raises(OSError, match="not created"):
        map_ringbuf(o.maps["rb"])
