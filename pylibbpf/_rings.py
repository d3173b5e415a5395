"""The rings under the readers: ring buffer mappings and per-CPU perf rings.

:class:`RingBufLayout` maps one ``BPF_MAP_TYPE_RINGBUF`` map into this process
and reads it with the C walker (``plb_rb_read``): the mmap layer's functions
(:mod:`pylibbpf.ringbuf`) and the ring buffer consumers read through it.
:class:`RingBufMaps` maps several for the ordered merge. :class:`PerfRings`
is libbpf's ``perf_buffer`` over an explicit list of CPUs, for PerfReader and
OrderedReader. Everything here is used through public methods only: a layout's
``turn()`` / ``locked()`` say which lock a read holds.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import time
import weakref
from collections.abc import Iterator
from typing import Any

from . import _check, _close, _into, _libbpf, _shim
from ._close import Closable, OneCaller, Waiter, current_pid
from ._ffi import ffi, lib
from .errors import BPFError
from .features import online_cpus
from .maps import Map

CData = Any


def require_map_type(m: Map, wanted: int, who: str) -> None:
    """TypeError naming both types unless ``m`` is a map of type ``wanted``."""
    if not isinstance(m, Map):
        raise TypeError(f"{who} needs a Map, not {type(m).__name__}")
    actual = m.type
    if actual != wanted:
        raise TypeError(f"{who} needs a {_libbpf.libbpf_map_type_str(wanted)} map; "
                        f"map {m.name!r} is {_libbpf.libbpf_map_type_str(actual)}")
    if m.fd < 0:
        raise BPFError(lib.EINVAL, f"map {m.name!r} is not created: call BPFObject.load() first", who)


# --- the ring buffer mapping (the mmap layer and the consumers read through it) -----------


#: Longest single epoll wait of the mmap layer's readers, in ms: a safety net for producers
#: that submit with BPF_RB_NO_WAKEUP (they never wake anyone), as in the native reader.
SAFETY_NET_MS = 100

#: Longest pause after the ring reported data that was not readable yet (a record reserved but
#: not committed keeps the map fd readable): the pause doubles from 0.5 ms up to this.
_BUSY_PAUSE_MAX_S = 0.02


def busy_pause(idle: int) -> float:
    """Seconds to pause after ``idle`` consecutive wakeups that found nothing to read.

    The kernel reports a ring buffer readable while any byte is pending, also
    when the head record is still being written; waiting again at once would
    spin until the producer commits it. Pausing (0.5 ms, doubling to 20 ms)
    keeps a stalled producer from costing a CPU.
    """
    return float(min(0.0005 * (1 << min(idle, 16)), _BUSY_PAUSE_MAX_S))


class RecordBuffer:
    """Caller memory for the shim's batch calls (``plb_rb_read``, ``plb_queue_pop_batch``).

    ``out`` receives the records' bytes, ``starts``/``lens`` where each one
    is; ``grow()`` replaces the byte area when a record does not fit. One
    user at a time (the owner's lock or thread).
    """

    def __init__(self, max_records: int, cap: int) -> None:
        self.max_records = max_records
        self.cap = cap
        self.out = ffi.new("uint8_t[]", cap)
        self.starts = ffi.new("uint32_t[]", max_records)
        self.lens = ffi.new("uint32_t[]", max_records)
        self.used = ffi.new("size_t *")

    def grow(self, need: int) -> None:
        """Make room for at least ``need`` bytes (the size the shim reported with -EMSGSIZE)."""
        cap = self.cap
        while cap < need:
            cap *= 2
        if cap != self.cap:
            self.out = ffi.new("uint8_t[]", cap)
            self.cap = cap

    def reserve(self, max_records: int, cap: int) -> None:
        """Make room for ``max_records`` records and ``cap`` bytes in one call."""
        if max_records > self.max_records:
            self.starts = ffi.new("uint32_t[]", max_records)
            self.lens = ffi.new("uint32_t[]", max_records)
            self.max_records = max_records
        self.grow(cap)

    def take(self, n: int) -> list[bytes]:
        """The ``n`` records the last call produced, as ``bytes`` copies (the memory is reused)."""
        if n <= 0:
            return []
        blob = ffi.buffer(self.out, self.used[0])[:]
        starts: list[int] = ffi.unpack(self.starts, n)
        lens: list[int] = ffi.unpack(self.lens, n)
        return [blob[s:s + ln] for s, ln in zip(starts, lens, strict=True)]


def read_view(view: CData, records: RecordBuffer, max_records: int, consume: bool, what: str) -> list[bytes]:
    """Up to ``max_records`` committed records of the ring ``view`` (a ``struct plb_rb_view *``).

    One ``plb_rb_read`` into ``records`` (grown and retried when the head
    record alone does not fit), returned as ``bytes`` copies; ``consume``
    publishes the new consumer position. The caller keeps the view's memory
    mapped and is the ring's only reader meanwhile.
    """
    if max_records > records.max_records:
        records.reserve(max_records, 0)
    while True:
        n = _shim.plb_rb_read(view, records.out, records.cap, records.starts, records.lens, max_records,
                                consume, records.used, what)
        if n != -lib.EMSGSIZE:
            return records.take(n)
        records.grow(int(records.used[0]))  # the head record alone is larger than the buffer


_ring_turns: weakref.WeakKeyDictionary[Map, OneCaller] = weakref.WeakKeyDictionary()


def _ring_turn(map: Map) -> OneCaller:
    """The turn every reader of the mmap layer takes on ``map``'s ring (one per Map object)."""
    turn = _ring_turns.get(map)
    if turn is None:
        turn = _ring_turns.setdefault(map, OneCaller(f"ring buffer {map.name!r} (mmap layer)"))
    return turn


class RingBufLayout(Closable, _into.HandsBackOdd):
    """A BPF ring buffer map mapped into this process; made by :func:`map_ringbuf`.

    The consumer page is mapped read-write (only it: the kernel refuses a
    writable mapping of anything else), the producer page and the data area
    read-only, the data area twice back to back so that no record wraps.
    ``consumer_pos``, ``producer_pos`` (byte positions that only grow),
    ``data_size`` and ``available()`` (bytes pending, headers included) read
    the live pages.

    ``close()`` (= :func:`unmap_ringbuf`) unmaps; it is idempotent, waits for
    a read in another thread to finish, and every later use raises
    ClosedError. The mapping does not depend on the map's fd: it stays valid
    until closed even if the BPF object is closed first. A layout moves the
    ring's consumer position: do not read the same ring through a
    :class:`RingBuffer` or a consumer at the same time. The mmap layer's
    functions, from any number of threads and layouts of the same Map, take
    turns on the ring: each record is read once.
    """

    _what = "RingBufLayout"

    def __init__(self, map: Map) -> None:
        super().__init__()
        require_map_type(map, lib.BPF_MAP_TYPE_RINGBUF, "map_ringbuf")
        self.map = map
        self._data_size = map.max_entries
        self._mapping = ffi.new("struct plb_rb_mapping *")
        _shim.plb_rb_map(map.fd, self._data_size, self._mapping, f"plb_rb_map({map.name})")
        # Safety net only: close() is the contract and runs it (a finalizer runs once).
        self._finalizer = _close.finalizer(self, _shim.plb_rb_unmap, self._mapping)
        self._ring_turn = _ring_turn(map)
        self._view = ffi.addressof(self._mapping[0], "view")
        self._views = ffi.new("struct plb_rb_view *[]", [self._view])  # as plb_rb_wait_into takes them
        self._records = RecordBuffer(1024, min(self._data_size, 256 * 1024))
        self._into_state: _into.Into | None = None

    @property
    def consumer_pos(self) -> int:
        """The consumer position: every byte below it has been read."""
        self._check_open()
        with self._lock:
            self._check_open()
            return _shim.plb_rb_consumer_pos(self._view)

    @property
    def producer_pos(self) -> int:
        """The producer position: every byte below it is reserved (committed or not)."""
        self._check_open()
        with self._lock:
            self._check_open()
            return _shim.rb_producer_pos(self._view)

    @property
    def data_size(self) -> int:
        """The size of the data area in bytes (the map's max_entries, a power of two)."""
        self._check_open()
        return self._data_size

    def available(self) -> int:
        """Bytes between the consumer and the producer position (record headers and padding
        included, discarded and not yet committed records too): 0 when nothing is pending."""
        self._check_open()
        with self._lock:
            self._check_open()
            return _shim.plb_rb_available(self._view)

    def view(self) -> CData:
        """The ``struct plb_rb_view *`` over the mapping, for the C shim; valid until close()."""
        self._check_open()
        return self._view

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """Hold the ring's turn among the mmap layer's readers, then this layout's lock.

        What the mmap functions take around a read: every reader of the same Map
        (any thread, any layout) waits for it, so each record is read once.
        ClosedError when the layout is closed (also while waiting).
        """
        self._check_open()
        self._ring_turn.enter(-1)
        try:
            with self._lock:
                self._check_open()
                yield
        finally:
            self._ring_turn.leave()

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold this layout's lock only: for a reader that is the ring's only one (a consumer's
        thread). ClosedError when the layout is closed."""
        self._check_open()
        with self._lock:
            self._check_open()
            yield

    def read_once(self, max_records: int, consume: bool) -> list[bytes]:
        """One ``plb_rb_read`` of up to ``max_records`` committed records, as ``bytes`` copies.

        Call inside :meth:`turn` or :meth:`locked`. ``consume`` moves the
        consumer position past them; otherwise they stay (a peek). Never blocks.
        """
        self._check_open()  # closed (at exit too) under a reader that took the lock after close
        return read_view(self._view, self._records, max_records, consume, f"plb_rb_read({self.map.name})")

    def read(self, max_records: int | None, consume: bool) -> list[bytes]:
        """Committed records from the consumer position on, up to ``max_records`` (None: all).

        Call inside :meth:`turn` or :meth:`locked`; never blocks.

        Consuming reads go in chunks until the ring is empty or the head is
        busy. A peek cannot chunk (the position does not move), so its memory
        is sized for everything pending first.
        """
        rec = self._records
        if not consume:
            pending = _shim.plb_rb_available(self._view)
            want = pending // 8 if max_records is None else min(max_records, pending // 8)
            if want <= 0:
                return []
            rec.reserve(want, min(pending, self._data_size))
            return self.read_once(want, consume=False)
        events: list[bytes] = []
        while max_records is None or len(events) < max_records:
            want = rec.max_records if max_records is None else min(max_records - len(events), rec.max_records)
            chunk = self.read_once(want, consume=True)
            if not chunk:
                break
            events.extend(chunk)
        return events

    def read_into(self, out: Any, timeout: float | None = None, *, record_size: Any = None) -> int:
        """Consume fixed-size records straight into the rows of ``out``; returns how many rows were written.

        As :meth:`RingBuffer.read_into <pylibbpf.RingBuffer.read_into>`: ``out``
        a numpy structured array (record size = its itemsize) or any writable
        C-contiguous buffer with ``record_size=`` (bytes or an EventDef); one
        copy per record, in C without the GIL; at most ``len(out)`` rows, the
        rest stays in the ring; discarded records skipped; a record of another
        length consumed and handed back whole by :meth:`take_odd`. Blocks
        until a row is written (waiting on the map's fd), for at most
        ``timeout`` seconds (None: no limit; 0: do not wait); 0 on timeout.
        Takes the ring's turn like the other mmap-layer readers. ClosedError
        once closed (a read blocked in another thread notices within 0.1 s).
        """
        rows = _into.Rows(out, record_size)
        deadline = _check.deadline(timeout)
        self._check_open()
        waiter: Waiter | None = None
        idle = 0
        try:
            while True:
                with self.turn():
                    if self._into_state is None:
                        self._into_state = _into.Into()
                    into = self._into_state
                    into.begin(rows)
                    try:
                        if rows.count:
                            into.wait_fill(_shim.plb_rb_wait_into, None, 0, self._views, 1,
                                           what=f"RingBufLayout({self.map.name})")
                    finally:
                        written = into.end()
                left = _check.remaining_ms(deadline)
                if written or not rows.count or left == 0:
                    return written
                if waiter is None:
                    waiter = Waiter([self.map.fd], "RingBufLayout.read_into")
                if idle:
                    time.sleep(busy_pause(idle) if left < 0 else min(busy_pause(idle), left / 1000))
                ready = waiter.wait(SAFETY_NET_MS if left < 0 else min(left, SAFETY_NET_MS),
                                    "RingBufLayout.read_into")
                idle = idle + 1 if ready else 0
        finally:
            if waiter is not None:
                waiter.close()

    def _release(self) -> None:
        self._finalizer()


# --- the per-CPU perf rings and the merge's ring buffer mappings ---------------------------

def ring_cpus(m: Map, who: str) -> list[int]:
    """The CPUs that get a ring: online and below the map's max_entries (its keys are CPU numbers)."""
    limit = m.max_entries
    cpus = [c for c in online_cpus() if c < limit]
    if not cpus:
        raise BPFError(errno.EINVAL, f"map {m.name!r} has {limit} entries: no online CPU fits", who)
    return cpus


#: The most pages a perf ring may have (libbpf multiplies them by the page size in a size_t,
#: the kernel caps a ring far below: this bound only keeps the number sane).
MAX_PAGE_CNT = 1 << 20


def check_page_cnt(page_cnt: object) -> int:
    """``page_cnt`` checked: an int, a power of two, at most MAX_PAGE_CNT."""
    page_cnt = _check.integer(page_cnt, "page_cnt", lo=1, hi=MAX_PAGE_CNT)
    if page_cnt & (page_cnt - 1):
        raise ValueError(f"page_cnt must be a power of two, got {page_cnt}")
    return page_cnt


def address(ptr: CData) -> int:
    return int(ffi.cast("uintptr_t", ptr))


def ring_range(pb: CData, i: int) -> tuple[int, int]:
    """(address, length) of ring ``i``'s mapping: libbpf's data size plus the control page."""
    base, size = _libbpf.perf_buffer__buffer(pb, i, f"perf_buffer__buffer({i})")
    return address(base), size + mmap.PAGESIZE


def free_perf_buffer(pb: CData, map_fd: int, owner_pid: int) -> None:
    """``perf_buffer__free`` then close ``map_fd`` (the perf_buffer's own dup of the map fd).

    Not in a forked child: there the perf events and the map are the parent's,
    still in use, and perf_buffer__free would disable the events
    (``PERF_EVENT_IOC_DISABLE``) and delete the parent's entries from the map,
    silencing the parent's rings. The child's copies of the fds (close-on-exec)
    and mappings go when it exits or execs.
    """
    _close.remove_fork_hole(address(pb))
    if owner_pid == current_pid():
        _libbpf.perf_buffer__free(pb)
    os.close(map_fd)


def perf_ring_fds(pb: Any, count: int) -> list[int]:
    """The perf event fd of each of ``pb``'s ``count`` rings (``struct perf_buffer *``): what a
    reader's wait watches instead of libbpf's epoll fd (a nested set costs a wake-up hop)."""
    return [_libbpf.perf_buffer__buffer_fd(pb, i, f"perf_buffer__buffer_fd({i})") for i in range(count)]


class PerfRings:
    """A perf_buffer over a dup of a perf event array's fd, one ring per CPU in ``cpus``.

    The CPUs are passed to ``perf_buffer__new_raw`` explicitly (``cpus`` and
    ``map_keys``), so ring ``i`` is CPU ``cpus[i]`` by construction rather than
    by libbpf's internal choice. The map fd is duplicated so that closing the
    BPF object first cannot make libbpf's clean-up (and pause/resume) act on a
    reused fd number.
    """

    def __init__(self, m: Map, who: str, page_cnt: int, attr: CData, event_cb: CData, ctx: CData) -> None:
        self.cpus = ring_cpus(m, who)
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
        self._finalizer = _close.finalizer(self, free_perf_buffer, pb, self.map_fd, current_pid())
        try:
            count = _libbpf.perf_buffer__buffer_cnt(pb)
            if count != n:
                raise BPFError(errno.EINVAL, f"perf_buffer has {count} rings for {n} CPUs", who)
            self.fds = perf_ring_fds(pb, n)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._finalizer()


class RingBufMaps:
    """Ring buffer maps mapped for the merge and RingBuffer's drains (``plb_rb_map``), each
    through a dup of its fd.

    The dup keeps the map (and its epoll registration) alive even if the BPF
    object is closed first. ``views[i]`` is ring ``i``'s ``struct plb_rb_view``,
    valid until ``close()``.
    """

    def __init__(self, maps: list[Map]) -> None:
        self.fds: list[int] = []
        self.mappings: list[CData] = []
        self._finalizer = _close.finalizer(self, RingBufMaps._free, self.mappings, self.fds)
        try:
            for m in maps:
                self.fds.append(_libbpf.dup(m.fd, f"mapping ring buffer map {m.name!r}"))
                mapping = ffi.new("struct plb_rb_mapping *")
                _shim.plb_rb_map(self.fds[-1], m.max_entries, mapping, f"plb_rb_map({m.name})")
                self.mappings.append(mapping)
        except BaseException:
            self.close()
            raise
        self.views = [ffi.addressof(mapping, "view") for mapping in self.mappings]

    @staticmethod
    def _free(mappings: list[CData], fds: list[int]) -> None:
        for mapping in mappings:
            _shim.plb_rb_unmap(mapping)
        for fd in fds:
            os.close(fd)

    def close(self) -> None:
        self._finalizer()
