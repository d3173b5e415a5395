"""The event DSL: fixed-layout event structs, their parsers, serializers and handlers.

An :class:`EventDef` describes one C struct that a BPF program writes into a ring
buffer or perf buffer: its fields, their types, offsets and the struct size.  It
parses the raw bytes of one event into a light record (a tuple subclass with
attribute access and ``_asdict()``) and serializes a mapping or record back.

Types: ``u8 i8 u16 i16 u32 i32 u64 i64 char ptr`` (``ptr`` is an 8-byte unsigned
integer), each with an optional element count for arrays.  All values are
little-endian: BPF programs run in the host byte order, and the targets pylibbpf
supports (x86-64, arm64) are little-endian.

Layouts:

* ``layout="packed"`` (the default) puts fields back to back with no padding.
* ``layout="c"`` places each field at its natural C alignment (the element size:
  1, 2, 4 or 8 bytes, as on x86-64 and the BPF target) and pads the tail to the
  largest alignment, as ``sizeof`` does.
* :meth:`EventDef.from_layout` takes explicit offsets and a size, e.g. what the
  compiler laid out as recorded in BTF.

Conventions of parsed records:

* ``char`` fields (of any count) decode to ``str``: the bytes up to the first NUL,
  decoded as UTF-8 with invalid sequences replaced by U+FFFD.  ``parse(buf,
  raw_chars=True)`` returns the full field as ``bytes`` instead, NULs included.
* Other arrays (count > 1) become tuples of ints; a scalar is an int.
* Every field is a record attribute of its own name, whatever the name:
  ``rec.count``, ``rec.index``, ``rec.items``, ``rec.keys`` return those fields'
  values (on such a record the tuple method of that name is shadowed; use
  ``tuple(rec)`` for it).  A field name may be dotted (``"addr.sin_port"``, as a
  BTF reader flattens nested structs): its attribute replaces each dot by an
  underscore (``rec.addr_sin_port``).  A name that is then a Python keyword or one
  of the record's own underscore names (``_fields``, ``_asdict``) gets a trailing
  underscore (``from`` -> ``from_``).  ``_asdict()`` and
  :meth:`EventDef.serialize` use the field names as defined, dots included;
  ``serialize`` also accepts the attribute names.
"""

from __future__ import annotations

import operator
import re
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, NamedTuple

from . import _check
from ._record import EventRecord as EventRecord  # documented as pylibbpf.events.EventRecord
from ._record import attr_name

__all__ = [
    "TYPES",
    "EventDef",
    "EventField",
    "EventRecord",
    "UnknownFieldError",
    "defevent",
    "make_event_def",
    "make_event_handler",
    "make_event_parser",
    "make_event_serializer",
]


#: The largest event, in bytes: a record a BPF ring buffer can hold (and a size struct and
#: numpy can lay out without an overflow); counts and sizes beyond it are refused at definition.
MAX_EVENT_SIZE = _check.INT32_MAX


#: What :meth:`EventDef.from_c` calls: ``pylibbpf.build.event_def``, set when pylibbpf.build is
#: imported (it compiles with clang, and sits below this module in the import order).
c_struct_compiler: Callable[..., EventDef] | None = None


class _TypeInfo(NamedTuple):
    code: str  # struct format letter of one element
    size: int  # bytes per element (also its C alignment)
    lo: int  # smallest value (0 for char: chars are bytes)
    hi: int  # largest value
    np_kind: str  # numpy dtype string of one element


def _int_type(code: str, size: int, signed: bool) -> _TypeInfo:
    bits = 8 * size
    if signed:
        return _TypeInfo(code, size, -(1 << (bits - 1)), (1 << (bits - 1)) - 1, f"<i{size}")
    return _TypeInfo(code, size, 0, (1 << bits) - 1, f"<u{size}")


_TYPES: dict[str, _TypeInfo] = {
    "u8": _int_type("B", 1, False),
    "i8": _int_type("b", 1, True),
    "u16": _int_type("H", 2, False),
    "i16": _int_type("h", 2, True),
    "u32": _int_type("I", 4, False),
    "i32": _int_type("i", 4, True),
    "u64": _int_type("Q", 8, False),
    "i64": _int_type("q", 8, True),
    "ptr": _int_type("Q", 8, False),
    "char": _TypeInfo("s", 1, 0, 255, "S"),
}

#: The type names an event field may have.
TYPES: tuple[str, ...] = tuple(_TYPES)

_LAYOUTS = ("packed", "c")
_NAME_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INDEX_PART = re.compile(r"[0-9]+\Z")  # an array element of a flattened struct array: "pairs.0.tag"


class UnknownFieldError(KeyError, ValueError):
    """A field name that the event does not have.

    It is a ``KeyError`` (a failed lookup) and a ``ValueError`` (a bad argument),
    so either ``except`` clause catches it; its message is printed without the
    quotes ``KeyError`` adds.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class EventField:
    """One field of an :class:`EventDef`: name, type name, element count, byte offset."""

    name: str
    type: str
    count: int
    offset: int

    @property
    def size(self) -> int:
        """Size of the whole field in bytes (element size times count)."""
        return _TYPES[self.type].size * self.count


def _check_field_name(event: str, index: int, name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"event {event!r}: field #{index} name must be a str, got {name!r}")
    if not name:
        raise ValueError(f"event {event!r}: field #{index} has an empty name")
    head, *rest = name.split(".")
    if not _NAME_PART.match(head) or not all(_NAME_PART.match(p) or _INDEX_PART.match(p) for p in rest):
        raise ValueError(
            f"event {event!r}: field name {name!r} is not a C identifier "
            "(or dotted identifiers for nested members)"
        )
    return name


def _check_type(event: str, field: str, type_name: object) -> str:
    if not isinstance(type_name, str) or type_name not in _TYPES:
        raise ValueError(
            f"event {event!r}: unknown type {type_name!r} for field {field!r} (known: {', '.join(TYPES)})"
        )
    return type_name


def _check_count(event: str, field: str, count: object) -> int:
    return _check.integer(count, f"event {event!r}: count of field {field!r}", lo=1, hi=MAX_EVENT_SIZE)


def _check_event_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"event name must be a str, got {name!r}")
    if not name:
        raise ValueError("event name must not be empty")
    return name


def _parse_specs(event: str, specs: Iterable[object]) -> list[tuple[str, str, int]]:
    rows: list[tuple[str, str, int]] = []
    for i, spec in enumerate(specs):
        if not isinstance(spec, (tuple, list)) or len(spec) not in (2, 3):
            raise ValueError(
                f"event {event!r}: field #{i} must be (name, type) or (name, type, count), got {spec!r}"
            )
        name = _check_field_name(event, i, spec[0])
        type_name = _check_type(event, name, spec[1])
        count = _check_count(event, name, spec[2]) if len(spec) == 3 else 1
        rows.append((name, type_name, count))
    return rows


def _align_up(value: int, align: int) -> int:
    return (value + align - 1) // align * align


class EventDef:
    """An immutable event layout: named, typed fields at fixed offsets in ``size`` bytes.

    Make one with :func:`defevent` or :func:`make_event_def`; a BTF reader uses
    :meth:`from_layout`.  Two definitions are equal when their names, fields and
    sizes are equal.
    """

    __slots__ = (
        "_attrs",
        "_by_name",
        "_dtype",
        "_fields",
        "_layout",
        "_name",
        "_plan",
        "_record_type",
        "_simple",
        "_size",
        "_struct",
    )

    _name: str
    _layout: str
    _size: int
    _fields: tuple[EventField, ...]
    _by_name: dict[str, EventField]
    _struct: struct.Struct
    # Per field, in order: (index of its first value in the unpacked tuple,
    # count, type name).  char fields take one value (bytes) whatever the count.
    _plan: tuple[tuple[int, int, str], ...]
    _simple: bool  # no arrays and no chars: the unpacked tuple is the record
    _record_type: type[EventRecord]
    _attrs: dict[str, str]  # attribute name -> field name
    _dtype: Any  # numpy_dtype() at the event's own size, made on first use (it costs microseconds)

    def __init__(self, name: str, fields: Iterable[EventField], size: int, layout: str) -> None:
        """Validate and build; prefer :func:`defevent` or :meth:`from_layout`.

        Raises ``ValueError`` if there are no fields, names repeat (also after the
        dot-to-underscore attribute mapping), a field lies outside ``size`` bytes
        or two fields overlap; ``TypeError``/``ValueError`` for a bad name, type or
        count as in :func:`defevent`.
        """
        name = _check_event_name(name)
        _check.integer(size, f"event {name!r}: size", lo=1, hi=MAX_EVENT_SIZE)
        checked: list[EventField] = []
        for i, f in enumerate(fields):
            fname = _check_field_name(name, i, f.name)
            ftype = _check_type(name, fname, f.type)
            count = _check_count(name, fname, f.count)
            if isinstance(f.offset, bool) or not isinstance(f.offset, int):
                raise TypeError(f"event {name!r}: offset of field {fname!r} must be an int")
            checked.append(EventField(fname, ftype, count, f.offset))
        if not checked:
            raise ValueError(f"event {name!r} has no fields")
        by_name: dict[str, EventField] = {}
        attrs: dict[str, str] = {}
        for f in checked:
            if f.name in by_name:
                raise ValueError(f"event {name!r}: duplicate field name {f.name!r}")
            attr = attr_name(f.name)
            if attr in attrs:
                raise ValueError(
                    f"event {name!r}: fields {attrs[attr]!r} and {f.name!r} "
                    f"map to the same attribute {attr!r}"
                )
            by_name[f.name] = f
            attrs[attr] = f.name
        # Sort by offset for the byte layout; the field order follows it.
        ordered = sorted(checked, key=lambda f: f.offset)
        end = 0
        prev: EventField | None = None
        fmt = ["<"]
        plan: list[tuple[int, int, str]] = []
        n_values = 0
        for f in ordered:
            if f.offset < 0 or f.offset + f.size > size:
                raise ValueError(
                    f"event {name!r}: field {f.name!r} at offset {f.offset} with size {f.size} "
                    f"does not fit in {size} bytes"
                )
            if prev is not None and f.offset < end:
                raise ValueError(
                    f"event {name!r}: field {f.name!r} at offset {f.offset} overlaps "
                    f"field {prev.name!r} (bytes {prev.offset}..{end - 1})"
                )
            if f.offset > end:
                fmt.append(f"{f.offset - end}x")
            # "16s" unpacks to one bytes value; "2H" to two ints.
            code = _TYPES[f.type].code
            fmt.append(f"{f.count}{code}" if f.count > 1 or code == "s" else code)
            plan.append((n_values, f.count, f.type))
            n_values += 1 if code == "s" else f.count
            end = f.offset + f.size
            prev = f
        if size > end:
            fmt.append(f"{size - end}x")
        field_names = tuple(f.name for f in ordered)
        namespace: dict[str, Any] = {"__slots__": (), "_fields": field_names, "_event": self}
        for i, f in enumerate(ordered):
            namespace[attr_name(f.name)] = property(
                operator.itemgetter(i), doc=f"{f.type}[{f.count}] at offset {f.offset}"
            )
        record_type = type(name, (EventRecord,), namespace)
        sets = object.__setattr__
        sets(self, "_name", name)
        sets(self, "_layout", layout)
        sets(self, "_size", size)
        sets(self, "_fields", tuple(ordered))
        sets(self, "_by_name", by_name)
        sets(self, "_struct", struct.Struct("".join(fmt)))
        sets(self, "_plan", tuple(plan))
        sets(self, "_simple", all(c == 1 and t != "char" for _, c, t in plan))
        sets(self, "_record_type", record_type)
        sets(self, "_attrs", attrs)
        sets(self, "_dtype", None)

    @classmethod
    def from_layout(cls, name: str, rows: Iterable[tuple[str, str, int, int]], size: int) -> EventDef:
        """Build from explicit ``(field, type, count, offset)`` rows and a struct size.

        For layouts a compiler decided (BTF).  Fields are ordered by offset; gaps
        between them and after the last are padding.  Raises ``ValueError`` if a
        field lies outside ``size`` bytes, two fields overlap, or as
        :func:`defevent` does for names, types and counts.
        """
        fields = []
        for i, row in enumerate(rows):
            if not isinstance(row, (tuple, list)) or len(row) != 4:
                raise ValueError(
                    f"event {name!r}: layout row #{i} must be (field, type, count, offset), got {row!r}"
                )
            fields.append(EventField(*row))
        return cls(name, fields, size, "btf")

    @classmethod
    def from_c(cls, header_text: str, struct: str, *, include_dirs: Sequence[Any] = (),
               cflags: Sequence[str] = ()) -> EventDef:
        """``struct`` (``"struct event"``) of the C declarations ``header_text`` as clang lays it out
        for BPF: :func:`pylibbpf.build.event_def`, which documents the compile, the cache and the
        errors (FileNotFoundError without clang, ValueError for clang's errors, KeyError for a
        struct the text does not define). Blocks while clang runs."""
        if c_struct_compiler is None:  # only when pylibbpf.build failed to import
            raise RuntimeError("EventDef.from_c needs pylibbpf.build, which is not imported")
        return c_struct_compiler(header_text, struct, include_dirs=include_dirs, cflags=cflags)

    @classmethod
    def from_btf(cls, obj: Any, name: str) -> EventDef:
        """``struct name`` as the compiler laid it out, from a BPFObject's BTF: ``obj.btf_struct(name)``."""
        event: EventDef = obj.btf_struct(name)
        return event

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError(f"EventDef {self._name!r} is immutable")

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"EventDef {self._name!r} is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return (EventDef, (self._name, list(self._fields), self._size, self._layout))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EventDef):
            return NotImplemented
        return (self._name, self._size, self._fields) == (other._name, other._size, other._fields)

    def __hash__(self) -> int:
        return hash((self._name, self._size, self._fields))

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{f.name}:{f.type}{f'[{f.count}]' if f.count > 1 else ''}@{f.offset}" for f in self._fields
        )
        return f"EventDef({self._name!r}, size={self._size}, layout={self._layout!r}, [{parts}])"

    # -- description -------------------------------------------------------

    @property
    def name(self) -> str:
        """The event's name (also the record class name)."""
        return self._name

    @property
    def size(self) -> int:
        """Size of one event in bytes, tail padding included."""
        return self._size

    @property
    def layout(self) -> str:
        """How offsets were decided: ``"packed"``, ``"c"`` or ``"btf"`` (explicit)."""
        return self._layout

    @property
    def fields(self) -> list[str]:
        """Field names in offset order (a new list on each access)."""
        return [f.name for f in self._fields]

    @property
    def field_infos(self) -> tuple[EventField, ...]:
        """All fields as :class:`EventField` values, in offset order."""
        return self._fields

    @property
    def record_type(self) -> type[EventRecord]:
        """The record class :meth:`parse` returns (a subclass of :class:`EventRecord`)."""
        return self._record_type

    def field(self, name: str) -> EventField:
        """Return field ``name``; raises :class:`UnknownFieldError` if there is none."""
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownFieldError(
                f"event {self._name!r} has no field {name!r} (fields: {', '.join(self.fields)})"
            ) from None

    def offset(self, name: str) -> int:
        """Byte offset of field ``name``; raises :class:`UnknownFieldError`."""
        return self.field(name).offset

    def field_size(self, name: str) -> int:
        """Size of field ``name`` in bytes (all elements); raises :class:`UnknownFieldError`."""
        return self.field(name).size

    def field_type(self, name: str) -> str:
        """Type name of field ``name`` (``"u32"``...); raises :class:`UnknownFieldError`."""
        return self.field(name).type

    def field_count(self, name: str) -> int:
        """Element count of field ``name`` (1 for a scalar); raises :class:`UnknownFieldError`."""
        return self.field(name).count

    # -- parsing -----------------------------------------------------------

    def _too_short(self, buf: object, need: int) -> ValueError:
        try:
            have = memoryview(buf).nbytes  # type: ignore[arg-type]
        except TypeError:
            have = -1
        return ValueError(f"event {self._name!r} needs {need} bytes, buffer has {have}")

    def _not_contiguous(self) -> TypeError:
        return TypeError(
            f"event {self._name!r}: cannot parse a non-contiguous buffer (a strided memoryview): "
            "pass a contiguous one, e.g. bytes(view)"
        )

    def _raw_fields(self, raw_chars: bool | AbstractSet[str]) -> bool | frozenset[str]:
        """``raw_chars`` as parse() uses it: a bool, or the set of char fields to keep as bytes."""
        if isinstance(raw_chars, bool):
            return raw_chars
        if isinstance(raw_chars, (str, bytes)) or not isinstance(raw_chars, (AbstractSet, list, tuple)):
            raise TypeError(
                f"event {self._name!r}: raw_chars must be a bool or a set of field names, "
                f"got {raw_chars!r} ({type(raw_chars).__name__})"
            )
        names = frozenset(raw_chars)
        for name in sorted(names, key=str):
            f = self._by_name.get(name) if isinstance(name, str) else None
            if f is None or f.type != "char":
                chars = ", ".join(f.name for f in self._fields if f.type == "char") or "none"
                raise ValueError(
                    f"event {self._name!r}: raw_chars names {name!r}, which is not a char field "
                    f"(char fields: {chars})"
                )
        return names

    def _partial_values(self, buf: Any, raw_chars: bool | frozenset[str]) -> tuple[Any, ...]:
        """Parse a buffer shorter than ``size`` whose last field (an array) is cut short."""
        try:
            view = memoryview(buf).cast("B")
        except TypeError as e:
            if "contiguous" in str(e):
                raise self._not_contiguous() from None
            raise TypeError(
                f"event {self._name!r}: cannot parse {type(buf).__name__}, need a bytes-like object"
            ) from None
        last = self._fields[-1]
        if last.count == 1 or view.nbytes < last.offset:
            raise self._too_short(buf, self._size if last.count == 1 else last.offset)
        elem = _TYPES[last.type].size
        present = min(last.count, (view.nbytes - last.offset) // elem)
        padded = bytes(view[: last.offset + present * elem]).ljust(self._size, b"\0")
        values = list(self._values(padded, raw_chars))
        tail = values[-1]
        if last.type == "char":
            raw = raw_chars if isinstance(raw_chars, bool) else last.name in raw_chars
            values[-1] = tail[:present] if raw else tail
        else:
            values[-1] = tuple(tail)[:present]
        return tuple(values)

    def _values(self, buf: Any, raw_chars: bool | frozenset[str]) -> tuple[Any, ...]:
        try:
            flat = self._struct.unpack_from(buf)
        except struct.error:
            raise self._too_short(buf, self._size) from None
        except BufferError:
            raise self._not_contiguous() from None
        except TypeError:
            raise TypeError(
                f"event {self._name!r}: cannot parse {type(buf).__name__}, need a bytes-like object"
            ) from None
        if self._simple:
            return flat
        out: list[Any] = []
        for f, (start, count, type_name) in zip(self._fields, self._plan):
            if type_name == "char":
                raw: bytes = flat[start]
                if raw_chars is True or (raw_chars and f.name in raw_chars):  # type: ignore[operator]
                    out.append(raw)
                else:
                    out.append(raw.split(b"\0", 1)[0].decode("utf-8", "replace"))
            elif count == 1:
                out.append(flat[start])
            else:
                out.append(flat[start : start + count])
        return tuple(out)

    def parse(self, buf: Any, *, raw_chars: bool | AbstractSet[str] = False, partial: bool = False) -> EventRecord:
        """Parse one event from the start of ``buf`` into a record.

        ``buf`` is anything with the buffer protocol (``bytes``, ``bytearray``,
        ``memoryview``, ``mmap``, ...); bytes past ``size`` are ignored (perf
        samples carry padding).  ``char`` fields decode to ``str`` cut at the
        first NUL, or stay ``bytes`` with ``raw_chars=True`` (every char field) or
        ``raw_chars={"name", ...}`` (those char fields only: a ValueError names
        one that is not a char field of the event).  The record owns its
        values: nothing refers to ``buf`` afterwards.

        ``partial=True`` accepts a buffer shorter than the event whose last
        field (by offset) is an array cut short, as variable-length samples are
        sent (an exec tracer's argv): that field holds the whole elements
        present (a shorter tuple; the chars present, up to the first NUL), and
        the buffer must still reach the start of that field.

        Raises ``ValueError`` naming the event and both sizes if ``buf`` is
        shorter than the event (or, with ``partial``, than the start of its
        trailing array), ``TypeError`` if it is not a buffer or not a
        contiguous one (a strided memoryview).
        """
        raw = raw_chars if raw_chars is False or raw_chars is True else self._raw_fields(raw_chars)
        if partial and _nbytes(buf) < self._size:
            return self._record_type(self._partial_values(buf, raw))
        return self._record_type(self._values(buf, raw))

    def _pack_values(self, values: Iterable[Any]) -> bytes:
        # ``values`` holds one value (or None) per field, in field order.
        flat: list[Any] = []
        for f, value in zip(self._fields, values):
            info = _TYPES[f.type]
            if f.type == "char":
                flat.append(self._char_bytes(f, value))
            elif f.count == 1:
                flat.append(self._int_value(f, value, info))
            elif value is None:
                flat.extend([0] * f.count)
            else:
                if isinstance(value, (str, Mapping)) or not isinstance(value, Iterable):
                    raise TypeError(
                        f"event {self._name!r}: field {f.name!r} ({f.type}[{f.count}]) "
                        f"needs a sequence of ints, got {type(value).__name__}"
                    )
                items = list(value)
                if len(items) > f.count:
                    raise ValueError(
                        f"event {self._name!r}: field {f.name!r} holds {f.count} items, got {len(items)}"
                    )
                flat.extend(self._int_value(f, v, info) for v in items)
                flat.extend([0] * (f.count - len(items)))
        return self._struct.pack(*flat)

    def _int_value(self, f: EventField, value: object, info: _TypeInfo) -> int:
        if value is None:
            return 0
        try:
            n = operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(
                f"event {self._name!r}: field {f.name!r} ({f.type}) needs an int, got {type(value).__name__}"
            ) from None
        if not info.lo <= n <= info.hi:
            raise ValueError(
                f"event {self._name!r}: value {n} out of range for field {f.name!r} "
                f"({f.type}: {info.lo}..{info.hi})"
            )
        return n

    def _char_bytes(self, f: EventField, value: object) -> bytes:
        if value is None:
            return b""
        if isinstance(value, str):
            try:
                data = value.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(
                    f"event {self._name!r}: field {f.name!r} (char[{f.count}]) cannot be encoded as UTF-8: "
                    f"{value[e.start:e.end]!r} at position {e.start} ({e.reason})"
                ) from None
        elif isinstance(value, (bytes, bytearray, memoryview)):
            data = bytes(value)
        else:
            raise TypeError(
                f"event {self._name!r}: field {f.name!r} (char[{f.count}]) needs str or bytes, "
                f"got {type(value).__name__}"
            )
        if len(data) > f.count:
            raise ValueError(
                f"event {self._name!r}: field {f.name!r} holds {f.count} bytes, got {len(data)} ({value!r})"
            )
        return data  # struct pads with NULs

    def serialize(self, values: Mapping[str, Any] | EventRecord) -> bytes:
        """Encode a mapping or record into exactly ``size`` bytes (the inverse of :meth:`parse`).

        Keys are field names (dotted as defined) or record attribute names.
        Missing fields, ``None`` and padding bytes are zero; a short array is
        zero-filled; a ``char`` field takes ``str`` (UTF-8) or ``bytes`` of at most
        its count, NUL-padded (no terminator is required).

        Raises :class:`UnknownFieldError` for a key that is no field, ``TypeError``
        naming the field for a value of the wrong type, ``ValueError`` naming the
        field for an integer out of its type's range or a too-long string or array.
        """
        if isinstance(values, EventRecord):
            mapping: Mapping[str, Any] = values._asdict()
        elif isinstance(values, Mapping):
            mapping = values
        else:
            raise TypeError(
                f"event {self._name!r}: serialize needs a mapping or record, got {type(values).__name__}"
            )
        by_field: dict[str, Any] = {}
        for key, value in mapping.items():
            fname = key if key in self._by_name else self._attrs.get(key)
            if fname is None:
                raise UnknownFieldError(
                    f"event {self._name!r} has no field {key!r} (fields: {', '.join(self.fields)})"
                )
            by_field[fname] = value
        return self._pack_values(by_field.get(f.name) for f in self._fields)

    def _serialize_tuple(self, values: Sequence[Any]) -> bytes:
        if len(values) != len(self._fields):
            raise ValueError(f"event {self._name!r} has {len(self._fields)} fields, got {len(values)} values")
        # Positional definitions have increasing offsets: field order is value order.
        return self._pack_values(values)

    # -- numpy -------------------------------------------------------------

    def numpy_dtype(self, itemsize: int | None = None) -> Any:
        """Return the numpy structured dtype of this event (offsets and itemsize exact).

        Field names are kept as defined (dots included).  ``char[n]`` maps to
        ``S<n>`` (numpy drops trailing NULs, it does not cut at the first one);
        other arrays are subarray fields.  ``itemsize`` (default ``size``) may be
        larger, for records padded in a batch.  The dtype at the event's own
        size is made once and the same object is returned by every later call
        (``Batch.to_numpy`` asks for it per batch; a dtype costs microseconds).

        Raises ``ImportError`` naming numpy if it is not installed, ``ValueError``
        if ``itemsize`` is smaller than ``size``.
        """
        if (itemsize is None or itemsize == self._size) and self._dtype is not None:
            return self._dtype
        np = _numpy("EventDef.numpy_dtype")
        if itemsize is None:
            itemsize = self._size
        if itemsize < self._size:
            raise ValueError(
                f"event {self._name!r}: itemsize {itemsize} is smaller than the event ({self._size})"
            )
        formats: list[Any] = []
        for f in self._fields:
            kind = _TYPES[f.type].np_kind
            if f.type == "char":
                formats.append(f"S{f.count}")
            elif f.count > 1:
                formats.append((kind, (f.count,)))
            else:
                formats.append(kind)
        dtype = np.dtype(
            {
                "names": [f.name for f in self._fields],
                "formats": formats,
                "offsets": [f.offset for f in self._fields],
                "itemsize": itemsize,
            }
        )
        if itemsize == self._size:
            object.__setattr__(self, "_dtype", dtype)  # a cache, not a change: the event stays frozen
        return dtype

    def parse_many(self, buf: Any, count: int | None = None, *, stride: int | None = None) -> Any:
        """Parse ``count`` events laid out every ``stride`` bytes into a numpy record array.

        ``stride`` defaults to ``size``; batches that pad each record (e.g. to 8
        bytes) pass the padded size.  ``count`` defaults to as many events as fit.
        The result is a fresh contiguous array of :meth:`numpy_dtype` (a copy:
        it does not refer to ``buf``), built without a Python loop.

        Raises ``ImportError`` naming numpy if it is not installed; ``ValueError``
        if ``stride`` is smaller than ``size``, ``count`` is negative, or ``buf``
        is too short (naming the event and both sizes).
        """
        np = _numpy("EventDef.parse_many")
        if stride is None:
            stride = self._size
        if stride < self._size:
            raise ValueError(
                f"event {self._name!r}: stride {stride} is smaller than the event ({self._size})"
            )
        view = memoryview(buf).cast("B")
        have = view.nbytes
        if count is None:
            count = 0 if have < self._size else (have - self._size) // stride + 1
        if count < 0:
            raise ValueError(f"event {self._name!r}: count must not be negative, got {count}")
        need = 0 if count == 0 else (count - 1) * stride + self._size
        if have < need:
            raise ValueError(
                f"event {self._name!r}: {count} events with stride {stride} need {need} bytes, "
                f"buffer has {have}"
            )
        dtype = self.numpy_dtype()
        if count == 0:
            return np.empty(0, dtype=dtype)
        # A strided view over the caller's memory, then one copy out of it.
        strided = np.ndarray(shape=(count,), dtype=dtype, buffer=view, strides=(stride,))
        return strided.copy()


def require_event_def(event_def: Any, what: str, param: str = "event_def") -> EventDef:
    """``event_def`` itself when it is an EventDef; TypeError naming ``what`` and ``param`` otherwise."""
    if not isinstance(event_def, EventDef):
        raise TypeError(f"{what}: {param} must be an EventDef (pylibbpf.defevent, obj.btf_struct), "
                        f"got {type(event_def).__name__} {event_def!r:.60}")
    return event_def


def _nbytes(buf: Any) -> int:
    """The size of a bytes-like object (a large number for anything else: parsing then says why)."""
    try:
        return memoryview(buf).nbytes
    except TypeError:
        return 1 << 62


def _numpy(what: str) -> Any:
    try:
        import numpy
    except ImportError as exc:
        raise ImportError(f"{what} needs numpy, which is not installed") from exc
    return numpy


def _layout_fields(name: str, rows: list[tuple[str, str, int]], layout: str) -> tuple[list[EventField], int]:
    fields = []
    offset = 0
    max_align = 1
    for fname, type_name, count in rows:
        align = _TYPES[type_name].size if layout == "c" else 1
        max_align = max(max_align, align)
        offset = _align_up(offset, align)
        fields.append(EventField(fname, type_name, count, offset))
        offset += _TYPES[type_name].size * count
    return fields, _align_up(offset, max_align)


def make_event_def(name: str, field_specs: Iterable[Any], layout: str = "packed") -> EventDef:
    """Define an event from a list of ``(name, type)`` or ``(name, type, count)`` tuples.

    ``layout`` is ``"packed"`` (fields back to back) or ``"c"`` (natural C
    alignment and tail padding).  Raises ``ValueError`` for an unknown type or
    layout, an empty or repeated field name, a non-positive count, a malformed
    spec or no fields; ``TypeError`` for a name or count of the wrong type.
    """
    name = _check_event_name(name)
    if layout not in _LAYOUTS:
        raise ValueError(f"event {name!r}: unknown layout {layout!r} (known: packed, c)")
    rows = _parse_specs(name, field_specs)
    if not rows:
        raise ValueError(f"event {name!r} has no fields")
    fields, size = _layout_fields(name, rows, layout)
    return EventDef(name, fields, size, layout)


def defevent(name: str, *field_specs: Any, layout: str = "packed") -> EventDef:
    """Define an event: ``defevent("E", ("pid", "u32"), ("comm", "char", 16))``.

    The same as :func:`make_event_def` with the specs as arguments; raises the same.
    """
    return make_event_def(name, field_specs, layout)


def _positional_def(spec: Iterable[Any], what: str) -> EventDef:
    rows: list[tuple[Any, ...]] = []
    for i, item in enumerate(spec):
        if isinstance(item, str):
            rows.append((f"f{i}", item))
        elif isinstance(item, (tuple, list)) and len(item) == 2:
            rows.append((f"f{i}", item[0], item[1]))
        else:
            raise ValueError(f"{what}: item #{i} must be a type name or (type, count), got {item!r}")
    return make_event_def(what, rows)


def make_event_parser(spec: Iterable[Any]) -> Callable[[Any], tuple[Any, ...]]:
    """Return a function parsing a packed struct of the given types into a plain tuple.

    ``spec`` lists type names, or ``(type, count)`` pairs for arrays:
    ``make_event_parser(["u32", "u64", "u32"])(buf) -> (123, 456789, 42)``.  The
    parser behaves like :meth:`EventDef.parse`.  Raises ``ValueError`` for an
    unknown type or a malformed item.
    """
    event = _positional_def(spec, "make_event_parser")

    def parse(buf: Any) -> tuple[Any, ...]:
        return event._values(buf, False)

    return parse


def make_event_serializer(spec: Iterable[Any]) -> Callable[[Sequence[Any]], bytes]:
    """Return a function packing a tuple of values into a packed struct of the given types.

    The inverse of :func:`make_event_parser` with the same ``spec``.  The
    serializer raises ``ValueError`` for a wrong number of values or an
    out-of-range value and ``TypeError`` for a value of the wrong type, naming
    the position (``f0``, ``f1``, ...).
    """
    event = _positional_def(spec, "make_event_serializer")

    def serialize(values: Sequence[Any]) -> bytes:
        return event._serialize_tuple(values)

    return serialize


def make_event_handler(
    *,
    handler: Callable[[Any], Any],
    parser: EventDef | Callable[[Any], Any] | None = None,
    filter: Callable[[Any], bool] | None = None,
    transform: Callable[[Any], Any] | None = None,
) -> Callable[[Any], Any]:
    """Compose parse -> filter -> transform -> handler into one callback taking raw data.

    ``parser`` is an :class:`EventDef` (its :meth:`~EventDef.parse`), a callable,
    or ``None`` (the data is passed on as is).  An event for which ``filter``
    returns false is dropped: the callback returns ``None`` without calling
    ``transform`` or ``handler``.  Otherwise it returns what ``handler`` returns.
    Exceptions from any stage propagate to the caller.  Raises ``TypeError`` if
    ``handler`` or a given stage is not callable.
    """
    if not callable(handler):
        raise TypeError(f"make_event_handler: handler must be callable, got {handler!r}")
    parse: Callable[[Any], Any] | None
    if isinstance(parser, EventDef):
        parse = parser.parse
    elif parser is None or callable(parser):
        parse = parser
    else:
        raise TypeError(f"make_event_handler: parser must be an EventDef or callable, got {parser!r}")
    for label, stage in (("filter", filter), ("transform", transform)):
        if stage is not None and not callable(stage):
            raise TypeError(f"make_event_handler: {label} must be callable, got {stage!r}")
    keep = filter

    def handle(data: Any) -> Any:
        event = parse(data) if parse is not None else data
        if keep is not None and not keep(event):
            return None
        if transform is not None:
            event = transform(event)
        return handler(event)

    return handle
