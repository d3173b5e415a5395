"""Ordered vs unordered perf-buffer throughput: ``python -m benchmarks.ordered [--quick] [--json FILE]``.

The same producer (bpf/producer.bpf.c: ``produce_perf``, events of SIZE bytes
starting with a u64 sequence number and the u64 bpf_ktime_get_ns()), the same
perf event array and the same ring size (PAGES pages per CPU), read by:

- ``c-perfbuf``: C, libbpf's ``perf_buffer__consume`` with a C callback per
  event (benchmarks/build/bench_c, the suite's C consumer, run here with
  ``perf_wakeup=1``: a wakeup per sample, as the readers below): the
  unordered ceiling;
- ``c-perfmerge-fn``: C, the ordered merge's core (csrc/plb_merge.c) over the
  same rings, read as libbpf reads them: ``plb_merge_consume`` hands a C
  callback a pointer into the ring per event (bench_c ``perfmerge-fn``,
  OrderedReader's window, the same check per event): ordered vs unordered
  with no Python on either side -- the issue's target;
- ``c-perfmerge``: the same core copying into arrays, as OrderedReader
  drains it (``plb_merge_drain``: 16384 entries and 2 MiB per drain);
- ``pylibbpf-perfbuf-batch``: ``PerfBuffer.read_batch()`` (unordered);
- ``pylibbpf-ordered-batch``: ``OrderedReader(map, timestamp=8).read_batch()``
  (merged across CPUs by the event's timestamp).

Every consumer checks every event's sequence number (each CPU's stream must
arrive complete and in order); the ``-batch`` rows do it in a Python loop
over the batch, the ``-numpy`` rows on ``batch.to_numpy()`` with the main
suite's array check (``harness.SeqCheck.walk_array``), and
the ``-count`` rows only count the batch (the transport alone). For the
Python ordered rows, the time spent inside the C merge (``plb_merge_drain``)
is also measured ("C merge alone").

Modes: ``drain`` fills every CPU's ring first (one CPU's share after the
other: each ring's timestamps above the previous ring's, so the merge emits
long runs from one ring), then times the reading (waiting out the merge
window before starting the clock: this measures throughput, not the
window); ``drain-interleaved`` fills them round-robin, one event per trigger
per CPU, so consecutive timestamps alternate rings (the merge's worst case:
every record changes ring); ``steady`` reads while a forked producer pinned to the last
CPU writes chunks, and times until the last event arrives. The consumer is
pinned to CPU 0. Run as root after ``make build``; the suite's ``build()``
compiles the producer and bench_c when needed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from .harness import SeqCheck
from .producers import BENCH_C, PRODUCER_OBJ, Trigger, build, online_cpus, pin

PAGES = 4096                 # pages per CPU ring (16 MiB): holds a drain round
C_WAKEUP = 1                 # bench_c's wakeup_events: a wakeup per sample, as PerfBuffer and OrderedReader
U64 = struct.Struct("<Q")
STREAM_SHIFT = 48
WINDOW_MS = 5.0              # OrderedReader's default window
INTERLEAVE = {"drain": 0, "drain-interleaved": 1}   # events per trigger per CPU in a round-robin fill


def check_numpy(batch: Any, event: Any, check: SeqCheck) -> int:
    """The main suite's array check (``SeqCheck.walk_array``, every seq compared) on
    ``batch.to_numpy(event)``; returns the events it found missing, repeated or out of order."""
    before = check.gaps + check.seq_errors
    check.walk_array(batch.to_numpy(event))
    return check.gaps + check.seq_errors - before


def check_walk(batch: Any, expect: dict[int, int]) -> int:
    """Check each record's sequence against its stream's next one; returns the number of surprises."""
    bad = 0
    unpack = U64.unpack_from
    for view in batch:
        seq = unpack(view)[0]
        stream = seq >> STREAM_SHIFT
        if expect.get(stream, stream << STREAM_SHIFT) != seq:
            bad += 1
        expect[stream] = seq + 1
    return bad


class DrainClock:
    """Time spent inside the C merge (``plb_merge_drain``), read around the checked layer's wrapper
    (``pylibbpf._shim``, which OrderedReader calls through its module attribute)."""

    def __init__(self) -> None:
        from pylibbpf import _shim

        self.seconds = 0.0
        self._shim = _shim
        self._inner = _shim.plb_merge_drain

        def timed(*args: Any) -> int:
            t0 = time.perf_counter()
            try:
                return int(self._inner(*args))
            finally:
                self.seconds += time.perf_counter() - t0

        _shim.plb_merge_drain = timed  # type: ignore[assignment]

    def restore(self) -> None:
        self._shim.plb_merge_drain = self._inner  # type: ignore[assignment]


ReaderParts = tuple[Callable[[float], Any], Callable[[], None], Callable[[], dict[str, Any]]]


def python_reader(name: str, obj: Any) -> ReaderParts:
    """(read_batch(timeout_s), close, extra figures) for one of the Python consumers."""
    from pylibbpf import OrderedReader, PerfBuffer

    if name.startswith("pylibbpf-ordered"):
        clock = DrainClock()
        rd = OrderedReader(obj.maps["events"], timestamp=8, window_ms=WINDOW_MS, page_cnt=PAGES)

        def extra() -> dict[str, Any]:
            st = rd.stats()
            return {"late_events": st.late_events, "forced_flushes": st.forced_flushes,
                    "lost_samples": st.lost_samples, "merge_c_s": clock.seconds}

        def close() -> None:
            rd.close()
            clock.restore()
        return rd.read_batch, close, extra
    pb = PerfBuffer(obj.maps["events"], lambda cpu, data: None, page_cnt=PAGES)
    return pb.read_batch, pb.close, lambda: {"lost_samples": pb.lost_samples}


def run_python(name: str, mode: str, size: int, events: int, min_time: float) -> dict[str, Any]:
    """One Python consumer, in this process.

    An empty batch does not mean the end (PerfBuffer returns one when a wakeup
    found nothing new): a run ends when everything arrived, or when nothing
    came for 2 s (after the producer finished, in steady mode).
    """
    from pylibbpf import BPFObject
    from pylibbpf.events import defevent

    walk = not name.endswith("-count")
    event = defevent("Ev", ("seq", "u64"), ("ts", "u64"), ("payload", "u8", size - 16))
    event.numpy_dtype()   # warm up: numpy is imported on first use
    with BPFObject.open(str(PRODUCER_OBJ)) as obj:
        obj.load()
        trigger = Trigger(obj.programs["produce_perf"].fd, size, per_cpu=True)
        read_batch, close, extra = python_reader(name, obj)
        expect: dict[int, int] = {}
        array_check = SeqCheck()
        array_check.warm_up(event.numpy_dtype())
        received = bad = rounds = produced = 0
        wall = cpu = 0.0

        def take(t_start: float) -> float:
            """Read until everything produced so far arrived or 2 s passed idle; the time of the last event."""
            nonlocal received, bad
            t_last = t_start
            while received < produced and time.perf_counter() - t_last < 2.0:
                batch = read_batch(0.1)
                if len(batch):
                    received += len(batch)
                    if name.endswith("-numpy"):
                        bad += check_numpy(batch, event, array_check)
                    elif walk:
                        bad += check_walk(batch, expect)
                    t_last = time.perf_counter()   # after the work on the batch
            return t_last

        try:
            if mode in INTERLEAVE:
                while True:
                    produced += trigger.fill(events, INTERLEAVE[mode])
                    time.sleep(2 * WINDOW_MS / 1000)   # every event is older than the window
                    t0, c0 = time.perf_counter(), time.process_time()
                    t_last = take(t0)
                    wall += t_last - t0
                    cpu += time.process_time() - c0
                    rounds += 1
                    if received < produced or wall >= min_time or rounds >= 20:
                        break
            else:
                t0, c0 = time.perf_counter(), time.process_time()
                pid, done_fd = trigger.fork(events, chunk=4096)
                produced = events
                try:
                    t_last = take(t0)
                    cpu = time.process_time() - c0
                finally:
                    os.waitpid(pid, 0)
                    os.close(done_fd)
                wall = t_last - t0
                rounds = 1
            figures = extra()
        finally:
            close()
    return {"received": received, "produced": produced, "wall_s": wall, "cpu_s": cpu, "rounds": rounds,
            "seq_errors": bad, **figures}


def run_c(kind: str, mode: str, size: int, events: int, min_time: float) -> dict[str, Any]:
    cmd = [str(BENCH_C), str(PRODUCER_OBJ), kind, "drain" if mode in INTERLEAVE else mode, str(size), str(events),
           f"min_time_ms={int(min_time * 1000)}", f"perf_pages={PAGES}", f"perf_wakeup={C_WAKEUP}", "chunk=4096",
           f"interleave={INTERLEAVE.get(mode, 0)}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        return {"error": (done.stderr or done.stdout).strip()[-300:] or f"exit {done.returncode}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def one(spec: dict[str, Any]) -> None:
    """``--one SPEC``: run one Python measurement in this (fresh) process, print JSON."""
    pin(online_cpus()[0])
    gc.collect()
    print(json.dumps(run_python(spec["consumer"], spec["mode"], spec["size"], spec["events"], spec["min_time"])))


def measure(name: str, mode: str, size: int, events: int, min_time: float) -> dict[str, Any]:
    if name.startswith("c-"):
        return run_c(name[2:], mode, size, events, min_time)
    spec = {"consumer": name, "mode": mode, "size": size, "events": events, "min_time": min_time}
    done = subprocess.run([sys.executable, "-m", "benchmarks.ordered", "--one", json.dumps(spec)],
                          capture_output=True, text=True, timeout=300)
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        return {"error": (done.stderr or done.stdout).strip()[-300:] or f"exit {done.returncode}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


CONSUMERS = ["c-perfbuf", "c-perfmerge-fn", "c-perfmerge", "pylibbpf-perfbuf-batch", "pylibbpf-ordered-batch",
             "pylibbpf-perfbuf-numpy", "pylibbpf-ordered-numpy", "pylibbpf-perfbuf-batch-count",
             "pylibbpf-ordered-batch-count"]


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.ordered", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="32-byte events, one run each (about a minute)")
    ap.add_argument("--runs", type=int, default=None, help="runs per measurement (median; default 3, quick 1)")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        one(json.loads(args.one))
        return
    build()
    ncpu = len(online_cpus())
    runs = args.runs or (1 if args.quick else 3)
    sizes = (32,) if args.quick else (32, 256)
    modes = ("drain", "drain-interleaved", "steady")
    rows: list[dict[str, Any]] = []
    for mode in modes:
        for size in sizes:
            record = 8 + 4 + size + (-(12 + size)) % 8    # the perf record around a raw sample
            per_cpu = min(100_000 if args.quick else 200_000, (PAGES * 4096) // record)
            if mode == "drain-interleaved":   # a trigger per event and CPU: keep the fill short
                per_cpu = min(50_000, per_cpu)
            events = per_cpu * ncpu if mode in INTERLEAVE else (100_000 if args.quick else 400_000)
            for name in CONSUMERS:
                results = [measure(name, mode, size, events, 0.2 if args.quick else 0.5) for _ in range(runs)]
                good = [r for r in results if "error" not in r]
                row: dict[str, Any] = {"consumer": name, "mode": mode, "event_size": size, "runs": len(good)}
                if good:
                    row["events_per_s"] = statistics.median(r["received"] / r["wall_s"] for r in good)
                    row["cpu_us_per_event"] = statistics.median(r["cpu_s"] / r["received"] * 1e6 for r in good)
                    row["missing"] = max(r["produced"] - r["received"] + r.get("seq_errors", 0) for r in good)
                    for key in ("late_events", "forced_flushes"):
                        if key in good[0]:
                            row[key] = max(r[key] for r in good)
                    if "merge_c_s" in good[0]:   # the C merge alone: events over the time inside plb_merge_drain
                        row["merge_c_events_per_s"] = statistics.median(
                            r["received"] / r["merge_c_s"] for r in good if r["merge_c_s"])
                else:
                    row["error"] = results[0]["error"]
                rows.append(row)
                merge = (f"  (C merge alone: {row['merge_c_events_per_s'] / 1e6:.1f} M ev/s)"
                         if row.get("merge_c_events_per_s") else "")
                print(f"{mode:17} {size:4} B  {name:30} "
                      + (f"{row['events_per_s'] / 1e6:8.3f} M ev/s  {row['cpu_us_per_event']:6.3f} us/ev  "
                         f"missing {row['missing']}{merge}" if good else f"error: {row['error']}"),
                      flush=True)
    ratios = []
    for mode in modes:
        for size in sizes:
            by = {r["consumer"]: r.get("events_per_s") for r in rows if r["mode"] == mode and r["event_size"] == size}
            c = by.get("c-perfbuf")

            def ratio(a: str, b: str, by: dict[str, Any] = by) -> float | None:
                return by[a] / by[b] if by.get(a) and by.get(b) else None

            ratios.append({"mode": mode, "event_size": size,
                           "c_merge_fn_to_c": ratio("c-perfmerge-fn", "c-perfbuf"),
                           "c_merge_to_c": ratio("c-perfmerge", "c-perfbuf"),
                           "ordered_to_c": ratio("pylibbpf-ordered-batch", "c-perfbuf"),
                           "ordered_numpy_to_c": ratio("pylibbpf-ordered-numpy", "c-perfbuf"),
                           "ordered_to_unordered_python": ratio("pylibbpf-ordered-batch", "pylibbpf-perfbuf-batch"),
                           "c_events_per_s": c})
    print("\nordered / unordered (target: ordered >= 50% of the unordered C consumer)")
    for r in ratios:
        print(f"  {r['mode']:17} {r['event_size']:4} B", end="")
        for key, label in (("c_merge_fn_to_c", "C merge fn/C"), ("c_merge_to_c", "C merge copy/C"),
                           ("ordered_to_c", "ordered-batch/C"),
                           ("ordered_numpy_to_c", "ordered-numpy/C"),
                           ("ordered_to_unordered_python", "ordered-batch/PerfBuffer-batch")):
            print(f"   {label} {r[key]:.2f}" if r[key] is not None else f"   {label} n/a", end="")
        print()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": {"cpus": ncpu, "kernel": platform.release(), "python": platform.python_version()},
                       "rows": rows, "ratios": ratios}, f, indent=2)


if __name__ == "__main__":
    main()
