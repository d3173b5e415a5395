"""The interpreter's floor for a callback per record:
``python -m benchmarks.pyfloor SIZE [min_time_ms=300] [callback=empty|check] [batch_bytes=1048576]``.

No ring, no drain, no pylibbpf: one batch of records of SIZE bytes, each at
an 8-byte aligned stride, as many as ``batch_bytes`` holds (1 MiB: what
``RingBuffer`` drains into at most per call), and the least Python that hands
each record to a callback under the callback contract -- a new read-only
memoryview of the record (a cached slice of a view of the batch, in chunks of
up to 2048 records), the call of the callback, and the tests of its result
for None and 0 (a stop otherwise). What a CPython reader of any design pays
per record once a batch is in hand, the batch in cache as a drain leaves it.

``callback=empty``: a callback that does nothing (``py-noop-floor``, over
``bcc-ringbuf-noop``: the empty-callback target's ceiling in the same run);
``callback=check``: the suite's checking callback (``SeqCheck.on_ring``, a
fresh check per pass over records numbered 0, 1, 2, ...; a pass in which it
finds a gap or a repeat fails the run) (``py-check-floor``, over
``bcc-ringbuf``: the checking-callback target's).

Passes run until ``min_time_ms`` and at least 3 have run; the fastest pass is
kept, as benchmarks/c/memcpy_bw.c keeps its fastest (a floor: the pass the
host disturbed least). Prints one JSON line with the fields the suite reads
from its C programs.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

from .harness import U64, SeqCheck

CHUNK = 2048


def one_pass(view: memoryview, slices: list[slice], chunk_bytes: int, chunks: int,
             callback: Any) -> int:
    """Every record once; returns the records handed over (a callback returning neither None nor 0 stops)."""
    n = 0
    zero = 0
    for k in range(chunks):
        chunk = view[k * chunk_bytes:]
        for s in slices:
            ret = callback(chunk[s])
            if ret is not None and ret is not zero:
                return n
        n += len(slices)
    return n


def empty(data: memoryview) -> None:
    return None


def pass_callback(kind: str) -> tuple[Callable[[memoryview], Any], SeqCheck | None]:
    """One pass's callback for ``callback=KIND``, and its check (a fresh one) if it has one."""
    if kind == "empty":
        return empty, None
    if kind == "check":
        check = SeqCheck()
        return check.on_ring(), check
    raise ValueError(f"callback must be empty or check, got {kind!r}")


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.split("\n")[1], file=sys.stderr)
        return 2
    size = int(argv[0])
    opts = dict(arg.split("=", 1) for arg in argv[1:])
    min_time = int(opts.get("min_time_ms", "300")) / 1000
    batch_bytes = int(opts.get("batch_bytes", str(1 << 20)))
    if size < 8 or batch_bytes < size:
        print(f"pyfloor: SIZE must be >= 8 (a u64 sequence number) and batch_bytes >= SIZE, "
              f"got {size} and {batch_bytes}", file=sys.stderr)
        return 2
    kind = opts.get("callback", "empty")
    pass_callback(kind)   # a bad kind fails before the batch is built
    stride = (size + 7) & ~7
    per_chunk = min(CHUNK, batch_bytes // stride)
    chunks = batch_bytes // stride // per_chunk
    records = chunks * per_chunk     # whole chunks: one slice list serves every chunk
    buf = bytearray(b"\x5a" * (stride * records))
    for i in range(records):
        U64.pack_into(buf, i * stride, i)   # the sequence numbers a check expects: 0, 1, 2, ...
    view = memoryview(buf).toreadonly()
    slices = [slice(i * stride, i * stride + size) for i in range(per_chunk)]

    wall = 0.0
    best = best_cpu = float("inf")
    passes = 0
    while (wall < min_time or passes < 3) and passes < 100_000:
        callback, check = pass_callback(kind)
        t0, c0 = time.perf_counter(), time.process_time()
        got = one_pass(view, slices, per_chunk * stride, chunks, callback)
        took, took_cpu = time.perf_counter() - t0, time.process_time() - c0
        if got != records or (check is not None and (check.received, check.gaps, check.seq_errors) != (records, 0, 0)):
            print(f"pyfloor: a pass handed over {got} records of {records}"
                  + (f", checked {check.received}, gaps {check.gaps}, repeats {check.seq_errors}" if check else ""),
                  file=sys.stderr)
            return 1
        wall += took
        if took < best:
            best, best_cpu = took, took_cpu
        passes += 1
    print(json.dumps({"produced": records, "received": records, "wall_s": best, "cpu_s": best_cpu,
                      "rounds": passes, "gaps": 0, "seq_errors": 0, "p50_us": None, "p99_us": None,
                      "producer_full": 0}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
