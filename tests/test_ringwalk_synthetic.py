"""The C ring walkers (plb_rb_peek / plb_rb_read, read_into's plb_rb_wait_into, RingBuffer's
plb_rb_wait_drain) over synthetic rings in ordinary memory.

No kernel: a ring is a 2 x size bytearray whose second half mirrors the first
(what the kernel's double mapping gives), plus two u64 positions; records are
written the way kernel/bpf/ringbuf.c writes them (8-byte header: u32 len with
BUSY/DISCARD bits, u32 page offset; footprint round_up(len + 8, 8)).
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pylibbpf import ffi, lib
from pylibbpf._batch import SMALL_BATCH, drained_batch
from pylibbpf._rings import RecordBuffer, read_view

U64 = 1 << 64


def footprint(length: int) -> int:
    return (length + 8 + 7) & ~7


class SynthRing:
    """A ring buffer in a bytearray, driven from Python as a BPF producer would drive it."""

    def __init__(self, size: int, start: int = 0) -> None:
        assert size & (size - 1) == 0
        self.size = size
        self.mem = bytearray(2 * size)  # never resized: the view points into it
        self.data = ffi.from_buffer("uint8_t[]", self.mem)
        self.cons = ffi.new("uint64_t *", start)
        self.prod = ffi.new("uint64_t *", start)
        self.view: Any = ffi.new("struct plb_rb_view *", {
            "consumer_pos": self.cons, "producer_pos": self.prod, "data": self.data, "mask": size - 1})

    def write(self, pos: int, raw: bytes) -> None:
        """Write at ring position pos, in both copies (the double mapping)."""
        for i, b in enumerate(raw):
            idx = (pos + i) & (self.size - 1)
            self.mem[idx] = b
            self.mem[idx + self.size] = b

    def put(self, payload: bytes, *, busy: bool = False, discard: bool = False) -> int:
        """Reserve (and unless busy, commit) a record at the producer position; returns its position."""
        pos = self.prod[0]
        flags = (lib.PLB_RB_BUSY_BIT if busy else 0) | (lib.PLB_RB_DISCARD_BIT if discard else 0)
        self.write(pos, struct.pack("<II", len(payload) | flags, 0) + payload)
        self.prod[0] = (pos + footprint(len(payload))) % U64
        return int(pos)

    def commit(self, pos: int, *, discard: bool = False) -> None:
        """Clear BUSY on the record at pos (bpf_ringbuf_submit / _discard)."""
        idx = pos & (self.size - 1)
        length = struct.unpack_from("<I", self.mem, idx)[0] & ~(lib.PLB_RB_BUSY_BIT | lib.PLB_RB_DISCARD_BIT)
        self.write(pos, struct.pack("<I", length | (lib.PLB_RB_DISCARD_BIT if discard else 0)))

    def read(self, max_records: int = 1024, out_cap: int = 1 << 16, consume: bool = True) -> tuple[int, list[bytes]]:
        """plb_rb_read: (return code, records)."""
        out = ffi.new("uint8_t[]", max(out_cap, 1))
        starts = ffi.new("uint32_t[]", max(max_records, 1))
        lens = ffi.new("uint32_t[]", max(max_records, 1))
        used = ffi.new("size_t *")
        n = lib.plb_rb_read(self.view, out, out_cap, starts, lens, max_records, int(consume), used)
        if n <= 0:
            return n, []
        blob = ffi.buffer(out, used[0])[:]
        assert used[0] == starts[n - 1] + lens[n - 1]
        assert all(starts[i] % 8 == 0 for i in range(n))
        return n, [blob[starts[i]:starts[i] + lens[i]] for i in range(n)]


def payload(i: int, length: int) -> bytes:
    return bytes((i * 7 + j) & 0xFF for j in range(length))


def test_empty_ring_reads_nothing() -> None:
    ring = SynthRing(4096)
    assert ring.read() == (0, [])
    assert lib.plb_rb_available(ring.view) == 0
    assert lib.plb_rb_peek(ring.view, 0, ffi.NULL, ffi.NULL, ffi.NULL) == lib.PLB_RB_EMPTY


def test_records_come_out_in_order_and_consume_moves_the_position() -> None:
    ring = SynthRing(4096)
    recs = [payload(i, n) for i, n in enumerate([1, 8, 13, 0, 100])]
    for r in recs:
        ring.put(r)
    assert lib.plb_rb_available(ring.view) == sum(footprint(len(r)) for r in recs)
    assert ring.read() == (5, recs)
    assert ring.cons[0] == ring.prod[0]
    assert lib.plb_rb_consumer_pos(ring.view) == ring.prod[0]
    assert lib.plb_rb_available(ring.view) == 0


@pytest.mark.parametrize("start", [4096 - 8, 4096 - 16, 4096 - 24, 2 * 4096 - 40, U64 - 32, U64 - 8])
def test_a_record_across_the_wrap_is_contiguous(start: int) -> None:
    ring = SynthRing(4096, start)
    recs = [payload(1, 40), payload(2, 3), payload(3, 200)]
    for r in recs:
        ring.put(r)
    assert ring.read() == (3, recs)
    assert ring.cons[0] == ring.prod[0] == (start + sum(footprint(len(r)) for r in recs)) % U64


def test_peek_does_not_consume_and_two_peeks_are_equal() -> None:
    ring = SynthRing(4096, 4096 - 16)
    for i in range(5):
        ring.put(payload(i, 20 + i))
    first = ring.read(consume=False)
    assert first == ring.read(consume=False)
    assert first[0] == 5 and ring.cons[0] == 4096 - 16
    assert ring.read() == first


def test_busy_head_stops_the_walk_until_committed() -> None:
    ring = SynthRing(4096)
    ring.put(payload(0, 10))
    ring.put(payload(1, 10))
    busy = ring.put(payload(2, 10), busy=True)
    ring.put(payload(3, 10))  # committed, but behind a busy record: not ours yet
    assert ring.read() == (2, [payload(0, 10), payload(1, 10)])
    assert ring.cons[0] == busy
    assert lib.plb_rb_peek(ring.view, busy, ffi.NULL, ffi.NULL, ffi.NULL) == lib.PLB_RB_BUSY
    assert ring.read() == (0, [])
    assert ring.cons[0] == busy
    ring.commit(busy)
    assert ring.read() == (2, [payload(2, 10), payload(3, 10)])


def test_discarded_records_are_skipped_and_consumed() -> None:
    ring = SynthRing(4096)
    ring.put(payload(0, 5), discard=True)
    ring.put(payload(1, 6))
    ring.put(payload(2, 7), discard=True)
    ring.put(payload(3, 8), discard=True)
    ring.put(payload(4, 9))
    assert ring.read() == (2, [payload(1, 6), payload(4, 9)])
    assert ring.cons[0] == ring.prod[0]
    # only discards: nothing returned, but the position moves past them
    ring.put(payload(5, 5), discard=True)
    busy = ring.put(payload(6, 5), busy=True)
    ring.commit(busy, discard=True)
    assert ring.read() == (0, [])
    assert ring.cons[0] == ring.prod[0]


def test_peek_reports_each_kind_with_the_next_position() -> None:
    ring = SynthRing(4096)
    rec = ring.put(payload(0, 12))
    dis = ring.put(payload(1, 3), discard=True)
    data = ffi.new("void **")
    length = ffi.new("uint32_t *")
    nxt = ffi.new("uint64_t *")
    assert lib.plb_rb_peek(ring.view, rec, data, length, nxt) == lib.PLB_RB_RECORD
    assert length[0] == 12 and nxt[0] == dis
    assert ffi.buffer(ffi.cast("uint8_t *", data[0]), 12)[:] == payload(0, 12)
    assert lib.plb_rb_peek(ring.view, dis, data, length, nxt) == lib.PLB_RB_DISCARD
    assert nxt[0] == ring.prod[0]
    assert lib.plb_rb_peek(ring.view, nxt[0], data, length, nxt) == lib.PLB_RB_EMPTY


def test_max_records_and_commit() -> None:
    ring = SynthRing(4096)
    for i in range(10):
        ring.put(payload(i, 16))
    assert ring.read(max_records=3) == (3, [payload(i, 16) for i in range(3)])
    assert ring.cons[0] == 3 * footprint(16)
    lib.plb_rb_commit(ring.view, 5 * footprint(16))  # the consumer may also skip ahead itself
    assert ring.read() == (5, [payload(i, 16) for i in range(5, 10)])


def test_a_head_larger_than_the_buffer_is_reported_with_its_size() -> None:
    ring = SynthRing(4096)
    ring.put(payload(0, 300))
    out = ffi.new("uint8_t[]", 64)
    starts, lens, used = ffi.new("uint32_t[]", 4), ffi.new("uint32_t[]", 4), ffi.new("size_t *")
    assert lib.plb_rb_read(ring.view, out, 64, starts, lens, 4, 1, used) == -lib.EMSGSIZE
    assert used[0] == 300 and ring.cons[0] == 0  # still in the ring
    # a later record that does not fit ends the batch instead
    ring2 = SynthRing(4096)
    ring2.put(payload(0, 10))
    ring2.put(payload(1, 300))
    assert ring2.read(out_cap=64) == (1, [payload(0, 10)])
    assert ring2.read(out_cap=512) == (1, [payload(1, 300)])


def test_the_python_reader_grows_its_buffer_for_a_large_record() -> None:
    ring = SynthRing(8192)
    recs = [payload(0, 8), payload(1, 3000), payload(2, 8)]
    for r in recs:
        ring.put(r)
    buf = RecordBuffer(2, 16)
    got = read_view(ring.view, buf, 2, True, "synthetic")
    got += read_view(ring.view, buf, 2, True, "synthetic")
    assert got == recs and buf.cap >= 3000


@pytest.mark.parametrize("corrupt", ["length past producer", "misaligned consumer",
                                     "consumer behind by more than the ring"])
def test_corrupt_rings_are_refused(corrupt: str) -> None:
    ring = SynthRing(4096)
    ring.put(payload(0, 16))
    if corrupt == "length past producer":
        ring.write(0, struct.pack("<I", 5000))
    elif corrupt == "misaligned consumer":
        ring.cons[0] = 4
    else:
        ring.prod[0] = 4096 + 64
    cons = ring.cons[0]
    assert ring.read()[0] == -lib.EBADMSG
    assert ring.cons[0] == cons  # nothing consumed
    with pytest.raises(OSError, match="Bad message"):
        read_view(ring.view, RecordBuffer(4, 64), 4, True, "synthetic")


def test_a_corrupt_record_after_good_ones_is_reported_by_the_next_call() -> None:
    ring = SynthRing(4096)
    ring.put(payload(0, 16))
    bad = ring.put(payload(1, 16))
    ring.write(bad, struct.pack("<I", 5000))
    assert ring.read() == (1, [payload(0, 16)])
    assert ring.read()[0] == -lib.EBADMSG


def wait_into(rings: list[SynthRing], st: Any, first: int = 0) -> tuple[int, int, int]:
    """plb_rb_wait_into without a wait (timeout 0: the waiter is not touched) from ring ``first``:
    (result, the ring it stopped at, its error)."""
    views = ffi.new("struct plb_rb_view *[]", [r.view for r in rings])
    ring, err = ffi.new("uint32_t *", first), ffi.new("int *", 12345)
    ret = lib.plb_rb_wait_into(ffi.new("struct plb_waiter *"), 0, views, len(rings), st, ring, err)
    return ret, int(ring[0]), int(err[0])


def test_wait_into_fills_the_rings_in_turn_and_stops_at_an_odd_record_an_error_or_full_rows() -> None:
    """read_into's one C call for ring buffers (plb_rb_wait_into), over synthetic rings."""
    a, b = SynthRing(4096), SynthRing(4096)
    rows = bytearray(16 * 4)
    st = ffi.new("struct plb_into *", {"out": ffi.from_buffer("uint8_t[]", rows), "rows": 4, "rec_size": 16})
    assert wait_into([a, b], st) == (1, 2, 0)            # both empty: ready, every ring read
    a.put(payload(0, 16))
    a.put(payload(1, 40))                                # odd: stops at ring 0, kept in st.odd
    a.put(payload(2, 16))
    b.put(payload(3, 16))
    assert wait_into([a, b], st) == (lib.PLB_INTO_STOPPED, 0, 0)
    assert st.stop == lib.PLB_INTO_ODD and ffi.buffer(st.odd, st.odd_len)[:] == payload(1, 40)
    assert wait_into([a, b], st, first=0) == (1, 2, 0)   # on from ring 0, then ring 1
    assert st.n == 3 and bytes(rows[:48]) == payload(0, 16) + payload(2, 16) + payload(3, 16)
    for i in range(4, 7):
        b.put(payload(i, 16))
    assert wait_into([a, b], st) == (1, 1, 0)            # full at ring 1: not a stop to handle
    assert st.stop == lib.PLB_INTO_FULL and st.n == 4 and bytes(rows[48:]) == payload(4, 16)
    st.n = 0
    bad = a.put(payload(7, 16))
    a.write(bad, struct.pack("<I", 5000))                # corrupt, and no row filled yet: its error
    assert wait_into([a, b], st) == (lib.PLB_INTO_STOPPED, 0, -lib.EBADMSG) and st.n == 0
    assert a.cons[0] == bad                              # nothing consumed past the good records
    assert wait_into([b, a], st) == (1, 2, 0)            # after rows: the next call meets it again
    assert st.n == 2 and bytes(rows[:32]) == payload(5, 16) + payload(6, 16)
    lib.plb_into_release(st)


def test_bad_arguments() -> None:
    ring = SynthRing(4096)
    used = ffi.new("size_t *")
    assert lib.plb_rb_read(ffi.NULL, ffi.NULL, 0, ffi.NULL, ffi.NULL, 0, 1, used) == -lib.EINVAL
    assert lib.plb_rb_read(ring.view, ffi.NULL, 0, ffi.NULL, ffi.NULL, 4, 1, used) == -lib.EINVAL


record = st.tuples(st.integers(0, 200), st.booleans())  # (payload length, discarded)


@settings(max_examples=200, deadline=None)
@given(records=st.lists(record, max_size=60),
       start=st.one_of(st.integers(0, 4096 // 8).map(lambda k: k * 8),
                       st.integers(1, 64).map(lambda k: U64 - 8 * k)),
       chunk=st.integers(1, 17), out_cap=st.integers(208, 2048))
def test_any_sequence_reads_back_exactly(records: list[tuple[int, bool]], start: int, chunk: int,
                                         out_cap: int) -> None:
    ring = SynthRing(8192, start)
    expected = []
    for i, (length, discard) in enumerate(records):
        body = payload(i, length)
        ring.put(body, discard=discard)
        if not discard:
            expected.append(body)
    assert lib.plb_rb_available(ring.view) == sum(footprint(n) for n, _ in records)
    assert ring.read(max_records=len(expected) or 1, out_cap=1 << 16, consume=False)[1] == expected
    got: list[bytes] = []
    for _ in range(len(records) + 1):
        n, recs = ring.read(max_records=chunk, out_cap=out_cap)
        assert n >= 0
        assert n <= chunk
        got += recs
        if n == 0:
            break
    assert got == expected
    assert ring.cons[0] == ring.prod[0]


def drain(rings: list[SynthRing], batch: Any, max_records: int = 1 << 16) -> tuple[int, int, list[tuple[int, bytes]]]:
    """plb_rb_wait_drain without a wait (RingBuffer's drain) over synthetic rings:
    (result, drained, the batch's records as (ring, bytes))."""
    views = ffi.new("struct plb_rb_view *[]", [r.view for r in rings])
    drained = ffi.new("int *", 12345)
    ret = lib.plb_rb_wait_drain(ffi.new("struct plb_waiter *"), 0, views, len(rings), batch, max_records, drained)
    # Read back as RingBuffer does (Batch knows a uniform batch's implicit entries).
    got = drained_batch(batch, with_tags=True)
    assert all(start % 8 == 0 for start in got.starts) and not any(got.lost)
    return ret, int(drained[0]), [(tag, bytes(rec)) for tag, rec in zip(got.tags, got)]


def test_the_batch_drain_reads_the_rings_in_turn_and_releases_each_once() -> None:
    a, b = SynthRing(4096), SynthRing(4096)
    batch = lib.plb_batch_new(2, 64)                     # tiny: the arrays and buffer must grow
    try:
        assert drain([a, b], batch) == (1, 0, [])          # nothing ready: ready, no records
        a.put(payload(0, 16))
        assert drain([a, b], batch) == (lib.PLB_DRAIN_ONE, 1, [(0, payload(0, 16))])
        a.put(payload(1, 5))
        a.put(payload(2, 30), discard=True)               # skipped, and consumed
        a.put(payload(3, 0))
        b.put(payload(4, 100))
        assert drain([a, b], batch) == (1, 3, [(0, payload(1, 5)), (0, payload(3, 0)), (1, payload(4, 100))])
        assert (a.cons[0], b.cons[0]) == (a.prod[0], b.prod[0])
        busy = a.put(payload(5, 8), busy=True)            # a busy head stops its ring; the next one is read
        a.put(payload(6, 8))
        b.put(payload(7, 8))
        assert drain([a, b], batch) == (lib.PLB_DRAIN_ONE, 1, [(1, payload(7, 8))])
        assert a.cons[0] == busy
        a.commit(busy)
        assert drain([a, b], batch)[2] == [(0, payload(5, 8)), (0, payload(6, 8))]
        for i in range(8, 13):
            (a if i % 2 else b).put(payload(i, 8))
        ret, n, recs = drain([a, b], batch, max_records=3)   # max counts every ring's records
        assert (ret, n, recs) == (1, 3, [(0, payload(9, 8)), (0, payload(11, 8)), (1, payload(8, 8))])
        assert drain([a, b], batch)[2] == [(1, payload(10, 8)), (1, payload(12, 8))]
    finally:
        lib.plb_batch_free(batch)


def test_the_batch_drain_stops_at_its_byte_limit_after_the_record_that_reaches_it() -> None:
    ring = SynthRing(4096)
    batch = lib.plb_batch_new(4, 64)
    batch.byte_limit = 40
    try:
        for i in range(4):
            ring.put(payload(i, 16))
        ret, n, recs = drain([ring], batch)                 # 16, 16 -> 40 (aligned): stops after the third
        assert (ret, n, recs) == (1, 3, [(0, payload(i, 16)) for i in range(3)]) and batch.full
        assert drain([ring], batch) == (lib.PLB_DRAIN_ONE, 1, [(0, payload(3, 16))]) and not batch.full
    finally:
        lib.plb_batch_free(batch)


def test_the_batch_drain_reports_a_corrupt_head_when_it_took_nothing() -> None:
    a, b = SynthRing(4096), SynthRing(4096)
    batch = lib.plb_batch_new(4, 64)
    try:
        a.put(payload(0, 16))
        bad = a.put(payload(1, 16))
        a.write(bad, struct.pack("<I", 5000))
        b.put(payload(2, 16))
        # Ring a's good record, then its corrupt head: the drain goes on to ring b.
        assert drain([a, b], batch) == (1, 2, [(0, payload(0, 16)), (1, payload(2, 16))])
        assert a.cons[0] == bad
        ret, n, recs = drain([a, b], batch)                 # nothing taken from it now: its error
        assert (ret, n, recs) == (lib.PLB_DRAIN_CHECK, -lib.EBADMSG, []) and a.cons[0] == bad
    finally:
        lib.plb_batch_free(batch)


@settings(max_examples=200, deadline=None)
@given(records=st.lists(record, max_size=60),
       start=st.one_of(st.integers(0, 4096 // 8).map(lambda k: k * 8),
                       st.integers(1, 64).map(lambda k: U64 - 8 * k)),
       chunk=st.integers(1, 17), byte_limit=st.sampled_from([0, 8, 100, 1000]))
def test_the_batch_drain_reads_any_sequence_back_exactly(records: list[tuple[int, bool]], start: int, chunk: int,
                                                          byte_limit: int) -> None:
    ring = SynthRing(8192, start)
    expected = []
    for i, (length, discard) in enumerate(records):
        ring.put(payload(i, length), discard=discard)
        if not discard:
            expected.append((0, payload(i, length)))
    batch = lib.plb_batch_new(2, 64)
    batch.byte_limit = byte_limit
    got: list[tuple[int, bytes]] = []
    try:
        for _ in range(len(records) + 1):
            ret, n, recs = drain([ring], batch, max_records=chunk)
            assert ret == (lib.PLB_DRAIN_ONE if n == 1 else 1) and n == len(recs) <= chunk
            got += recs
            if not n:
                break
    finally:
        lib.plb_batch_free(batch)
    assert got == expected
    assert ring.cons[0] == ring.prod[0]


def test_records_of_one_size_make_a_uniform_batch_until_one_differs() -> None:
    """plb_batch.h's uniform batch: only record 0's offsets are written while the records
    allow it; a record of another size, of another ring or a size not a multiple of 8 spells
    the others out first. Read back through Batch, the records are the same either way."""
    a, b = SynthRing(1 << 16), SynthRing(1 << 16)
    batch = lib.plb_batch_new(4, 64)
    try:
        for n in (2, SMALL_BATCH, 3 * SMALL_BATCH):        # lists, then a range of starts
            for i in range(n):
                a.put(payload(i, 24))
            ret, got, recs = drain([a, b], batch)
            assert batch.uniform and (ret, got) == (1, n) and recs == [(0, payload(i, 24)) for i in range(n)]
        for i in range(100):
            a.put(payload(i, 16))
        a.put(payload(100, 40))                            # another size: the 100 spelled out first
        for i in range(101, 150):
            a.put(payload(i, 16))
        b.put(payload(150, 16))                            # same size, another ring
        ret, got, recs = drain([a, b], batch)
        assert not batch.uniform and got == 151
        assert recs == [(0, payload(i, 40 if i == 100 else 16)) for i in range(150)] + [(1, payload(150, 16))]
        for i in range(50):
            a.put(payload(i, 12))                          # not a multiple of 8: padded, never uniform
        assert drain([a], batch)[2] == [(0, payload(i, 12)) for i in range(50)] and not batch.uniform
    finally:
        lib.plb_batch_free(batch)


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.sampled_from([0, 5, 8, 16, 16, 16, 24]), min_size=1, max_size=80),
       rings=st.lists(st.integers(0, 1), min_size=1, max_size=80), chunk=st.integers(1, 100))
def test_uniform_runs_and_their_breaks_read_back_exactly(sizes: list[int], rings: list[int], chunk: int) -> None:
    pair = [SynthRing(1 << 14), SynthRing(1 << 14)]
    expected: list[list[tuple[int, bytes]]] = [[], []]
    for i, size in enumerate(sizes):
        r = rings[i % len(rings)]
        pair[r].put(payload(i, size))
        expected[r].append((r, payload(i, size)))
    batch = lib.plb_batch_new(2, 64)
    got: list[tuple[int, bytes]] = []
    try:
        for _ in range(len(sizes) + 1):
            _, n, recs = drain(pair, batch, max_records=chunk)
            got += recs
            if not n:
                break
    finally:
        lib.plb_batch_free(batch)
    # Ring by ring, each in its own order (a drain reads ring 0, then ring 1).
    assert [rec for rec in got if rec[0] == 0] == expected[0]
    assert [rec for rec in got if rec[0] == 1] == expected[1]
