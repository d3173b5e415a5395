"""Compare the performance targets of two benchmark runs: ``python -m benchmarks.compare A.json B.json``.

Prints a markdown table with one line per target of the suite: what it asks,
each run's median with its smallest and largest repetition, and how far the
second run's median lies from the first's. A target whose two medians differ
by more than ``--tolerance`` (15% by default) is marked: the suite's figures
are only worth publishing when two runs in a row on a quiet machine agree.
Exits 1 when a target moved beyond the tolerance, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .table import ratio_text


def load_targets(path: str) -> dict[str, dict[str, Any]]:
    """The ``targets`` list of a ``--json`` file, by target text."""
    with open(path) as f:
        return {t["target"]: t for t in json.load(f)["targets"]}


def cell(t: dict[str, Any] | None) -> str:
    """``median (min–max)`` and whether it meets the target, or a dash when the run has no figure."""
    if not t or t.get("ratio") is None:
        return "—"
    verdict = "met" if t["met"] else "missed"
    return f"{ratio_text(t)} ({t['min']:.3g}–{t['max']:.3g}) {verdict}"


def compare(first: dict[str, dict[str, Any]], second: dict[str, dict[str, Any]],
            tolerance: float) -> tuple[list[str], int]:
    """The table's lines and how many targets moved beyond ``tolerance`` (a fraction)."""
    lines = ["| target | run 1: median (min–max) | run 2: median (min–max) | run 2 vs run 1 |",
             "|---|---|---|---:|"]
    moved = 0
    for name in list(first) + [n for n in second if n not in first]:
        a, b = first.get(name), second.get(name)
        change = "—"
        if a and b and a.get("ratio") and b.get("ratio") is not None:
            delta = b["ratio"] / a["ratio"] - 1
            change = f"{delta:+.1%}"
            if abs(delta) > tolerance:
                change += " **moved**"
                moved += 1
        lines.append(f"| {name} | {cell(a)} | {cell(b)} | {change} |")
    return lines, moved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__.splitlines()[0])
    parser.add_argument("first", help="the earlier run's --json file")
    parser.add_argument("second", help="the later run's --json file")
    parser.add_argument("--tolerance", type=float, default=0.15,
                        help="largest relative change of a median that counts as the same (default 0.15)")
    args = parser.parse_args(argv)
    lines, moved = compare(load_targets(args.first), load_targets(args.second), args.tolerance)
    print("\n".join(lines))
    print(f"\n{moved} target(s) moved by more than {args.tolerance:.0%}")
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main())
