"""Lifetime machinery every resource shares: interpreter exit, fork(), finalizers.

Interpreter exit. Python runs ``atexit`` callbacks (and ``weakref.finalize``
ones) while daemon threads still run, then clears those threads' frames and
the modules, freeing objects in no particular order. A native reader thread
or a daemon thread inside a C call (GIL released) must never find its memory
gone. So:

- :func:`shutdown_at_exit` (an ``atexit`` callback registered at import)
  first marks the process as exiting, then stops every live consumer
  (native threads stopped and joined, worker threads woken and joined, for a
  bounded time), then closes every live reader (woken, then its lock taken,
  so no thread is inside it any more);
- from that moment on, nothing frees C memory or unmaps a ring: the
  finalizers made here (:func:`finalizer`, :func:`gc`) do nothing once the
  process is exiting, and never run as ``atexit`` callbacks themselves, so
  their order relative to the shutdown does not matter. The kernel reclaims
  everything when the process ends.

fork(). Only the thread that called fork() exists in the child, and a lock
another thread held at that moment stays held there forever. Objects record
the process that made them (:func:`current_pid`); in a child their methods
raise ClosedError before touching a lock or the memory they share with the
parent. Objects with locks a child may still take register with
:func:`after_fork` to get fresh ones. Perf ring mappings are not copied into
a child at all (the kernel marks them VM_DONTCOPY): the ranges registered
with :func:`add_fork_hole` are filled with zeroed memory in the child, so that
a memoryview of one (``PerfBuffer.buffer(i)``) reads zeros instead of crashing.

The classes every reader is built on live here too: :class:`Waiter` (the
interruptible wait: an epoll set plus an eventfd ``close()`` signals),
:class:`Closable` (the close protocol: idempotent ``close()``, context manager,
ClosedError after, the fork guard) and :class:`OneCaller` (one call at a time
on a reader). The argument checks and the timeout conversions they use are in
:mod:`pylibbpf._check`. This module imports only the compiled module, the
checks, the errors and the checked shim layer.
"""

from __future__ import annotations

import abc
import atexit
import errno
import functools
import logging
import os
import threading
import time
import weakref
from _thread import get_ident
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from . import _check, _libbpf, _shim
from ._ffi import ffi
from .errors import ClosedError

CData = Any

logger = logging.getLogger("pylibbpf")

#: How long the exit shutdown waits for one object (a consumer's callback to return,
#: a reader's lock to be free) before leaving it as it is: exit must not hang.
EXIT_WAIT_S = 5.0


class AtExit(Protocol):
    """What :func:`track` accepts: an object the exit shutdown stops or closes."""

    _exit_order: int  # 0: consumers (they read through readers), 1: readers

    def _at_exit(self, timeout: float) -> None: ...


_exiting = False
_pid = os.getpid()
_live: weakref.WeakSet[Any] = weakref.WeakSet()
_fork_hooks: weakref.WeakSet[Any] = weakref.WeakSet()
_holes: dict[int, list[tuple[int, int]]] = {}
_holes_lock = threading.Lock()


def current_pid() -> int:
    """This process's pid (cached; updated in a forked child)."""
    return _pid


def exiting() -> bool:
    """True once the interpreter's exit shutdown has begun: nothing is freed any more."""
    return _exiting


def track(obj: AtExit) -> None:
    """Stop or close ``obj`` at interpreter exit if it is still alive then (weakly held)."""
    _live.add(obj)


def after_fork(obj: Any) -> None:
    """Call ``obj._after_fork_in_child()`` in a forked child (weakly held): fresh locks."""
    _fork_hooks.add(obj)


def _unless_exiting(func: Callable[..., Any], *args: Any) -> None:
    if not _exiting:
        func(*args)


def finalizer(owner: object, func: Callable[..., Any], *args: Any) -> weakref.finalize[Any, Any]:
    """``weakref.finalize(owner, func, *args)`` that does nothing once exit has begun.

    Calling it runs ``func`` once (``close()`` does, then it is disarmed). It
    is not an ``atexit`` callback: at exit the shutdown stops the threads,
    and the memory ``func`` would free stays until the process ends.
    """
    fin = weakref.finalize(owner, _unless_exiting, func, *args)
    fin.atexit = False
    return fin


def gc(ptr: CData, free: Callable[[CData], Any]) -> CData:
    """``ffi.gc(ptr, free)`` that does nothing once exit has begun (see :func:`finalizer`)."""
    return ffi.gc(ptr, lambda p: _unless_exiting(free, p))


def add_fork_hole(key: int, ranges: list[tuple[int, int]]) -> None:
    """Register mapped ranges (address, length) a child will not inherit (perf rings)."""
    with _holes_lock:
        _holes[key] = ranges


def remove_fork_hole(key: int) -> None:
    """Forget the ranges of ``key``: call before unmapping them."""
    with _holes_lock:
        _holes.pop(key, None)


def shutdown_at_exit() -> None:
    """Stop every live consumer, then close every live reader; from now on free nothing.

    Runs as an ``atexit`` callback: after non-daemon threads were joined,
    before the interpreter clears the daemon threads' frames and the modules.
    Each object gets at most :data:`EXIT_WAIT_S` seconds; errors are logged.
    """
    global _exiting
    _exiting = True
    for obj in sorted(_live, key=lambda o: o._exit_order):
        try:
            obj._at_exit(EXIT_WAIT_S)
        except Exception:
            logger.debug("shutdown at exit of %r failed", obj, exc_info=True)


def _after_fork_in_child() -> None:
    global _pid
    _pid = os.getpid()
    # The fork hooks of other libraries may have run first; ours only touch our objects.
    with _holes_lock:
        ranges = [r for rs in _holes.values() for r in rs]
        _holes.clear()
    for addr, length in ranges:
        _shim.plb_fill_hole(addr, length)
    for obj in list(_fork_hooks):
        obj._after_fork_in_child()


def _before_fork() -> None:
    # _holes_lock must not be held by another thread at the fork.
    _holes_lock.acquire()


def _after_fork_in_parent() -> None:
    _holes_lock.release()


def _after_fork_child_unlock() -> None:
    _holes_lock.release()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                    after_in_child=_after_fork_child_unlock)
os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(shutdown_at_exit)


class Waiter:
    """An epoll set over some fds plus an eventfd that ``wake()`` signals from any thread."""

    def __init__(self, fds: list[int], what: str) -> None:
        self._w = ffi.new("struct plb_waiter *")
        self._w.epfd = self._w.evfd = -1
        _shim.plb_waiter_init(self._w, -1, what)
        self._finalizer = finalizer(self, _shim.plb_waiter_close, self._w)
        try:
            for fd in fds:
                _shim.plb_waiter_add(self._w, fd, what)
        except BaseException:
            self.close()
            raise

    def add(self, fd: int, what: str) -> None:
        """Also wake when ``fd`` is readable."""
        _shim.plb_waiter_add(self._w, fd, what)

    def remove(self, fd: int, what: str) -> None:
        """Stop watching ``fd`` (undoes :meth:`add`)."""
        _shim.plb_waiter_remove(self._w, fd, what)

    def add_writable(self, fd: int, what: str) -> None:
        """Also wake when ``fd`` gains room to write (edge-triggered EPOLLOUT: each new room wakes once)."""
        _shim.plb_waiter_add_writable(self._w, fd, what)

    @property
    def fd(self) -> int:
        """The epoll fd: readable when a watched fd is, or once woken (for asyncio)."""
        return int(self._w.epfd)

    @property
    def ptr(self) -> CData:
        """The ``struct plb_waiter *``, for a C call that waits on it itself (see :meth:`after`).

        Valid until :meth:`close`; the owner calls only under its operation lock.
        """
        return self._w

    def wait(self, timeout_ms: int, what: str, call: Callable[[CData, int], int] | None = None) -> bool:
        """Block (GIL released) until ready (True) or timeout (False); ClosedError once woken.

        A signal interrupts the wait and lets Python run its handler (Ctrl-C
        raises KeyboardInterrupt here); otherwise the wait resumes for the time left.
        ``call(waiter, ms)``, when given, does the wait instead of
        ``plb_waiter_wait`` (returning what it returns): a C call that waits
        and then drains, so that nothing runs in Python between the two.
        """
        # The start is needed only after a signal, but must be taken before the wait.
        start = time.monotonic() if timeout_ms > 0 else 0.0
        ret = _shim.plb_waiter_wait(self._w, timeout_ms) if call is None else call(self._w, timeout_ms)
        if ret >= 0:
            return ret > 0
        return self.after(ret, timeout_ms, start, what, call)

    def after(self, ret: int, timeout_ms: int, start: float, what: str,
              call: Callable[[CData, int], int] | None = None) -> bool:
        """The rest of a wait whose first C call (begun at ``start``, monotonic) returned ``ret`` < 0.

        ``-EINTR`` (a signal): Python has run its handler on the way back here
        (Ctrl-C raised KeyboardInterrupt before this is reached); the wait
        resumes for what is left of ``timeout_ms``, through ``call`` as
        :meth:`wait` does. ``-ECANCELED``: ClosedError. Anything else:
        BPFError. Returns as :meth:`wait`. Kept apart from the first wait so
        that a wakeup's way back to the records runs no more Python than it needs.
        """
        deadline = None
        while True:
            if ret == -errno.EINTR:
                if deadline is None and timeout_ms >= 0:
                    deadline = start + timeout_ms / 1000
                left = _check.remaining_ms(deadline)
                ret = _shim.plb_waiter_wait(self._w, left) if call is None else call(self._w, left)
                if ret >= 0:
                    return ret > 0
                continue
            if ret == -errno.ECANCELED:
                raise ClosedError(what)
            raise _libbpf.error(-ret, f"{what}: epoll_wait")

    def wake(self) -> None:
        _shim.plb_waiter_wake(self._w)

    def close(self) -> None:
        self._finalizer()


class Closable(abc.ABC):
    """The close protocol: an idempotent ``close()``, a context manager, ClosedError after.

    Subclasses implement ``_release()`` (free C resources; called once, under
    the operation lock, after any blocked reader has been woken and left).

    Every reader is closed at interpreter exit if still open (see
    :func:`shutdown_at_exit`), so a daemon thread still reading then gets
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
        track(self)

    def _check_owner(self) -> None:
        """ClosedError in a forked child: the object belongs to the parent."""
        if self._owner_pid != current_pid():
            raise ClosedError(f"{self._what} inherited through fork()")

    def _check_open(self) -> None:
        # On every call's way in and out of the lock: the owner check inlined (no extra call).
        if self._closed:
            raise ClosedError(self._what)
        if self._owner_pid != _pid:
            raise ClosedError(f"{self._what} inherited through fork()")

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

    def take(self) -> bool:
        """Take the turn if it is free now (the usual case: no clock read, no timed acquire)."""
        me = get_ident()
        if self._owner == me:
            raise RuntimeError(f"{self._what}: called from its own callback; one call at a time")
        if self._lock.acquire(False):
            self._owner = me
            return True
        return False

    def enter(self, timeout_ms: int) -> bool:
        """Take the turn: False when ``timeout_ms`` (-1: no limit, 0: do not wait) passed first."""
        me = get_ident()
        if self._owner == me:
            raise RuntimeError(f"{self._what}: called from its own callback; one call at a time")
        # Uncontended (the usual case) the non-blocking try is all it costs.
        taken = self._lock.acquire(False)
        if not taken and timeout_ms != 0:
            taken = self._lock.acquire(timeout=-1 if timeout_ms < 0 else timeout_ms / 1000)
        if taken:
            self._owner = me
        return taken

    def leave(self) -> None:
        self._owner = None
        self._lock.release()


ResultT = TypeVar("ResultT")


class GuardedReader(Protocol):
    """What :func:`one_caller` needs of a reader: its open check and its :class:`OneCaller`."""

    _calls: OneCaller

    def _check_open(self) -> None: ...


ReaderT = TypeVar("ReaderT", bound=GuardedReader)


def one_caller(empty: Callable[[], Any]) -> Callable[[Callable[[ReaderT, int], ResultT]],
                                                     Callable[[ReaderT, int], ResultT]]:
    """Decorate ``method(self, timeout_ms)``: it runs under ``self._calls`` (a :class:`OneCaller`).

    The time spent waiting for the turn counts against ``timeout_ms``; when it
    runs out first, the call returns ``empty()``.
    """
    def wrap(method: Callable[[ReaderT, int], ResultT]) -> Callable[[ReaderT, int], ResultT]:
        @functools.wraps(method)  # the wrapped method's name, docstring and signature
        def call(self: ReaderT, timeout_ms: int = -1) -> ResultT:
            # Every poll runs this; the full check (and its messages) only for an unusual value.
            if type(timeout_ms) is not int or not -1 <= timeout_ms <= _check.MAX_TIMEOUT_MS:
                timeout_ms = _check.timeout_ms(timeout_ms)
            self._check_open()  # in a forked child: ClosedError before the lock
            calls = self._calls
            if not calls.take():
                start = time.monotonic()
                if not calls.enter(timeout_ms):
                    return empty()  # type: ignore[no-any-return]
                if timeout_ms > 0:
                    timeout_ms = max(0, timeout_ms - int((time.monotonic() - start) * 1000))
            try:
                return method(self, timeout_ms)
            finally:
                # calls.leave() inlined: this runs between a wakeup and the caller's first record.
                calls._owner = None
                calls._lock.release()
        return call
    return wrap
