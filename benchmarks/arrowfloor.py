"""The second pass's floor for ``read_batch().to_arrow()``:
``python -m benchmarks.arrowfloor SIZE [min_time_ms=300]``.

``read_batch()`` copies a drain's records into a batch (one 1 MiB drain at
most: ``RingBuffer``'s batch buffer); ``to_numpy`` then views that batch,
while ``to_arrow`` reads it once more into fresh columns. This measures that
second pass alone: the producer fills the ring once, one ``read_batch(0)``
takes the first drain's batch -- the layout every drain of the benchmark
gives -- and the ring is closed; then ``batch.to_arrow(event)`` runs on that
batch, in cache as a drain leaves it, until ``min_time_ms`` and at least 3
passes have run. The fastest pass is kept (a floor: the pass the host
disturbed least), as benchmarks/pyfloor.py and benchmarks/c/memcpy_bw.c keep
theirs. The first pass's RecordBatch is checked: as many rows as the batch
has records, the ``seq`` column the numbers produced (0, 1, 2, ...); a wrong
one fails the run.

``py-arrow-floor`` in the suite: its ``× numpy`` is the to_arrow target's
ceiling in the same repetition, ``P / (P + R)`` for this pass's rate ``P``
and the numpy drain's ``R`` (benchmarks/__main__.py, ``add_ratios``). Prints
one JSON line with the fields the suite reads from its C programs. Needs
root (it loads the producer), as the rest of the suite does.
"""

from __future__ import annotations

import sys
from typing import Any

from .consumers_py import RING_MAP, closing, event_def, libbpf_producer
from .producers import online_cpus, pin
from .pyfloor import fastest_pass, floor_args, report


def first_batch(size: int) -> Any:
    """One drain's batch of the benchmark's SIZE-byte events, the ring and its object closed."""
    from pylibbpf import RingBuffer
    from pylibbpf.ringbuf import DEFAULT_BATCH_BYTES

    obj, trigger, _ = libbpf_producer("ringbuf", size)
    rb = RingBuffer(obj.maps[RING_MAP], lambda data: None)
    try:
        # Twice what one drain takes: the batch is cut by the drain's buffer, not by the ring running dry.
        left = 2 * DEFAULT_BATCH_BYTES // size
        while left:
            got = trigger(min(left, 1 << 16))
            if not got:
                raise RuntimeError(f"arrowfloor: the producer stopped with {left} events left")
            left -= got
        return rb.read_batch(0)
    finally:
        closing(rb, obj)()


def check_rows(rows: Any, records: int) -> str | None:
    """What is wrong with the first pass's RecordBatch, or None."""
    import numpy as np

    if rows.num_rows != records:
        return f"{rows.num_rows} rows for {records} records"
    seq = rows.column("seq").to_numpy()
    if not np.array_equal(seq, np.arange(records, dtype=seq.dtype)):
        return "the seq column is not 0, 1, 2, ..."
    return None


def main(argv: list[str]) -> int:
    args = floor_args(argv, __doc__)
    if args is None:
        return 2
    size, _, min_time = args
    if size < 16:
        print(f"arrowfloor: SIZE must be >= 16 (the event's u64 seq and ts), got {size}", file=sys.stderr)
        return 2
    pin(online_cpus()[0])   # where the suite's drain consumers run
    ev = event_def(size)
    batch = first_batch(size)
    records = len(batch)
    wrong = check_rows(batch.to_arrow(ev), records)
    if wrong:
        print(f"arrowfloor: {wrong}", file=sys.stderr)
        return 1
    # The first RecordBatch was checked above; the timed passes convert the same batch again.
    return report("arrowfloor", records,
                  fastest_pass(lambda: None, lambda _: batch.to_arrow(ev), lambda _, rows: None, min_time))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
