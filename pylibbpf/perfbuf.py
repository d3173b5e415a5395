"""BPF perf event arrays (``BPF_MAP_TYPE_PERF_EVENT_ARRAY``) read through libbpf's ``perf_buffer``.

:class:`PerfBuffer` is libbpf's per-CPU reader: samples are drained in C into a
batch and delivered to ``callback(cpu, data)`` in a Python loop (cached slices
for a batch of equal-size samples, ``_views``; a wakeup's one sample goes to
the callback without a batch); lost-sample
notices go to ``lost_callback(cpu, count)`` and are always counted in
``lost_samples``.

:class:`PerfReader` is the cilium/ebpf-style pull reader (``read()`` one
:class:`~pylibbpf.Record` at a time, ``pause()``/``resume()``). The ordered
merge of every CPU's ring is :class:`pylibbpf.OrderedReader` (``ordered.py``).
"""

from __future__ import annotations

import math
import mmap
import os
import threading
import warnings
from collections.abc import AsyncIterator, Callable
from itertools import islice
from typing import Any

from . import _check, _close, _into, _libbpf, _shim
from ._batch import Batch, Record, any_nonzero
from ._close import Callback, Waiter, current_pid
from ._ffi import ffi, lib
from ._reader import BatchReader, CDrain, RecordReader, no_callback
from ._rings import (
    MAX_PAGE_CNT,
    PerfRings,
    address,
    check_page_cnt,
    free_perf_buffer,
    perf_ring_fds,
    require_map_type,
    ring_cpus,
    ring_range,
)
from ._views import Chunks, chunk_slices
from .errors import ClosedError
from .maps import Map


class PerfBuffer(BatchReader):
    """Read every CPU's ring of a perf event array.

    ``callback(cpu: int, data: memoryview)`` runs once per sample; ``data`` is a
    read-only view of a copy (valid after the callback returns) and carries the
    sample's padding (the kernel pads raw samples to 8 bytes, so up to 7 extra
    bytes). ``lost_callback(cpu, count)`` runs for each lost-samples notice;
    without one, losses are still counted in ``lost_samples``.

    The callbacks' return values are ignored. A callback that raises stops the
    current ``poll``/``consume`` after that sample (which counts as delivered)
    and the exception reaches the caller; the samples after it are delivered
    by the next call. One thread polls at a time; ``close()`` from any
    thread wakes a blocked poll, which raises ClosedError.
    """

    _what = "PerfBuffer"

    def __init__(self, map: Map, callback: Callback | None = None, lost_callback: Callback | None = None,
                 page_cnt: int = 8) -> None:
        super().__init__()
        require_map_type(map, lib.BPF_MAP_TYPE_PERF_EVENT_ARRAY, "PerfBuffer")
        _check.optional_callable(callback, "callback")
        _check.optional_callable(lost_callback, "lost_callback")
        page_cnt = check_page_cnt(page_cnt)
        self._callback: Callback = no_callback if callback is None else callback
        self._lost_callback = lost_callback
        self.lost_samples = 0
        self._map = map
        self._batch = _shim.plb_batch_new(256, 64 * 1024)
        self._pending: Batch | None = None
        self._cpus = ring_cpus(map, "PerfBuffer")  # ring slot i is CPU _cpus[i] (libbpf's order)
        # libbpf keeps the map fd and deletes its CPUs' entries through it when freed:
        # a dup, so that closing the BPF object first cannot make that hit another map
        # that reused the fd number (as PerfRings does).
        map_fd = _libbpf.dup(map.fd, f"PerfBuffer: map {map.name!r}")
        try:
            pb = _libbpf.perf_buffer__new(map_fd, page_cnt, self._batch, f"perf_buffer__new({map.name})")
        except BaseException:
            os.close(map_fd)
            raise
        owner = current_pid()
        self._drained = ffi.new("int *")
        # The wait watches every ring's perf event fd (perf_ring_fds). A perf event fd reports each
        # wake-up to one poll only (the kernel's perf_poll exchanges the ring's poll state with 0),
        # and a ring written while a drain runs may have its wake-up pending with nothing left to
        # read: a wake-up says "a ring was written", not which rings hold data. So the drain reads
        # every ring after any wake-up (plb_pb_wait_drain): a sample whose wake-up another poll took
        # is read by the next drain, whichever ring's wake-up (or a call without a wait) starts it.
        self._drain_c = _shim.plb_pb_wait_drain
        self._call_c = _shim.plb_pb_wait_call
        self._drain_what = "perf_buffer__consume"
        try:
            self._waiter = Waiter(perf_ring_fds(pb, _libbpf.perf_buffer__buffer_cnt(pb)), "PerfBuffer")
        except BaseException:
            free_perf_buffer(pb, map_fd, owner)
            raise
        # A forked child does not inherit these mappings (VM_DONTCOPY): views from
        # buffer() would point at a hole there; the child fills it with zeros.
        _close.add_fork_hole(address(pb), [ring_range(pb, i) for i in range(_libbpf.perf_buffer__buffer_cnt(pb))])
        # The perf_buffer is freed when the last reference goes: close() drops ours,
        # and views from buffer() hold theirs, so their memory stays mapped.
        self._pb = _close.gc(pb, lambda p: free_perf_buffer(p, map_fd, owner))
        self._drain_args = (self._pb, self._batch, self._drained)

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
        ``poll``/``consume`` on this PerfBuffer. In a process forked after the
        view was taken, the view reads zeros (the kernel does not copy perf
        mappings into a child).
        """
        i = _check.integer(i, "i")
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
        i = _check.integer(i, "i", lo=0, hi=_check.INT32_MAX)
        self._check_open()
        return _libbpf.perf_buffer__buffer_fd(self._pb, i, f"perf_buffer__buffer_fd({i})")

    def epoll_fd(self) -> int:
        """libbpf's epoll fd over all rings (readable after a ring's wake-up): for selectors/asyncio.

        ``poll``/``read_batch``/``read_into`` do not wait on it: they wait on
        the rings' perf event fds in a set of their own. A perf event fd reports
        each wake-up to one poll only, so a thread blocked in ``poll(-1)`` may
        miss a sample whose wake-up a selector watching this fd took (the
        sample is read by the next drain). Wait on one or the other for a given
        PerfBuffer, not both at once; after this fd is readable, drain with
        ``consume()`` or ``read_batch(0)``, which read every ring without waiting.
        """
        self._check_open()
        return _libbpf.perf_buffer__epoll_fd(self._pb)

    def _taken(self, batch: Batch) -> Batch:
        """read_batch: ``batch.tags[i]`` is the CPU of sample ``i``; lost-sample notices are
        taken out of the batch, counted in ``lost_samples`` and passed to ``lost_callback``.

        A ``lost_callback`` that raises stops there and the exception propagates:
        the notices up to that one are handled (counted once), and the rest of the
        batch (every sample, the later notices) stays pending for the next call.
        """
        notices = [i for i, n in enumerate(batch.lost) if n] if any_nonzero(batch.lost) else []
        for k, i in enumerate(notices):
            cpu, count = batch.tags[i], batch.lost[i]
            self.lost_samples += count
            if self._lost_callback is not None:
                try:
                    self._lost_callback(cpu, count)
                except BaseException:
                    handled = set(notices[:k + 1])
                    batch.keep([j for j in range(len(batch.starts)) if j not in handled])
                    if len(batch):
                        self._pending = batch
                    raise
        if notices:
            batch.keep([j for j, n in enumerate(batch.lost) if not n])
        return batch

    def _require_callback(self, method: str) -> None:
        if self._callback is no_callback:
            raise TypeError(f"PerfBuffer.{method}() calls a callback per sample, and none was given: pass one "
                            "to PerfBuffer(map, callback), or read with read_batch(), read_into() or events()")

    async def events(self) -> AsyncIterator[tuple[int, memoryview]]:
        """``async for cpu, data in pb.events()``: every sample; losses counted as in read_batch.

        Ends when the buffer is closed; cancelling the task leaves nothing running.
        Leaving the loop (``break``, cancelling the task) keeps the samples
        drained but not yet yielded for the next ``events()``/``poll()``/``read_batch()``.
        """
        async for batch, i in self._records():
            yield batch.tags[i], batch[i]

    def _call_one(self, cpu: int, data: memoryview) -> None:
        """A wakeup's lone sample, from inside the C call that waited (:meth:`BatchReader._wait_call`)."""
        self._callback(cpu, data)

    def _deliver_uniform(self, batch: Batch, first: int, n: int, stride: int) -> None:
        """Samples ``first..n-1`` of one size at one stride: cached slices (see RingBuffer._deliver_uniform)."""
        tags, callback = batch.tags, self._callback
        chunks = Chunks(first)
        try:
            for pos, chunk, it in chunks.over(batch.view, batch.starts, chunk_slices(stride, batch.lens[first]), n):
                for s, cpu in zip(it, islice(tags, pos, None)):
                    callback(cpu, chunk[s])
        finally:
            batch.next = chunks.taken()

    def _deliver_each(self, batch: Batch, first: int) -> None:
        """Any records, lost-sample notices included: a slice made per record."""
        view = batch.view
        callback, lost_callback = self._callback, self._lost_callback
        i = first
        try:
            for start, length, cpu, lost in zip(islice(batch.starts, i, None), islice(batch.lens, i, None),
                                                islice(batch.tags, i, None), islice(batch.lost, i, None)):
                i += 1
                if lost:
                    self.lost_samples += lost
                    if lost_callback is not None:
                        lost_callback(cpu, lost)
                else:
                    callback(cpu, view[start:start + length])
        finally:
            batch.next = i

    _perf_rows = True

    def _lost_notice(self, cpu: int, count: int) -> None:
        """read_into: a lost-samples notice is counted in ``lost_samples`` (no callback is called)."""
        self.lost_samples += count

    def _into_rings(self) -> tuple[Callable[..., int], Any, int]:
        """read_into's C call and rings: every CPU's ring, in slot order."""
        return _shim.plb_pb_wait_into, self._pb, len(self._cpus)

    def _into_tag(self, i: int) -> int:
        """Ring slot ``i``'s CPU."""
        return self._cpus[i]

    def _release(self) -> None:
        self._pb = None
        self._drain_args = ()  # it holds the perf_buffer too
        self._pending = None


# --- PerfReader, OrderedReader -----------------------------------------------------------------


class PerfReader(RecordReader, CDrain):
    """Read a perf event array one record at a time, cilium/ebpf style.

    ``per_cpu_buffer`` is the size in bytes of each CPU's ring, rounded up to
    a power-of-two number of pages (``buffer_size`` tells the result). By
    default every sample wakes a blocked ``read``; ``wakeup_events=n`` wakes
    it every ``n`` samples of a ring instead, and ``watermark=bytes`` once a
    ring holds that many bytes (below ``buffer_size``; the two are exclusive).
    Either way, a ``read`` whose timeout expires first takes whatever the
    rings hold before raising TimeoutError.

    Records come ring by ring (one CPU's records in the order that CPU wrote
    them; no order across CPUs -- see :class:`OrderedReader`). A full ring
    shows up as a record with ``lost_samples > 0`` and no data. Records are
    copies: nothing refers to the kernel's ring after ``read`` returns.

    One thread reads at a time. ``close()`` from any thread wakes a blocked
    ``read``, which raises ClosedError; ``pause()``, ``resume()`` and
    ``close()`` may be called from any thread.
    """

    _what = "PerfReader"
    _drain_what = "perf_buffer__consume"
    _tagged = True  # a record's CPU

    def __init__(self, map: Map, per_cpu_buffer: int = 4096, watermark: int = 0,
                 wakeup_events: int | None = None) -> None:
        super().__init__()
        require_map_type(map, lib.BPF_MAP_TYPE_PERF_EVENT_ARRAY, "PerfReader")
        per_cpu_buffer = _check.integer(per_cpu_buffer, "per_cpu_buffer", lo=1, hi=MAX_PAGE_CNT * mmap.PAGESIZE)
        watermark = _check.integer(watermark, "watermark")
        pages = 1 << max(0, math.ceil(per_cpu_buffer / mmap.PAGESIZE) - 1).bit_length()
        self._buffer_size = pages * mmap.PAGESIZE
        if not 0 <= watermark < self._buffer_size:
            raise ValueError(f"watermark must be >= 0 and below the ring size {self._buffer_size}, got {watermark}")
        if wakeup_events is not None:
            wakeup_events = _check.integer(wakeup_events, "wakeup_events", lo=1, hi=_check.UINT32_MAX)
            if watermark:
                raise ValueError("watermark and wakeup_events cannot both be set")
        attr = _shim.plb_perf_attr_new(lib.PLB_PERF_SAMPLE_RAW, wakeup_events or 1, watermark, -1)
        self._batch = _shim.plb_batch_new(256, 64 * 1024)
        self._pending: Batch | None = None
        self._odd: list[_into.OddRecord] = []
        self._paused = False
        self._pause_lock = threading.Lock()
        self._drained = ffi.new("int *")
        self._rings = PerfRings(map, "PerfReader", pages, attr, _shim.PERF_EVENT_COLLECT, self._batch)
        # What _wait_drain calls: plb_pb_wait_drain, as PerfBuffer does (which says why every ring).
        self._drain_c = _shim.plb_pb_wait_drain
        self._drain_args: tuple[Any, ...] = (self._rings.pb, self._batch, self._drained)
        try:
            # The rings' own fds, not libbpf's epoll fd (a nested set costs a wake-up hop; see PerfBuffer).
            self._waiter = Waiter(self._rings.fds, "PerfReader")
        except BaseException:
            self._rings.close()
            raise

    @property
    def buffer_size(self) -> int:
        """Bytes of each CPU's ring: ``per_cpu_buffer`` rounded up to a power-of-two number of pages."""
        return self._buffer_size

    @property
    def cpus(self) -> list[int]:
        """The CPUs that have a ring (the online CPUs below the map's max_entries), in ring order."""
        return list(self._rings.cpus)

    @property
    def paused(self) -> bool:
        return self._paused

    def read(self, timeout: float | None = None) -> Record:
        """The next record, as a new :class:`Record` holding a ``bytes`` copy of the sample.

        Blocks until a record is there, or for at most ``timeout`` seconds
        (None: no limit; 0: do not wait). Raises TimeoutError when the time
        runs out with every ring empty (the rings are drained once more after
        the wait, so data below the watermark is still returned), ClosedError
        when the reader is closed (also from another thread while blocked),
        BPFError when the rings cannot be read.
        """
        rec = Record()
        self._next_into(rec, timeout, reuse=False)
        return rec

    def read_record_into(self, record: Record, timeout: float | None = None) -> None:
        """As :meth:`read`, but fill ``record`` in place, reusing its sample buffer (cilium's ReadInto).

        Every field of ``record`` is overwritten. When ``record.raw_sample`` is
        a ``bytearray``, that same object receives the sample (resized in
        place, ``raw_sample[:] = sample``, which keeps its allocation when it
        is large enough); otherwise a new ``bytearray`` is assigned, to be
        reused by the next call. A bytearray with live memoryviews cannot be
        resized: BufferError is raised and the record stays unread.
        The bytes are valid until the next ``read_record_into`` with this record.
        """
        self._next_into(record, timeout, reuse=True)

    def read_into(self, out: Any, timeout: float | None = None, *, record_size: Any = None) -> int:
        """Fill the rows of ``out`` with the next records, as every reader's ``read_into`` does.

        ``out``: a numpy structured array or a writable buffer with
        ``record_size=`` (an int or an EventDef), as for
        :meth:`PerfBuffer.read_into`. Waits like :meth:`read` for the first
        record, for at most ``timeout`` seconds, then takes what the rings
        hold without waiting, up to ``len(out)`` rows; returns the rows
        written (0 on timeout). A sample fits a row when it is the row size
        plus at most 7 bytes of the kernel's padding; other samples are handed
        back by :meth:`take_odd`, lost-sample notices are skipped (the record
        form, :meth:`read`, shows them). Records pass through Python one at a
        time here: :meth:`PerfBuffer.read_into` is the fast path.

        Giving a :class:`Record` (the form before 0.2) fills it as
        :meth:`read_record_into` does, with a DeprecationWarning.
        """
        if isinstance(out, Record):
            warnings.warn("PerfReader.read_into(record) is deprecated: use read_record_into(record); "
                          "read_into fills the rows of an array", DeprecationWarning, stacklevel=2)
            self._next_into(out, timeout, reuse=True)
            return 1
        rows = _into.Rows(out, record_size)
        deadline = _check.deadline(timeout)
        written = 0
        while written < rows.count:
            left = _check.remaining_ms(deadline)
            try:
                rec = self.read(None if left < 0 else left / 1000) if written == 0 else self.read(0)
            except TimeoutError:
                break
            sample = rec.raw_sample
            if rec.lost_samples:
                continue
            if not rows.size <= len(sample) <= rows.size + 7:
                self._odd.append(_into.OddRecord(written, bytes(sample), rec.cpu))
                continue
            ffi.memmove(rows.ptr + written * rows.size, sample, rows.size)
            written += 1
        return written

    def take_odd(self) -> list[_into.OddRecord]:
        """The records :meth:`read_into` met whose size did not fit a row, oldest first (then forgotten)."""
        odd, self._odd = self._odd, []
        return odd

    def pause(self) -> None:
        """Stop the kernel from writing: BPF programs' ``bpf_perf_event_output`` fails with -ENOENT.

        Removes this reader's CPUs from the perf event array (their rings stay:
        what they hold can still be read). Idempotent; any thread.
        """
        self._check_open()  # in a forked child: before the lock
        with self._pause_lock:
            self._check_open()
            key = ffi.new("int *")
            for cpu in self._rings.cpus:
                key[0] = cpu
                _libbpf.bpf_map_delete_elem(self._rings.map_fd, key, f"PerfReader.pause: bpf_map_delete_elem({cpu})")
            self._paused = True

    def resume(self) -> None:
        """Put the rings back into the perf event array after :meth:`pause`. Idempotent; any thread."""
        self._check_open()
        with self._pause_lock:
            self._check_open()
            key, value = ffi.new("int *"), ffi.new("int *")
            for cpu, fd in zip(self._rings.cpus, self._rings.fds, strict=True):
                key[0], value[0] = cpu, fd
                _libbpf.bpf_map_update_elem(self._rings.map_fd, key, value, 0,
                                            f"PerfReader.resume: bpf_map_update_elem({cpu})")
            self._paused = False

    def _next_into(self, rec: Record, timeout: float | None, reuse: bool) -> None:
        deadline = _check.deadline(timeout)
        if reuse and not isinstance(rec, Record):
            raise TypeError(f"record must be a Record, got {type(rec).__name__}")
        self._check_open()
        with self._lock:
            self._check_open()
            wait_ms = 0  # first drain what the rings hold, without waiting
            while self._pending is None:
                if self._waiter is None:
                    raise ClosedError(self._what)
                if not self._waiter.wait(wait_ms, self._what, self._wait_drain):
                    # Timed out, so nothing was drained: drain once more without waiting,
                    # for records below the watermark (or whose wake-up went to another poll).
                    wait_ms = 0
                    continue
                if self._pending is not None:
                    break
                wait_ms = _check.remaining_ms(deadline)
                if wait_ms == 0:
                    raise TimeoutError(f"PerfReader: no record within {timeout} s")
            batch = self._pending
            i = batch.next
            start, length = batch.starts[i], batch.lens[i]
            if reuse:
                buf = rec.raw_sample
                if isinstance(buf, bytearray):
                    buf[:] = batch.view[start:start + length]
                else:
                    rec.raw_sample = bytearray(batch.view[start:start + length])
            else:
                rec.raw_sample = batch.blob[start:start + length]
            rec.cpu, rec.lost_samples, rec.timestamp, rec.late = batch.tags[i], batch.lost[i], 0, False
            batch.next = i + 1
            if batch.next >= len(batch.starts):
                self._pending = None

    def _release(self) -> None:
        with self._pause_lock:
            self._rings.close()
            self._drain_args = ()
            self._pending = None
