"""Soak: producers at full rate into a BackpressureConsumer and an OrderedReader, for minutes.

    .venv/bin/python benchmarks/soak.py --minutes 10 [--json FILE]

Run as root from the repository root after `make build`. Both readers run at
once, each fed by its own producer thread that calls BPF_PROG_TEST_RUN in a
loop without pausing:

- tests/bpf/consumer_rate.bpf.c ``produce`` offers 256 events per run to a
  256 KiB ring buffer (sequence numbers continue from run to run; a full
  ring fails the reserve, counted by the program in ``counters[1]``), read by
  a :class:`~pylibbpf.BackpressureConsumer` whose callback checks that the
  sequence numbers only go up (gaps are drops; a repeat or a step back is a
  failure);
- tests/bpf/ordered.bpf.c ``emit_stress`` writes 64 clock-stamped records per
  run to the perf event array, alternating CPUs, read by an
  :class:`~pylibbpf.OrderedReader` (``read_batch``) that checks the merged
  order (non-decreasing timestamps except records flagged late) and each
  CPU's sequence (strictly increasing; gaps are lost samples).

Every second the main thread samples the RSS (/proc/self/statm), the number
of open fds, the consumer's queue size, and checks the accounting invariant
``events_read == events_processed + events_dropped + current_queue_size +
errors`` on one ``stats()`` snapshot, plus the ordered reader's (records
taken <= records the merge emitted). At the end, with the producers stopped
and everything drained, the books must balance exactly: records the consumer
read == records the kernel accepted (offered - failed reserves), and samples
the ordered reader delivered == samples written (run counts - failed outputs).

It fails (exit status 1, one line per failure on stderr) on: a broken
invariant or order, the fd count moving after the warm-up or not back to
where it started once everything is closed, or the RSS
growing after the warm-up at more than --max-rss-slope MiB per minute (a
least-squares slope over the per-second samples) while also growing by more
than --rss-floor MiB in total (so that allocator noise in short runs does
not count as a leak). The summary is printed as a markdown table.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import struct
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pylibbpf.features import online_cpus

ROOT = Path(__file__).resolve().parent.parent
TESTS_BPF = ROOT / "tests" / "bpf"
BPF_OUT = TESTS_BPF / "build"

RATE_ARGS = struct.Struct("<3Q")      # consumer_rate.bpf.c struct rate_args: count, first_seq, discard_every
STRESS_ARGS = struct.Struct("<3Q")    # ordered.bpf.c emit_stress: count, tag, target (0: perf array)
ORD_SEQ_CPU = struct.Struct("<8xQI")  # ordered.bpf.c struct ord_event {ts, seq, cpu, tag, gseq}: seq, cpu
SEQ = struct.Struct("<Q")             # consumer_rate.bpf.c struct rate_event starts with the u64 seq
RING_RUN = 256                        # events per ring buffer producer run
PERF_RUN = 64                         # records per perf producer run
MAX_PENDING = 10000
BATCH = 256                           # the consumer's batch_size


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * mmap.PAGESIZE


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def slope_per_minute(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per minute; 0 for fewer than two points."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    return 60.0 * sum((t - mx) * (v - my) for t, v in points) / var


@dataclass
class Sample:
    t: float
    rss: int
    fds: int
    queue: int
    events_read: int
    ordered: int


@dataclass
class Result:
    seconds: float = 0.0
    ring_offered: int = 0
    ring_failed_reserves: int = 0
    consumer_read: int = 0
    consumer_processed: int = 0
    consumer_dropped: int = 0
    consumer_errors: int = 0
    max_queue_size: int = 0
    perf_written: int = 0
    perf_failed_outputs: int = 0
    ordered_delivered: int = 0
    ordered_lost_samples: int = 0
    ordered_late: int = 0
    ordered_forced_flushes: int = 0
    rss_start: int = 0
    rss_warm: int = 0
    rss_last: int = 0
    rss_end: int = 0
    rss_slope_mib_per_min: float = 0.0
    fds_start: int = 0
    fds_warm: int = 0
    fds_last: int = 0
    fds_end: int = 0
    invariant_checks: int = 0
    failures: list[str] = field(default_factory=list)


class Soak:
    def __init__(self, seconds: float, warmup: float, verbose: bool) -> None:
        from pylibbpf import BackpressureConsumer, BPFObject, OrderedReader

        sys.path.insert(0, str(ROOT / "tools"))
        try:
            import build_bpf
        finally:
            sys.path.pop(0)
        paths = {p.name[: -len(".bpf.o")]: p for p in build_bpf.build(TESTS_BPF, BPF_OUT)}
        self.seconds, self.warmup, self.verbose = seconds, warmup, verbose
        self.result = Result()
        self.stop_producers = threading.Event()
        self.stop_reader = threading.Event()
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.samples: list[Sample] = []
        self.result.fds_start, self.result.rss_start = fd_count(), rss_bytes()

        self.rate_obj = BPFObject.open(paths["consumer_rate"]).load()
        self.ord_obj = BPFObject.open(paths["ordered"]).load()
        self.produce = self.rate_obj.programs["produce"]
        self.emit_stress = self.ord_obj.programs["emit_stress"]
        self.cpus = online_cpus()

        self.last_seq = -1
        self.seq_faults = 0
        self.consumer = BackpressureConsumer(self.rate_obj.maps["rb"], self._on_event, max_pending=MAX_PENDING,
                                             batch_size=BATCH)
        self.reader = OrderedReader(self.ord_obj.maps["events"], timestamp=0)
        self.ordered_taken = 0
        self.order_faults = 0
        self.lost_samples = 0
        self.perf_written = 0
        self.ring_next_seq = 0

    # --- the consumers' side ------------------------------------------------------------------

    def _on_event(self, data: bytes) -> None:
        seq = SEQ.unpack_from(data)[0]
        if seq <= self.last_seq:
            self.seq_faults += 1
        self.last_seq = seq

    def _read_ordered(self) -> None:
        last_ts = 0
        last_seq: dict[int, int] = {}
        idle_since: float | None = None
        try:
            while True:
                batch = self.reader.read_batch(timeout=0.2)
                self.lost_samples += sum(n for _, n in batch.lost_notices)
                if not len(batch):
                    if self.stop_reader.is_set():
                        # Producers stopped: done once nothing came for a second.
                        idle_since = idle_since or time.monotonic()
                        if time.monotonic() - idle_since > 1.0:
                            return
                    continue
                idle_since = None
                faults = 0
                for rec, ts, late in zip(batch, batch.timestamps, batch.late, strict=True):
                    seq, cpu = ORD_SEQ_CPU.unpack_from(rec)  # ts comes with the batch
                    if not late:
                        if ts < last_ts:
                            faults += 1
                        last_ts = ts
                    if seq <= last_seq.get(cpu, -1):
                        faults += 1
                    last_seq[cpu] = seq
                with self.lock:
                    self.ordered_taken += len(batch)
                    self.order_faults += faults
        except BaseException as exc:
            self.errors.append(f"ordered reader thread: {type(exc).__name__}: {exc}")

    # --- the producers ------------------------------------------------------------------------

    def _produce_ring(self) -> None:
        try:
            while not self.stop_producers.is_set():
                self.produce.test_run(ctx=RATE_ARGS.pack(RING_RUN, self.ring_next_seq, 0))
                self.ring_next_seq += RING_RUN
        except BaseException as exc:
            self.errors.append(f"ring buffer producer: {type(exc).__name__}: {exc}")

    def _produce_perf(self) -> None:
        ctx = STRESS_ARGS.pack(PERF_RUN, 0, 0)
        i = 0
        try:
            while not self.stop_producers.is_set():
                self.emit_stress.test_run(ctx=ctx, cpu=self.cpus[i % len(self.cpus)])
                i += 1
                with self.lock:
                    self.perf_written += PERF_RUN
        except BaseException as exc:
            self.errors.append(f"perf producer: {type(exc).__name__}: {exc}")

    # --- the run ------------------------------------------------------------------------------

    def counter(self, obj: Any, idx: int) -> int:
        raw = obj.maps["counters"].raw.lookup(idx)
        return int.from_bytes(raw, "little")

    def sample(self, t: float) -> None:
        """One per-second sample and the invariant checks that hold at any moment."""
        s = self.consumer.stats()
        r = self.result
        if s.events_read != s.events_processed + s.events_dropped + s.current_queue_size + s.errors:
            self.fail(f"t={t:.0f}s: consumer invariant broken: {s}")
        # Queued (at most max_pending) plus the batch in the processor's hands.
        if not 0 <= s.current_queue_size <= MAX_PENDING + BATCH:
            self.fail(f"t={t:.0f}s: queue size {s.current_queue_size} outside 0..{MAX_PENDING + BATCH}")
        with self.lock:
            taken, faults = self.ordered_taken, self.order_faults
        emitted = self.reader.stats().emitted
        if taken > emitted:
            self.fail(f"t={t:.0f}s: the ordered reader delivered {taken} records, the merge emitted {emitted}")
        if faults or self.seq_faults:
            self.fail(f"t={t:.0f}s: order faults: {faults} in the merged stream, "
                      f"{self.seq_faults} in the consumer's sequence")
        r.invariant_checks += 1
        self.samples.append(Sample(t, rss_bytes(), fd_count(), s.current_queue_size, s.events_read, taken))

    def fail(self, message: str) -> None:
        if message not in self.result.failures:
            self.result.failures.append(message)
            print(f"soak: FAIL: {message}", file=sys.stderr, flush=True)

    def run(self) -> Result:
        r = self.result
        self.consumer.start()
        threads = [threading.Thread(target=self._read_ordered, name="soak-ordered"),
                   threading.Thread(target=self._produce_ring, name="soak-ring-producer"),
                   threading.Thread(target=self._produce_perf, name="soak-perf-producer")]
        for th in threads:
            th.start()
        start = time.monotonic()
        next_tick = start + 1.0
        try:
            while True:
                time.sleep(max(0.0, next_tick - time.monotonic()))
                t = time.monotonic() - start
                next_tick += 1.0
                self.sample(t)
                if self.errors:
                    break
                if self.verbose and int(t) % 10 == 0:
                    last = self.samples[-1]
                    print(f"soak: {t:5.0f}s rss {last.rss / 2**20:6.1f} MiB fds {last.fds} "
                          f"queue {last.queue:5d} consumer {last.events_read} ordered {last.ordered}",
                          file=sys.stderr, flush=True)
                if t >= self.seconds:
                    break
        finally:
            self.stop_producers.set()
            for th in threads[1:]:
                th.join()
            self.stop_reader.set()
            threads[0].join()
            r.seconds = time.monotonic() - start
            self.consumer.stop(drain_timeout=60)
            self.finish()
            self.reader.close()
            self.rate_obj.close()
            self.ord_obj.close()
            r.fds_end, r.rss_end = fd_count(), rss_bytes()
            if r.fds_end != r.fds_start:
                self.fail(f"{r.fds_end} fds open after everything was closed, {r.fds_start} before the run")
        return r

    def finish(self) -> None:
        """The exact end-of-run accounting and the growth checks."""
        r = self.result
        for message in self.errors:
            self.fail(message)
        s = self.consumer.stats()
        ost = self.reader.stats()
        r.ring_offered = self.counter(self.rate_obj, 0)
        r.ring_failed_reserves = self.counter(self.rate_obj, 1)
        r.consumer_read, r.consumer_processed = s.events_read, s.events_processed
        r.consumer_dropped, r.consumer_errors, r.max_queue_size = s.events_dropped, s.errors, s.max_queue_size
        r.perf_written = self.perf_written
        r.perf_failed_outputs = self.counter(self.ord_obj, 0)
        r.ordered_delivered, r.ordered_lost_samples = self.ordered_taken, self.lost_samples
        r.ordered_late, r.ordered_forced_flushes = ost.late_events, ost.forced_flushes
        accepted = r.ring_offered - r.ring_failed_reserves
        if s.events_read != accepted:
            self.fail(f"the consumer read {s.events_read} records, the ring accepted {accepted}")
        if s.events_read != s.events_processed + s.events_dropped + s.errors or s.current_queue_size:
            self.fail(f"after stop: read != processed + dropped + errors, or a queue left: {s}")
        if r.ordered_delivered != r.perf_written - r.perf_failed_outputs:
            self.fail(f"the ordered reader delivered {r.ordered_delivered} samples, "
                      f"{r.perf_written - r.perf_failed_outputs} were written")
        if r.ordered_lost_samples > r.perf_failed_outputs:
            self.fail(f"{r.ordered_lost_samples} lost samples reported, only {r.perf_failed_outputs} failed")
        r.invariant_checks += 1
        warm = [x for x in self.samples if x.t >= self.warmup]
        if self.samples:
            r.rss_last, r.fds_last = self.samples[-1].rss, self.samples[-1].fds
        if warm:
            r.fds_warm, r.rss_warm = warm[0].fds, warm[0].rss
            grown = [x for x in warm if x.fds != r.fds_warm]
            if grown:
                self.fail(f"the fd count moved after the warm-up: {r.fds_warm} at {warm[0].t:.0f}s, "
                          f"{grown[0].fds} at {grown[0].t:.0f}s")
            r.rss_slope_mib_per_min = slope_per_minute([(x.t, x.rss / 2**20) for x in warm])
            growth = (warm[-1].rss - r.rss_warm) / 2**20
            if r.rss_slope_mib_per_min > self.max_slope and growth > self.rss_floor:
                self.fail(f"RSS grows {r.rss_slope_mib_per_min:.2f} MiB/min after the warm-up "
                          f"(+{growth:.1f} MiB), above {self.max_slope} MiB/min")

    max_slope = 0.5
    rss_floor = 2.0


def table(r: Result) -> str:
    mib = 2**20
    rows = [
        ("duration", f"{r.seconds / 60:.1f} min"),
        ("events (ring buffer → BackpressureConsumer)",
         f"{r.consumer_read:,} read, {r.consumer_processed:,} processed"),
        ("events (perf → OrderedReader)", f"{r.ordered_delivered:,} delivered in order"),
        ("drops",
         f"{r.ring_failed_reserves:,} failed reserves (ring full), {r.consumer_dropped:,} queue drops, "
         f"{r.perf_failed_outputs:,} failed perf outputs ({r.ordered_lost_samples:,} reported lost)"),
        ("late", f"{r.ordered_late:,} ({r.ordered_forced_flushes:,} forced flushes)"),
        ("max queue", f"{r.max_queue_size:,} (max_pending {MAX_PENDING:,} + a batch of {BATCH} being processed)"),
        ("RSS: start / after warm-up / last sample / all closed",
         f"{r.rss_start / mib:.1f} / {r.rss_warm / mib:.1f} / {r.rss_last / mib:.1f} / {r.rss_end / mib:.1f} MiB "
         f"(slope after warm-up {r.rss_slope_mib_per_min:+.3f} MiB/min)"),
        ("fds: start / after warm-up / last sample / all closed",
         f"{r.fds_start} / {r.fds_warm} / {r.fds_last} / {r.fds_end}"),
        ("invariant checks", f"{r.invariant_checks:,}, {len(r.failures)} failed"),
    ]
    lines = ["| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="how long to run (default 10)")
    ap.add_argument("--warmup", type=float, default=None,
                    help="seconds before growth is judged (default: 20%% of the run, at most 60)")
    ap.add_argument("--max-rss-slope", type=float, default=Soak.max_slope,
                    help="MiB per minute of RSS growth after the warm-up that fails the run (default 0.5)")
    ap.add_argument("--rss-floor", type=float, default=Soak.rss_floor,
                    help="MiB of total growth after the warm-up below which a slope is noise (default 2)")
    ap.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    args = ap.parse_args(argv)
    seconds = args.minutes * 60
    if seconds < 2:
        ap.error("--minutes: run for at least 2 seconds")
    warmup = args.warmup if args.warmup is not None else min(60.0, 0.2 * seconds)
    soak = Soak(seconds, warmup, verbose=not args.quiet)
    soak.max_slope, soak.rss_floor = args.max_rss_slope, args.rss_floor
    result = soak.run()
    print(table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(result), indent=2) + "\n")
    if result.failures:
        print(f"soak: FAILED ({len(result.failures)} failures)", file=sys.stderr)
        return 1
    print("soak: passed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
