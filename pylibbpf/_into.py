"""Records straight into the caller's array: what every reader's ``read_into(out)`` shares.

The C side (``csrc/plb_into.c``) walks a ring and copies each record whose
size matches into the next row of ``out``: one copy per record, no batch, no
Python object per record, the GIL released (CFFI releases it for every C
call). This module checks the caller's array (:class:`Rows`), keeps a
reader's ``struct plb_into`` and the records of another size it handed back
(:class:`Into`, :class:`OddRecord`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from . import _check, _libbpf, _shim
from ._ffi import ffi, lib

CData = Any


class OddRecord(NamedTuple):
    """A record whose size is not the row size, handed back by ``read_into`` (``take_odd()``).

    ``row``: the row of ``out`` it came before, in the ``read_into`` call that
    met it (records ``out[:row]`` of that call came before it, ``out[row:]``
    after). ``data``: the whole record, a copy (a perf sample with its padding,
    as ``read_batch`` gives it). ``ring``: the ring it came from (the ring
    buffer's index in ``RingBuffer.add`` order, the CPU of a perf ring, or an
    OrderedReader's ring as its records' ``cpu``). ``timestamp`` and ``flags``:
    OrderedReader only (the merge key and ``FLAG_*`` bits), else 0.
    """

    row: int
    data: bytes
    ring: int = 0
    timestamp: int = 0
    flags: int = 0


#: ``flags`` column bits of ``OrderedReader.read_into`` (the merge's own flags).
FLAG_LATE = 1    # below a timestamp delivered earlier
FLAG_LOST = 2    # a lost-samples notice: a zero-filled row, ``timestamps`` holds the count
FLAG_FORCED = 4  # let out early by the pressure valve (a ring was filling up)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _writable(value: object, name: str) -> memoryview:
    """``value``'s buffer: TypeError unless it has one, ValueError unless writable and C-contiguous."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a writable buffer (a numpy array, bytearray, ...), "
                        f"got {type(value).__name__} {_shown(value)}")
    try:
        view = memoryview(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be a writable buffer (a numpy array, bytearray, ...), "
                        f"got {_shown(value)} ({type(value).__name__})") from None
    if view.readonly:
        raise ValueError(f"{name} must be writable, got a read-only {type(value).__name__}")
    if not view.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous, got a strided {type(value).__name__} "
                         f"(shape {view.shape}, strides {view.strides})")
    if _holds_objects(value, view):
        raise TypeError(f"{name} must not hold Python objects: its items (format {view.format!r}) hold "
                        f"references, which record bytes would overwrite")
    return view


#: A buffer format's field names (``:name:``, PEP 3118), dropped before looking for the object code.
_FIELD_NAMES = re.compile(r":[^:]*:")


def _holds_objects(value: object, view: memoryview) -> bool:
    """Whether ``value``'s items hold Python object references (numpy's ``O``, in any field).

    Such a buffer exports its pointers as plain bytes: record bytes written there
    would be followed as references later (a crash when the array is printed or freed).
    """
    if getattr(getattr(value, "dtype", None), "hasobject", False):
        return True
    return "O" in _FIELD_NAMES.sub("", view.format)


def _plain_bytes(view: memoryview) -> bool:
    return view.itemsize == 1 and view.format.lstrip("@=<>!") in ("B", "b", "c", "?")


class Rows:
    """The caller's array as rows of ``size`` bytes: checked, and a C pointer to row 0.

    ``out``: a numpy structured array (the row size is its itemsize) or any
    writable C-contiguous buffer; ``record_size``: None (the item size), an
    int, or an EventDef (its ``size``). A plain byte buffer needs a
    ``record_size``; an explicit one must match a typed array's item size.
    """

    __slots__ = ("count", "keep", "ptr", "size")

    def __init__(self, out: object, record_size: object = None, name: str = "out") -> None:
        if record_size is None and self._typed(out):
            return
        view = _writable(out, name)
        if record_size is None:
            if _plain_bytes(view) or view.ndim == 0:
                raise ValueError(f"{name} is a plain byte buffer ({type(out).__name__}): give record_size= "
                                 f"(an int or an EventDef) to say how long a record is")
            size = view.itemsize
        else:
            event_size = getattr(record_size, "size", None) if hasattr(record_size, "numpy_dtype") else None
            size = _check.integer(event_size if event_size is not None else record_size, "record_size",
                                  lo=1, hi=_check.UINT32_MAX)
            if not _plain_bytes(view) and view.itemsize != size:
                raise ValueError(f"record_size is {size} bytes but {name}'s items are {view.itemsize} bytes "
                                 f"({type(out).__name__}, format {view.format!r})")
        if view.nbytes % size:
            raise ValueError(f"{name} holds {view.nbytes} bytes, not a whole number of {size}-byte records")
        self.size = size
        self.count = view.nbytes // size
        self.keep = out
        self.ptr = ffi.from_buffer("uint8_t[]", out, require_writable=True) if view.nbytes else ffi.NULL

    def _typed(self, out: object) -> bool:
        """The usual call, a numpy array of one or more dimensions whose items hold no Python
        objects, without ``record_size``: its rows from one buffer export, True; False for
        the full check (:meth:`__init__`'s, whose messages name what is wrong).

        Every read_into makes its Rows, and a memoryview of a numpy structured array
        rebuilds the dtype's format string each time: 1.8 of the full check's 2.7 us.
        Asking for a plain writable buffer (``ffi.from_buffer``) lets the exporter
        refuse what the full check refuses (read-only, not C-contiguous); items of one
        byte (plain bytes need ``record_size``) and 0-d arrays go to the full check.
        """
        dtype = getattr(out, "dtype", None)
        if dtype is None or getattr(dtype, "hasobject", True):  # numpy arrays of plain data only
            return False
        size = getattr(out, "itemsize", 0)
        if type(size) is not int or size < 2 or not getattr(out, "ndim", 0):
            return False
        try:
            ptr = ffi.from_buffer("uint8_t[]", out, require_writable=True)
        except (TypeError, ValueError, BufferError):
            return False
        nbytes = len(ptr)
        if nbytes % size:
            return False
        self.size, self.count, self.keep = size, nbytes // size, out
        self.ptr = ptr if nbytes else ffi.NULL
        return True


def column(value: object, rows: Rows, width: int, name: str) -> CData:
    """A parallel column (``timestamps`` u64, ``flags`` u8) for ``rows``: its C pointer, or NULL for None."""
    if value is None:
        return ffi.NULL
    view = _writable(value, name)
    code = view.format.lstrip("@=<")
    wanted = ("Q", "L") if width == 8 else ("B",)
    kind = "uint64" if width == 8 else "uint8"
    if view.itemsize != width or code not in wanted:
        raise TypeError(f"{name} must be an array of {kind} (numpy.{kind}), got items of format {view.format!r} "
                        f"and {view.itemsize} bytes ({type(value).__name__})")
    if view.nbytes // width < rows.count:
        raise ValueError(f"{name} has {view.nbytes // width} entries, fewer than out's {rows.count} rows")
    return ffi.from_buffer(f"{'uint64_t' if width == 8 else 'uint8_t'}[]", value, require_writable=True)


class Into:
    """A reader's ``struct plb_into`` and the odd records it handed back (one caller at a time)."""

    __slots__ = ("err", "odd", "odd_count", "ring", "rows", "st")

    def __init__(self) -> None:
        self.st = _shim.plb_into_new()
        self.ring, self.err = ffi.new("uint32_t *"), ffi.new("int *")  # wait_fill's out-arguments
        self.odd: list[OddRecord] = []
        self.odd_count = 0
        self.rows: Any = None   # the Rows (or _arrow.Columns) of the call in progress

    def begin(self, rows: Rows, ts: CData = None, flags: CData = None) -> None:
        """Start a call: rows from 0, the optional columns of the ordered reader."""
        st = self.st
        st.out, st.rows, st.rec_size, st.n = rows.ptr, rows.count, rows.size, 0
        st.ts = ts if ts is not None else ffi.NULL
        st.flags = flags if flags is not None else ffi.NULL
        st.cols, st.ncols = ffi.NULL, 0
        self.rows = rows

    def begin_columns(self, columns: Any, rec_size: int) -> None:
        """Start a call whose rows are those of ``columns`` (an ``_arrow.Columns``), records of
        ``rec_size`` bytes: ring buffers only (plb_into_rb); :meth:`end` detaches them."""
        st = self.st
        st.out, st.rows, st.rec_size, st.n = ffi.NULL, columns.cap, rec_size, 0
        st.ts = st.flags = ffi.NULL
        st.cols, st.ncols = columns.cols, columns.ncols
        self.rows = columns

    def end(self) -> int:
        """Finish a call: the rows written; drops the reference to the caller's array."""
        self.rows = None
        self.st.cols = ffi.NULL   # the columns are the caller's: no later fill may write them
        return int(self.st.n)

    @property
    def full(self) -> bool:
        return int(self.st.n) >= int(self.st.rows)

    def put(self, data: memoryview, ring: int, timestamp: int = 0, flags: int = 0, perf: bool = False) -> None:
        """One record already out of the ring (left by an earlier call): a row, or an odd record."""
        st = self.st
        n, size = int(st.n), int(st.rec_size)
        if len(data) == size or (perf and len(data) == _shim.plb_into_perf_raw_size(size)):
            ffi.memmove(st.out + n * size, data[:size], size)
            if st.ts != ffi.NULL:
                st.ts[n] = timestamp
            if st.flags != ffi.NULL:
                st.flags[n] = flags
            st.n = n + 1
        else:
            self.odd.append(OddRecord(n, bytes(data), ring, timestamp, flags))
            self.odd_count += 1

    def put_lost(self, count: int) -> bool:
        """A lost-samples notice as a row (the ordered reader with a ``flags`` column); False without one."""
        st = self.st
        if st.flags == ffi.NULL:
            return False
        n, size = int(st.n), int(st.rec_size)
        ffi.memmove(st.out + n * size, bytes(size), size)
        if st.ts != ffi.NULL:
            st.ts[n] = count
        st.flags[n] = FLAG_LOST
        st.n = n + 1
        return True

    def put_batch(self, batch: Any, perf: bool, on_lost: Callable[[int, int], None] | None = None) -> bool:
        """Records an earlier call drained but did not deliver (``batch`` from ``batch.next`` on), first.

        Returns True when the whole batch went (rows or odd records); lost
        notices go to ``on_lost(ring, count)``, or become rows (:meth:`put_lost`).
        """
        view, starts, lens, tags, lost = batch.view, batch.starts, batch.lens, batch.tags, batch.lost
        stamps = getattr(batch, "timestamps", None)
        late = getattr(batch, "late", None)
        i, n = batch.next, len(starts)
        while i < n and not self.full:
            count = lost[i]
            if count:
                if not self.put_lost(count) and on_lost is not None:
                    on_lost(tags[i], count)
            else:
                start = starts[i]
                self.put(view[start:start + lens[i]], tags[i], stamps[i] if stamps is not None else 0,
                         FLAG_LATE if late is not None and late[i] else 0, perf)
            i += 1
        batch.next = i
        return bool(i >= n)

    def wait_fill(self, call: Callable[..., int], waiter: Any, timeout_ms: int, rings: Any, n: int,
                  tag_of: Callable[[int], int] | None = None, on_lost: Callable[[int, int], None] | None = None,
                  what: str = "read_into") -> bool:
        """Wait up to ``timeout_ms`` (0: not at all) on ``waiter`` (a ``_close.Waiter``; None when
        ``timeout_ms`` is 0), then fill the rows from the ``n`` rings ``rings``, in one C call:
        ``call`` is ``plb_rb_wait_into`` or ``plb_pb_wait_into`` (csrc/plb_wait.h). Returns False
        on timeout (nothing filled), else True.

        Each ring is read until it is empty, ring 0 first. A ring that stops short
        is handled here, then the fill goes on from it without waiting: an odd
        record is kept (:meth:`take_odd`, tagged ``tag_of(i)``: the CPU of a perf
        ring; the ring index without ``tag_of``), a lost-samples notice goes to
        ``on_lost(tag, count)`` (only perf rings have them). BPFError
        when a ring fails before any row is filled (a failure after rows is met
        again by the next call); ClosedError (from ``waiter.after``) when the
        reader is closed during the wait; a signal's handler runs, then the wait
        goes on for the time left.
        """
        st, ring, err = self.st, self.ring, self.err
        ring[0] = 0
        start = time.monotonic() if timeout_ms > 0 else 0.0
        ret = call(ffi.NULL if waiter is None else waiter.ptr, timeout_ms, rings, n, st, ring, err)
        if ret == 1:  # the usual result (every ring empty, or the rows full): nothing else to read
            return True
        if ret <= 0:
            if ret == 0:
                return False
            # A signal's retry waits for the time left through the same call.
            if not waiter.after(ret, timeout_ms, start, what, lambda w, ms: call(w, ms, rings, n, st, ring, err)):
                return False
        while ring[0] < n and st.stop != lib.PLB_INTO_FULL:  # PLB_INTO_STOPPED: a ring stopped short
            if err[0]:
                raise _libbpf.error(-err[0], f"{what}.read_into: ring {int(ring[0])}")
            tag = int(ring[0]) if tag_of is None else tag_of(int(ring[0]))
            if st.stop != lib.PLB_INTO_LOST:
                self.take_c_odd(tag)
            elif on_lost is not None:
                on_lost(tag, int(st.lost))
            call(ffi.NULL if waiter is None else waiter.ptr, 0, rings, n, st, ring, err)  # on from that ring
        return True

    def take_c_odd(self, ring: int, timestamp: int = 0, flags: int = 0) -> None:
        """Keep the record the last C fill copied to ``st.odd``."""
        st = self.st
        length = int(st.odd_len)
        data = ffi.buffer(st.odd, length)[:] if length else b""
        self.odd.append(OddRecord(int(st.n), data, ring, timestamp, flags))
        self.odd_count += 1

    def take_odd(self) -> list[OddRecord]:
        """The odd records kept so far, oldest first; the list starts empty again."""
        odd, self.odd = self.odd, []
        return odd


class HandsBackOdd:
    """``take_odd()`` and ``odd_records`` for a reader with ``read_into`` (its ``_into_state``)."""

    _into_state: Into | None = None

    if TYPE_CHECKING:
        def _check_owner(self) -> None: ...

    def take_odd(self) -> list[OddRecord]:
        """The records ``read_into`` met whose size was not the row size, oldest first (then forgotten).

        Each is an :class:`OddRecord` (``row``, ``data``, ``ring``, ``timestamp``,
        ``flags``); ClosedError in a forked child.
        """
        self._check_owner()
        return self._into_state.take_odd() if self._into_state is not None else []

    @property
    def odd_records(self) -> int:
        """How many records ``read_into`` handed back through :meth:`take_odd` since the reader was made."""
        return self._into_state.odd_count if self._into_state is not None else 0
