"""Lifetimes: interpreter exit with threads still reading, fork() with locks held, Ctrl-C during stop(),
several threads on one reader, and a BPFObject dropped without close() (docs/reliability.md, "Faults").

Exit and fork run in a child process, so that a crash fails the test instead of killing pytest.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import os
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from progs import (
    ORD_EVENT,
    ORD_PERF,
    ORD_RB0,
    accounted,
    emit_ordered,
    emit_perf,
    emit_ring,
    old_ts,
    rb_event,
    wait_until,
)

from pylibbpf import (
    BackpressureConsumer,
    BPFObject,
    ClosedError,
    OrderedReader,
    PerfBuffer,
    PerfReader,
    RingBufConsumer,
    RingBuffer,
    map_ringbuf,
    process_events,
    read_ringbuf_events,
)

pytestmark = pytest.mark.usefixtures("bpf_privileged", "no_consumer_thread_left")

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 20.0  # seconds: generous, the machine may be busy


# --- interpreter exit -----------------------------------------------------------------------------

EXIT_SCRIPT = r"""
import sys, threading, time
sys.path.insert(0, "tests")
from progs import ORD_RB0, emit_ordered, emit_perf, emit_ring, old_ts
from pylibbpf import *

ringbuf, perfbuf, ordered, raise_at_end = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
objs = {}
for name, path in (("rb", ringbuf), ("pb", perfbuf), ("pr", perfbuf), ("op", ordered), ("or", ordered)):
    objs[name] = BPFObject.open(path).load()

def forever(fn):
    def run():
        while True:
            try:
                fn()
            except Exception:
                pass
    threading.Thread(target=run, daemon=True).start()

# Producers: every ring keeps filling until the very end.
forever(lambda: emit_ring(objs["rb"].programs["emit"], 64))
forever(lambda: emit_ring(objs["rb"].programs["emit"], 64, target=1))
forever(lambda: emit_perf(objs["pb"].programs["emit_perf"], 16, cpu=0))
forever(lambda: emit_perf(objs["pr"].programs["emit_perf"], 16, cpu=0))
forever(lambda: emit_ordered(objs["op"].programs["emit_ordered"], 16, ts=old_ts()))
forever(lambda: emit_ordered(objs["or"].programs["emit_ordered"], 16, ts=old_ts(), target=ORD_RB0))

# Consumers left running, and readers used from daemon threads, none stopped or closed.
BackpressureConsumer(objs["rb"].maps["rb"], lambda d: None).start()
RingBufConsumer(objs["rb"].maps["rb2"], lambda d: None).start()
layout = map_ringbuf(objs["or"].maps["rb1"])
forever(lambda: read_ringbuf_events(layout))
pb = PerfBuffer(objs["pb"].maps["events"], lambda c, d: None)
forever(lambda: pb.poll(0.05))
pr = PerfReader(objs["pr"].maps["events"], per_cpu_buffer=65536)
forever(lambda: pr.read(timeout=0.05))
op = OrderedReader(objs["op"].maps["events"], timestamp=0, window_ms=0)
forever(lambda: op.read(timeout=0.05))
orb = OrderedReader([objs["or"].maps["rb0"]], timestamp=0, window_ms=0)
forever(lambda: orb.read_batch(timeout=0.05))
time.sleep(0.3)
print("end", flush=True)
if raise_at_end:
    raise RuntimeError("the script ends with an exception")
"""


def test_exit_with_consumers_and_reading_daemon_threads_never_crashes(bpf_objects: dict[str, Path]) -> None:
    """Regression: the rings were unmapped (atexit finalizers) while the native reader thread or a daemon
    thread inside a C read still used them: SIGSEGV in about half of the runs for each kind. Now exit stops
    the consumers and closes the readers first, and frees nothing afterwards. 12 runs under load (producers
    running), half of them ending with an uncaught exception: every one exits with its own status."""
    paths = [str(bpf_objects[n]) for n in ("ringbuf", "perfbuf", "ordered")]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    runs = []
    for batch in range(3):
        procs = [subprocess.Popen([sys.executable, "-c", EXIT_SCRIPT, *paths, str(i % 2)], cwd=ROOT, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for i in range(batch * 4, batch * 4 + 4)]
        for i, proc in enumerate(procs):
            out, err = proc.communicate(timeout=120)
            runs.append((batch * 4 + i, proc.returncode, out, err))
    for i, code, out, err in runs:
        assert "end" in out, (i, code, err[-2000:])
        assert code == i % 2, f"run {i} exited with {code} (negative: killed by a signal): {err[-2000:]}"


# --- fork -----------------------------------------------------------------------------------------

CHILD_TIMEOUT = 120.0  # seconds: a deadlock, never a slow machine (the body takes well under a second idle)


def run_in_child(body: Callable[[], None]) -> None:
    """Run ``body`` in a forked child with a watchdog against deadlocks; fail with its report.

    A child still running after CHILD_TIMEOUT writes every thread's traceback into the report (so a
    failure says where it was stuck) and exits; SIGALRM a little later catches a child too stuck for that.
    """
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(rfd)
            faulthandler.dump_traceback_later(CHILD_TIMEOUT, exit=True, file=wfd)
            signal.alarm(int(CHILD_TIMEOUT) + 30)
            body()
            os.write(wfd, b"ok")
            code = 0
        except BaseException as e:
            os.write(wfd, f"child failed: {type(e).__name__}: {e}".encode())
        finally:
            os._exit(code)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as r:
        report = r.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), f"child killed by signal {os.WTERMSIG(status)} (a crash, or the watchdog): {report}"
    assert os.waitstatus_to_exitcode(status) == 0 and report == "ok", report


def raises_closed(fn: Callable[[], Any], what: str) -> None:
    try:
        fn()
    except ClosedError as e:
        assert "inherited through fork()" in str(e), (what, str(e))
        return
    raise AssertionError(f"{what}: no ClosedError in the child")


@contextlib.contextmanager
def held_in_another_thread(*locks: Any) -> Iterator[None]:
    """Hold ``locks`` in another thread for the duration (so a fork() inherits them held)."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        for lock in locks:
            lock.acquire()
        taken.set()
        release.wait()
        for lock in locks:
            lock.release()

    holder = threading.Thread(target=hold)
    holder.start()
    assert taken.wait(TIMEOUT)
    try:
        yield
    finally:
        release.set()
        holder.join()


def test_every_inherited_object_works_or_raises_closed_error_in_a_child(bpf_objects: dict[str, Path]) -> None:
    """Regression: in a child, OrderedReader.stats() read the parent's perf rings (not mapped in a child)
    and crashed; BackpressureConsumer.stats()/healthy(), OrderedReader.stats() and BPFObject.close() waited
    forever on a lock another thread held at the fork; a PerfBuffer.buffer() view crashed when read. Now:
    ClosedError at once, or it works (BPFObject, Map, RingBufConsumer.stats(), the view reads zeros)."""
    rb_o = BPFObject.open(bpf_objects["ringbuf"]).load()
    pf_o = BPFObject.open(bpf_objects["perfbuf"]).load()
    pf2_o = BPFObject.open(bpf_objects["perfbuf"]).load()
    ord_o = BPFObject.open(bpf_objects["ordered"]).load()
    bc = BackpressureConsumer(rb_o.maps["rb"], lambda _d: None)
    rc = RingBufConsumer(rb_o.maps["rb2"], lambda _d: None)
    rb = RingBuffer(ord_o.maps["rb1"], lambda _d: None)
    pb = PerfBuffer(pf_o.maps["events"], lambda _c, _d: None)
    pr = PerfReader(pf2_o.maps["events"])
    od = OrderedReader(ord_o.maps["events"], timestamp=0, window_ms=0)
    odr = OrderedReader([ord_o.maps["rb0"]], timestamp=0, window_ms=0)
    layout = map_ringbuf(rb_o.maps["rb"])
    view = memoryview(b"")
    try:
        bc.start()
        rc.start()
        emit_perf(pf_o.programs["emit_perf"], 3, cpu=0)
        view = pb.buffer(0)
        assert any(view[:64])  # the live control page

        def child() -> None:
            assert not bc.running and not rc.running
            raises_closed(bc.stats, "BackpressureConsumer.stats")
            raises_closed(bc.healthy, "BackpressureConsumer.healthy")
            raises_closed(bc.start, "BackpressureConsumer.start")
            bc.stop()
            rc.stop()
            assert rc.stats().events_read == 0
            raises_closed(rc.start, "RingBufConsumer.start")
            for reader in (od, odr):
                raises_closed(reader.stats, "OrderedReader.stats")
                raises_closed(lambda r=reader: r.read(timeout=0), "OrderedReader.read")
                raises_closed(lambda r=reader: r.read_batch(timeout=0), "OrderedReader.read_batch")
            assert bytes(view[:64]) == bytes(64)  # zeros, not a crash
            raises_closed(lambda: pb.buffer(0), "PerfBuffer.buffer")
            raises_closed(lambda: pb.poll(0), "PerfBuffer.poll")
            raises_closed(pb.read_batch, "PerfBuffer.read_batch")
            raises_closed(lambda: rb.poll(0), "RingBuffer.poll")
            raises_closed(rb.consume, "RingBuffer.consume")
            raises_closed(lambda: rb.add(ord_o.maps["rb0"], lambda _d: None), "RingBuffer.add")
            raises_closed(lambda: pr.read(timeout=0), "PerfReader.read")
            raises_closed(pr.pause, "PerfReader.pause")
            raises_closed(lambda: read_ringbuf_events(layout), "read_ringbuf_events")
            raises_closed(layout.available, "RingBufLayout.available")
            emit_ring(rb_o.programs["emit"], 1)  # the object and its maps work
            assert rb_o.maps["failed_reserves"].lookup(0) is not None
            for x in (rb, pb, pr, od, odr, layout):
                x.close()
            for o in (rb_o, pf_o, pf2_o, ord_o):
                o.close()

        with held_in_another_thread(bc._cond, rc._cond, od._merge_lock, odr._merge_lock, pr._pause_lock,
                                    rb._lock, layout._lock, rb_o._lock):
            run_in_child(child)
        # The parent's are untouched.
        assert bc.running and rc.running and bc.stats().events_read >= 1
        assert od.stats().emitted == 0 and any(view[:64])
    finally:
        bc.stop()
        rc.stop()
        view.release()
        for x in (rb, pb, pr, od, odr, layout):
            x.close()
        for o in (rb_o, pf_o, pf2_o, ord_o):
            o.close()


# --- Ctrl-C during stop() -------------------------------------------------------------------------

def consumer_threads() -> int:
    return sum(t.name.startswith("pylibbpf-") for t in threading.enumerate())


def test_ctrl_c_during_stop_leaves_one_consistent_run(bpf_objects: dict[str, Path]) -> None:
    """Regression: SIGINT while stop() waited for the processor thread left it running behind a consumer
    that said ``running`` False (CPython 3.11's interrupted Thread.join marks a live thread stopped);
    start() then made a second thread on the same run and the counters went negative. Now: a stop() that is
    interrupted leaves the run stopping (``running`` until its thread ends), start() waits for it, there is
    never more than one thread, and the invariant holds."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    calls: list[int] = []
    most = [0]
    watching = threading.Event()

    def watch() -> None:  # the most consumer threads ever seen at once
        while not watching.is_set():
            most[0] = max(most[0], consumer_threads())
            watching.wait(0.002)

    def callback(data: bytes) -> None:
        calls.append(rb_event(data)[0])
        threading.Event().wait(0.01)  # a slow callback: stop() waits for the queue to drain

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with BPFObject.open(bpf_objects["ringbuf"]) as o:
            o.load()
            c = BackpressureConsumer(o.maps["rb"], callback)
            c.start()
            emit_ring(o.programs["emit"], 200)
            assert wait_until(lambda: len(calls) > 0)
            main_tid = threading.get_native_id()
            stopping = threading.Event()

            def interrupt() -> None:
                stopping.wait()
                # Once the main thread sleeps inside stop() (the wait for the run to end).
                wait_until(lambda: _sleeping(main_tid), timeout=TIMEOUT)
                os.kill(os.getpid(), signal.SIGINT)

            kicker = threading.Thread(target=interrupt)
            kicker.start()
            with pytest.raises(KeyboardInterrupt):
                stopping.set()
                c.stop(drain_timeout=TIMEOUT)
            kicker.join()
            s = c.stats()
            assert accounted(s) and min(s) >= 0, s
            if not c.running:
                n = len(calls)
                threading.Event().wait(0.2)
                assert len(calls) == n, "the callback runs on after running turned False"
            c.start()  # waits for the interrupted run to end: one thread at a time
            emit_ring(o.programs["emit"], 5, first_seq=200)
            assert wait_until(lambda: 204 in calls, timeout=TIMEOUT)
            c.stop()
            s = c.stats()
            assert accounted(s) and min(s) >= 0 and s.events_processed <= s.events_read, s
            assert not c.running
    finally:
        signal.signal(signal.SIGINT, previous)
        watching.set()
        watcher.join()
    assert most[0] == 1, f"{most[0]} consumer threads at once"


def _sleeping(tid: int) -> bool:
    """Thread ``tid`` of this process is blocked in the kernel (a futex or epoll wait), not running."""
    with open(f"/proc/self/task/{tid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "S"


@pytest.mark.parametrize("kind", [BackpressureConsumer, RingBufConsumer])
def test_a_stop_interrupted_between_its_steps_is_finished_by_the_next(bpf_objects: dict[str, Path],
                                                                       kind: type[Any],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """KeyboardInterrupt after the stop was requested but before the thread(s) were signalled (queue not
    closed, native reader not stopped): the run still ends by itself, and a second stop() returns; before,
    the second stop() waited forever for a processor that never saw the closed queue."""
    got: list[int] = []
    with BPFObject.open(bpf_objects["ringbuf"]) as o:
        o.load()
        c = kind(o.maps["rb"], lambda d: got.append(rb_event(d)[0]))
        c.start()
        emit_ring(o.programs["emit"], 50)
        assert wait_until(lambda: len(got) == 50)
        real = type(c)._signal_stop

        def interrupted(self: Any) -> None:
            monkeypatch.setattr(type(c), "_signal_stop", real)  # once
            raise KeyboardInterrupt

        monkeypatch.setattr(type(c), "_signal_stop", interrupted)
        with pytest.raises(KeyboardInterrupt):
            c.stop()
        finisher = threading.Thread(target=c.stop, daemon=True)
        finisher.start()
        finisher.join(TIMEOUT)
        assert not finisher.is_alive(), "the second stop() never returned"
        assert not c.running
        s = c.stats()
        assert s.events_read == s.events_processed == 50 and got == list(range(50))
        if kind is BackpressureConsumer:
            assert accounted(s)
        c.start()  # a new run works
        emit_ring(o.programs["emit"], 3, first_seq=50)
        assert wait_until(lambda: len(got) == 53)
        c.stop()


# --- several threads on one reader ----------------------------------------------------------------

N = 600


def two_threads(read: Callable[[], list[int]], done: Callable[[], bool]) -> list[int]:
    """Run ``read`` in two threads until ``done()`` (or the deadline); every sequence number they got."""
    seen: list[int] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            while not done():
                got = read()
                with lock:
                    seen.extend(got)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT * 2)
    assert not errors, errors
    return seen


def slow(x: int) -> int:
    """Give the other thread a chance to run in the middle of a delivery."""
    threading.Event().wait(0)
    return x


READERS = ["RingBuffer.poll", "RingBuffer.consume", "RingBuffer.read_batch", "PerfBuffer.poll",
           "PerfBuffer.read_batch", "PerfReader.read", "OrderedReader.read (perf)", "OrderedReader.read_batch (perf)",
           "OrderedReader.read (ring buffers)", "read_ringbuf_events (one layout)",
           "read_ringbuf_events (two layouts)", "process_events"]


@pytest.mark.parametrize("name", READERS)
def test_two_threads_on_one_reader_get_each_record_once(bpf_objects: dict[str, Path], name: str) -> None:
    """Regression: two threads polling one RingBuffer or PerfBuffer both delivered the batch one of them
    had drained (every record twice); two process_events() on one map read the same records. Now they take
    turns: N sequence-numbered records, each seen exactly once."""
    seen: list[int] = []
    total = [0]

    def done() -> bool:
        return total[0] >= N

    def count(got: list[int]) -> list[int]:
        total[0] += len(got)  # approximate across threads; the final check is exact
        return got

    with contextlib.ExitStack() as stack:
        rb_o = stack.enter_context(BPFObject.open(bpf_objects["ringbuf"]))
        pf_o = stack.enter_context(BPFObject.open(bpf_objects["perfbuf"]))
        ord_o = stack.enter_context(BPFObject.open(bpf_objects["ordered"]))
        for o in (rb_o, pf_o, ord_o):
            o.load()
        local = threading.local()

        def sink() -> list[int]:
            if not hasattr(local, "got"):
                local.got = []
            return local.got  # type: ignore[no-any-return]

        def take() -> list[int]:
            got, local.got = sink(), []
            return count(got)

        m = rb_o.maps["rb"]
        read: Callable[[], list[int]]
        if name.startswith("RingBuffer"):
            rb = stack.enter_context(RingBuffer(m, lambda d: sink().append(slow(rb_event(d)[0]))))
            emit_ring(rb_o.programs["emit"], N)
            if name == "RingBuffer.poll":
                read = lambda: (rb.poll(0.05), take())[1]  # noqa: E731
            elif name == "RingBuffer.consume":
                read = lambda: (rb.consume(), take())[1]  # noqa: E731
            else:
                read = lambda: count([slow(rb_event(d)[0]) for d in rb.read_batch(0.05)])  # noqa: E731
        elif name.startswith("PerfBuffer"):
            pb = stack.enter_context(PerfBuffer(pf_o.maps["events"],
                                                lambda _c, d: sink().append(slow(struct.unpack_from("<Q", d)[0])),
                                                page_cnt=64))
            emit_perf(pf_o.programs["emit_perf"], N, cpu=0)
            if name == "PerfBuffer.poll":
                read = lambda: (pb.poll(0.05), take())[1]  # noqa: E731
            else:
                read = lambda: count([slow(struct.unpack_from("<Q", d)[0]) for d in pb.read_batch(0.05)])  # noqa: E731
        elif name == "PerfReader.read":
            pr = stack.enter_context(PerfReader(pf_o.maps["events"], per_cpu_buffer=1 << 16))
            emit_perf(pf_o.programs["emit_perf"], N, cpu=0)
            read = lambda: count(_read_or_nothing(pr, 0))  # noqa: E731
        elif name.startswith("OrderedReader"):
            perf = "perf" in name
            od = stack.enter_context(OrderedReader(ord_o.maps["events"] if perf else [ord_o.maps["rb0"]],
                                                   timestamp=0, window_ms=0))
            emit_ordered(ord_o.programs["emit_ordered"], N, ts=old_ts(), target=ORD_PERF if perf else ORD_RB0)
            if "read_batch" in name:
                read = lambda: count([slow(ORD_EVENT.unpack_from(d)[1]) for d in od.read_batch(0.05)])  # noqa: E731
            else:
                read = lambda: count(_read_or_nothing(od, 8))  # noqa: E731
        elif name.startswith("read_ringbuf_events"):
            layouts = [stack.enter_context(map_ringbuf(m))]
            if "two" in name:
                layouts.append(stack.enter_context(map_ringbuf(m)))
            emit_ring(rb_o.programs["emit"], N)

            def read() -> list[int]:
                layout = layouts[threading.get_ident() % len(layouts)]
                return count([slow(rb_event(r)[0]) for r in read_ringbuf_events(layout, max_events=7)])
        else:
            emit_ring(rb_o.programs["emit"], N)
            read = lambda: (process_events(m, lambda r: sink().append(slow(rb_event(r)[0])),  # noqa: E731
                                           max_events=5, timeout=0.05), take())[1]
        seen = two_threads(read, done)
    assert sorted(seen) == list(range(N)), (len(seen), len(set(seen)))


def _read_or_nothing(reader: Any, offset: int) -> list[int]:
    try:
        rec = reader.read(timeout=0.05)
    except TimeoutError:
        return []
    return [slow(struct.unpack_from("<Q", rec.raw_sample, offset)[0])]


def test_a_callback_polling_its_own_reader_is_refused(bpf_objects: dict[str, Path]) -> None:
    """Re-entering poll() from the reader's own callback raises RuntimeError there (no deadlock, no
    record delivered twice); the exception reaches the outer poll()'s caller, the record was delivered."""
    holder: list[RingBuffer] = []
    seen: list[int] = []

    def callback(d: memoryview) -> None:
        seen.append(rb_event(d)[0])
        if len(seen) == 1:
            holder[0].poll(0)

    with BPFObject.open(bpf_objects["ringbuf"]) as o:
        o.load()
        with RingBuffer(o.maps["rb"], callback) as rb:
            holder.append(rb)
            emit_ring(o.programs["emit"], 2)
            with pytest.raises(RuntimeError, match="RingBuffer: called from its own callback"):
                rb.poll(TIMEOUT)
            assert rb.poll(0) == 1
    assert seen == [0, 1]


# --- a BPFObject dropped without close() ----------------------------------------------------------

def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_dropped_bpf_object_releases_its_fds(bpf_objects: dict[str, Path]) -> None:
    """Regression: a loaded BPFObject dropped without close() kept its fds (5 for ringbuf.bpf.o) until exit.
    Now its finalizer closes it once nothing refers to it; a program or map still referenced keeps it
    alive and working."""
    gc.collect()
    before = open_fds()
    for _ in range(20):
        BPFObject.open(bpf_objects["ringbuf"]).load()
    gc.collect()
    assert open_fds() == before
    counters = BPFObject.open(bpf_objects["ringbuf"]).load().maps["failed_reserves"]
    gc.collect()
    assert counters.raw.lookup(0) == bytes(8)  # only the map refers to its object: still open
    del counters
    gc.collect()
    assert open_fds() == before
