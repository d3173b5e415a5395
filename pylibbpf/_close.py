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

This module imports nothing of the package but the compiled module.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from ._ffi import ffi, lib

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
        lib.plb_fill_hole(ffi.cast("void *", addr), length)
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

