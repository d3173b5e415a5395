"""Faults, each with its defined outcome (docs/reliability.md, the fault table).

- the BPF object closed under a running consumer or an open reader;
- a consumer stopped (or restarted) from its own callback;
- callbacks that raise on every record; a callback raising SystemExit;
- deserializers that return garbage or raise;
- Ctrl-C (SIGINT) while the main thread is blocked in a read;
- fork() while consumers and readers run, and a child that exits normally;
- rings overflowing in the kernel, for every reader.

Records are written with BPF_PROG_TEST_RUN (``cpu=`` for perf rings); waits
are on events or counters with generous timeouts, never fixed sleeps that a
result depends on.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from progs import (
    EMIT_ARGS,
    ORD_EVENT,
    ORD_PERF,
    ORD_RB0,
    ORD_RB1,
    ORDERED_ARGS,
    RAW_TP_ARGS,
    accounted,
    blocked_in_epoll,
    counter,
    emit_perf,
    emit_ring,
    old_ts,
    rb_event,
    wait_until,
)
from progs import emit_ordered as run_emit_ordered

from pylibbpf import (
    BackpressureConsumer,
    BPFObject,
    ClosedError,
    OrderedReader,
    PerfBuffer,
    PerfReader,
    RingBufConsumer,
    RingBuffer,
    SamplingConsumer,
    defevent,
    ffi,
    lib,
    map_ringbuf,
    peek_ringbuf_events,
    process_events,
    read_ringbuf_events,
)

pytestmark = pytest.mark.usefixtures("bpf_privileged", "no_consumer_thread_left")

ROOT = Path(__file__).resolve().parent.parent
CONSUMERS = [RingBufConsumer, BackpressureConsumer, SamplingConsumer]
TIMEOUT = 10.0  # seconds: generous, the machine may be busy


# --- helpers --------------------------------------------------------------------------------------

def make_consumer(kind: type[Any], m: Any, callback: Any, **kw: Any) -> Any:
    """A consumer of ``kind``; a SamplingConsumer passes everything on (rate 1.0)."""
    if kind is SamplingConsumer:
        kw.setdefault("sample_rate", 1.0)
    return kind(m, callback, **kw)


def run_prog_fd(fd: int, ctx: bytes, cpu: int | None = None) -> None:
    """BPF_PROG_TEST_RUN through a raw program fd (libbpf's own call): for a program whose object is closed."""
    opts = ffi.new("struct bpf_test_run_opts *")
    opts.sz = ffi.sizeof("struct bpf_test_run_opts")
    cin = ffi.from_buffer(ctx)
    opts.ctx_in, opts.ctx_size_in = cin, len(ctx)
    if cpu is not None:
        opts.flags, opts.cpu = lib.BPF_F_TEST_RUN_ON_CPU, cpu
    err = lib.bpf_prog_test_run_opts(fd, opts)
    assert err == 0, os.strerror(-err)


@pytest.fixture
def quiet_consumer_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """The consumers' error log off for a test that provokes errors on purpose (restored after it)."""
    monkeypatch.setattr(logging.getLogger("pylibbpf.consumers"), "disabled", True)


def emit_ordered(obj: BPFObject, count: int, *, target: int, seq: int = 0) -> None:
    """ord_events from a second ago (delivered at once) into ordered.bpf.o's perf array, rb0 or rb1."""
    run_emit_ordered(obj.programs["emit_ordered"], count, ts=old_ts(), seq=seq, target=target)




@pytest.fixture
def ord_obj(bpf_objects: dict[str, Path]) -> Iterator[BPFObject]:
    with BPFObject.open(bpf_objects["ordered"]) as o:
        yield o.load()


# --- the BPF object closed under a consumer or a reader -------------------------------------------

@pytest.mark.parametrize("kind", CONSUMERS)
def test_closing_the_object_while_a_consumer_runs(bpf_objects: dict[str, Path], kind: type[Any]) -> None:
    """The consumer keeps working: its mapping holds the ring; stop() is clean; start() is refused."""
    got: list[int] = []
    o = BPFObject.open(bpf_objects["ringbuf"]).load()
    prog_fd = os.dup(o.programs["emit"].fd)  # keeps the program (and its ring) after the object goes
    try:
        c = make_consumer(kind, o.maps["rb"], lambda d: got.append(rb_event(d)[0]))
        c.start()
        try:
            emit_ring(o.programs["emit"], 5)
            assert wait_until(lambda: len(got) == 5)
            o.close()
            run_prog_fd(prog_fd, EMIT_ARGS.pack(5, 0, 5, 0, 0, 0))
            assert wait_until(lambda: len(got) == 10), got
            assert c.running
        finally:
            c.stop()
        assert got == list(range(10))
        s = c.stats()
        assert s.events_read == s.events_processed == 10 and s.errors == 0
        with pytest.raises(ClosedError, match="BPF object 'ringbuf' is closed"):
            c.start()
    finally:
        os.close(prog_fd)
        o.close()


def test_closing_the_object_under_open_readers(bpf_objects: dict[str, Path]) -> None:
    """RingBuffer, PerfBuffer, PerfReader and OrderedReader keep reading after the object is closed."""
    rb_o = BPFObject.open(bpf_objects["ringbuf"]).load()
    pf_o = BPFObject.open(bpf_objects["perfbuf"]).load()
    ord_o = BPFObject.open(bpf_objects["ordered"]).load()
    fds = [os.dup(rb_o.programs["emit"].fd), os.dup(pf_o.programs["emit_perf"].fd),
           os.dup(ord_o.programs["emit_ordered"].fd)]
    rb_seen: list[int] = []
    pb_seen: list[int] = []
    try:
        rb = RingBuffer(rb_o.maps["rb"], lambda d: rb_seen.append(rb_event(d)[0]))
        pb = PerfBuffer(pf_o.maps["events"], lambda _cpu, d: pb_seen.append(struct.unpack_from("<Q", d)[0]))
        ordered = OrderedReader([ord_o.maps["rb0"], ord_o.maps["rb1"]], timestamp=0, window_ms=0)
        with rb, pb, ordered:
            for o in (rb_o, pf_o, ord_o):
                o.close()
            run_prog_fd(fds[0], EMIT_ARGS.pack(3, 0, 0, 0, 0, 0))
            run_prog_fd(fds[1], RAW_TP_ARGS.pack(3, 0, 0, 0), cpu=0)
            run_prog_fd(fds[2], ORDERED_ARGS.pack(3, old_ts(), 1, 0, 0, 0, ORD_RB0), cpu=0)
            assert rb.poll(TIMEOUT) == 3 and rb_seen == [0, 1, 2]
            assert pb.poll(TIMEOUT) == 3 and pb_seen == [0, 1, 2]
            assert [ORD_EVENT.unpack_from(ordered.read(timeout=TIMEOUT).raw_sample)[1] for _ in range(3)] == [0, 1, 2]
        # PerfReader: the same, on a fresh object (one reader per perf event array).
        pf_o = BPFObject.open(bpf_objects["perfbuf"]).load()
        fds.append(os.dup(pf_o.programs["emit_perf"].fd))
        with PerfReader(pf_o.maps["events"]) as pr:
            pf_o.close()
            run_prog_fd(fds[-1], RAW_TP_ARGS.pack(1, 7, 0, 0), cpu=0)
            assert struct.unpack_from("<Q", pr.read(timeout=TIMEOUT).raw_sample)[0] == 7
            pr.pause()
            pr.resume()
    finally:
        for fd in fds:
            os.close(fd)
        for o in (rb_o, pf_o, ord_o):
            o.close()


def test_a_perf_buffer_outliving_its_object_leaves_a_new_map_alone(bpf_objects: dict[str, Path]) -> None:
    """Regression: PerfBuffer's clean-up deletes its CPUs' map entries; on a dup of the map fd, not on a
    number that a later object's map may have taken (which silenced that map's reader)."""
    old = BPFObject.open(bpf_objects["perfbuf"]).load()
    pb = PerfBuffer(old.maps["events"], lambda _cpu, _d: None)
    old.close()
    with BPFObject.open(bpf_objects["perfbuf"]) as new:
        new.load()
        with PerfReader(new.maps["events"]) as pr:
            pb.close()
            gc.collect()
            emit_perf(new.programs["emit_perf"], 2, cpu=0)
            assert counter(new, "failed_outputs") == 0
            assert [pr.read(timeout=TIMEOUT).cpu for _ in range(2)] == [0, 0]


# --- stopping from the callback -------------------------------------------------------------------

@pytest.mark.parametrize("kind", CONSUMERS)
def test_stop_from_the_callback(rb_obj: BPFObject, kind: type[Any]) -> None:
    """stop() in the callback returns at once; the run ends after the callback, delivering what had been
    published (drain_timeout); stop() from outside joins; the consumer restarts."""
    got: list[int] = []
    holder: list[Any] = []
    armed = [True]

    def callback(data: bytes) -> None:
        got.append(rb_event(data)[0])
        if armed[0] and len(got) == 3:
            holder[0].stop()  # only asks: it cannot wait for the thread it runs in
            assert holder[0].running  # still inside this callback

    c = make_consumer(kind, rb_obj.maps["rb"], callback, batch_size=2)
    holder.append(c)
    emit_ring(rb_obj.programs["emit"], 10)
    c.start()
    assert wait_until(lambda: not c.running)
    c.stop()
    assert got == list(range(10))
    s = c.stats()
    assert s.events_read == s.events_processed == 10
    if kind is not RingBufConsumer:
        assert accounted(s) and s.current_queue_size == 0
    got.clear()
    armed[0] = False  # the restarted run's callback must not stop it again
    c.start()
    try:
        emit_ring(rb_obj.programs["emit"], 4, first_seq=10)
        assert wait_until(lambda: len(got) == 4)
    finally:
        c.stop()
    assert got == [10, 11, 12, 13] and c.stats().events_read == 4


def test_stop_from_the_callback_without_drain(rb_obj: BPFObject) -> None:
    """stop(drain_timeout=0) in the callback: the rest of the queue is counted as dropped, never lost."""
    got: list[int] = []
    holder: list[BackpressureConsumer] = []

    def callback(data: bytes) -> None:
        got.append(rb_event(data)[0])
        if len(got) == 3:
            holder[0].stop(drain_timeout=0)

    bc = BackpressureConsumer(rb_obj.maps["rb"], callback, batch_size=4)
    holder.append(bc)
    emit_ring(rb_obj.programs["emit"], 10)
    bc.start()
    assert wait_until(lambda: not bc.running)
    bc.stop()
    s = bc.stats()
    assert got == [0, 1, 2]
    assert (s.events_read, s.events_processed, s.events_dropped, s.current_queue_size) == (10, 3, 7, 0)
    assert accounted(s)


@pytest.mark.usefixtures("quiet_consumer_log")
@pytest.mark.parametrize("kind", CONSUMERS)
def test_start_from_the_callback_is_refused(rb_obj: BPFObject, kind: type[Any]) -> None:
    """start() in the callback raises RuntimeError there: counted in errors, the run goes on."""
    holder: list[Any] = []

    def callback(_data: bytes) -> None:
        holder[0].start()

    c = make_consumer(kind, rb_obj.maps["rb"], callback)
    holder.append(c)
    with c:
        emit_ring(rb_obj.programs["emit"], 3)
        assert wait_until(lambda: c.stats().errors == 3)
        assert c.running


# --- callbacks that raise -------------------------------------------------------------------------

@pytest.mark.parametrize("kind", CONSUMERS)
def test_a_callback_raising_on_every_record_is_counted(rb_obj: BPFObject, kind: type[Any],
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """Every record counts in errors, the consumer goes on; one ERROR log line per exception type."""
    seen: list[int] = []

    def callback(data: bytes) -> None:
        seen.append(rb_event(data)[0])
        raise ValueError("bad record")

    caplog.set_level(logging.DEBUG, logger="pylibbpf.consumers")
    c = make_consumer(kind, rb_obj.maps["rb"], callback, batch_size=16)
    with c:
        emit_ring(rb_obj.programs["emit"], 100)
        assert wait_until(lambda: c.stats().errors == 100)
        assert c.running
        emit_ring(rb_obj.programs["emit"], 50, first_seq=100)
        assert wait_until(lambda: c.stats().errors == 150)
    s = c.stats()
    assert seen == list(range(150))
    assert s.events_read == 150 and s.errors == 150 and s.events_processed == 0
    if kind is not RingBufConsumer:
        assert accounted(s) and s.events_dropped == 0
    errors = [r for r in caplog.records if r.name == "pylibbpf.consumers" and r.levelno == logging.ERROR]
    assert len(errors) == 1 and "ValueError" in errors[0].getMessage()


def test_ring_buffer_poll_raises_once_per_record_and_loses_nothing(rb_obj: BPFObject) -> None:
    """Each poll() delivers one record, whose callback raises: the exception reaches the caller, the next
    poll() goes on with the next record. 20 records, 20 exceptions, each record exactly once."""
    seen: list[int] = []

    def callback(data: memoryview) -> None:
        seen.append(rb_event(data)[0])
        raise RuntimeError(f"record {seen[-1]}")

    with RingBuffer(rb_obj.maps["rb"], callback) as rb:
        emit_ring(rb_obj.programs["emit"], 20)
        for i in range(20):
            with pytest.raises(RuntimeError, match=f"^record {i}$"):
                rb.poll(TIMEOUT)
        assert rb.poll(0) == 0
        assert rb.consume() == 0
    assert seen == list(range(20))


def test_perf_buffer_and_process_events_raise_once_per_record(rb_obj: BPFObject, perf_obj: BPFObject) -> None:
    seen: list[int] = []

    def perf_callback(_cpu: int, data: memoryview) -> None:
        seen.append(struct.unpack_from("<Q", data)[0])
        raise RuntimeError("perf")

    with PerfBuffer(perf_obj.maps["events"], perf_callback) as pb:
        emit_perf(perf_obj.programs["emit_perf"], 10, cpu=0)
        for _ in range(10):
            with pytest.raises(RuntimeError, match="perf"):
                pb.poll(TIMEOUT)
        assert pb.poll(0) == 0
    assert seen == list(range(10))

    seen.clear()

    def ring_callback(raw: bytes) -> None:
        seen.append(rb_event(raw)[0])
        raise RuntimeError("ring")

    emit_ring(rb_obj.programs["emit"], 10)
    for _ in range(10):
        with pytest.raises(RuntimeError, match="ring"):
            process_events(rb_obj.maps["rb"], ring_callback, timeout=0.0)
    assert process_events(rb_obj.maps["rb"], ring_callback, timeout=0.0) == 0
    assert seen == list(range(10))


@pytest.mark.usefixtures("quiet_consumer_log")
@pytest.mark.parametrize("kind", [RingBufConsumer, BackpressureConsumer])
def test_a_callback_raising_system_exit_ends_the_run(rb_obj: BPFObject, kind: type[Any]) -> None:
    """Not an Exception: the run ends (logged), stop() re-raises it. The backpressure consumer counts the
    record and everything still queued as dropped; a RingBufConsumer's read records after it are lost."""
    calls: list[int] = []

    def callback(data: bytes) -> None:
        calls.append(rb_event(data)[0])
        if len(calls) == 3:
            raise SystemExit(3)

    c = kind(rb_obj.maps["rb"], callback, batch_size=4)
    emit_ring(rb_obj.programs["emit"], 10)
    c.start()
    assert wait_until(lambda: not c.running)
    with pytest.raises(SystemExit):
        c.stop()
    s = c.stats()
    assert calls == [0, 1, 2] and s.events_processed == 2 and s.errors == 0
    if kind is BackpressureConsumer:
        assert s.events_read == 10 and s.events_dropped == 8 and accounted(s)
    else:
        assert s.events_read == 4  # one batch: records 2 and 3 were read, never counted as processed
        with map_ringbuf(rb_obj.maps["rb"]) as layout:
            assert [rb_event(r)[0] for r in read_ringbuf_events(layout)] == [4, 5, 6, 7, 8, 9]
    c.stop()  # the failure was reported once: now a no-op


# --- deserializers that return garbage ------------------------------------------------------------

GARBAGE: list[tuple[str, Callable[[bytes], Any]]] = [
    ("None", lambda _raw: None),
    ("an int", lambda _raw: 42),
    ("an object", lambda _raw: object()),
    ("the raw bytes reversed", lambda raw: raw[::-1]),
]


@pytest.mark.parametrize("kind", CONSUMERS)
@pytest.mark.parametrize(("label", "deserializer"), GARBAGE, ids=[g[0] for g in GARBAGE])
def test_a_deserializer_returning_garbage_is_passed_on_as_is(rb_obj: BPFObject, kind: type[Any], label: str,
                                                             deserializer: Callable[[bytes], Any]) -> None:
    """Whatever the deserializer returns goes to the callback untouched; pylibbpf never inspects it."""
    got: list[Any] = []
    c = make_consumer(kind, rb_obj.maps["rb"], got.append, deserializer=deserializer)
    with c:
        emit_ring(rb_obj.programs["emit"], 5)
        assert wait_until(lambda: c.stats().events_processed == 5)
    assert len(got) == 5 and c.stats().errors == 0
    if label == "None":
        assert got == [None] * 5
    elif label == "an int":
        assert got == [42] * 5
    elif label == "the raw bytes reversed":
        assert [rb_event(g[::-1])[0] for g in got] == list(range(5))


BadEvent = defevent("bad_event", ("seq", "u64"), ("blob", "u8", 64))  # 72 bytes: longer than the 24-byte record


@pytest.mark.usefixtures("quiet_consumer_log")
@pytest.mark.parametrize("kind", CONSUMERS)
def test_a_deserializer_that_raises_counts_errors(rb_obj: BPFObject, kind: type[Any]) -> None:
    """A wrong EventDef (longer than the records) raises ValueError in parse: each record is an error, the
    callback is not called, the consumer goes on."""
    got: list[Any] = []
    c = make_consumer(kind, rb_obj.maps["rb"], got.append, deserializer=BadEvent.parse)
    with c:
        emit_ring(rb_obj.programs["emit"], 5)
        assert wait_until(lambda: c.stats().errors == 5)
        assert c.running
    s = c.stats()
    assert got == [] and s.events_processed == 0 and s.errors == 5
    if kind is not RingBufConsumer:
        assert accounted(s)


def test_garbage_deserializers_for_peek_and_process_events(rb_obj: BPFObject) -> None:
    """peek: garbage is returned as is; a raise propagates and nothing is consumed. process_events: garbage
    goes to the callback; a raise propagates, that record is consumed and the rest stay."""
    emit_ring(rb_obj.programs["emit"], 4)
    m = rb_obj.maps["rb"]
    assert peek_ringbuf_events(m, deserializer=lambda _r: None) == [None] * 4
    with pytest.raises(ValueError, match="bad_event"):
        peek_ringbuf_events(m, deserializer=BadEvent.parse)
    got: list[Any] = []
    assert process_events(m, got.append, max_events=1, timeout=0.0, deserializer=lambda _r: None) == 1
    assert got == [None]
    with pytest.raises(ValueError, match="bad_event"):
        process_events(m, got.append, timeout=0.0, deserializer=BadEvent.parse)
    assert [rb_event(r)[0] for r in peek_ringbuf_events(m)] == [2, 3]


# --- Ctrl-C during a blocked read -----------------------------------------------------------------

class Blocked:
    """A reader blocked in the main thread, and how to make and read one record for it."""

    def __init__(self, reader: Any, block: Callable[[], Any], emit: Callable[[], None],
                 read_one: Callable[[], bool]) -> None:
        self.reader, self.block, self.emit, self.read_one = reader, block, emit, read_one


def blocked_reader(name: str, rb_obj: BPFObject, perf_obj: BPFObject, ord_obj: BPFObject) -> Blocked:
    if name == "RingBuffer.poll":
        rb = RingBuffer(rb_obj.maps["rb"], lambda _d: None)
        return Blocked(rb, lambda: rb.poll(), lambda: emit_ring(rb_obj.programs["emit"], 1),
                       lambda: rb.poll(TIMEOUT) == 1)
    if name == "RingBuffer.read_batch":
        rb = RingBuffer(rb_obj.maps["rb"], lambda _d: None)
        return Blocked(rb, lambda: rb.read_batch(), lambda: emit_ring(rb_obj.programs["emit"], 1),
                       lambda: len(rb.read_batch(TIMEOUT)) == 1)
    if name == "PerfBuffer.poll":
        pb = PerfBuffer(perf_obj.maps["events"], lambda _c, _d: None)
        return Blocked(pb, lambda: pb.poll(), lambda: emit_perf(perf_obj.programs["emit_perf"], 1, cpu=0),
                       lambda: pb.poll(TIMEOUT) == 1)
    if name == "PerfReader.read":
        pr = PerfReader(perf_obj.maps["events"])
        return Blocked(pr, pr.read, lambda: emit_perf(perf_obj.programs["emit_perf"], 1, cpu=0),
                       lambda: pr.read(timeout=TIMEOUT).cpu == 0)
    if name == "OrderedReader.read (perf)":
        od = OrderedReader(ord_obj.maps["events"], window_ms=0)
        return Blocked(od, od.read, lambda: emit_ordered(ord_obj, 1, target=ORD_PERF),
                       lambda: od.read(timeout=TIMEOUT).cpu == 0)
    if name == "OrderedReader.read (ring buffers)":
        od = OrderedReader([ord_obj.maps["rb0"], ord_obj.maps["rb1"]], timestamp=0, window_ms=0)
        return Blocked(od, od.read, lambda: emit_ordered(ord_obj, 1, target=ORD_RB1),
                       lambda: od.read(timeout=TIMEOUT).cpu == 1)
    raise AssertionError(name)


def all_threads_seen_asleep() -> Callable[[], bool]:
    """A predicate for wait_until: every other thread of this process has been seen sleeping (state S)
    at least once since the predicate was made. A thread that spins is always running (R), never S."""
    me = threading.get_native_id()
    seen: set[int] = set()

    def check() -> bool:
        tids = {int(t) for t in os.listdir("/proc/self/task")} - {me}
        for tid in tids - seen:
            try:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    if f.read().rpartition(")")[2].split()[0] == "S":
                        seen.add(tid)
            except FileNotFoundError:
                seen.add(tid)  # it ended
        return tids <= seen

    return check


SIGINT_CASES = ["RingBuffer.poll", "RingBuffer.read_batch", "PerfBuffer.poll", "PerfReader.read",
                "OrderedReader.read (perf)", "OrderedReader.read (ring buffers)"]


@pytest.fixture
def default_sigint() -> Iterator[None]:
    """Python's own SIGINT handler (KeyboardInterrupt), whatever the test runner installed."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("default_sigint")
@pytest.mark.parametrize("name", SIGINT_CASES)
def test_ctrl_c_interrupts_a_blocked_read(rb_obj: BPFObject, perf_obj: BPFObject, ord_obj: BPFObject,
                                          name: str) -> None:
    """SIGINT from another thread (os.kill of our own pid, as Ctrl-C would) raises KeyboardInterrupt in the
    blocked main thread at once; the reader is still usable afterwards, and closes cleanly."""
    assert threading.current_thread() is threading.main_thread()
    b = blocked_reader(name, rb_obj, perf_obj, ord_obj)
    sent: list[float] = []
    main_tid = threading.get_native_id()

    def interrupt() -> None:
        # Once the main thread sleeps in the reader's wait (not in a GIL handoff): the signal must
        # interrupt a read that is really blocked.
        wait_until(lambda: blocked_in_epoll(main_tid))
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    kicker = threading.Thread(target=interrupt, daemon=True)
    rescue = threading.Timer(TIMEOUT + 10, b.reader.close)  # never hang: a lost signal fails with ClosedError
    rescue.start()
    try:
        with b.reader:
            with pytest.raises(KeyboardInterrupt):
                kicker.start()
                b.block()
            assert sent  # the signal, not the rescue timer's close(), ended the read
            b.emit()
            assert b.read_one()
    finally:
        rescue.cancel()
        kicker.join()
        rescue.join()


# --- fork -----------------------------------------------------------------------------------------

def _child_checks(wfd: int, bc: BackpressureConsumer, rc: RingBufConsumer, pr: PerfReader,
                  ringbuf_path: Path) -> None:
    """In the forked child: the parent's consumers and reader are inert; the child's own reader works."""
    assert not bc.running and not rc.running, "the parent's threads do not exist here"
    bc.stop()  # returns: a hang here fails the parent's wait for this child
    rc.stop()
    try:
        bc.start()
        raise AssertionError("start() of an inherited consumer must be refused")
    except ClosedError as e:
        assert "inherited through fork()" in str(e)
    try:
        pr.read(timeout=0)
        raise AssertionError("an inherited PerfReader must refuse to read")
    except ClosedError as e:
        assert "inherited through fork()" in str(e)
    pr.close()  # marks it closed here; the parent's reader is untouched
    got: list[int] = []
    with BPFObject.open(ringbuf_path) as own:
        own.load()
        with BackpressureConsumer(own.maps["rb"], lambda d: got.append(rb_event(d)[0])):
            emit_ring(own.programs["emit"], 5)
            assert wait_until(lambda: len(got) == 5)
    assert got == list(range(5))
    os.write(wfd, b"ok")


def test_fork_while_consumers_run(rb_obj: BPFObject, perf_obj: BPFObject, bpf_objects: dict[str, Path]) -> None:
    """The child must not use the parent's consumers and readers: there they are inert (stop() is a no-op,
    start() raises ClosedError, reads raise ClosedError, close() releases nothing shared). The child can
    make its own and exit; the parent's keep working, and nothing the child did reaches them."""
    bp_got: list[int] = []
    rc_got: list[int] = []
    bc = BackpressureConsumer(rb_obj.maps["rb"], lambda d: bp_got.append(rb_event(d)[0]))
    rc = RingBufConsumer(rb_obj.maps["rb2"], lambda d: rc_got.append(rb_event(d)[0]))
    pr = PerfReader(perf_obj.maps["events"])
    emit = rb_obj.programs["emit"]
    bc.start()
    rc.start()
    try:
        emit_ring(emit, 3)
        emit_ring(emit, 3, target=1)
        assert wait_until(lambda: len(bp_got) == 3 and len(rc_got) == 3)
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 1
            try:
                os.close(rfd)
                _child_checks(wfd, bc, rc, pr, bpf_objects["ringbuf"])
                code = 0
            except BaseException as e:
                os.write(wfd, f"child failed: {type(e).__name__}: {e}".encode())
            finally:
                os._exit(code)
        os.close(wfd)
        with os.fdopen(rfd, "rb") as r:
            report = r.read().decode()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0 and report == "ok", report

        # The parent's consumers and reader still work.
        emit_ring(emit, 3, first_seq=3)
        emit_ring(emit, 3, first_seq=3, target=1)
        emit_perf(perf_obj.programs["emit_perf"], 1, first_seq=9, cpu=0)
        assert wait_until(lambda: len(bp_got) == 6 and len(rc_got) == 6)
        assert bp_got == rc_got == list(range(6))
        assert bc.running and rc.running
        assert struct.unpack_from("<Q", pr.read(timeout=TIMEOUT).raw_sample)[0] == 9
        # Idle now: no thread of ours spins (a stop eventfd written by the child would make the native
        # reader's epoll_wait return at once, forever): each is seen asleep.
        assert wait_until(all_threads_seen_asleep(), timeout=TIMEOUT)
    finally:
        bc.stop()
        rc.stop()
        pr.close()


CHILD_EXITS_NORMALLY = r"""
import gc, os, sys
sys.path.insert(0, "tests")
from progs import counter, emit_ordered, emit_perf, emit_ring, old_ts, wait_until
from pylibbpf import BackpressureConsumer, BPFObject, OrderedReader, PerfBuffer, PerfReader, RingBuffer

ringbuf, perfbuf, ordered = sys.argv[1:4]
rb_o, pf1, pf2, ord_o = (BPFObject.open(p).load() for p in (ringbuf, perfbuf, perfbuf, ordered))
rb_seen, pb_seen, bp_seen = [], [], []
rb = RingBuffer(rb_o.maps["rb"], lambda d: rb_seen.append(1))
bc = BackpressureConsumer(rb_o.maps["rb2"], lambda d: bp_seen.append(1))
pb = PerfBuffer(pf1.maps["events"], lambda cpu, d: pb_seen.append(1))
pr = PerfReader(pf2.maps["events"])
od = OrderedReader(ord_o.maps["events"], window_ms=0)
bc.start()
pid = os.fork()
if pid == 0:
    # The child drops its copies (RingBuffer.__del__ closes), collects, and exits normally:
    # atexit finalizers and interpreter shutdown run.
    del rb, pb, pr, od
    gc.collect()
    sys.exit(0)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0
emit_ring(rb_o.programs["emit"], 2)
emit_ring(rb_o.programs["emit"], 2, target=1)
emit_perf(pf1.programs["emit_perf"], 2, cpu=0)
emit_perf(pf2.programs["emit_perf"], 2, cpu=0)
emit_ordered(ord_o.programs["emit_ordered"], 2, ts=old_ts())
assert rb.poll(10) == 2, "RingBuffer"
assert pb.poll(10) >= 1 and pb.consume() >= 0 and len(pb_seen) == 2, "PerfBuffer"
assert [pr.read(timeout=10).cpu for _ in range(2)] == [0, 0], "PerfReader"
assert [od.read(timeout=10).cpu for _ in range(2)] == [0, 0], "OrderedReader"
assert wait_until(lambda: len(bp_seen) == 2), "BackpressureConsumer"
assert counter(pf1, "failed_outputs") == counter(pf2, "failed_outputs") == 0
bc.stop()
for x in (rb, pb, pr, od):
    x.close()
print("parent ok")
"""


def test_a_child_exiting_normally_leaves_the_parent_readers_alone(bpf_objects: dict[str, Path]) -> None:
    """Regression: a forked child that exits normally ran the perf readers' finalizers, which disabled the
    parent's perf events and deleted its map entries; dropping an inherited RingBuffer woke (and broke)
    the parent's through the shared eventfd. Now the child's copies release nothing shared."""
    paths = [str(bpf_objects[n]) for n in ("ringbuf", "perfbuf", "ordered")]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", CHILD_EXITS_NORMALLY, *paths], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "parent ok" in proc.stdout, proc.stderr


# --- rings overflowing in the kernel --------------------------------------------------------------

RING_READERS = ["RingBuffer", "map_ringbuf", "RingBufConsumer", "BackpressureConsumer", "OrderedReader"]


@pytest.mark.parametrize("reader", RING_READERS)
def test_a_ring_buffer_overflowing_in_the_kernel(rb_obj: BPFObject, ord_obj: BPFObject, reader: str) -> None:
    """A full BPF ring buffer fails the program's bpf_ringbuf_reserve/output (the program counts it); no
    reader is told. Every record that fit is delivered once, in order: delivered + failed == written."""
    if reader == "OrderedReader":
        emit_ordered(ord_obj, 8000, target=ORD_RB0)  # rb0 (256 KiB) holds 6553 40-byte records
        failed = counter(ord_obj, "counters")
        written = 8000
        with OrderedReader([ord_obj.maps["rb0"], ord_obj.maps["rb1"]], timestamp=0, window_ms=0) as od:
            seqs = []
            while True:
                try:
                    rec = od.read(timeout=0.5)
                except TimeoutError:
                    break
                assert not rec.lost_samples
                seqs.append(ORD_EVENT.unpack_from(rec.raw_sample)[1])
            assert od.stats().lost_samples == 0
    else:
        written = 3000
        emit_ring(rb_obj.programs["emit"], written)  # rb (64 KiB) holds 2047 32-byte records
        failed = counter(rb_obj, "failed_reserves")
        seqs = drain_ring(reader, rb_obj, written - failed)
    assert failed > 0
    assert seqs == list(range(written - failed))


def drain_ring(reader: str, obj: BPFObject, expected: int) -> list[int]:
    """Read the (already filled) ring ``rb`` with ``reader``: the sequence numbers read."""
    m = obj.maps["rb"]
    if reader == "RingBuffer":
        out: list[int] = []
        with RingBuffer(m, lambda d: out.append(rb_event(d)[0])) as rb:
            while rb.poll(0.5):
                pass
        return out
    if reader == "map_ringbuf":
        with map_ringbuf(m) as layout:
            return [rb_event(r)[0] for r in read_ringbuf_events(layout)]
    got: list[int] = []
    kind = RingBufConsumer if reader == "RingBufConsumer" else BackpressureConsumer
    with kind(m, lambda d: got.append(rb_event(d)[0])) as c:
        assert wait_until(lambda: len(got) >= expected)
    s = c.stats()
    assert s.events_read == len(got) and s.events_processed == len(got)
    if kind is BackpressureConsumer:
        assert s.events_dropped == 0 and accounted(s)  # the queue (10000) holds the whole ring
    return got


PERF_READERS = ["PerfBuffer", "PerfReader", "OrderedReader"]


@pytest.mark.parametrize("reader", PERF_READERS)
def test_a_perf_ring_overflowing_in_the_kernel(perf_obj: BPFObject, ord_obj: BPFObject, reader: str) -> None:
    """A full perf ring fails bpf_perf_event_output; the kernel counts the losses and writes one
    lost-samples record before the next sample it manages to store on that CPU. Each reader reports it:
    PerfBuffer -> lost_callback(cpu, n) and lost_samples; PerfReader and OrderedReader -> a Record with
    lost_samples=n (OrderedReader: also stats().lost_samples). samples + lost == written."""
    written = 1000
    samples: list[int] = []
    lost: list[tuple[int, int]] = []
    if reader == "PerfBuffer":
        prog = perf_obj.programs["emit_perf"]
        with PerfBuffer(perf_obj.maps["events"], lambda _c, d: samples.append(struct.unpack_from("<Q", d)[0]),
                        lost_callback=lambda cpu, n: lost.append((cpu, n)), page_cnt=1) as pb:
            emit_perf(prog, written, cpu=0)
            while pb.poll(0.3):
                pass
            emit_perf(prog, 1, first_seq=written, cpu=0)  # room again: the lost record comes before it
            while pb.poll(0.3):
                pass
            assert pb.lost_samples == sum(n for _, n in lost)
        failed = counter(perf_obj, "failed_outputs")
    else:
        obj = perf_obj if reader == "PerfReader" else ord_obj
        rd: Any = (PerfReader(obj.maps["events"], per_cpu_buffer=4096) if reader == "PerfReader"
                   else OrderedReader(obj.maps["events"], timestamp=0, window_ms=0, page_cnt=1))

        def emit(count: int, first: int) -> None:
            if reader == "PerfReader":
                emit_perf(obj.programs["emit_perf"], count, first_seq=first, cpu=0)
            else:
                emit_ordered(obj, count, target=ORD_PERF, seq=first)

        def read_all() -> None:
            while True:
                try:
                    rec = rd.read(timeout=0.3)
                except TimeoutError:
                    return
                if rec.lost_samples:
                    lost.append((rec.cpu, rec.lost_samples))
                    assert rec.raw_sample == b""
                else:
                    samples.append(struct.unpack_from("<Q", rec.raw_sample, 8 if reader == "OrderedReader" else 0)[0])

        with rd:
            emit(written, 0)
            read_all()
            emit(1, written)
            read_all()
            if reader == "OrderedReader":
                assert rd.stats().lost_samples == sum(n for _, n in lost)
        if reader == "PerfReader":
            failed = counter(perf_obj, "failed_outputs")
        else:
            failed = counter(ord_obj, "counters")
    total_lost = sum(n for _, n in lost)
    assert failed > 0 and total_lost == failed
    assert all(cpu == 0 for cpu, _ in lost)
    assert samples == [*range(written - failed), written]  # what fit, then the sample after the losses
