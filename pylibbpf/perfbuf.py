"""BPF perf event arrays (``BPF_MAP_TYPE_PERF_EVENT_ARRAY``) read through libbpf's ``perf_buffer``.

:class:`PerfBuffer` is libbpf's per-CPU reader: samples are drained in C into a
batch and delivered to ``callback(cpu, data)`` in a Python loop; lost-sample
notices go to ``lost_callback(cpu, count)`` and are always counted in
``lost_samples``.
"""

from __future__ import annotations

import mmap
from collections.abc import AsyncIterator
from typing import Any

from . import _libbpf
from ._ffi import ffi, lib
from ._reader import Batch, Callback, Closable, Waiter, check_callable
from .object import Map
from .ringbuf import require_map_type

CData = Any


class PerfBuffer(Closable):
    """Read every CPU's ring of a perf event array.

    ``callback(cpu: int, data: memoryview)`` runs once per sample; ``data`` is a
    read-only view of a copy (valid after the callback returns) and carries the
    sample's padding (the kernel pads raw samples to 8 bytes, so up to 7 extra
    bytes). ``lost_callback(cpu, count)`` runs for each lost-samples notice;
    without one, losses are still counted in ``lost_samples``.

    A callback that raises stops the current ``poll``/``consume`` after that
    sample and the exception reaches the caller; the samples after it are
    delivered by the next call. One thread polls at a time; ``close()`` from any
    thread wakes a blocked poll, which raises ClosedError.
    """

    _what = "PerfBuffer"

    def __init__(self, map: Map, callback: Callback, lost_callback: Callback | None = None,
                 page_cnt: int = 8) -> None:
        super().__init__()
        require_map_type(map, lib.BPF_MAP_TYPE_PERF_EVENT_ARRAY, "PerfBuffer")
        check_callable(callback, "callback")
        if lost_callback is not None:
            check_callable(lost_callback, "lost_callback")
        if page_cnt <= 0 or page_cnt & (page_cnt - 1):
            raise ValueError(f"page_cnt must be a power of two, got {page_cnt}")
        self._callback = callback
        self._lost_callback = lost_callback
        self.lost_samples = 0
        self._map = map
        self._batch = _libbpf.plb_batch_new(256, 64 * 1024)
        self._pending: Batch | None = None
        pb = _libbpf.perf_buffer__new(map.fd, page_cnt, self._batch, f"perf_buffer__new({map.name})")
        try:
            self._waiter = Waiter([_libbpf.perf_buffer__epoll_fd(pb)], "PerfBuffer")
        except BaseException:
            _libbpf.perf_buffer__free(pb)
            raise
        # The perf_buffer is freed when the last reference goes: close() drops ours,
        # and views from buffer() hold theirs, so their memory stays mapped.
        self._pb = ffi.gc(pb, lib.perf_buffer__free)

    def poll(self, timeout_ms: int = -1) -> int:
        """Wait up to ``timeout_ms`` (-1: forever), deliver what arrived, return the number of records.

        Lost-sample notices count as records. Returns 0 on timeout.
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
        """Deliver whatever every CPU's ring holds now, without waiting; returns how many."""
        self._check_open()
        if self._pending is None:
            with self._lock:
                self._check_open()
                self._drain()
        return self._deliver()

    def buffer_cnt(self) -> int:
        """The number of per-CPU rings (one per online CPU)."""
        self._check_open()
        return _libbpf.perf_buffer__buffer_cnt(self._pb)

    def buffer(self, i: int) -> memoryview:
        """The raw mmapped region of ring ``i`` (``perf_buffer__buffer``): control page + data.

        The first page is the kernel's ``struct perf_event_mmap_page`` (data_head,
        data_tail, data_offset, data_size); the ring's data follows at data_offset.

        ``i`` is a slot over online CPUs, not a CPU number. The view is the live
        mapping: the kernel writes into it. It keeps the mapping alive even after
        ``close()``. Once a ring is read through this view, do not also call
        ``poll``/``consume`` on this PerfBuffer.
        """
        self._check_open()
        count = _libbpf.perf_buffer__buffer_cnt(self._pb)
        if not 0 <= i < count:
            raise IndexError(f"perf buffer slot {i} out of range (0..{count - 1})")
        base, size = _libbpf.perf_buffer__buffer(self._pb, i, f"perf_buffer__buffer({i})")
        anchor = self._pb
        ptr = ffi.gc(ffi.cast("char *", base), lambda _p, _keep=anchor: None)
        # libbpf reports the data size; the mapping is one control page more.
        return memoryview(ffi.buffer(ptr, size + mmap.PAGESIZE))

    def buffer_fd(self, i: int) -> int:
        """The perf event fd of ring ``i`` (``perf_buffer__buffer_fd``)."""
        self._check_open()
        return _libbpf.perf_buffer__buffer_fd(self._pb, i, f"perf_buffer__buffer_fd({i})")

    def epoll_fd(self) -> int:
        """libbpf's epoll fd over all rings (readable when one has data)."""
        self._check_open()
        return _libbpf.perf_buffer__epoll_fd(self._pb)

    def read_batch(self, timeout_ms: int = -1) -> Batch:
        """Wait up to ``timeout_ms`` (-1: forever) and return everything drained in one C call.

        The fast path: the sample callback is not called; ``batch.tags[i]`` is the
        CPU of sample ``i``. Lost-sample notices are taken out of the batch,
        counted in ``lost_samples`` and passed to ``lost_callback``. The batch
        (empty on timeout) holds copies, valid as long as it is referenced.
        Records left by an earlier callback stop come first.
        """
        self._check_open()
        if self._pending is None:
            with self._lock:
                self._check_open()
                if timeout_ms != 0 and not self._wait(timeout_ms):
                    return Batch.empty()
                self._drain()
        batch, self._pending = self._pending, None
        if batch is None:
            return Batch.empty()
        for cpu, count in batch.take_lost():
            self.lost_samples += count
            if self._lost_callback is not None:
                self._lost_callback(cpu, count)
        return batch

    async def events(self) -> AsyncIterator[tuple[int, memoryview]]:
        """``async for cpu, data in pb.events()``: every sample; losses counted as in read_batch.

        Ends when the buffer is closed; cancelling the task leaves nothing running.
        """
        async for batch in self._batches():
            view = batch.view
            for cpu, start, length in zip(batch.tags, batch.starts, batch.lens):
                yield cpu, view[start:start + length]

    def _drain(self) -> None:
        lib.plb_batch_reset(self._batch)
        ret = lib.perf_buffer__consume(self._pb)
        if self._batch.n:
            self._pending = Batch(self._batch, with_tags=True)
        if ret < 0:
            raise _libbpf.error(-ret, "perf_buffer__consume")
        if self._batch.err:
            raise _libbpf.error(-self._batch.err, "perf_buffer__consume: collecting samples")

    def _deliver(self) -> int:
        batch = self._pending
        if batch is None:
            return 0
        view, starts, lens, cpus, lost = batch.view, batch.starts, batch.lens, batch.tags, batch.lost
        callback, lost_callback = self._callback, self._lost_callback
        i, n = batch.next, len(starts)
        first = i
        try:
            while i < n:
                start = starts[i]
                i += 1
                if lost[i - 1]:
                    self.lost_samples += lost[i - 1]
                    if lost_callback is not None:
                        lost_callback(cpus[i - 1], lost[i - 1])
                else:
                    callback(cpus[i - 1], view[start:start + lens[i - 1]])
        finally:
            batch.next = i
            if i >= n:
                self._pending = None
        return i - first

    def _release(self) -> None:
        self._pb = None
        self._pending = None
