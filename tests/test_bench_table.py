"""benchmarks.table: the Performance page's tables from --json runs (synthetic runs, no kernel)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.table import main, rows_table, targets_table


def spread(median: float, lo: float, hi: float) -> dict[str, float]:
    return {"median": median, "min": lo, "max": hi}


RUN = {
    "results": [
        {"consumer": "pylibbpf-ringbuf-numpy", "mode": "drain", "event_size": 32, "events_per_s": 68.6e6,
         "cpu_s_per_million": 0.0151, "ratio_to_c_spread": spread(0.502, 0.47, 0.549),
         "repetitions": [{"steal_ms": 0.0}, {"steal_ms": 20.0}]},
        {"consumer": "pylibbpf-ringbuf-numpy", "mode": "latency", "event_size": 32, "events_per_s": 1e4,
         "p50_us": 13.21, "p99_us": 46.5, "p50_ratio_to_c_spread": spread(2.52, 2.35, 2.82),
         "repetitions": [{"steal_ms": 10.0}]},
        {"consumer": "c-ringbuf", "mode": "steady", "event_size": 32, "events_per_s": 11.1e6, "lower_bound": True,
         "repetitions": []},
        {"consumer": "c-ringbuf", "mode": "drain", "event_size": 1024, "events_per_s": 13.1e6,
         "ratio_to_memcpy_spread": spread(2.66, 2.35, 2.75), "repetitions": []},
    ],
    "targets": [{"target": "numpy drain >= 0.5x C", "ratio": 0.502, "min": 0.47, "max": 0.549, "met": True},
                {"target": "noop >= 3x bcc", "ratio": 2.74, "min": 2.39, "max": 2.89, "met": False}],
}


def test_rows_in_the_suites_order_with_their_spreads() -> None:
    lines = rows_table(RUN)
    assert lines[0].startswith("| consumer | drain 32 B | × C |")
    assert lines[2] == "| `c-ringbuf` | — | — | 13.10 M | 2.66 (2.35–2.75) | ≥ 11.10 M | — | — | — | — | 0 |"
    assert lines[3] == ("| `pylibbpf-ringbuf-numpy` | 68.6 M | 0.502 (0.470–0.549) | — | — | — | 0.015 "
                        "| 13.2 / 46.5 | 2.52 (2.35–2.82) | — | 20 |")


def test_targets_one_column_per_run_the_last_with_its_spread(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    first = json.loads(json.dumps(RUN))
    first["targets"] = first["targets"][1:]   # a target a run lacks is a dash
    assert targets_table([("run 1", first), ("run 2", RUN)]) == [
        "| target | run 1 | run 2: median (min–max) |", "|---|---:|---|",
        "| noop >= 3x bcc | 2.74 **missed** | 2.74 (2.39–2.89) **missed** |",
        "| numpy drain >= 0.5x C | — | 0.502 (0.47–0.549) met |"]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(first))
    b.write_text(json.dumps(RUN))
    assert main([str(a), str(b), "--titles", "one,two"]) == 0
    out = capsys.readouterr().out
    assert "| `pylibbpf-ringbuf-numpy` |" in out and "| target | one | two: median (min–max) |" in out
    with pytest.raises(SystemExit):
        main([str(a), "--titles", "one,two"])


def test_the_ordered_ceiling_is_a_drain_row_over_c_perfbuf() -> None:
    """c-perfmerge (the merge's C core, copying, no Python) runs where the ordered drain target is
    measured, and its × C is over c-perfbuf's, as the ordered rows' is."""
    from benchmarks.__main__ import baselines, plan

    assert baselines("c-perfmerge", "drain", 32) == {"c": ("c-perfbuf", "drain", 32)}
    assert baselines("pylibbpf-ordered-numpy", "drain", 32)["c"] == ("c-perfbuf", "drain", 32)
    for quick in (True, False):
        runs = plan(quick, None, ceilings=True)
        assert ("c-perfmerge", "drain", 32) in runs
        assert {mode for name, mode, _ in runs if name == "c-perfmerge"} == {"drain"}


def test_the_callback_floors_are_drain_rows_over_bcc() -> None:
    """The interpreter's loop alone, compared with bcc's empty callback (py-noop-floor) and checking
    callback (py-check-floor), drains only."""
    from benchmarks.__main__ import baselines, plan

    assert baselines("py-noop-floor", "drain", 32) == {"bcc": ("bcc-ringbuf-noop", "drain", 32)}
    assert baselines("py-check-floor", "drain", 32) == {"bcc": ("bcc-ringbuf", "drain", 32)}
    for quick in (True, False):
        runs = plan(quick, None, ceilings=True)
        for floor in ("py-noop-floor", "py-check-floor"):
            assert (floor, "drain", 32) in runs
            assert {mode for name, mode, _ in runs if name == floor} == {"drain"}


def test_the_floor_hands_over_every_record_once(capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks.pyfloor: whole chunks of records, each handed over (a short pass fails the run)."""
    from benchmarks import pyfloor

    assert pyfloor.main(["32", "min_time_ms=1", f"batch_bytes={100 * 1024}"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["received"] == out["produced"] == pyfloor.CHUNK and out["rounds"] >= 3   # whole chunks
    assert out["wall_s"] > 0
    assert pyfloor.main(["1024", "min_time_ms=1", f"batch_bytes={100 * 1024}"]) == 0   # one chunk of 100
    assert json.loads(capsys.readouterr().out)["received"] == 100
    seen: list[bytes] = []
    view = memoryview(bytes(range(40)) * pyfloor.CHUNK)
    slices = [slice(i * 40, i * 40 + 33) for i in range(pyfloor.CHUNK)]
    assert pyfloor.one_pass(view, slices, 40 * pyfloor.CHUNK, 1, lambda d: seen.append(bytes(d))) == pyfloor.CHUNK
    assert len(seen) == pyfloor.CHUNK and all(rec == bytes(range(33)) for rec in seen)
    assert pyfloor.one_pass(view, slices, 40 * pyfloor.CHUNK, 1, lambda d: 0) == pyfloor.CHUNK   # 0 goes on
    assert pyfloor.one_pass(view, slices, 40 * pyfloor.CHUNK, 1, lambda d: -1) == 0   # a stop
    assert pyfloor.main(["0"]) == 2


def test_the_check_floor_checks_every_record(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """callback=check: the suite's checking callback over records numbered 0, 1, 2, ...; a record
    out of place fails the run."""
    from benchmarks import pyfloor

    assert pyfloor.main(["32", "min_time_ms=1", "callback=check"]) == 0
    assert json.loads(capsys.readouterr().out)["received"] == (1 << 20) // 32
    real = pyfloor.U64

    class Skips:   # numbers the records 0, 1, 2, 4, 5, ...: one gap
        @staticmethod
        def pack_into(buf: bytearray, at: int, seq: int) -> None:
            real.pack_into(buf, at, seq + (seq >= 3))

    monkeypatch.setattr(pyfloor, "U64", Skips)
    assert pyfloor.main(["32", "min_time_ms=1", "callback=check", "batch_bytes=4096"]) == 1
    assert "gaps 1" in capsys.readouterr().err
    with pytest.raises(ValueError, match="callback must be empty or check"):
        pyfloor.main(["32", "callback=nothing"])


def test_a_median_that_rounds_to_the_bound_keeps_a_fourth_digit() -> None:
    """2.496 against >= 2.5 would read "2.5 missed": it is written 2.496."""
    from benchmarks.table import ratio_text

    assert ratio_text({"ratio": 2.4962, "want": 2.5}) == "2.496"
    assert ratio_text({"ratio": 2.5, "want": 2.5}) == "2.5"
    assert ratio_text({"ratio": 2.4362, "want": 2.5}) == "2.44"


def test_the_arrow_floor_is_a_drain_row_whose_ratio_is_the_to_arrow_ceiling() -> None:
    """py-arrow-floor (to_arrow's pass alone) runs where the to_arrow target is measured; its x numpy
    is P / (P + R) in each repetition, while the arrow rows keep a plain ratio."""
    from benchmarks.__main__ import add_ratios, baselines, plan

    assert baselines("py-arrow-floor", "drain", 1024) == {"numpy": ("pylibbpf-ringbuf-numpy", "drain", 1024)}
    for quick in (True, False):
        runs = plan(quick, None, ceilings=True)
        assert ("py-arrow-floor", "drain", 32) in runs and ("py-arrow-floor", "drain", 1024) in runs
        assert {mode for name, mode, _ in runs if name == "py-arrow-floor"} == {"drain"}

    def row(name: str, rates: list[float]) -> dict[str, object]:
        return {"consumer": name, "mode": "drain", "event_size": 32,
                "repetitions": [{"produced": r, "received": r, "wall_s": 1.0} for r in rates]}

    rows = [row("pylibbpf-ringbuf-numpy", [100.0, 200.0]), row("py-arrow-floor", [400.0, 200.0]),
            row("pylibbpf-ringbuf-arrow", [80.0, 100.0])]
    add_ratios(rows)
    floor, arrow = rows[1], rows[2]
    assert floor["ratio_to_numpy_spread"]["per_repetition"] == [0.8, 0.5]   # 400/(400+100), 200/(200+200)
    assert arrow["ratio_to_numpy_spread"]["per_repetition"] == [0.8, 0.5]   # 80/100, 100/200
    assert "ratio_to_bcc" not in floor and "ratio_to_memcpy" not in floor


def test_the_arrow_floor_converts_one_drains_batch(bpf_privileged: None) -> None:
    """benchmarks.arrowfloor: one drain's batch of the producer's events (cut by the drain's 1 MiB,
    not by the ring), its RecordBatch checked, then timed; a wrong RecordBatch is named."""
    import pyarrow as pa

    from benchmarks import arrowfloor
    from benchmarks.producers import build
    from pylibbpf.ringbuf import DEFAULT_BATCH_BYTES

    build()   # the producer object, when its source is newer
    root = Path(__file__).resolve().parent.parent
    for size in (32, 1024):   # in its own process: it pins itself to a CPU
        done = subprocess.run([sys.executable, "-m", "benchmarks.arrowfloor", str(size), "min_time_ms=1"],
                              cwd=root, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert out["received"] == out["produced"] == DEFAULT_BATCH_BYTES // size
        assert out["rounds"] >= 3 and out["wall_s"] > 0
    good = pa.RecordBatch.from_pydict({"seq": pa.array([0, 1, 2], pa.uint64())})
    assert arrowfloor.check_rows(good, 3) is None
    assert arrowfloor.check_rows(good, 4) == "3 rows for 4 records"
    skipped = pa.RecordBatch.from_pydict({"seq": pa.array([0, 2, 3], pa.uint64())})
    assert arrowfloor.check_rows(skipped, 3) == "the seq column is not 0, 1, 2, ..."
    assert arrowfloor.main(["8"]) == 2


def test_a_target_with_a_ceiling_row_is_set_beside_it_repetition_by_repetition() -> None:
    """targets(): the ordered target carries c-perfmerge's x C as its ceiling and its own x C over
    that, paired by repetition; a ceiling row that failed a repetition leaves no pairing; the
    table prints one line per target with a ceiling."""
    from benchmarks.__main__ import add_ratios, targets
    from benchmarks.table import ceilings_table

    def row(name: str, rates: list[float | None]) -> dict[str, object]:
        return {"consumer": name, "mode": "drain", "event_size": 32,
                "repetitions": [{"error": "failed"} if r is None else {"produced": r, "received": r, "wall_s": 1.0}
                                for r in rates]}

    rows = [row("c-perfbuf", [400.0, 500.0]), row("c-perfmerge", [200.0, 200.0]),
            row("pylibbpf-ordered-numpy", [100.0, 150.0])]
    add_ratios(rows)
    by_name = {t["target"]: t for t in targets(rows)}
    ordered = by_name["pylibbpf-ordered-numpy drain >= 0.35x c-perfbuf, 32 B"]
    assert ordered["ceiling"] == {"row": "c-perfmerge", "median": 0.45, "min": 0.4, "max": 0.5}
    assert ordered["of_ceiling"]["per_repetition"] == pytest.approx([0.5, 0.75])   # 0.25 / 0.5, 0.3 / 0.4
    assert by_name["pylibbpf-ringbuf-callback >= 2.5x bcc-ringbuf, 32 B, steady"].get("ceiling") is None
    noop = by_name["pylibbpf-ringbuf-noop >= 3x bcc-ringbuf-noop (empty callback), 32 B, drain"]
    assert noop["ceiling"] is None and noop["ratio"] is None   # neither row measured
    lines = ceilings_table({"targets": list(by_name.values())})
    assert lines[2:] == ["| pylibbpf-ordered-numpy drain >= 0.35x c-perfbuf, 32 B | 0.275 (0.25–0.3) **missed** "
                         "| `c-perfmerge` 0.45 (0.4–0.5) | 0.62 (0.50–0.75) |"]

    rows[1] = row("c-perfmerge", [200.0, None])   # the ceiling failed its second repetition
    for r in rows:
        for key in [k for k in r if k.startswith("ratio_to")]:
            del r[key]
    add_ratios(rows)
    ordered = {t["target"]: t for t in targets(rows)}["pylibbpf-ordered-numpy drain >= 0.35x c-perfbuf, 32 B"]
    assert ordered["ceiling"]["median"] == 0.5 and ordered["of_ceiling"] is None


def test_a_ring_buffer_drain_gets_as_many_rounds_as_c_a_perf_drain_three() -> None:
    """A ring buffer fills in milliseconds: its Python rows may time 20 rounds as C's do; a perf
    ring fills at ~0.15 M ev/s, so a Python perf row stops at 3."""
    from benchmarks.__main__ import params

    for quick in (True, False):
        assert params("ringbuf", "drain", 1024, quick, False)["max_rounds"] == 20
        assert params("ringbuf", "drain", 32, quick, True)["max_rounds"] == 20
        assert params("perfbuf", "drain", 32, quick, False)["max_rounds"] == 3
        assert params("perfbuf", "drain", 32, quick, True)["max_rounds"] == 20


def test_the_ceiling_rows_run_with_ceilings_only() -> None:
    """By default the suite shows the readers and their C and bcc baselines; --ceilings adds the
    ceiling and floor rows, and naming one in --only runs it too."""
    from benchmarks.__main__ import CEILINGS, plan

    assert CEILINGS == {"c-perfmerge", "py-noop-floor", "py-check-floor", "py-arrow-floor"}
    for quick in (True, False):
        default = {name for name, _, _ in plan(quick, None)}
        assert not default & CEILINGS and {"c-ringbuf", "bcc-ringbuf", "pylibbpf-ringbuf-numpy"} <= default
        assert CEILINGS <= {name for name, _, _ in plan(quick, None, ceilings=True)}
    assert {name for name, _, _ in plan(False, {"c-perfmerge"})} == {"c-perfmerge"}


def test_the_targets_live_in_one_table() -> None:
    """Every target is a row of TARGETS, read by targets() in that order."""
    from benchmarks.__main__ import TARGETS, targets

    out = targets([])
    assert [t["target"] for t in out] == [row[0] for row in TARGETS] and len(out) == 18
    assert all(t["ratio"] is None and t["met"] is None for t in out)



def test_the_performance_page_shows_the_recorded_run() -> None:
    """docs/performance.md's tables are benchmarks.table's output for docs/perf/run.json, as written."""
    from benchmarks.table import END, START, tables

    root = Path(__file__).resolve().parent.parent
    run = json.loads((root / "docs" / "perf" / "run.json").read_text())
    page = (root / "docs" / "performance.md").read_text()
    shown = page.split(START, 1)[1].split(END, 1)[0].strip()
    assert shown == tables([("docs/perf/run.json", run)]).strip(), (
        "run `.venv/bin/python -m benchmarks.table docs/perf/run.json --write docs/performance.md`")
