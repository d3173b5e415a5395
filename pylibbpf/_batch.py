"""Batches and records: what the readers hand out.

A reader drains records in C into a ``plb_batch``, takes the batch's memory
over (or, for a small batch, copies it) as a :class:`Batch`; :class:`OrderedBatch`
is a batch of the ordered merge; :class:`Record` is one record of PerfReader or
OrderedReader. ``Batch.to_numpy``/``to_arrow`` convert a whole batch at once.
The protocol that fills and delivers them is in :mod:`pylibbpf._reader`.
"""

from __future__ import annotations

import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, overload

from . import _arrow, _shim
from ._ffi import ffi, lib
from .events import require_event_def

CData = Any


BatchT = TypeVar("BatchT", bound="Batch")


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

    def __init__(self) -> None:
        """Not called directly: a batch comes from a reader's ``read_batch()``, or :meth:`empty`/:meth:`one`."""
        raise TypeError("Batch objects come from a reader's read_batch(), or Batch.empty() / Batch.one(data)")

    def _take(self, batch: CData, with_tags: bool) -> None:
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


def drained_batch(batch: CData, with_tags: bool) -> Batch:
    """The records a C drain wrote into ``batch`` (a ``struct plb_batch *``), taken over or copied."""
    out = Batch.__new__(Batch)
    out._take(batch, with_tags)
    return out


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
