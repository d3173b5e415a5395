"""The exporter's cost per scrape: 10 000 counter series and 100 histograms, beside the map reads alone.

    python -m benchmarks.exporter [--repeat N] [--json FILE]

A program with two hash maps is loaded (nothing attached: the maps hold what
this script writes): ``counts`` with 10 000 keys ``{a, b}`` (two labels,
``uint``-decoded) and ``hists`` with 100 histograms of 27 exp2 buckets. One
scrape is ``generate_latest()`` of a registry holding a
:class:`pylibbpf.exporter.Collector` over them. Rows, each the median CPU time
(``time.process_time``) of ``--repeat`` scrapes:

- ``scrape``: the whole scrape (map reads, decoding, families, text format);
- ``map-read floor``: the two batch lookups alone (``Map.lookup_batch``), what any scrape must do.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SERIES = 10_000
HISTOGRAMS = 100
BUCKETS = 27

SOURCE = """
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
struct pair { __u32 a; __u32 b; };
struct slot { __u32 id; __u32 bucket; };
struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 16384); __type(key, struct pair);
         __type(value, __u64); } counts SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 4096); __type(key, struct slot);
         __type(value, __u64); } hists SEC(".maps");
SEC("syscall") int unused(void *ctx) { return 0; }
char LICENSE[] SEC("license") = "Dual BSD/GPL";
"""

CONFIG = {"name": "bench", "metrics": {
    "counters": [{"name": "events_total", "help": "events", "map": "counts", "labels": [
        {"name": "a", "field": "a", "decoders": ["uint"]}, {"name": "b", "field": "b", "decoders": ["uint"]}]}],
    "histograms": [{"name": "latency_seconds", "help": "latency", "map": "hists", "bucket_type": "exp2",
                    "bucket_field": "bucket", "bucket_multiplier": 1e-6, "bucket_max": BUCKETS - 1,
                    "labels": [{"name": "id", "field": "id", "decoders": ["uint"]}]}]}}


def _cpu_seconds(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def measure(repeat: int) -> list[dict[str, Any]]:
    from prometheus_client import CollectorRegistry, generate_latest

    from pylibbpf import BPFObject
    from pylibbpf.exporter import Collector

    with BPFObject.compile(SOURCE) as obj:
        obj.load()
        counts, hists = obj.maps["counts"], obj.maps["hists"]
        counts.update_batch({counts.key_type.serialize({"a": i // 100, "b": i % 100}): i for i in range(SERIES)})
        hists.update_batch({hists.key_type.serialize({"id": h, "bucket": b}): h + b
                            for h in range(HISTOGRAMS) for b in range(BUCKETS)})
        registry = CollectorRegistry()
        registry.register(Collector(obj, CONFIG))
        text = generate_latest(registry)
        series = text.count(b"\npylibbpf_events_total{")
        scrape = _cpu_seconds(lambda: generate_latest(registry), repeat)
        floor = _cpu_seconds(lambda: (counts.lookup_batch(), hists.lookup_batch()), repeat)
    return [{"row": "scrape", "series": series, "histograms": HISTOGRAMS, "cpu_ms": scrape * 1e3,
             "ratio_to_floor": scrape / floor},
            {"row": "map-read floor", "series": SERIES, "histograms": HISTOGRAMS, "cpu_ms": floor * 1e3,
             "ratio_to_floor": 1.0}]


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| row | counter series | histograms | CPU ms per scrape | × floor |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['row']} | {r['series']} | {r['histograms']} | {r['cpu_ms']:.1f} | "
                     f"{r['ratio_to_floor']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = measure(args.repeat)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
