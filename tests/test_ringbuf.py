"""RingBuffer on the real kernel: what libbpf's own ringbuf selftests assert, through pylibbpf."""

from __future__ import annotations

import asyncio
import errno
import signal
import threading
import time
from pathlib import Path

import pytest
from progs import blocked_in_epoll, counter, emit_ring, epoll_sets, rb_event, signal_thrice, wait_until

from pylibbpf import BPFError, BPFObject, ClosedError, RingBuffer, lib
from pylibbpf.events import defevent

pytestmark = pytest.mark.usefixtures("bpf_privileged")


BPF_OBJECT = "ringbuf"  # the obj fixture (tests/conftest.py) loads it


def test_records_arrive_in_order(obj: BPFObject) -> None:
    seen: list[tuple[int, int, int]] = []
    with RingBuffer(obj.maps["rb"], lambda data: seen.append(rb_event(data))) as rb:
        emit_ring(obj.programs["emit"], 100, first_seq=1000, value=7)
        assert rb.poll(1) == 100
        assert rb.consume() == 0
    assert seen == [(1000 + i, 7, 0) for i in range(100)]
    assert counter(obj, "failed_reserves") == 0


def test_callback_gets_a_memoryview_that_outlives_the_callback(obj: BPFObject) -> None:
    kept: list[memoryview] = []
    with RingBuffer(obj.maps["rb"], kept.append) as rb:
        emit_ring(obj.programs["emit"], 3, first_seq=5)
        rb.consume()
        emit_ring(obj.programs["emit"], 3, first_seq=50)
        rb.consume()
    assert all(isinstance(v, memoryview) and v.readonly and len(v) == 24 for v in kept)
    assert [rb_event(v)[0] for v in kept] == [5, 6, 7, 50, 51, 52]


def test_discarded_records_are_skipped(obj: BPFObject) -> None:
    seen: list[int] = []
    with RingBuffer(obj.maps["rb"], lambda d: seen.append(rb_event(d)[0])) as rb:
        emit_ring(obj.programs["emit"], 30, discard_every=3)
        assert rb.consume() == 20
    assert seen == [i for i in range(30) if i % 3 != 2]


def test_no_wakeup_does_not_wake_a_blocked_poll_and_force_wakeup_does(obj: BPFObject) -> None:
    seen: list[int] = []
    result: list[object] = []
    with RingBuffer(obj.maps["rb"], lambda d: seen.append(rb_event(d)[0])) as rb:
        assert rb.poll(0) == 0  # settle the epoll ready lists on an empty ring
        tids: list[int] = []

        def reader() -> None:
            tids.append(threading.get_native_id())
            result.append(rb.poll())

        thread = threading.Thread(target=reader)
        thread.start()
        # Blocked in epoll_wait before the submit (a reader still on its way there would find the record).
        assert wait_until(lambda: bool(tids) and blocked_in_epoll(tids[0]))
        emit_ring(obj.programs["emit"], 1, first_seq=1, flags=lib.BPF_RB_NO_WAKEUP)
        thread.join(0.3)
        assert thread.is_alive(), "a BPF_RB_NO_WAKEUP submit woke the poller"
        emit_ring(obj.programs["emit"], 1, first_seq=2, flags=lib.BPF_RB_FORCE_WAKEUP)
        thread.join(60)
        assert not thread.is_alive(), "BPF_RB_FORCE_WAKEUP did not wake the poller"
    assert result == [2] and seen == [1, 2]


def test_several_rings_in_one_poller(obj: BPFObject) -> None:
    first: list[tuple[int, int, int]] = []
    second: list[tuple[int, int, int]] = []
    with RingBuffer(obj.maps["rb"], lambda d: first.append(rb_event(d))) as rb:
        rb.add(obj.maps["rb2"], lambda d: second.append(rb_event(d)))
        emit_ring(obj.programs["emit"], 4, first_seq=0, target=0)
        emit_ring(obj.programs["emit"], 3, first_seq=100, target=1)
        total = 0
        while total < 7:
            total += rb.poll(1)
    assert [e[0] for e in first] == [0, 1, 2, 3] and {e[2] for e in first} == {0}
    assert [e[0] for e in second] == [100, 101, 102] and {e[2] for e in second} == {1}


def test_a_record_in_an_added_ring_wakes_a_blocked_poll(obj: BPFObject) -> None:
    second: list[int] = []
    result: list[object] = []
    with RingBuffer(obj.maps["rb"], lambda d: None) as rb:
        rb.add(obj.maps["rb2"], lambda d: second.append(rb_event(d)[0]))
        thread = threading.Thread(target=lambda: result.append(rb.poll()))
        thread.start()
        time.sleep(0.05)  # let the reader block in its wait
        emit_ring(obj.programs["emit"], 2, first_seq=40, target=1)
        thread.join(5)
        assert not thread.is_alive(), "a record in the added ring did not wake poll(-1)"
    assert result == [2] and second == [40, 41]


def test_adding_a_ring_twice_fails_and_leaves_the_reader_as_it_was(obj: BPFObject) -> None:
    seen: list[tuple[int, int]] = []
    with RingBuffer(obj.maps["rb"], lambda d: seen.append((0, rb_event(d)[0]))) as rb:
        rb.add(obj.maps["rb2"], lambda d: seen.append((1, rb_event(d)[0])))
        with pytest.raises(BPFError) as err:
            rb.add(obj.maps["rb2"], lambda d: seen.append((2, rb_event(d)[0])))
        assert err.value.errno == errno.EEXIST and "RingBuffer.add(rb2)" in str(err.value)
        emit_ring(obj.programs["emit"], 2, first_seq=1, target=1)
        emit_ring(obj.programs["emit"], 1, first_seq=7, target=0)
        total = 0
        while total < 3:
            total += rb.poll(1)
        assert rb.poll(0) == 0
    assert sorted(seen) == [(0, 7), (1, 1), (1, 2)]


def test_the_wait_watches_the_ring_maps_directly_not_a_nested_epoll_set(obj: BPFObject) -> None:
    # An epoll set inside another one costs a wake-up hop on every record (issue 19):
    # the reader's wait set holds the maps' fds, and no epoll set watches libbpf's.
    with RingBuffer(obj.maps["rb"], lambda d: None) as rb:
        rb.add(obj.maps["rb2"], lambda d: None)
        sets = epoll_sets()
        libbpf_set = rb.epoll_fd()
        assert libbpf_set in sets
        assert not [fd for fd, targets in sets.items() if libbpf_set in targets]
        maps = {obj.maps["rb"].fd, obj.maps["rb2"].fd}
        assert [fd for fd, targets in sets.items() if fd != libbpf_set and maps <= set(targets)]
        emit_ring(obj.programs["emit"], 3, target=1)
        assert rb.poll(1) == 3


def test_callback_exception_stops_the_call_and_loses_nothing(obj: BPFObject) -> None:
    seen: list[int] = []

    def callback(data: memoryview) -> None:
        seq = rb_event(data)[0]
        seen.append(seq)
        if seq == 4:
            raise RuntimeError("boom at 4")

    with RingBuffer(obj.maps["rb"], callback) as rb:
        emit_ring(obj.programs["emit"], 10)
        with pytest.raises(RuntimeError, match="boom at 4"):
            rb.poll(1)
        assert seen == [0, 1, 2, 3, 4]
        assert rb.consume() == 5  # the rest, delivered by the next call
    assert seen == list(range(10))


def test_negative_return_stops_like_libbpf(obj: BPFObject) -> None:
    seen: list[int] = []

    def callback(data: memoryview) -> int:
        seen.append(rb_event(data)[0])
        return -1 if len(seen) == 3 else 0

    with RingBuffer(obj.maps["rb"], callback) as rb:
        emit_ring(obj.programs["emit"], 5)
        assert rb.consume() == 3
        assert rb.consume() == 2
    assert seen == [0, 1, 2, 3, 4]


def test_poll_times_out_with_zero(obj: BPFObject) -> None:
    with RingBuffer(obj.maps["rb"], lambda d: None) as rb:
        t0 = time.monotonic()
        assert rb.poll(0.05) == 0
        assert time.monotonic() - t0 >= 0.04  # it waited (a lower bound: load cannot break it)


def test_a_signal_whose_handler_returns_resumes_the_wait(obj: BPFObject) -> None:
    # The wait comes back to Python with EINTR so that handlers run; one that returns
    # must neither end a poll(-1) nor cut a poll(timeout) short (a resumed wait takes
    # the time left, computed from when the call started).
    handled: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: handled.append(signum))
    main = threading.get_ident()
    try:
        seen: list[int] = []
        with RingBuffer(obj.maps["rb"], lambda d: seen.append(rb_event(d)[0])) as rb:
            thread = signal_thrice(main, lambda: emit_ring(obj.programs["emit"], 1, first_seq=9))
            assert rb.poll() == 1
            thread.join()
            thread = signal_thrice(main)
            t0 = time.monotonic()
            assert rb.poll(0.4) == 0
            assert time.monotonic() - t0 >= 0.39  # it waited the whole timeout (a lower bound)
            thread.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert seen == [9] and len(handled) == 6


def test_close_from_another_thread_wakes_a_blocked_poll(obj: BPFObject) -> None:
    rb = RingBuffer(obj.maps["rb"], lambda d: None)
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            rb.poll()
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=reader)
    thread.start()
    time.sleep(0.05)
    rb.close()
    thread.join(60)
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], ClosedError)
    rb.close()  # idempotent
    for action in (lambda: rb.poll(0), rb.consume, rb.epoll_fd, lambda: rb.add(obj.maps["rb2"], print)):
        with pytest.raises(ClosedError):
            action()


def test_wrong_map_type_names_both_types(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["perfbuf"]) as perf:
        perf.load()
        with pytest.raises(TypeError, match="needs a ringbuf map; map 'events' is perf_event_array"):
            RingBuffer(perf.maps["events"], lambda d: None)


def test_bad_arguments(obj: BPFObject) -> None:
    with pytest.raises(TypeError, match="callback must be callable"):
        RingBuffer(obj.maps["rb"], "not callable")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs a Map"):
        RingBuffer(3, print)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_batch"):
        RingBuffer(obj.maps["rb"], print, max_batch=0)


def test_unloaded_map_is_refused(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["ringbuf"]) as obj, pytest.raises(OSError, match="not created"):
        RingBuffer(obj.maps["rb"], print)


def test_read_batch_hands_over_one_batch(obj: BPFObject) -> None:
    with RingBuffer(obj.maps["rb"], lambda d: None) as rb:
        assert len(rb.read_batch(0)) == 0
        emit_ring(obj.programs["emit"], 50, first_seq=10, value=3)
        batch = rb.read_batch(1.0)
        assert len(batch) == 50
        assert [rb_event(v)[0] for v in batch] == list(range(10, 60))
        assert rb_event(batch[49]) == (59, 3, 0)


# -- one record per wakeup: the latency path, handed over without a Batch -----------------------

def test_one_record_per_drain_keeps_the_callback_contract(obj: BPFObject) -> None:
    kept: list[memoryview] = []
    with RingBuffer(obj.maps["rb"], kept.append) as rb:
        for seq in range(5):
            emit_ring(obj.programs["emit"], 1, first_seq=seq, value=3 * seq)
            assert rb.poll(1) == 1
            assert rb.consume() == 0
    assert all(isinstance(v, memoryview) and v.readonly and len(v) == 24 for v in kept)
    assert [rb_event(v) for v in kept] == [(s, 3 * s, 0) for s in range(5)]


def test_one_record_whose_callback_raises_is_delivered_once(obj: BPFObject) -> None:
    seen: list[int] = []

    def callback(data: memoryview) -> None:
        seen.append(rb_event(data)[0])
        raise RuntimeError("boom")

    with RingBuffer(obj.maps["rb"], callback) as rb:
        emit_ring(obj.programs["emit"], 1, first_seq=7)
        with pytest.raises(RuntimeError, match="boom"):
            rb.poll(1)
        assert rb.consume() == 0
    assert seen == [7]


@pytest.mark.parametrize("bad", [True, "stop", 1.5])
def test_one_record_callback_returning_a_non_int_is_a_type_error(obj: BPFObject, bad: object) -> None:
    def callback(data: memoryview) -> object:
        return bad

    with RingBuffer(obj.maps["rb"], callback) as rb:
        emit_ring(obj.programs["emit"], 1)
        with pytest.raises(TypeError, match=r"callback .*callback must return None or an int"):
            rb.poll(1)
        assert rb.consume() == 0  # the record counted as delivered


def test_one_record_callback_stopping_returns_one(obj: BPFObject) -> None:
    with RingBuffer(obj.maps["rb"], lambda d: -1) as rb:
        emit_ring(obj.programs["emit"], 1)
        assert rb.poll(1) == 1
        emit_ring(obj.programs["emit"], 1)
        assert rb.poll(1) == 1


def test_read_batch_of_one_record(obj: BPFObject) -> None:
    with RingBuffer(obj.maps["rb"], lambda d: None) as rb:
        emit_ring(obj.programs["emit"], 1, first_seq=42, value=9)
        batch = rb.read_batch(1.0)
        assert len(batch) == 1 and batch[0].readonly and len(batch[0]) == 24
        assert rb_event(batch[0]) == (42, 9, 0)
        assert [rb_event(v) for v in batch] == [(42, 9, 0)]
        assert len(rb.read_batch(0)) == 0


def test_to_numpy_of_a_one_record_batch(obj: BPFObject) -> None:
    pytest.importorskip("numpy")
    ev = defevent("RbEvent", ("seq", "u64"), ("value", "u64"), ("ring", "u32"), ("pad", "u32"))
    short = defevent("Long", ("seq", "u64"), ("rest", "u8", 40))
    with RingBuffer(obj.maps["rb"], lambda d: None) as rb:
        emit_ring(obj.programs["emit"], 1, first_seq=42, value=9)
        batch = rb.read_batch(1.0)
        arr = batch.to_numpy(ev)
        assert arr.shape == (1,) and arr.flags.writeable
        assert (int(arr["seq"][0]), int(arr["value"][0]), int(arr["ring"][0])) == (42, 9, 0)
        arr["seq"] = 7  # a copy: the batch's record is unchanged
        assert rb_event(batch[0]) == (42, 9, 0)
        with pytest.raises(ValueError, match="a record of 24 bytes is shorter than the event's 48 bytes"):
            batch.to_numpy(short)


def test_one_record_in_an_added_ring_goes_to_that_rings_callback(obj: BPFObject) -> None:
    first: list[int] = []
    second: list[int] = []
    with RingBuffer(obj.maps["rb"], lambda d: first.append(rb_event(d)[0])) as rb:
        rb.add(obj.maps["rb2"], lambda d: second.append(rb_event(d)[0]))
        emit_ring(obj.programs["emit"], 1, first_seq=3, target=1)
        assert rb.poll(1) == 1
        emit_ring(obj.programs["emit"], 1, first_seq=4)
        assert rb.poll(1) == 1
    assert first == [4] and second == [3]


def test_async_iteration_ends_on_close_and_cancels_cleanly(obj: BPFObject) -> None:
    async def scenario() -> tuple[list[int], bool]:
        loop = asyncio.get_running_loop()
        rb = RingBuffer(obj.maps["rb"], lambda d: None)
        got: list[int] = []

        async def consume() -> None:
            async for data in rb.events():
                got.append(rb_event(data)[0])
                if len(got) == 5:
                    emit_ring(obj.programs["emit"], 3, first_seq=10)

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.01)
        emit_ring(obj.programs["emit"], 5)
        while len(got) < 8:
            await asyncio.sleep(0.01)
        rb.close()
        await asyncio.wait_for(task, 5)  # ends by itself once closed

        rb2 = RingBuffer(obj.maps["rb"], lambda d: None)
        fd = rb2._waiter.fd if rb2._waiter else -1
        task2 = asyncio.create_task(consume_forever(rb2))
        await asyncio.sleep(0.01)
        task2.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task2
        still_registered = loop.remove_reader(fd)
        rb2.close()
        return got, still_registered

    async def consume_forever(rb: RingBuffer) -> None:
        async for _ in rb.events():
            pass

    got, still_registered = asyncio.run(scenario())
    assert got == [0, 1, 2, 3, 4, 10, 11, 12]
    assert not still_registered  # cancellation removed the loop's reader
