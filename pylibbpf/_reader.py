"""Machinery shared by the readers: the interruptible wait and batch delivery.

A reader drains records in C into a ``plb_batch`` under its operation lock,
copies the batch out in one piece (:class:`Batch`), and delivers it to Python
callbacks outside the lock. ``close()`` from any thread wakes a blocked wait
through the waiter's eventfd, then takes the lock, so libbpf objects are never
freed under a reader.
"""

from __future__ import annotations

import abc
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from . import _libbpf
from ._ffi import ffi, lib
from .errors import ClosedError

CData = Any


class Batch:
    """Records copied out of a ``plb_batch``: one bytes object plus per-record offsets.

    ``view(i)`` is a read-only memoryview of record ``i``; it keeps the batch's
    bytes alive, so it stays valid for as long as the caller holds it.
    """

    __slots__ = ("blob", "lens", "lost", "next", "starts", "tags", "view")

    def __init__(self, batch: CData, with_tags: bool) -> None:
        n = batch.n
        self.blob = bytes(ffi.buffer(batch.buf, batch.used)) if batch.used else b""
        self.view = memoryview(self.blob)
        self.starts: list[int] = ffi.unpack(batch.start, n)
        self.lens: list[int] = ffi.unpack(batch.len, n)
        self.tags: list[int] = ffi.unpack(batch.tag, n) if with_tags else []
        self.lost: list[int] = ffi.unpack(batch.lost, n) if with_tags else []
        self.next = 0  # index of the first record not delivered yet

    def __len__(self) -> int:
        return len(self.starts) - self.next


def remaining_ms(deadline: float | None) -> int:
    """Milliseconds left until ``deadline`` (monotonic seconds); -1 for no deadline."""
    if deadline is None:
        return -1
    return max(0, int((deadline - time.monotonic()) * 1000 + 0.999))


class Waiter:
    """An epoll set over some fds plus an eventfd that ``wake()`` signals from any thread."""

    def __init__(self, fds: list[int], what: str) -> None:
        self._w = ffi.new("struct plb_waiter *")
        self._w.epfd = self._w.evfd = -1
        _libbpf.plb_waiter_init(self._w, -1, what)
        self._finalizer = weakref.finalize(self, lib.plb_waiter_close, self._w)
        try:
            for fd in fds:
                _libbpf.plb_waiter_add(self._w, fd, what)
        except BaseException:
            self.close()
            raise

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
            ret = int(lib.plb_waiter_wait(self._w, remaining_ms(deadline)))
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
    """

    _what = "object"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._waiter: Waiter | None = None

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(self._what)

    def _wait(self, timeout_ms: int) -> bool:
        """Wait on the reader's fds (lock held): True when ready, False on timeout."""
        if self._waiter is None:
            raise ClosedError(self._what)
        return self._waiter.wait(timeout_ms, self._what)

    def close(self) -> None:
        """Release everything; wakes a reader blocked in another thread (it raises ClosedError).

        Idempotent; every later call on the object raises ClosedError.
        """
        if self._closed:
            return
        self._closed = True
        if self._waiter is not None:
            self._waiter.wake()
        with self._lock:
            self._release()
            if self._waiter is not None:
                self._waiter.close()

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


def check_callable(value: object, name: str) -> None:
    """TypeError naming the argument unless ``value`` is callable."""
    if not callable(value):
        raise TypeError(f"{name} must be callable, not {type(value).__name__}")


Callback = Callable[..., Any]
