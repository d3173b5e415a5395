"""The ordered merge: every CPU's perf ring, or several BPF ring buffers, read in timestamp order.

:class:`OrderedReader` sets up the rings (:mod:`pylibbpf._rings`) and the C
merge core (``csrc/plb_merge.c``, through :mod:`pylibbpf._shim`), then hands
out what the merge lets go as :class:`~pylibbpf.Record` or
:class:`~pylibbpf.OrderedBatch` (:mod:`pylibbpf._batch`). The rule is in
``docs/ordering.md``.
"""

from __future__ import annotations

import errno
import mmap
import threading
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import _check, _close, _into, _libbpf, _shim
from ._batch import SMALL_BYTES, OrderedBatch, Record
from ._close import Waiter
from ._ffi import ffi, lib
from ._reader import RecordReader
from ._rings import PerfRings, RingBufMaps, check_page_cnt, require_map_type
from .errors import ClosedError
from .events import EventDef
from .maps import Map

CData = Any


@dataclass(frozen=True, slots=True)
class OrderedStats:
    """What the ordered merge counted since the reader was created (``OrderedReader.stats()``).

    ``emitted``: samples delivered (late ones included). ``late_events``:
    samples whose timestamp was below one already delivered (delivered flagged
    ``late``, or dropped); ``max_lateness_ns``: the largest such gap;
    ``dropped_late``: those dropped by ``late="drop"``. ``inversions``: a
    ring's next timestamp below an earlier one of the same ring (an interrupt
    or a nested program wrote out of order on one CPU). ``lost_records`` /
    ``lost_samples``: the kernel's lost-samples notices and the samples they
    count. ``malformed``: records skipped because their sizes or layout were
    impossible (e.g. a sample too short to hold the timestamp).
    ``forced_flushes``: samples emitted early by the pressure valve because a
    ring was filling up. ``backlog``: bytes published but not yet taken, per
    ring: CPU -> bytes for a perf event array, list index -> bytes for ring buffers.
    """

    emitted: int
    late_events: int
    max_lateness_ns: int
    dropped_late: int
    inversions: int
    lost_records: int
    lost_samples: int
    malformed: int
    forced_flushes: int
    backlog: dict[int, int] = field(default_factory=dict)


_LATE_POLICIES = {"deliver": "PLB_LATE_DELIVER", "drop": "PLB_LATE_DROP"}
#: The longest merge window: a day, in ms (its ns must fit the merge's u64, and a longer one
#: would hold records back for longer than anyone waits).
_MAX_WINDOW_MS = 86_400_000


def _timestamp_offset(timestamp: object, event: EventDef | None) -> int | None:
    """The byte offset of the u64 timestamp in a sample, or None for the kernel's sample time."""
    if isinstance(timestamp, bool):
        raise TypeError("timestamp must be 'kernel', a byte offset or a field name, not a bool")
    if isinstance(timestamp, int):
        if timestamp < 0:
            raise ValueError(f"timestamp offset must be >= 0, got {timestamp}")
        if timestamp + 8 > _check.UINT32_MAX:  # the merge keeps offsets in a u32 (plb_merge.h)
            raise ValueError(f"timestamp offset must be <= {_check.UINT32_MAX - 8} (a u64 inside a record), "
                             f"got {timestamp}")
        if event is not None and timestamp + 8 > event.size:
            raise ValueError(f"timestamp offset {timestamp}: a u64 there does not fit in event "
                             f"{event.name!r} ({event.size} bytes)")
        return timestamp
    if isinstance(timestamp, str):
        if timestamp == "kernel":
            return None
        if event is None:
            raise ValueError(f"timestamp field {timestamp!r} needs event=EventDef to find its offset")
        info = event.field(timestamp)  # UnknownFieldError (a ValueError) names the known fields
        if info.type not in ("u64", "i64") or info.count != 1:
            kind = info.type if info.count == 1 else f"{info.type}[{info.count}]"
            raise ValueError(f"timestamp field {timestamp!r} of event {event.name!r} is {kind}; "
                             "it must be a u64 or i64")
        return info.offset
    raise TypeError(f"timestamp must be 'kernel', a byte offset or a field name, not {type(timestamp).__name__}")


def _merge_config(offset: int | None, window_ms: float, late: str) -> CData:
    """The merge's ``struct plb_merge_config`` (the sample type is set when the perf rings open)."""
    cfg = ffi.new("struct plb_merge_config *")
    cfg.ts_mode = lib.PLB_TS_KERNEL if offset is None else lib.PLB_TS_OFFSET
    cfg.ts_offset = offset or 0
    cfg.window_ns = round(window_ms * 1_000_000)
    cfg.late_policy = getattr(lib, _LATE_POLICIES[late])
    cfg.pressure_permille = 0  # the default: 750
    return cfg


class OrderedReader(RecordReader, _into.HandsBackOdd):
    """Every CPU's perf ring (or several BPF ring buffers) merged into one stream in timestamp order.

    ``map`` is a perf event array, or a ring buffer map or a list of them.
    ``timestamp`` says what orders the records: ``"kernel"`` (perf only) --
    the kernel's sample time, the rings being opened with PERF_SAMPLE_TIME on
    CLOCK_MONOTONIC; an int -- the byte offset of a u64 in each sample; or a
    field name of ``event`` (an EventDef; the field must be a u64 or i64).
    Timestamps must be CLOCK_MONOTONIC nanoseconds (``bpf_ktime_get_ns()``),
    the clock the window is measured on, and are compared as unsigned.

    The rule (docs/ordering.md): a record is delivered once no ring can
    still produce an earlier one -- every other ring has a later record
    waiting, or has been empty while the clock passed the record's timestamp
    plus ``window_ms`` (the longest a program may take between reading the
    clock and its record becoming visible). Equal timestamps leave in ring
    order (CPU order; list order for ring buffers). A record that arrives
    below one already delivered is *late*: counted in ``stats()`` and
    delivered with ``late=True`` (``late="deliver"``) or dropped
    (``late="drop"``). A ring filling up (over 3/4 full) while it waits
    forces its records out early (``forced_flushes``); a full ring's losses
    arrive as lost-samples records, which never wait. A sample too short to
    hold the timestamp is skipped and counted as ``malformed``.

    ``page_cnt`` is the pages per CPU ring for a perf event array (a power of
    two; ignored for ring buffers, whose size is the map's). Records are
    copies.

    Wakeups: every perf sample wakes the reader. A BPF ring buffer wakes it
    only when the reader has caught up with that ring, so while the merge
    holds a ring's oldest record back, that ring's newer records wake nobody:
    the reader wakes at the merge's deadline (at most ``window_ms``) or on
    another ring's data. A producer that fills a ring buffer faster than that
    while the other rings are idle loses records there (the program sees
    ``bpf_ringbuf_reserve`` fail): size the rings for ``window_ms`` of
    traffic, or submit with ``BPF_RB_FORCE_WAKEUP``. One thread reads at a time; ``stats()`` and ``close()`` may be
    called from any thread; ``close()`` wakes a blocked read, which raises
    ClosedError.
    """

    _what = "OrderedReader"
    _MAX_RECORDS = 16384        # entries per C drain
    _BUF_BYTES = 1 << 21        # payload bytes of the first C drain, and the most a later one is sized
                                # for (more only for a record larger than that)

    def __init__(self, map: Map | Sequence[Map], timestamp: str | int = "kernel", event: EventDef | None = None,
                 window_ms: float = 5.0, late: str = "deliver", page_cnt: int = 64) -> None:
        super().__init__()
        perf, maps = self._sources(map)
        offset = _timestamp_offset(timestamp, event)
        window_ms = _check.number(window_ms, "window_ms", lo=0, hi=_MAX_WINDOW_MS)
        _check.choice(late, "late", _LATE_POLICIES)
        page_cnt = check_page_cnt(page_cnt)
        if offset is None and not perf:
            raise ValueError("timestamp='kernel' needs a perf event array: ring buffer records have no "
                             "sample time; give the offset or field name of a u64 timestamp")
        self.window_ms = float(window_ms)
        self._merge_lock = threading.Lock()
        self._merge: CData = None
        self._final: OrderedStats | None = None
        self._pending: OrderedBatch | None = None
        self._perf: PerfRings | None = None
        self._ringbufs: RingBufMaps | None = None
        self._free_merge: weakref.finalize[Any, Any] | None = None
        self._tag_of: list[int] | None = None  # ring index -> CPU, when they differ
        self._tags: list[int] = []
        self._tag_name = "cpu"  # what a source is: a CPU's perf ring, or one of several ring buffers
        self._max = self._MAX_RECORDS
        self._block: Any = None    # the memory the next drain writes into (_new_block)
        self._want = self._BUF_BYTES  # the payload bytes the next block is sized for
        self._into_state: _into.Into | None = None
        # The largest record a ring can hold: read_into's odd-record room.
        self._ring_bytes = page_cnt * mmap.PAGESIZE if perf else max(m.max_entries for m in maps)
        cfg = _merge_config(offset, window_ms, late)
        try:
            srcs = self._open_perf(maps[0], cfg, page_cnt) if perf else self._open_ringbufs(maps)
            self._start_merge(cfg, srcs)
            self._watch()
        except BaseException:
            self._free_sources()
            if self._waiter is not None:
                self._waiter.close()
            raise

    def _open_perf(self, m: Map, cfg: CData, page_cnt: int) -> CData:
        """Open one perf ring per CPU, raw samples (plus the sample time for ``"kernel"``); their merge sources."""
        sample_type = lib.PLB_PERF_SAMPLE_RAW
        clockid = -1
        if cfg.ts_mode == lib.PLB_TS_KERNEL:
            sample_type |= lib.PLB_PERF_SAMPLE_TIME
            clockid = lib.CLOCK_MONOTONIC
        cfg.sample_type = sample_type
        attr = _shim.plb_perf_attr_new(sample_type, 1, 0, clockid)
        # The merge reads the rings itself: libbpf's event callback is never called.
        self._perf = PerfRings(m, "OrderedReader", page_cnt, attr, _shim.PERF_EVENT_IGNORE, ffi.NULL)
        cpus = self._perf.cpus
        n = len(cpus)
        srcs = ffi.new("struct plb_merge_source[]", n)
        for i in range(n):
            base, size = _libbpf.perf_buffer__buffer(self._perf.pb, i, f"perf_buffer__buffer({i})")
            _shim.plb_merge_source_perf(srcs + i, base, size, f"plb_merge_source_perf({i})")
        self._tag_of = None if cpus == list(range(n)) else list(cpus)
        self._tags = list(cpus)
        return srcs

    def _open_ringbufs(self, maps: list[Map]) -> CData:
        """Map every ring buffer; their merge sources (tag: the index in ``maps``)."""
        self._ringbufs = RingBufMaps(maps)
        srcs = ffi.new("struct plb_merge_source[]", len(maps))
        for i, view in enumerate(self._ringbufs.views):
            srcs[i].kind = lib.PLB_SRC_RINGBUF
            srcs[i].rb = view
        self._tags = list(range(len(maps)))
        self._tag_name = "ring"
        return srcs

    def _start_merge(self, cfg: CData, srcs: CData) -> None:
        """The C merge over the sources, and the memory one drain writes into."""
        n = len(self._tags)
        self._merge = _shim.plb_merge_new(cfg, srcs, n, "plb_merge_new")
        # a safety net only: close() frees the merge, before the rings it points into
        self._free_merge = _close.finalizer(self, _shim.plb_merge_free, self._merge)
        self._nsrc = n
        self._init_out()

    def _watch(self) -> None:
        """The waiter over the rings' fds (plus the close eventfd).

        Perf fds report each wakeup once: level-triggered. Ring buffer fds are
        "readable" while data is pending, held-back data included: edge-triggered.
        """
        self._waiter = Waiter(self._perf.fds if self._perf is not None else [], "OrderedReader")
        for fd in self._ringbufs.fds if self._ringbufs is not None else []:
            _shim.plb_epoll_add_edge(self._waiter.fd, fd, "OrderedReader: epoll_ctl")

    @staticmethod
    def _sources(map: Map | Sequence[Map]) -> tuple[bool, list[Map]]:
        """(True, [perf event array]) or (False, [ring buffer maps]); TypeError naming the types otherwise."""
        if isinstance(map, Map):
            if map.type == lib.BPF_MAP_TYPE_PERF_EVENT_ARRAY:
                require_map_type(map, lib.BPF_MAP_TYPE_PERF_EVENT_ARRAY, "OrderedReader")
                return True, [map]
            if map.type != lib.BPF_MAP_TYPE_RINGBUF:
                raise TypeError(
                    f"OrderedReader needs a {_libbpf.libbpf_map_type_str(lib.BPF_MAP_TYPE_PERF_EVENT_ARRAY)} "
                    f"map or {_libbpf.libbpf_map_type_str(lib.BPF_MAP_TYPE_RINGBUF)} maps; map {map.name!r} "
                    f"is {_libbpf.libbpf_map_type_str(map.type)}")
            maps = [map]
        elif isinstance(map, (str, bytes)) or not isinstance(map, Sequence):
            raise TypeError(f"OrderedReader needs a Map or a list of ring buffer Maps, not {type(map).__name__}")
        else:
            maps = list(map)
        if not maps:
            raise ValueError("OrderedReader needs at least one ring buffer map")
        for m in maps:
            require_map_type(m, lib.BPF_MAP_TYPE_RINGBUF, "OrderedReader (a list of maps)")
        if len({m.fd for m in maps}) != len(maps):
            raise ValueError("OrderedReader: the same ring buffer map appears twice")
        return False, maps

    def _init_out(self) -> None:
        """The drain's output descriptor and the per-entry arrays a batch never keeps (flags, start,
        len: a batch with flagged or unequal records copies what it needs of them)."""
        out = ffi.new("struct plb_merge_out *")
        n = self._max
        self._arrays = (ffi.new("uint32_t[]", n), ffi.new("uint32_t[]", n), ffi.new("uint32_t[]", n))
        out.flags, out.start, out.len = self._arrays
        self._out = out
        # In a block: the timestamps (u64) and ring indexes (u32) of up to n entries, then the payloads.
        self._head = (12 * n + 63) & ~63

    def _new_block(self) -> None:
        """Memory for the next drain (merge lock held): one block, which a large batch takes over
        whole, so its records, timestamps and ring indexes are never copied again.

        Sized for ``_want`` payload bytes; the block a batch freed meanwhile serves when it holds
        at least three quarters of that (csrc/plb_block.h, the spares): a reader whose batches are
        dropped before the next read writes into the same memory every call, its pages present.
        The payload buffer is not cleared: the merge writes every byte a batch reads.
        """
        head, out = self._head, self._out
        want = head + self._want
        block, room = _shim.plb_block_buf(want - self._want // 4, want)
        out.ts = ffi.cast("uint64_t *", block)
        out.ring = ffi.cast("uint32_t *", block + 8 * self._max)
        out.buf = block + head
        out.buf_size = room - head
        self._block = block

    def _hand_over(self, n: int, used: int) -> tuple[Any, int] | None:
        """Whether the batch of a drain of ``n`` entries and ``used`` payload bytes takes the block
        (merge lock held): ``(block, head length)`` when it does, None when it copies.

        A batch that fills more than half of the block takes it whole. One that fills less copies
        its records when a drain of ``_max`` such records would fill more than half (this drain was
        cut short by the rings: the block stays, and so do its pages). Otherwise the block is more
        than twice what these records need (the first block is sized before any record is seen):
        the batch takes it cut to its records' pages. A taken block's successor is sized for
        ``_max`` records like these (``_want``), so record-limited drains fill it.
        """
        if used <= SMALL_BYTES:
            return None
        room = int(self._out.buf_size)
        # The payload bytes of _max records like these, up to _BUF_BYTES (or the room a record
        # larger than that needed).
        full = min((used * self._max // n + 7) & ~7, max(self._BUF_BYTES, room))
        half = room // 2
        if used <= half < full:
            return None   # cut short by the rings
        block = self._block
        if used <= half:  # a block for larger records: cut to these records' pages
            pages = -(-used // mmap.PAGESIZE) * mmap.PAGESIZE
            block = _shim.plb_block_buf_shrink(block, self._head + pages)
        self._block, self._want = None, full
        return block, self._head

    def read(self, timeout: float | None = None) -> Record:
        """The next record in merged order (a :class:`Record` with ``timestamp`` and ``late``).

        Blocks until the rule lets a record out, or for at most ``timeout``
        seconds (None: no limit; 0: do not wait). A record waiting for an idle
        ring is released within ``window_ms`` of its timestamp (plus one
        wakeup). Raises TimeoutError when nothing could be delivered in time,
        ClosedError when the reader is closed (also from another thread while
        blocked), BPFError when the merge fails. Lost-samples records
        (``lost_samples > 0``, no data, ``timestamp`` 0) come where the merge
        met them. The sample is a ``bytes`` copy.
        """
        deadline = _check.deadline(timeout)
        self._check_open()
        with self._lock:
            batch = self._pending_or_collect(deadline)
            if batch is None:
                raise TimeoutError(f"OrderedReader: no record within {timeout} s")
            self._pending = batch
            i = batch.next
            start = batch.starts[i]
            rec = Record(batch.tags[i], bytes(batch.view[start:start + batch.lens[i]]), batch.lost[i],
                         batch.timestamps[i], batch.late[i])
            batch.next = i + 1
            if batch.next >= len(batch.starts):
                self._pending = None
        return rec

    def read_batch(self, timeout: float | None = None) -> OrderedBatch:
        """Everything the merge lets out now, in merged order, as one :class:`OrderedBatch`.

        The fast path: one C drain; the batch takes over the memory the
        records were copied into (a small batch copies its few bytes). Waits like :meth:`read` (up
        to ``timeout`` seconds; None: no limit; 0: do not wait) until at least
        one record can be delivered, and returns an empty batch when the time
        runs out. Records a previous ``read`` left are returned first. Lost-
        samples notices are moved to ``batch.lost_notices`` (so a batch holding
        only notices has ``len`` 0). ClosedError and BPFError as for ``read``.
        """
        deadline = _check.deadline(timeout)
        self._check_open()
        with self._lock:
            batch = self._pending_or_collect(deadline)
            self._pending = None
        if batch is None:
            return OrderedBatch.empty(self._tag_name)
        batch.rest()
        batch.lost_notices = batch.take_lost()
        return batch

    def read_record_into(self, record: Record, timeout: float | None = None) -> None:
        """As :meth:`read` (same blocking and errors), but every field of ``record`` is overwritten.

        A ``bytearray`` ``raw_sample`` is reused (resized in place), as
        :meth:`PerfReader.read_record_into` does.
        """
        rec = self.read(timeout)
        if isinstance(record.raw_sample, bytearray):
            record.raw_sample[:] = rec.raw_sample
        else:
            record.raw_sample = bytearray(rec.raw_sample)
        record.cpu, record.lost_samples, record.timestamp, record.late = (
            rec.cpu, rec.lost_samples, rec.timestamp, rec.late)

    def read_into(self, out: Any, timeout: float | None = None, *, record_size: Any = None,
                  timestamps: Any = None, flags: Any = None) -> int:
        """Rows straight from the merge into an array; returns how many rows were written.

        ``read_into(out, timeout=None, *, record_size=None, timestamps=None,
        flags=None) -> int``: the merge writes records, in merged order,
        straight into the rows of ``out`` (a numpy structured array, or any
        writable C-contiguous buffer with ``record_size=`` bytes or an
        EventDef): one copy per record (two for a perf sample that wraps the
        end of its ring). Optional parallel columns, ``len(out)`` entries or
        more: ``timestamps`` (numpy.uint64) gets each row's merge key,
        ``flags`` (numpy.uint8) its ``FLAG_LATE`` / ``FLAG_LOST`` /
        ``FLAG_FORCED`` bits. With ``flags``, a lost-samples notice is a row
        of zeros flagged ``FLAG_LOST`` whose timestamp entry is the number of
        samples lost; without it, notices are only counted (``stats()``). A
        perf sample fits a row when its stored size is what the kernel
        stores for a record of the row size (it pads raw samples so that
        size + 4 is a multiple of 8; the padding is not copied); a ring buffer
        record when its length is the row size. Other records are consumed
        and handed back whole, in order, by :meth:`take_odd` (with their
        timestamp and flags). Waits like :meth:`read` until at least one row
        is written, for at most ``timeout`` seconds (None: no limit; 0: do not
        wait); returns the rows written, 0 on timeout. Records a ``read``
        left come first. Only as many records as there are rows are taken
        from the merge: the rest wait in the rings for the next call.
        TypeError/ValueError naming the argument for a wrong ``out``,
        ``record_size``, ``timestamps``, ``flags`` or ``timeout``; ClosedError,
        BPFError as for ``read``.
        """
        if isinstance(out, Record):
            if record_size is not None or timestamps is not None or flags is not None:
                raise TypeError("OrderedReader.read_into(record): record_size, timestamps and flags are for "
                                "an array out")
            warnings.warn("OrderedReader.read_into(record) is deprecated: use read_record_into(record); "
                          "read_into fills the rows of an array", DeprecationWarning, stacklevel=2)
            self.read_record_into(out, timeout)
            return 1
        rows = _into.Rows(out, record_size)
        ts = _into.column(timestamps, rows, 8, "timestamps")
        fl = _into.column(flags, rows, 1, "flags")
        deadline = _check.deadline(timeout)
        self._check_open()
        with self._lock:
            self._check_open()
            into = self._into_state
            if into is None:
                into = self._into_state = _into.Into()
                # The merge's callback cannot allocate without losing the record: room for the largest.
                _shim.plb_into_reserve(into.st, self._ring_bytes, "OrderedReader.read_into: plb_into_reserve")
            into.begin(rows, ts, fl)
            into.st.perf_pad = 1 if self._perf is not None else 0
            try:
                if rows.count:
                    pending = self._pending
                    if pending is not None and into.put_batch(pending, self._perf is not None):
                        self._pending = None
                    if not into.full:
                        self._collect(deadline, lambda merge_flags: self._merge_rows(into, merge_flags))
            finally:
                written = into.end()
        return written

    def _merge_rows(self, into: _into.Into, merge_flags: int) -> Any:
        """One fill of ``into`` from the merge (lock held): truthy once a row was written."""
        st = into.st
        with self._merge_lock:
            if self._merge is None:
                raise ClosedError(self._what)
            while True:
                _shim.plb_into_merge(self._merge, st, merge_flags, "OrderedReader.read_into: plb_into_merge")
                if int(st.stop) != lib.PLB_INTO_ODD:
                    break
                ring = int(st.odd_ring)
                into.take_c_odd(self._tags[ring], int(st.odd_ts), int(st.odd_flags))
        return True if int(st.n) else None

    def stats(self) -> OrderedStats:
        """The merge's counters and each ring's backlog, now (see :class:`OrderedStats`).

        Never waits for a blocked ``read``. After ``close()`` it returns the
        final counters and the backlog left unread at close. ClosedError in a
        forked child (the parent's rings are not mapped there).
        """
        self._check_owner()
        with self._merge_lock:
            if self._merge is None:
                if self._final is not None:
                    return self._final
                raise ClosedError(self._what)
            return self._stats_locked()

    def _stats_locked(self) -> OrderedStats:
        st = ffi.new("struct plb_merge_stats *")
        backlog = ffi.new("uint64_t[]", self._nsrc)
        _shim.plb_merge_stats(self._merge, st, backlog, self._nsrc)
        return OrderedStats(
            emitted=int(st.emitted), late_events=int(st.late_events), max_lateness_ns=int(st.max_lateness_ns),
            dropped_late=int(st.dropped_late), inversions=int(st.inversions), lost_records=int(st.lost_records),
            lost_samples=int(st.lost_samples), malformed=int(st.malformed), forced_flushes=int(st.forced_flushes),
            backlog=dict(zip(self._tags, ffi.unpack(backlog, self._nsrc), strict=True)))

    def _pending_or_collect(self, deadline: float | None) -> OrderedBatch | None:
        """What a previous ``read`` left, else :meth:`_collect` (lock held; ClosedError once closed)."""
        self._check_open()
        return self._pending if self._pending is not None else self._collect(deadline)

    def _collect(self, deadline: float | None,
                 take: Callable[[int], OrderedBatch | None] | None = None) -> OrderedBatch | None:
        """Drain until something can be delivered or the deadline passes (lock held); None on timeout.

        The epoll timeout is the sooner of the caller's deadline and the merge's
        own (``plb_merge_poll_timeout_ms``): a held-back record becomes
        deliverable by the clock alone, and a perf ring reports each wakeup
        only once, so no fd would wake us for it.
        """
        rechecked = False
        drain = self._drain if take is None else take
        while True:
            batch = drain(0)
            if batch is not None:
                return batch
            with self._merge_lock:
                merge_ms = _shim.plb_merge_poll_timeout_ms(self._merge)
            if merge_ms == 0:
                continue  # records were consumed without output (dropped, malformed): again now
            if merge_ms < 0 and self._ringbufs is not None and not rechecked:
                # Ring buffers are watched edge-triggered, and a producer wakes us
                # only if our consumer position has reached its record. Fence,
                # then look again before sleeping: either we see its record, or
                # it sees our position and wakes us (plb_perfattr.h).
                _shim.plb_full_fence()
                rechecked = True
                continue
            user_ms = _check.remaining_ms(deadline)
            if user_ms == 0:
                return None
            wait_ms = user_ms if merge_ms < 0 or 0 <= user_ms < merge_ms else merge_ms
            self._wait(wait_ms)
            rechecked = False

    def _drain(self, flags: int) -> OrderedBatch | None:
        with self._merge_lock:
            if self._merge is None:
                raise ClosedError(self._what)
            out = self._out
            while True:
                if self._block is None:
                    self._new_block()
                n = _shim.plb_merge_drain(self._merge, out, self._max, flags, "plb_merge_drain")
                if n != -errno.ENOSPC:
                    break
                # Not even the first record fits: a block of twice the room, or the record's size.
                self._want = max(2 * int(out.buf_size), (int(out.need) + 7) & ~7)
                self._block = None
            if n == 0:
                return None
            return OrderedBatch.from_merge(out, n, self._tag_of, self._tag_name, self._hand_over(n, int(out.used)))

    def _free_sources(self) -> None:
        """Free the merge first (it points into the rings), then the rings; give the drain's block
        back (batches keep theirs)."""
        with self._merge_lock:
            if self._merge is not None:
                self._final = self._stats_locked()
                self._merge = None
            if self._free_merge is not None:
                self._free_merge()
            self._block = None
        if self._perf is not None:
            self._perf.close()
        if self._ringbufs is not None:
            self._ringbufs.close()

    def _release(self) -> None:
        self._free_sources()
        self._pending = None
