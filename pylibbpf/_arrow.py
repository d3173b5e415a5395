"""Event records -> Arrow record batches (pyarrow, an optional extra).

Arrow keeps each field of every record in one contiguous buffer (a column); a
batch keeps each record's bytes together (a row). The C shim
(``plb_columns_arrow``, csrc/plb_columns.h) turns rows into columns in one
pass over the records, without the GIL, into one block of memory it
allocates, and describes the columns as an Arrow C data interface array;
pyarrow imports that description without copying (one call for the whole
batch, not one per column) and frees the block when the last column using it
is gone. So the result shares no memory with the batch it came from.

``char[n]`` fields become ``utf8`` strings cut at the first NUL, as
:meth:`pylibbpf.events.EventDef.parse` decodes them: the C pass packs the
kept bytes and their offsets, and says whether any byte is non-ASCII. Only
then is the column's UTF-8 validated, and invalid UTF-8 does not raise: the
affected values are decoded with U+FFFD replacing invalid sequences, exactly
as ``parse`` does (a Python loop over that column only when such a value is
present). Other arrays become ``fixed_size_list`` columns of their element type.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import _shim
from ._ffi import ffi, lib

#: Where the event's name is kept in the schema's metadata.
EVENT_NAME_KEY = b"pylibbpf.event"

_INSTALL_HINT = "pip install 'pylibbpf-cffi[arrow]'"

# numpy kind of each EventDef integer type, by its (pyarrow) type factory name.
_ARROW_TYPES = {
    "u8": "uint8", "i8": "int8", "u16": "uint16", "i16": "int16", "u32": "uint32",
    "i32": "int32", "u64": "uint64", "i64": "int64", "ptr": "uint64",
}


def pyarrow(what: str) -> Any:
    """Import pyarrow, or raise ImportError naming ``what`` needs it and the extra that installs it."""
    try:
        import pyarrow as pa
    except ImportError as exc:
        raise ImportError(f"{what} needs pyarrow, which is not installed: {_INSTALL_HINT}") from exc
    return pa


def schema(event_def: Any, extra: Sequence[tuple[str, Any]] = ()) -> Any:
    """The Arrow schema of ``event_def``'s records, then the ``extra`` (name, type) columns.

    The schema's metadata keeps the event's name under ``pylibbpf.event``.
    """
    return _schema(event_def, tuple(extra))


@functools.lru_cache(maxsize=64)
def _schema(event_def: Any, extra: tuple[tuple[str, Any], ...]) -> Any:
    # built once per (event, extra columns): it costs tens of microseconds, per batch otherwise
    pa = pyarrow("to_arrow")
    fields = [pa.field(f.name, _arrow_type(pa, f.type, f.count)) for f in event_def.field_infos]
    fields += [pa.field(name, typ) for name, typ in extra]
    return pa.schema(fields, metadata={EVENT_NAME_KEY: str(event_def.name).encode()})


@dataclass(frozen=True)
class _Layout:
    """What the C pass needs of an event, built once per event definition."""

    ncols: int
    template: bytes       # the event's ``struct plb_column`` array, copied into each call's own
    strings: tuple[int, ...]   # indices of the utf8 columns
    size: int
    name: str
    schema: Any
    what: str   # how errors of the C pass name it
    rows_max: int   # the most rows plb_columns_arrow_alloc takes for this event


#: id(event_def) -> (event_def, its layout). By identity: EventDef's hash walks
#: its fields (about a microsecond, per batch otherwise); the definition is
#: kept referenced so that its id is not reused while it is here.
_LAYOUTS: dict[int, tuple[Any, _Layout]] = {}
_LAYOUTS_MAX = 64


def _layout(event_def: Any) -> _Layout:
    hit = _LAYOUTS.get(id(event_def))
    if hit is not None and hit[0] is event_def:
        return hit[1]
    infos = event_def.field_infos
    cols = ffi.new("struct plb_column[]", max(1, len(infos)))
    strings = []
    for i, f in enumerate(infos):
        col = cols[i]
        col.offset, col.size, col.count = f.offset, f.size, f.count
        if f.type == "char":
            col.kind = lib.PLB_COL_STRING
            strings.append(i)
        else:
            col.kind = lib.PLB_COL_FIXED
    # a u32 count of rows, and int32 offsets for a string column's bytes (rows * its width)
    widest = max((int(infos[i].size) for i in strings), default=1)
    layout = _Layout(len(infos), bytes(ffi.buffer(cols)), tuple(strings), int(event_def.size),
                     str(event_def.name), _schema(event_def, ()), f"{event_def.name}: to_arrow",
                     min(2**32 - 1, (2**31 - 1) // widest))
    if len(_LAYOUTS) >= _LAYOUTS_MAX:
        _LAYOUTS.clear()
    _LAYOUTS[id(event_def)] = (event_def, layout)
    return layout


def record_batch(arr: Any, event_def: Any, extra: Sequence[tuple[str, Any]] = ()) -> Any:
    """A ``pyarrow.RecordBatch`` of the structured array ``arr`` (``event_def.numpy_dtype()`` rows).

    ``extra`` appends columns after the event's fields, as (name, Arrow array)
    pairs of ``len(arr)`` values. The columns are fresh memory: the batch stays
    valid for as long as it is referenced, independently of ``arr``.
    """
    import numpy as np

    arr = np.ascontiguousarray(arr)
    return from_records(arr, None, None, len(arr), int(arr.dtype.itemsize), event_def, extra)


def from_records(base: Any, starts: Any, lens: Any, n: int, stride: int, event_def: Any,
                 extra: Sequence[tuple[str, Any]] = ()) -> Any:
    """A ``pyarrow.RecordBatch`` of ``n`` records of ``event_def`` in the buffer ``base``.

    Record ``i`` starts at ``starts[i]`` and is ``lens[i]`` bytes long
    (``starts``/``lens``: uint32 buffers, or lists of ints; a ``range``
    of starts: records of ``lens[0]`` bytes at its step; None: at
    ``i * stride``, ``event_def.size`` long). A record shorter than the event
    raises ValueError naming the event and both sizes; a longer one is cut.
    ``extra`` appends (name, Arrow array) columns of ``n`` values. The
    records are read once, in C without the GIL; the result is independent of
    ``base`` (fresh memory, freed with the last column that uses it).
    """
    pa = pyarrow("to_arrow")
    layout = _layout(event_def)
    cols = ffi.new("struct plb_column[]", max(1, layout.ncols))
    ffi.memmove(cols, layout.template, len(layout.template))
    out = ffi.new("struct plb_arrow_array *")
    first = 0
    if starts is None:
        c_starts = c_lens = ffi.NULL
    elif n == 1 or type(starts) is range:
        # One record (a wakeup's worth), or a uniform batch (records of lens[0] bytes at the
        # range's step): no index arrays to build.
        if lens[0] < layout.size:
            raise _too_short(layout, lens)
        first, c_starts, c_lens = int(starts[0]), ffi.NULL, ffi.NULL
        if type(starts) is range:
            stride = starts.step
    elif isinstance(starts, list):   # a few records: one allocation for both
        both = ffi.new("uint32_t[]", starts + list(lens))
        c_starts, c_lens = both, both + n
    else:
        c_starts, c_lens = ffi.from_buffer("uint32_t[]", starts), ffi.from_buffer("uint32_t[]", lens)
    buf = ffi.from_buffer(base)
    if _shim.plb_columns_arrow(buf, len(buf), c_starts, c_lens, first, stride, n, layout.size, cols,
                               layout.ncols, ffi.NULL, out, layout.what) < 0:
        raise _too_short(layout, lens)
    return _imported(pa, out, cols, layout, event_def, extra)


def _imported(pa: Any, out: Any, cols: Any, layout: _Layout, event_def: Any,
              extra: Sequence[tuple[str, Any]]) -> Any:
    """The RecordBatch ``*out`` describes (its strings' UTF-8 checked, ``extra`` appended); ``*out``
    is pyarrow's, or released, whatever happens."""
    try:
        batch = pa.RecordBatch._import_from_c(int(ffi.cast("uintptr_t", out)), layout.schema)
    except BaseException:
        _shim.plb_arrow_release(out)   # unless pyarrow took it (which clears ``release``)
        raise
    for i in layout.strings:
        if cols[i].high:   # a non-ASCII byte: the UTF-8 needs checking
            batch = batch.set_column(i, batch.schema.field(i), _valid_utf8(pa, batch.column(i)))
    if extra:
        batch = pa.RecordBatch.from_arrays([*batch.columns, *(c for _, c in extra)],
                                           schema=schema(event_def, [(name, c.type) for name, c in extra]))
    return batch


class Columns:
    """Fresh Arrow columns a C reader writes records of ``event_def`` into, row by row, then a RecordBatch.

    ``cap``: the rows they have room for (cut to what ``plb_columns_arrow_alloc``
    takes: :attr:`cap` says how many). ``cols`` (a ``struct plb_column[]``)
    goes to the reader (``struct plb_into.cols``); :meth:`record_batch` hands
    the block to pyarrow. Until then the block is this object's:
    :meth:`release` (idempotent) frees it, and so does garbage collection of
    ``out`` (a no-op once pyarrow has moved it: its ``release`` is then NULL).
    BPFError(ENOMEM) when it cannot be allocated. Built per call of a reader,
    so it does no more than it must (~2 us with the import).
    """

    __slots__ = ("_event_def", "_layout", "cap", "cols", "ncols", "out")

    def __init__(self, event_def: Any, cap: int, what: str) -> None:
        layout = _layout(event_def)
        self.cap = max(0, min(cap, layout.rows_max))
        self.cols = cols = ffi.new("struct plb_column[]", max(1, layout.ncols))
        ffi.memmove(cols, layout.template, len(layout.template))
        self.ncols = layout.ncols
        self.out = ffi.gc(ffi.new("struct plb_arrow_array *"), _shim.plb_arrow_release)
        _shim.plb_columns_arrow_alloc(self.cap, layout.size, cols, layout.ncols, self.out, what)
        self._layout, self._event_def = layout, event_def

    def record_batch(self, n: int, pa: Any) -> Any:
        """The first ``n`` rows (those the reader wrote) as a ``pyarrow.RecordBatch`` (``pa``: pyarrow);
        the block is then pyarrow's."""
        _shim.plb_columns_arrow_finish(self.out, n, self.cols, self.ncols)
        return _imported(pa, self.out, self.cols, self._layout, self._event_def, ())

    def release(self) -> None:
        """Free the block unless :meth:`record_batch` handed it over; safe to call twice."""
        _shim.plb_arrow_release(self.out)


def _too_short(layout: _Layout, lens: Any) -> ValueError:
    return ValueError(f"{layout.name}: a record of {min(lens)} bytes is shorter than "
                      f"the event's {layout.size} bytes")


def _arrow_type(pa: Any, type_name: str, count: int) -> Any:
    if type_name == "char":
        return pa.string()
    elem = getattr(pa, _ARROW_TYPES[type_name])()
    return elem if count == 1 else pa.list_(elem, count)


def _valid_utf8(pa: Any, column: Any) -> Any:
    """``column`` (utf8) when its bytes are valid UTF-8; else its values decoded as ``parse`` does (U+FFFD)."""
    try:
        column.validate(full=True)
        return column
    except pa.ArrowInvalid:
        pass
    _, offsets, data = column.buffers()
    raw = data.to_pybytes() if data is not None else b""
    ends = memoryview(offsets).cast("i")
    return pa.array([raw[ends[i]:ends[i + 1]].decode("utf-8", "replace") for i in range(len(column))],
                    type=pa.string())
