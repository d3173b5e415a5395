"""Drivers for the test BPF programs in tests/bpf (struct layouts from tests/bpf/test_events.h), and the
polling wait the threaded tests share."""

from __future__ import annotations

import io
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

from pylibbpf import BPFObject, Program

EMIT_ARGS = struct.Struct("<IIQQII")   # struct emit_args
RB_EVENT = struct.Struct("<QQII")      # struct rb_event
PERF_SAMPLE = struct.Struct("<QQII")   # struct perf_sample (+ extra bytes)
RAW_TP_ARGS = struct.Struct("<4Q")     # args[0..3] of struct bpf_raw_tracepoint_args
ORDERED_ARGS = struct.Struct("<7Q")    # ordered.bpf.c emit_ordered: count, ts, ts_step, seq, tag, extra, target
ORD_EVENT = struct.Struct("<QQIIQ")    # struct ord_event: ts, seq, cpu, tag, gseq
ORD_PERF, ORD_RB0, ORD_RB1 = 0, 1, 2   # emit_ordered's targets: the perf event array, rb0, rb1


def object_fixture(name: str) -> Any:
    """A fixture named ``obj`` for a test module (``obj = object_fixture("ordered")``):
    tests/bpf/build/<name>.bpf.o opened and loaded, closed after the test."""
    def obj(bpf_objects: dict[str, Path]) -> Iterator[BPFObject]:
        with BPFObject.open(bpf_objects[name]) as o:
            o.load()
            yield o
    return pytest.fixture(name="obj")(obj)


def program_fixture(name: str) -> Any:
    """A fixture named ``prog``: the program ``name`` of the module's ``obj``."""
    def prog(obj: BPFObject) -> Program:
        return obj.programs[name]
    return pytest.fixture(name="prog")(prog)


def emit_ring(prog: Program, count: int, *, first_seq: int = 0, value: int = 0, flags: int = 0,
              discard_every: int = 0, target: int = 0) -> None:
    """Run ringbuf.bpf.c:emit: `count` rb_event records into rb (target 0) or rb2 (target 1)."""
    prog.test_run(ctx=EMIT_ARGS.pack(count, flags, first_seq, value, discard_every, target))


def emit_perf(prog: Program, count: int, *, cpu: int, first_seq: int = 0, value: int = 0,
              extra: int = 0) -> None:
    """Run perfbuf.bpf.c:emit_perf on `cpu`: `count` samples of 24 + extra bytes."""
    prog.test_run(ctx=RAW_TP_ARGS.pack(count, first_seq, value, extra), cpu=cpu)


def emit_ordered(prog: Program, count: int, *, cpu: int = 0, ts: int = 0, step: int = 1, seq: int = 0,
                 tag: int = 0, extra: int = 0, target: int = ORD_PERF) -> None:
    """Run ordered.bpf.c:emit_ordered on `cpu`: `count` ord_events with timestamps ts, ts + step, ... (a
    negative step counts down) and seq, seq + 1, ..., into the perf array, rb0 or rb1 (target)."""
    prog.test_run(ctx=ORDERED_ARGS.pack(count, ts, step & (2**64 - 1), seq, tag, extra, target), cpu=cpu)


def old_ts() -> int:
    """CLOCK_MONOTONIC one second ago: past every idle ring's frontier, so an OrderedReader delivers such a
    record at once."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) - 1_000_000_000


def rb_event(data: bytes | memoryview) -> tuple[int, int, int]:
    """(seq, value, ring) of an rb_event."""
    seq, value, ring, _ = RB_EVENT.unpack_from(data)
    return seq, value, ring


def counter(obj: BPFObject, map_name: str, key: int = 0) -> int:
    """The u64 at `key` of an array map."""
    raw = obj.maps[map_name].raw.lookup(key)
    assert isinstance(raw, bytes)
    return int.from_bytes(raw, "little")


def wait_until(predicate: Callable[[], bool], timeout: float = 60.0, interval: float = 0.002) -> bool:
    """Poll `predicate` until it holds or `timeout` seconds pass (generous: the machine may be busy); its
    last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


# Resets SIGINT to its default action, then execs argv[1:] (same pid).
_DEFAULT_SIGINT = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                   "os.execv(sys.argv[1], sys.argv[1:])")


def with_default_sigint(argv: list[str]) -> list[str]:
    """``argv`` to run so that the command starts with SIGINT at its default action, as from a terminal.

    A process inherits an ignored SIGINT: the test suite started as a background
    job of a non-interactive shell (``make test &`` in a script) ignores it, and
    Python then installs no KeyboardInterrupt handler in the commands it starts,
    so a test's SIGINT ("Ctrl-C") would do nothing. The exec keeps the pid.
    """
    return [sys.executable, "-c", _DEFAULT_SIGINT, *argv]


class CtrlCAfterLine(io.StringIO):
    """A stderr on which Ctrl-C arrives once, right after a line starting with ``prefix`` was flushed.

    The racy moment of a command: between the line that says it started and
    the loop that waits for the end (a test's SIGINT cannot aim at it).
    """

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix
        self.interrupted = False

    def flush(self) -> None:
        super().flush()
        if not self.interrupted and any(line.startswith(self.prefix) for line in self.getvalue().splitlines()):
            self.interrupted = True
            raise KeyboardInterrupt


def ctrl_c_after_line(command: Callable[[Any], int], argv: list[str], prefix: str, monkeypatch: Any) -> str:
    """Run a ``pylibbpf`` command function (``cmd_runqlat``...) on ``argv`` in this process, with Ctrl-C
    arriving right after its ``prefix`` line on stderr; returns its stderr. Fails when the KeyboardInterrupt
    escaped the command (it printed nothing) or its status is not 0."""
    from pylibbpf import cli

    err = CtrlCAfterLine(prefix)
    monkeypatch.setattr(sys, "stderr", err)
    try:
        code = command(cli.build_parser().parse_args(argv))
    except KeyboardInterrupt:
        raise AssertionError(f"Ctrl-C right after the {prefix!r} line escaped {argv[0]}: nothing printed") from None
    assert err.interrupted and code == 0
    return err.getvalue()


def blocked_in_epoll(tid: int) -> bool:
    """Thread ``tid`` of this process sleeps in epoll_wait (the kernel's wchan), where every reader blocks.

    A reader that spun (epoll_wait with a zero timeout, again and again) would never be seen here."""
    with open(f"/proc/self/task/{tid}/wchan") as f:
        return f.read() == "do_epoll_wait"


def threads_in_epoll() -> set[int]:
    """The threads of this process asleep in epoll_wait now (native ones too: a consumer's C reader)."""
    asleep = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/wchan") as f:
                if f.read() == "do_epoll_wait":
                    asleep.add(int(tid))
        except FileNotFoundError:  # the thread ended meanwhile
            pass
    return asleep


def started_and_blocked(start: Callable[[], object]) -> None:
    """``start()`` (a consumer's), returned once a thread it started sleeps in epoll_wait."""
    before = threads_in_epoll()
    start()
    assert wait_until(lambda: bool(threads_in_epoll() - before)), "no new thread went to sleep in epoll_wait"


def call_blocked(call: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    """``call()`` in a thread, returned once that thread sleeps in epoll_wait (or has ended): the
    thread, and the list that gets its result or exception."""
    tids: list[int] = []
    result: list[object] = []

    def run() -> None:
        tids.append(threading.get_native_id())
        try:
            result.append(call())
        except BaseException as e:
            result.append(e)

    t = threading.Thread(target=run)
    t.start()
    assert wait_until(lambda: bool(tids) and (blocked_in_epoll(tids[0]) or not t.is_alive()))
    return t, result


def epoll_targets(fd: int) -> list[int] | None:
    """The fds an epoll fd of this process watches (from /proc), or None when ``fd`` is not an epoll fd."""
    try:
        if os.readlink(f"/proc/self/fd/{fd}") != "anon_inode:[eventpoll]":
            return None
        with open(f"/proc/self/fdinfo/{fd}") as f:
            return [int(line.split()[1]) for line in f if line.startswith("tfd:")]
    except OSError:
        return None


def epoll_sets() -> dict[int, list[int]]:
    """Every epoll fd of this process with the fds it watches."""
    return {fd: targets for fd in map(int, os.listdir("/proc/self/fd"))
            if (targets := epoll_targets(fd)) is not None}


def accounted(s: Any) -> bool:
    """A queueing consumer's stats account for every record read: processed, dropped, queued or failed."""
    return bool(s.events_read == s.events_processed + s.events_dropped + s.current_queue_size + s.errors)


def signal_thrice(thread_id: int, then: Callable[[], object] | None = None) -> threading.Thread:
    """A started thread that sends SIGUSR1 to ``thread_id`` three times, 50 ms apart, then runs
    ``then()`` 50 ms later: a blocked wait meets EINTR before its data comes. Join it."""
    def poke() -> None:
        for _ in range(3):
            time.sleep(0.05)
            signal.pthread_kill(thread_id, signal.SIGUSR1)
        if then is not None:
            time.sleep(0.05)
            then()

    thread = threading.Thread(target=poke)
    thread.start()
    return thread


class TracingStderr:
    """A command's stderr, read by a thread into ``lines``; ``ready`` is set at its "tracing ..." line
    (the commands print it once attached) or when stderr ends."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._collect)
        self.thread.start()

    def _collect(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            if line.startswith("tracing "):
                self.ready.set()
        self.ready.set()

