"""BPF perf event arrays (``BPF_MAP_TYPE_PERF_EVENT_ARRAY``) read through libbpf's ``perf_buffer``.

:class:`PerfBuffer` is libbpf's per-CPU reader: samples are drained in C into a
batch and delivered to ``callback(cpu, data)`` in a Python loop; lost-sample
notices go to ``lost_callback(cpu, count)`` and are always counted in
``lost_samples``.

:class:`PerfReader` is the cilium/ebpf-style pull reader (``read()`` one
:class:`Record` at a time, ``pause()``/``resume()``), and :class:`OrderedReader`
merges every CPU's ring (or several BPF ring buffers) in timestamp order with
the C merge core (``csrc/plb_merge.c``; the rule is in the README).
"""

from __future__ import annotations

import abc
import array
import errno
import math
import mmap
import os
import threading
import weakref
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from . import _check, _close, _libbpf
from ._close import current_pid
from ._ffi import ffi, lib
from ._reader import (
    _ZEROS_U64,
    Batch,
    BatchReader,
    Callback,
    Closable,
    Waiter,
    _u32_array,
    _u64_array,
    any_nonzero,
)
from .errors import BPFError, ClosedError
from .events import EventDef
from .features import online_cpus
from .maps import Map
from .ringbuf import require_map_type

CData = Any


class PerfBuffer(BatchReader):
    """Read every CPU's ring of a perf event array.

    ``callback(cpu: int, data: memoryview)`` runs once per sample; ``data`` is a
    read-only view of a copy (valid after the callback returns) and carries the
    sample's padding (the kernel pads raw samples to 8 bytes, so up to 7 extra
    bytes). ``lost_callback(cpu, count)`` runs for each lost-samples notice;
    without one, losses are still counted in ``lost_samples``.

    A callback that raises stops the current ``poll``/``consume`` after that
    sample and the exception reaches the caller; the samples after it are
    delivered by the next call. One thread polls at a time; ``close()`` from any
    thread wakes a blocked poll, which raises ClosedError.
    """

    _what = "PerfBuffer"

    def __init__(self, map: Map, callback: Callback, lost_callback: Callback | None = None,
                 page_cnt: int = 8) -> None:
        super().__init__()
        require_map_type(map, lib.BPF_MAP_TYPE_PERF_EVENT_ARRAY, "PerfBuffer")
        _check.callable_(callback, "callback")
        _check.optional_callable(lost_callback, "lost_callback")
        page_cnt = _page_cnt(page_cnt)
        self._callback = callback
        self._lost_callback = lost_callback
        self.lost_samples = 0
        self._map = map
        self._batch = _libbpf.plb_batch_new(256, 64 * 1024)
        self._pending: Batch | None = None
        # libbpf keeps the map fd and deletes its CPUs' entries through it when freed:
        # a dup, so that closing the BPF object first cannot make that hit another map
        # that reused the fd number (as _PerfRings does).
        map_fd = _libbpf.dup(map.fd, f"PerfBuffer: map {map.name!r}")
        try:
            pb = _libbpf.perf_buffer__new(map_fd, page_cnt, self._batch, f"perf_buffer__new({map.name})")
        except BaseException:
            os.close(map_fd)
            raise
        owner = current_pid()
        try:
            self._waiter = Waiter([_libbpf.perf_buffer__epoll_fd(pb)], "PerfBuffer")
        except BaseException:
            _free_perf_buffer(pb, map_fd, owner)
            raise
        # A forked child does not inherit these mappings (VM_DONTCOPY): views from
        # buffer() would point at a hole there; the child fills it with zeros.
        _close.add_fork_hole(_address(pb), [_ring_range(pb, i) for i in range(_libbpf.perf_buffer__buffer_cnt(pb))])
        # The perf_buffer is freed when the last reference goes: close() drops ours,
        # and views from buffer() hold theirs, so their memory stays mapped.
        self._pb = _close.gc(pb, lambda p: _free_perf_buffer(p, map_fd, owner))

    def buffer_cnt(self) -> int:
        """The number of per-CPU rings (one per online CPU)."""
        self._check_open()
        return _libbpf.perf_buffer__buffer_cnt(self._pb)

    def buffer(self, i: int) -> memoryview:
        """The raw mmapped region of ring ``i`` (``perf_buffer__buffer``): control page + data.

        The first page is the kernel's ``struct perf_event_mmap_page`` (data_head,
        data_tail, data_offset, data_size); the ring's data follows at data_offset.

        ``i`` is a slot over online CPUs, not a CPU number. The view is the live
        mapping: the kernel writes into it. It keeps the mapping alive even after
        ``close()``. Once a ring is read through this view, do not also call
        ``poll``/``consume`` on this PerfBuffer. In a process forked after the
        view was taken, the view reads zeros (the kernel does not copy perf
        mappings into a child).
        """
        i = _check.integer(i, "i")
        self._check_open()
        count = _libbpf.perf_buffer__buffer_cnt(self._pb)
        if not 0 <= i < count:
            raise IndexError(f"perf buffer slot {i} out of range (0..{count - 1})")
        base, size = _libbpf.perf_buffer__buffer(self._pb, i, f"perf_buffer__buffer({i})")
        anchor = self._pb
        ptr = ffi.gc(ffi.cast("char *", base), lambda _p, _keep=anchor: None)
        # libbpf reports the data size; the mapping is one control page more.
        return memoryview(ffi.buffer(ptr, size + mmap.PAGESIZE))

    def buffer_fd(self, i: int) -> int:
        """The perf event fd of ring ``i`` (``perf_buffer__buffer_fd``)."""
        i = _check.integer(i, "i", lo=0, hi=_check.INT32_MAX)
        self._check_open()
        return _libbpf.perf_buffer__buffer_fd(self._pb, i, f"perf_buffer__buffer_fd({i})")

    def epoll_fd(self) -> int:
        """libbpf's epoll fd over all rings (readable when one has data)."""
        self._check_open()
        return _libbpf.perf_buffer__epoll_fd(self._pb)

    def _taken(self, batch: Batch) -> Batch:
        """read_batch: ``batch.tags[i]`` is the CPU of sample ``i``; lost-sample notices are
        taken out of the batch, counted in ``lost_samples`` and passed to ``lost_callback``.

        A ``lost_callback`` that raises stops there and the exception propagates:
        the notices up to that one are handled (counted once), and the rest of the
        batch (every sample, the later notices) stays pending for the next call.
        """
        notices = [i for i, n in enumerate(batch.lost) if n] if any_nonzero(batch.lost) else []
        for k, i in enumerate(notices):
            cpu, count = batch.tags[i], batch.lost[i]
            self.lost_samples += count
            if self._lost_callback is not None:
                try:
                    self._lost_callback(cpu, count)
                except BaseException:
                    handled = set(notices[:k + 1])
                    batch.keep([j for j in range(len(batch.starts)) if j not in handled])
                    if len(batch):
                        self._pending = batch
                    raise
        if notices:
            batch.keep([j for j, n in enumerate(batch.lost) if not n])
        return batch

    async def events(self) -> AsyncIterator[tuple[int, memoryview]]:
        """``async for cpu, data in pb.events()``: every sample; losses counted as in read_batch.

        Ends when the buffer is closed; cancelling the task leaves nothing running.
        Leaving the loop (``break``, cancelling the task) keeps the samples
        drained but not yet yielded for the next ``events()``/``poll()``/``read_batch()``.
        """
        async for batch, i in self._records():
            yield batch.tags[i], batch[i]

    def _drain(self) -> None:
        """Copy what every CPU's ring holds into a batch (lock held)."""
        try:
            _libbpf.perf_buffer__consume_into(self._pb, self._batch, "perf_buffer__consume")
        finally:
            if self._batch.n:  # samples already consumed from the kernel are kept, even on an error
                self._pending = Batch(self._batch, with_tags=True)

    def _deliver(self) -> int:
        batch = self._pending
        if batch is None:
            return 0
        view = batch.view
        callback, lost_callback = self._callback, self._lost_callback
        i = first = batch.next
        try:
            for start, length, cpu, lost in zip(islice(batch.starts, i, None), islice(batch.lens, i, None),
                                                islice(batch.tags, i, None), islice(batch.lost, i, None)):
                i += 1
                if lost:
                    self.lost_samples += lost
                    if lost_callback is not None:
                        lost_callback(cpu, lost)
                else:
                    callback(cpu, view[start:start + length])
        finally:
            batch.next = i
            if i >= len(batch.starts):
                self._pending = None
        return i - first

    def _release(self) -> None:
        self._pb = None
        self._pending = None


# --- PerfReader, OrderedReader -----------------------------------------------------------------


@dataclass(slots=True)
class Record:
    """One record of a :class:`PerfReader` or :class:`OrderedReader`: a sample or a lost-samples notice.

    ``cpu``: the CPU whose ring held it (an OrderedReader over ring buffers:
    the index of the ring buffer in the list it was given).
    ``raw_sample``: the sample's bytes, a copy that stays valid for as long as
    it is referenced. A perf sample is as the kernel stored it: padded with up
    to 7 bytes so that its size plus 4 is a multiple of 8. Empty for a
    lost-samples notice.
    ``lost_samples``: 0 for a sample; otherwise the kernel found the ring full
    and dropped this many samples (``PERF_RECORD_LOST``) -- ``raw_sample`` is empty.
    ``timestamp``: OrderedReader samples: the merge key in nanoseconds (the
    kernel's sample time, or the u64 read from the sample). 0 for PerfReader
    records and for lost-samples notices, which are outside the order.
    ``late``: OrderedReader: the timestamp is below one delivered earlier.

    ``Record()`` (all defaults) is the empty record to pass to ``read_into``.
    """

    cpu: int = 0
    raw_sample: bytes | bytearray = b""
    lost_samples: int = 0
    timestamp: int = 0
    late: bool = False


class OrderedBatch(Batch):
    """An :class:`~pylibbpf.Batch` from the ordered merge, in merged order.

    Beside ``len(batch)``, ``batch[i]``, iteration, ``tags`` (the CPU, or the
    ring buffer's index) and ``to_numpy()``: ``timestamps[i]`` is record
    ``i``'s merge key (ns; ``timestamps`` is an ``array.array('Q')``: a
    sequence of ints without a Python object per record) and ``late[i]`` is
    True when it is below a timestamp delivered earlier. ``lost_notices`` lists the lost-samples notices the
    merge met while producing this batch, as ``(cpu, count)`` pairs (they are
    not records of the batch; ``lost`` is all zeros). The records are copies
    in one ``bytes`` object, valid for as long as the batch or a view of it
    is referenced.
    """

    __slots__ = ("late", "lost_notices", "timestamps")

    timestamps: Sequence[int]
    late: list[bool]
    lost_notices: list[tuple[int, int]]

    @classmethod
    def empty(cls) -> OrderedBatch:
        batch = super().empty()
        batch.timestamps, batch.late, batch.lost_notices = array.array("Q"), [], []
        return batch

    @classmethod
    def _from_merge(cls, out: CData, n: int, tag_of: list[int] | None) -> OrderedBatch:
        """The first ``n`` entries of a ``plb_merge_out``, copied: one bytes object and a few arrays.

        No Python object per record unless a record is flagged: the arrays are
        memcpy'd, and the flags are tested as bytes.
        """
        batch = cls.__new__(cls)
        used = int(out.used)
        batch.blob = bytes(ffi.buffer(out.buf, used)) if used else b""
        batch.view = memoryview(batch.blob)
        batch.starts = _u32_array(out.start, n)
        batch.lens = _u32_array(out.len, n)
        rings = _u32_array(out.ring, n)
        batch.tags = rings.tolist() if tag_of is None else [tag_of[r] for r in rings]  # small ints: no allocation
        ts = _u64_array(out.ts, n)
        flags = _u32_array(out.flags, n)
        if any_nonzero(flags):
            late_bit, lost_bit = lib.PLB_MERGE_F_LATE, lib.PLB_MERGE_F_LOST
            batch.late = [bool(f & late_bit) for f in flags]
            # A lost-samples entry carries its count where a sample has its timestamp.
            batch.lost = [t if f & lost_bit else 0 for f, t in zip(flags, ts)]
            batch.timestamps = array.array("Q", [0 if f & lost_bit else t for f, t in zip(flags, ts)])
        else:
            batch.late = [False] * n
            batch.lost = _ZEROS_U64 * n
            batch.timestamps = ts
        batch.lost_notices = []
        batch.next = 0
        return batch

    def rest(self) -> OrderedBatch:
        if self.next:
            k = self.next
            self.timestamps, self.late = self.timestamps[k:], self.late[k:]
        super().rest()
        return self

    def take_lost(self) -> list[tuple[int, int]]:
        if not any_nonzero(self.lost):
            return []
        self.rest()
        keep = [i for i, n in enumerate(self.lost) if not n]
        self.timestamps = array.array("Q", [self.timestamps[i] for i in keep])
        self.late = [self.late[i] for i in keep]
        return super().take_lost()


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


def _ring_cpus(m: Map, who: str) -> list[int]:
    """The CPUs that get a ring: online and below the map's max_entries (its keys are CPU numbers)."""
    limit = m.max_entries
    cpus = [c for c in online_cpus() if c < limit]
    if not cpus:
        raise BPFError(errno.EINVAL, f"map {m.name!r} has {limit} entries: no online CPU fits", who)
    return cpus


#: The most pages a perf ring may have (libbpf multiplies them by the page size in a size_t,
#: the kernel caps a ring far below: this bound only keeps the number sane).
_MAX_PAGE_CNT = 1 << 20


def _page_cnt(page_cnt: object) -> int:
    """``page_cnt`` checked: an int, a power of two, at most _MAX_PAGE_CNT."""
    page_cnt = _check.integer(page_cnt, "page_cnt", lo=1, hi=_MAX_PAGE_CNT)
    if page_cnt & (page_cnt - 1):
        raise ValueError(f"page_cnt must be a power of two, got {page_cnt}")
    return page_cnt


def _address(ptr: CData) -> int:
    return int(ffi.cast("uintptr_t", ptr))


def _ring_range(pb: CData, i: int) -> tuple[int, int]:
    """(address, length) of ring ``i``'s mapping: libbpf's data size plus the control page."""
    base, size = _libbpf.perf_buffer__buffer(pb, i, f"perf_buffer__buffer({i})")
    return _address(base), size + mmap.PAGESIZE


def _free_perf_buffer(pb: CData, map_fd: int, owner_pid: int) -> None:
    """``perf_buffer__free`` then close ``map_fd`` (the perf_buffer's own dup of the map fd).

    Not in a forked child: there the perf events and the map are the parent's,
    still in use, and perf_buffer__free would disable the events
    (``PERF_EVENT_IOC_DISABLE``) and delete the parent's entries from the map,
    silencing the parent's rings. The child's copies of the fds (close-on-exec)
    and mappings go when it exits or execs.
    """
    _close.remove_fork_hole(_address(pb))
    if owner_pid == current_pid():
        _libbpf.perf_buffer__free(pb)
    os.close(map_fd)


class _PerfRings:
    """A perf_buffer over a dup of a perf event array's fd, one ring per CPU in ``cpus``.

    The CPUs are passed to ``perf_buffer__new_raw`` explicitly (``cpus`` and
    ``map_keys``), so ring ``i`` is CPU ``cpus[i]`` by construction rather than
    by libbpf's internal choice. The map fd is duplicated so that closing the
    BPF object first cannot make libbpf's clean-up (and pause/resume) act on a
    reused fd number.
    """

    def __init__(self, m: Map, who: str, page_cnt: int, attr: CData, event_cb: CData, ctx: CData) -> None:
        self.cpus = _ring_cpus(m, who)
        self.map_fd = _libbpf.dup(m.fd, f"{who}: map {m.name!r}")
        try:
            n = len(self.cpus)
            opts = ffi.new("struct perf_buffer_raw_opts *")
            opts.sz = ffi.sizeof("struct perf_buffer_raw_opts")
            keys = ffi.new("int[]", self.cpus)
            opts.cpu_cnt, opts.cpus, opts.map_keys = n, keys, keys
            pb = _libbpf.perf_buffer__new_raw(self.map_fd, page_cnt, attr, event_cb, ctx, opts,
                                              f"perf_buffer__new_raw({m.name})")
        except BaseException:
            os.close(self.map_fd)
            raise
        self.pb = pb
        self._finalizer = _close.finalizer(self, _free_perf_buffer, pb, self.map_fd, current_pid())
        try:
            count = _libbpf.perf_buffer__buffer_cnt(pb)
            if count != n:
                raise BPFError(errno.EINVAL, f"perf_buffer has {count} rings for {n} CPUs", who)
            self.fds = [_libbpf.perf_buffer__buffer_fd(pb, i, f"perf_buffer__buffer_fd({i})") for i in range(n)]
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._finalizer()


class _RingBufMaps:
    """Ring buffer maps mapped for the merge (``plb_rb_map``), each through a dup of its fd.

    The dup keeps the map (and its epoll registration) alive even if the BPF
    object is closed first. ``views[i]`` is ring ``i``'s ``struct plb_rb_view``,
    valid until ``close()``.
    """

    def __init__(self, maps: list[Map]) -> None:
        self.fds: list[int] = []
        self.mappings: list[CData] = []
        self._finalizer = _close.finalizer(self, _RingBufMaps._free, self.mappings, self.fds)
        try:
            for m in maps:
                self.fds.append(_libbpf.dup(m.fd, f"OrderedReader: map {m.name!r}"))
                mapping = ffi.new("struct plb_rb_mapping *")
                _libbpf.plb_rb_map(self.fds[-1], m.max_entries, mapping, f"plb_rb_map({m.name})")
                self.mappings.append(mapping)
        except BaseException:
            self.close()
            raise
        self.views = [ffi.addressof(mapping, "view") for mapping in self.mappings]

    @staticmethod
    def _free(mappings: list[CData], fds: list[int]) -> None:
        for mapping in mappings:
            _libbpf.plb_rb_unmap(mapping)
        for fd in fds:
            os.close(fd)

    def close(self) -> None:
        self._finalizer()


class _RecordReader(Closable):
    """What PerfReader and OrderedReader share: ``read()`` and iteration until closed."""

    @abc.abstractmethod
    def read(self, timeout: float | None = None) -> Record:
        """The next record; TimeoutError when ``timeout`` runs out, ClosedError once closed."""

    def __iter__(self) -> Iterator[Record]:
        """``for rec in reader``: :meth:`read` without a timeout until the reader is closed."""
        while True:
            try:
                rec = self.read()
            except ClosedError:
                return
            yield rec


class PerfReader(_RecordReader):
    """Read a perf event array one record at a time, cilium/ebpf style.

    ``per_cpu_buffer`` is the size in bytes of each CPU's ring, rounded up to
    a power-of-two number of pages (``buffer_size`` tells the result). By
    default every sample wakes a blocked ``read``; ``wakeup_events=n`` wakes
    it every ``n`` samples of a ring instead, and ``watermark=bytes`` once a
    ring holds that many bytes (below ``buffer_size``; the two are exclusive).
    Either way, a ``read`` whose timeout expires first takes whatever the
    rings hold before raising TimeoutError.

    Records come ring by ring (one CPU's records in the order that CPU wrote
    them; no order across CPUs -- see :class:`OrderedReader`). A full ring
    shows up as a record with ``lost_samples > 0`` and no data. Records are
    copies: nothing refers to the kernel's ring after ``read`` returns.

    One thread reads at a time. ``close()`` from any thread wakes a blocked
    ``read``, which raises ClosedError; ``pause()``, ``resume()`` and
    ``close()`` may be called from any thread.
    """

    _what = "PerfReader"

    def __init__(self, map: Map, per_cpu_buffer: int = 4096, watermark: int = 0,
                 wakeup_events: int | None = None) -> None:
        super().__init__()
        require_map_type(map, lib.BPF_MAP_TYPE_PERF_EVENT_ARRAY, "PerfReader")
        per_cpu_buffer = _check.integer(per_cpu_buffer, "per_cpu_buffer", lo=1, hi=_MAX_PAGE_CNT * mmap.PAGESIZE)
        watermark = _check.integer(watermark, "watermark")
        pages = 1 << max(0, math.ceil(per_cpu_buffer / mmap.PAGESIZE) - 1).bit_length()
        self._buffer_size = pages * mmap.PAGESIZE
        if not 0 <= watermark < self._buffer_size:
            raise ValueError(f"watermark must be >= 0 and below the ring size {self._buffer_size}, got {watermark}")
        if wakeup_events is not None:
            wakeup_events = _check.integer(wakeup_events, "wakeup_events", lo=1, hi=_check.UINT32_MAX)
            if watermark:
                raise ValueError("watermark and wakeup_events cannot both be set")
        attr = _libbpf.plb_perf_attr_new(lib.PLB_PERF_SAMPLE_RAW, wakeup_events or 1, watermark, -1)
        self._batch = _libbpf.plb_batch_new(256, 64 * 1024)
        self._pending: Batch | None = None
        self._paused = False
        self._pause_lock = threading.Lock()
        self._rings = _PerfRings(map, "PerfReader", pages, attr, lib.plb_perf_event_collect, self._batch)
        try:
            self._waiter = Waiter([_libbpf.perf_buffer__epoll_fd(self._rings.pb)], "PerfReader")
        except BaseException:
            self._rings.close()
            raise

    @property
    def buffer_size(self) -> int:
        """Bytes of each CPU's ring: ``per_cpu_buffer`` rounded up to a power-of-two number of pages."""
        return self._buffer_size

    @property
    def cpus(self) -> list[int]:
        """The CPUs that have a ring (the online CPUs below the map's max_entries), in ring order."""
        return list(self._rings.cpus)

    @property
    def paused(self) -> bool:
        return self._paused

    def read(self, timeout: float | None = None) -> Record:
        """The next record, as a new :class:`Record` holding a ``bytes`` copy of the sample.

        Blocks until a record is there, or for at most ``timeout`` seconds
        (None: no limit; 0: do not wait). Raises TimeoutError when the time
        runs out with every ring empty (the rings are drained once more after
        the wait, so data below the watermark is still returned), ClosedError
        when the reader is closed (also from another thread while blocked),
        BPFError when the rings cannot be read.
        """
        rec = Record()
        self._next_into(rec, timeout, reuse=False)
        return rec

    def read_into(self, record: Record, timeout: float | None = None) -> None:
        """As :meth:`read`, but fill ``record`` in place, reusing its sample buffer.

        Every field of ``record`` is overwritten. When ``record.raw_sample`` is
        a ``bytearray``, that same object receives the sample (resized in
        place, ``raw_sample[:] = sample``, which keeps its allocation when it
        is large enough); otherwise a new ``bytearray`` is assigned, to be
        reused by the next call. A bytearray with live memoryviews cannot be
        resized: BufferError is raised and the record stays unread.
        The bytes are valid until the next ``read_into`` with this record.
        """
        self._next_into(record, timeout, reuse=True)

    def pause(self) -> None:
        """Stop the kernel from writing: BPF programs' ``bpf_perf_event_output`` fails with -ENOENT.

        Removes this reader's CPUs from the perf event array (their rings stay:
        what they hold can still be read). Idempotent; any thread.
        """
        self._check_open()  # in a forked child: before the lock
        with self._pause_lock:
            self._check_open()
            key = ffi.new("int *")
            for cpu in self._rings.cpus:
                key[0] = cpu
                _libbpf.bpf_map_delete_elem(self._rings.map_fd, key, f"PerfReader.pause: bpf_map_delete_elem({cpu})")
            self._paused = True

    def resume(self) -> None:
        """Put the rings back into the perf event array after :meth:`pause`. Idempotent; any thread."""
        self._check_open()
        with self._pause_lock:
            self._check_open()
            key, value = ffi.new("int *"), ffi.new("int *")
            for cpu, fd in zip(self._rings.cpus, self._rings.fds, strict=True):
                key[0], value[0] = cpu, fd
                _libbpf.bpf_map_update_elem(self._rings.map_fd, key, value, 0,
                                            f"PerfReader.resume: bpf_map_update_elem({cpu})")
            self._paused = False

    def _next_into(self, rec: Record, timeout: float | None, reuse: bool) -> None:
        deadline = _check.deadline(timeout)
        if reuse and not isinstance(rec, Record):
            raise TypeError(f"record must be a Record, got {type(rec).__name__}")
        self._check_open()
        with self._lock:
            self._check_open()
            while self._pending is None:
                self._drain()
                if self._pending is not None:
                    break
                wait_ms = _check.remaining_ms(deadline)
                if wait_ms == 0:
                    raise TimeoutError(f"PerfReader: no record within {timeout} s")
                self._wait(wait_ms)
            batch = self._pending
            i = batch.next
            start, length = batch.starts[i], batch.lens[i]
            if reuse:
                buf = rec.raw_sample
                if isinstance(buf, bytearray):
                    buf[:] = batch.view[start:start + length]
                else:
                    rec.raw_sample = bytearray(batch.view[start:start + length])
            else:
                rec.raw_sample = batch.blob[start:start + length]
            rec.cpu, rec.lost_samples, rec.timestamp, rec.late = batch.tags[i], batch.lost[i], 0, False
            batch.next = i + 1
            if batch.next >= len(batch.starts):
                self._pending = None

    def _drain(self) -> None:
        """Copy every ring's records into the batch (libbpf reads them, our C callback copies)."""
        try:
            _libbpf.perf_buffer__consume_into(self._rings.pb, self._batch, "perf_buffer__consume")
        finally:
            if self._batch.n:  # records already consumed from the kernel are kept, even on an error
                self._pending = Batch(self._batch, with_tags=True)

    def _release(self) -> None:
        with self._pause_lock:
            self._rings.close()
            self._pending = None


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


class OrderedReader(_RecordReader):
    """Every CPU's perf ring (or several BPF ring buffers) merged into one stream in timestamp order.

    ``map`` is a perf event array, or a ring buffer map or a list of them.
    ``timestamp`` says what orders the records: ``"kernel"`` (perf only) --
    the kernel's sample time, the rings being opened with PERF_SAMPLE_TIME on
    CLOCK_MONOTONIC; an int -- the byte offset of a u64 in each sample; or a
    field name of ``event`` (an EventDef; the field must be a u64 or i64).
    Timestamps must be CLOCK_MONOTONIC nanoseconds (``bpf_ktime_get_ns()``),
    the clock the window is measured on, and are compared as unsigned.

    The rule (README, "Ordered merge"): a record is delivered once no ring can
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
    _BUF_BYTES = 1 << 21        # payload bytes per C drain (grows for a larger record)

    def __init__(self, map: Map | Sequence[Map], timestamp: str | int = "kernel", event: EventDef | None = None,
                 window_ms: float = 5.0, late: str = "deliver", page_cnt: int = 64) -> None:
        super().__init__()
        perf, maps = self._sources(map)
        offset = _timestamp_offset(timestamp, event)
        window_ms = _check.number(window_ms, "window_ms", lo=0, hi=_MAX_WINDOW_MS)
        _check.choice(late, "late", _LATE_POLICIES)
        page_cnt = _page_cnt(page_cnt)
        if offset is None and not perf:
            raise ValueError("timestamp='kernel' needs a perf event array: ring buffer records have no "
                             "sample time; give the offset or field name of a u64 timestamp")

        cfg = ffi.new("struct plb_merge_config *")
        cfg.ts_mode = lib.PLB_TS_KERNEL if offset is None else lib.PLB_TS_OFFSET
        cfg.ts_offset = offset or 0
        cfg.window_ns = round(window_ms * 1_000_000)
        cfg.late_policy = getattr(lib, _LATE_POLICIES[late])
        cfg.pressure_permille = 0  # the default: 750
        self.window_ms = float(window_ms)
        self._merge_lock = threading.Lock()
        self._merge: CData = None
        self._final: OrderedStats | None = None
        self._pending: OrderedBatch | None = None
        self._perf: _PerfRings | None = None
        self._ringbufs: _RingBufMaps | None = None
        self._free_merge: weakref.finalize[Any, Any] | None = None
        self._max = self._MAX_RECORDS
        try:
            if perf:
                sample_type = lib.PLB_PERF_SAMPLE_RAW
                clockid = -1
                if offset is None:
                    sample_type |= lib.PLB_PERF_SAMPLE_TIME
                    clockid = lib.CLOCK_MONOTONIC
                cfg.sample_type = sample_type
                attr = _libbpf.plb_perf_attr_new(sample_type, 1, 0, clockid)
                self._perf = _PerfRings(maps[0], "OrderedReader", page_cnt, attr, lib.plb_perf_event_ignore,
                                        ffi.NULL)
                n = len(self._perf.cpus)
                srcs = ffi.new("struct plb_merge_source[]", n)
                for i in range(n):
                    base, size = _libbpf.perf_buffer__buffer(self._perf.pb, i, f"perf_buffer__buffer({i})")
                    _libbpf.plb_merge_source_perf(srcs + i, base, size, f"plb_merge_source_perf({i})")
                cpus = self._perf.cpus
                self._tag_of: list[int] | None = None if cpus == list(range(n)) else list(cpus)
                self._tags = list(cpus)
            else:
                n = len(maps)
                self._ringbufs = _RingBufMaps(maps)
                srcs = ffi.new("struct plb_merge_source[]", n)
                for i, view in enumerate(self._ringbufs.views):
                    srcs[i].kind = lib.PLB_SRC_RINGBUF
                    srcs[i].rb = view
                self._tag_of = None
                self._tags = list(range(n))
            self._merge = _libbpf.plb_merge_new(cfg, srcs, n, "plb_merge_new")
            # a safety net only: close() frees the merge, before the rings it points into
            self._free_merge = _close.finalizer(self, _libbpf.plb_merge_free, self._merge)
            self._nsrc = n
            self._alloc_out(self._BUF_BYTES)
            # Perf fds report each wakeup once: level-triggered. Ring buffer fds are
            # "readable" while data is pending, held-back data included: edge-triggered.
            self._waiter = Waiter(self._perf.fds if self._perf is not None else [], "OrderedReader")
            for fd in self._ringbufs.fds if self._ringbufs is not None else []:
                _libbpf.plb_epoll_add_edge(self._waiter.fd, fd, "OrderedReader: epoll_ctl")
        except BaseException:
            self._free_sources()
            if self._waiter is not None:
                self._waiter.close()
            raise

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

    def _alloc_out(self, buf_bytes: int) -> None:
        out = ffi.new("struct plb_merge_out *")
        n = self._max
        self._arrays = (ffi.new("uint8_t[]", buf_bytes), ffi.new("uint32_t[]", n), ffi.new("uint64_t[]", n),
                        ffi.new("uint32_t[]", n), ffi.new("uint32_t[]", n), ffi.new("uint32_t[]", n))
        out.buf, out.ring, out.ts, out.flags, out.start, out.len = self._arrays
        out.buf_size = buf_bytes
        self._out = out

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
            rec = Record(batch.tags[i], batch.blob[start:start + batch.lens[i]], batch.lost[i],
                         batch.timestamps[i], batch.late[i])
            batch.next = i + 1
            if batch.next >= len(batch.starts):
                self._pending = None
        return rec

    def read_batch(self, timeout: float | None = None) -> OrderedBatch:
        """Everything the merge lets out now, in merged order, as one :class:`OrderedBatch`.

        The fast path: one C drain, one bytes copy. Waits like :meth:`read` (up
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
            return OrderedBatch.empty()
        batch.rest()
        batch.lost_notices = batch.take_lost()
        return batch

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
        _libbpf.plb_merge_stats(self._merge, st, backlog, self._nsrc)
        return OrderedStats(
            emitted=int(st.emitted), late_events=int(st.late_events), max_lateness_ns=int(st.max_lateness_ns),
            dropped_late=int(st.dropped_late), inversions=int(st.inversions), lost_records=int(st.lost_records),
            lost_samples=int(st.lost_samples), malformed=int(st.malformed), forced_flushes=int(st.forced_flushes),
            backlog=dict(zip(self._tags, ffi.unpack(backlog, self._nsrc), strict=True)))

    def _pending_or_collect(self, deadline: float | None) -> OrderedBatch | None:
        """What a previous ``read`` left, else :meth:`_collect` (lock held; ClosedError once closed)."""
        self._check_open()
        return self._pending if self._pending is not None else self._collect(deadline)

    def _collect(self, deadline: float | None) -> OrderedBatch | None:
        """Drain until something can be delivered or the deadline passes (lock held); None on timeout.

        The epoll timeout is the sooner of the caller's deadline and the merge's
        own (``plb_merge_poll_timeout_ms``): a held-back record becomes
        deliverable by the clock alone, and a perf ring reports each wakeup
        only once, so no fd would wake us for it.
        """
        rechecked = False
        while True:
            batch = self._drain(0)
            if batch is not None:
                return batch
            with self._merge_lock:
                merge_ms = _libbpf.plb_merge_poll_timeout_ms(self._merge)
            if merge_ms == 0:
                continue  # records were consumed without output (dropped, malformed): again now
            if merge_ms < 0 and self._ringbufs is not None and not rechecked:
                # Ring buffers are watched edge-triggered, and a producer wakes us
                # only if our consumer position has reached its record. Fence,
                # then look again before sleeping: either we see its record, or
                # it sees our position and wakes us (plb_perfattr.h).
                _libbpf.plb_full_fence()
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
            while True:
                n = _libbpf.plb_merge_drain(self._merge, self._out, self._max, flags, "plb_merge_drain")
                if n != -errno.ENOSPC:
                    break
                need = int(self._out.need)
                self._alloc_out(max(2 * int(self._out.buf_size), (need + 7) & ~7))
            if n == 0:
                return None
            return OrderedBatch._from_merge(self._out, n, self._tag_of)

    def _free_sources(self) -> None:
        """Free the merge first (it points into the rings), then the rings."""
        with self._merge_lock:
            if self._merge is not None:
                self._final = self._stats_locked()
                self._merge = None
            if self._free_merge is not None:
                self._free_merge()
        if self._perf is not None:
            self._perf.close()
        if self._ringbufs is not None:
            self._ringbufs.close()

    def _release(self) -> None:
        self._free_sources()
        self._pending = None
