"""``pylibbpf runqlat``: run-queue latency (the time runnable tasks wait for a CPU) as a log2 histogram.

::

    pylibbpf runqlat [--interval S [--count N]] [--duration S] [-m] [--pid P] [--per-process] [--json]

The bundled ``runqlat.bpf.o`` (``csrc/bpf/runqlat.bpf.c``) records when a task
is queued (sched_wakeup, sched_wakeup_new, or a preemption seen in
sched_switch) and counts the wait when sched_switch runs it, in log2 slots of
microseconds (``-m``: milliseconds) in a hash map keyed by (pid, slot). Its
programs come in two flavours: tp_btf, used when the kernel takes tp_btf
programs and types the sched tracepoints in its BTF, and raw_tp otherwise;
the choice is made before load (:func:`choose_flavour`, through
``pylibbpf.features`` and ``pylibbpf.btf.kernel()``), not by a refused load.

Every ``--interval`` seconds (default: once, at the end) the counts are read,
cleared and printed as bcc's runqlat prints them; after ``--count`` intervals,
``--duration``, Ctrl-C, SIGTERM or a closed stdout the command exits 0, having
printed what the last, partial interval counted. Counts that arrive between
the read and the clear of their slot are lost (as in libbpf-tools' runqlat).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import threading
import time
from typing import Any, TextIO

from .. import btf, features
from ..bpf.runqlat_skel import RunqlatConfig, RunqlatSkel
from ..errors import BPFError
from ..hist import Histogram
from ..maps import Map
from ..object import BPFObject
from ._common import (
    StatusLine,
    Terminate,
    attach_all,
    check_btf,
    detach,
    load_object,
    open_skeleton,
    output_error,
    pid_number,
    pipe_broken,
    point_at_devnull,
    positive_float,
    positive_int,
)

#: The program sets of runqlat.bpf.o (the section prefix names each), the preferred first.
FLAVOURS = ("tp_btf", "raw_tp")
#: The tracepoints runqlat's programs attach to.
TRACEPOINTS = ("sched_wakeup", "sched_wakeup_new", "sched_switch")
#: Seconds between two looks at the clock, stdout and the status line.
_TICK = 0.2


def choose_flavour() -> str:
    """The program set this kernel runs, chosen before load: ``tp_btf`` when it takes tp_btf programs
    (:func:`pylibbpf.features.attach_kind`) and its BTF types every tracepoint runqlat needs
    (``btf_trace_<name>``, through :func:`pylibbpf.btf.kernel`), else ``raw_tp``."""
    try:
        if not features.attach_kind("tp_btf"):
            return "raw_tp"
        kernel_btf = btf.kernel()
    except (BPFError, OSError):
        return "raw_tp"
    return "tp_btf" if all(kernel_btf.has_type(f"btf_trace_{tp}") for tp in TRACEPOINTS) else "raw_tp"


def open_runqlat(*, pid: int | None, per_process: bool, milliseconds: bool, verbose: bool = False,
                 flavour: str | None = None) -> tuple[BPFObject, str]:
    """runqlat.bpf.o configured and loaded with one program set: (object, flavour).

    ``flavour`` (one of :data:`FLAVOURS`) defaults to :func:`choose_flavour`'s
    answer: the set is chosen before load, never by a refused load. The
    caller owns the object (close it). CommandError when the kernel refuses it.
    """
    if flavour is None:
        flavour = choose_flavour()
    elif flavour not in FLAVOURS:
        raise ValueError(f"flavour must be one of {', '.join(FLAVOURS)}, got {flavour!r}")
    skel = open_skeleton(RunqlatSkel)
    obj = skel.obj
    try:
        _configure(skel, pid=pid, per_process=per_process, milliseconds=milliseconds)
        for prog in obj.programs.values():
            prog.autoload = prog.section.startswith(flavour + "/")
        load_object(obj, verbose)
    except BaseException:
        obj.close()
        raise
    return obj, flavour


def _configure(skel: RunqlatSkel, *, pid: int | None, per_process: bool, milliseconds: bool) -> None:
    """Write ``struct runqlat_config`` (``skel.rodata.cfg``) before load."""
    skel.rodata.cfg = RunqlatConfig(target_tgid=pid or 0, per_process=int(per_process),
                                    milliseconds=int(milliseconds))


def _slot_counts(hists: Map, clear: bool) -> list[tuple[tuple[int, int], int]]:
    """((pid, slot), count) of every entry of the typed ``hists`` map (struct hist_key -> u64).

    ``clear`` reads and deletes them in batches (``pop_items``: each entry read and
    deleted atomically, so a wait counted meanwhile lands in the next interval).
    """
    pairs = hists.pop_items() if clear else hists.lookup_batch()
    return [((key.pid, key.slot), count) for key, count in pairs]


def read_histograms(obj: BPFObject, *, clear: bool = True) -> dict[int, Histogram]:
    """pid -> Histogram (pid 0 only, unless the object counts per process); clears the counts by default."""
    return Histogram.per_key(_slot_counts(obj.maps["hists"], clear))


def _comm(obj: BPFObject, pid: int) -> str:
    try:
        name = obj.maps["comms"].lookup(pid)  # typed: char[16] -> str
    except (KeyError, BPFError):
        return ""
    return name if isinstance(name, str) else ""


class _Output:
    """Writes each interval's histogram(s) to stdout; a closed stdout sets ``gone``, never raises."""

    def __init__(self, stream: TextIO, status: StatusLine, lock: threading.Lock, *, as_json: bool, unit: str,
                 per_process: bool) -> None:
        self._stream = stream
        self._status = status
        self._lock = lock
        self._json = as_json
        self._unit = unit
        self._per_process = per_process
        self.gone = False
        #: Why the output could not be written (not a closed pipe: that is ``gone`` alone).
        self.error: OSError | None = None

    def interval(self, obj: BPFObject, hists: dict[int, Histogram]) -> None:
        comms = {pid: _comm(obj, pid) for pid in hists} if self._per_process else {}
        if self._json:
            def entry(h: Histogram) -> dict[str, Any]:
                return {"total": h.total, "buckets": [{"low": lo, "high": hi, "count": n} for lo, hi, n in h.buckets]}
            row: dict[str, Any] = {"time": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                                   "unit": self._unit}
            if self._per_process:
                row["processes"] = [{"pid": pid, "comm": comms[pid], **entry(h)} for pid, h in hists.items()]
            else:
                row.update(entry(hists.get(0, Histogram.log2([]))))
            text = json.dumps(row) + "\n"
        elif self._per_process:
            text = Histogram.format_per_key(hists, self._unit, section="pid",
                                            key_text=lambda pid: f"{pid} {comms[pid]}".rstrip()) + "\n"
        else:
            text = "\n" + hists.get(0, Histogram.log2([])).format(self._unit) + "\n"
        self._write(text)

    def _write(self, text: str) -> None:
        if self.gone:
            return
        with self._lock:
            self._status.clear()
            try:
                self._stream.write(text)
                self._stream.flush()
            except BrokenPipeError:
                self._reader_gone()
            except OSError as e:
                self.error = e
                self._reader_gone()

    def reader_gone(self) -> bool:
        if not self.gone and pipe_broken(self._stream):
            self._reader_gone()
        return self.gone

    def _reader_gone(self) -> None:
        self.gone = True
        point_at_devnull(self._stream)


def cmd_runqlat(args: argparse.Namespace) -> int:
    """Load, attach, print a histogram per interval until the end; exit 0 on every normal end."""
    check_btf()
    unit = "msecs" if args.milliseconds else "usecs"
    lock = threading.Lock()
    status = StatusLine(sys.stderr, lock)
    out = _Output(sys.stdout, status, lock, as_json=args.json, unit=unit, per_process=args.per_process)
    obj, flavour = open_runqlat(pid=args.pid, per_process=args.per_process, milliseconds=args.milliseconds,
                                verbose=args.verbose)
    with obj:
        links = attach_all(obj)
        try:
            started = time.monotonic()
            end = None if args.duration is None else started + args.duration
            filters = "".join([f", pid {args.pid}" if args.pid else "", ", per process" if args.per_process else ""])
            until = f"for {args.duration:g} s" if args.duration else "Ctrl-C to stop"
            printed = 0
            try:
                # Inside the try: a Ctrl-C right after this line still prints the histogram.
                sys.stderr.write(f"tracing run queue latency ({flavour}{filters})... {until}\n")
                sys.stderr.flush()
                while True:
                    interval_end = None if args.interval is None else time.monotonic() + args.interval
                    finished = _wait(interval_end, end, out, status, printed, args.count)
                    out.interval(obj, read_histograms(obj))
                    printed += 1
                    if finished or out.reader_gone() or (args.count is not None and printed >= args.count):
                        break
            except (KeyboardInterrupt, Terminate):
                out.interval(obj, read_histograms(obj))  # what the interrupted interval counted
        finally:
            try:
                detach(links)
            except (KeyboardInterrupt, Terminate):
                pass
        with lock:
            status.clear()
    if out.error is not None:
        raise output_error(out.error)
    return 0


def _wait(interval_end: float | None, end: float | None, out: _Output, status: StatusLine, printed: int,
          count: int | None) -> bool:
    """Sleep until the interval ends (False) or the run does (True: duration over, stdout closed)."""
    while True:
        now = time.monotonic()
        if end is not None and now >= end:
            return True
        if out.reader_gone():
            return True
        if interval_end is not None and now >= interval_end:
            return False
        if status.enabled:
            left = min(t for t in (interval_end, end) if t is not None) - now if (interval_end or end) else None
            of = f"/{count}" if count else ""
            status.show(f"interval {printed + 1}{of}" + (f", next output in {left:.0f} s" if left is not None else
                                                        ", Ctrl-C prints the histogram"))
        stops = [t - now for t in (interval_end, end) if t is not None]
        time.sleep(min([_TICK, *stops]))


def add_parser(sub: Any) -> None:
    """Register ``runqlat`` on the command's subparsers (``sub.add_parser``)."""
    p = sub.add_parser("runqlat", help="run-queue latency as a log2 histogram",
                       description="How long runnable tasks wait for a CPU (sched_wakeup/sched_switch), "
                       "as a log2 histogram printed every --interval (default: once, at the end).")
    p.add_argument("--interval", type=positive_float, metavar="S", help="print (and reset) every S seconds")
    p.add_argument("--count", type=positive_int, metavar="N", help="stop after N intervals (needs --interval)")
    p.add_argument("--duration", type=positive_float, metavar="S", help="stop after S seconds")
    p.add_argument("-m", "--milliseconds", action="store_true", help="slots of milliseconds (default: microseconds)")
    p.add_argument("--pid", type=pid_number, metavar="P", help="only the threads of process P")
    p.add_argument("-P", "--per-process", action="store_true", help="one histogram per process")
    p.add_argument("--json", action="store_true", help="one JSON object per interval")
    p.add_argument("-v", "--verbose", action="store_true", help="show libbpf's messages and verifier logs")
    p.set_defaults(func=cmd_runqlat, check_args=check_args)


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The option combinations argparse cannot check; ``parser.error`` (exit 2) names the conflict."""
    if args.count is not None and args.interval is None:
        # as bcc's `runqlat [interval [count]]`: a count of intervals needs their length
        parser.error("--count counts intervals: give --interval S too (or --duration S for one histogram)")
