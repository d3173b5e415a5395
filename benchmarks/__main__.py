"""Run the benchmark suite: ``python -m benchmarks [--quick] [--json FILE] [--runs N] [--only NAMES]``.

Every measurement runs in a fresh process (a new producer object, an empty
ring): the C consumer is benchmarks/build/bench_c, the copy ceiling
benchmarks/build/memcpy_bw, the Python consumers run as
``python -m benchmarks --one SPEC``.

A repetition runs every measurement once, grouped by (mode, event size) so
that the consumers compared with each other run one right after the other.
Ratios (against C, bcc, memcpy) are computed inside each repetition, from
measurements taken seconds apart, and the table reports their median with the
smallest and largest: a noisy host moves absolute rates far more than it moves
these. ``--runs`` repetitions (3 by default, with or without ``--quick``;
``--quick`` runs only the rows the targets use). ``--json`` keeps every
repetition's raw figures.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any

from . import bcc_consumer  # also registers the bcc-ringbuf consumer
from .consumers_py import CONSUMERS, NOTES, PERF_PAGES
from .harness import timed_events
from .producers import BENCH_C, MEMCPY_C, PRODUCER_OBJ, build, online_cpus, pin

SIZES = (32, 128, 1024)
# c-perfmerge: the ordered merge's C core (csrc/plb_merge.c) copying into arrays as OrderedReader
# drains it, with no Python: the ordered rows' ceiling, next to c-perfbuf (which keeps no order).
C_CONSUMERS = {"c-ringbuf": "ringbuf", "c-perfbuf": "perfbuf", "c-memcpy": "memcpy", "c-perfmerge": "perfmerge"}
# benchmarks/pyfloor.py: the interpreter's least work per record under the callback contract (a
# memoryview, the call), no ring. py-noop-floor (an empty callback, over bcc-ringbuf-noop) and
# py-check-floor (the suite's checking callback, over bcc-ringbuf): the callback targets' ceilings.
FLOORS = {"py-noop-floor": "empty", "py-check-floor": "check"}
# benchmarks/arrowfloor.py: to_arrow's pass over a drain's batch in hand, no ring. Its x numpy is the
# to_arrow target's ceiling, over the numpy drain it names (add_ratios).
SECOND_PASS = {"py-arrow-floor": "pylibbpf-ringbuf-numpy"}
# Ceilings for the drain targets: no steady or latency rows.
DRAIN_ONLY = {"c-memcpy", "c-perfmerge", *FLOORS, *SECOND_PASS}
# The ceiling and floor rows: what C alone or the interpreter alone reaches on a target's work.
# They run with --ceilings; by default the suite shows the readers and their C and bcc baselines.
CEILINGS = {"c-perfmerge", *FLOORS, *SECOND_PASS}
# The C consumer each kind of row is compared with (x C): the ordered ceiling with the unordered reader.
C_BASELINE = {"ringbuf": "c-ringbuf", "perfbuf": "c-perfbuf", "perfmerge": "c-perfbuf"}
ORDER = ["c-ringbuf", "c-memcpy", "bcc-ringbuf", "bcc-ringbuf-noop", "bcc-ringbuf-event",
         "pylibbpf-ringbuf-callback", "pylibbpf-ringbuf-noop", "py-noop-floor", "py-check-floor",
         "pylibbpf-ringbuf-batch", "pylibbpf-ringbuf-numpy", "pylibbpf-ringbuf-into", "pylibbpf-ringbuf-arrow",
         "pylibbpf-ringbuf-readarrow", "py-arrow-floor", "pylibbpf-ringbuf-record", "pylibbpf-ringbuf-skel",
         "pylibbpf-backpressure",
         "c-perfbuf", "c-perfmerge", "pylibbpf-perfbuf-callback", "pylibbpf-perfbuf-batch", "pylibbpf-ordered-batch",
         "pylibbpf-ordered-numpy", "pylibbpf-ordered-into"]
# The rows the targets read: --quick runs only these.
QUICK = {"c-ringbuf", "c-memcpy", "bcc-ringbuf", "bcc-ringbuf-noop", "pylibbpf-ringbuf-callback",
         "pylibbpf-ringbuf-noop", "py-noop-floor", "py-check-floor", "pylibbpf-ringbuf-batch",
         "pylibbpf-ringbuf-numpy", "c-perfbuf", "c-perfmerge", "pylibbpf-ordered-numpy", "pylibbpf-ringbuf-into",
         "pylibbpf-ordered-into", "pylibbpf-ringbuf-arrow", "pylibbpf-ringbuf-readarrow", "py-arrow-floor",
         "pylibbpf-ringbuf-record", "pylibbpf-ringbuf-skel"}
ORDERED_WINDOW_MS = 5   # OrderedReader's default window: its latency target is window + 1 ms
LATENCY_RATE = 10_000   # events per second, one per trigger
PERF_WAKEUP_C = 4096    # the C perf consumer's wakeup_events in throughput runs (pylibbpf's PerfBuffer: 1)
KEPT_UP = 0.1           # a steady consumer done within this share of the run after the producer kept up


def params(kind: str, mode: str, size: int, quick: bool, is_c: bool) -> dict[str, Any]:
    """How many events a run uses; ring buffers hold 128 MiB, perf rings PERF_PAGES pages per CPU."""
    if mode == "drain":
        if kind == "ringbuf":
            events = min(1_000_000, (48 << 20) // (size + 8))
        else:   # filled at ~0.15 M ev/s with wakeup_events=1: keep rounds short
            events = min(131_072, len(online_cpus()) * ((24 << 20) // (size + 16)))
        # settle_s: every Python drain round starts 2 windows after its fill, so an
        # OrderedReader's newest records are already past its merge window (harness.run_drain).
        # warmup_rounds: one untimed round first, for every consumer (bench_c's warmup=): the
        # rates are of steady rounds, however few a consumer gets (harness.run_drain).
        # max_rounds: rounds stop at min_time_s of draining or at this many. A Python perf row
        # stops at 3 (each fill takes ~1 s); a ring buffer fills in milliseconds, and its fast
        # Python rows drain a round in ~3 ms at 1 KiB, so 3 rounds timed ~10 ms and one host
        # hiccup of a millisecond moved a ratio by 10%: they get C's 20.
        rounds = 20 if is_c or kind == "ringbuf" else 3
        return {"events": events, "min_time_s": 0.1 if quick else 0.3, "max_rounds": rounds,
                "settle_s": 2 * ORDERED_WINDOW_MS / 1000, "warmup_rounds": 1}
    if mode == "steady":
        if kind == "ringbuf":
            events = min(1_000_000 if quick else 2_000_000, (96 << 20) // (size + 8))
        else:
            events = 100_000 if quick else 200_000
        return {"events": events, "chunk": 4096}
    # 5 s at 10 k ev/s even with --quick: with fewer events one host stall of a few ms
    # delays 1% of a run and moves its p99 by orders of magnitude (seen at 5 000 events);
    # 50 000 puts 500 samples above the p99 instead of 200.
    return {"events": 50_000, "rate": LATENCY_RATE}


def modes_of(name: str) -> tuple[str, ...]:
    if name in CONSUMERS:
        return CONSUMERS[name].modes
    return ("drain",) if name in DRAIN_ONLY else ("drain", "steady", "latency")


def plan(quick: bool, only: set[str] | None, ceilings: bool = False) -> list[tuple[str, str, int]]:
    """(consumer, mode, size) triples, grouped by (mode, size): every mode at every size; latency at 32 B.

    Within a group the consumers run one after the other, so a repetition
    compares each consumer with its C and bcc baselines measured seconds apart.
    The :data:`CEILINGS` rows run with ``ceilings`` (``--ceilings``) or when named in ``only``.
    """
    names = [n for n in ORDER if (only is None or n in only) and (not quick or n in QUICK)
             and (ceilings or n not in CEILINGS or (only is not None and n in only))]
    runs = []
    for mode in ("drain", "steady", "latency"):
        sizes: tuple[int, ...] = (32,) if mode == "latency" else SIZES
        if quick:
            sizes = {"drain": (32, 1024), "steady": (32,), "latency": (32,)}[mode]
        for size in sizes:
            runs.extend((name, mode, size) for name in names if mode in modes_of(name))
    return runs


def steal_ms() -> float | None:
    """CPU time the hypervisor has taken from this guest's CPUs so far, in ms (/proc/stat's steal column).

    The kernel counts it in clock ticks (10 ms here): a figure, not a correction.
    None where it cannot be read (no /proc, an old format).
    """
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()   # cpu user nice system idle iowait irq softirq steal ...
        return int(fields[8]) * 1000.0 / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def run_once(name: str, mode: str, size: int, quick: bool, env: dict[str, str]) -> dict[str, Any]:
    """One measurement in its own process; the raw figures (or an "error") and the host's steal during it."""
    before = steal_ms()
    raw = measure_once(name, mode, size, quick, env)
    after = steal_ms()
    if "error" not in raw and before is not None and after is not None:
        raw["steal_ms"] = after - before
    return raw


def measure_once(name: str, mode: str, size: int, quick: bool, env: dict[str, str]) -> dict[str, Any]:
    """The process that takes one measurement, and the raw figures it printed (or an "error")."""
    if name == "c-memcpy":
        p = params("ringbuf", mode, size, quick, True)
        # The fastest of >= 0.3 s of passes (memcpy_bw.c): enough passes for one to miss the host's noise.
        cmd = [str(MEMCPY_C), str(size), str(p["events"]), "min_time_ms=300"]
    elif name in FLOORS:
        # Passes over one 1 MiB batch (RingBuffer's largest drain), the fastest of >= 0.3 s of them.
        cmd = [sys.executable, "-m", "benchmarks.pyfloor", str(size), "min_time_ms=300", f"callback={FLOORS[name]}"]
    elif name in SECOND_PASS:
        # Passes over one drain's batch, the fastest of >= 0.3 s of them.
        cmd = [sys.executable, "-m", "benchmarks.arrowfloor", str(size), "min_time_ms=300"]
    elif name in C_CONSUMERS:
        kind = C_CONSUMERS[name]
        p = params(kind, mode, size, quick, True)
        cmd = [str(BENCH_C), str(PRODUCER_OBJ), kind, mode, str(size), str(p["events"]),
               f"min_time_ms={int(p.get('min_time_s', 0.3) * 1000)}", f"perf_pages={PERF_PAGES}",
               f"perf_wakeup={PERF_WAKEUP_C}", f"rate={LATENCY_RATE}", f"chunk={p.get('chunk', 4096)}",
               f"warmup={p.get('warmup_rounds', 0)}"]
    else:
        p = params(CONSUMERS[name].kind, mode, size, quick, False)
        spec = {"consumer": name, "mode": mode, "size": size, "params": p}
        cmd = [sys.executable, "-m", "benchmarks", "--one", json.dumps(spec)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, **env))
    except subprocess.TimeoutExpired:
        return {"error": "timed out after 300 s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        return {"error": (done.stderr.strip() or done.stdout.strip())[-500:] or f"exit {done.returncode}"}
    return json.loads(lines[-1])


def one(spec: dict[str, Any]) -> None:
    """``--one``: run a single Python consumer in this process and print its raw figures as JSON."""
    from .harness import SeqCheck, measure

    pin(online_cpus()[0])
    check = SeqCheck(latency=spec["mode"] == "latency")
    reader = CONSUMERS[spec["consumer"]].factory(spec["size"], check)
    out = measure(reader, check, spec["mode"], spec["params"])
    out["notes"] = NOTES
    print(json.dumps(out))


def events_per_s(raw: dict[str, Any] | None) -> float | None:
    if not raw or "error" in raw or not raw.get("wall_s"):
        return None
    return timed_events(raw) / float(raw["wall_s"])


def row(name: str, mode: str, size: int, raws: list[dict[str, Any]]) -> dict[str, Any]:
    """The published row: medians over the repetitions; missing is the worst repetition's."""
    good = [r for r in raws if "error" not in r]
    base: dict[str, Any] = {"consumer": name, "mode": mode, "event_size": size, "events_per_s": None,
                            "cpu_s_per_million": None, "ratio_to_c": None, "ratio_to_bcc": None, "missing": None,
                            "p50_us": None, "p99_us": None, "runs": len(good), "lower_bound": False, "notes": [],
                            "repetitions": raws}
    if not good:
        base["error"] = raws[0].get("error") if raws else "not run"
        return base

    def med(values: list[float | None]) -> float | None:
        vals = [v for v in values if v is not None]
        return statistics.median(vals) if vals else None

    base["events_per_s"] = med([events_per_s(r) for r in good])
    base["cpu_s_per_million"] = med([r["cpu_s"] / timed_events(r) * 1e6 if timed_events(r) else None for r in good])
    base["missing"] = max(max(0, r["produced"] - r["received"]) + r["seq_errors"] for r in good)
    base["p50_us"], base["p99_us"] = med([r.get("p50_us") for r in good]), med([r.get("p99_us") for r in good])
    behind = med([(r["wall_s"] - r["producer_s"]) / r["wall_s"] if r.get("producer_s") else None for r in good])
    if mode == "steady" and behind is not None and behind < KEPT_UP:
        base["lower_bound"] = True
        base["notes"].append(f"producer-bound (a lower bound): done {behind:.0%} of the run after the producer")
    if any(r["gaps"] or r["seq_errors"] for r in good):
        base["notes"].append(f"sequence: gaps {max(r['gaps'] for r in good)}, "
                             f"repeats/out of order {max(r['seq_errors'] for r in good)}")
    if mode == "steady" and name.startswith("pylibbpf-perfbuf"):
        base["notes"].append("PerfBuffer's wakeup_events=1: a wakeup per sample bounds producer and consumer")
    stolen = max((r.get("steal_ms") or 0.0) for r in good)
    if stolen:
        # A latency p99 rests on the slowest 1% of events: a few ms taken by the host is enough.
        base["notes"].append(f"the host took up to {stolen:.0f} ms of CPU during a repetition (steal)")
    if mode == "drain" and any(r.get("producer_full") for r in good):
        base["notes"].append("ring filled before the run's events were all in: fewer events per round")
    for r in good:
        base["notes"].extend(n for n in r.get("notes", []) if n not in base["notes"])
    return base


def spread(values: list[float]) -> dict[str, Any] | None:
    """Median, min and max of per-repetition ratios (None when no repetition had both sides)."""
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values),
            "per_repetition": values}


def kind_of(name: str) -> str:
    if name in C_CONSUMERS:
        return C_CONSUMERS[name]
    if name in FLOORS:
        return "pyfloor"
    if name in SECOND_PASS:
        return "arrowfloor"
    return CONSUMERS[name].kind if name in CONSUMERS else "ringbuf"


def baselines(name: str, mode: str, size: int) -> dict[str, tuple[str, str, int]]:
    """What a row is compared with: its C consumer, bcc (ring buffers; empty callbacks with each other),
    and the copy ceiling (ring-buffer drains)."""
    kind = kind_of(name)
    out = {}
    if kind in C_BASELINE:
        out["c"] = (C_BASELINE[kind], mode, size)
    if name.endswith("arrow"):   # to_arrow and read_arrow against to_numpy on the same reader
        out["numpy"] = (name.rsplit("-", 1)[0] + "-numpy", mode, size)
    if name in SECOND_PASS:
        out["numpy"] = (SECOND_PASS[name], mode, size)
    if name.endswith("-skel"):   # records as a skeleton's classes against EventDef.parse's records
        out["record"] = (name.rsplit("-", 1)[0] + "-record", mode, size)
    if kind in ("ringbuf", "pyfloor"):   # the callback floors against bcc as the callback rows are
        out["bcc"] = ("bcc-ringbuf-noop" if "-noop" in name else "bcc-ringbuf", mode, size)
    if kind == "ringbuf" and mode == "drain":
        out["memcpy"] = ("c-memcpy", mode, size)
    return out


def second_pass_ceiling(pass_rate: float, drain_rate: float) -> float:
    """The most ``read_batch().to_arrow()`` can read against the numpy drain whose rate is
    ``drain_rate``, when to_arrow's pass runs at ``pass_rate`` records/s.

    Both rows take the same ``read_batch`` and check their columns alike; the
    numpy row's ``to_numpy`` is a view (~0.1 ns a record), the arrow row's
    ``to_arrow`` a pass over the batch that takes at least ``1 / pass_rate``
    a record. So the arrow row reads at most ``1 / (1 / drain_rate + 1 /
    pass_rate)``, which over ``drain_rate`` is ``pass_rate / (pass_rate +
    drain_rate)``.
    """
    return pass_rate / (pass_rate + drain_rate)


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """Per-repetition ratios against each baseline, reported as median [min, max].

    ``ratio_to_X`` is events/s over X's events/s in the same repetition
    (for a :data:`SECOND_PASS` row, the ceiling :func:`second_pass_ceiling`);
    latency rows also get ``p50_ratio_to_c`` and ``p99_ratio_to_c``.
    """
    by_key = {(r["consumer"], r["mode"], r["event_size"]): r for r in rows}
    for r in rows:
        key = (r["consumer"], r["mode"], r["event_size"])
        for label, base_key in baselines(*key).items():
            base = by_key.get(base_key)
            if base is None or base_key == key:
                continue
            pairs = list(zip(r["repetitions"], base["repetitions"]))
            of = second_pass_ceiling if r["consumer"] in SECOND_PASS else operator.truediv
            eps = [of(a, b) for a, b in ((events_per_s(x), events_per_s(y)) for x, y in pairs) if a and b]
            stats = spread(eps)
            r[f"ratio_to_{label}"] = stats and stats["median"]
            r[f"ratio_to_{label}_spread"] = stats
            if label == "c" and r["mode"] == "latency":
                for q in ("p50", "p99"):
                    lat = [x[f"{q}_us"] / y[f"{q}_us"] for x, y in pairs
                           if "error" not in x and "error" not in y and x.get(f"{q}_us") and y.get(f"{q}_us")]
                    stats = spread(lat)
                    r[f"{q}_ratio_to_c"] = stats and stats["median"]
                    r[f"{q}_ratio_to_c_spread"] = stats


Figure = tuple[str, str, int, str]   # (row, mode, event size, figure of that row)
#: The performance targets, in one table: (what it says, its bound, the figure it reads, whether lower
#: is better, the ceiling row's figure on the same scale or None). ``targets()`` reads them.
TARGETS: list[tuple[str, float, Figure, bool, Figure | None]] = [
    *(t for n in ("pylibbpf-ringbuf-callback", "pylibbpf-ringbuf-batch") for t in (
        (f"{n} latency p50 <= 1.3x C's", 1.3, (n, "latency", 32, "p50_ratio_to_c"), True, None),
        (f"{n} latency p99 <= 2x C's", 2.0, (n, "latency", 32, "p99_ratio_to_c"), True, None))),
    ("pylibbpf-ringbuf-numpy latency p50 <= 2x C's", 2.0,
     ("pylibbpf-ringbuf-numpy", "latency", 32, "p50_ratio_to_c"), True, None),
    (f"pylibbpf-ordered-numpy latency p99 <= {ORDERED_WINDOW_MS + 1} ms (window + 1 ms), in µs",
     (ORDERED_WINDOW_MS + 1) * 1000.0, ("pylibbpf-ordered-numpy", "latency", 32, "p99_us"), True, None),
    ("pylibbpf-ringbuf-numpy drain >= 0.5x c-ringbuf, 32 B", 0.5,
     ("pylibbpf-ringbuf-numpy", "drain", 32, "ratio_to_c"), False, None),
    ("pylibbpf-ringbuf-numpy drain >= 0.5x memcpy, 1024 B", 0.5,
     ("pylibbpf-ringbuf-numpy", "drain", 1024, "ratio_to_memcpy"), False, None),
    # to_arrow's second pass alone bounds read_batch().to_arrow(); read_arrow has no second pass
    *((f"{n} drain >= 0.9x pylibbpf-ringbuf-numpy, {size} B", 0.9, (n, "drain", size, "ratio_to_numpy"), False,
       ("py-arrow-floor", "drain", size, "ratio_to_numpy") if n.endswith("-arrow") else None)
      for n in ("pylibbpf-ringbuf-arrow", "pylibbpf-ringbuf-readarrow") for size in (32, 1024)),
    *((f"pylibbpf-ringbuf-skel drain >= 0.8x pylibbpf-ringbuf-record, {size} B", 0.8,
       ("pylibbpf-ringbuf-skel", "drain", size, "ratio_to_record"), False, None) for size in (32, 1024)),
    ("pylibbpf-ordered-numpy drain >= 0.35x c-perfbuf, 32 B", 0.35,
     ("pylibbpf-ordered-numpy", "drain", 32, "ratio_to_c"), False, ("c-perfmerge", "drain", 32, "ratio_to_c")),
    ("pylibbpf-ringbuf-noop >= 3x bcc-ringbuf-noop (empty callback), 32 B, drain", 3.0,
     ("pylibbpf-ringbuf-noop", "drain", 32, "ratio_to_bcc"), False, ("py-noop-floor", "drain", 32, "ratio_to_bcc")),
    *((f"pylibbpf-ringbuf-callback >= 2.5x bcc-ringbuf, 32 B, {mode}", 2.5,
       ("pylibbpf-ringbuf-callback", mode, 32, "ratio_to_bcc"), False,
       ("py-check-floor", "drain", 32, "ratio_to_bcc") if mode == "drain" else None)
      for mode in ("drain", "steady")),
]


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The performance targets, each with the measured median and its [min, max] over repetitions.

    A target that has a ceiling row (``c-perfmerge``, the ``py-*-floor`` rows) also carries
    ``ceiling``: that row's figure on the target's scale (its name, median, min, max), and
    ``of_ceiling``: the target's figure over the ceiling's, per repetition, as median, min and
    max (None unless both rows have a figure in every repetition, so that they pair up).
    """
    by_key = {(r["consumer"], r["mode"], r["event_size"]): r for r in rows}

    def get(name: str, mode: str, size: int, key: str) -> dict[str, Any] | None:
        r = by_key.get((name, mode, size))
        if r is None:
            return None
        found = r.get(f"{key}_spread")
        if found is None and r.get(key) is not None:   # an absolute figure: one median
            values = [x[key] for x in r["repetitions"] if "error" not in x and x.get(key) is not None]
            found = spread(values)
        return found

    out: list[dict[str, Any]] = []

    def want(target: str, want: float, got: dict[str, Any] | None, lower_is_better: bool = False,
             ceiling: tuple[str, str, int, str] | None = None) -> None:
        """``ceiling``: the (row, mode, size, figure) on the target's scale that bounds it."""
        t = {"target": target, "want": want, "lower_is_better": lower_is_better,
             "ratio": got and got["median"], "min": got and got["min"], "max": got and got["max"]}
        if ceiling:
            row, mode, size, key = ceiling
            top = get(row, mode, size, key)
            t["ceiling"] = top and {"row": row, "median": top["median"], "min": top["min"], "max": top["max"]}
            t["of_ceiling"] = None
            if got and top and got.get("per_repetition") and len(got["per_repetition"]) == len(
                    top.get("per_repetition") or ()) == len(by_key[row, mode, size]["repetitions"]):
                t["of_ceiling"] = spread([a / b for a, b in zip(got["per_repetition"], top["per_repetition"])])
        out.append(t)

    for target, bound, (name, mode, size, key), lower, ceiling in TARGETS:
        want(target, bound, get(name, mode, size, key), lower, ceiling)
    for t in out:
        ratio = t["ratio"]
        t["met"] = None if ratio is None else (ratio <= t["want"] if t["lower_is_better"] else ratio >= t["want"])
    return out


def fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def fmt_spread(stats: dict[str, Any] | None, spec: str) -> str:
    """``median (min–max)`` of a per-repetition ratio."""
    if not stats:
        return "—"
    if stats["n"] == 1:
        return format(stats["median"], spec)
    return f"{stats['median']:{spec}} ({stats['min']:{spec}}–{stats['max']:{spec}})"


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| consumer | mode | S | events/s | CPU-s / M ev | × C | × bcc | × memcpy | missing | p50 µs | p99 µs "
             "| p50 × C | p99 × C | notes |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        eps = fmt(r["events_per_s"] and r["events_per_s"] / 1e6, ".3f") + " M"
        if r["lower_bound"]:
            eps = "≥ " + eps
        notes = "; ".join(([f"skipped: {r['skipped']}"] if r.get("skipped") else [])
                          + ([f"error: {r['error'][:120]}"] if r.get("error") else []) + r["notes"])
        lines.append(f"| {r['consumer']} | {r['mode']} | {r['event_size']} | {eps if r['events_per_s'] else '—'} "
                     f"| {fmt(r['cpu_s_per_million'], '.3f')} | {fmt_spread(r.get('ratio_to_c_spread'), '.3f')} "
                     f"| {fmt_spread(r.get('ratio_to_bcc_spread'), '.2f')} "
                     f"| {fmt_spread(r.get('ratio_to_memcpy_spread'), '.3f')} | {fmt(r['missing'], 'd')} "
                     f"| {fmt(r['p50_us'], '.1f')} | {fmt(r['p99_us'], '.1f')} "
                     f"| {fmt_spread(r.get('p50_ratio_to_c_spread'), '.2f')} "
                     f"| {fmt_spread(r.get('p99_ratio_to_c_spread'), '.2f')} | {notes} |")
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return {"kernel": platform.release(), "cpus": len(online_cpus()), "cpu_model": model,
            "python": platform.python_version(), "interpreter": sys.executable}


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the rows the targets use (still --runs repetitions)")
    ap.add_argument("--ceilings", action="store_true",
                    help="also the ceiling and floor rows (c-perfmerge, py-*-floor): what C or the interpreter "
                         "alone reaches on a target's work")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON")
    ap.add_argument("--runs", type=int, default=3, help="repetitions (median of per-repetition ratios); default 3")
    ap.add_argument("--only", help="comma-separated consumer names")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        one(json.loads(args.one))
        return

    import pylibbpf

    started = time.monotonic()
    build()
    bcc_env, bcc_skip = bcc_consumer.prepare()
    runs = max(1, args.runs)
    only = set(args.only.split(",")) if args.only else None
    todo = plan(args.quick, only, args.ceilings)
    skips = {name: bcc_skip if name.startswith("bcc-") else
             (CONSUMERS[name].skip_reason() if name in CONSUMERS else None) for name, _, _ in todo}
    # Repetitions are interleaved (every measurement once, then again), and inside
    # one the consumers of a (mode, size) run back to back, so that a noisy
    # stretch of the host hits a consumer and its baselines alike.
    raws: dict[tuple[str, str, int], list[dict[str, Any]]] = {key: [] for key in todo}
    for rep in range(runs):
        for name, mode, size in todo:
            if skips[name]:
                raws[(name, mode, size)].append({"error": f"skipped: {skips[name]}"})
                continue
            raw = run_once(name, mode, size, args.quick, bcc_env)
            raws[(name, mode, size)].append(raw)
            eps = events_per_s(raw)
            eps = eps / 1e6 if eps else None
            print(f"[{rep + 1}/{runs}] {name:28} {mode:7} {size:5} {fmt(eps, '9.3f')} M ev/s  "
                  f"{raw.get('error', '')[:200]}", file=sys.stderr, flush=True)
    rows = []
    for name, mode, size in todo:
        r = row(name, mode, size, raws[(name, mode, size)])
        if skips[name]:
            r.pop("error", None)
            r["skipped"] = skips[name]
        rows.append(r)
    add_ratios(rows)
    report = {"machine": machine(), "libbpf": pylibbpf.libbpf_version(), "quick": args.quick, "runs": runs,
              "elapsed_s": round(time.monotonic() - started, 1), "results": rows, "targets": targets(rows)}
    print(table(rows))
    print()
    for t in report["targets"]:
        state = {True: "met", False: "MISSED", None: "not measured"}[t["met"]]
        got = fmt(t["ratio"], ".3f") + (f" [{t['min']:.3f}–{t['max']:.3f}]" if t["min"] is not None else "")
        top = t.get("ceiling")
        ceiling = (f"; ceiling {top['row']} {top['median']:.3f} [{top['min']:.3f}–{top['max']:.3f}]"
                   + (f", {t['of_ceiling']['median']:.2f} of it" if t.get("of_ceiling") else "")) if top else ""
        print(f"- {t['target']}: {got} ({state}{ceiling})")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
