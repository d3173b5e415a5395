"""The highest steady event rate a consumer holds with zero kernel drops (a standalone benchmark).

    .venv/bin/python -m benchmarks.backpressure [--quick] [--json FILE]

Run as root from the repository root after `make build`. The producer is
tests/bpf/consumer_rate.bpf.c: a SEC("syscall") program that submits `count`
32-byte events (40 bytes in the ring) into a 256 KiB ring buffer per
BPF_PROG_TEST_RUN, with the kernel's adaptive wakeup, counting failed
reserves (a failed reserve is a lost event, as for a real tracer). A child
process pinned to the last CPU triggers it with what is due at the rate
(at most 1024 events per trigger, sleeping 1 ms when on time), for a fixed
time. The consumer process is not pinned (the backpressure consumer's native
reader needs a CPU of its own to show what it does).

For each consumer and callback, rates go up a ladder until a rate has kernel
drops (failed reserves) in each of its tries (2 with --quick, else 3: on a
shared machine any thread is stalled now and then): the figure is the
highest rate with a run without any. When
the producer could not reach a rate (it ran below 90% of it), the ladder
stops there and the figure is a lower bound (marked >=): producer-bound.
Queue drops (the backpressure consumer dropping in user space, by design)
are reported beside it. Callbacks: "fast" counts the event; "gil" also
holds the GIL for ~50 ms (a C call: sorted() of a shuffled list) every
200 events.

The C line is not a steady-state run: it is benchmarks/build/bench_c (the
suite's C consumer, libbpf's ring_buffer__consume with a C callback)
draining a pre-filled ring, when that binary can be built: the ceiling a
reader could drain at, for scale.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TESTS_BPF = ROOT / "tests" / "bpf"
BPF_OUT = TESTS_BPF / "build"
OBJECT = "consumer_rate"
RING_BYTES = 256 * 1024
RECORD_BYTES = 40

FULL_RATES = [2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000, 2_000_000,
              4_000_000, 8_000_000]
QUICK_RATES = [2_000, 10_000, 50_000, 200_000, 1_000_000, 4_000_000]

# The producer child: triggers `produce` through the inherited program fd at a steady rate.
PRODUCER = r"""
import os, struct, sys, time
from pylibbpf import ffi, lib
fd, rate, secs, cpu = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
os.sched_setaffinity(0, {cpu})
args = struct.Struct("<QQQ")
ctx = ffi.new("char[]", args.size)
buf = ffi.buffer(ctx)
opts = ffi.new("struct bpf_test_run_opts *")
opts.sz = ffi.sizeof("struct bpf_test_run_opts")
opts.ctx_in, opts.ctx_size_in = ctx, args.size
tick, chunk = 0.001, 1024
sys.stdout.write("ready\n"); sys.stdout.flush()
sys.stdin.readline()
t0 = time.monotonic()
end, n = t0 + secs, 0
while True:
    now = time.monotonic()
    if now >= end:
        break
    k = min(int((now - t0) * rate) - n, chunk)
    if k <= 0:
        time.sleep(tick)
        continue
    args.pack_into(buf, 0, k, n, 0)
    err = lib.bpf_prog_test_run_opts(fd, opts)
    if err:
        raise OSError(-err, "bpf_prog_test_run_opts")
    n += k
print(n, time.monotonic() - t0, flush=True)
"""


@dataclass
class Trial:
    rate: int
    offered: int = 0          # events the producer asked for
    achieved: float = 0.0     # offered / the producer's run time
    submitted: int = 0        # events the kernel accepted
    failed: int = 0           # failed reserves: kernel drops
    read: int = 0             # events the consumer took from the ring
    processed: int = 0
    queue_dropped: int = 0

    @property
    def ok(self) -> bool:
        return self.failed == 0

    @property
    def producer_bound(self) -> bool:
        return self.achieved < 0.9 * self.rate


@dataclass
class Row:
    consumer: str
    callback: str
    best: Trial | None = None
    first_failure: Trial | None = None
    lower_bound: bool = False
    trials: list[Trial] = field(default_factory=list)


def gil_holder(target_s: float = 0.05) -> Callable[[], None]:
    """sorted() of a shuffled list sized to take about ``target_s`` of CPU (it holds the GIL throughout).

    Sized by the thread's CPU time, not the wall clock, so that other load on
    the machine does not shrink it (it does stretch the hold's wall time).
    """
    n = 50_000
    while True:
        data = list(range(n))
        random.Random(1).shuffle(data)
        took = sorted(timed(lambda: sorted(data), time.thread_time) for _ in range(3))[1]  # noqa: B023
        if took >= 0.9 * target_s or n > 20_000_000:
            break
        n = int(n * min(4.0, target_s / max(took, 1e-4)) * 1.05)

    def hold() -> None:
        sorted(data)

    return hold


def make_callback(kind: str, hold: Callable[[], None]) -> Callable[[bytes], None]:
    count = 0

    def fast(data: bytes) -> None:
        nonlocal count
        count += 1

    def gil(data: bytes) -> None:
        nonlocal count
        count += 1
        if count % 200 == 0:
            hold()

    return fast if kind == "fast" else gil


def run_trial(obj_path: Path, consumer: str, callback: Callable[[bytes], None], rate: int, secs: float) -> Trial:
    from pylibbpf import BackpressureConsumer, BPFObject, RingBufConsumer

    trial = Trial(rate)
    with BPFObject.open(obj_path) as obj:
        obj.load()
        prog_fd = obj.programs["produce"].fd
        cpu = sorted(os.sched_getaffinity(0))[-1]
        child = subprocess.Popen([sys.executable, "-c", PRODUCER, str(prog_fd), str(rate), str(secs), str(cpu)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, pass_fds=[prog_fd],
                                 cwd=ROOT)
        assert child.stdout is not None and child.stdin is not None
        child.stdout.readline()  # ready: imported and set up
        c: Any = (BackpressureConsumer(obj.maps["rb"], callback) if consumer == "BackpressureConsumer"
                  else RingBufConsumer(obj.maps["rb"], callback))
        c.start()
        try:
            out, _ = child.communicate("go\n", timeout=secs + 60)
        finally:
            c.stop(drain_timeout=2.0)
        offered, took = out.split()
        trial.offered, trial.achieved = int(offered), int(offered) / float(took)
        offered_k, failed_k, discarded_k = (int.from_bytes(v, "little") if isinstance(v, bytes) else 0
                                            for v in (obj.maps["counters"].raw.lookup(i) for i in range(3)))
        trial.failed, trial.submitted = failed_k, offered_k - failed_k - discarded_k
        s = c.stats()
        trial.read, trial.processed = s.events_read, s.events_processed
        trial.queue_dropped = getattr(s, "events_dropped", 0)
    return trial


def ladder(obj_path: Path, consumer: str, kind: str, rates: list[int], secs: float,
           hold: Callable[[], None], tries: int) -> Row:
    row = Row(consumer, kind)
    for rate in rates:
        for attempt in range(tries):
            trial = run_trial(obj_path, consumer, make_callback(kind, hold), rate, secs)
            row.trials.append(trial)
            print(f"  {consumer:22} {kind:4} rate {rate:>9,}: achieved {trial.achieved:>11,.0f}/s  "
                  f"kernel drops {trial.failed:>9,}  queue drops {trial.queue_dropped:>9,}  "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
            if trial.ok:
                break
            if attempt + 1 < tries:
                print("    kernel drops: trying this rate again (host noise stalls threads now and then)")
        if not trial.ok:
            row.first_failure = trial
            break
        row.best = trial
        if trial.producer_bound:
            row.lower_bound = True
            break
    else:
        row.lower_bound = True  # never failed: the ladder's top is a lower bound
    return row


def c_drain_baseline() -> tuple[float | None, str]:
    """events/s of the suite's C consumer draining a pre-filled ring (32-byte events), or None and why."""
    try:
        from benchmarks import producers

        producers.build()
        out = subprocess.run([str(producers.BENCH_C), str(producers.PRODUCER_OBJ), "ringbuf", "drain", "32",
                              "1000000"], check=True, capture_output=True, text=True, timeout=120).stdout
        result = json.loads(out.strip().splitlines()[-1])
        return float(result["received"]) / float(result["wall_s"]), ""
    except Exception as exc:  # the baseline is optional: say why it is missing
        return None, f"{type(exc).__name__}: {exc}"


def fmt_rate(value: float) -> str:
    return f"{value / 1e6:.2f} M/s" if value >= 1e6 else f"{value / 1e3:.0f} k/s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rates, 1.5 s per run")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("run as root: loading BPF programs needs CAP_BPF and CAP_SYS_ADMIN", file=sys.stderr)
        return 2

    sys.path.insert(0, str(ROOT / "tools"))
    import build_bpf

    objects = {p.name[: -len(".bpf.o")]: p for p in build_bpf.build(TESTS_BPF, BPF_OUT)}
    obj_path = objects[OBJECT]
    rates, secs, tries = (QUICK_RATES, 1.5, 2) if args.quick else (FULL_RATES, 3.0, 3)
    hold = gil_holder()
    hold_ms = 1000 * sorted(timed(hold, time.thread_time) for _ in range(3))[1]
    print(f"producer: {OBJECT}.bpf.o, ring {RING_BYTES // 1024} KiB ({RING_BYTES // RECORD_BYTES} events), "
          f"{secs} s per run; GIL hold {hold_ms:.0f} ms of CPU every 200 events; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    rows = [ladder(obj_path, consumer, kind, rates, secs, hold, tries)
            for consumer in ("BackpressureConsumer", "RingBufConsumer") for kind in ("fast", "gil")]
    c_rate, c_why = c_drain_baseline()

    print()
    print(f"{'consumer':24} {'callback':10} {'max rate, 0 kernel drops':>26} {'queue drops there':>18}  "
          f"{'first rate with kernel drops':>30}")
    print(f"{'C libbpf ring_buffer':24} {'C':10} "
          f"{(fmt_rate(c_rate) + ' (drain)') if c_rate else 'n/a':>26} {'-':>18}  "
          f"{'- (pre-filled ring: ceiling)' if c_rate else c_why[:60]:>30}")
    for row in rows:
        best = row.best
        if best is None:
            figure = f"< {fmt_rate(rates[0])}"
            qd = "-"
        else:
            shown = min(best.achieved, best.rate)
            figure = ("≥ " if row.lower_bound else "") + fmt_rate(shown)
            qd = f"{100.0 * best.queue_dropped / best.read:.1f}%" if best.read else "0.0%"
        fail = row.first_failure
        failure = (f"{fmt_rate(fail.rate)} ({100.0 * fail.failed / max(fail.offered, 1):.1f}% lost)"
                   if fail else "none")
        label = "fast" if row.callback == "fast" else f"GIL {hold_ms:.0f}ms/200"
        print(f"{row.consumer:24} {label:10} {figure:>26} {qd:>18}  {failure:>30}")
    print("\n≥: producer-bound (the producer could not go faster, or the ladder ended): a lower bound.")
    print(f"A rate passes when one of {tries} runs had no kernel drops. Runs last {secs} s: "
          "a consumer slower than the producer by less than "
          f"{RING_BYTES // RECORD_BYTES} events / {secs} s fills the ring without overflowing it in that time.")

    if args.json:
        Path(args.json).write_text(json.dumps({
            "ring_bytes": RING_BYTES, "seconds_per_run": secs, "c_drain_events_per_s": c_rate,
            "gil_hold_cpu_ms": hold_ms, "load_average": os.getloadavg()[0],
            "rows": [{**asdict(r), "lower_bound": r.lower_bound} for r in rows]}, indent=2))
    return 0


def timed(fn: Callable[[], object], clock: Callable[[], float] = time.perf_counter) -> float:
    t0 = clock()
    fn()
    return clock() - t0


if __name__ == "__main__":
    sys.exit(main())
