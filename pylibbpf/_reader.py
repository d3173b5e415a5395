"""Machinery shared by the readers: the interruptible wait and batch delivery.

A reader drains records in C into a ``plb_batch`` under its operation lock,
copies the batch out in one piece (:class:`Batch`), and delivers it to Python
callbacks outside the lock. ``close()`` from any thread wakes a blocked wait
through the waiter's eventfd, then takes the lock, so libbpf objects are never
freed under a reader.
"""

from __future__ import annotations

import abc
import array
import asyncio
import functools
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, TypeVar

from . import _check, _close, _libbpf
from ._close import current_pid
from ._ffi import ffi, lib
from .errors import ClosedError

CData = Any


BatchT = TypeVar("BatchT", bound="Batch")


class Batch:
    """Records drained from the kernel in one C call, copied out as one ``bytes`` object.

    ``len(batch)`` records; ``batch[i]`` and iteration give read-only memoryviews
    of each record; ``batch.tags[i]`` is the record's ring index (ring buffers)
    or CPU (perf buffers). The views keep the batch's bytes alive, so they stay
    valid for as long as they are held; the kernel ring was released when the
    batch was made. ``to_numpy(event_def)`` parses every record at once into a
    structured array (no Python loop; numpy required).
    """

    __slots__ = ("blob", "lens", "lost", "next", "starts", "tags", "view")

    starts: Sequence[int]
    lens: Sequence[int]
    tags: Sequence[int]
    lost: Sequence[int]

    def __init__(self, batch: CData, with_tags: bool) -> None:
        n = batch.n
        self.blob = bytes(ffi.buffer(batch.buf, batch.used)) if batch.used else b""
        self.view = memoryview(self.blob)
        # One memcpy per array (array.array), not one Python int per record (ffi.unpack).
        self.starts = _u32_array(batch.start, n)
        self.lens = _u32_array(batch.len, n)
        self.tags = _u32_array(batch.tag, n).tolist() if with_tags else [0] * n
        self.lost = _u64_array(batch.lost, n) if with_tags else _ZEROS_U64 * n
        self.next = 0  # index of the first record not delivered yet (callback paths)

    @classmethod
    def empty(cls: type[BatchT]) -> BatchT:
        """A batch with no records (of the class it is called on)."""
        batch = cls.__new__(cls)
        batch.blob, batch.view = b"", memoryview(b"")
        batch.starts, batch.lens, batch.tags, batch.lost = [], [], [], []
        batch.next = 0
        return batch

    def rest(self) -> Batch:
        """The records not delivered yet, as a batch of their own (shares the bytes)."""
        if self.next:
            k = self.next
            self.starts, self.lens = self.starts[k:], self.lens[k:]
            self.tags, self.lost = self.tags[k:], self.lost[k:]
            self.next = 0
        return self

    def take_lost(self) -> list[tuple[int, int]]:
        """Remove the lost-sample notices from the batch; returns them as (cpu, count) pairs."""
        if not any_nonzero(self.lost):
            return []
        self.rest()
        notices = [(t, n) for t, n in zip(self.tags, self.lost) if n]
        self.keep([i for i, n in enumerate(self.lost) if not n])
        return notices

    def keep(self, indices: Sequence[int]) -> None:
        """Keep only the records at ``indices`` (counted from the first one not delivered yet)."""
        self.rest()
        self.starts = [self.starts[i] for i in indices]
        self.lens = [self.lens[i] for i in indices]
        self.tags = [self.tags[i] for i in indices]
        self.lost = [self.lost[i] for i in indices]

    def __len__(self) -> int:
        return len(self.starts) - self.next

    def __getitem__(self, i: int) -> memoryview:
        start = self.starts[i]
        return self.view[start:start + self.lens[i]]

    def __iter__(self) -> Iterator[memoryview]:
        view = self.view
        for start, length in zip(self.starts, self.lens):
            yield view[start:start + length]

    def to_numpy(self, event_def: Any) -> Any:
        """All records parsed by ``event_def`` into a numpy structured array, without a Python loop.

        Records shorter than the event raise ValueError (naming the event and
        both sizes); longer ones (perf padding) are cut. Lost-sample notices
        must not be in the batch (PerfBuffer batches keep them in ``lost``).
        """
        import numpy as np

        self.rest()
        dtype = _numpy_dtype(event_def)
        size = int(event_def.size)
        n = len(self.starts)
        if n == 0:
            return np.empty(0, dtype=dtype)
        lens = _as_numpy(self.lens)
        shortest = int(lens.min())
        if shortest < size:
            raise ValueError(f"{event_def.name}: a record of {shortest} bytes is shorter than "
                             f"the event's {size} bytes")
        starts = _as_numpy(self.starts)
        raw = np.frombuffer(self.blob, dtype=np.uint8)
        first = int(starts[0])
        stride = (int(lens[0]) + 7) & ~7
        if shortest == int(lens.max()) and int(starts[-1]) - first == (n - 1) * stride:
            # Equal records packed back to back (what the C collectors produce):
            # copy the rows as bytes, then reinterpret; no per-field strided copy.
            rows = np.lib.stride_tricks.as_strided(raw[first:], shape=(n, size), strides=(stride, 1))
        else:
            rows = raw[starts.astype(np.int64)[:, None] + np.arange(size)[None, :]]
        return rows.copy().view(dtype).reshape(n)


_ZEROS_U64 = array.array("Q", [0])


def any_nonzero(values: Sequence[int]) -> bool:
    """``any(values)``, at memory speed for an ``array.array`` (``any`` boxes every element)."""
    if isinstance(values, array.array):
        raw = values.tobytes()
        return raw.count(0) != len(raw)
    return any(values)


def _u32_array(ptr: CData, n: int) -> array.array[int]:
    out = array.array("I")
    out.frombytes(ffi.buffer(ptr, 4 * n))
    return out


def _u64_array(ptr: CData, n: int) -> array.array[int]:
    out = array.array("Q")
    out.frombytes(ffi.buffer(ptr, 8 * n))
    return out


def _as_numpy(values: Sequence[int]) -> Any:
    import numpy as np

    if isinstance(values, array.array):
        return np.frombuffer(values, dtype=np.uint32 if values.itemsize == 4 else np.uint64)
    return np.asarray(values, dtype=np.int64)


@functools.lru_cache(maxsize=64)
def _numpy_dtype(event_def: Any) -> Any:
    """EventDef.numpy_dtype(), built once per definition (it costs microseconds)."""
    return event_def.numpy_dtype()




class Waiter:
    """An epoll set over some fds plus an eventfd that ``wake()`` signals from any thread."""

    def __init__(self, fds: list[int], what: str) -> None:
        self._w = ffi.new("struct plb_waiter *")
        self._w.epfd = self._w.evfd = -1
        _libbpf.plb_waiter_init(self._w, -1, what)
        self._finalizer = _close.finalizer(self, lib.plb_waiter_close, self._w)
        try:
            for fd in fds:
                _libbpf.plb_waiter_add(self._w, fd, what)
        except BaseException:
            self.close()
            raise

    def add_writable(self, fd: int, what: str) -> None:
        """Also wake when ``fd`` gains room to write (edge-triggered EPOLLOUT: each new room wakes once)."""
        _libbpf.plb_waiter_add_writable(self._w, fd, what)

    @property
    def fd(self) -> int:
        """The epoll fd: readable when a watched fd is, or once woken (for asyncio)."""
        return int(self._w.epfd)

    def wait(self, timeout_ms: int, what: str) -> bool:
        """Block (GIL released) until ready (True) or timeout (False); ClosedError once woken.

        A signal interrupts the wait and lets Python run its handler (Ctrl-C
        raises KeyboardInterrupt here); otherwise the wait resumes for the time left.
        """
        deadline = None if timeout_ms < 0 else time.monotonic() + timeout_ms / 1000
        while True:
            ret = int(lib.plb_waiter_wait(self._w, _check.remaining_ms(deadline)))
            if ret >= 0:
                return ret > 0
            if ret == -lib.ECANCELED:
                raise ClosedError(what)
            if ret != -lib.EINTR:
                raise _libbpf.error(-ret, f"{what}: epoll_wait")

    def wake(self) -> None:
        lib.plb_waiter_wake(self._w)

    def close(self) -> None:
        self._finalizer()


class Closable(abc.ABC):
    """The close protocol: an idempotent ``close()``, a context manager, ClosedError after.

    Subclasses implement ``_release()`` (free C resources; called once, under
    the operation lock, after any blocked reader has been woken and left).

    Every reader is closed at interpreter exit if still open (see
    :mod:`pylibbpf._close`), so a daemon thread still reading then gets
    ClosedError instead of reading freed memory. In a forked child every
    method raises ClosedError before touching a lock or shared memory.
    """

    _what = "object"
    _exit_order = 1  # closed at exit after the consumers, which read through readers

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._owner_pid = current_pid()
        self._waiter: Waiter | None = None
        self._close_hooks: list[Callable[[], None]] = []  # wake async iterations on close
        _close.track(self)

    def _check_owner(self) -> None:
        """ClosedError in a forked child: the object belongs to the parent."""
        if self._owner_pid != current_pid():
            raise ClosedError(f"{self._what} inherited through fork()")

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(self._what)
        self._check_owner()

    def read_batch(self, timeout_ms: int = -1) -> Batch:
        """Wait up to ``timeout_ms`` and return what one C drain produced (subclasses)."""
        raise TypeError(f"{type(self).__name__} has no batch reads")

    async def _batches(self) -> AsyncIterator[Batch]:
        """Non-empty batches as they arrive, for ``async for``; ends quietly when closed.

        The reader's own epoll fd (libbpf's rings plus the close eventfd) is
        watched with ``loop.add_reader``; cancelling the consuming task removes
        the reader, so nothing keeps running. Each iteration watches its own
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

    def _wait(self, timeout_ms: int) -> bool:
        """Wait on the reader's fds (lock held): True when ready, False on timeout.

        Callers skip the wait for timeout 0 and drain directly: a perf event fd
        reports each wakeup to one poll only, and an asyncio selector polling the
        same epoll fd may already have taken it.
        """
        if self._waiter is None:
            raise ClosedError(self._what)
        return self._waiter.wait(timeout_ms, self._what)

    def close(self) -> None:
        """Release everything; wakes a reader blocked in another thread (it raises ClosedError).

        Idempotent; every later call on the object raises ClosedError.

        In a forked child, closing an object the parent made only marks it
        closed: its rings, map entries and wake-up eventfd are shared with the
        parent, which still reads them, and a parent thread may have held its
        lock at the fork. The child's copies of the fds (all close-on-exec) and
        mappings go when the child exits or execs.
        """
        self._close_within(None)

    def _at_exit(self, timeout: float) -> None:
        """Interpreter exit: close, waiting at most ``timeout`` s for a reader to leave."""
        self._close_within(timeout)

    def _close_within(self, timeout: float | None) -> None:
        if self._closed:
            return
        self._closed = True
        if self._owner_pid != current_pid():
            return
        if self._waiter is not None:
            self._waiter.wake()
        for hook in list(self._close_hooks):
            hook()
        # Every C call on the object's memory runs under the lock after a closed
        # check: once we hold it, no thread is inside, nor will be.
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            return  # exit only: a thread would not leave; free nothing under it
        try:
            self._release()
            if self._waiter is not None:
                self._waiter.close()
        finally:
            self._lock.release()

    @abc.abstractmethod
    def _release(self) -> None:
        """Free the C resources (once, under the lock, no reader inside)."""

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Any:
        self._check_open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


Callback = Callable[..., Any]


class OneCaller:
    """One call at a time on a reader, from drain to the last record delivered.

    Two threads polling one reader would otherwise deliver the same drained
    records twice. A second thread waits (up to its own timeout); the thread
    already inside (a callback calling back into its reader) gets a
    RuntimeError naming the reader instead of a deadlock.
    """

    def __init__(self, what: str) -> None:
        self._what = what
        self._lock = threading.Lock()
        self._owner: int | None = None

    def enter(self, timeout_ms: int) -> bool:
        """Take the turn: False when ``timeout_ms`` (-1: no limit, 0: do not wait) passed first."""
        me = threading.get_ident()
        if self._owner == me:
            raise RuntimeError(f"{self._what}: called from its own callback; one call at a time")
        if timeout_ms == 0:
            taken = self._lock.acquire(False)
        else:
            taken = self._lock.acquire(timeout=-1 if timeout_ms < 0 else timeout_ms / 1000)
        if taken:
            self._owner = me
        return taken

    def leave(self) -> None:
        self._owner = None
        self._lock.release()


ResultT = TypeVar("ResultT")


def one_caller(empty: Callable[[], Any]) -> Callable[[Callable[..., ResultT]], Callable[..., ResultT]]:
    """Decorate ``method(self, timeout_ms)``: it runs under ``self._calls`` (a :class:`OneCaller`).

    The time spent waiting for the turn counts against ``timeout_ms``; when it
    runs out first, the call returns ``empty()``.
    """
    def wrap(method: Callable[..., ResultT]) -> Callable[..., ResultT]:
        @functools.wraps(method)
        def call(self: Any, timeout_ms: int = -1) -> ResultT:
            timeout_ms = _check.timeout_ms(timeout_ms)
            self._check_open()  # in a forked child: ClosedError before the lock
            start = time.monotonic()
            if not self._calls.enter(timeout_ms):
                return empty()  # type: ignore[no-any-return]
            try:
                if timeout_ms > 0:
                    timeout_ms = max(0, timeout_ms - int((time.monotonic() - start) * 1000))
                return method(self, timeout_ms)
            finally:
                self._calls.leave()
        return call
    return wrap


class BatchReader(Closable):
    """poll/consume/read_batch over a C drain: the protocol RingBuffer and PerfBuffer share.

    Subclasses implement ``_drain()`` (copy what the kernel rings hold into
    ``self._pending``; lock held) and ``_deliver()`` (call the callbacks for
    ``self._pending``; no lock held, so a callback may close the reader).
    Records a callback stop left undelivered are delivered first by the next
    call, without waiting. ``poll``/``consume``/``read_batch`` from several
    threads take turns (:class:`OneCaller`): every record reaches one of them, once.
    """

    _pending: Batch | None = None

    def __init__(self) -> None:
        super().__init__()
        self._calls = OneCaller(self._what)

    def _fill(self, timeout_ms: int) -> bool:
        """Drain into ``_pending`` unless records are already pending; False on timeout."""
        timeout_ms = _check.timeout_ms(timeout_ms)
        self._check_open()
        if self._pending is None:
            with self._lock:
                self._check_open()
                if timeout_ms != 0 and not self._wait(timeout_ms):
                    return False
                self._drain()
        return True

    @one_caller(int)
    def poll(self, timeout_ms: int = -1) -> int:
        """Wait up to ``timeout_ms`` (-1: forever) for records, deliver them, return how many.

        Another thread's poll/consume/read_batch on this reader is waited for
        (within the timeout). Returns 0 on timeout; raises ClosedError if closed (also when closed by
        another thread during the wait) and whatever a callback raised.
        """
        return self._deliver() if self._fill(timeout_ms) else 0

    def consume(self) -> int:
        """Deliver whatever is available now, without waiting; returns how many."""
        return self.poll(0)

    @one_caller(Batch.empty)
    def read_batch(self, timeout_ms: int = -1) -> Batch:
        """Wait up to ``timeout_ms`` (-1: forever) and return what one C drain produced.

        The fast path: no callback is called. The batch (empty on timeout) holds
        copies, valid for as long as it (or a view of it) is referenced.
        """
        if not self._fill(timeout_ms):
            return Batch.empty()
        batch, self._pending = self._pending, None
        return self._taken(batch.rest()) if batch is not None else Batch.empty()

    def _taken(self, batch: Batch) -> Batch:
        """Hook: what read_batch does to a batch before handing it out."""
        return batch

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

    @abc.abstractmethod
    def _drain(self) -> None:
        """Copy the available records into ``self._pending`` (lock held)."""

    @abc.abstractmethod
    def _deliver(self) -> int:
        """Call the callbacks for ``self._pending``; returns how many records were handled."""

