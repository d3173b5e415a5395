"""BPF ring buffers (``BPF_MAP_TYPE_RINGBUF``) read through libbpf's ``ring_buffer``.

:class:`RingBuffer` drains records in C (``ring_buffer__consume_n`` with a C
sample callback that copies into a batch) and calls the Python callback for
each record of the batch in a loop: one C->Python crossing per batch, not per
event.

Below it, the mmap layer (seed: clj-ebpf's ``map-ringbuf`` family):
:func:`map_ringbuf` maps a ring buffer map into this process
(:class:`RingBufLayout`), and :func:`read_ringbuf_events`,
:func:`peek_ringbuf_events` and :func:`process_events` walk it with the C shim
(``plb_rb_read``), without libbpf's ``ring_buffer``. Either way of reading
moves the ring's one consumer position: read a given ring through one of them
at a time (a RingBuffer, a layout, or a consumer), never two at once.
"""

from __future__ import annotations

import contextlib
import errno
import time
import weakref
from collections.abc import AsyncIterator, Iterator
from itertools import islice
from typing import Any

from . import _check, _close, _libbpf
from ._ffi import ffi, lib
from ._reader import Batch, BatchReader, Callback, Closable, OneCaller, Waiter
from .errors import BPFError
from .maps import Map

CData = Any

#: Records drained per C call at most.
DEFAULT_MAX_BATCH = 65536
#: A drain stops once its batch holds this many bytes: bigger batches cost page faults
#: on every copy (measured: 64 MiB batches made 1 KiB events ~4x slower).
DEFAULT_BATCH_BYTES = 1 << 20


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


class RingBuffer(BatchReader):
    """Read one or more BPF ring buffers; ``callback(data: memoryview) -> int | None`` per record.

    ``data`` is a read-only view of a copy of the record: it stays valid after the
    callback returns (it keeps its batch alive). A callback returning a negative
    int stops the current ``poll``/``consume`` after that record, as in libbpf;
    the records after it stay queued for the next call. A callback that raises
    stops the call the same way and the exception reaches the caller; nothing
    is lost or delivered twice.

    One thread polls at a time; ``close()`` may come from any thread and wakes
    a blocked ``poll(-1)``, which then raises ClosedError.
    """

    _what = "RingBuffer"

    def __init__(self, map: Map, callback: Callback, *, max_batch: int = DEFAULT_MAX_BATCH) -> None:
        super().__init__()
        require_map_type(map, lib.BPF_MAP_TYPE_RINGBUF, "RingBuffer")
        _check.callable_(callback, "callback")
        self._max_batch = _check.integer(max_batch, "max_batch", lo=1, hi=_check.INT32_MAX)
        self._batch = _libbpf.plb_batch_new(256, 64 * 1024)
        self._batch.byte_limit = DEFAULT_BATCH_BYTES
        self._callbacks: list[Callback] = [callback]
        self._maps: list[Map] = [map]
        self._ctxs = [ffi.new("struct plb_rb_collect_ctx *", {"batch": self._batch, "ring": 0})]
        self._pending: Batch | None = None
        rb = _libbpf.ring_buffer__new(map.fd, self._ctxs[0], f"ring_buffer__new({map.name})")
        try:
            self._waiter = Waiter([_libbpf.ring_buffer__epoll_fd(rb)], "RingBuffer")
        except BaseException:
            _libbpf.ring_buffer__free(rb)
            raise
        self._rb = rb

    def add(self, map: Map, callback: Callback) -> None:
        """Read one more ring buffer map through the same poll; its records go to ``callback``."""
        require_map_type(map, lib.BPF_MAP_TYPE_RINGBUF, "RingBuffer.add")
        _check.callable_(callback, "callback")
        self._check_open()  # in a forked child: before the lock
        with self._lock:
            self._check_open()
            ctx = ffi.new("struct plb_rb_collect_ctx *", {"batch": self._batch, "ring": len(self._ctxs)})
            _libbpf.ring_buffer__add(self._rb, map.fd, ctx, f"ring_buffer__add({map.name})")
            self._ctxs.append(ctx)
            self._maps.append(map)
            self._callbacks.append(callback)



    def epoll_fd(self) -> int:
        """libbpf's epoll fd for these rings (readable when a ring has data): for selectors/asyncio."""
        self._check_open()
        return _libbpf.ring_buffer__epoll_fd(self._rb)


    async def events(self) -> AsyncIterator[memoryview]:
        """``async for data in rb.events()``: every record, as the callback would get it.

        Waits with ``loop.add_reader`` on the reader's epoll fd; the iteration
        ends when the buffer is closed; cancelling the task leaves nothing running.
        The callback given at construction is not called for these records.
        Leaving the loop (``break``, cancelling the task) keeps the records
        drained but not yet yielded for the next ``events()``/``poll()``/``read_batch()``.
        """
        async for batch, i in self._records():
            yield batch[i]

    def _drain(self) -> None:
        """Copy up to max_batch records (or about DEFAULT_BATCH_BYTES) out of the kernel rings (lock held)."""
        try:
            _libbpf.ring_buffer__consume_into(self._rb, self._batch, self._max_batch, "ring_buffer__consume_n")
        finally:
            if self._batch.n:  # records already consumed from the kernel are kept, even on an error
                self._pending = Batch(self._batch, with_tags=len(self._callbacks) > 1)

    def _deliver(self) -> int:
        batch = self._pending
        if batch is None:
            return 0
        view, starts, lens = batch.view, batch.starts, batch.lens
        callbacks = self._callbacks
        i = first = batch.next
        try:
            if len(callbacks) == 1:
                callback = callbacks[0]
                for start, length in zip(islice(starts, i, None), islice(lens, i, None)):
                    i += 1
                    ret = callback(view[start:start + length])
                    if ret is not None and _stops(ret, callback):
                        break
            else:
                tags = batch.tags
                for start, length, ring in zip(islice(starts, i, None), islice(lens, i, None),
                                               islice(tags, i, None)):
                    i += 1
                    ret = callbacks[ring](view[start:start + length])
                    if ret is not None and _stops(ret, callbacks[ring]):
                        break
        finally:
            batch.next = i
            if i >= len(starts):
                self._pending = None
        return i - first

    def _release(self) -> None:
        _libbpf.ring_buffer__free(self._rb)
        self._rb = ffi.NULL
        self._pending = None

    def __del__(self) -> None:
        # Safety net only: close() is the contract.
        if not getattr(self, "_closed", True) and getattr(self, "_rb", ffi.NULL) != ffi.NULL:
            self.close()


def _stops(ret: object, callback: Callback) -> bool:
    """Whether a callback's return value (not None) stops the poll: a negative int, as in libbpf.

    Anything but an int raises TypeError naming the callback (its record counts as delivered).
    """
    if isinstance(ret, bool) or not isinstance(ret, int):
        name = getattr(callback, "__qualname__", type(callback).__name__)
        raise TypeError(f"callback {name} must return None or an int, returned {ret!r:.60} "
                        f"({type(ret).__name__})")
    return ret < 0


# --- the mmap layer ----------------------------------------------------------------------------

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
        n = _libbpf.plb_rb_read(view, records.out, records.cap, records.starts, records.lens, max_records,
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


class RingBufLayout(Closable):
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
        _libbpf.plb_rb_map(map.fd, self._data_size, self._mapping, f"plb_rb_map({map.name})")
        # Safety net only: close() is the contract and runs it (a finalizer runs once).
        self._finalizer = _close.finalizer(self, _libbpf.plb_rb_unmap, self._mapping)
        self._ring_turn = _ring_turn(map)
        self._view = ffi.addressof(self._mapping[0], "view")
        self._records = RecordBuffer(1024, min(self._data_size, 256 * 1024))

    @property
    def consumer_pos(self) -> int:
        """The consumer position: every byte below it has been read."""
        self._check_open()
        with self._lock:
            self._check_open()
            return _libbpf.plb_rb_consumer_pos(self._view)

    @property
    def producer_pos(self) -> int:
        """The producer position: every byte below it is reserved (committed or not)."""
        self._check_open()
        with self._lock:
            self._check_open()
            return _libbpf.rb_producer_pos(self._view)

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
            return _libbpf.plb_rb_available(self._view)

    def view(self) -> CData:
        """The ``struct plb_rb_view *`` over the mapping, for the C shim; valid until close()."""
        self._check_open()
        return self._view

    @contextlib.contextmanager
    def _turn(self) -> Iterator[None]:
        """The ring's turn among the mmap layer's readers, then this layout's lock."""
        self._check_open()
        self._ring_turn.enter(-1)
        try:
            with self._lock:
                self._check_open()
                yield
        finally:
            self._ring_turn.leave()

    def _read_once(self, max_records: int, consume: bool) -> list[bytes]:
        """One ``plb_rb_read`` of up to ``max_records`` committed records (lock held)."""
        self._check_open()  # closed (at exit too) under a reader that took the lock after close
        return read_view(self._view, self._records, max_records, consume, f"plb_rb_read({self.map.name})")

    def _read(self, max_records: int | None, consume: bool) -> list[bytes]:
        """Committed records from the consumer position on (lock held), up to ``max_records``.

        Consuming reads go in chunks until the ring is empty or the head is
        busy. A peek cannot chunk (the position does not move), so its memory
        is sized for everything pending first.
        """
        rec = self._records
        if not consume:
            pending = _libbpf.plb_rb_available(self._view)
            want = pending // 8 if max_records is None else min(max_records, pending // 8)
            if want <= 0:
                return []
            rec.reserve(want, min(pending, self._data_size))
            return self._read_once(want, consume=False)
        events: list[bytes] = []
        while max_records is None or len(events) < max_records:
            want = rec.max_records if max_records is None else min(max_records - len(events), rec.max_records)
            chunk = self._read_once(want, consume=True)
            if not chunk:
                break
            events.extend(chunk)
        return events

    def _release(self) -> None:
        self._finalizer()


def map_ringbuf(map: Map) -> RingBufLayout:
    """Map a ``BPF_MAP_TYPE_RINGBUF`` map into this process (``mmap`` of the map's fd).

    TypeError (naming both types) for another kind of map; BPFError when the
    map is not created yet or mmap fails. Unmap with :func:`unmap_ringbuf`,
    ``layout.close()`` or a ``with`` block.
    """
    return RingBufLayout(map)


def unmap_ringbuf(layout: RingBufLayout) -> None:
    """Unmap a layout (idempotent); using it afterwards raises ClosedError."""
    layout.close()


def read_ringbuf_events(layout: RingBufLayout, max_events: int | None = None) -> list[bytes]:
    """Consume and return the committed records now in the ring, up to ``max_events`` (None: all).

    Never blocks. Each record is a ``bytes`` copy; discarded records are
    skipped; reading stops before a record that is still being written (it
    is returned by a later call). ClosedError once the layout is unmapped;
    BPFError(EBADMSG) when the ring's memory is not a valid ring.
    """
    max_events = _check.optional_integer(max_events, "max_events", lo=0)
    if not isinstance(layout, RingBufLayout):
        raise TypeError(f"layout must be a RingBufLayout (from map_ringbuf), got {type(layout).__name__}")
    if max_events == 0:
        return []
    with layout._turn():
        return layout._read(max_events, consume=True)


def peek_ringbuf_events(map: Map | RingBufLayout, max_events: int | None = 10,
                        deserializer: Callback | None = None) -> list[Any]:
    """The first ``max_events`` committed records (None: all), without consuming them.

    Two peeks with nothing read in between return the same records. With a
    Map, the ring is mapped for the call and unmapped after; with a
    RingBufLayout, that mapping is used. Each record (``bytes``) goes through
    ``deserializer`` when one is given; an exception it raises propagates
    (nothing was consumed). Never blocks.
    """
    _check.optional_callable(deserializer, "deserializer")
    max_events = _check.optional_integer(max_events, "max_events", lo=0)
    if isinstance(map, RingBufLayout):
        layout, owned = map, False
    else:
        layout, owned = RingBufLayout(map), True
    try:
        with layout._turn():
            records = [] if max_events == 0 else layout._read(max_events, consume=False)
    finally:
        if owned:
            layout.close()
    if deserializer is None:
        return list(records)
    return [deserializer(r) for r in records]


def process_events(map: Map, callback: Callback, max_events: int | None = None, timeout_ms: int = 1000,
                   deserializer: Callback | None = None) -> int:
    """Deliver records to ``callback`` as they arrive, for up to ``timeout_ms``; returns how many.

    Maps the ring for the call, then loops: consume what is there, call
    ``callback(deserializer(record))`` (or ``callback(record)``, a ``bytes``
    copy) for each, and wait on epoll (the map fd, GIL released) when the ring
    is empty. Returns as soon as ``max_events`` records were delivered, or when
    ``timeout_ms`` has passed (``max_events=None``: no count limit, so it
    returns at the timeout); ``timeout_ms=0`` delivers what is there without
    waiting, ``-1`` waits without limit.

    A callback or deserializer that raises stops the call and the exception
    propagates; that record and the ones before it are consumed, the ones
    after it stay in the ring for the next reader: none is lost or delivered
    twice (as with :class:`RingBuffer`). A record is consumed only once it
    has been handed to user code.
    """
    _check.callable_(callback, "callback")
    _check.optional_callable(deserializer, "deserializer")
    max_events = _check.optional_integer(max_events, "max_events", lo=0)
    timeout_ms = _check.timeout_ms(timeout_ms)
    deadline = None if timeout_ms < 0 else time.monotonic() + timeout_ms / 1000
    done = 0
    with RingBufLayout(map) as layout:
        waiter = Waiter([map.fd], "process_events")
        try:
            idle = 0
            while max_events is None or done < max_events:
                want = 256 if max_events is None else min(256, max_events - done)
                with layout._turn():  # held while delivering: another reader would read these again
                    records = layout._read_once(want, consume=False)
                    if records:
                        done += _deliver_then_consume(layout, records, callback, deserializer)
                if records:
                    idle = 0
                    continue
                left = _check.remaining_ms(deadline)
                if left == 0:
                    break
                if idle:
                    # The last wakeup found nothing readable: a record at the head is
                    # reserved but not committed; pause instead of spinning on it.
                    time.sleep(min(busy_pause(idle), left / 1000))
                ready = waiter.wait(SAFETY_NET_MS if left < 0 else min(left, SAFETY_NET_MS), "process_events")
                idle = idle + 1 if ready else 0
        finally:
            waiter.close()
    return done


def _deliver_then_consume(layout: RingBufLayout, records: list[bytes], callback: Callback,
                          deserializer: Callback | None) -> int:
    """Call back for peeked records, then consume exactly the ones delivered (also on an exception)."""
    delivered = 0
    try:
        for raw in records:
            delivered += 1  # a record whose callback raises is consumed too: it was delivered
            callback(deserializer(raw) if deserializer is not None else raw)
    finally:
        # The same records, from the same position: we hold the ring's turn (and its lock).
        layout._read_once(delivered, consume=True)
    return delivered


# --- the producer side: BPF_MAP_TYPE_USER_RINGBUF ---------------------------------------------------

#: Bytes of the header the ring puts before each record (BPF_RINGBUF_HDR_SZ, include/uapi/linux/bpf.h).
_RINGBUF_HDR_SZ = 8


class UserRingBuffer(Closable):
    """Write records for a BPF program to drain (``BPF_MAP_TYPE_USER_RINGBUF``, libbpf's ``user_ring_buffer``).

    A program reads them with ``bpf_user_ringbuf_drain()``. ``submit()`` copies
    a record in and publishes it; while the ring is full it waits (GIL
    released) until the kernel drains enough, the timeout passes
    (TimeoutError), or ``close()`` is called from another thread (ClosedError).
    Submits from several threads are serialized (libbpf's producer is single-
    threaded). ``close()`` is idempotent; a context manager; a finalizer frees
    a forgotten one. The BPF object may be closed first: the mapping stays
    valid until this is closed.
    """

    _what = "UserRingBuffer"

    def __init__(self, map: Map) -> None:
        super().__init__()
        require_map_type(map, lib.BPF_MAP_TYPE_USER_RINGBUF, "UserRingBuffer")
        what = f"user_ring_buffer__new({map.name})"
        self._capacity = map.max_entries
        self._waiter = Waiter([], what)
        try:
            self._waiter.add_writable(map.fd, what)
            rb = _libbpf.user_ring_buffer__new(map.fd, what)
        except BaseException:
            self._waiter.close()
            raise
        self._rb: CData = rb
        self._free = _close.finalizer(self, _libbpf.user_ring_buffer__free, rb)

    @property
    def max_record_size(self) -> int:
        """The largest record that fits the ring at all (its size less one header)."""
        return self._capacity - _RINGBUF_HDR_SZ

    def submit(self, data: bytes | bytearray | memoryview, timeout: float | None = None) -> None:
        """Copy ``data`` into the ring as one record and publish it to the kernel.

        Blocks while the ring lacks room, at most ``timeout`` seconds (None:
        until there is room). Raises ValueError for a record larger than
        :attr:`max_record_size` (it could never fit), TimeoutError when the
        ring stayed full, ClosedError when closed (also by another thread
        during the wait). ``data`` is copied: it may be reused at once.
        """
        view = _check.buffer(data, "data")
        until = _check.deadline(timeout)
        size = len(view)
        if size > self.max_record_size:
            raise ValueError(f"UserRingBuffer: a record of {size} bytes can never fit this "
                             f"{self._capacity}-byte ring (at most {self.max_record_size} bytes)")
        self._check_open()
        with self._lock:
            while True:
                self._check_open()
                sample, err = _libbpf.user_ring_buffer__reserve(self._rb, size)
                if sample != ffi.NULL:
                    ffi.memmove(sample, view, size)
                    _libbpf.user_ring_buffer__submit(self._rb, sample)
                    return
                if err == errno.E2BIG:
                    raise ValueError(f"UserRingBuffer: a record of {size} bytes does not fit the ring")
                if err != errno.ENOSPC:
                    raise _libbpf.error(err, "user_ring_buffer__reserve")
                left = _check.remaining_ms(until)
                if left == 0:
                    raise TimeoutError(f"UserRingBuffer: no room for {size} bytes within {timeout} s")
                self._wait(left)

    def _release(self) -> None:
        self._free()
        self._rb = None
