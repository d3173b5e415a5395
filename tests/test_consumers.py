"""The consumers on the real kernel: RingBufConsumer, BackpressureConsumer, SamplingConsumer.

Includes THE GIL TEST: a tracepoint producer in another process at a steady
rate, a callback that holds the GIL for ~200 ms every 200 events, and a small
kernel ring. The backpressure consumer's native reader must keep the kernel
from failing a single reserve (the queue drops instead); a RingBufConsumer,
whose reader needs the GIL, must not.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
import os
import random
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from progs import accounted, counter, emit_ring, rb_event, started_and_blocked, wait_until

from pylibbpf import (
    BackpressureConsumer,
    BackpressureStats,
    BPFObject,
    ConsumerStats,
    Map,
    RingBufConsumer,
    SamplingConsumer,
    SamplingStats,
    backpressure_consumer,
    lib,
    map_ringbuf,
    peek_ringbuf_events,
    ringbuf_consumer,
)
from pylibbpf.consumers import sampling_consumer

pytestmark = pytest.mark.usefixtures("bpf_privileged", "no_consumer_thread_left")


BPF_OBJECT = "ringbuf"  # the obj fixture (tests/conftest.py) loads it


CHUNK = 1024  # records per trigger; the 64 KiB ring holds 2047 of them


def emit(obj: BPFObject, count: int, **kw: Any) -> None:
    """Emit `count` records, a chunk at a time, each once the ring has room for it (no kernel drops)."""
    first = kw.pop("first_seq", 0)
    done = 0
    with map_ringbuf(obj.maps["rb"]) as ring:  # only to watch the positions: it reads nothing
        while done < count:
            n = min(CHUNK, count - done)
            assert wait_until(lambda: ring.available() <= ring.data_size - 64 - n * 32), "the consumer is stuck"  # noqa: B023
            emit_ring(obj.programs["emit"], n, first_seq=first + done, **kw)
            done += n
    assert counter(obj, "failed_reserves") == 0


# --- RingBufConsumer ------------------------------------------------------------------------------

def test_ringbuf_consumer_counts_and_stats(obj: BPFObject) -> None:
    seen: list[int] = []
    c = RingBufConsumer(obj.maps["rb"], seen.append, deserializer=lambda d: rb_event(d)[0], batch_size=16)
    assert c.stats() == ConsumerStats(0, 0, 0, 0, 0.0, 0)
    c.start()
    try:
        emit(obj, 3000)
        assert wait_until(lambda: len(seen) == 3000)
        time.sleep(0.01)
        s = c.stats()
    finally:
        c.stop()
    assert seen == list(range(3000))
    assert s.events_read == s.events_processed == 3000 and s.errors == 0
    assert s.batches_read >= 3000 // 16
    assert s.uptime_ms > 0 and s.events_per_second > 0
    after = c.stats()
    assert after.events_processed == 3000
    time.sleep(0.02)
    assert c.stats().uptime_ms == after.uptime_ms  # the clock stops with the run


def test_ringbuf_consumer_context_manager_and_bytes(obj: BPFObject) -> None:
    got: list[Any] = []
    with ringbuf_consumer(obj.maps["rb"], got.append) as c:
        assert c.running
        emit(obj, 5, first_seq=40)
        assert wait_until(lambda: len(got) == 5)
    assert not c.running
    assert all(isinstance(d, bytes) and len(d) == 24 for d in got)
    assert [rb_event(d)[0] for d in got] == [40, 41, 42, 43, 44]


def test_ringbuf_consumer_stop_drains_what_was_published(obj: BPFObject) -> None:
    got: list[int] = []
    c = RingBufConsumer(obj.maps["rb"], lambda d: got.append(rb_event(d)[0]))
    started_and_blocked(c.start)  # the thread is asleep in epoll
    emit(obj, 500, flags=lib.BPF_RB_NO_WAKEUP)  # nobody is woken
    c.stop()  # wakes the thread at once; its final pass reads everything published
    assert got == list(range(500))
    assert c.stats().events_read == 500


def test_ringbuf_consumer_start_stop_twice_and_restart(obj: BPFObject) -> None:
    got: list[int] = []
    c = RingBufConsumer(obj.maps["rb"], lambda d: got.append(rb_event(d)[0]))
    c.stop()  # not started: no-op
    c.start()
    c.start()  # running: no-op
    emit(obj, 10)
    assert wait_until(lambda: len(got) == 10)
    c.stop()
    c.stop()
    emit(obj, 5, first_seq=100)  # stays in the ring while stopped
    assert [rb_event(r)[0] for r in peek_ringbuf_events(obj.maps["rb"], None)] == list(range(100, 105))
    c.start()  # a new run: fresh statistics
    assert wait_until(lambda: len(got) == 15)
    c.stop()
    assert got == [*range(10), *range(100, 105)]
    assert c.stats().events_processed == 5


def test_ringbuf_consumer_errors_are_counted_logged_once_per_type_and_it_goes_on(
        obj: BPFObject, caplog: pytest.LogCaptureFixture) -> None:
    got: list[int] = []

    def callback(seq: int) -> None:
        if seq % 10 == 3:
            raise ValueError(f"bad {seq}")
        if seq % 10 == 7:
            raise KeyError(seq)
        got.append(seq)

    def deserializer(data: bytes) -> int:
        seq = rb_event(data)[0]
        if seq == 55:
            raise struct.error("cannot parse 55")
        return seq

    caplog.set_level(logging.DEBUG, logger="pylibbpf.consumers")
    with ringbuf_consumer(obj.maps["rb"], callback, deserializer) as c:
        emit(obj, 100)
        assert wait_until(lambda: c.stats().events_processed + c.stats().errors == 100)
    s = c.stats()
    assert s.errors == 10 + 10 + 1 and s.events_processed == 79 and s.events_read == 100
    assert len(got) == 79 and got[-1] == 99
    errors = [r for r in caplog.records if r.name == "pylibbpf.consumers" and r.levelno == logging.ERROR]
    assert sorted(r.exc_info[0].__name__ for r in errors if r.exc_info and r.exc_info[0]) == \
        ["KeyError", "ValueError", "error"]
    assert all(r.exc_info for r in errors)  # with the traceback


def test_stop_from_the_callback(obj: BPFObject) -> None:
    got: list[int] = []
    holder: list[RingBufConsumer] = []

    def callback(data: bytes) -> None:
        got.append(rb_event(data)[0])
        if len(got) == 3:
            holder[0].stop()  # only asks; returns at once

    c = RingBufConsumer(obj.maps["rb"], callback, batch_size=1)
    holder.append(c)
    c.start()
    emit(obj, 10)
    assert wait_until(lambda: not c.running)
    c.stop()  # joins the finished thread
    assert got[:3] == [0, 1, 2]


# --- BackpressureConsumer -------------------------------------------------------------------------

def test_backpressure_counts_and_stats(obj: BPFObject) -> None:
    got: list[int] = []
    bc = BackpressureConsumer(obj.maps["rb"], got.append, deserializer=lambda d: rb_event(d)[0])
    assert bc.stats() == BackpressureStats(0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0, 0, 10000)
    bc.start()
    try:
        emit(obj, 5000)
        assert wait_until(lambda: bc.stats().events_processed == 5000)
        s = bc.stats()
        assert bc.healthy()
    finally:
        bc.stop()
    assert got == list(range(5000))
    assert s.events_read == 5000 and s.events_dropped == 0 and s.current_queue_size == 0
    assert s.errors == 0 and s.queue_full_count == 0 and s.drop_rate == 0.0
    assert s.batches_read >= 1 and 0 < s.max_queue_size <= 10000
    assert s.queue_capacity == 10000 and s.uptime_ms > 0 and s.events_per_second > 0
    assert accounted(bc.stats())


def test_backpressure_drops_when_the_queue_is_full_and_calls_drop_handler(obj: BPFObject) -> None:
    release = threading.Event()
    got: list[int] = []
    dropped: list[tuple[int, str]] = []

    def slow(seq: int) -> None:
        release.wait(60)
        got.append(seq)

    bc = BackpressureConsumer(obj.maps["rb"], slow, deserializer=lambda d: rb_event(d)[0], max_pending=50,
                              drop_handler=lambda d: dropped.append((rb_event(d)[0], threading.current_thread().name)),
                              batch_size=8)
    with bc:
        emit(obj, 1000)
        assert wait_until(lambda: bc.stats().events_read == 1000)
        s = bc.stats()
        assert accounted(s)
        assert s.events_dropped >= 1000 - 50 - 8 and s.queue_full_count >= 1
        assert s.drop_rate > 90 and not bc.healthy()
        release.set()
        assert wait_until(lambda: bc.stats().current_queue_size == 0)
    s = bc.stats()
    assert accounted(s) and s.events_processed == len(got) and s.events_dropped == 1000 - len(got)
    assert got == sorted(got) and got[:8] == list(range(8))
    # the handler ran in the processor thread, for dropped records only, in order
    assert dropped and {name for _, name in dropped} == {"pylibbpf-BackpressureConsumer"}
    assert not set(got) & {seq for seq, _ in dropped}
    assert [seq for seq, _ in dropped] == sorted(seq for seq, _ in dropped)
    assert len(dropped) <= s.events_dropped


def test_backpressure_stop_drains_the_queue(obj: BPFObject) -> None:
    got: list[int] = []
    bc = BackpressureConsumer(obj.maps["rb"], lambda d: got.append(rb_event(d)[0]))
    started_and_blocked(bc.start)  # the native reader is asleep in epoll
    emit(obj, 1000, flags=lib.BPF_RB_NO_WAKEUP)  # the native reader is not woken
    bc.stop()  # its final pass queues everything; the processor delivers it all
    s = bc.stats()
    assert got == list(range(1000))
    assert s.events_read == s.events_processed == 1000 and s.events_dropped == 0 and s.current_queue_size == 0


def test_backpressure_stop_gives_up_after_drain_timeout(obj: BPFObject) -> None:
    got: list[int] = []

    def slow(data: bytes) -> None:
        time.sleep(0.01)
        got.append(rb_event(data)[0])

    bc = BackpressureConsumer(obj.maps["rb"], slow, batch_size=4)
    bc.start()
    emit(obj, 300)
    assert wait_until(lambda: bc.stats().events_read == 300)
    bc.stop(drain_timeout=0.1)  # 300 records at 10 ms each need 3 s: it gives up first
    s = bc.stats()
    assert 0 < s.events_processed < 300
    assert s.current_queue_size == 0 and s.events_dropped == 300 - s.events_processed  # left = dropped
    assert accounted(s)


def test_backpressure_invariant_holds_at_every_snapshot(obj: BPFObject) -> None:
    def callback(data: bytes) -> None:
        seq = rb_event(data)[0]
        if seq % 97 == 0:
            raise RuntimeError("counted")
        if seq % 50 == 0:
            time.sleep(0.002)

    bad: list[BackpressureStats] = []
    snapshots = 0
    done = threading.Event()
    bc = BackpressureConsumer(obj.maps["rb"], callback, max_pending=300, batch_size=32)

    def watch() -> None:
        nonlocal snapshots
        while not done.is_set():
            s = bc.stats()
            snapshots += 1
            if not accounted(s) or s.current_queue_size < 0 or s.max_queue_size < s.current_queue_size:
                bad.append(s)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        bc.start()
        for i in range(20):
            emit(obj, 500, first_seq=i * 500)
            time.sleep(0.005)
        bc.stop()
    finally:
        done.set()
        watcher.join()
    s = bc.stats()
    assert not bad, bad[:3]
    assert snapshots > 50
    assert s.events_read == 10000 and accounted(s) and s.current_queue_size == 0
    assert s.errors > 0 and s.events_dropped > 0  # both kinds of loss were exercised


def test_backpressure_start_stop_twice_and_restart(obj: BPFObject) -> None:
    got: list[int] = []
    bc = BackpressureConsumer(obj.maps["rb"], lambda d: got.append(rb_event(d)[0]))
    bc.stop()
    bc.start()
    bc.start()
    emit(obj, 20)
    assert wait_until(lambda: len(got) == 20)
    bc.stop()
    bc.stop()
    bc.start()
    emit(obj, 7, first_seq=100)
    assert wait_until(lambda: len(got) == 27)
    bc.stop()
    assert got == [*range(20), *range(100, 107)]
    s = bc.stats()
    assert s.events_read == 7 and accounted(s)  # a new run's statistics


def test_backpressure_errors_are_counted_and_it_goes_on(obj: BPFObject, caplog: pytest.LogCaptureFixture) -> None:
    def callback(seq: int) -> None:
        if seq % 4 == 0:
            raise ZeroDivisionError(seq)

    with caplog.at_level(logging.ERROR, logger="pylibbpf.consumers"), \
            backpressure_consumer(obj.maps["rb"], callback, lambda d: rb_event(d)[0]) as bc:
        emit(obj, 400)
        assert wait_until(lambda: bc.stats().events_processed + bc.stats().errors == 400)
    s = bc.stats()
    assert s.errors == 100 and s.events_processed == 300 and accounted(s)
    logged = [r for r in caplog.records if r.name == "pylibbpf.consumers"]
    assert len(logged) == 1 and logged[0].exc_info and logged[0].exc_info[0] is ZeroDivisionError


# --- SamplingConsumer -----------------------------------------------------------------------------

def test_sampling_rate_is_binomial(obj: BPFObject) -> None:
    n, p = 8000, 0.25
    sampled: list[int] = []
    deserialized = 0

    def deser(data: bytes) -> int:
        nonlocal deserialized
        deserialized += 1
        return rb_event(data)[0]

    with sampling_consumer(obj.maps["rb"], sampled.append, p, deser, max_pending=20000) as sc:
        emit(obj, n)
        assert wait_until(lambda: sc.stats().events_seen == n)
    s = sc.stats()
    assert isinstance(s, SamplingStats)
    sigma = math.sqrt(n * p * (1 - p))
    assert abs(len(sampled) - n * p) <= 4 * sigma, (len(sampled), n * p, sigma)
    assert s.events_sampled == len(sampled) == deserialized  # decided before deserialization
    assert s.events_seen == s.events_read == s.events_processed + s.errors == n
    assert s.sample_rate == p and accounted(s)
    assert sampled == sorted(sampled)


def test_sampling_with_a_seed_is_reproducible(obj: BPFObject) -> None:
    runs: list[list[int]] = []
    for _ in range(2):
        got: list[int] = []
        with SamplingConsumer(obj.maps["rb"], got.append, 0.3, lambda d: rb_event(d)[0], seed=1234,
                              max_pending=5000) as sc:
            emit(obj, 1000)
            assert wait_until(lambda: sc.stats().events_seen == 1000)
        runs.append(got)
    assert runs[0] == runs[1] and 0 < len(runs[0]) < 1000
    rnd = random.Random(1234)
    assert runs[0] == [i for i in range(1000) if rnd.random() < 0.3]


@pytest.mark.parametrize(("rate", "expected"), [(0.0, 0), (1.0, 300)])
def test_sampling_edges(obj: BPFObject, rate: float, expected: int) -> None:
    got: list[bytes] = []
    with sampling_consumer(obj.maps["rb"], got.append, rate) as sc:
        emit(obj, 300)
        assert wait_until(lambda: sc.stats().events_seen == 300)
    assert len(got) == expected and sc.stats().events_processed == 300


# --- asyncio --------------------------------------------------------------------------------------

def test_ringbuf_consumer_events_async(obj: BPFObject) -> None:
    async def scenario() -> tuple[list[int], ConsumerStats]:
        c = RingBufConsumer(obj.maps["rb"], None, deserializer=lambda d: rb_event(d)[0], batch_size=8)
        got: list[int] = []

        async def consume() -> None:
            async for seq in c.events():
                got.append(seq)
                if len(got) == 5:
                    emit(obj, 3, first_seq=10)
                if len(got) == 8:
                    c.stop()  # from the loop's own thread: returns promptly, the iteration ends

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.05)
        emit(obj, 5)
        await asyncio.wait_for(task, 5)
        return got, c.stats()

    got, s = asyncio.run(scenario())
    assert got == [0, 1, 2, 3, 4, 10, 11, 12]
    assert s.events_read == s.events_processed == 8


def test_backpressure_events_async_with_drops_and_cancellation(obj: BPFObject) -> None:
    async def scenario() -> tuple[list[int], BackpressureStats, BackpressureStats]:
        bc = BackpressureConsumer(obj.maps["rb"], None, deserializer=lambda d: rb_event(d)[0], max_pending=100,
                                  batch_size=16)
        got: list[int] = []

        async def consume() -> None:
            async for seq in bc.events():
                got.append(seq)
                await asyncio.sleep(0.001)  # a slow consumer: the queue overflows

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.05)
        assert bc.running
        emit(obj, 2000)
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        mid = bc.stats()
        assert bc._waker is None  # cancelling left nothing registered
        # a second iteration picks up where the first left off, then ends on stop()
        more: list[int] = []

        async def drain() -> None:
            async for seq in bc.events():
                more.append(seq)

        task2 = asyncio.create_task(drain())
        await asyncio.sleep(0.05)
        bc.stop()
        await asyncio.wait_for(task2, 5)
        got.extend(more)
        return got, mid, bc.stats()

    got, mid, s = asyncio.run(scenario())
    assert accounted(mid) and accounted(s)
    assert s.events_read == 2000 and s.events_dropped > 0 and s.current_queue_size == 0
    assert s.events_processed == len(got) and got == sorted(got)


def test_events_needs_a_consumer_without_callback(obj: BPFObject) -> None:
    async def scenario() -> None:
        c = RingBufConsumer(obj.maps["rb"], print)
        with pytest.raises(RuntimeError, match="callback=None"):
            async for _ in c.events():
                pass

    asyncio.run(scenario())


# --- options --------------------------------------------------------------------------------------

def test_bad_options_raise_at_construction(obj: BPFObject, bpf_objects: dict[str, Path]) -> None:
    rb = obj.maps["rb"]
    for bad in (0, -1):
        with pytest.raises(ValueError, match="max_pending"):
            BackpressureConsumer(rb, print, max_pending=bad)
        with pytest.raises(ValueError, match="batch_size"):
            BackpressureConsumer(rb, print, batch_size=bad)
        with pytest.raises(ValueError, match="batch_size"):
            RingBufConsumer(rb, print, batch_size=bad)
        with pytest.raises(ValueError, match="max_pending"):
            SamplingConsumer(rb, print, max_pending=bad)
    for rate in (-0.1, 1.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="sample_rate"):
            SamplingConsumer(rb, print, sample_rate=rate)
    for cls in (RingBufConsumer, BackpressureConsumer, SamplingConsumer):
        with pytest.raises(TypeError, match="callback must be callable"):
            cls(rb, "print")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="deserializer must be callable"):
            cls(rb, print, deserializer=3)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="needs a ringbuf map; map 'failed_reserves' is array"):
            cls(obj.maps["failed_reserves"], print)
    with pytest.raises(TypeError, match="drop_handler must be callable"):
        BackpressureConsumer(rb, print, drop_handler=1)  # type: ignore[arg-type]
    with BPFObject.open(bpf_objects["perfbuf"]) as perf:
        perf.load()
        with pytest.raises(TypeError, match="needs a ringbuf map; map 'events' is perf_event_array"):
            BackpressureConsumer(perf.maps["events"], print)
    with pytest.raises(ValueError, match="drain_timeout"):
        RingBufConsumer(rb, print).stop(drain_timeout=-1)


# --- THE GIL TEST ---------------------------------------------------------------------------------

# A producer process: os.getppid() at a steady `rate` for `secs` seconds, once told to start.
# It never bursts to catch up after being descheduled (at most two ticks' worth per tick).
PRODUCER = r"""
import os, sys, time
rate, secs = int(sys.argv[1]), float(sys.argv[2])
sys.stdin.readline()
tick = 0.001
per = max(1, int(rate * tick))
t0 = time.monotonic()
end, n = t0 + secs, 0
while time.monotonic() < end:
    due = int((time.monotonic() - t0) * rate)
    k = max(0, min(due - n, 2 * per))
    for _ in range(k):
        os.getppid()
    n += k
    time.sleep(tick)
print(n, flush=True)
"""
RATE, SECONDS = 10000, 2.0
GIL_EVENT = struct.Struct("<QQQQ")  # seq, ts, tgid, pad


HOLD_S = 0.2  # one GIL hold: 2000 events at 10 k/s, more than the 64 KiB ring's 1638


def cpu_time_of(fn: Callable[[], object]) -> float:
    """The calling thread's CPU time for fn() (unlike the wall clock, other load does not change it)."""
    t0 = time.thread_time()
    fn()
    return time.thread_time() - t0


@pytest.fixture(scope="module")
def gil_holder() -> Callable[[], None]:
    """A C call that holds the GIL for ~HOLD_S of CPU: sorted() of a shuffled list, sized here."""
    n = 50000
    while True:
        data = list(range(n))
        random.Random(7).shuffle(data)
        took = sorted(cpu_time_of(lambda: sorted(data)) for _ in range(3))[1]  # noqa: B023
        if took >= 0.9 * HOLD_S or n > 20_000_000:
            break
        n = int(n * min(4.0, HOLD_S / max(took, 1e-4)) * 1.05)

    def hold() -> None:
        sorted(data)

    return hold


READER_NICE = -10


@contextlib.contextmanager
def reader_priority(nice: int = READER_NICE) -> Iterator[None]:
    """Threads started inside the block inherit a higher CPU priority (Linux: nice is per thread).

    The GIL test is about the GIL, not about other processes: on a shared,
    oversubscribed machine a reader thread at the default priority can wait
    longer than the ring lasts for a CPU, GIL or not. Both consumers' readers
    get the same boost (the RingBufConsumer's reader is its callback thread), and
    so does the producer process.
    """
    tid = threading.get_native_id()
    old = os.getpriority(os.PRIO_PROCESS, tid)
    os.setpriority(os.PRIO_PROCESS, tid, nice)
    try:
        yield
    finally:
        os.setpriority(os.PRIO_PROCESS, tid, old)


def run_gil_scenario(bpf_objects: dict[str, Path], make: Callable[[Map, Callable[[bytes], None]], Any],
                     hold: Callable[[], None]) -> tuple[int, int, list[int], Any]:
    """Run the producer against a consumer whose callback holds the GIL ~200 ms every 200 events.

    Returns (submitted, failed reserves, sequence numbers delivered, final stats).
    """
    seqs: list[int] = []

    def callback(data: bytes) -> None:
        seqs.append(GIL_EVENT.unpack_from(data)[0])
        if len(seqs) % 200 == 0:
            hold()

    with BPFObject.open(bpf_objects["consumer_gil"]) as obj:
        obj.load()
        link = obj.programs["on_getppid"].attach()
        try:
            consumer = make(obj.maps["rb"], callback)
            with reader_priority():
                consumer.start()
            if isinstance(consumer, BackpressureConsumer) and consumer._worker is not None:
                # the native reader keeps the boost; the Python processor thread does not need it
                native_id = consumer._worker.native_id
                if native_id is not None:
                    os.setpriority(os.PRIO_PROCESS, native_id, os.getpriority(os.PRIO_PROCESS, 0))
            try:
                producer = subprocess.Popen([sys.executable, "-c", PRODUCER, str(RATE), str(SECONDS)],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                # the producer gets the readers' priority too, so that its rate holds on a busy machine
                os.setpriority(os.PRIO_PROCESS, producer.pid, READER_NICE)
                obj.maps["target_tgid"].raw.update(0, producer.pid.to_bytes(4, "little"))
                out, _ = producer.communicate("go\n", timeout=60)
                assert producer.returncode == 0 and int(out) > RATE * SECONDS / 2  # the producer ran
            finally:
                consumer.stop(drain_timeout=1.0)  # what is left then is counted (backpressure) or left
            stats = consumer.stats()
        finally:
            link.destroy()
        failed_raw = obj.maps["counters"].raw.lookup(1)
        assert isinstance(failed_raw, bytes)
        submitted, failed = counter(obj, "counters"), int.from_bytes(failed_raw, "little")
    return submitted, failed, seqs, stats


def test_gil_backpressure_reader_keeps_the_kernel_ring_empty(bpf_objects: dict[str, Path],
                                                             gil_holder: Callable[[], None]) -> None:
    submitted, failed, seqs, s = run_gil_scenario(
        bpf_objects, lambda m, cb: BackpressureConsumer(m, cb, max_pending=1000), gil_holder)
    print(f"\nGIL test, backpressure: submitted={submitted} failed_reserves={failed} {s}")
    assert failed == 0, f"the kernel failed {failed} reserves: the native reader was held up"
    assert s.events_dropped > 0, "the slow callback should have made the queue drop"
    assert s.events_read == submitted  # every submitted event was read (and stop drained the ring)
    assert s.events_read == s.events_processed + s.events_dropped + s.current_queue_size + s.errors
    assert s.current_queue_size == 0 and s.errors == 0
    assert len(seqs) == s.events_processed and seqs == sorted(seqs)


def test_gil_ringbuf_consumer_loses_events_in_the_kernel(bpf_objects: dict[str, Path],
                                                         gil_holder: Callable[[], None]) -> None:
    """The contrast: the same load with a reader that needs the GIL makes the kernel drop."""
    submitted, failed, seqs, s = run_gil_scenario(
        bpf_objects, lambda m, cb: RingBufConsumer(m, cb), gil_holder)
    print(f"\nGIL test, RingBufConsumer: submitted={submitted} failed_reserves={failed} {s}")
    assert failed > 0
    # nothing lost in user space: every event read was delivered, in order (the kernel lost the rest;
    # what was still in the ring when stop()'s drain_timeout ran out stays there)
    assert s.events_read == s.events_processed == len(seqs) <= submitted
    assert seqs == list(range(len(seqs)))


def test_gil_scenario_sanity(gil_holder: Callable[[], None]) -> None:
    """The hold is one C call that keeps the GIL: a spinning Python thread makes (next to) no progress
    during it, and plenty while the main thread waits without the GIL for as long. Progress is compared
    with progress under the same load, never with a clock: a busy machine slows both alike."""
    progress = [0]
    done = threading.Event()

    def spin() -> None:
        while not done.is_set():
            progress[0] += 1

    spinner = threading.Thread(target=spin)
    spinner.start()
    samples: list[tuple[int, int]] = []
    try:
        assert wait_until(lambda: progress[0] > 0)
        for _ in range(3):
            start, t0 = progress[0], time.monotonic()
            gil_holder()
            wall, during_hold = time.monotonic() - t0, progress[0] - start
            start = progress[0]
            threading.Event().wait(wall)  # the GIL is free meanwhile
            samples.append((during_hold, progress[0] - start))
    finally:
        done.set()
        spinner.join()
    assert any(4 * held < free for held, free in samples), samples


# Each helper and its class, with every parameter of the class beyond (map, callback) and a
# value the class refuses (None: nothing to refuse; a valid value must be accepted instead).
HELPERS = [
    (ringbuf_consumer, RingBufConsumer, {"deserializer": 5, "batch_size": 0}),
    (backpressure_consumer, BackpressureConsumer,
     {"deserializer": 5, "max_pending": 0, "drop_handler": 5, "batch_size": 0, "max_pending_bytes": 0}),
    (sampling_consumer, SamplingConsumer,
     {"sample_rate": 2.0, "deserializer": 5, "seed": None, "max_pending": 0, "drop_handler": 5, "batch_size": 0,
      "max_pending_bytes": 0}),
]


@pytest.mark.parametrize(("helper", "cls", "refused"), HELPERS, ids=[c.__name__ for _, c, _ in HELPERS])
def test_a_helper_takes_every_parameter_of_its_class(obj: BPFObject, helper: Any, cls: type,
                                                     refused: dict[str, Any]) -> None:
    """The helper hands each parameter to the class: the class's own check names it (not a
    TypeError of the helper's signature), and a valid value gives a started consumer."""
    params = [name for name in inspect.signature(cls).parameters if name not in ("map", "callback")]
    assert sorted(params) == sorted(refused), "a parameter of the class is missing from this table"
    for name, bad in refused.items():
        if bad is not None:
            with pytest.raises((TypeError, ValueError), match=rf"^{name} must"), \
                    helper(obj.maps["rb"], lambda _r: None, **{name: bad}):
                pytest.fail(f"{helper.__name__}({name}={bad!r}) started")
        value = 7 if bad is None else inspect.signature(cls).parameters[name].default
        with helper(obj.maps["rb"], lambda _r: None, **{name: value}) as c:
            assert isinstance(c, cls) and c.running
    with helper(obj.maps["rb"], lambda _r: None, **{n: inspect.signature(cls).parameters[n].default
                                                  for n in params}) as c:
        assert c.running
