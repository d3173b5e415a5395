"""Hypothesis properties of the batch path the readers share (no kernel needed).

Records go through the C collector libbpf calls back (plb_ringbuf_collect /
plb_perfbuf_collect*) into a plb_batch, then out through Batch: iteration,
indexing, the lost-notice split and to_numpy must give back exactly what went in.
"""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from pylibbpf import ffi, lib
from pylibbpf._batch import Batch, drained_batch
from pylibbpf._shim import plb_batch_new
from pylibbpf.events import defevent

records = st.lists(st.binary(min_size=0, max_size=300), max_size=60)


def collect_ring(recs: list[bytes], ring: int = 0, byte_limit: int = 0) -> tuple[Batch, int]:
    batch = plb_batch_new(4, 64)  # tiny, so the C side has to grow its arrays and buffer
    batch.byte_limit = byte_limit
    ctx = ffi.new("struct plb_rb_collect_ctx *", {"batch": batch, "ring": ring})
    taken = 0
    for rec in recs:
        buf = ffi.from_buffer(rec) if rec else ffi.NULL
        ret = lib.plb_ringbuf_collect(ctx, buf, len(rec))
        taken += 1
        if ret == lib.PLB_BATCH_FULL:
            break
        assert ret == 0
    return drained_batch(batch, with_tags=True), taken


@settings(max_examples=200, deadline=None)
@given(records, st.integers(0, 10))
def test_ring_records_come_back_unchanged_and_aligned(recs: list[bytes], ring: int) -> None:
    batch, _ = collect_ring(recs, ring)
    assert [bytes(v) for v in batch] == recs
    assert [bytes(batch[i]) for i in range(len(batch))] == recs
    assert all(start % 8 == 0 for start in batch.starts)
    assert list(batch.tags) == [ring] * len(recs)
    assert all(v.readonly for v in batch)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=200), min_size=1, max_size=60), st.integers(1, 2000))
def test_byte_limit_stops_after_the_record_that_crosses_it(recs: list[bytes], limit: int) -> None:
    batch, taken = collect_ring(recs, byte_limit=limit)
    assert [bytes(v) for v in batch] == recs[:taken]
    ends = [start + length for start, length in zip(batch.starts, batch.lens)]
    assert all(end < limit for end in ends[:-1])           # nothing stopped early ...
    assert taken == len(recs) or ends[-1] >= limit         # ... or late


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.integers(0, 7), st.binary(max_size=64)),
                          st.tuples(st.integers(0, 7), st.integers(1, 2**40))), max_size=50))
def test_perf_lost_notices_are_split_out_in_order(items: list[tuple[int, bytes | int]]) -> None:
    batch = plb_batch_new(4, 64)
    for cpu, item in items:
        if isinstance(item, bytes):
            lib.plb_perfbuf_collect(batch, cpu, ffi.from_buffer(item) if item else ffi.NULL, len(item))
        else:
            lib.plb_perfbuf_collect_lost(batch, cpu, item)
    out = drained_batch(batch, with_tags=True)
    notices = out.take_lost()
    assert notices == [(cpu, n) for cpu, n in items if isinstance(n, int)]
    samples = [(cpu, s) for cpu, s in items if isinstance(s, bytes)]
    assert [(cpu, bytes(v)) for cpu, v in zip(out.tags, out)] == samples


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(-(2**31), 2**31 - 1), st.binary(max_size=7)),
                min_size=1, max_size=60), st.booleans())
def test_to_numpy_equals_parsing_each_record(values: list[tuple[int, int, bytes]], padded: bool) -> None:
    ev = defevent("ev", ("a", "u64"), ("b", "i32"))
    recs = [struct.pack("<Qi", a, b) + (pad if padded else b"") for a, b, pad in values]
    batch, _ = collect_ring(recs)
    arr = batch.to_numpy(ev)
    assert [(int(r["a"]), int(r["b"])) for r in arr] == [(a, b) for a, b, _ in values]
    assert [(ev.parse(v).a, ev.parse(v).b) for v in batch] == [(a, b) for a, b, _ in values]


# --- zeros() and any_nonzero(): how a batch says "nothing flagged" without a list per record -----


def test_zeros_are_shared_read_only_and_known_to_be_zero() -> None:
    from pylibbpf._batch import any_nonzero, zeros

    small = zeros("?", 5)
    assert list(small) == [False] * 5 and small.readonly
    big = zeros("Q", (8 << 16) + 3)          # more than the first shared buffer: a larger one is added
    assert len(big) == (8 << 16) + 3 and not any_nonzero(big)
    assert not any_nonzero(zeros("I", 7)) and not any_nonzero(small)   # older views still known
    assert not any_nonzero(small[2:]) and not any_nonzero(zeros("Q", 0))


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 20_000)), min_size=1, max_size=40))
def test_repeated_lengths_are_right_and_read_only(sizes: list[tuple[int, int]]) -> None:
    """A uniform batch's ``lens``: n copies of its length from a buffer shared per length (grown for a
    larger n, made afresh past 16 lengths); a view handed out earlier keeps its values."""
    from pylibbpf._batch import repeated_u32, uniform_index

    kept = []
    for value, n in sizes:
        view = repeated_u32(value, n)
        assert len(view) == n and view.readonly and view.format == "I"
        assert view.tobytes() == value.to_bytes(4, "little") * n
        kept.append((value, n, view))
    for value, n, view in kept:
        assert list(view) == [value] * n
    starts, lens = uniform_index(5, 13)
    assert list(starts) == [0, 16, 32, 48, 64] and list(lens) == [13] * 5


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 300), at=st.integers(0, 299), value=st.integers(1, 2**64 - 1),
       fmt=st.sampled_from(["I", "Q"]))
def test_any_nonzero_sees_one_value_anywhere(n: int, at: int, value: int, fmt: str) -> None:
    import array

    from pylibbpf._batch import any_nonzero

    values = array.array(fmt, [0]) * n
    assert not any_nonzero(values) and not any_nonzero(memoryview(values)) and not any_nonzero([0] * n)
    values[at % n] = (value % 2**32 or 1) if fmt == "I" else value
    assert any_nonzero(values) and any_nonzero(memoryview(values)) and any_nonzero(list(values))
