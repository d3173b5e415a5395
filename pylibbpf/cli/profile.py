"""``pylibbpf profile``: a sampling profiler (kernel and user stacks, symbolized).

::

    pylibbpf profile [--frequency HZ] [--cpu N] [--pid P] [--duration S] [--folded | --json] [--top N]
                     [-K | -U] [-I]

A cpu-clock perf event is opened on every online CPU (or ``--cpu``) at
``--frequency`` samples a second (default 49, bcc's default), and the bundled
``profile.bpf.o`` (``csrc/bpf/profile.bpf.c``) runs on each sample: it counts
(process, kernel stack id, user stack id, command name) in a hash map and
keeps the frames in a stack-trace map. ``--pid`` and the idle task's exclusion
(``-I`` counts it) are load-time constants of the program (``obj.globals``).

When the run ends (``--duration``, Ctrl-C, SIGTERM) the events are closed,
the counts read, kernel frames resolved with :class:`~pylibbpf.syms.KernelSymbols`
and user frames with one :class:`~pylibbpf.syms.ProcessSymbols` per process
(the mappings of each process are read once a second while sampling, so that
the frames of a process that exits before the end still resolve through the
files it had mapped; a process that came and went within that second has no
mappings left to read). Only code is named (:meth:`~pylibbpf.syms.ProcessSymbols.resolve`'s rule,
JIT code through the process's perf map); a frame no function covers prints as ``[unknown]``, as
libbpf-tools' profile prints it. Output, on stdout:

- default: the ``--top`` (default 10) hottest stacks, hottest first, each as
  bcc's profile prints it: frames innermost first (kernel, then user), a line
  ``-  COMM (PID)``, then the count;
- ``--folded``: bcc's ``profile -fa`` format: one line per stack,
  ``comm;outer;...;inner COUNT``, root first as flamegraph.pl and speedscope
  read it, kernel frames suffixed ``_[k]``;
- ``--json``: one object with the stacks and their frames' addresses.

Stacks that differ only in addresses within the same functions are one stack
in the table and the folded output; ``--json`` keeps each recorded stack.
A summary (samples, stacks, stacks the kernel could not record) goes to
stderr. Exit status 0 on every normal end, a closed stdout included. Once the
sampling ended ("symbolizing the stacks..." on stderr), a Ctrl-C or SIGTERM
no longer loses the output: the first is held until it is printed, a second
one stops at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from types import FrameType
from typing import Any

from ..bpf.profile_skel import ProfileSkel
from ..errors import BPFError
from ..features import online_cpus
from ..link import Link
from ..maps import Map
from ..object import BPFObject
from ..syms import KernelSymbols, ProcessSymbols, Symbol
from ._common import (
    CommandError,
    StatusLine,
    Terminate,
    check_btf,
    cpu_number,
    detach,
    load_object,
    open_skeleton,
    pid_number,
    pipe_broken,
    point_at_devnull,
    positive_float,
    positive_int,
    privilege_error,
    write_output,
)

#: bcc's profile samples at 49 Hz by default (not a multiple of common timer frequencies).
DEFAULT_FREQUENCY = 49
#: Stacks the table shows when --top is not given.
DEFAULT_TOP = 10
#: The kernel's ceiling on a perf event's sampling frequency.
MAX_SAMPLE_RATE = "/proc/sys/kernel/perf_event_max_sample_rate"
#: Seconds between two looks at the clock, stdout and the status line.
_TICK = 0.2
#: The stack id of a stack the program was told not to record (-K, -U).
_NOT_RECORDED = -1


#: The text of a frame no function covers.
UNKNOWN = "[unknown]"


@dataclasses.dataclass(frozen=True)
class Frame:
    """One frame of a stack: its address, what it resolved to (None: nothing), and which side it is on."""

    address: int
    symbol: Symbol | None
    kernel: bool

    @property
    def text(self) -> str:
        """The function's name; ``[unknown]`` where no function covers the address (a stripped file, data,
        anonymous memory without a perf map, nothing mapped, an exited process), as libbpf-tools'
        profile prints it. The JSON output keeps the address, module and offset of such a frame."""
        s = self.symbol
        return UNKNOWN if s is None or s.name is None else s.name

    def as_json(self) -> dict[str, Any]:
        s = self.symbol
        return {"address": self.address, "name": s.name if s else None, "offset": s.offset if s else None,
                "module": s.module if s else None}


#: The frame text of a stack the kernel could not store (-EEXIST: a hash collision, -ENOMEM: map full),
#: as bcc names it.
MISSED = {True: "[Missed Kernel Stack]", False: "[Missed User Stack]"}


@dataclasses.dataclass(frozen=True)
class Stack:
    """One counted stack: frames innermost first; ``missed_*``: the kernel recorded none though asked."""

    pid: int
    comm: str
    count: int
    kernel: tuple[Frame, ...]
    user: tuple[Frame, ...]
    missed_kernel: bool = False
    missed_user: bool = False

    def texts(self) -> tuple[list[str], list[str]]:
        """(kernel, user) frame texts, innermost first, a missed stack as one marker frame."""
        kernel = [MISSED[True]] if self.missed_kernel else [f.text for f in self.kernel]
        user = [MISSED[False]] if self.missed_user else [f.text for f in self.user]
        return kernel, user

    def as_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "comm": self.comm, "count": self.count,
                "kernel": [f.as_json() for f in self.kernel], "user": [f.as_json() for f in self.user],
                "missed_kernel_stack": self.missed_kernel, "missed_user_stack": self.missed_user}


class Symbolizer:
    """Kernel frames through one KernelSymbols, user frames through one ProcessSymbols per pid."""

    def __init__(self, kernel: KernelSymbols | None) -> None:
        self._kernel = kernel
        self._processes: dict[int, ProcessSymbols | None] = {}

    def watch(self, pid: int) -> None:
        """Read the mappings of ``pid`` now (before it can exit); no error when it is gone."""
        if pid not in self._processes:
            try:
                self._processes[pid] = ProcessSymbols(pid)
            except (ProcessLookupError, PermissionError, FileNotFoundError):
                self._processes[pid] = None

    def kernel_frame(self, addr: int) -> Frame:
        return Frame(addr, self._kernel.resolve(addr) if self._kernel is not None else None, True)

    def user_frame(self, pid: int, addr: int) -> Frame:
        self.watch(pid)
        syms = self._processes[pid]
        return Frame(addr, syms.locate(addr) if syms is not None else None, False)


def _frames(stacks: Map, stack_id: int) -> list[int] | None:
    """The addresses of ``stack_id`` (innermost first); [] when there is no stack to have (not recorded,
    or -EFAULT: a kernel thread's user stack, a user-mode sample's kernel stack), None when it was lost."""
    if stack_id == _NOT_RECORDED or stack_id == -errno.EFAULT:
        return []
    if stack_id < 0:
        return None  # -EEXIST (hash collision), -ENOMEM (map full)
    try:
        return stacks.stack(stack_id)
    except KeyError:  # replaced by a later stack of the same hash bucket
        return None


def read_stacks(obj: BPFObject, symbols: Symbolizer) -> list[Stack]:
    """Every counted stack of a profile object, symbolized, hottest first."""
    stacks = obj.maps["stacks"]
    result = []
    for key, count in obj.maps["counts"].lookup_batch():
        kernel = _frames(stacks, key.kernel_stack)
        user = _frames(stacks, key.user_stack)
        result.append(Stack(
            pid=key.pid, comm=key.comm, count=count,
            kernel=tuple(symbols.kernel_frame(a) for a in kernel or ()),
            user=tuple(symbols.user_frame(key.pid, a) for a in user or ()),
            missed_kernel=kernel is None, missed_user=user is None))
    result.sort(key=lambda s: s.count, reverse=True)
    return result


def merge(stacks: Iterable[Stack]) -> list[tuple[int, str, list[str], list[str], int]]:
    """(pid, comm, kernel texts, user texts, count) with the counts of equal texts added, hottest first."""
    merged: dict[tuple[int, str, tuple[str, ...], tuple[str, ...]], int] = {}
    for s in stacks:
        kernel, user = s.texts()
        key = (s.pid, s.comm, tuple(kernel), tuple(user))
        merged[key] = merged.get(key, 0) + s.count
    rows = [(pid, comm, list(k), list(u), n) for (pid, comm, k, u), n in merged.items()]
    rows.sort(key=lambda r: r[4], reverse=True)
    return rows


def format_table(stacks: Iterable[Stack], top: int) -> str:
    """bcc profile's layout, hottest first: frames innermost first, ``-  COMM (PID)``, the count."""
    out = []
    for pid, comm, kernel, user, count in merge(stacks)[:top]:
        out += [f"    {frame}" for frame in kernel + user]
        out.append(f"    {'-':<16} {comm} ({pid})")
        out.append(f"        {count}")
        out.append("")
    return "\n".join(out) + ("\n" if out else "")


def format_folded(stacks: Iterable[Stack], top: int | None) -> str:
    """``comm;outer;...;inner COUNT`` lines (user frames, then kernel frames suffixed ``_[k]``)."""
    lines = []
    for _, comm, kernel, user, count in merge(stacks)[:top]:
        frames = [comm, *reversed(user), *(f"{f}_[k]" for f in reversed(kernel))]
        lines.append(";".join(f.replace(";", ":") for f in frames) + f" {count}")
    return "".join(line + "\n" for line in lines)


def format_json(stacks: Sequence[Stack], top: int | None, *, frequency: int, seconds: float) -> str:
    return json.dumps({
        "frequency": frequency, "seconds": round(seconds, 3), "samples": sum(s.count for s in stacks),
        "stacks": [s.as_json() for s in stacks[:top]],
    }) + "\n"


# --- the command -------------------------------------------------------------------------------

def _check_frequency(hz: int) -> None:
    try:
        with open(MAX_SAMPLE_RATE) as f:
            ceiling = int(f.read())
    except (OSError, ValueError):
        return
    if hz > ceiling:
        raise CommandError(f"--frequency {hz} is above the kernel's limit of {ceiling} Hz "
                           f"({MAX_SAMPLE_RATE}, lowered by the kernel when sampling takes too long)")


def _check_target(args: argparse.Namespace) -> list[int] | None:
    """The CPUs to sample (None: every online CPU), after checking --cpu and --pid."""
    if args.pid is not None and not os.path.exists(f"/proc/{args.pid}"):
        raise CommandError(f"--pid {args.pid}: no such process")
    if args.cpu is None:
        return None
    online = online_cpus()
    if args.cpu not in online:
        raise CommandError(f"--cpu {args.cpu} is not an online CPU (online: {', '.join(map(str, online))})")
    return [args.cpu]


def open_profile(*, pid: int | None, kernel: bool, user: bool, idle: bool, verbose: bool = False) -> BPFObject:
    """profile.bpf.o configured and loaded (the caller owns it: close it). CommandError when refused."""
    skel = open_skeleton(ProfileSkel)
    obj = skel.obj
    try:
        skel.rodata.target_tgid = pid or 0
        skel.rodata.include_idle = idle
        skel.rodata.kernel_stacks = kernel
        skel.rodata.user_stacks = user
        load_object(obj, verbose)
    except BaseException:
        obj.close()
        raise
    return obj


def attach(obj: BPFObject, frequency: int, cpus: list[int] | None) -> list[Link]:
    """One cpu-clock perf event per CPU running ``on_sample``; errors as one line."""
    try:
        return obj.programs["on_sample"].attach_perf_event("cpu-clock", frequency=frequency, cpus=cpus)
    except BPFError as e:
        if e.errno in (errno.EPERM, errno.EACCES):
            raise privilege_error(e) from e
        raise CommandError(f"cannot sample with cpu-clock perf events: {e.strerror} ({e.what}); "
                           "the kernel needs CONFIG_PERF_EVENTS") from e


def _kernel_symbols(wanted: bool) -> KernelSymbols | None:
    if not wanted:
        return None
    try:
        return KernelSymbols()
    except PermissionError as e:
        raise CommandError(f"{e.strerror}; or profile user stacks only (-U)") from e
    except (OSError, ValueError) as e:
        raise CommandError(f"cannot read the kernel's symbols: {e}") from e


class _StopSignals:
    """SIGINT and SIGTERM for one run: while sampling, the first ends the sampling (KeyboardInterrupt,
    Terminate); from then on, while the stacks are read, symbolized and printed, the first is held
    (the output is not lost: the command then ends as it would anyway, status 0) and a second one
    stops at once. The handler itself leaves the sampling state, so no signal falls between the two.
    Only the main thread can set handlers: elsewhere, nothing changes."""

    def __init__(self) -> None:
        self.sampling = True
        self.held: list[int] = []
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)

    def finished_sampling(self) -> None:
        self.sampling = False

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.sampling or self.held:
            self.sampling = False
            raise KeyboardInterrupt if signum == signal.SIGINT else Terminate
        self.held.append(signum)


def cmd_profile(args: argparse.Namespace) -> int:
    """Sample until the end, then print the stacks; exit 0 on every normal end."""
    check_btf()
    _check_frequency(args.frequency)
    cpus = _check_target(args)
    lock = threading.Lock()
    status = StatusLine(sys.stderr, lock)
    with open_profile(pid=args.pid, kernel=not args.user_only, user=not args.kernel_only, idle=args.include_idle,
                      verbose=args.verbose) as obj, _StopSignals() as stop:
        symbols = Symbolizer(_kernel_symbols(not args.user_only))
        if args.pid is not None:
            symbols.watch(args.pid)  # its mappings, read while it surely runs
        links = attach(obj, args.frequency, cpus)
        started = time.monotonic()
        try:
            where = f"CPU {args.cpu}" if cpus else f"{len(links)} CPUs"
            what = f", pid {args.pid}" if args.pid is not None else ""
            until = f"for {args.duration:g} s" if args.duration else "Ctrl-C to stop"
            try:
                # Inside the try: a Ctrl-C right after this line still prints the stacks.
                sys.stderr.write(f"sampling {where} at {args.frequency} Hz{what}... {until}\n")
                sys.stderr.flush()
                gone = _wait(started, args.duration, status, lambda: _watch_sampled(obj, symbols))
                stop.finished_sampling()
            except (KeyboardInterrupt, Terminate):
                stop.finished_sampling()
                gone = False
        finally:
            stop.finished_sampling()  # an error: what follows only cleans up
            detach(links)
        elapsed = time.monotonic() - started
        with lock:
            status.clear()
        if gone:
            return 0  # nobody reads the output
        # Symbolizing many stacks takes a while: say so (a Ctrl-C now still prints them).
        sys.stderr.write("sampling ended; symbolizing the stacks...\n")
        sys.stderr.flush()
        stacks = read_stacks(obj, symbols)
        if args.json:
            text = format_json(stacks, args.top, frequency=args.frequency, seconds=elapsed)
        elif args.folded:
            text = format_folded(stacks, args.top)
        else:
            text = format_table(stacks, args.top or DEFAULT_TOP)
        write_output(sys.stdout, text)
        missed = sum(s.count for s in stacks if s.missed_kernel or s.missed_user)
        sys.stderr.write(f"{sum(s.count for s in stacks)} samples, {len(stacks)} distinct stacks in {elapsed:.1f} s"
                         + (f"; {missed} samples with a stack the kernel could not record (hash collision or "
                            "stack map full)" if missed else "") + "\n")
    return 0


def _watch_sampled(obj: BPFObject, symbols: Symbolizer) -> None:
    """Read the mappings of every process sampled so far, while it runs: a short-lived process's
    frames still resolve at the end (through the files its mappings named)."""
    for key in obj.maps["counts"].keys():
        symbols.watch(key.pid)


def _wait(started: float, duration: float | None, status: StatusLine, every_second: Callable[[], None]) -> bool:
    """Sleep until the duration is over (False) or stdout's reader is gone (True); call ``every_second``."""
    end = None if duration is None else started + duration
    next_call = started + 1.0
    while True:
        now = time.monotonic()
        if now >= next_call:
            every_second()
            next_call = time.monotonic() + 1.0
        if end is not None and now >= end:
            return False
        if pipe_broken(sys.stdout):
            point_at_devnull(sys.stdout)
            return True
        if status.enabled:
            status.show(f"sampling, {end - now:.0f} s left" if end is not None else
                        f"sampling for {now - started:.0f} s, Ctrl-C prints the stacks")
        time.sleep(min(_TICK, end - now) if end is not None else _TICK)


def add_parser(sub: Any) -> None:
    """Register ``profile`` on the command's subparsers (``sub.add_parser``)."""
    p = sub.add_parser("profile", help="sample stacks on every CPU (a sampling profiler)",
                       description="Sample the running kernel and user stacks with a cpu-clock perf event on "
                       "every CPU; at the end print the hottest stacks, symbolized (or, with --folded, in bcc's "
                       "`profile -fa` folded format, for flame graphs).")
    p.add_argument("-F", "--frequency", type=positive_int, default=DEFAULT_FREQUENCY, metavar="HZ",
                   help=f"samples a second on each CPU (default {DEFAULT_FREQUENCY})")
    p.add_argument("--cpu", type=cpu_number, metavar="N", help="only CPU N (default: every online CPU)")
    p.add_argument("--pid", type=pid_number, metavar="P", help="only process P (filtered in the kernel)")
    p.add_argument("--duration", type=positive_float, metavar="S", help="stop after S seconds (default: Ctrl-C)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--folded", action="store_true",
                     help="bcc's `profile -fa` format: one `comm;outer;...;inner COUNT` line per stack, root "
                     "first, kernel frames suffixed _[k] (for flamegraph.pl, speedscope)")
    out.add_argument("--json", action="store_true", help="one JSON object with every stack and its addresses")
    p.add_argument("--top", type=positive_int, metavar="N",
                   help=f"only the N hottest stacks (default: {DEFAULT_TOP} in the table, all otherwise)")
    side = p.add_mutually_exclusive_group()
    side.add_argument("-K", "--kernel-only", action="store_true", help="kernel stacks only")
    side.add_argument("-U", "--user-only", action="store_true", help="user stacks only")
    p.add_argument("-I", "--include-idle", action="store_true", help="count the idle task (pid 0) too")
    p.add_argument("-v", "--verbose", action="store_true", help="show libbpf's messages and verifier logs")
    p.set_defaults(func=cmd_profile)
