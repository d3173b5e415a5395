"""``pylibbpf trace``: print kernel events live with the bundled CO-RE programs.

::

    pylibbpf trace exec|exit|open [--json] [--duration S] [--pid P] [--comm NAME]
                                  [--sample RATE] [--max-pending N] [--ordered]
                                  [--format table|json|arrow [-o FILE|-]]   (arrow: cli/arrow_stream.py)

It loads one of the programs built from ``csrc/bpf/`` (package data in
``pylibbpf/bpf/``), sets its load-time configuration (``struct tool_config``
in ``.rodata``: the filters, the output map), attaches it and prints its
events until ``--duration`` ends, Ctrl-C, SIGTERM or a closed stdout. Each
program is opened through its typed skeleton (``pylibbpf/bpf/NAME_skel.py``,
generated from the object's BTF), whose classes the events are read as;
nothing about their layouts is restated here. A
summary (events, drops, late events, events/s) goes to stderr at the end,
and the command exits 0 on Ctrl-C and on a closed stdout pipe.
"""

from __future__ import annotations

import abc
import argparse
import dataclasses
import datetime
import errno
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO, Union

from .._batch import Batch, OrderedBatch
from ..bpf import exec_skel, exit_skel, open_skel
from ..consumers import BackpressureConsumer, BackpressureStats, SamplingConsumer
from ..errors import BPFError
from ..events import EventDef
from ..link import Link
from ..maps import Map
from ..object import BPFObject
from ..ordered import OrderedReader, OrderedStats
from ..ringbuf import RingBuffer
from ..skel import Codec, Skeleton
from ._common import (
    BUNDLED_DIR,
    PRIVILEGES,
    CommandError,
    StatusLine,
    open_skeleton,
    signals_held,
)
from ._common import Terminate as _Terminate
from ._common import attach_all as _attach_all
from ._common import check_btf as _check_btf
from ._common import detach as _detach
from ._common import load_object as _load
from ._common import output_error as _output_error
from ._common import pid_number as _pid_number
from ._common import pipe_broken as _pipe_broken
from ._common import point_at_devnull as _point_at_devnull
from ._common import positive_float as _positive_float
from ._common import positive_int as _positive_int
from .arrow_stream import ArrowWriter, open_output

#: Where tracefs is looked for (libbpf reads tracepoint ids from either).
TRACEFS_DIRS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))

#: Seconds between two looks at the clock, the status line and stdout.
_TICK = 0.2
#: The kernel keeps TASK_COMM_LEN - 1 = 15 bytes of a command name.
_COMM_MAX = 15

CallbackType = Callable[[Any], Any]
# Where the events go: the table/JSON printer or the Arrow stream writer (same calls).
Output = Union["EventPrinter", ArrowWriter]


# --- the tools ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Column:
    """One column of the live table: its header, width (0: the last, unpadded) and cell text."""

    header: str
    width: int
    cell: Callable[[Any], str]


@dataclasses.dataclass(frozen=True)
class Tool:
    """A bundled program: its object, its skeleton and event codec, the BTF struct of its events and its table."""

    name: str
    help: str
    columns: tuple[Column, ...]
    skeleton: type[Skeleton]
    codec: Codec[Any]

    @property
    def object_path(self) -> Path:
        return BUNDLED_DIR / f"{self.name}.bpf.o"

    @property
    def event(self) -> str:
        return f"{self.name}_event"


def _errno_name(value: int) -> str:
    return errno.errorcode.get(value, str(value))


def _exit_status(rec: Any) -> str:
    if rec.signal:
        try:
            return signal.Signals(rec.signal).name
        except ValueError:
            return f"signal {rec.signal}"
    return str(rec.exit_code)


# open(2) flags by name, with this platform's values (from the os module, not restated here).
_OPEN_FLAGS = [(name, getattr(os, name)) for name in (
    "O_CREAT", "O_EXCL", "O_NOCTTY", "O_TRUNC", "O_APPEND", "O_NONBLOCK", "O_DSYNC", "O_SYNC",
    "O_DIRECT", "O_LARGEFILE", "O_DIRECTORY", "O_NOFOLLOW", "O_NOATIME", "O_CLOEXEC", "O_PATH",
) if getattr(os, name, 0)]


def open_flags(flags: int) -> str:
    """``O_RDONLY|O_CLOEXEC``-style text for open(2) flags."""
    access = {os.O_RDONLY: "O_RDONLY", os.O_WRONLY: "O_WRONLY", os.O_RDWR: "O_RDWR"}
    names = [access.get(flags & os.O_ACCMODE, f"access={flags & os.O_ACCMODE}")]
    rest = flags & ~os.O_ACCMODE
    tmpfile = getattr(os, "O_TMPFILE", 0)
    if tmpfile and rest & tmpfile == tmpfile:  # O_TMPFILE includes O_DIRECTORY's bit
        names.append("O_TMPFILE")
        rest &= ~tmpfile
    for name, bit in _OPEN_FLAGS:
        if rest & bit:
            names.append(name)
            rest &= ~bit
    if rest:
        names.append(hex(rest))
    return "|".join(names)


TOOLS: dict[str, Tool] = {t.name: t for t in (
    Tool("exec", "every execve(): pid, ppid, uid, comm and filename (sched:sched_process_exec)", (
        Column("PID", 7, lambda r: str(r.pid)),
        Column("PPID", 7, lambda r: str(r.ppid)),
        Column("UID", 6, lambda r: str(r.uid)),
        Column("COMM", 16, lambda r: r.comm),
        Column("FILENAME", 0, lambda r: r.filename),
    ), exec_skel.ExecSkel, exec_skel.EXEC_EVENT),
    Tool("exit", "every process exit: pid, exit code or signal, lifetime (sched:sched_process_exit)", (
        Column("PID", 7, lambda r: str(r.pid)),
        Column("PPID", 7, lambda r: str(r.ppid)),
        Column("COMM", 16, lambda r: r.comm),
        Column("EXIT", 9, _exit_status),
        Column("AGE(s)", 0, lambda r: f"{r.lifetime_ns / 1e9:.3f}"),
    ), exit_skel.ExitSkel, exit_skel.EXIT_EVENT),
    Tool("open", "every openat(): pid, comm, flags, path and result (syscalls:sys_{enter,exit}_openat)", (
        Column("PID", 7, lambda r: str(r.pid)),
        Column("COMM", 16, lambda r: r.comm),
        Column("FD", 4, lambda r: str(r.ret) if r.ret >= 0 else "-1"),
        Column("ERR", 7, lambda r: _errno_name(-r.ret) if r.ret < 0 else "0"),
        Column("FLAGS", 24, lambda r: open_flags(r.flags & 0xFFFFFFFF)),
        Column("PATH", 0, lambda r: r.path),
    ), open_skel.OpenSkel, open_skel.OPEN_EVENT),
)}


# --- output ------------------------------------------------------------------------------------

class EventPrinter:
    """Reads each event as its skeleton's class and writes it as a table row or a JSON line.

    Safe to call from a consumer's thread: writes and flushes share one lock.
    When stdout's reader goes away (``| head``), ``closed`` is set and events
    are no longer written; the BrokenPipeError never leaves this class.
    """

    def __init__(self, tool: Tool, codec: Codec[Any], stream: TextIO, *, as_json: bool, status: StatusLine,
                 lock: threading.Lock) -> None:
        self._tool = tool
        self._codec = codec
        self._stream = stream
        self._json = as_json
        self._status = status
        self._lock = lock
        self._tty = stream.isatty()
        self._shares_terminal = self._tty and status.enabled
        self.count = 0
        self.closed = threading.Event()
        #: Why the output could not be written (not a closed pipe: that is ``closed`` alone).
        self.error: OSError | None = None
        # bpf_ktime_get_ns() is CLOCK_MONOTONIC, as time.monotonic_ns() on Linux.
        self._wall_offset_ns = time.time_ns() - time.monotonic_ns()

    def header(self) -> None:
        if not self._json:
            cells = ["TIME".ljust(12)] + [c.header.ljust(c.width) if c.width else c.header
                                          for c in self._tool.columns]
            self._write(" ".join(cells) + "\n")

    def __call__(self, data: Any) -> None:
        """Print one raw event (bytes or memoryview of the event struct, perf padding allowed)."""
        if self.closed.is_set():
            return
        rec = self._codec.unpack(data)
        wall = datetime.datetime.fromtimestamp((rec.ts + self._wall_offset_ns) / 1e9)
        if self._json:
            row = {"time": wall.astimezone().isoformat(timespec="microseconds"), **rec._asdict()}
            line = json.dumps(row, ensure_ascii=False)
        else:
            cells = [wall.strftime("%H:%M:%S.%f")[:12]]
            cells += [c.cell(rec).ljust(c.width) if c.width else c.cell(rec) for c in self._tool.columns]
            line = " ".join(cells)
        self.count += 1
        self._write(line + "\n")

    def _write(self, text: str) -> None:
        with self._lock:
            if self.closed.is_set():
                return
            if self._shares_terminal:
                self._status.clear()
            try:
                self._stream.write(text)
                if self._tty:
                    self._stream.flush()
            except BrokenPipeError:
                self._reader_gone()
            except OSError as e:
                self._failed(e)

    def flush(self) -> None:
        """Push buffered rows out (a pipe's reader sees them within a tick)."""
        with self._lock:
            if self.closed.is_set():
                return
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._reader_gone()
            except OSError as e:
                self._failed(e)

    def reader_gone(self) -> bool:
        """True once stdout's reader has gone (a write failed or the pipe reports an error)."""
        if not self.closed.is_set() and _pipe_broken(self._stream):
            with self._lock:
                self._reader_gone()
        return self.closed.is_set()

    def _reader_gone(self) -> None:
        self.closed.set()
        _point_at_devnull(self._stream)

    def _failed(self, e: OSError) -> None:
        """A write failed (a full disk): nothing more is written; the command reports ``error``."""
        self.error = e
        self._reader_gone()


# --- event sources -----------------------------------------------------------------------------

@dataclasses.dataclass
class SourceStats:
    """What a source knows about the events it carried."""

    received: int = 0  # events read from the kernel
    dropped: int = 0  # events lost in user space (queue full) or reported lost by the kernel
    late: int = 0  # events the ordered merge emitted out of order
    queue_size: int | None = None  # events waiting for the callback, when there is a queue
    queue_capacity: int | None = None


class EventSource(abc.ABC):
    """Where a trace's events come from: each event's bytes go to ``callback``.

    ``run(timeout)`` delivers for up to ``timeout`` seconds (or lets a
    consumer's thread do so); KeyboardInterrupt may escape it. ``close()``
    delivers what is still buffered (the programs are detached by then) and
    releases everything; it is idempotent.
    """

    #: Shown in the "tracing ..." line.
    description = ""

    @abc.abstractmethod
    def run(self, timeout: float) -> None: ...

    @abc.abstractmethod
    def stats(self) -> SourceStats: ...

    @abc.abstractmethod
    def close(self) -> None: ...


class RingBufferSource(EventSource):
    """The default: the ``events`` ring buffer, polled in this thread."""

    description = "ring buffer"

    def __init__(self, m: Map, callback: CallbackType) -> None:
        self._received = 0

        def count(data: memoryview) -> None:
            self._received += 1
            callback(data)

        self._rb = RingBuffer(m, count)

    def run(self, timeout: float) -> None:
        self._rb.poll(max(0.0, timeout))

    def stats(self) -> SourceStats:
        return SourceStats(received=self._received)

    def close(self) -> None:
        if not self._rb.closed:
            try:
                self._rb.consume()
            finally:
                self._rb.close()


class RingBatchSource(EventSource):
    """``--format arrow`` on the ring buffer: whole batches (``read_batch``) to the Arrow writer."""

    description = "ring buffer, batches"

    def __init__(self, m: Map, writer: ArrowWriter) -> None:
        self._writer = writer
        self._received = 0
        self._rb = RingBuffer(m, lambda data: None)

    def run(self, timeout: float) -> None:
        self._write(self._rb.read_batch(max(0.0, timeout)))

    def _write(self, batch: Batch) -> int:
        self._received += len(batch)
        self._writer.write_batch(batch)
        return len(batch)

    def stats(self) -> SourceStats:
        return SourceStats(received=self._received)

    def close(self) -> None:
        if not self._rb.closed:
            try:
                while self._write(self._rb.read_batch(0)):
                    pass
            finally:
                self._rb.close()


class BackpressureSource(EventSource):
    """``--max-pending N`` (and ``--sample``): a native reader keeps draining the kernel ring into a
    bounded queue; a thread of the consumer prints from it, this thread only waits."""

    description = "ring buffer, backpressure consumer"

    def __init__(self, consumer: BackpressureConsumer) -> None:
        self._consumer: BackpressureConsumer | None = consumer
        self._last = self._read_stats(consumer.stats())
        consumer.start()

    @classmethod
    def create(cls, m: Map, callback: CallbackType, max_pending: int) -> BackpressureSource:
        return cls(BackpressureConsumer(m, callback, max_pending=max_pending))

    def run(self, timeout: float) -> None:
        time.sleep(max(0.0, timeout))

    def stats(self) -> SourceStats:
        if self._consumer is not None:
            self._last = self._read_stats(self._consumer.stats())
        return self._last

    @staticmethod
    def _read_stats(stats: BackpressureStats) -> SourceStats:
        return SourceStats(received=stats.events_read, dropped=stats.events_dropped,
                           queue_size=stats.current_queue_size, queue_capacity=stats.queue_capacity)

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.stop(drain_timeout=2.0)  # what is queued is printed first
            self._last = self._read_stats(consumer.stats())


class SamplingSource(BackpressureSource):
    """``--sample RATE``: every event is read, a random RATE of them printed."""

    def __init__(self, m: Map, callback: CallbackType, rate: float, max_pending: int | None) -> None:
        self.rate = rate
        self.description = f"ring buffer, sampling {rate:.0%}"
        if max_pending is None:
            super().__init__(SamplingConsumer(m, callback, sample_rate=rate))
        else:
            super().__init__(SamplingConsumer(m, callback, sample_rate=rate, max_pending=max_pending))


class OrderedSource(EventSource):
    """``--ordered``: the ``events_perf`` perf rings merged in timestamp order across CPUs.

    Late events (below one already printed) are printed anyway and counted;
    the kernel's lost-samples notices are counted as drops.
    """

    description = "perf buffer, ordered across CPUs"

    def __init__(self, m: Map, callback: CallbackType, event: EventDef,
                 on_batch: Callable[[OrderedBatch], None] | None = None) -> None:
        self._callback = callback
        self._on_batch = on_batch  # whole batches instead of one callback per record (--format arrow)
        self._received = 0
        self._reader: OrderedReader | None = OrderedReader(m, timestamp="ts", event=event)
        self._last = SourceStats()

    def run(self, timeout: float) -> None:
        deadline = time.monotonic() + max(0.0, timeout)
        while self._reader is not None and (left := deadline - time.monotonic()) > 0:
            if not self._deliver(self._reader.read_batch(timeout=left)):
                return

    def _deliver(self, batch: OrderedBatch) -> int:
        """Print a batch of merged records (lost-samples notices are kept out of it); returns its size."""
        if self._on_batch is not None:
            self._received += len(batch)
            self._on_batch(batch)
            return len(batch)
        for data in batch:
            self._received += 1
            self._callback(data)
        return len(batch)

    def stats(self) -> SourceStats:
        if self._reader is not None:
            self._last = self._read_stats(self._reader.stats())
        return self._last

    def _read_stats(self, stats: OrderedStats) -> SourceStats:
        return SourceStats(received=self._received, dropped=stats.lost_samples, late=stats.late_events)

    def close(self) -> None:
        reader, self._reader = self._reader, None
        if reader is None:
            return
        try:
            # The programs are detached: what the merge still holds back leaves
            # once the clock has passed its window.
            wait = reader.window_ms / 1000 * 2 + 0.05
            while self._deliver(reader.read_batch(timeout=wait)):
                pass
        finally:
            reader.close()
            self._last = self._read_stats(reader.stats())


# --- trace -------------------------------------------------------------------------------------

def _mount_tracefs(where: Path) -> str | None:
    """Mount tracefs at ``where``; None on success, else why it failed."""
    try:
        proc = subprocess.run(["mount", "-t", "tracefs", "tracefs", str(where)], capture_output=True, text=True,
                              check=False)
    except OSError as e:
        return str(e)
    return None if proc.returncode == 0 else (proc.stderr.strip() or f"mount exited with {proc.returncode}")


def _tracefs_mounted() -> bool:
    """True when a tracefs ``events/`` is there; CommandError when this user may not look into tracefs."""
    for d in TRACEFS_DIRS:
        try:
            if stat.S_ISDIR(os.stat(d / "events").st_mode):
                return True
        except PermissionError as e:
            raise CommandError(f"cannot read tracefs ({e.filename}: {e.strerror}): tracing needs {PRIVILEGES}") from e
        except OSError:
            continue
    return False


def ensure_tracefs() -> None:
    """Make sure tracefs is mounted (tracepoints attach through it); mount it when it is not."""
    if _tracefs_mounted():
        return
    where = TRACEFS_DIRS[0]
    problem = _mount_tracefs(where)
    if problem is None and _tracefs_mounted():
        return
    raise CommandError(f"tracefs is not mounted and mounting it at {where} failed ({problem or 'no events/'}): "
                       f"run `mount -t tracefs tracefs {where}` as root (mounting needs CAP_SYS_ADMIN)")


def _open_bundled(tool: Tool) -> Any:
    return open_skeleton(tool.skeleton)


def configure(skel: Any, *, pid: int | None, comm: str | None, use_perf: bool) -> None:
    """Write the program's ``struct tool_config`` (``skel.rodata.cfg``) before load."""
    skel.rodata.cfg = skel.rodata.cfg._replace(
        target_tgid=pid or 0,
        exclude_tgid=os.getpid(),  # the tracer's own opens and execs are noise
        target_comm=(comm or "").encode()[:_COMM_MAX],
        use_perf=int(use_perf),
    )


def _attach(obj: BPFObject) -> list[Link]:
    ensure_tracefs()
    return _attach_all(obj)


def _kernel_drops(obj: BPFObject) -> int:
    """Events the BPF side could not write (ring buffer full), summed over CPUs."""
    try:
        values = obj.maps["dropped"].lookup(0)  # a u64 per possible CPU
    except (KeyError, BPFError):
        return 0
    return sum(values) if values else 0


def _make_source(args: argparse.Namespace, obj: BPFObject, event: EventDef, printer: Output) -> EventSource:
    """The event source the options ask for."""
    batches = printer if isinstance(printer, ArrowWriter) else None
    if args.ordered:
        return OrderedSource(obj.maps["events_perf"], printer, event, batches and batches.write_batch)
    if batches is not None and args.sample is None and args.max_pending is None:
        return RingBatchSource(obj.maps["events"], batches)
    if args.sample is not None:
        return SamplingSource(obj.maps["events"], printer, args.sample, args.max_pending)
    if args.max_pending is not None:
        return BackpressureSource.create(obj.maps["events"], printer, args.max_pending)
    return RingBufferSource(obj.maps["events"], printer)


def cmd_trace(args: argparse.Namespace) -> int:
    """``pylibbpf trace TOOL``: load, configure, attach, print until the end, summarize."""
    tool = TOOLS[args.tool]
    _check_btf()
    lock = threading.Lock()
    status = StatusLine(sys.stderr, lock)
    with _open_bundled(tool) as skel:
        obj = skel.obj
        event = obj.btf_struct(tool.event)
        configure(skel, pid=args.pid, comm=args.comm, use_perf=args.ordered)
        _load(obj, args.verbose)
        printer: Output
        if args.format == "arrow":
            printer = ArrowWriter(event, open_output(args.output), ordered=args.ordered)
        else:
            printer = EventPrinter(tool, tool.codec, sys.stdout, as_json=args.format == "json", status=status,
                                   lock=lock)
        source: EventSource | None = None
        links = _attach(obj)
        started = time.monotonic()
        try:
            source = _make_source(args, obj, event, printer)
            filters = "".join(f", {k} {v}" for k, v in (("pid", args.pid), ("comm", args.comm)) if v)
            until = f"for {args.duration:g} s" if args.duration else "Ctrl-C to stop"
            sys.stderr.write(f"tracing {tool.name} ({source.description}{filters})... {until}\n")
            sys.stderr.flush()
            printer.header()
            _trace_loop(source, printer, status, obj, args.duration, started)
        except (KeyboardInterrupt, _Terminate):
            pass
        finally:
            stopped = time.monotonic()  # events/s over the tracing, not the teardown
            _detach(links)
            try:
                if source is not None:
                    source.close()
            except (KeyboardInterrupt, _Terminate):
                pass
            if isinstance(printer, ArrowWriter):
                printer.close()   # the end-of-stream marker, on every way out
            else:
                printer.flush()
        if printer.error is not None:  # the events could not be written: that is the outcome
            raise _output_error(printer.error, args.output if args.format == "arrow" and args.output != "-"
                                else "stdout")
        elapsed = stopped - started
        stats = source.stats() if source is not None else SourceStats()
        _summary(tool, printer, stats, _kernel_drops(obj), elapsed, status, source)
    return 0


def _trace_loop(source: EventSource, printer: Output, status: StatusLine, obj: BPFObject,
                duration: float | None, started: float) -> None:
    deadline = None if duration is None else started + duration
    last_count, last_time = 0, started
    while not printer.reader_gone():
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return
        step = _TICK if deadline is None else min(_TICK, deadline - now)
        with signals_held():   # Ctrl-C ends the loop between two ticks, not inside a drain
            source.run(step)
        printer.flush()
        if status.enabled and time.monotonic() - last_time >= 0.5:
            now = time.monotonic()
            rate = (printer.count - last_count) / (now - last_time)
            last_count, last_time = printer.count, now
            s = source.stats()
            queue = f"  queue {s.queue_size}/{s.queue_capacity}" if s.queue_capacity else ""
            status.show(f"{rate:.0f} events/s{queue}  drops {s.dropped + _kernel_drops(obj)}"
                        f"{f'  late {s.late}' if s.late else ''}")


def _summary(tool: Tool, printer: Output, stats: SourceStats, kernel_drops: int, elapsed: float,
             status: StatusLine, source: EventSource | None) -> None:
    rate = printer.count / elapsed if elapsed > 0 else 0.0
    line = (f"{tool.name}: {printer.count} events, {stats.dropped + kernel_drops} drops, {stats.late} late, "
            f"{rate:.1f} events/s over {elapsed:.1f} s")
    if isinstance(source, SamplingSource):
        line += f" (sampled {source.rate:.0%} of {stats.received} events read)"
    status.final(line)


def _rate(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def add_parser(sub: Any) -> None:
    """Add ``trace`` to the command's subparsers."""
    trace = sub.add_parser("trace", help="print kernel events live", description="Print kernel events live: "
                           + "; ".join(f"{t.name}: {t.help}" for t in TOOLS.values()) + ".")
    trace.add_argument("tool", choices=sorted(TOOLS), help="what to trace")
    trace.add_argument("--json", action="store_true", help="one JSON object per event instead of a table "
                       "(as --format json)")
    trace.add_argument("--format", choices=("table", "json", "arrow"),
                       help="table (the default), json (one object per line) or arrow (an Arrow IPC stream, "
                       "one RecordBatch per drained batch; needs -o)")
    trace.add_argument("-o", "--output", metavar="FILE|-",
                       help="where --format arrow writes its stream (-: stdout, which must not be a terminal)")
    trace.add_argument("--duration", type=_positive_float, metavar="S", help="stop after S seconds")
    trace.add_argument("--pid", type=_pid_number, metavar="P", help="only process P (filtered in the kernel)")
    trace.add_argument("--comm", metavar="NAME",
                       help="only processes named NAME (its first 15 bytes, as the kernel keeps them)")
    trace.add_argument("--sample", type=_rate, metavar="RATE",
                       help="print a random fraction RATE (0 < RATE <= 1) of the events")
    trace.add_argument("--max-pending", type=_positive_int, metavar="N",
                       help="read in a thread of its own, queue at most N events for printing, drop the rest")
    trace.add_argument("--ordered", action="store_true",
                       help="per-CPU perf buffers merged in timestamp order (late events are counted); "
                       "not with --sample or --max-pending")
    trace.add_argument("-v", "--verbose", action="store_true", help="show libbpf's messages and verifier logs")
    trace.set_defaults(func=cmd_trace, check_args=check_args)


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The option combinations argparse cannot check; ``parser.error`` (exit 2) names the conflict."""
    if args.ordered and (args.sample is not None or args.max_pending is not None):
        parser.error("--ordered reads perf buffers: it does not combine with --sample or --max-pending")
    if args.json and args.format not in (None, "json"):
        parser.error(f"--json and --format {args.format} contradict each other")
    args.format = args.format or ("json" if args.json else "table")
    if args.format == "arrow" and args.output is None:
        parser.error("--format arrow writes binary data: give -o FILE, or -o - to write it to stdout")
    if args.format != "arrow" and args.output is not None:
        parser.error("-o/--output is for --format arrow (the table and JSON go to stdout)")
