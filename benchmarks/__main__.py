"""Run the benchmark suite: ``python -m benchmarks [--quick] [--json FILE] [--runs N] [--only NAMES]``.

Every measurement runs in a fresh process (a new producer object, an empty
ring): the C consumer is benchmarks/build/bench_c, the Python consumers run as
``python -m benchmarks --one SPEC``. The full suite takes the median of
``--runs`` (3) runs; ``--quick`` runs a one-minute subset once. Prints a
markdown table and the target ratios; ``--json`` writes the results.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any

from . import bcc_consumer  # also registers the bcc-ringbuf consumer
from .consumers_py import CONSUMERS, NOTES, PERF_PAGES
from .producers import BENCH_C, PRODUCER_OBJ, build, online_cpus, pin

SIZES = (32, 128, 1024)
C_CONSUMERS = {"c-ringbuf": "ringbuf", "c-perfbuf": "perfbuf"}
ORDER = ["c-ringbuf", "bcc-ringbuf", "bcc-ringbuf-event", "pylibbpf-ringbuf-callback", "pylibbpf-ringbuf-batch",
         "pylibbpf-ringbuf-numpy", "pylibbpf-backpressure", "c-perfbuf", "pylibbpf-perfbuf-callback",
         "pylibbpf-perfbuf-batch", "pylibbpf-ordered-batch", "pylibbpf-ordered-numpy"]
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
        return {"events": events, "min_time_s": 0.1 if quick else 0.3, "max_rounds": 20 if is_c else 3}
    if mode == "steady":
        if kind == "ringbuf":
            events = min(1_000_000 if quick else 2_000_000, (96 << 20) // (size + 8))
        else:
            events = 100_000 if quick else 200_000
        return {"events": events, "chunk": 4096}
    return {"events": 5_000 if quick else 20_000, "rate": LATENCY_RATE}


def plan(quick: bool, only: set[str] | None) -> list[tuple[str, str, int]]:
    """(consumer, mode, size) triples: every mode at every size; latency at 32 B."""
    names = [n for n in ORDER if only is None or n in only]
    runs = []
    for name in names:
        modes = CONSUMERS[name].modes if name in CONSUMERS else ("drain", "steady", "latency")
        for mode in ("drain", "steady", "latency"):
            if mode not in modes:
                continue
            sizes: tuple[int, ...] = (32,) if mode == "latency" else SIZES
            if quick:
                sizes = {"drain": (32, 1024), "steady": (32,), "latency": (32,)}[mode]
            runs.extend((name, mode, size) for size in sizes)
    return runs


def run_once(name: str, mode: str, size: int, quick: bool, env: dict[str, str]) -> dict[str, Any]:
    """One measurement in its own process; the raw figures (or an "error")."""
    if name in C_CONSUMERS:
        kind = C_CONSUMERS[name]
        p = params(kind, mode, size, quick, True)
        cmd = [str(BENCH_C), str(PRODUCER_OBJ), kind, mode, str(size), str(p["events"]),
               f"min_time_ms={int(p.get('min_time_s', 0.3) * 1000)}", f"perf_pages={PERF_PAGES}",
               f"perf_wakeup={PERF_WAKEUP_C}", f"rate={LATENCY_RATE}", f"chunk={p.get('chunk', 4096)}"]
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


def row(name: str, mode: str, size: int, raws: list[dict[str, Any]]) -> dict[str, Any]:
    """The published row: medians over the runs; missing is the worst run's."""
    good = [r for r in raws if "error" not in r]
    base: dict[str, Any] = {"consumer": name, "mode": mode, "event_size": size, "events_per_s": None,
                            "cpu_s_per_million": None, "ratio_to_c": None, "ratio_to_bcc": None, "missing": None,
                            "p50_us": None, "p99_us": None, "runs": len(good), "lower_bound": False, "notes": []}
    if not good:
        base["error"] = raws[0].get("error") if raws else "not run"
        return base

    def med(values: list[float | None]) -> float | None:
        vals = [v for v in values if v is not None]
        return statistics.median(vals) if vals else None

    base["events_per_s"] = med([r["received"] / r["wall_s"] if r["wall_s"] else None for r in good])
    base["cpu_s_per_million"] = med([r["cpu_s"] / r["received"] * 1e6 if r["received"] else None for r in good])
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
    if mode == "drain" and any(r.get("producer_full") for r in good):
        base["notes"].append("ring filled before the run's events were all in: fewer events per round")
    for r in good:
        base["notes"].extend(n for n in r.get("notes", []) if n not in base["notes"])
    return base


def add_ratios(rows: list[dict[str, Any]]) -> None:
    by_key = {(r["consumer"], r["mode"], r["event_size"]): r for r in rows}
    for r in rows:
        kind = C_CONSUMERS.get(r["consumer"]) or (CONSUMERS[r["consumer"]].kind if r["consumer"] in CONSUMERS
                                                   else "ringbuf")
        c = by_key.get((f"c-{kind}", r["mode"], r["event_size"]))
        bcc = by_key.get(("bcc-ringbuf", r["mode"], r["event_size"])) if kind == "ringbuf" else None
        eps = r["events_per_s"]
        if eps is not None and c and c["events_per_s"]:
            r["ratio_to_c"] = eps / c["events_per_s"]
        if eps is not None and bcc and bcc["events_per_s"]:
            r["ratio_to_bcc"] = eps / bcc["events_per_s"]
        if r["mode"] == "latency" and r["p99_us"] is not None and c and c["p99_us"]:
            r["p99_ratio_to_c"] = r["p99_us"] / c["p99_us"]


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets, each with the measured ratio (None when a side is missing)."""
    def get(name: str, mode: str, size: int, key: str) -> float | None:
        for r in rows:
            if (r["consumer"], r["mode"], r["event_size"]) == (name, mode, size):
                return r.get(key)
        return None

    out = []
    for mode in ("drain", "steady"):
        out.append({"target": f"pylibbpf-ringbuf-callback >= 2.5x bcc-ringbuf, 32 B, {mode}", "want": 2.5,
                    "ratio": get("pylibbpf-ringbuf-callback", mode, 32, "ratio_to_bcc")})
    out.append({"target": "pylibbpf-ringbuf-numpy >= 25% of c-ringbuf, 32 B, drain", "want": 0.25,
                "ratio": get("pylibbpf-ringbuf-numpy", "drain", 32, "ratio_to_c")})
    for name in ("pylibbpf-ordered-batch", "pylibbpf-ordered-numpy"):
        out.append({"target": f"{name} >= 50% of c-perfbuf, 32 B, drain", "want": 0.5,
                    "ratio": get(name, "drain", 32, "ratio_to_c")})
    for name in ORDER:
        if name in C_CONSUMERS or get(name, "latency", 32, "p99_ratio_to_c") is None:
            continue
        out.append({"target": f"{name} latency p99 <= 2x C's", "want": 2.0, "lower_is_better": True,
                    "ratio": get(name, "latency", 32, "p99_ratio_to_c")})
    for t in out:
        ratio = t["ratio"]
        t["met"] = None if ratio is None else (ratio <= t["want"] if t.get("lower_is_better") else ratio >= t["want"])
    return out


def fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| consumer | mode | S | events/s | CPU-s / M ev | × C | × bcc | missing | p50 µs | p99 µs | notes |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        eps = fmt(r["events_per_s"] and r["events_per_s"] / 1e6, ".3f") + " M"
        if r["lower_bound"]:
            eps = "≥ " + eps
        notes = "; ".join(([f"skipped: {r['skipped']}"] if r.get("skipped") else [])
                          + ([f"error: {r['error'][:120]}"] if r.get("error") else []) + r["notes"])
        lines.append(f"| {r['consumer']} | {r['mode']} | {r['event_size']} | {eps if r['events_per_s'] else '—'} "
                     f"| {fmt(r['cpu_s_per_million'], '.3f')} | {fmt(r['ratio_to_c'], '.3f')} "
                     f"| {fmt(r['ratio_to_bcc'], '.2f')} | {fmt(r['missing'], 'd')} | {fmt(r['p50_us'], '.1f')} "
                     f"| {fmt(r['p99_us'], '.1f')} | {notes} |")
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
    ap.add_argument("--quick", action="store_true", help="a one-minute subset, one run each")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON")
    ap.add_argument("--runs", type=int, help="runs per measurement (median); default 3, or 1 with --quick")
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
    runs = args.runs or (1 if args.quick else 3)
    only = set(args.only.split(",")) if args.only else None
    todo = plan(args.quick, only)
    skips = {name: bcc_skip if name.startswith("bcc-") else
             (CONSUMERS[name].skip_reason() if name in CONSUMERS else None) for name, _, _ in todo}
    # Repetitions are interleaved (every measurement once, then again), so that a
    # noisy stretch of the host does not hit all runs of one consumer.
    raws: dict[tuple[str, str, int], list[dict[str, Any]]] = {key: [] for key in todo}
    for rep in range(runs):
        for name, mode, size in todo:
            if skips[name]:
                continue
            raw = run_once(name, mode, size, args.quick, bcc_env)
            raws[(name, mode, size)].append(raw)
            eps = raw["received"] / raw["wall_s"] / 1e6 if raw.get("wall_s") else None
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
        print(f"- {t['target']}: {fmt(t['ratio'], '.3f')} ({state})")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
