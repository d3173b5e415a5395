"""The batch-reading protocol RingBuffer and PerfBuffer share, and the pull readers' base.

1. A reader drains records in C into a ``plb_batch`` under its operation lock
   (:class:`CDrain`: the wait-and-drain calls of csrc/plb_wait.c).
2. It takes the batch's memory over as a :class:`~pylibbpf._batch.Batch` and
   delivers it to the Python callbacks outside the lock (:class:`BatchReader`:
   ``poll``/``consume``/``read_batch``/``read_into``/``events``).
3. A wakeup that drained a single record calls its callback from inside the
   C call that waited (:func:`plb_py_one`, an ``extern "Python"`` function);
   an exception raised there is kept (:func:`_keep_raised`) and raised after
   the C call returns.
4. :class:`RecordReader` is the base of the pull readers (PerfReader,
   OrderedReader): ``read`` and iteration, one :class:`~pylibbpf._batch.Record`
   at a time.
"""

from __future__ import annotations

import abc
import asyncio
import os
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from . import _check, _into, _libbpf, _views
from ._batch import Batch, Record, drained_batch
from ._close import Closable, OneCaller, Waiter, one_caller
from ._ffi import ffi, lib
from .errors import ClosedError

CData = Any

#: Longest pause of read_into after a wakeup that found nothing readable (a busy head).
_BUSY_PAUSE_MAX_S = 0.02

#: A wait-and-drain's "ready, but look at the drain's result" and "ready, one record" (csrc/plb_wait.h;
#: read once, not per wakeup).
_DRAIN_CHECK: int = lib.PLB_DRAIN_CHECK
_DRAIN_ONE: int = lib.PLB_DRAIN_ONE
#: A wait-and-call's "ready, and the one record was handed to Python from inside the call".
_DRAIN_CALLED: int = lib.PLB_DRAIN_CALLED

#: What an exception inside a wait-and-call's Python function left for :meth:`BatchReader._wait_call`
#: (per thread: two threads may poll two readers at once).
_raised_in_call = threading.local()


def _keep_raised(exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
    """``onerror`` of :func:`plb_py_one`: CFFI calls it with the exception the function raised
    (the callback's own, the TypeError of a bad return value, a signal's KeyboardInterrupt).

    Nothing may leave a C callback as an exception: it is kept for the
    thread's :meth:`BatchReader._wait_call` to raise once the C call has returned.
    """
    _raised_in_call.exc = exc


@ffi.def_extern(onerror=_keep_raised)  # type: ignore[misc, untyped-decorator]
def plb_py_one(handle: CData, tag: int, data: CData, size: int) -> None:
    """A wakeup's lone record, called by ``plb_rb_wait_call``/``plb_pb_wait_call`` from inside the
    C call that :meth:`BatchReader._wait_call` made with the operation lock held.

    ``handle`` is that reader's (of a weak reference to it), ``data`` the
    drain's batch copy of the record (``tag``: its ring or CPU). The record is
    copied out, the lock released (as for every callback: the callback may close
    the reader, and C uses nothing after this returns), then the reader's
    ``_call_one`` calls the callback.
    Each line before that call is latency: it runs on a CPU just out of idle.
    """
    reader = _from_handle(handle)()
    record = _buffer(data, size)[:]
    reader._locked = False  # before the release: a signal's exception surfaces after a call, not before
    reader._unlock()
    view = memoryview(record)
    reader._called = True  # from the callback's call on, the record counts as delivered
    reader._call_one(tag, view)


_from_handle = ffi.from_handle
_buffer = ffi.buffer


def no_callback(*_args: object) -> None:
    """The callback of a reader made without one: poll/consume refuse to run before it is called."""
    raise TypeError("this reader was made without a callback: read it with read_batch(), read_into() or events()")


class CDrain:
    """A reader whose records come from one wait-and-drain C call (csrc/plb_wait.h) into a C batch.

    Subclasses set the attributes below in their constructor; :meth:`_wait_drain`
    is the call with its bookkeeping (RingBuffer, PerfBuffer, PerfReader).
    """

    _pending: Batch | None = None
    #: The C batch the drain fills, and the int the drain stores its count (or -errno) in.
    _batch: Any
    _drained: Any
    #: The wait-and-drain C call, ``(waiter, timeout_ms, *_drain_args) -> int`` (csrc/plb_wait.h),
    #: and what its errors name. ``_drain_args`` is emptied by ``_release`` (it holds the C reader).
    _drain_c: Callable[..., int]
    _drain_args: tuple[Any, ...] = ()
    _drain_what = ""
    #: Whether the batches carry each record's tag (a perf sample's CPU, a ring's index).
    _tagged = True

    def _wait_drain(self, waiter: Any, timeout_ms: int) -> int:
        """Wait up to ``timeout_ms`` (0: no wait) on ``waiter`` and drain, in one C call
        (``_drain_c``; lock held); what it consumed becomes ``_pending``.

        Returns the wait's result as ``plb_waiter_wait`` does (> 0 ready, for
        :meth:`_close.Waiter.wait`'s loop and :meth:`_close.Waiter.after`);
        raises for a failed drain (``_libbpf.check_collected``). Records the call
        consumed from the kernel reach ``_pending`` even when the drain failed
        after them, or when an exception (a signal's KeyboardInterrupt) surfaces
        the moment the call returns. The call resets the batch first: it holds
        this call's records only.
        """
        batch = self._batch
        try:
            ret: int = self._drain_c(waiter, timeout_ms, *self._drain_args)
            if ret == _DRAIN_CHECK:
                _libbpf.check_collected(batch, self._drained[0], self._drain_what)
                ret = 1
        finally:
            if batch.n:
                self._pending = drained_batch(batch, with_tags=self._tagged)
        return ret


class BatchReader(Closable, _into.HandsBackOdd, CDrain):
    """poll/consume/read_batch over a C drain: the protocol RingBuffer and PerfBuffer share.

    Subclasses set the drain (:class:`CDrain`'s attributes)
    and implement ``_deliver_uniform``/``_deliver_each`` (call the callbacks for
    ``self._pending``; no lock held, so a callback may close the reader) and
    ``_call_one`` (the callback of a wakeup's lone record, called from inside
    the C call that waited: :meth:`_wait_call`).
    Records a callback stop left undelivered are delivered first by the next
    call, without waiting. ``poll``/``consume``/``read_batch`` from several
    threads take turns (:class:`OneCaller`): every record reaches one of them, once.
    """

    def __init__(self) -> None:
        super().__init__()
        self._calls = OneCaller(self._what)
        self._unlock = self._lock.release  # for plb_py_one, which releases the lock _wait_call took
        # What _wait_call passes C for plb_py_one: a handle of a weak reference, made once (a
        # handle made per call costs every poll ~0.15 us; one of self would keep self alive).
        self._handle = ffi.new_handle(weakref.ref(self))

    async def _batches(self) -> AsyncIterator[Batch]:
        """Non-empty batches as they arrive, for ``async for``; ends quietly when closed.

        The reader's own epoll fd (the rings' fds plus the close eventfd) is
        watched with ``loop.add_reader``, and each batch is drained without a
        wait (``read_batch(0)``): the selector has taken the wakeup, and a perf
        event fd reports a wakeup to one poll only. Cancelling the consuming
        task removes the reader, so nothing keeps running. Each iteration watches its own
        dup of that fd: an iteration left with ``break`` is closed later, by the
        event loop, and removing its reader then must not remove the one of an
        iteration started meanwhile.
        """
        if self._waiter is None:
            raise ClosedError(self._what)
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()
        fd = os.dup(self._waiter.fd)

        def on_close() -> None:
            if not loop.is_closed():
                loop.call_soon_threadsafe(ready.set)

        self._close_hooks.append(on_close)
        loop.add_reader(fd, ready.set)
        try:
            while not self._closed:
                try:
                    batch = self.read_batch(0)
                except ClosedError:
                    return
                if len(batch):
                    yield batch
                    continue
                ready.clear()
                await ready.wait()
        finally:
            self._close_hooks.remove(on_close)
            if not loop.is_closed():
                loop.remove_reader(fd)
            os.close(fd)

    def _fill_one(self, timeout_ms: int) -> bool | tuple[int, bytes]:
        """Wait and drain in one C call (unless records are pending): False on timeout, True when
        the records are in ``_pending``, or ``(tag, record)`` (the CPU or ring, and the record as
        ``bytes``) when the drain took exactly one record that is not a lost-sample notice: the
        latency case, handed to the caller without a Batch.

        ``timeout_ms`` was checked by poll/read_batch (:func:`one_caller`); 0
        drains without waiting. The wait watches the rings' own fds and the
        close eventfd; once one is ready, the same C call drains.
        This runs between a wakeup and the first record reaching Python, on a
        CPU just out of idle whose caches hold little of the interpreter: every
        frame, object and cdata read counts here (see docs/performance.md), so
        the usual case (one record, records,
        or a timeout) returns straight from here and the C call's result says
        which it is; a signal, a close or an error go through the waiter's slow
        path. A record the C call consumed reaches the caller or ``_pending``
        whatever happens (an exception surfacing the moment the call returns
        makes it pending).
        """
        self._check_open()
        if self._pending is not None:
            return True
        with self._lock:
            # Inline, as in _wait_call: a helper's frame here costs every call ~0.1 us.
            self._check_open()
            waiter = self._waiter
            if waiter is None:
                raise ClosedError(self._what)
            # Only a signal's retry needs the start, but it must be read before the wait.
            start = time.monotonic() if timeout_ms > 0 else 0.0
            batch = self._batch
            # _wait_drain inlined (one frame less on the way back from the wakeup).
            try:
                ret: int = self._drain_c(waiter.ptr, timeout_ms, *self._drain_args)
                if ret == _DRAIN_ONE:
                    # The record starts at offset 0 of the drain's buffer (plb_batch_append).
                    return (batch.tag[0], ffi.buffer(batch.buf, batch.len[0])[:])
                if batch.n:
                    self._pending = drained_batch(batch, with_tags=self._tagged)
            except BaseException:
                # As in _wait_drain: the records the call took reach _pending whatever happens next
                # (a record returned above is the caller's: nothing after the return raises here).
                if self._pending is None and batch.n:
                    self._pending = drained_batch(batch, with_tags=self._tagged)
                raise
            if ret == 1:
                return True
            if ret == 0:
                return False
            return self._after_drain(ret, waiter, timeout_ms, start)

    def _after_drain(self, ret: int, waiter: Waiter, timeout_ms: int, start: float) -> bool:
        """A wait-and-drain's result other than 0 (timeout), 1 (drained) or one record: whether
        records are now pending.

        Raises for a failed drain (``_libbpf.check_collected``); a signal, a close
        or a wait's error go through ``waiter.after`` (which retries with :meth:`_wait_drain`).
        """
        if ret == _DRAIN_CHECK:
            _libbpf.check_collected(self._batch, self._drained[0], self._drain_what)
            return True
        return waiter.after(ret, timeout_ms, start, self._what, self._wait_drain)

    #: The wait-and-call C call (``plb_rb_wait_call``/``plb_pb_wait_call``):
    #: ``(waiter, timeout_ms, *_drain_args, handle) -> int``, ``_drain_c`` that calls the
    #: reader's :meth:`_call_one` (through :func:`plb_py_one`) with a lone record from inside the call.
    _call_c: Callable[..., int]
    #: The state :func:`plb_py_one` leaves for :meth:`_wait_call`: whether the operation lock is
    #: still held (it releases it before the callback) and whether the callback was called.
    _locked = False
    _called = False

    @abc.abstractmethod
    def _call_one(self, tag: int, data: memoryview) -> None:
        """Call the callback for one record (``tag``: its ring or CPU); called by :func:`plb_py_one`."""

    def _wait_call(self, timeout_ms: int) -> int | None:
        """poll's wait and drain: 0 on timeout, 1 when the drain took one record and its callback
        was called from inside the C call, None when the records are in ``_pending``.

        As :meth:`_fill_one`, but with the lone record of a wakeup (the
        latency case) delivered on the wakeup's way in: the C call hands it to
        :func:`plb_py_one` (given the reader's handle), which copies it,
        releases the operation lock (as for every callback: the callback may
        close the reader) and calls :meth:`_call_one`. Everything else after the
        wakeup (this method's checks, its lock, its return) then runs after the
        callback: 2-5% off the p50 latency on a CPU just out of idle
        (docs/performance.md). What that function raised (see
        :func:`_keep_raised`) is raised here, after the C call; a record it did
        not hand to the callback becomes pending, and a lock it did not release
        is released here: the record is delivered once, whatever interrupts it.
        """
        self._check_open()
        if self._pending is not None:
            return None
        lock = self._lock
        # Set before the acquire, cleared (by plb_py_one too) before the release: an exception
        # (a signal's) surfaces only once a call has returned, so the flag is True whenever this
        # thread holds the lock and the finally releases exactly what it holds. A blocking acquire
        # (close() or add() in another thread holds the lock) can be interrupted without taking
        # it, so it runs with the flag False: the usual `acquire(); try:` idiom, and its window.
        self._locked = True
        try:
            if not lock.acquire(False):
                self._locked = False
                lock.acquire()
                self._locked = True
            # The set-up of _fill_one, inline for the same reason (measured on an empty consume()).
            self._check_open()
            waiter = self._waiter
            if waiter is None:
                raise ClosedError(self._what)
            start = time.monotonic() if timeout_ms > 0 else 0.0
            batch = self._batch
            self._called = False
            try:
                ret: int = self._call_c(waiter.ptr, timeout_ms, *self._drain_args, self._handle)
                # What the call took from the kernel and no callback got (all of a batch, or a lone
                # record plb_py_one failed to hand over) becomes pending.
                if batch.n and not self._called:
                    self._pending = drained_batch(batch, with_tags=self._tagged)
            except BaseException:
                # The same when an exception (a signal's) surfaces the moment the call returns.
                if self._pending is None and batch.n and not self._called:
                    self._pending = drained_batch(batch, with_tags=self._tagged)
                _raised_in_call.__dict__.pop("exc", None)
                raise
            if ret == _DRAIN_CALLED:
                exc = _raised_in_call.__dict__.pop("exc", None)
                if exc is not None:
                    raise exc
                return 1 if self._called else None
            if ret == 1:
                return None
            if ret == 0:
                return 0
            return None if self._after_drain(ret, waiter, timeout_ms, start) else 0
        finally:
            if self._locked:
                self._locked = False
                lock.release()

    def poll(self, timeout: float | None = None, *, timeout_ms: int | None = None) -> int:
        """Wait up to ``timeout`` seconds (None: forever; 0: do not wait) for records, deliver them
        to the callback, and return how many (a PerfBuffer's lost-sample notices included).

        ``timeout_ms=`` (milliseconds, -1 forever) is the deprecated spelling
        of the same wait: a DeprecationWarning, for one minor release.
        Another thread's poll/consume/read_batch on this reader is waited for
        (within the timeout). Returns 0 on timeout; raises ClosedError if closed
        (also when closed by another thread during the wait), TypeError when
        the reader was made without a callback, ValueError for a negative or
        non-finite ``timeout``, and whatever a callback raised. A wakeup that
        drained one record has its callback called from inside the C call
        that waited (:meth:`_wait_call`), without a Batch.
        """
        ms = _check.poll_timeout_ms(timeout, timeout_ms, f"{self._what}.poll")
        self._require_callback("poll")
        return self._poll_ms(ms)

    def consume(self) -> int:
        """Deliver whatever is available now to the callback, without waiting; returns how many.

        TypeError when the reader was made without a callback.
        """
        self._require_callback("consume")
        return self._poll_ms(0)

    def _require_callback(self, method: str) -> None:
        """TypeError for poll/consume on a reader made without a callback (per subclass)."""

    @one_caller(int)
    def _poll_ms(self, timeout_ms: int) -> int:
        got = self._wait_call(timeout_ms)
        return self._deliver() if got is None else got

    def read_batch(self, timeout: float | None = None) -> Batch:
        """Wait up to ``timeout`` seconds (None: forever; 0: do not wait) and return what one C
        drain produced.

        The fast path: no callback is called. The batch (empty on timeout) holds
        copies, valid for as long as it (or a view of it) is referenced. Another
        thread's poll/consume/read_batch on this reader is waited for (within the
        timeout). ValueError for a negative or non-finite ``timeout``;
        ClosedError once closed (also when closed by another thread during the wait).
        """
        return self._read_batch_ms(_check.seconds_to_ms(timeout))

    @one_caller(Batch.empty)
    def _read_batch_ms(self, timeout_ms: int) -> Batch:
        got: Any = False
        try:
            got = self._fill_one(timeout_ms)
            if type(got) is tuple:
                return Batch.one(got[1], got[0])
        except BaseException:
            self._pend_one(got)
            raise
        if not got:
            return Batch.empty()
        return self._take_pending()

    def _pend_one(self, got: Any) -> None:
        """An exception met a record :meth:`_fill_one` handed over (``got``, a tuple) before
        read_batch made its batch: the record becomes pending, for the next call."""
        if type(got) is tuple:
            self._pending = Batch.one(got[1], got[0])

    def _take_pending(self) -> Batch:
        """The pending records as the batch read_batch returns (empty when none are pending)."""
        batch = self._pending
        if batch is None:
            return Batch.empty()
        taken = self._taken(batch.rest())
        self._pending = None  # only now: an exception before this line leaves the records pending
        return taken

    def _taken(self, batch: Batch) -> Batch:
        """Hook: what read_batch does to a batch before handing it out."""
        return batch

    #: Perf samples carry up to 7 bytes of padding (see plb_into.h, "the same size").
    _perf_rows = False
    _into_state: _into.Into | None = None

    def read_into(self, out: Any, timeout: float | None = None, *, record_size: Any = None) -> int:
        """Drain fixed-size records straight into the rows of ``out``; returns how many rows were written.

        ``out``: a numpy structured array (one record per element; the record
        size is its itemsize) or any writable C-contiguous buffer with
        ``record_size=`` (bytes, or an EventDef). Each record is copied once,
        from the kernel ring into its row, in C without the GIL. Rows are
        filled from ``out[0]`` on, at most ``len(out)``; the records after that
        stay in the ring for the next call (nothing is consumed that was not
        copied). Records of another size are never cut or dropped: they are
        consumed, kept in order with the row they came before, and handed back
        by :meth:`take_odd` (``odd_records`` counts them). Records an earlier
        ``poll``/``events()`` left undelivered come first.

        Blocks until at least one row is written, or for at most ``timeout``
        seconds (None: no limit; 0: do not wait); returns 0 on timeout (or for
        an ``out`` of no rows). TypeError/ValueError naming the argument for a
        wrong ``out``/``record_size``/``timeout``; ClosedError once closed
        (also when closed from another thread while blocked); RuntimeError
        from one of this reader's callbacks. Takes turns with ``poll``/
        ``consume``/``read_batch`` of other threads like they do.
        ``out`` is only written during the call.
        """
        rows = _into.Rows(out, record_size)
        deadline = _check.deadline(timeout)
        self._check_open()  # in a forked child: ClosedError before the lock
        calls = self._calls
        if not calls.take() and not calls.enter(_check.remaining_ms(deadline)):  # the clock read: contended only
            return 0
        try:
            if self._into_state is None:
                self._into_state = _into.Into()
            into = self._into_state
            into.begin(rows)
            try:
                self._fill_rows(into, deadline)
            finally:
                written = into.end()
            return written
        finally:
            calls.leave()

    def _fill_rows(self, into: _into.Into, deadline: float | None) -> None:
        """read_into's loop: pending records first, then the rings, until a row is written or
        ``deadline`` passes.

        The first fill does not wait: records may be there with no wakeup to come
        (a perf ring reports each wakeup to one poll only). Each later one waits and
        fills in the same C call (:meth:`_wait_rows`), so nothing is read twice.
        """
        if not into.st.rows:
            return
        timeout_ms = 0
        woken = 0  # consecutive wakeups after which nothing could be read
        while True:
            with self._lock:
                self._check_open()
                pending = self._pending
                if pending is not None:
                    whole = into.put_batch(pending, self._perf_rows, self._lost_notice)  # False: rows full
                    if whole:
                        self._pending = None
                    if not whole or into.full:
                        return
                ready = self._wait_rows(into, timeout_ms)
                if into.st.n:
                    return
                woken = woken + 1 if ready and timeout_ms else 0
                timeout_ms = _check.remaining_ms(deadline)
                if timeout_ms == 0:
                    return
            if woken:
                # Woken, yet nothing readable: a reserved record at the head keeps a ring
                # buffer's fd readable until its commit; pause (lock released) instead of spinning.
                pause = min(_BUSY_PAUSE_MAX_S, 0.0005 * (1 << min(woken, 6)))
                time.sleep(pause if timeout_ms < 0 else min(pause, timeout_ms / 1000))
                timeout_ms = _check.remaining_ms(deadline)  # 0: one last fill without a wait

    def _wait_rows(self, into: _into.Into, timeout_ms: int) -> bool:
        """read_into's wait and fill of every ring (lock held; ``timeout_ms`` 0: no wait), one C
        call for both, so that after a wakeup no Python runs before the records are in the rows
        (:meth:`_into.Into.wait_fill`): True when the rings were ready, False on timeout."""
        call, rings, n = self._into_rings()
        waiter = self._waiter
        if waiter is None:
            raise ClosedError(self._what)
        return into.wait_fill(call, waiter, timeout_ms, rings, n, self._into_tag, self._lost_notice, self._what)

    def _into_rings(self) -> tuple[Callable[..., int], Any, int]:
        """read_into's C call (``plb_rb_wait_into``/``plb_pb_wait_into``), the rings it reads and
        how many (subclasses; lock held)."""
        raise TypeError(f"{type(self).__name__} has no read_into")

    def _into_tag(self, i: int) -> int:
        """The tag of the C call's ring ``i`` in what read_into hands back: its index here."""
        return i

    def _lost_notice(self, ring: int, count: int) -> None:
        """A lost-samples notice met by read_into (perf buffers override)."""

    async def _records(self) -> AsyncIterator[tuple[Batch, int]]:
        """``(batch, i)`` for every record, for ``events()``; ends quietly when closed.

        A record counts as delivered once yielded. The rest of its batch stays
        pending meanwhile, so leaving the ``async for`` (``break``, an exception,
        a cancelled task) loses nothing: the next ``events()``, ``poll()`` or
        ``read_batch()`` starts with it.
        """
        async for batch in self._batches():
            self._pending = batch
            n = len(batch.starts)
            while batch.next < n:
                i = batch.next
                batch.next = i + 1
                if batch.next >= n and self._pending is batch:
                    self._pending = None
                yield batch, i

    def _deliver(self) -> int:
        """Call the callbacks for ``self._pending``, in order; returns how many records were handled.

        A record counts as handled once its callback was called, whether it
        returned, stopped the call (a negative int) or raised; the records
        after it stay pending (``batch.next``) for the next call. A batch of at
        least ``_views.MIN_RECORDS`` equal-size records packed back to back goes
        to ``_deliver_uniform`` (cached slices), any other to ``_deliver_each``.
        """
        batch = self._pending
        if batch is None:
            return 0
        first = batch.next
        n = len(batch.starts)
        # A zero length (a perf lost-sample notice) makes the stride 0: such batches go record by record.
        stride = (_views.uniform_stride(batch.starts, batch.lens, first, n)
                  if n - first >= _views.MIN_RECORDS else 0)
        try:
            if stride:
                self._deliver_uniform(batch, first, n, stride)
            else:
                self._deliver_each(batch, first)
        finally:
            # Both record in batch.next how far they got, also when a callback raised.
            if batch.next >= n:
                self._pending = None
        return batch.next - first

    @abc.abstractmethod
    def _deliver_uniform(self, batch: Batch, first: int, n: int, stride: int) -> None:
        """Deliver records ``first..n-1``, all one size at ``stride``; set ``batch.next`` however it ends."""

    @abc.abstractmethod
    def _deliver_each(self, batch: Batch, first: int) -> None:
        """Deliver records from ``first`` on, one slice each; set ``batch.next`` however it ends."""


class RecordReader(Closable):
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
