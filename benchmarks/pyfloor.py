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
from typing import Any, TypeVar

from .harness import U64, SeqCheck

CHUNK = 2048
S = TypeVar("S")
R = TypeVar("R")


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


def fastest_pass(setup: Callable[[], S], run: Callable[[S], R], verify: Callable[[S, R], str | None],
                 min_time: float) -> tuple[float, float, int] | str:
    """Passes until ``min_time`` seconds of them and at least 3 (at most 100 000): each
    ``setup()`` (untimed), ``run(state)`` (timed, wall and CPU), ``verify(state, result)``
    (untimed; a message stops the passes and is returned). The result is dropped before the
    next pass, as a reader's caller drops each batch. Returns the fastest pass's wall and CPU
    seconds and the number of passes: a floor, the pass the host disturbed least."""
    wall = 0.0
    best = best_cpu = float("inf")
    passes = 0
    while (wall < min_time or passes < 3) and passes < 100_000:
        state = setup()
        t0, c0 = time.perf_counter(), time.process_time()
        result = run(state)
        took, took_cpu = time.perf_counter() - t0, time.process_time() - c0
        wrong = verify(state, result)
        del result
        if wrong:
            return wrong
        wall += took
        if took < best:
            best, best_cpu = took, took_cpu
        passes += 1
    return best, best_cpu, passes


def floor_args(argv: list[str], doc: str | None) -> tuple[int, dict[str, str], float] | None:
    """A floor's command line, ``SIZE [KEY=VALUE ...]``: the size, the options, and
    ``min_time_ms`` in seconds (0.3 by default); None, after printing the usage line of
    ``doc`` (the module's docstring), when there is no argument."""
    if not argv:
        print((doc or "").split("\n")[1], file=sys.stderr)
        return None
    opts = dict(arg.split("=", 1) for arg in argv[1:])
    return int(argv[0]), opts, int(opts.get("min_time_ms", "300")) / 1000


def report(name: str, records: int, timed: tuple[float, float, int] | str) -> int:
    """Print what :func:`fastest_pass` returned and give the exit status: its message on stderr
    (1), or the JSON line with the fields the suite reads from its C programs (0)."""
    if isinstance(timed, str):
        print(f"{name}: {timed}", file=sys.stderr)
        return 1
    wall_s, cpu_s, passes = timed
    print(json.dumps({"produced": records, "received": records, "wall_s": wall_s, "cpu_s": cpu_s,
                      "rounds": passes, "gaps": 0, "seq_errors": 0, "p50_us": None, "p99_us": None,
                      "producer_full": 0}))
    return 0


def main(argv: list[str]) -> int:
    args = floor_args(argv, __doc__)
    if args is None:
        return 2
    size, opts, min_time = args
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

    def setup() -> tuple[Callable[[memoryview], Any], SeqCheck | None]:
        return pass_callback(kind)

    def run(state: tuple[Callable[[memoryview], Any], SeqCheck | None]) -> int:
        return one_pass(view, slices, per_chunk * stride, chunks, state[0])

    def verify(state: tuple[Callable[[memoryview], Any], SeqCheck | None], got: int) -> str | None:
        check = state[1]
        if got != records or (check is not None and (check.received, check.gaps, check.seq_errors) != (records, 0, 0)):
            return (f"a pass handed over {got} records of {records}"
                    + (f", checked {check.received}, gaps {check.gaps}, repeats {check.seq_errors}" if check else ""))
        return None

    return report("pyfloor", records, fastest_pass(setup, run, verify, min_time))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
