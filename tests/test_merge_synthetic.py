"""The C merge core (csrc/plb_merge.c) over synthetic perf rings in ordinary memory, driven from Python.

No kernel, no privileges. A ring is a control page (struct perf_event_mmap_page,
its field offsets from the compiler through the cdef) followed by its data;
records are written the way the kernel writes them (struct perf_event_header,
then for PERF_SAMPLE_RAW a u32 size and the raw bytes, padded so the record is
8-aligned; PERF_RECORD_LOST: u64 id, u64 lost) and published by storing
data_head. This is a smoke test of the Python-facing contract; tests/c/test_merge.c
covers the core in depth under ASan/UBSan (`make sanitize`).
"""

from __future__ import annotations

import errno
import mmap
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pylibbpf import defevent, ffi, lib
from pylibbpf._batch import SMALL_BATCH, OrderedBatch

U64 = struct.Struct("<Q")
PAGE = mmap.PAGESIZE
HOUR_NS = 3600 * 10**9


def now_ns() -> int:
    return int(lib.plb_clock_monotonic(ffi.NULL))


def header(rtype: int, size: int) -> bytes:
    h = ffi.new("struct perf_event_header *")
    h.type, h.misc, h.size = rtype, 0, size
    return bytes(ffi.buffer(h))


class FakePerfRing:
    """One CPU's perf ring in ordinary memory, written from Python as the kernel would."""

    def __init__(self, size: int, start: int = 0, with_time: bool = False) -> None:
        self.size = size
        self.with_time = with_time
        self.mem = ffi.new("uint64_t[]", (PAGE + size) // 8)   # 8-aligned, zeroed
        self.base = ffi.cast("uint8_t *", self.mem)
        self.page = ffi.cast("struct perf_event_mmap_page *", self.mem)
        self.page.data_offset, self.page.data_size = PAGE, size
        self.page.data_head = self.page.data_tail = start
        self.data = ffi.buffer(self.base + PAGE, size)
        self.head = start
        self.written = 0

    def write(self, raw: bytes) -> None:
        """Append raw bytes at the private head, wrapping at the end of the data area."""
        for i in range(0, len(raw)):
            self.data[(self.head + i) % self.size] = raw[i:i + 1]
        self.head = (self.head + len(raw)) % 2**64   # positions are u64s and wrap too
        self.written += len(raw)

    def sample(self, payload: bytes, time_ns: int = 0, raw_size: int | None = None) -> int:
        """A PERF_RECORD_SAMPLE: [u64 time,] u32 size, payload padded so the record is 8-aligned.

        Returns the ring position of the payload."""
        fixed = 8 if self.with_time else 0
        pad = (-(8 + fixed + 4 + len(payload))) % 8
        body = payload + bytes(pad)
        size = 8 + fixed + 4 + len(body)
        raw = header(lib.PERF_RECORD_SAMPLE, size)
        if self.with_time:
            raw += U64.pack(time_ns)
        raw += struct.pack("<I", len(body) if raw_size is None else raw_size) + body
        at = (self.head + len(raw) - len(body)) % 2**64
        self.write(raw)
        return at

    def lost(self, count: int) -> None:
        self.write(header(lib.PERF_RECORD_LOST, 24) + U64.pack(0) + U64.pack(count))

    def publish(self) -> None:
        self.page.data_head = self.head

    @property
    def tail(self) -> int:
        return int(self.page.data_tail)


def event(ts: int, tag: int, extra: bytes = b"") -> bytes:
    """A payload with its u64 timestamp at offset 0."""
    return U64.pack(ts) + struct.pack("<I", tag) + extra


class Merge:
    """plb_merge over fake rings, with its output arrays."""

    def __init__(self, rings: list[FakePerfRing], *, window_ns: int = 5_000_000, ts_offset: int = 0,
                 kernel_time: bool = False, late_drop: bool = False, permille: int = 0,
                 buf_size: int = 1 << 16, max_records: int = 256) -> None:
        cfg = ffi.new("struct plb_merge_config *")
        cfg.ts_mode = lib.PLB_TS_KERNEL if kernel_time else lib.PLB_TS_OFFSET
        cfg.ts_offset = ts_offset
        cfg.sample_type = lib.PLB_PERF_SAMPLE_RAW | (lib.PLB_PERF_SAMPLE_TIME if kernel_time else 0)
        cfg.window_ns = window_ns
        cfg.late_policy = lib.PLB_LATE_DROP if late_drop else lib.PLB_LATE_DELIVER
        cfg.pressure_permille = permille
        srcs = ffi.new("struct plb_merge_source[]", len(rings))
        for i, ring in enumerate(rings):
            assert lib.plb_merge_source_perf(srcs + i, ring.base, ring.size) == 0
            assert srcs[i].data == ring.base + PAGE and srcs[i].data_size == ring.size
        m = lib.plb_merge_new(cfg, srcs, len(rings))
        assert m != ffi.NULL
        self.m = ffi.gc(m, lib.plb_merge_free)
        self.rings = rings
        self.max = max_records
        self.out: Any = ffi.new("struct plb_merge_out *")
        self.keep = (ffi.new("uint8_t[]", buf_size), ffi.new("uint32_t[]", max_records),
                     ffi.new("uint64_t[]", max_records), ffi.new("uint32_t[]", max_records),
                     ffi.new("uint32_t[]", max_records), ffi.new("uint32_t[]", max_records))
        self.out.buf, self.out.ring, self.out.ts, self.out.flags, self.out.start, self.out.len = self.keep
        self.out.buf_size = buf_size

    def drain(self, flags: int = 0) -> list[tuple[int, int, int, bytes]]:
        """(ring, ts or lost count, flags, payload) per entry."""
        n = lib.plb_merge_drain(self.m, self.out, self.max, flags)
        assert n >= 0, n
        o = self.out
        return [(o.ring[i], o.ts[i], o.flags[i], bytes(ffi.buffer(o.buf + o.start[i], o.len[i])))
                for i in range(n)]

    def consume(self, flags: int = 0, stop_at: int = 0) -> list[tuple[int, int, int, bytes]]:
        """drain()'s entries through plb_merge_consume and a Python callback (payloads in place)."""
        got: list[tuple[int, int, int, bytes]] = []

        @ffi.callback("plb_merge_event_fn")
        def on_entry(ctx: Any, ring: int, ts: int, eflags: int, data: Any, size: int) -> int:
            got.append((ring, ts, eflags, bytes(ffi.buffer(data, size)) if size else b""))
            return int(len(got) == stop_at)

        n = lib.plb_merge_consume(self.m, on_entry, ffi.NULL, self.max, flags)
        assert n == len(got), (n, got)
        return got

    def stats(self) -> Any:
        st = ffi.new("struct plb_merge_stats *")
        backlog = ffi.new("uint64_t[]", len(self.rings))
        lib.plb_merge_stats(self.m, st, backlog, len(self.rings))
        return st, list(backlog)


def test_rings_merge_in_timestamp_order_and_ties_keep_ring_order() -> None:
    base = now_ns() - 10 * 10**9   # older than every idle ring's frontier
    rings = [FakePerfRing(4096) for _ in range(3)]
    merge = Merge(rings)
    for ts in range(9):
        rings[ts % 3].sample(event(base + ts, ts))
    rings[2].sample(event(base + 9, 92))
    rings[0].sample(event(base + 9, 90))
    for ring in rings:
        ring.publish()
    got = merge.drain()
    assert [(r, ts - base) for r, ts, _, _ in got] == [(i % 3, i) for i in range(9)] + [(0, 9), (2, 9)]
    assert [struct.unpack_from("<I", p, 8)[0] for *_, p in got][-2:] == [90, 92]
    assert all(flags == 0 for _, _, flags, _ in got)
    assert all(ring.tail == ring.head for ring in rings)   # data_tail released past everything
    assert merge.out.deadline_ns == lib.PLB_MERGE_NO_DEADLINE
    assert lib.plb_merge_poll_timeout_ms(merge.m) == -1


@pytest.mark.parametrize("start", [256 - 8, 256 - 16, 256 - 24, 256 - 32, 256 - 48, 2**64 - 16])
def test_records_and_timestamps_that_wrap_the_ring(start: int) -> None:
    """A 256-byte ring starting near its end: headers, bodies and the timestamp itself wrap.

    A payload starts 4 bytes past an 8-aligned record start, so its u64 at
    offset 0 straddles the end of the ring when the payload starts at 252.
    The last start also wraps the u64 positions themselves.
    """
    base = now_ns() - 10 * 10**9
    ring = FakePerfRing(256, start=start)
    merge = Merge([ring], ts_offset=0)
    expect, straddled = [], 0
    for round_ in range(6):
        for k in range(3):
            seq = round_ * 3 + k
            payload = U64.pack(base + seq) + bytes([seq]) * (7 + 8 * k)
            at = ring.sample(payload)
            straddled += (at % 256) > 248
            expect.append((base + seq, payload))
        ring.publish()
        got = merge.drain()
        assert [(ts, p[:len(want)]) for (_, ts, _, p), (_, want) in zip(got, expect[-3:], strict=True)] == expect[-3:]
        assert ring.tail == ring.head
    assert ring.written > 256                           # it went round
    assert straddled or start % 256 != 240              # starting at 240, the first timestamp is split


def test_lost_records_never_wait() -> None:
    future = now_ns() + HOUR_NS
    rings = [FakePerfRing(4096), FakePerfRing(4096)]
    merge = Merge(rings)
    rings[0].lost(5)
    rings[0].sample(event(future, 1))   # held: ring 1 is empty and may still write something older
    rings[0].publish()
    got = merge.drain()
    assert got == [(0, 5, lib.PLB_MERGE_F_LOST, b"")]
    assert merge.out.deadline_ns == future + 5_000_000      # ts + L: ring 1 has the higher index
    assert lib.plb_merge_poll_timeout_ms(merge.m) > 0
    st, backlog = merge.stats()
    assert (st.lost_records, st.lost_samples, st.emitted) == (1, 5, 0)
    assert backlog[0] > 0 and backlog[1] == 0
    # DRAIN_ALL ignores the frontiers (what a final flush uses)
    got = merge.drain(lib.PLB_MERGE_DRAIN_ALL)
    assert [(r, ts) for r, ts, _, _ in got] == [(0, future)]


def test_consume_hands_a_callback_what_drain_copies() -> None:
    """plb_merge_consume: the entries plb_merge_drain copies, given to a callback in place.

    Two identical sets of rings (one record wrapping the end of its ring, a
    LOST record): one merge drains, the other consumes. A callback that
    returns nonzero stops the consume after that entry, with deadline 0.
    """
    base = now_ns() - 10 * 10**9

    def make() -> tuple[list[FakePerfRing], Merge]:
        rings = [FakePerfRing(256, start=256 - 16), FakePerfRing(4096)]
        for k in range(6):
            rings[k % 2].sample(event(base + k, k, bytes([k]) * (4 + 8 * (k % 3))))
        rings[1].lost(3)
        rings[1].sample(event(base + 6, 6))
        for ring in rings:
            ring.publish()
        return rings, Merge(rings)

    _, by_drain = make()
    rings, by_callback = make()
    want = by_drain.drain()
    assert [ts - base if not flags else -ts for _, ts, flags, _ in want] == [0, 1, 2, 3, 4, 5, -3, 6]
    assert by_callback.consume(stop_at=3) == want[:3]
    assert lib.plb_merge_next_deadline(by_callback.m) == 0
    assert rings[0].tail != rings[0].head                   # released past what was taken only
    assert by_callback.consume() == want[3:]
    assert lib.plb_merge_next_deadline(by_callback.m) == lib.PLB_MERGE_NO_DEADLINE
    assert all(ring.tail == ring.head for ring in rings)
    assert lib.plb_merge_consume(by_callback.m, ffi.NULL, ffi.NULL, 8, 0) == -errno.EINVAL


def test_malformed_records_are_skipped_and_counted() -> None:
    base = now_ns() - 10 * 10**9
    ring = FakePerfRing(4096)
    merge = Merge([ring], ts_offset=0)
    ring.sample(event(base, 1), raw_size=4000)     # raw size beyond its record
    ring.sample(b"\x01\x02\x03")                   # too short for the u64 timestamp
    ring.sample(event(base + 1, 2))
    ring.publish()
    got = merge.drain()
    assert [struct.unpack_from("<I", p, 8)[0] for *_, p in got] == [2]
    st, _ = merge.stats()
    assert st.malformed == 2
    # a header whose size is not a multiple of 8: nothing after it can be found; skip to the head
    ring.write(header(lib.PERF_RECORD_SAMPLE, 12) + bytes(4))
    ring.sample(event(base + 2, 3))
    ring.publish()
    assert merge.drain() == []
    assert merge.stats()[0].malformed == 3 and ring.tail == ring.head
    ring.sample(event(base + 3, 4))                # and the ring goes on
    ring.publish()
    assert [struct.unpack_from("<I", p, 8)[0] for *_, p in merge.drain()] == [4]


def test_the_pressure_valve_forces_a_filling_ring_out() -> None:
    future = now_ns() + HOUR_NS
    for permille, forced in ((0, True), (1000, False)):
        rings = [FakePerfRing(256), FakePerfRing(256)]
        merge = Merge(rings, permille=permille)
        for i in range(8):                          # 8 x 32 bytes: ring 0 is full
            rings[0].sample(event(future + i, i, bytes(4)))
        rings[0].publish()
        got = merge.drain()
        st, _ = merge.stats()
        if forced:   # emitted until the ring is back under 3/4, each flagged
            assert got and all(flags == lib.PLB_MERGE_F_FORCED for _, _, flags, _ in got)
            assert st.forced_flushes == len(got) and rings[0].head - rings[0].tail <= 192
        else:
            assert got == [] and st.forced_flushes == 0


def test_late_records_are_flagged_or_dropped() -> None:
    base = now_ns() - 10 * 10**9
    for drop in (False, True):
        rings = [FakePerfRing(4096), FakePerfRing(4096)]
        merge = Merge(rings, late_drop=drop)
        rings[0].sample(event(base + 100, 1))
        rings[0].publish()
        assert [ts - base for _, ts, _, _ in merge.drain()] == [100]
        rings[1].sample(event(base + 40, 2))
        rings[1].publish()
        got = merge.drain()
        st, _ = merge.stats()
        assert st.late_events == 1 and st.max_lateness_ns == 60
        if drop:
            assert got == [] and st.dropped_late == 1
        else:
            assert [(r, ts - base, flags) for r, ts, flags, _ in got] == [(1, 40, lib.PLB_MERGE_F_LATE)]


def test_kernel_time_mode_orders_by_the_sample_time() -> None:
    base = now_ns() - 10 * 10**9
    rings = [FakePerfRing(4096, with_time=True), FakePerfRing(4096, with_time=True)]
    merge = Merge(rings, kernel_time=True)
    rings[0].sample(event(0, 1), time_ns=base + 2)   # the payload's own u64 is ignored
    rings[1].sample(event(0, 2), time_ns=base + 1)
    for ring in rings:
        ring.publish()
    got = merge.drain()
    assert [(r, ts - base) for r, ts, _, _ in got] == [(1, 1), (0, 2)]
    assert [struct.unpack_from("<I", p, 8)[0] for *_, p in got] == [2, 1]


def test_a_payload_larger_than_the_output_reports_enospc() -> None:
    base = now_ns() - 10 * 10**9
    ring = FakePerfRing(4096)
    merge = Merge([ring], buf_size=16)
    ring.sample(event(base, 1, bytes(50)))
    ring.publish()
    assert lib.plb_merge_drain(merge.m, merge.out, merge.max, 0) == -errno.ENOSPC
    assert merge.out.need == 68 and ring.tail == 0   # the raw size (62 + 6 padding); nothing consumed


class FakeRingBuf:
    """A BPF ring buffer in ordinary memory (data twice, as the kernel maps it)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.data = ffi.new("uint8_t[]", 2 * size)
        self.cons = ffi.new("uint64_t *", 0)
        self.prod = ffi.new("uint64_t *", 0)
        self.view: Any = ffi.new("struct plb_rb_view *", {
            "consumer_pos": self.cons, "producer_pos": self.prod, "data": self.data, "mask": size - 1})

    def put(self, payload: bytes) -> None:
        raw = struct.pack("<II", len(payload), 0) + payload
        pos = int(self.prod[0])
        for i, b in enumerate(raw):
            self.data[(pos + i) % self.size] = b
            self.data[(pos + i) % self.size + self.size] = b
        self.prod[0] = pos + ((len(raw) + 7) & ~7)


def test_ring_buffer_sources_merge_the_same_way() -> None:
    base = now_ns() - 10 * 10**9
    rbs = [FakeRingBuf(4096), FakeRingBuf(4096)]
    cfg = ffi.new("struct plb_merge_config *", {"ts_mode": lib.PLB_TS_OFFSET, "ts_offset": 0,
                                                "window_ns": 5_000_000})
    srcs = ffi.new("struct plb_merge_source[]", 2)
    for i, rb in enumerate(rbs):
        srcs[i].kind, srcs[i].rb = lib.PLB_SRC_RINGBUF, rb.view
    m = ffi.gc(lib.plb_merge_new(cfg, srcs, 2), lib.plb_merge_free)
    for ts in range(6):
        rbs[(ts + 1) % 2].put(event(base + ts, ts))
    out = ffi.new("struct plb_merge_out *")
    keep = (ffi.new("uint8_t[]", 4096), ffi.new("uint32_t[]", 16), ffi.new("uint64_t[]", 16),
            ffi.new("uint32_t[]", 16), ffi.new("uint32_t[]", 16), ffi.new("uint32_t[]", 16))
    out.buf, out.ring, out.ts, out.flags, out.start, out.len = keep
    out.buf_size = 4096
    n = lib.plb_merge_drain(m, out, 16, 0)
    assert [(out.ring[i], out.ts[i] - base) for i in range(n)] == [((t + 1) % 2, t) for t in range(6)]
    assert [rb.cons[0] for rb in rbs] == [rb.prod[0] for rb in rbs]
    # kernel time makes no sense for ring buffers: refused
    cfg.ts_mode = lib.PLB_TS_KERNEL
    cfg.sample_type = lib.PLB_PERF_SAMPLE_RAW | lib.PLB_PERF_SAMPLE_TIME
    assert lib.plb_merge_new(cfg, srcs, 2) == ffi.NULL


# --- a drain's entries described by one length (plb_merge_out_uniform, OrderedBatch) -------------


def out_arrays(lens: list[int], starts: list[int], flags: list[int]) -> tuple[Any, tuple[Any, ...]]:
    n = len(lens)
    keep = (ffi.new("uint32_t[]", lens), ffi.new("uint32_t[]", starts), ffi.new("uint32_t[]", flags))
    out = ffi.new("struct plb_merge_out *")
    out.len, out.start, out.flags = keep
    assert n == len(starts) == len(flags)
    return out, keep


def uniform_model(lens: list[int], starts: list[int], flags: list[int]) -> int:
    if not lens or not lens[0]:
        return -1
    step = (lens[0] + 7) & ~7
    ok = all(ln == lens[0] and s == i * step and not f for i, (ln, s, f) in enumerate(zip(lens, starts, flags)))
    return lens[0] if ok else -1


@settings(max_examples=300, deadline=None)
@given(n=st.integers(0, 41), size=st.integers(0, 200), where=st.integers(0, 40),
       change=st.sampled_from(["none", "len", "start", "flags", "lost"]))
def test_uniform_entries_are_recognised_and_any_difference_is_not(n: int, size: int, where: int,
                                                                  change: str) -> None:
    # Every position, the vector lanes and the scalar tail alike (n up to 41: ten lanes of four and one).
    step = (size + 7) & ~7
    lens, starts, flags = [size] * n, [i * step for i in range(n)], [0] * n
    if n and change != "none":
        i = where % n
        if change == "len":
            lens[i] = size + 1
        elif change == "start":
            starts[i] += 8
        elif change == "flags":
            flags[i] = lib.PLB_MERGE_F_LATE
        else:   # a PERF_RECORD_LOST entry, as the drain writes it
            lens[i], starts[i], flags[i] = 0, 0, lib.PLB_MERGE_F_LOST
    out, _keep = out_arrays(lens, starts, flags)
    got = lib.plb_merge_out_uniform(out, n)
    assert got == uniform_model(lens, starts, flags)
    if n and change == "none":
        assert got == (size or -1)   # empty payloads: no stride to describe them by
    elif (change in ("start", "flags") and n) or (change in ("len", "lost") and n > 1):
        assert got == -1   # (one entry of another length alone is uniform: its length is the one)
    assert lib.plb_merge_out_uniform(ffi.NULL, n) == -1


def test_a_drain_of_equal_records_is_uniform_and_a_lost_record_breaks_it() -> None:
    base = now_ns() - 10 * 10**9
    rings = [FakePerfRing(1 << 16), FakePerfRing(1 << 16)]
    merge = Merge(rings)
    for i in range(40):
        rings[i % 2].sample(event(base + i, i, bytes(20)))
    for ring in rings:
        ring.publish()
    got = merge.drain(lib.PLB_MERGE_DRAIN_ALL)
    assert len(got) == 40
    assert lib.plb_merge_out_uniform(merge.out, 40) == len(got[0][3]) == 36   # 32 bytes, padded as perf pads
    rings[0].sample(event(base + 50, 50, bytes(20)))
    rings[0].lost(3)
    rings[0].sample(event(base + 51, 51, bytes(28)))   # another length
    rings[0].publish()
    got = merge.drain(lib.PLB_MERGE_DRAIN_ALL)
    assert [flags for _, _, flags, _ in got] == [0, lib.PLB_MERGE_F_LOST, 0]
    assert lib.plb_merge_out_uniform(merge.out, 1) == 36
    assert lib.plb_merge_out_uniform(merge.out, 2) == -1


def test_an_ordered_batch_of_equal_records_is_described_by_its_stride() -> None:
    base = now_ns() - 10 * 10**9
    rings = [FakePerfRing(1 << 16), FakePerfRing(1 << 16)]
    merge = Merge(rings)
    n = 3 * SMALL_BATCH
    for i in range(n):
        rings[i % 2].sample(event(base + i, i, bytes(20)))
    for ring in rings:
        ring.publish()
    k = lib.plb_merge_drain(merge.m, merge.out, merge.max, lib.PLB_MERGE_DRAIN_ALL)
    assert k == n
    batch = OrderedBatch.from_merge(merge.out, n, None, "cpu")
    assert batch.starts == range(0, 40 * n, 40) and list(batch.lens) == [36] * n   # perf's padding
    assert list(batch.tags) == [i % 2 for i in range(n)]
    assert [t - base for t in batch.timestamps] == list(range(n))
    assert not any(batch.late) and len(batch.late) == n and batch.take_lost() == []
    assert [struct.unpack_from("<QI", rec) for rec in batch] == [(base + i, i) for i in range(n)]
    ev = defevent("Ev", ("ts", "u64"), ("tag", "u32"), ("pad", "u8", 20))
    arr = batch.to_numpy(ev)
    assert arr["tag"].tolist() == list(range(n)) and arr.strides == (40,)
    rest = batch.rest()
    assert len(rest) == n
    # One late record among them: the arrays are read entry by entry, late is a list.
    for i in range(n):
        rings[i % 2].sample(event(base + n + i, n + i, bytes(20)))
    rings[1].sample(event(base + 1, 999, bytes(20)))    # below what was already emitted
    for ring in rings:
        ring.publish()
    k = lib.plb_merge_drain(merge.m, merge.out, merge.max, lib.PLB_MERGE_DRAIN_ALL)
    batch = OrderedBatch.from_merge(merge.out, k, None, "cpu")
    assert k == n + 1 and not isinstance(batch.starts, range)
    assert list(batch.late).count(True) == 1
    assert batch.to_numpy(ev)["tag"].tolist().count(999) == 1
