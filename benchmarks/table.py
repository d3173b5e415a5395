"""The Performance page's tables from benchmark runs: ``python -m benchmarks.table RUN.json [MORE.json ...]``.

Prints two or three markdown tables. The first has one line per consumer of the last
run given, in the suite's order: its drain rate at 32 B and at 1024 B with
their ratios (× its C consumer, × ``c-memcpy``), its steady rate (``≥`` when
producer-bound), its CPU per million events, its latency p50/p99 with their
ratios to C, and the most CPU time the host took during any of its
repetitions (steal). The second has one line per target and one column per
run, in the order given: each run's median, with the smallest and largest
repetition for the last run. A third, for the last run, sets each target that
has a ceiling row (the same work with no Python, or the interpreter's part of
it alone, measured in the same repetitions) beside that row, and how much of
the ceiling the target's row reaches.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .__main__ import ORDER


def _rate(x: dict[str, Any] | None, digits: int) -> str:
    if not x or not x.get("events_per_s"):
        return "—"
    return f"{'≥ ' if x.get('lower_bound') else ''}{x['events_per_s'] / 1e6:.{digits}f} M"


def _spread(x: dict[str, Any] | None, key: str, digits: int = 3) -> str:
    s = (x or {}).get(f"{key}_spread")
    if not s or s.get("median") is None:
        return "—"
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}–{s['max']:.{digits}f})"


def rows_table(run: dict[str, Any]) -> list[str]:
    """One line per consumer of ``run`` (a ``--json`` file's contents)."""
    by_key = {(r["consumer"], r["mode"], r["event_size"]): r for r in run["results"]}
    names = [n for n in ORDER if any(k[0] == n for k in by_key)]
    names += sorted({k[0] for k in by_key} - set(names))
    lines = ["| consumer | drain 32 B | × C | drain 1024 B | × memcpy | steady 32 B | CPU-s / M ev (drain 32 B) "
             "| latency p50 / p99 µs | p50 × C | p99 × C | steal, max ms |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in names:
        d32, d1k = by_key.get((name, "drain", 32)), by_key.get((name, "drain", 1024))
        steady, lat = by_key.get((name, "steady", 32)), by_key.get((name, "latency", 32))
        cpu = f"{d32['cpu_s_per_million']:.3f}" if d32 and d32.get("cpu_s_per_million") is not None else "—"
        p = f"{lat['p50_us']:.1f} / {lat['p99_us']:.1f}" if lat and lat.get("p50_us") is not None else "—"
        steal = max((rep.get("steal_ms") or 0.0 for r in (d32, d1k, steady, lat) if r
                     for rep in r.get("repetitions", [])), default=0.0)
        lines.append(f"| `{name}` | {_rate(d32, 1)} | {_spread(d32, 'ratio_to_c')} | {_rate(d1k, 2)} "
                     f"| {_spread(d1k, 'ratio_to_memcpy', 2)} | {_rate(steady, 2)} | {cpu} | {p} "
                     f"| {_spread(lat, 'p50_ratio_to_c', 2)} | {_spread(lat, 'p99_ratio_to_c', 2)} | {steal:.0f} |")
    return lines


def targets_table(runs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """One line per target, one column per run (``(title, contents)``); the last with its spread."""
    order: list[str] = []
    by_run = []
    for _, run in runs:
        targets = {t["target"]: t for t in run["targets"]}
        order += [n for n in targets if n not in order]
        by_run.append(targets)
    head = [title for title, _ in runs[:-1]] + [f"{runs[-1][0]}: median (min–max)"]
    lines = ["| target | " + " | ".join(head) + " |", "|---|" + "---:|" * (len(runs) - 1) + "---|"]
    for name in order:
        cells = []
        for i, targets in enumerate(by_run):
            t = targets.get(name)
            if not t or t.get("ratio") is None:
                cells.append("—")
                continue
            text = ratio_text(t) + (f" ({t['min']:.3g}–{t['max']:.3g})" if i == len(by_run) - 1 else "")
            cells.append(f"{text} {'met' if t['met'] else '**missed**'}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def ceilings_table(run: dict[str, Any]) -> list[str]:
    """One line per target of ``run`` that has a ceiling: the target, the ceiling row on the
    target's scale, and the target over the ceiling (per repetition: median, min, max)."""
    lines = ["| target | pylibbpf: median (min–max) | the ceiling, same run | pylibbpf / ceiling |",
             "|---|---:|---:|---:|"]
    for t in run["targets"]:
        top = t.get("ceiling")
        if not top or t.get("ratio") is None:
            continue
        got = f"{ratio_text(t)} ({t['min']:.3g}–{t['max']:.3g}) {'met' if t['met'] else '**missed**'}"
        of = t.get("of_ceiling")
        share = f"{of['median']:.2f} ({of['min']:.2f}–{of['max']:.2f})" if of else "—"
        lines.append(f"| {t['target']} | {got} | `{top['row']}` {top['median']:.3g} "
                     f"({top['min']:.3g}–{top['max']:.3g}) | {share} |")
    return lines


def ratio_text(target: dict[str, Any]) -> str:
    """A target's measured median, to 3 significant digits, or 4 when 3 would read as the
    bound itself (2.496 against >= 2.5 is "2.496", not a missed "2.5")."""
    text = f"{target['ratio']:.3g}"
    if float(text) == target.get("want") and target["ratio"] != target["want"]:
        text = f"{target['ratio']:.4g}"
    return text


START, END = "<!-- bench-table:start -->", "<!-- bench-table:end -->"


def tables(runs: list[tuple[str, dict[str, Any]]]) -> str:
    """Every table for ``runs`` (the rows of the last, the targets of all, the ceilings of the last)."""
    parts = ["\n".join(rows_table(runs[-1][1])), "\n".join(targets_table(runs))]
    ceilings = ceilings_table(runs[-1][1])
    if len(ceilings) > 2:
        parts.append("\n".join(ceilings))
    return "\n\n".join(parts)


def on_page(text: str, tables_text: str) -> str:
    """``text`` with ``tables_text`` between its markers (ValueError when it has none)."""
    if START not in text or END not in text:
        raise ValueError(f"the page has no {START} ... {END} markers")
    head, rest = text.split(START, 1)
    return f"{head}{START}\n{tables_text}\n{END}{rest.split(END, 1)[1]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.table", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", metavar="RUN.json", help="--json files, oldest first")
    parser.add_argument("--titles", help="comma-separated column titles of the targets table (default: file names)")
    parser.add_argument("--write", metavar="PAGE", help="put the tables between PAGE's bench-table markers")
    args = parser.parse_args(argv)
    titles = args.titles.split(",") if args.titles else list(args.runs)
    if len(titles) != len(args.runs):
        parser.error(f"--titles names {len(titles)} runs, {len(args.runs)} given")
    runs = []
    for title, path in zip(titles, args.runs):
        with open(path) as f:
            runs.append((title, json.load(f)))
    text = tables(runs)
    if args.write:
        with open(args.write) as f:
            page = f.read()
        with open(args.write, "w") as f:
            f.write(on_page(page, text))
        return 0
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
