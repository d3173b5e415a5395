"""The interpreter's floor for a callback per record: ``python -m benchmarks.pyfloor SIZE EVENTS [min_time_ms=300]``.

No ring, no drain, no pylibbpf: a buffer laid out as a batch of EVENTS records
of SIZE bytes, each at an 8-byte aligned stride, and the least Python that
hands each record to a callback under the callback contract -- a new
read-only memoryview of the record (a cached slice of a view of the batch, in
chunks of 2048 records), the call of an empty callback, and the test of its
result for None. What a CPython reader of any design pays per record before
it has read a ring: ``py-noop-floor`` over ``bcc-ringbuf-noop`` is the
empty-callback target's ceiling in the same run.

Timed over passes until ``min_time_ms`` and at least 3 have run; the fastest
pass is kept, as benchmarks/c/memcpy_bw.c keeps its fastest (a floor, so the
pass the host disturbed least). Prints one JSON line with the fields the
suite reads from its C programs.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

CHUNK = 2048


def one_pass(view: memoryview, slices: list[slice], chunk_bytes: int, chunks: int,
             callback: Any) -> int:
    """Every record once; returns the records handed over (a callback returning not None stops)."""
    n = 0
    for k in range(chunks):
        chunk = view[k * chunk_bytes:]
        for s in slices:
            ret = callback(chunk[s])
            if ret is not None:
                return n
        n += len(slices)
    return n


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.split("\n")[0], file=sys.stderr)
        return 2
    size, events = int(argv[0]), int(argv[1])
    min_time = int(argv[2].split("=")[-1]) / 1000 if len(argv) > 2 else 0.3
    if size <= 0 or events <= 0:
        print(f"pyfloor: SIZE and EVENTS must be positive, got {size} and {events}", file=sys.stderr)
        return 2
    stride = (size + 7) & ~7
    chunks = -(-events // CHUNK)
    events = chunks * CHUNK    # whole chunks: one slice list serves every chunk
    view = memoryview(bytearray(b"\x5a" * (stride * events))).toreadonly()
    slices = [slice(i * stride, i * stride + size) for i in range(CHUNK)]

    def empty(data: memoryview) -> None:
        return None

    wall = 0.0
    best = best_cpu = float("inf")
    rounds = 0
    while (wall < min_time or rounds < 3) and rounds < 1000:
        t0, c0 = time.perf_counter(), time.process_time()
        got = one_pass(view, slices, CHUNK * stride, chunks, empty)
        took, took_cpu = time.perf_counter() - t0, time.process_time() - c0
        if got != events:
            print(f"pyfloor: a pass handed over {got} records of {events}", file=sys.stderr)
            return 1
        wall += took
        if took < best:
            best, best_cpu = took, took_cpu
        rounds += 1
    print(json.dumps({"produced": events, "received": events, "wall_s": best, "cpu_s": best_cpu,
                      "rounds": rounds, "gaps": 0, "seq_errors": 0, "p50_us": None, "p99_us": None,
                      "producer_full": 0}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
