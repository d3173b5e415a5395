"""Ring buffer consumers with their own threads (seed: clj-ebpf's ring buffer consumer namespace).

- :class:`RingBufConsumer`: one Python thread waits on epoll, reads the ring
  through the mmap layer in batches and calls the callback. While the
  callback runs nobody reads the ring: a slow callback makes the *kernel*
  drop records (failed reserves).
- :class:`BackpressureConsumer`: a native thread (C, never takes the GIL)
  drains the ring into a bounded queue of ``max_pending`` records; a Python
  processor thread pops batches from it (GIL released while it waits) and
  calls the callback. A slow callback makes the *queue* drop records,
  counted (and optionally handed to ``drop_handler``), while the kernel ring
  keeps being emptied.
- :class:`SamplingConsumer`: a backpressure consumer that passes a random
  ``sample_rate`` of the records to the callback, decided before
  deserialization.

Each is started with ``start()`` and stopped with ``stop()``, both idempotent;
``start()`` after ``stop()`` starts a new run (new threads, statistics from
zero). The context managers (:func:`ringbuf_consumer`,
:func:`backpressure_consumer`, :func:`sampling_consumer`, or ``with`` on the
object) start on entry and stop on exit.

An exception raised by a callback or deserializer is counted in ``errors``,
logged once per exception type with its traceback on the ``logging`` logger
``pylibbpf.consumers``, and the consumer goes on with the next record.

Created with ``callback=None``, a consumer delivers to ``async for event in
consumer.events()`` instead (see :meth:`~pylibbpf._consumer.Consumer.events`).
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, TypeVar

from . import _check, _libbpf, _shim
from ._close import Callback, Waiter
from ._consumer import POP_WAIT_MS, Consumer
from ._ffi import ffi, lib
from ._rings import SAFETY_NET_MS, RecordBuffer, RingBufLayout, busy_pause
from .errors import ClosedError
from .maps import Map

CData = Any

logger = logging.getLogger("pylibbpf.consumers")


#: Default bytes per pending record when sizing the queue's byte arena (see max_pending_bytes).
_BYTES_PER_PENDING = 256
_MIN_QUEUE_BYTES = 1 << 20
_MAX_DEFAULT_QUEUE_BYTES = 64 << 20
_MAX_QUEUE_BYTES = (1 << 31) - 1  # the queue's own bound (plb_queue_create: at most 2^31)


class ConsumerStats(NamedTuple):
    """A :class:`RingBufConsumer`'s counters (``stats()``), for the current or last run."""

    events_read: int          #: records read from the ring
    events_processed: int     #: records whose callback returned normally
    batches_read: int         #: reads that returned at least one record
    errors: int               #: records whose deserializer or callback raised
    events_per_second: float  #: events_processed / uptime
    uptime_ms: int            #: time since start() (until stop() once stopped)


class BackpressureStats(NamedTuple):
    """A :class:`BackpressureConsumer`'s counters, one consistent snapshot (``stats()``).

    Always, while running and after stop::

        events_read == events_processed + events_dropped + current_queue_size + errors
    """

    events_read: int          #: records the native reader took from the ring
    events_processed: int     #: records delivered whose callback returned normally
    events_dropped: int       #: records refused by the full queue, plus those still queued when stop() gave up
    queue_full_count: int     #: times the queue went from accepting to refusing (overflow episodes)
    batches_read: int         #: native reader passes over the ring that found records
    errors: int               #: records whose deserializer or callback raised
    current_queue_size: int   #: records read but not processed yet: queued, or in the processor's hands
    max_queue_size: int       #: the most records that were waiting at once (high-water mark)
    drop_rate: float          #: 100 * events_dropped / events_read (percent; 0.0 before any event)
    events_per_second: float  #: events_processed / uptime
    uptime_ms: int            #: time since start() (until stop() once stopped)
    queue_capacity: int       #: max_pending


class SamplingStats(NamedTuple):
    """A :class:`SamplingConsumer`'s counters: the backpressure ones plus the sampling.

    ``events_seen`` (records the sampler looked at) == ``events_processed +
    errors``; ``events_sampled`` of them went to the callback. Skipped records
    count as processed.
    """

    events_read: int
    events_processed: int
    events_dropped: int
    queue_full_count: int
    batches_read: int
    errors: int
    current_queue_size: int
    max_queue_size: int
    drop_rate: float
    events_per_second: float
    uptime_ms: int
    queue_capacity: int
    events_sampled: int       #: records passed to the callback (or yielded by events())
    events_seen: int          #: records the sampler decided on
    sample_rate: float        #: the configured rate


class RingBufConsumer(Consumer):
    """Read a ring buffer in a background thread and call ``callback(record)`` for each record.

    ``record`` is ``deserializer(data)``, or ``data`` itself (a ``bytes``
    copy) without a deserializer. The thread waits on epoll (the map fd and an
    eventfd that stop() signals; GIL released), reads up to ``batch_size``
    records per C call through the mmap layer, and delivers them. It never
    spins: a wakeup that finds the head record still being written is followed
    by a short pause (0.5 ms, doubling up to 20 ms), and a 100 ms epoll
    timeout catches producers that submit with BPF_RB_NO_WAKEUP.

    The callback runs in that thread, so while it is slow the ring is not
    read: the kernel's reserves fail when the ring fills up. Use
    :class:`BackpressureConsumer` when the callback can be slow.

    ``stop(drain_timeout=5.0)`` wakes the thread at once; it then delivers
    what the producer had published when stop() was called (until the
    deadline) and ends. Anything after that stays in the kernel ring (it was
    not read, so it is not counted). The ring must not be read by anything
    else while the consumer runs.

    ValueError for ``batch_size <= 0``; TypeError for a map that is not a ring
    buffer (naming both types) or a callback/deserializer that is not callable.
    """

    _what = "RingBufConsumer"

    def __init__(self, map: Map, callback: Callback | None, deserializer: Callback | None = None,
                 batch_size: int = 64) -> None:
        super().__init__(map, callback, deserializer, batch_size)
        self._layout: RingBufLayout | None = None
        self._waiter: Waiter | None = None

    def _reset_counters(self) -> None:
        super()._reset_counters()
        self._read = 0

    def stats(self) -> ConsumerStats:
        """The counters of the current run (or of the last one, after stop())."""
        with self._cond:
            uptime = self._uptime()
            return ConsumerStats(
                events_read=self._read,
                events_processed=self._processed,
                batches_read=self._batches,
                errors=self._errors,
                events_per_second=self._processed / uptime if uptime > 0 else 0.0,
                uptime_ms=int(uptime * 1000),
            )

    def _open(self) -> None:
        layout = RingBufLayout(self._map)
        try:
            self._waiter = Waiter([self._map.fd], self._what)
        except BaseException:
            layout.close()
            raise
        self._layout = layout

    def _signal_stop(self) -> None:
        if self._waiter is not None:
            self._waiter.wake()

    def _close(self) -> None:
        if self._waiter is not None:
            self._waiter.close()
            self._waiter = None
        if self._layout is not None:
            self._layout.close()
            self._layout = None

    def _read_batch(self, layout: RingBufLayout) -> list[bytes]:
        with layout.locked():
            records = layout.read_once(self._batch_size, consume=True)
        if records:
            with self._cond:
                self._read += len(records)
                self._batches += 1
        return records

    def _loop(self) -> None:
        layout, waiter = self._layout, self._waiter
        if layout is None or waiter is None:
            raise RuntimeError("RingBufConsumer: the thread started without its mapping")
        async_mode = self._callback is None
        idle = 0
        while not self._stop_requested:
            if async_mode and not self._room_for_handoff():
                continue
            records = self._read_batch(layout)
            if records:
                idle = 0
                self._deliver(records)
                continue
            if idle and self._stop_event.wait(busy_pause(idle)):
                break
            try:
                ready = waiter.wait(SAFETY_NET_MS, self._what)
            except ClosedError:
                break  # stop() woke us
            idle = idle + 1 if ready else 0
        # Final pass: what the producer had published by now, until the deadline.
        if async_mode and self._waker is None:
            return  # nobody to deliver to: leave the records in the ring
        limit = layout.producer_pos
        while not self._stopping_past_deadline():
            if layout.consumer_pos >= limit:
                break
            records = self._read_batch(layout)
            if not records:
                break
            self._deliver(records)


class BackpressureConsumer(Consumer):
    """Keep draining a ring buffer while a slow callback runs: native reader, bounded queue, drops.

    A native thread (``plb_reader``, C, never takes the GIL) waits on the
    ring's map fd and moves every record into a bounded queue of
    ``max_pending`` records; when the queue is full it drops the record
    (counted in ``events_dropped``) and goes on emptying the kernel ring, so
    the producer's reserves do not fail because Python is slow. A Python
    processor thread pops up to ``batch_size`` records at a time (waiting with
    the GIL released) and calls ``callback(deserializer(data))`` (or
    ``callback(data)``, ``data`` a ``bytes`` copy) for each.

    ``drop_handler(data)``, when given, is called with dropped records by the
    processor thread, between batches (never by the native reader, and never
    concurrently with the callback). Dropped records wait for it in a side
    queue of ``max_pending`` records; those that do not fit are only counted.
    An exception in it is logged (once per type), not counted in ``errors``
    (the record is already counted as dropped).

    ``stop(drain_timeout=5.0)``: the native reader makes a final pass (every
    record published before stop() is queued or dropped), the queue is closed,
    and the processor delivers what is queued for up to ``drain_timeout``
    seconds. Records still queued then are counted in ``events_dropped``, so
    after stop() ``current_queue_size`` is 0 (with an ``events()`` iteration,
    what it was already handed is still yielded).

    Memory is bounded and reserved at start(): the queue holds at most
    ``max_pending`` records and ``max_pending_bytes`` payload bytes (default
    ``max_pending * 256`` clamped to 1..64 MiB: records beyond the byte bound
    are dropped like those beyond the count, and a record larger than it is
    always dropped), twice that with a drop_handler.

    ValueError for ``max_pending <= 0`` or ``batch_size <= 0``; TypeError for
    a map that is not a ring buffer (naming both types), or a callback,
    deserializer or drop_handler that is not callable.
    """

    _what = "BackpressureConsumer"
    _cut_batches = True

    def __init__(self, map: Map, callback: Callback | None, deserializer: Callback | None = None,
                 max_pending: int = 10000, drop_handler: Callback | None = None, batch_size: int = 64,
                 *, max_pending_bytes: int | None = None) -> None:
        _check.integer(max_pending, "max_pending", lo=1, hi=_MAX_QUEUE_BYTES)
        _check.optional_integer(max_pending_bytes, "max_pending_bytes", lo=1, hi=_MAX_QUEUE_BYTES)
        _check.optional_callable(drop_handler, "drop_handler")
        super().__init__(map, callback, deserializer, batch_size)
        self._max_pending = max_pending
        self._byte_cap = max_pending_bytes or max(_MIN_QUEUE_BYTES, min(max_pending * _BYTES_PER_PENDING,
                                                                        _MAX_DEFAULT_QUEUE_BYTES))
        self._drop_handler = drop_handler
        self._layout: RingBufLayout | None = None
        self._queue: CData = None
        self._reader: CData = None
        self._reader_error = 0
        self._qstats = ffi.new("struct plb_queue_stats *")
        self._rstats = ffi.new("struct plb_reader_stats *")
        self._popbuf = RecordBuffer(batch_size, max(batch_size * _BYTES_PER_PENDING, 64 * 1024))
        self._dropped_buf = RecordBuffer(batch_size, max(batch_size * _BYTES_PER_PENDING, 64 * 1024))

    def _reset_counters(self) -> None:
        super()._reset_counters()
        self._abandoned = 0    # records left unprocessed when the run ended (counted as dropped)
        self._max_seen = 0     # the largest current_queue_size a snapshot has shown
        # the queue's and reader's counters, kept when they are freed at the end of a run
        self._final: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)

    # --- statistics ---------------------------------------------------------------------------

    def _counts(self) -> tuple[int, int, int, int, int]:
        """(pushed, dropped, queue_full_count, high_water, batches) now (lock held).

        ClosedError in a forked child during a run the parent started: the
        queue's own lock may have been held by the parent's native thread.
        """
        if self._queue is None:
            return self._final
        self._check_not_inherited()
        q, r = self._qstats, self._rstats
        _shim.plb_queue_stats(self._queue, q)
        _shim.plb_reader_stats(self._reader, r)
        return int(q.pushed), int(q.dropped), int(q.queue_full_count), int(q.high_water), int(r.batches)

    def _snapshot(self) -> BackpressureStats:
        """One consistent snapshot (lock held).

        The processor's counters are read first, then the queue's (under its
        own lock, so pushed/dropped/current agree). Records popped but not yet
        counted as processed or errors are still "in the queue": the queue
        size is derived so that the invariant holds exactly.
        """
        processed, errors, abandoned = self._processed, self._errors, self._abandoned
        pushed, qdropped, full_count, high_water, batches = self._counts()
        dropped = qdropped + abandoned
        current = pushed - dropped - processed - errors
        self._max_seen = max(self._max_seen, current, high_water)
        uptime = self._uptime()
        return BackpressureStats(
            events_read=pushed,
            events_processed=processed,
            events_dropped=dropped,
            queue_full_count=full_count,
            batches_read=batches,
            errors=errors,
            current_queue_size=current,
            max_queue_size=self._max_seen,
            drop_rate=100.0 * dropped / pushed if pushed else 0.0,
            events_per_second=processed / uptime if uptime > 0 else 0.0,
            uptime_ms=int(uptime * 1000),
            queue_capacity=self._max_pending,
        )

    def stats(self) -> BackpressureStats:
        """A consistent snapshot of the current run's counters (the last run's after stop()).

        ClosedError in a forked child while the parent's run is on."""
        with self._cond:
            return self._snapshot()

    def healthy(self, max_drop_rate: float = 5.0, max_queue_utilization: float = 80.0) -> bool:
        """True when the drop rate (percent) is below ``max_drop_rate`` and the queue is
        filled below ``max_queue_utilization`` percent of ``max_pending``."""
        max_drop_rate = _check.number(max_drop_rate, "max_drop_rate", lo=0)
        max_queue_utilization = _check.number(max_queue_utilization, "max_queue_utilization", lo=0)
        s = self.stats()
        utilization = 100.0 * s.current_queue_size / s.queue_capacity
        return s.drop_rate < max_drop_rate and utilization < max_queue_utilization

    # --- the run ------------------------------------------------------------------------------

    def _open(self) -> None:
        layout = RingBufLayout(self._map)
        queue = reader = None
        try:
            drop_cap = self._max_pending if self._drop_handler is not None else 0
            queue = _shim.plb_queue_create(self._max_pending, self._byte_cap, drop_cap,
                                             self._byte_cap if drop_cap else 0, "plb_queue_create")
            reader = _shim.plb_reader_start(layout.view()[0], self._map.fd, queue, self._batch_size,
                                              f"plb_reader_start({self._map.name})")
        except BaseException:
            if queue is not None:
                _shim.plb_queue_destroy(queue)
            layout.close()
            raise
        with self._cond:
            self._layout, self._queue, self._reader = layout, queue, reader
            self._reader_error = 0

    def _signal_stop(self) -> None:
        """Final pass of the native reader, then close the queue (wakes the processor)."""
        if self._reader is not None:
            err = _shim.plb_reader_stop(self._reader)
            if err and not self._reader_error:
                self._reader_error = err
            _shim.plb_queue_close(self._queue)

    def _close(self) -> None:
        """End of the run (in the processor thread, res_lock held): account, snapshot, free."""
        if self._reader is None:
            return
        self._signal_stop()  # no-op when stop() already did it (both calls are idempotent)
        with self._cond:
            # Everything not processed, not an error and not dropped by the queue was
            # abandoned: still queued, or left in the batch the processor gave up on.
            pushed, qdropped, full_count, high_water, batches = self._counts()
            # (the hand-off's records are left to the events() iteration, or abandoned by
            # _abandon_handoff when there is none)
            self._abandoned = pushed - qdropped - self._processed - self._errors - len(self._handoff)
            self._final = (pushed, qdropped, full_count, high_water, batches)
            self._max_seen = max(self._max_seen, high_water)
            queue, reader, layout = self._queue, self._reader, self._layout
            self._queue = self._reader = self._layout = None
        _shim.plb_reader_destroy(reader)
        _shim.plb_queue_destroy(queue)
        if layout is not None:
            layout.close()
        if self._reader_error and self._failure is None:
            self._failure = _libbpf.error(self._reader_error, f"plb_reader({self._map.name})")

    def _abandon_handoff(self) -> None:
        self._abandoned += len(self._handoff)
        self._handoff.clear()

    def _check_reader(self) -> None:
        """Raise the error that ended the native reader early (e.g. a corrupt ring)."""
        with self._cond:
            _shim.plb_reader_stats(self._reader, self._rstats)
            running, err = int(self._rstats.running), int(self._rstats.error)
        if not running and err:
            raise _libbpf.error(-err, f"plb_reader({self._map.name})")

    def _handle_drops(self) -> None:
        """Give dropped records to drop_handler (at most one batch per call, never waiting)."""
        handler = self._drop_handler
        if handler is None:
            return
        buf = self._dropped_buf
        while True:
            n = _shim.plb_queue_pop_dropped_batch(self._queue, buf.out, buf.cap, buf.starts, buf.lens,
                                                    buf.max_records, buf.used, "plb_queue_pop_dropped_batch")
            if n != -lib.EMSGSIZE:
                break
            buf.grow(int(buf.used[0]))
        for raw in buf.take(n):
            try:
                handler(raw)
            except Exception as exc:
                self._log_error(exc, "the drop_handler")

    def _pop(self, timeout_ms: int) -> int:
        """Pop up to batch_size records (GIL released while waiting): count, 0, or -EPIPE."""
        buf = self._popbuf
        while True:
            n = _shim.plb_queue_pop_batch(self._queue, buf.out, buf.cap, buf.starts, buf.lens,
                                            self._batch_size, timeout_ms, buf.used, "plb_queue_pop_batch")
            if n != -lib.EMSGSIZE:
                return n
            buf.grow(int(buf.used[0]))

    def _loop(self) -> None:
        async_mode = self._callback is None
        signalled = False
        while True:
            self._handle_drops()
            if self._stop_requested and not signalled:
                # Finish a stop() that was interrupted before it closed the queue
                # (idempotent when it did): without it, nothing would end this loop.
                with self._res_lock:
                    self._signal_stop()
                signalled = True
            if self._stop_requested and self._stopping_past_deadline():
                return
            if async_mode and not self._room_for_handoff():
                if self._stop_requested:
                    return  # stopping with no iteration to hand the rest to
                continue
            n = self._pop(0 if self._stop_requested else POP_WAIT_MS)
            if n == -lib.EPIPE:
                return  # closed and empty: everything was delivered
            if n == 0:
                if not self._stop_requested:
                    self._check_reader()
                continue
            self._deliver(self._popbuf.take(n))


class SamplingConsumer(BackpressureConsumer):
    """A :class:`BackpressureConsumer` that passes a random ``sample_rate`` of the records on.

    Every record is read and counted; each one is sampled with probability
    ``sample_rate`` (``random.Random(seed).random() < sample_rate``, so a
    ``seed`` makes the choice reproducible for the same record order), decided
    before deserialization: skipped records cost no deserializer call. Skipped
    records count as processed; ``stats()`` adds ``events_seen``,
    ``events_sampled`` and ``sample_rate``. ``max_pending`` defaults to 1000
    (the seed's choice: a sampling processor keeps up easily).

    ValueError for ``sample_rate`` outside [0, 1], plus the backpressure
    consumer's checks.
    """

    _what = "SamplingConsumer"

    def __init__(self, map: Map, callback: Callback | None, sample_rate: float = 0.1,
                 deserializer: Callback | None = None, seed: int | None = None, *, max_pending: int = 1000,
                 drop_handler: Callback | None = None, batch_size: int = 64,
                 max_pending_bytes: int | None = None) -> None:
        _check.number(sample_rate, "sample_rate", lo=0.0, hi=1.0)
        super().__init__(map, callback, deserializer, max_pending, drop_handler, batch_size,
                         max_pending_bytes=max_pending_bytes)
        self._sample_rate = float(sample_rate)
        self._seed = seed
        self._rng = random.Random(seed)

    def _reset_counters(self) -> None:
        super()._reset_counters()
        self._seen = 0
        self._sampled = 0
        self._rng = random.Random(getattr(self, "_seed", None))

    def _select(self, records: list[bytes]) -> tuple[list[bytes], int]:
        rate = self._sample_rate
        draw = self._rng.random
        chosen = [raw for raw in records if draw() < rate]
        return chosen, len(records) - len(chosen)

    def _count_delivered(self, processed: int, errors: int, skipped: int) -> None:
        super()._count_delivered(processed, errors, skipped)
        self._seen += processed + errors + skipped
        self._sampled += processed + errors

    def stats(self) -> SamplingStats:  # type: ignore[override]
        """The backpressure snapshot plus ``events_sampled``, ``events_seen`` and ``sample_rate``."""
        with self._cond:
            base = self._snapshot()
            return SamplingStats(*base, events_sampled=self._sampled, events_seen=self._seen,
                                 sample_rate=self._sample_rate)


ConsumerT = TypeVar("ConsumerT", bound=Consumer)


@contextlib.contextmanager
def _started(make: Callable[[], ConsumerT], drain_timeout: float | None) -> Iterator[ConsumerT]:
    """Make the consumer on entry, start it, and stop it on exit (with ``drain_timeout``, if given)."""
    consumer = make()
    consumer.start()
    try:
        yield consumer
    finally:
        if drain_timeout is None:
            consumer.stop()
        else:
            consumer.stop(drain_timeout)


# The helpers take their class's parameters as they are (positional and keyword alike),
# so a parameter added to a class is a parameter of its helper too.

def ringbuf_consumer(map: Map, callback: Callback | None, *args: Any,
                     **kwargs: Any) -> contextlib.AbstractContextManager[RingBufConsumer]:
    """``with ringbuf_consumer(map, callback) as c:`` a started :class:`RingBufConsumer`, stopped on exit.

    Every other argument is :class:`RingBufConsumer`'s.
    """
    return _started(lambda: RingBufConsumer(map, callback, *args, **kwargs), None)


def backpressure_consumer(map: Map, callback: Callback | None, *args: Any, drain_timeout: float = 5.0,
                          **kwargs: Any) -> contextlib.AbstractContextManager[BackpressureConsumer]:
    """``with backpressure_consumer(map, callback, ...) as bc:`` started, stopped (with drain) on exit.

    ``drain_timeout`` goes to ``stop()``; every other argument is :class:`BackpressureConsumer`'s.
    """
    return _started(lambda: BackpressureConsumer(map, callback, *args, **kwargs), drain_timeout)


def sampling_consumer(map: Map, callback: Callback | None, *args: Any, drain_timeout: float = 5.0,
                      **kwargs: Any) -> contextlib.AbstractContextManager[SamplingConsumer]:
    """``with sampling_consumer(map, callback, 0.1) as sc:`` started, stopped (with drain) on exit.

    ``drain_timeout`` goes to ``stop()``; every other argument is :class:`SamplingConsumer`'s.
    """
    return _started(lambda: SamplingConsumer(map, callback, *args, **kwargs), drain_timeout)


__all__ = [
    "BackpressureConsumer",
    "BackpressureStats",
    "ConsumerStats",
    "RingBufConsumer",
    "SamplingConsumer",
    "SamplingStats",
    "backpressure_consumer",
    "ringbuf_consumer",
    "sampling_consumer",
]
