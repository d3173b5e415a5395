"""Batches and records: what the readers hand out, and the batch-reading protocol.

A reader drains records in C into a ``plb_batch`` under its operation lock,
takes the batch's memory over (or, for a small batch, copies it) as a
:class:`Batch`, and delivers it to Python
callbacks outside the lock (:class:`BatchReader`, the protocol RingBuffer and
PerfBuffer share). :class:`OrderedBatch` is a batch of the ordered merge;
:class:`Record` is one record of PerfReader or OrderedReader, the pull readers
(:class:`RecordReader`). ``Batch.to_numpy`` parses a whole batch at once.
"""

from __future__ import annotations

import abc
import array
import asyncio
import os
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, overload

from . import _arrow, _check, _into, _libbpf, _shim, _views
from ._close import Closable, OneCaller, Waiter, one_caller
from ._ffi import ffi, lib
from .errors import ClosedError
from .events import require_event_def

CData = Any


BatchT = TypeVar("BatchT", bound="Batch")

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


class Batch:
    """Records drained from the kernel in one C call, held in memory of their own.

    ``len(batch)`` records; ``batch[i]`` and iteration give read-only memoryviews
    of each record; ``batch.tags[i]`` is the record's ring index (ring buffers)
    or CPU (perf buffers). The views keep the batch's memory alive, so they stay
    valid for as long as they are held; the kernel ring was released when the
    batch was made. ``to_numpy(event_def)`` parses every record at once into a
    structured array (no Python loop; numpy required).

    ``blob`` is the records' memory (a buffer-protocol object): record ``i`` is
    ``blob[starts[i]:starts[i] + lens[i]]`` (``starts``: a ``range`` for
    records of one size back to back, else an ``array.array`` or a list; ``lens`` then a
    read-only memoryview of the one length repeated, else likewise). A batch of more than
    :data:`SMALL_BYTES` bytes owns the memory the C drain copied the records
    into (handed over, not copied again: ``blob`` is a writable cffi buffer
    over it, freed once nothing references it); a smaller one holds a
    ``bytes`` copy (a copy of a few KiB costs less than handing memory over,
    and this runs between a wakeup and the first callback).
    """

    __slots__ = ("blob", "lens", "lost", "next", "starts", "tags", "view")

    blob: Any
    starts: Sequence[int]
    lens: Sequence[int]
    tags: Sequence[int]
    lost: Sequence[int]

    def __init__(self, batch: CData, with_tags: bool) -> None:
        n = batch.n
        used = batch.used
        if used > SMALL_BYTES:
            # Take the memory the drain wrote (the batch allocates afresh at its next drain):
            # each record is copied once, kernel ring -> here.
            self.blob = ffi.buffer(_shim.plb_batch_take_buf(batch), used)
            self.view = memoryview(self.blob).toreadonly()
        else:
            self.blob = bytes(ffi.buffer(batch.buf, used)) if used else b""
            self.view = memoryview(self.blob)
        if batch.uniform:
            # Records of one size back to back, only the first one's offsets written (plb_batch.h,
            # "a uniform batch"): starts is a range, the rest repeats the first record's.
            size = batch.len[0]
            if n <= SMALL_BATCH:
                self.starts, self.lens = list(range(0, n * size, size)), [size] * n
                self.tags, self.lost = [batch.tag[0] if with_tags else 0] * n, [0] * n
            else:
                self.starts, self.lens = uniform_index(n, size)
                self.tags = [batch.tag[0]] * n if with_tags else zeros("I", n)
                self.lost = zeros("Q", n)
        elif n <= SMALL_BATCH:
            # A wakeup with a few records (the latency case): lists from ffi.unpack are made
            # faster than arrays, and this runs between the wakeup and the first callback.
            self.starts = ffi.unpack(batch.start, n)
            self.lens = ffi.unpack(batch.len, n)
            self.tags = ffi.unpack(batch.tag, n) if with_tags else [0] * n
            self.lost = ffi.unpack(batch.lost, n) if with_tags else [0] * n
        else:
            # One memcpy per array (array.array), not one Python int per record (ffi.unpack).
            self.starts = u32_array(batch.start, n)
            self.lens = u32_array(batch.len, n)
            # Without tags (one ring): shared zeros, nothing written; [0] * n costs ~4 ns a record
            # to make and again to free (a pointer per record).
            self.tags = u32_array(batch.tag, n).tolist() if with_tags else zeros("I", n)
            self.lost = u64_array(batch.lost, n) if with_tags else zeros("Q", n)
        self.next = 0  # index of the first record not delivered yet (callback paths)

    @classmethod
    def empty(cls: type[BatchT]) -> BatchT:
        """A batch with no records (of the class it is called on)."""
        batch = cls.__new__(cls)
        batch.blob, batch.view = b"", memoryview(b"")
        batch.starts, batch.lens, batch.tags, batch.lost = [], [], [], []
        batch.next = 0
        return batch

    @classmethod
    def one(cls: type[BatchT], data: bytes, tag: int = 0) -> BatchT:
        """A batch of the one record ``data`` (not a lost-sample notice) tagged ``tag`` (its CPU or ring)."""
        batch = cls.__new__(cls)
        batch.blob, batch.view = data, memoryview(data)
        batch.starts, batch.lens, batch.tags, batch.lost = [0], [len(data)], [tag], [0]
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
        view, starts = self.view, self.starts
        if type(starts) is range and starts:   # records of one length (uniform_index): no lengths read
            length = self.lens[0]
            for start in starts:
                yield view[start:start + length]
            return
        for start, length in zip(starts, self.lens):
            yield view[start:start + length]

    def to_numpy(self, event_def: Any) -> Any:
        """All records parsed by ``event_def`` into a numpy structured array, without a Python loop.

        Records of one size packed back to back (what the C drains produce)
        in a batch of more than :data:`SMALL_BYTES` bytes: the array is a
        writable view of the batch's own memory (``blob``), no copy -- the
        kernel ring was released when the batch was made, so the memory is
        the batch's alone. It stays valid for as long as the array is
        referenced (it keeps the memory alive after the batch and the reader
        are gone); writing into it changes what ``batch[i]`` shows. Otherwise
        (a smaller batch, records of several sizes or with gaps) the array is
        a copy. Either way it is writable and independent of the reader. Records
        shorter than the event raise ValueError (naming the event and both
        sizes); longer ones (perf padding) are cut: the view then has a row
        stride larger than the itemsize. Lost-sample notices must not be in
        the batch (PerfBuffer batches keep them in ``lost``).
        """
        import numpy as np

        require_event_def(event_def, f"{type(self).__name__}.to_numpy")
        self.rest()
        dtype = event_def.numpy_dtype()  # an EventDef makes it once and keeps it
        size = int(event_def.size)
        n = len(self.starts)
        if n == 0:
            return np.empty(0, dtype=dtype)
        blob = self.blob
        if n == 1 and type(blob) is bytes and len(blob) == size == self.lens[0] == dtype.itemsize:
            # One record alone in its bytes (a wakeup's batch of one, the latency case): the
            # general checks below cost as much again as making the array.
            return np.frombuffer(bytearray(blob), dtype, 1)
        if type(self.starts) is range:  # one size back to back, known when the batch was made
            shortest = longest = int(self.lens[0])
        elif isinstance(self.lens, list):  # a small batch: Python's min/max beat numpy's set-up
            shortest, longest = min(self.lens), max(self.lens)
        else:
            lens = _as_numpy(self.lens)
            shortest, longest = int(lens.min()), int(lens.max())
        if shortest < size:
            raise ValueError(f"{event_def.name}: a record of {shortest} bytes is shorter than "
                             f"the event's {size} bytes")
        first = int(self.starts[0])
        stride = (int(self.lens[0]) + 7) & ~7
        if shortest == longest and int(self.starts[-1]) - first == (n - 1) * stride and dtype.itemsize == size:
            # Equal records packed back to back: one strided view over the records, no
            # per-field copy, no index arrays. Handed-over memory is viewed as it is; a small
            # batch's bytes are read-only, so they are copied first (a few KiB: cheaper than
            # numpy's copy of the structured rows, and this runs between a wakeup and the
            # caller's first look).
            buf = bytearray(blob) if isinstance(blob, bytes) else blob
            if stride == size:  # rows back to back: frombuffer (positional: numpy parses keywords slowly)
                return np.frombuffer(buf, dtype, n, first)
            return np.ndarray((n,), dtype=dtype, buffer=buf, offset=first, strides=(stride,))
        starts = _as_numpy(self.starts)
        raw = np.frombuffer(blob, dtype=np.uint8)
        rows = raw[starts.astype(np.int64)[:, None] + np.arange(size)[None, :]]
        return rows.view(dtype).reshape(n)

    def to_arrow(self, event_def: Any) -> Any:
        """All records parsed by ``event_def`` into a ``pyarrow.RecordBatch``, one column per field.

        The records are read once, in C without the GIL, straight into fresh
        contiguous columns (no structured array in between): numeric fields
        are Arrow integer columns, ``char[n]`` fields ``utf8`` strings cut at
        the first NUL (invalid UTF-8 replaced by U+FFFD, as
        ``EventDef.parse`` does), other arrays ``fixed_size_list`` columns.
        Records shorter than the event raise ValueError as :meth:`to_numpy`
        does; longer ones (perf padding) are cut. The schema's metadata keeps
        the event's name (``pylibbpf.event``). An empty batch gives an empty
        RecordBatch with the full schema. The result is independent of the
        batch (its own memory, freed with its last column). Raises
        ImportError naming the ``arrow`` extra when pyarrow is not installed.
        """
        return self._arrow(event_def, "Batch.to_arrow", ())

    def _arrow(self, event_def: Any, what: str, extra: Sequence[tuple[str, Any]]) -> Any:
        """to_arrow of Batch and OrderedBatch: the records' columns, then ``extra`` (name, Arrow array)."""
        require_event_def(event_def, what)
        _arrow.pyarrow(what)
        self.rest()
        return _arrow.from_records(self.blob, self.starts, self.lens, len(self.starts), 0, event_def, extra)


#: Batches of at most this many records index their records with lists (cheaper to make).
SMALL_BATCH = 32
#: Batches of at most this many bytes copy their records into ``bytes``: cheaper than taking
#: over the drain's memory (a C call, a finalizer, a fresh buffer for the next drain) below
#: about this size; larger ones take it over (see docs/architecture.md, "one copy").
SMALL_BYTES = 4096


#: The shared zeros :func:`zeros` hands out views of, oldest first. A larger one is added when a
#: view needs more; the older ones stay (views may still use them), so :func:`any_nonzero` knows
#: every view of them is zeros without reading it.
_zero_buffers: list[bytes] = [bytes(8 << 16)]

_ITEM_SIZES = {"?": 1, "I": 4, "Q": 8}


@overload
def zeros(fmt: Literal["?"], n: int) -> memoryview[bool]: ...


@overload
def zeros(fmt: Literal["I", "Q"], n: int) -> memoryview[int]: ...


def zeros(fmt: Literal["?", "I", "Q"], n: int) -> memoryview[Any]:
    """``n`` zeros (False for ``"?"``) of the struct format ``fmt``: a read-only view of one
    zeroed buffer shared by every caller (no memory written per call; a fresh ``array.array`` of
    zeros cost a uniform batch ~0.8 ns a record in cache misses and faults, a list of False ~2 ns)."""
    size = n * _ITEM_SIZES[fmt]
    if len(_zero_buffers[-1]) < size:
        _zero_buffers.append(bytes(2 * size))
    return memoryview(_zero_buffers[-1]).cast(fmt)[:n]


def any_nonzero(values: Sequence[int]) -> bool:
    """``any(values)``, without reading a :func:`zeros` view and at memory speed for an
    ``array.array`` or a memoryview (``any`` boxes every element; ``bytes.count`` reads ~1 ns a
    byte, where comparing with fresh zeros is a ``memcmp``)."""
    if isinstance(values, memoryview):
        if any(values.obj is z for z in _zero_buffers):
            return False
        raw = values.tobytes()
    elif isinstance(values, array.array):
        raw = values.tobytes()
    else:
        return any(values)
    return raw != bytes(len(raw))


#: Shared read-only u32 arrays of one value repeated (uniform batches' ``lens``), by value; at most
#: :data:`_MAX_REPEATS` values are kept at a time (past it the cache starts over).
_repeats: dict[int, memoryview[int]] = {}
_MAX_REPEATS = 16


def repeated_u32(value: int, n: int) -> memoryview[int]:
    """``n`` copies of ``value`` as u32: a read-only view of a buffer shared by every caller, made
    once per value (a fresh ``array.array('I', [value]) * n`` per batch cost ~0.25 ns a record)."""
    view = _repeats.get(value)
    if view is None or len(view) < n:
        if len(_repeats) >= _MAX_REPEATS:
            _repeats.clear()
        grown = max(n, 4096, 2 * len(view) if view is not None else 0)
        view = _repeats[value] = memoryview(array.array("I", [value]) * grown).toreadonly()
    return view[:n]


def uniform_index(n: int, size: int) -> tuple[range, memoryview[int]]:
    """``starts`` and ``lens`` of ``n`` records of ``size`` bytes laid out as the C drains lay them:
    each at the 8-byte aligned end of the one before, from offset 0. ``starts`` is a ``range``, which
    tells ``to_numpy``, ``to_arrow`` and the callback loop the stride without a look at the lengths;
    ``lens`` is a shared read-only view (:func:`repeated_u32`)."""
    step = (size + 7) & ~7
    return range(0, n * step, step), repeated_u32(size, n)


def u32_array(ptr: CData, n: int) -> array.array[int]:
    out = array.array("I")
    out.frombytes(ffi.buffer(ptr, 4 * n))
    return out


def u64_array(ptr: CData, n: int) -> array.array[int]:
    out = array.array("Q")
    out.frombytes(ffi.buffer(ptr, 8 * n))
    return out


def _as_numpy(values: Sequence[int]) -> Any:
    import numpy as np

    if isinstance(values, array.array):
        return np.frombuffer(values, dtype=np.uint32 if values.itemsize == 4 else np.uint64)
    if type(values) is range:  # a uniform batch's starts (np.asarray would walk it element by element)
        return np.arange(values.start, values.stop, values.step, dtype=np.int64)
    return np.asarray(values, dtype=np.int64)


@dataclass(slots=True)
class Record:
    """One record of a :class:`PerfReader` or :class:`OrderedReader`: a sample or a lost-samples notice.

    ``cpu``: the CPU whose ring held it (an OrderedReader over ring buffers:
    the index of the ring buffer in the list it was given).
    ``raw_sample``: the sample's bytes, a copy that stays valid for as long as
    it is referenced. A perf sample is as the kernel stored it: padded with up
    to 7 bytes so that its size plus 4 is a multiple of 8. Empty for a
    lost-samples notice.
    ``lost_samples``: 0 for a sample; otherwise the kernel found the ring full
    and dropped this many samples (``PERF_RECORD_LOST``) -- ``raw_sample`` is empty.
    ``timestamp``: OrderedReader samples: the merge key in nanoseconds (the
    kernel's sample time, or the u64 read from the sample). 0 for PerfReader
    records and for lost-samples notices, which are outside the order.
    ``late``: OrderedReader: the timestamp is below one delivered earlier.

    ``Record()`` (all defaults) is the empty record to pass to ``read_into``.
    """

    cpu: int = 0
    raw_sample: bytes | bytearray = b""
    lost_samples: int = 0
    timestamp: int = 0
    late: bool = False


class OrderedBatch(Batch):
    """An :class:`~pylibbpf.Batch` from the ordered merge, in merged order.

    Beside ``len(batch)``, ``batch[i]``, iteration, ``tags`` (the CPU, or the
    ring buffer's index) and ``to_numpy()``: ``timestamps[i]`` is record
    ``i``'s merge key (ns; ``timestamps`` is a sequence of ints without a
    Python object per record: a memoryview of format ``'Q'`` over the batch's
    memory for a large batch, else an ``array.array('Q')``) and ``late[i]`` is
    True when it is below a timestamp delivered earlier (``late`` is a
    sequence of bools: a list, or for a large batch with none late a
    read-only memoryview of shared zeros; ``list(batch.late)`` for a list).
    ``lost_notices`` lists the lost-samples notices the merge met while
    producing this batch, as ``(cpu, count)`` pairs (they are
    not records of the batch; ``lost`` is all zeros). The records are in
    memory of the batch's own, valid for as long as the batch, a view or an
    array of it is referenced: the block the merge wrote them, their
    timestamps and ring indexes into, handed over (``blob`` a writable
    memoryview of it; ``timestamps`` and, without a CPU map, ``tags`` views of
    it too), or for a small batch ``bytes`` and array copies. ``tag_name`` says what ``tags`` are: ``"cpu"`` (a perf
    event array's rings) or ``"ring"`` (the index of one of several ring
    buffers); ``to_arrow()`` names that column after it.
    """

    __slots__ = ("late", "lost_notices", "tag_name", "timestamps")

    timestamps: Sequence[int]
    late: Sequence[bool]
    lost_notices: list[tuple[int, int]]
    tag_name: str

    @classmethod
    def empty(cls, tag_name: str = "cpu") -> OrderedBatch:
        batch = super().empty()
        batch.timestamps, batch.late, batch.lost_notices = array.array("Q"), [], []
        batch.tag_name = tag_name
        return batch

    @classmethod
    def from_merge(cls, out: CData, n: int, tag_of: list[int] | None, tag_name: str,
                   taken: tuple[CData, int] | None = None) -> OrderedBatch:
        """The first ``n`` entries of a ``plb_merge_out``: its records and a few arrays.

        ``taken``: ``(block, head)`` when the caller hands over the memory the
        merge wrote (``out.ts`` at the block's start, ``out.ring`` after
        ``8 * n`` or more entries, ``out.buf`` at ``head``): the batch keeps it,
        and its records, timestamps and ring indexes are views of it, never
        copied. Otherwise (a small batch, or a drain the rings cut short, whose
        block the merge keeps) they are copied: the records into one bytes
        object, the arrays into ``array.array``. No Python object
        per record unless a record is flagged; the flags are tested as bytes.
        """
        batch = cls.__new__(cls)
        used = int(out.used)
        if taken is not None:
            block, head = taken
            whole = memoryview(ffi.buffer(block, head + used))   # keeps block alive
            batch.blob = whole[head:]
            batch.view = batch.blob.toreadonly()
            ring_at = int(ffi.cast("uint8_t *", out.ring) - block)
            rings: Sequence[int] = whole[ring_at:ring_at + 4 * n].cast("I")
            ts: Sequence[int] = whole[:8 * n].cast("Q")
        else:
            batch.blob = bytes(ffi.buffer(out.buf, used)) if used else b""
            batch.view = memoryview(batch.blob)
            rings, ts = u32_array(out.ring, n), u64_array(out.ts, n)
        size = _shim.plb_merge_out_uniform(out, n) if n > SMALL_BATCH else -1
        if size >= 0:
            # Samples of one size back to back, none flagged (the usual large batch): starts is a
            # range, as for a uniform Batch; to_numpy and to_arrow then read the stride from it.
            batch.starts, batch.lens = uniform_index(n, size)
        else:
            batch.starts = u32_array(out.start, n)
            batch.lens = u32_array(out.len, n)
        if tag_of is not None:
            batch.tags = [tag_of[r] for r in rings]
        else:  # a large batch keeps the array (a list costs a pointer per record, made and freed)
            batch.tags = list(rings) if n <= SMALL_BATCH else rings
        flags = None if size >= 0 else u32_array(out.flags, n)
        if flags is not None and any_nonzero(flags):
            late_bit, lost_bit = lib.PLB_MERGE_F_LATE, lib.PLB_MERGE_F_LOST
            batch.late = [bool(f & late_bit) for f in flags]
            # A lost-samples entry carries its count where a sample has its timestamp.
            batch.lost = [t if f & lost_bit else 0 for f, t in zip(flags, ts)]
            batch.timestamps = array.array("Q", [0 if f & lost_bit else t for f, t in zip(flags, ts)])
        else:
            # A large batch shares zeros (nothing written per record; a list costs ~2 ns a record).
            batch.late = [False] * n if n <= SMALL_BATCH else zeros("?", n)
            batch.lost = zeros("Q", n)
            batch.timestamps = ts
        batch.lost_notices = []
        batch.tag_name = tag_name
        batch.next = 0
        return batch

    def rest(self) -> OrderedBatch:
        if self.next:
            k = self.next
            self.timestamps, self.late = self.timestamps[k:], self.late[k:]
        super().rest()
        return self

    def take_lost(self) -> list[tuple[int, int]]:
        if not any_nonzero(self.lost):
            return []
        self.rest()
        keep = [i for i, n in enumerate(self.lost) if not n]
        self.timestamps = array.array("Q", [self.timestamps[i] for i in keep])
        self.late = [self.late[i] for i in keep]
        return super().take_lost()

    def to_arrow(self, event_def: Any) -> Any:
        """As :meth:`Batch.to_arrow`, with the merge's columns after the event's fields.

        ``timestamp`` (uint64, ns: ``timestamps``), ``late`` (bool) and the
        tag column named by ``tag_name`` (uint32: the CPU, or the ring
        buffer's index). A column whose name an event field already has gets
        a trailing underscore (``timestamp_``), so no field is hidden.
        """
        pa = _arrow.pyarrow("OrderedBatch.to_arrow")
        import numpy as np

        self.rest()   # first: the columns below line up with the records left
        taken = set(require_event_def(event_def, "OrderedBatch.to_arrow").fields)

        def name(base: str) -> str:
            while base in taken:
                base += "_"
            return base

        ts = self.timestamps
        ts_np = np.frombuffer(ts, dtype=np.uint64) if isinstance(ts, array.array) else np.asarray(ts, np.uint64)
        late = self.late
        late_np = np.array(late, dtype=np.bool_) if any_nonzero(late) else np.zeros(len(late), dtype=np.bool_)
        extra = [(name("timestamp"), pa.array(ts_np, type=pa.uint64())),
                 (name("late"), pa.array(late_np, type=pa.bool_())),
                 (name(self.tag_name), pa.array(np.asarray(self.tags, dtype=np.uint32), type=pa.uint32()))]
        return self._arrow(event_def, "OrderedBatch.to_arrow", extra)


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
                self._pending = Batch(batch, with_tags=self._tagged)
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
        frame, object and cdata read counts here (see docs/benchmarks.md,
        "latency: where the time went"), so the usual case (one record, records,
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
                    self._pending = Batch(batch, with_tags=self._tagged)
            except BaseException:
                # As in _wait_drain: the records the call took reach _pending whatever happens next
                # (a record returned above is the caller's: nothing after the return raises here).
                if self._pending is None and batch.n:
                    self._pending = Batch(batch, with_tags=self._tagged)
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
        (docs/benchmarks.md, "Fifth round"). What that function raised (see
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
                    self._pending = Batch(batch, with_tags=self._tagged)
            except BaseException:
                # The same when an exception (a signal's) surfaces the moment the call returns.
                if self._pending is None and batch.n and not self._called:
                    self._pending = Batch(batch, with_tags=self._tagged)
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
