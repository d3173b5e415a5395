"""BPF ring buffers (``BPF_MAP_TYPE_RINGBUF``) read through libbpf's ``ring_buffer``.

:class:`RingBuffer` drains records in C (``ring_buffer__consume_n`` with a C
sample callback that copies into a batch) and calls the Python callback for
each record of the batch in a loop: one C->Python crossing per batch, not per
event.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from . import _libbpf
from ._ffi import ffi, lib
from ._reader import Batch, Callback, Closable, Waiter, check_callable
from .errors import BPFError
from .object import Map

CData = Any

#: Records drained per C call at most (bounds the batch's memory together with the ring size).
DEFAULT_MAX_BATCH = 65536


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


class RingBuffer(Closable):
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
        check_callable(callback, "callback")
        if max_batch <= 0:
            raise ValueError(f"max_batch must be > 0, got {max_batch}")
        self._max_batch = max_batch
        self._batch = _libbpf.plb_batch_new(256, 64 * 1024)
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
        check_callable(callback, "callback")
        with self._lock:
            self._check_open()
            ctx = ffi.new("struct plb_rb_collect_ctx *", {"batch": self._batch, "ring": len(self._ctxs)})
            _libbpf.ring_buffer__add(self._rb, map.fd, ctx, f"ring_buffer__add({map.name})")
            self._ctxs.append(ctx)
            self._maps.append(map)
            self._callbacks.append(callback)

    def poll(self, timeout_ms: int = -1) -> int:
        """Wait up to ``timeout_ms`` (-1: forever) for records, deliver them, return how many.

        Returns 0 on timeout. Records left undelivered by an earlier stop are
        delivered first, without waiting.
        """
        self._check_open()
        if self._pending is None:
            with self._lock:
                self._check_open()
                if timeout_ms != 0 and not self._wait(timeout_ms):
                    return 0
                self._drain()
        return self._deliver()

    def consume(self) -> int:
        """Deliver whatever is available now, without waiting; returns how many."""
        self._check_open()
        if self._pending is None:
            with self._lock:
                self._check_open()
                self._drain()
        return self._deliver()

    def epoll_fd(self) -> int:
        """libbpf's epoll fd for these rings (readable when a ring has data): for selectors/asyncio."""
        self._check_open()
        return _libbpf.ring_buffer__epoll_fd(self._rb)

    def read_batch(self, timeout_ms: int = -1) -> Batch:
        """Wait up to ``timeout_ms`` (-1: forever) and return everything drained in one C call.

        The fast path: no callback is called; the batch (empty on timeout) holds
        copies, valid as long as it is referenced. Records left by an earlier
        callback stop come first.
        """
        self._check_open()
        if self._pending is None:
            with self._lock:
                self._check_open()
                if timeout_ms != 0 and not self._wait(timeout_ms):
                    return Batch.empty()
                self._drain()
        batch, self._pending = self._pending, None
        return batch.rest() if batch is not None else Batch.empty()

    async def events(self) -> AsyncIterator[memoryview]:
        """``async for data in rb.events()``: every record, as the callback would get it.

        Waits with ``loop.add_reader`` on the reader's epoll fd; the iteration
        ends when the buffer is closed; cancelling the task leaves nothing running.
        The callback given at construction is not called for these records.
        """
        async for batch in self._batches():
            for data in batch:
                yield data

    def _drain(self) -> None:
        """Copy up to max_batch records out of the kernel rings (lock held)."""
        lib.plb_batch_reset(self._batch)
        ret = lib.ring_buffer__consume_n(self._rb, self._max_batch)
        if self._batch.n:
            self._pending = Batch(self._batch, with_tags=len(self._callbacks) > 1)
        if ret < 0:
            raise _libbpf.error(-ret, "ring_buffer__consume_n")
        if self._batch.err:
            raise _libbpf.error(-self._batch.err, "ring_buffer__consume_n: collecting records")

    def _deliver(self) -> int:
        batch = self._pending
        if batch is None:
            return 0
        view, starts, lens = batch.view, batch.starts, batch.lens
        callbacks = self._callbacks
        single = callbacks[0] if len(callbacks) == 1 else None
        i, n = batch.next, len(starts)
        first = i
        try:
            while i < n:
                start = starts[i]
                cb = single or callbacks[batch.tags[i]]
                i += 1
                ret = cb(view[start:start + lens[i - 1]])
                if ret is not None and ret < 0:
                    break
        finally:
            batch.next = i
            if i >= n:
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
