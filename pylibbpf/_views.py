"""Per-record memoryviews of a batch at the lowest Python cost: the callback paths' hot loop.

A callback gets ``view[start:end]``, a read-only memoryview of its record in
the batch's memory. Making that view is most of what a callback path costs per
record beyond the call itself, and making its ``slice`` (two ints boxed from
the offset arrays, then the slice) costs about as much again. Batches of
equal-size records -- what fixed-size events give, nearly always -- sit back
to back at one 8-byte stride, so their slices are the same for every batch:
:func:`uniform_stride` recognises such a batch at memory speed (no Python
object per record) and :func:`chunk_slices` hands out cached slice objects
relative to the start of a chunk of :data:`CHUNK` records. The caller slices
the batch's view once per chunk (``view[chunk start:]``) and each record once
with a cached slice (``chunk[s]``); the record views are the same bytes either
way, read-only, and keep the batch's memory alive as long as they are held.
"""

from __future__ import annotations

import array
import sys
from collections.abc import Iterator, Sequence
from itertools import islice
from operator import length_hint

#: Records per chunk: the cached slices of one record size cover one chunk
#: (about 90 bytes each: a slice and its ints), and a chunk costs one extra view.
CHUNK = 2048
#: Fewer records than this take the per-record path: recognising a uniform batch
#: costs about what a few slices do (the latency case: one record per wakeup).
MIN_RECORDS = 8
#: Record sizes whose slices are kept at a time (past it the cache starts over).
_MAX_SIZES = 16

_slices: dict[tuple[int, int, int], list[slice]] = {}   # (stride, length, CHUNK) -> CHUNK slices


def uniform_stride(starts: Sequence[int], lens: Sequence[int], first: int, n: int) -> int:
    """The stride when records ``first..n-1`` all have one length and sit back to back; 0 otherwise.

    ``starts``/``lens`` are a batch's offset arrays (``array.array('I')``, or
    lists for small batches; a ``range`` of starts for a uniform batch) as the
    C collectors write them: each record starts at the 8-byte aligned end of
    the one before, in order (``plb_batch_append``),
    so equal lengths ``L`` and a last start ``(n - 1 - first) * S`` past the
    first (``S``: ``L`` rounded up to 8) mean every record is ``S`` after the
    one before. A zero length gives 0 (nothing to gain, and perf's lost-sample
    notices have no bytes), and so do fewer than :data:`MIN_RECORDS` records.
    """
    count = n - first
    if count < MIN_RECORDS:
        return 0
    length = lens[first]
    stride = (length + 7) & ~7
    if not length or starts[n - 1] - starts[first] != (count - 1) * stride:
        return 0
    if type(starts) is range:   # a uniform batch (plb_batch.h): one length, back to back, by construction
        return stride
    if isinstance(lens, list):
        same = lens[first:n].count(length) == count
    elif isinstance(lens, array.array):
        # Bytes compared with memcmp: no int object per record.
        mine = lens[first:n] if first else lens
        same = mine.tobytes() == length.to_bytes(mine.itemsize, sys.byteorder) * count
    else:
        same = all(x == length for x in islice(lens, first, n))
    return stride if same else 0


def chunk_slices(stride: int, length: int) -> list[slice]:
    """``CHUNK`` slices ``k*stride : k*stride + length`` (k from 0), made once per record size.

    A chunk is as long as the list (callers take ``len()``). Shared by every
    reader (slices are immutable); the list is never changed once made, so a
    reader in another thread may iterate over it meanwhile.
    """
    chunk = CHUNK
    key = (stride, length, chunk)
    got = _slices.get(key)
    if got is None:
        starts = list(range(0, (chunk + 1) * stride, stride))
        ends = starts[1:] if stride == length else list(range(length, chunk * stride + length, stride))
        got = list(map(slice, starts, ends))
        if len(_slices) >= _MAX_SIZES:
            _slices.clear()
        _slices[key] = got
    return got


class Chunks:
    """The records ``first..n-1`` of a uniform batch, one chunk at a time, and how many were taken.

    Iterating yields ``(pos, chunk, it)``: the index of the chunk's first
    record, a view of the batch from that record on, and an iterator over the
    cached slices of the chunk's records (``chunk[s]`` is one record's view).
    :meth:`taken` is the index after the last record whose slice was taken
    from an iterator: whatever interrupts the caller's loop (a callback's
    exception, a stop, a signal), it is exact, because the chunk's end and its
    iterator are replaced together in one store.
    """

    __slots__ = ("_state",)

    def __init__(self, first: int) -> None:
        self._state: tuple[int, Iterator[slice]] = (first, iter(()))

    def taken(self) -> int:
        end, it = self._state
        return end - length_hint(it)

    def over(self, view: memoryview, starts: Sequence[int], slices: list[slice],
             n: int) -> Iterator[tuple[int, memoryview, Iterator[slice]]]:
        """Chunks until record ``n``; ``slices`` from :func:`chunk_slices` for the batch's stride and length."""
        while self._state[0] < n:
            pos = self._state[0]
            part = slices if n - pos >= len(slices) else slices[:n - pos]
            it = iter(part)
            self._state = (pos + len(part), it)
            yield pos, view[starts[pos]:], it
