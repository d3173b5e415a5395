"""BPF ring buffers (``BPF_MAP_TYPE_RINGBUF``): callbacks, batches and arrays.

:class:`RingBuffer` drains records in C (``plb_batch_read_rb``: the shim's own
walk over its own mapping of each ring, which copies each record into a batch
and releases the consumer position once per drain) and calls the Python
callback for each record of the batch in a loop: one C->Python crossing per
batch, not per event. libbpf's ``ring_buffer`` is kept for ``epoll_fd()``.
A batch of equal-size records (fixed-size events) is written as a uniform
batch (no offsets per record: ``plb_batch.h``) and walked with cached slices
(``_views``), so a record costs its copy, its view and its call. A wakeup that
drained one record has its callback called from inside that C call (the latency
path: ``BatchReader._wait_call``).

Below it, the mmap layer (seed: clj-ebpf's ``map-ringbuf`` family):
:func:`map_ringbuf` maps a ring buffer map into this process
(:class:`RingBufLayout`), and :func:`read_ringbuf_events`,
:func:`peek_ringbuf_events` and :func:`process_events` walk it with the C shim
(``plb_rb_read``), without libbpf's ``ring_buffer``. Either way of reading
moves the ring's one consumer position: read a given ring through one of them
at a time (a RingBuffer, a layout, or a consumer), never two at once.
"""

from __future__ import annotations

import errno
import time
from collections.abc import AsyncIterator, Callable
from itertools import islice
from typing import Any

from . import _arrow, _check, _close, _into, _libbpf, _shim
from ._batch import Batch
from ._close import Callback, Closable, Waiter
from ._ffi import ffi, lib
from ._reader import BatchReader, no_callback
from ._rings import SAFETY_NET_MS, RingBufLayout, RingBufMaps, busy_pause, require_map_type
from ._views import Chunks, chunk_slices
from .errors import ClosedError
from .events import require_event_def
from .maps import Map

CData = Any

#: The int a callback returns to go on (compared by identity, as the loops in _deliver do).
_ZERO = 0

#: Records drained per C call at most.
DEFAULT_MAX_BATCH = 65536
#: A drain stops once its batch holds this many bytes: bigger batches cost page faults
#: on every copy (measured: 64 MiB batches made 1 KiB events ~4x slower).
DEFAULT_BATCH_BYTES = 1 << 20
#: read_arrow's columns hold at most this many bytes of records a call. Measured at 1 KiB a
#: record over 48 MiB of records (the benchmark's drain, whole processes): 1 MiB 0.71-0.74x
#: to_numpy's rate (the call's own ~7 us is ~9% of its copies), 2 MiB 0.82-0.89x, 4 MiB
#: 0.74-0.78x (a block four times a core's 1 MiB L2 cache, and twice the first-touch page faults).
#: The C side keeps the blocks released last for the next calls (plb_columns.h, the spares),
#: so call after call the columns are the same memory, its pages present; measured again
#: with it, 1 MiB blocks were still slower than 2 MiB (11 against 13 M ev/s). A block of
#: numbers a little under this size is one transparent huge page where the kernel allows
#: them (its first touch ~0.1 ms here, against ~1 ms in 4 KiB pages).
ARROW_BLOCK_BYTES = 2 << 20


class RingBuffer(BatchReader):
    """Read one or more BPF ring buffers; ``callback(data: memoryview) -> int | None`` per record.

    The callback is for ``poll``/``consume``; a RingBuffer made without one
    reads with ``read_batch``, ``read_into``, ``read_arrow`` and ``events()``.

    ``data`` is a read-only view of a copy of the record: it stays valid after the
    callback returns (it keeps the copy alive: its batch, or the record alone when
    a wakeup drained one). A callback returning a negative
    int stops the current ``poll``/``consume`` after that record, as in libbpf;
    the records after it stay queued for the next call. A callback that raises
    stops the call the same way and the exception reaches the caller; nothing
    is lost or delivered twice (the record whose callback raised counts as
    delivered, in ``poll``'s count too). Any other return than None or an
    int raises TypeError naming the callback, after its record.

    One thread polls at a time; ``close()`` may come from any thread and wakes
    a blocked ``poll()``, which then raises ClosedError.
    """

    _what = "RingBuffer"

    def __init__(self, map: Map, callback: Callback | None = None, *, max_batch: int = DEFAULT_MAX_BATCH) -> None:
        super().__init__()
        require_map_type(map, lib.BPF_MAP_TYPE_RINGBUF, "RingBuffer")
        _check.optional_callable(callback, "callback")
        self._max_batch = _check.integer(max_batch, "max_batch", lo=1, hi=_check.INT32_MAX)
        self._batch = _shim.plb_batch_new(256, 64 * 1024)
        self._batch.byte_limit = DEFAULT_BATCH_BYTES
        self._callbacks: list[Callback] = [no_callback if callback is None else callback]
        self._tagged = False  # more than one ring: the batches carry each record's ring index
        self._maps: list[Map] = [map]
        self._ctxs = [ffi.new("struct plb_rb_collect_ctx *", {"batch": self._batch, "ring": 0})]
        self._pending: Batch | None = None
        self._drained = ffi.new("int *")
        self._drain_c = _shim.plb_rb_wait_drain
        self._call_c = _shim.plb_rb_wait_call
        self._drain_what = "reading the ring buffer"
        # libbpf's ring_buffer, for epoll_fd() only: the rings are read through mappings of our own
        # (plb_rb_map), with one release of the consumer position per drain where libbpf's
        # ring_buffer__consume_n releases it after every record (docs/performance.md).
        self._rb = _libbpf.ring_buffer__new(map.fd, self._ctxs[0], f"ring_buffer__new({map.name})")
        self._mapped: list[RingBufMaps] = []
        self._views: Any = None   # the rings' views, as the array the C drains take (_map_views)
        try:
            self._mapped.append(RingBufMaps([map]))
            # The maps' own fds, not libbpf's epoll fd: an epoll set inside ours would add a
            # wake-up hop (see docs/performance.md).
            self._waiter = Waiter([map.fd], "RingBuffer")
        except BaseException:
            self._release()
            raise
        self._map_views()

    def add(self, map: Map, callback: Callback | None = None) -> None:
        """Read one more ring buffer map through the same poll; its records go to ``callback``.

        ``callback`` may be left out where the records are read without one
        (``read_batch``, ``read_into``, ``read_arrow``, ``events()``).
        """
        require_map_type(map, lib.BPF_MAP_TYPE_RINGBUF, "RingBuffer.add")
        _check.optional_callable(callback, "callback")
        self._check_open()  # in a forked child: before the lock
        with self._lock:
            self._check_open()
            if self._waiter is None:
                raise ClosedError(self._what)
            ctx = ffi.new("struct plb_rb_collect_ctx *", {"batch": self._batch, "ring": len(self._ctxs)})
            mapped = RingBufMaps([map])
            # All or none: a ring the drains read but the wait does not watch would never wake
            # poll(-1); a watched ring the drains do not read would make every wait return at once.
            try:
                self._waiter.add(map.fd, f"RingBuffer.add({map.name})")
                try:
                    _libbpf.ring_buffer__add(self._rb, map.fd, ctx, f"ring_buffer__add({map.name})")
                except BaseException:
                    self._waiter.remove(map.fd, f"RingBuffer.add({map.name})")
                    raise
            except BaseException:
                mapped.close()
                raise
            self._mapped.append(mapped)
            self._ctxs.append(ctx)
            self._maps.append(map)
            self._callbacks.append(no_callback if callback is None else callback)
            self._tagged = True
            self._map_views()

    def _map_views(self) -> None:
        """The rings' views as one array, in ring order, and the drains' arguments over it
        (under the operation lock, or before the reader is shared: no C call is reading them)."""
        self._views = ffi.new("struct plb_rb_view *[]", [m.views[0] for m in self._mapped])
        self._drain_args = (self._views, len(self._mapped), self._batch, self._max_batch, self._drained)


    def _require_callback(self, method: str) -> None:
        if no_callback in self._callbacks:
            ring = self._callbacks.index(no_callback)
            raise TypeError(f"RingBuffer.{method}() calls a callback per record, and ring {ring} "
                            f"({self._maps[ring].name!r}) has none: pass one to RingBuffer(map, callback) / "
                            "add(map, callback), or read with read_batch(), read_into(), read_arrow() or events()")

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

    def read_arrow(self, event_def: Any, timeout: float | None = None) -> Any:
        """Drain records of ``event_def`` straight into a ``pyarrow.RecordBatch``: one copy per record.

        What ``read_batch(timeout).to_arrow(event_def)`` gives (the same
        columns and schema), without the batch: each record's fields are
        copied from the kernel ring into their Arrow columns, in C without the
        GIL, a block of records at a time while they are in cache. The
        columns are sized for the records the rings hold when the call starts
        (the records that arrive during it may join, up to that size; the rest
        wait for the next call). Records of another size than ``event_def.size``
        are neither cut nor dropped: as with :meth:`read_into`, they are consumed
        and handed back by :meth:`take_odd` (``row``: the row they came before).
        Records an earlier ``poll``/``events()`` left undelivered come first,
        alone, as ``read_batch().to_arrow()`` converts them.

        Blocks until a ring has records, or for at most ``timeout`` seconds
        (None: no limit; 0: do not wait); an empty RecordBatch on timeout, and
        also when the only records were of another size or a record at a
        ring's head was still being written. ImportError without pyarrow;
        TypeError for an ``event_def`` that is not an EventDef; ValueError for a
        bad ``timeout``; ClosedError once closed (also from another thread while
        blocked). The RecordBatch owns its memory (valid as long as referenced).
        Takes turns with ``poll``/``consume``/``read_batch``/``read_into`` of
        other threads like they do.
        """
        what = "RingBuffer.read_arrow"
        size = _event_size(event_def, what)
        pa = _arrow.pyarrow(what)
        deadline = _check.deadline(timeout)
        self._check_open()  # in a forked child: ClosedError before the lock
        calls = self._calls
        if not calls.take() and not calls.enter(_check.remaining_ms(deadline)):
            return Batch.empty().to_arrow(event_def)
        try:
            with self._lock:
                self._check_open()
                pending = self._pending
                if pending is not None:
                    table = pending.rest().to_arrow(event_def)   # a ValueError leaves them pending
                    self._pending = None
                    return table
                rows = self._rows_held(size)
                if not rows:
                    timeout_ms = _check.remaining_ms(deadline)
                    if timeout_ms == 0 or not self._wait(timeout_ms):
                        return Batch.empty().to_arrow(event_def)
                    rows = self._rows_held(size)
                # At most ARROW_BLOCK_BYTES a call: a block that size comes back as the C side's
                # spare call after call (while the caller drops each RecordBatch before the next
                # call), where one sized for a whole large ring would be fresh memory each time
                # (a page fault a page).
                # A 256th of the block is left for its head and alignment, so that a block of
                # numbers fits in ARROW_BLOCK_BYTES: one huge page (plb_block.c, plb_block_new).
                per_call = ARROW_BLOCK_BYTES // size
                columns = _arrow.Columns(event_def, min(rows, max(1, per_call - per_call // 256)), what)
                try:
                    if self._into_state is None:
                        self._into_state = _into.Into()
                    into = self._into_state
                    into.begin_columns(columns, size)
                    try:
                        call, rings, n = self._into_rings()
                        into.wait_fill(call, None, 0, rings, n, what=what)
                    finally:
                        got = into.end()
                    return columns.record_batch(got, pa)
                finally:
                    columns.release()   # unless pyarrow has the columns now
        finally:
            calls.leave()

    def _rows_held(self, size: int) -> int:
        """How many records of ``size`` bytes the rings hold now, at most (lock held).

        At least 1 while any ring holds bytes: a ring holding only records
        shorter than ``size`` must still be filled from, so that they are
        consumed and handed to ``take_odd()``, not waited on forever.
        """
        footprint = (size + _RINGBUF_HDR_SZ + 7) & ~7
        held = [_shim.plb_rb_available(view) for view in self._views]
        rows = sum(h // footprint for h in held)
        return rows if rows or not any(held) else 1

    def _call_one(self, ring: int, data: memoryview) -> None:
        """A wakeup's lone record, from inside the C call that waited (:meth:`BatchReader._wait_call`).

        The callback's stop needs no handling: one record, the call is done
        either way; a return value that is neither None nor an int raises TypeError.
        """
        callback = self._callbacks[ring]
        ret = callback(data)
        if ret is not None and ret is not _ZERO:
            _stops(ret, callback)  # the type check

    def _deliver_uniform(self, batch: Batch, first: int, n: int, stride: int) -> None:
        """Records ``first..n-1`` of equal size at one stride: cached slices, one chunk view at a time.

        Per record: one memoryview (``chunk[s]``, ``s`` a cached slice), the
        call, and two identity tests of the result (None and 0 never reach
        ``_stops``). Whatever interrupts the loop (a callback's exception, a
        stop, a signal), ``Chunks.taken()`` is the index after the last record
        whose callback was called.
        """
        callbacks = self._callbacks
        chunks = Chunks(first)
        records = chunks.over(batch.view, batch.starts, chunk_slices(stride, batch.lens[first]), n)
        zero = 0
        try:
            if len(callbacks) == 1:
                callback = callbacks[0]
                for _, chunk, it in records:
                    for s in it:
                        ret = callback(chunk[s])
                        if ret is not None and ret is not zero and _stops(ret, callback):
                            return
            else:
                for pos, chunk, it in records:
                    for s, ring in zip(it, islice(batch.tags, pos, None)):
                        ret = callbacks[ring](chunk[s])
                        if ret is not None and ret is not zero and _stops(ret, callbacks[ring]):
                            return
        finally:
            batch.next = chunks.taken()

    def _deliver_each(self, batch: Batch, first: int) -> None:
        """Any records (lengths or offsets differ): a slice made per record."""
        view, starts, lens = batch.view, batch.starts, batch.lens
        callbacks = self._callbacks
        i = first
        zero = 0
        try:
            if len(callbacks) == 1:
                callback = callbacks[0]
                for start, length in zip(islice(starts, i, None), islice(lens, i, None)):
                    i += 1
                    ret = callback(view[start:start + length])
                    if ret is not None and ret is not zero and _stops(ret, callback):
                        break
            else:
                for start, length, ring in zip(islice(starts, i, None), islice(lens, i, None),
                                               islice(batch.tags, i, None)):
                    i += 1
                    ret = callbacks[ring](view[start:start + length])
                    if ret is not None and ret is not zero and _stops(ret, callbacks[ring]):
                        break
        finally:
            batch.next = i

    def _into_rings(self) -> tuple[Callable[..., int], Any, int]:
        """read_into's C call and rings: the mappings poll/read_batch read, so they may alternate."""
        return _shim.plb_rb_wait_into, self._views, len(self._mapped)

    def _release(self) -> None:
        if self._rb != ffi.NULL:
            _libbpf.ring_buffer__free(self._rb)
        self._rb = ffi.NULL
        self._drain_args = ()
        self._pending = None
        self._views = None
        for maps in self._mapped:
            maps.close()

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
    with layout.turn():
        return layout.read(max_events, consume=True)


def read_ringbuf_into(layout: RingBufLayout, out: Any, record_size: Any = None) -> int:
    """Consume the records there now straight into the rows of ``out``, without waiting; returns the rows written.

    ``layout.read_into(out, timeout=0, record_size=record_size)``: one copy per
    record; at most ``len(out)`` rows, the rest stays in the ring; records of
    another length are consumed and kept for ``layout.take_odd()``.
    """
    if not isinstance(layout, RingBufLayout):
        raise TypeError(f"layout must be a RingBufLayout (from map_ringbuf), got {type(layout).__name__}")
    return layout.read_into(out, 0, record_size=record_size)


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
        with layout.turn():
            records = [] if max_events == 0 else layout.read(max_events, consume=False)
    finally:
        if owned:
            layout.close()
    if deserializer is None:
        return list(records)
    return [deserializer(r) for r in records]


def process_events(map: Map, callback: Callback, max_events: int | None = None, timeout: float | None = 1.0,
                   deserializer: Callback | None = None, *, timeout_ms: int | None = None) -> int:
    """Deliver records to ``callback`` as they arrive, for up to ``timeout`` seconds; returns how many.

    Maps the ring for the call, then loops: consume what is there, call
    ``callback(deserializer(record))`` (or ``callback(record)``, a ``bytes``
    copy) for each, and wait on epoll (the map fd, GIL released) when the ring
    is empty. Returns as soon as ``max_events`` records were delivered, or when
    ``timeout`` has passed (``max_events=None``: no count limit, so it
    returns at the timeout); ``timeout=0`` delivers what is there without
    waiting, ``None`` waits without limit. ``timeout_ms=`` is the deprecated
    spelling in milliseconds (a DeprecationWarning, for one minor release).

    A callback or deserializer that raises stops the call and the exception
    propagates; that record and the ones before it are consumed, the ones
    after it stay in the ring for the next reader: none is lost or delivered
    twice (as with :class:`RingBuffer`). A record is consumed only once it
    has been handed to user code.
    """
    _check.callable_(callback, "callback")
    _check.optional_callable(deserializer, "deserializer")
    max_events = _check.optional_integer(max_events, "max_events", lo=0)
    if timeout_ms is not None and timeout == 1.0:
        timeout = None  # left at its default: the deprecated keyword says how long
    wait_ms = _check.poll_timeout_ms(timeout, timeout_ms, "process_events")
    deadline = None if wait_ms < 0 else time.monotonic() + wait_ms / 1000
    done = 0
    with RingBufLayout(map) as layout:
        waiter = Waiter([map.fd], "process_events")
        try:
            idle = 0
            while max_events is None or done < max_events:
                want = 256 if max_events is None else min(256, max_events - done)
                with layout.turn():  # held while delivering: another reader would read these again
                    records = layout.read_once(want, consume=False)
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


# RingBufLayout's public home is this module (it is written in _rings.py, beside the perf rings).
RingBufLayout.__module__ = __name__


def _event_size(event_def: Any, what: str) -> int:
    """An EventDef's record size; TypeError naming ``what`` for anything else."""
    return require_event_def(event_def, what).size


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
        layout.read_once(delivered, consume=True)
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
