"""The lifecycle the threaded consumers share: start, stop, the run's thread, fork and exit.

:class:`Consumer` is the base of :class:`~pylibbpf.RingBufConsumer`,
:class:`~pylibbpf.BackpressureConsumer` and :class:`~pylibbpf.SamplingConsumer`
(:mod:`pylibbpf.consumers`):

1. ``start()`` opens what the run reads (the subclass's ``_open``) and starts
   the run's thread, which calls the subclass's ``_loop`` until stopped.
2. ``stop(drain_timeout)`` asks the loop to end (``_signal_stop``), waits for
   it to drain what was published, then closes (``_close``); both are
   idempotent, and ``start()`` after ``stop()`` is a new run.
3. Records reach the callback through ``_deliver`` (deserializer, callback,
   the error count and its log), or ``events()`` when there is no callback.
4. In a forked child an inherited run is not the child's: its calls raise
   ClosedError and nothing of the parent's threads is touched; at interpreter
   exit a running consumer is stopped before the readers close.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from . import _check, _close
from ._close import Callback, current_pid
from ._ffi import lib
from ._rings import require_map_type
from .errors import ClosedError
from .maps import Map

CData = Any

logger = logging.getLogger("pylibbpf.consumers")

#: How long the processor thread waits for the queue at a time (ms); GIL released meanwhile.
#: Between waits it hands dropped records to drop_handler and checks the native reader.
POP_WAIT_MS = 100

#: The most records one batch may take (the batch's arrays are allocated for this many).
MAX_BATCH_SIZE = 1 << 20


class Consumer(abc.ABC):
    """A worker thread that obtains batches of records and delivers them; start/stop/events().

    Subclasses provide the source: ``_open()`` (resources, before the thread
    starts), ``_signal_stop()`` (wake the thread; may run in any thread),
    ``_loop()`` (the thread's work) and ``_close()`` (free everything, in the
    thread, at its end). Counters live under ``_cond`` (its lock), which also
    guards the hand-off to an ``events()`` iteration.
    """

    _what = "consumer"
    _exit_order = 0  # stopped at interpreter exit before the readers are closed
    #: Whether a stop past its deadline leaves the rest of a batch undelivered (the queue-based
    #: consumers account for it; a RingBufConsumer delivers every record it took from the ring).
    _cut_batches = False

    def __init__(self, map: Map, callback: Callback | None, deserializer: Callback | None,
                 batch_size: int) -> None:
        require_map_type(map, lib.BPF_MAP_TYPE_RINGBUF, type(self).__name__)
        _check.optional_callable(callback, "callback")
        _check.optional_callable(deserializer, "deserializer")
        _check.integer(batch_size, "batch_size", lo=1, hi=MAX_BATCH_SIZE)
        self._map = map
        self._callback = callback
        self._deserializer = deserializer
        self._batch_size = batch_size
        self._cond = threading.Condition(threading.Lock())  # counters, hand-off, run state
        self._life = threading.Lock()      # serialises start() and stop()
        self._res_lock = threading.Lock()  # the source's C resources: stop signals vs. the final free
        self._worker: threading.Thread | None = None
        # Set by the worker as its very last step. Not Thread.join()/is_alive(): a join
        # interrupted by Ctrl-C can mark a live thread as stopped (CPython 3.11).
        self._done = threading.Event()
        self._done.set()
        self._run_pid = 0  # the process that started the current run (see _inherited_run)
        self._stop_requested = False
        self._stop_event = threading.Event()  # interrupts the worker's pauses
        self._deadline = 0.0
        self._failure: BaseException | None = None
        self._logged: set[type[BaseException]] = set()
        # events(): records deserialized by the worker, waiting for the iteration to take them
        self._handoff: deque[Any] = deque()
        self._handoff_cap = 2 * batch_size
        self._waker: Callable[[], None] | None = None
        self._finished = True
        self._started_at = 0.0
        self._stopped_at: float | None = None
        self._reset_counters()
        _close.track(self)
        _close.after_fork(self)

    def _after_fork_in_child(self) -> None:
        """Fresh locks: a thread of the parent may have held these at the fork."""
        self._cond = threading.Condition(threading.Lock())
        self._life = threading.Lock()
        self._res_lock = threading.Lock()
        self._stop_event = threading.Event()

    # --- counters -----------------------------------------------------------------------------

    def _reset_counters(self) -> None:
        self._processed = 0
        self._errors = 0
        self._batches = 0

    def _uptime(self) -> float:
        """Seconds the current (or last) run has lasted (lock held)."""
        if not self._started_at:
            return 0.0
        end = self._stopped_at if self._stopped_at is not None else time.monotonic()
        return max(0.0, end - self._started_at)

    # --- life cycle ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True from start() until the run's thread has ended (after stop(), or a failure)."""
        return self._worker is not None and not self._done.is_set() and self._run_pid == current_pid()

    def start(self) -> None:
        """Start a run: map the ring, start the thread(s). Returns at once; no-op when running.

        After stop(), start() starts a new run with statistics from zero.
        BPFError when the ring cannot be mapped or a thread cannot start;
        RuntimeError when called from the consumer's own callback; ClosedError
        in a forked child on a consumer whose run the parent started. After a
        stop() that was interrupted (Ctrl-C), start() first waits for that run
        to end: there is never more than one worker thread.
        """
        if self._worker is threading.current_thread():
            raise RuntimeError(f"{type(self).__name__}.start() called from its own callback")
        self._check_not_inherited()
        with self._life:
            worker = self._worker
            if worker is not None:
                if not self._stop_requested and not self._done.is_set():
                    return
                self._request_stop(0.0)  # a failed run, or an interrupted stop: let it end
                self._done.wait()
                self._worker = None
            with self._cond:
                self._reset_counters()
                self._handoff.clear()
                self._stop_requested = False
                self._stop_event.clear()
                self._failure = None
                self._logged.clear()
                self._started_at, self._stopped_at = time.monotonic(), None
            self._open()
            with self._cond:
                self._finished = False
            done = threading.Event()
            worker = threading.Thread(target=self._run, args=(done,), name=f"pylibbpf-{type(self).__name__}",
                                      daemon=True)
            # Known before it runs: its first callback may call stop(), which must see its own thread.
            self._worker, self._run_pid, self._done = worker, current_pid(), done
            try:
                worker.start()
            except BaseException:
                self._worker = None
                with self._cond:
                    self._finished = True
                    self._stopped_at = time.monotonic()
                self._close()
                done.set()
                raise

    def stop(self, drain_timeout: float = 5.0) -> None:
        """Stop the run: wake the thread(s), deliver what was read for up to ``drain_timeout`` s, join.

        Blocks until the worker thread has ended (a callback that is running
        is not interrupted: stop() returns after it does). Idempotent; a no-op
        when not running. Called from the consumer's own callback it only asks
        for the stop and returns; the thread ends after the callback returns.
        Every resource (mapping, fds, native thread, queue) is released when
        the thread ends. Raises the BPFError that ended the run early, if any
        (e.g. EBADMSG: the ring's memory was not a valid ring).

        In a forked child, stop() of a run the parent started does nothing:
        that run's threads exist only in the parent, its eventfds and ring
        are shared with it, and its locks may have been held at the fork.

        Interrupted (Ctrl-C raises KeyboardInterrupt while it waits), the run
        is left stopping: ``running`` stays True until its thread has ended,
        the counters stay consistent, and a second stop() finishes the job.
        """
        drain_timeout = _check.number(drain_timeout, "drain_timeout", lo=0)
        if self._inherited_run():
            return
        if self._worker is threading.current_thread():
            self._request_stop(drain_timeout)  # from the callback: the thread ends after it returns
            return
        with self._life:
            if self._worker is None:
                return
            self._request_stop(drain_timeout)
            self._done.wait()
            self._worker = None
            failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def _inherited_run(self) -> bool:
        """True in a forked child for a run the parent started (its threads are the parent's)."""
        return self._worker is not None and self._run_pid != current_pid()

    def _check_not_inherited(self) -> None:
        """ClosedError in a forked child for a run the parent started."""
        if self._inherited_run():
            raise ClosedError(f"{type(self).__name__} run inherited through fork()")

    def _request_stop(self, drain_timeout: float) -> None:
        """Mark the run as stopping (once) and wake the thread(s); the wake-up is repeated on every call.

        Repeating it makes a stop interrupted half-way (Ctrl-C between the
        two steps) complete on the next call; every signal is idempotent.
        """
        with self._cond:
            if not self._stop_requested:
                self._deadline = time.monotonic() + drain_timeout  # before the flag the worker reads
                self._stop_requested = True
            self._stop_event.set()
            self._cond.notify_all()
        with self._res_lock:
            self._signal_stop()

    def _at_exit(self, timeout: float) -> None:
        """Interpreter exit: stop the run without draining, wait up to ``timeout`` s for its thread.

        The native reader (BackpressureConsumer) is stopped and joined here,
        before anything it reads could be released.
        """
        if self._worker is None or self._inherited_run() or self._worker is threading.current_thread():
            return
        self._request_stop(0.0)
        self._done.wait(timeout)

    def _run(self, done: threading.Event) -> None:
        try:
            self._run_body()
        finally:
            done.set()

    def _run_body(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # the consumer's own failure (callbacks' are counted, not raised)
            if not (isinstance(exc, ClosedError) and _close.exiting()):  # at exit: its mapping was closed
                logger.error("%s: the consumer thread failed", type(self).__name__, exc_info=exc)
                self._failure = exc
        finally:
            try:
                with self._res_lock:
                    self._close()
            finally:
                with self._cond:
                    self._finished = True
                    self._stopped_at = time.monotonic()
                    waker = self._waker
                    if waker is None:
                        self._abandon_handoff()
                    self._cond.notify_all()
                if waker is not None:
                    waker()

    def _stopping_past_deadline(self) -> bool:
        return self._stop_requested and time.monotonic() >= self._deadline

    def __enter__(self) -> Any:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- subclass hooks -----------------------------------------------------------------------

    @abc.abstractmethod
    def _open(self) -> None:
        """Create the run's reading resources (start(), before the worker thread starts)."""

    @abc.abstractmethod
    def _signal_stop(self) -> None:
        """Wake the worker so that it sees the stop request."""

    @abc.abstractmethod
    def _loop(self) -> None:
        """The worker thread's body: read and deliver until stopped."""

    @abc.abstractmethod
    def _close(self) -> None:
        """Release the run's reading resources (after the worker has ended)."""

    def _abandon_handoff(self) -> None:
        """Records left in the hand-off that no iteration will take (lock held)."""
        self._handoff.clear()

    def _select(self, records: list[bytes]) -> tuple[list[bytes], int]:
        """The records to deliver, and how many were skipped (counted as processed)."""
        return records, 0

    # --- delivery -----------------------------------------------------------------------------

    def _log_error(self, exc: BaseException, where: str) -> None:
        kind = type(exc)
        if kind in self._logged:
            logger.debug("%s: %s raised %s: %s", type(self).__name__, where, kind.__name__, exc)
            return
        self._logged.add(kind)
        logger.error("%s: %s raised %s (counted in errors; further %s from it are logged at DEBUG only)",
                     type(self).__name__, where, kind.__name__, kind.__name__, exc_info=exc)

    def _deliver(self, records: list[bytes]) -> None:
        """Deserialize and call back (or hand off to events()) one batch; every record is counted.

        Counters are updated once per batch: until then the batch's records are
        in the processor's hands (BackpressureConsumer counts them in
        current_queue_size). While stopping past the deadline, the rest of the
        batch is left undelivered (the subclass accounts for it).
        """
        chosen, skipped = self._select(records)
        deser = self._deserializer
        processed = errors = 0
        try:
            if self._callback is None:
                values = []
                for raw in chosen:
                    try:
                        values.append(deser(raw) if deser is not None else raw)
                    except Exception as exc:
                        errors += 1
                        self._log_error(exc, "the deserializer")
                self._hand_off(values)
                return
            callback = self._callback
            cut = self._cut_batches
            for raw in chosen:
                if cut and self._stop_requested and self._stopping_past_deadline():
                    break
                try:
                    callback(deser(raw) if deser is not None else raw)
                    processed += 1
                except Exception as exc:
                    errors += 1
                    self._log_error(exc, "the callback" if deser is None else "the deserializer or callback")
        finally:
            with self._cond:
                self._count_delivered(processed, errors, skipped)

    def _count_delivered(self, processed: int, errors: int, skipped: int) -> None:
        """Count delivered records (lock held): skipped ones (sampling) count as processed."""
        self._processed += processed + skipped
        self._errors += errors

    def _hand_off(self, values: list[Any]) -> None:
        """Queue deserialized values for the events() iteration and wake it."""
        if not values:
            return
        with self._cond:
            self._handoff.extend(values)
            waker = self._waker
        if waker is not None:
            waker()

    def _room_for_handoff(self) -> bool:
        """events() mode: wait (up to 100 ms) until the iteration can take another batch.

        True when the worker may read the next batch: an iteration is attached
        with room, or a stop is draining (then the hand-off takes everything
        left: bounded by what was already read). False after the wait.
        """
        with self._cond:
            if self._stop_requested:
                return self._waker is not None
            if self._waker is not None and len(self._handoff) < self._handoff_cap:
                return True
            self._cond.wait(POP_WAIT_MS / 1000)
            return False

    async def events(self) -> AsyncIterator[Any]:
        """``async for event in consumer.events()``: the records, for a consumer made with ``callback=None``.

        Each record comes deserialized (or as ``bytes``). Starts the consumer
        when it is not running; ends when it is stopped (``stop()`` from any
        thread or task), after yielding what was read before the stop. The
        consumer's thread deserializes and hands over at most two batches
        ahead of the iteration: while the iteration is slow (or absent)
        nothing more is taken, so the backpressure consumer's queue drops
        (counted) and a RingBufConsumer leaves records in the kernel ring.
        A record counts as processed when it is yielded.

        Cancelling the task (or leaving the loop) leaves nothing registered on
        the event loop; records already handed over wait for the next
        iteration, or count as dropped once the consumer has stopped. One
        iteration at a time: RuntimeError for a second one, and for a consumer
        that has a callback.
        """
        if self._callback is not None:
            raise RuntimeError(f"{type(self).__name__}.events() needs a consumer created with callback=None")
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop was closed meanwhile
                loop.call_soon_threadsafe(ready.set)

        with self._cond:
            if self._waker is not None:
                raise RuntimeError(f"{type(self).__name__}.events(): one iteration at a time")
            self._waker = wake
            self._cond.notify_all()
        try:
            if not self.running:
                self.start()
            empty = object()
            while True:
                ready.clear()
                with self._cond:
                    if self._handoff:
                        item = self._handoff.popleft()
                        self._count_delivered(1, 0, 0)
                        if len(self._handoff) < self._handoff_cap:
                            self._cond.notify_all()
                    elif self._finished:
                        return
                    else:
                        item = empty
                if item is not empty:
                    yield item
                    continue
                await ready.wait()
        finally:
            with self._cond:
                self._waker = None
                if self._finished:
                    self._abandon_handoff()
                self._cond.notify_all()
