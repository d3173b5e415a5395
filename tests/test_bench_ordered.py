"""``python -m benchmarks.ordered``'s Python rows run and check every event (a small run, real kernel).

The rows measure OrderedReader through its internals (the time inside the C
merge is read around ``pylibbpf._shim.plb_merge_drain``): when those move, this
fails here instead of the benchmark printing an error in place of its rows.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("consumer", ["pylibbpf-ordered-batch", "pylibbpf-ordered-numpy",
                                      "pylibbpf-ordered-batch-count", "pylibbpf-perfbuf-numpy"])
def test_ordered_benchmark_rows_run_and_see_every_event(bpf_privileged: None, consumer: str) -> None:
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.producers import build
    finally:
        sys.path.pop(0)
    build()   # the producer object, when its source is newer
    spec = {"consumer": consumer, "mode": "drain", "size": 32, "events": 4096, "min_time": 0.01}
    done = subprocess.run([sys.executable, "-m", "benchmarks.ordered", "--one", json.dumps(spec)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["received"] == row["produced"] >= 4096 and row["seq_errors"] == 0
    if "ordered" in consumer:
        assert row["merge_c_s"] > 0 and row["late_events"] == 0
