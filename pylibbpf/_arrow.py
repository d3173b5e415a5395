"""Numpy structured arrays of events -> Arrow record batches (pyarrow, an optional extra).

Arrow keeps each column in one contiguous buffer; a numpy structured array keeps
each record in one contiguous row, so a field of it is a strided view. A numeric
column therefore costs one gather (numpy's strided copy, at memory speed) into a
contiguous array, and Arrow then wraps that array's memory as the column's data
buffer without a further copy (the column holds a reference to it). A field that
is already contiguous (the only field of a record) is wrapped with no copy at all.

``char[n]`` fields become ``utf8`` strings cut at the first NUL, as
:meth:`pylibbpf.events.EventDef.parse` decodes them: the NUL positions are found
with numpy over the whole column and the strings' bytes are packed with one
boolean gather, so there is no Python object per record. Invalid UTF-8 does not
raise: the affected values are decoded with U+FFFD replacing invalid sequences,
exactly as ``parse`` does (a Python loop over that column only when such a value
is present). Other arrays become ``fixed_size_list`` columns of their element type.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

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


def record_batch(arr: Any, event_def: Any, extra: Sequence[tuple[str, Any]] = ()) -> Any:
    """A ``pyarrow.RecordBatch`` of the structured array ``arr`` (``event_def.numpy_dtype()`` rows).

    ``extra`` appends columns after the event's fields, as (name, Arrow array)
    pairs of ``len(arr)`` values. Numeric columns share the memory of contiguous
    numpy arrays (see the module's docstring); the batch stays valid for as long
    as it is referenced, independently of ``arr``.
    """
    pa = pyarrow("to_arrow")
    columns = [_column(pa, arr, f) for f in event_def.field_infos]
    columns += [column for _, column in extra]
    return pa.RecordBatch.from_arrays(columns, schema=schema(event_def, [(n, c.type) for n, c in extra]))


def _arrow_type(pa: Any, type_name: str, count: int) -> Any:
    if type_name == "char":
        return pa.string()
    elem = getattr(pa, _ARROW_TYPES[type_name])()
    return elem if count == 1 else pa.list_(elem, count)


def _column(pa: Any, arr: Any, field: Any) -> Any:
    import numpy as np

    values = arr[field.name]
    if field.type == "char":
        return _strings(pa, np, values, field.count)
    flat = np.ascontiguousarray(values)   # the one gather; a no-op when already contiguous
    if field.count == 1:
        return pa.Array.from_buffers(_arrow_type(pa, field.type, 1), len(flat), [None, pa.py_buffer(flat)])
    elems = pa.Array.from_buffers(_arrow_type(pa, field.type, 1), flat.size, [None, pa.py_buffer(flat)])
    return pa.FixedSizeListArray.from_arrays(elems, field.count)


def _strings(pa: Any, np: Any, values: Any, width: int) -> Any:
    """``S<width>`` values -> an Arrow utf8 array of the bytes before the first NUL."""
    n = len(values)
    rows = np.ascontiguousarray(values).view(np.uint8).reshape(n, width)
    nul = rows == 0
    lengths = np.where(nul.any(axis=1), nul.argmax(axis=1), width)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = rows[np.arange(width) < lengths[:, None]]   # row-major: the strings back to back
    out = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    try:
        out.validate(full=True)   # checks the UTF-8
    except pa.ArrowInvalid:
        raw = data.tobytes()
        out = pa.array([raw[a:b].decode("utf-8", "replace") for a, b in zip(offsets[:-1].tolist(),
                                                                             offsets[1:].tolist())],
                       type=pa.string())
    return out
