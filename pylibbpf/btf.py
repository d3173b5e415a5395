"""Event layouts and typed values read from BTF: what the compiler laid out.

``struct_event_def(btf, "event")`` (what ``BPFObject.btf_struct`` calls) walks
``struct event`` in the BTF through libbpf's btf API and returns an :class:`~pylibbpf.events.EventDef` whose
offsets and size are exactly the compiler's:

- typedefs, const/volatile and enums resolve to their integer type (an enum is
  ``u``/``i`` of its size, signedness from BTF);
- nested structs are flattened with dotted names (``addr.sin_port``), anonymous
  members without a name part;
- a union is represented by its first member (as an initializer would use it);
  the rest of its bytes are padding — parse the other members yourself if needed;
- arrays of integers keep their count (``char`` arrays decode to str), arrays of
  arrays are flattened to one count, arrays of structs to ``name.0.field``...;
- pointers are ``ptr`` (8 bytes);
- bitfields and floating-point members are refused with a ValueError that names
  the member.

``value_type(btf, type_id, label)`` gives a :class:`ValueType` for any type (a
map's key or value, a global variable): ints (range-checked), bools, enums
(ints; an enumerator's name is accepted when writing), floats, ``char``
arrays (str), ``unsigned char``/``__u8`` arrays (bytes, every byte kept),
other arrays (tuples), structs and unions (records of an EventDef as
above). A type an EventDef cannot hold (a struct with a bitfield...) becomes
bytes of its size, with the reason kept in ``ValueType.why_bytes``.
``datasec_vars(btf, type_id)`` walks a DATASEC (a global-data section) into its
variables. Nothing here holds the BTF: the caller keeps its owner open.

``kernel()`` is the running kernel's own BTF (:class:`KernelBTF`, loaded once
and shared): what a tool asks before it picks the programs to load::

    from pylibbpf import btf
    k = btf.kernel()
    k.has_field("task_struct", "__state")        # True on kernels since 5.14
    k.field_offset("task_struct", "pid")         # the byte offset, as the compiler laid it out
    k.enum_value("bpf_prog_type", "BPF_PROG_TYPE_TRACING")
    k.type("sched_entity").members               # BTFType: kind, name, size, members / values
    btf.kernel(module="nf_tables")               # a module's BTF, split on vmlinux's
"""

from __future__ import annotations

import abc
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import _check, _libbpf
from ._ffi import lib
from ._kernel_btf import SYSFS_BTF_DIR as SYSFS_BTF_DIR
from ._kernel_btf import BTFMember as BTFMember
from ._kernel_btf import BTFType as BTFType
from ._kernel_btf import KernelBTF as KernelBTF
from ._kernel_btf import enumerators
from ._kernel_btf import kernel as kernel
from .events import EventDef, EventRecord

CData = Any
_INT_NAMES = {(1, False): "u8", (1, True): "i8", (2, False): "u16", (2, True): "i16",
              (4, False): "u32", (4, True): "i32", (8, False): "u64", (8, True): "i64"}


class _Walker:
    def __init__(self, btf: CData, struct_name: str) -> None:
        self.btf = btf
        self.struct_name = struct_name
        self.rows: list[tuple[str, str, int, int]] = []

    def what(self, member: str) -> str:
        return f"btf({self.struct_name}.{member})"

    def refuse(self, member: str, why: str) -> ValueError:
        return ValueError(f"struct {self.struct_name}: member {member!r} {why}: not supported in an EventDef")

    def type(self, type_id: int, member: str) -> CData:
        resolved = _libbpf.btf__resolve_type(self.btf, type_id, self.what(member))
        return resolved, _libbpf.btf__type_by_id(self.btf, resolved, self.what(member))

    def scalar(self, t: CData, member: str) -> str:
        """The DSL type of an int/enum/pointer BTF type."""
        kind = _libbpf.btf_kind(t)
        if kind == lib.BTF_KIND_INT:
            if _libbpf.btf_int_offset(t) or _libbpf.btf_int_bits(t) != t.size * 8:
                raise self.refuse(member, "is a bit-sized integer")
            name = _libbpf.btf__name_by_offset(self.btf, t.name_off)
            if t.size == 1 and name in ("char", "signed char", "unsigned char"):
                return "char" if name == "char" else ("i8" if name == "signed char" else "u8")
            return _INT_NAMES[(t.size, bool(_libbpf.btf_int_encoding(t) & lib.BTF_INT_SIGNED))]
        if kind in (lib.BTF_KIND_ENUM, lib.BTF_KIND_ENUM64):
            return _INT_NAMES[(t.size, bool(_libbpf.btf_kflag(t)))]
        if kind == lib.BTF_KIND_PTR:
            return "ptr"
        kinds = {lib.BTF_KIND_FLOAT: "is a floating-point number", lib.BTF_KIND_FUNC_PROTO: "is a function"}
        raise self.refuse(member, kinds.get(kind, f"has BTF kind {kind}"))

    def member(self, type_id: int, name: str, offset: int) -> None:
        """Add the rows for one member of type ``type_id`` at byte ``offset``."""
        _, t = self.type(type_id, name)
        kind = _libbpf.btf_kind(t)
        if kind in (lib.BTF_KIND_STRUCT, lib.BTF_KIND_UNION):
            self.record(t, name, offset)
        elif kind == lib.BTF_KIND_ARRAY:
            self.array(t, name, offset)
        else:
            self.rows.append((name, self.scalar(t, name), 1, offset))

    def array(self, t: CData, name: str, offset: int) -> None:
        arr = _libbpf.btf_array(t)
        count = int(arr.nelems)
        _, elem = self.type(arr.type, name)
        while _libbpf.btf_kind(elem) == lib.BTF_KIND_ARRAY:  # int a[2][3] -> 6 ints
            inner = _libbpf.btf_array(elem)
            count *= int(inner.nelems)
            _, elem = self.type(inner.type, name)
        if count == 0:
            return  # a flexible array member occupies no bytes of the struct
        if _libbpf.btf_kind(elem) in (lib.BTF_KIND_STRUCT, lib.BTF_KIND_UNION):
            for i in range(count):
                self.record(elem, f"{name}.{i}", offset + i * int(elem.size))
        else:
            self.rows.append((name, self.scalar(elem, name), count, offset))

    def record(self, t: CData, prefix: str, offset: int) -> None:
        """Flatten a struct (every member) or a union (its first member)."""
        members = _libbpf.btf_members(t)
        vlen = _libbpf.btf_vlen(t)
        if _libbpf.btf_kind(t) == lib.BTF_KIND_UNION:
            vlen = min(vlen, 1)
        for i in range(vlen):
            m = members[i]
            mname = _libbpf.btf__name_by_offset(self.btf, m.name_off)
            full = f"{prefix}.{mname}" if prefix and mname else (mname or prefix)
            if _libbpf.btf_member_bitfield_size(t, i):
                raise self.refuse(full or f"#{i}", f"is a bitfield ({_libbpf.btf_member_bitfield_size(t, i)} bits)")
            self.member(m.type, full, offset + _libbpf.btf_member_bit_offset(t, i) // 8)


def _missing_struct(btf: CData, name: str, owner: str) -> KeyError:
    """Why a struct is not in an object's BTF, and how to keep it there."""
    known = struct_names(btf)
    listed = ", ".join(known[:20]) + (", ..." if len(known) > 20 else "") if known else "none"
    return KeyError(
        f"no struct named {name!r} in the BTF of {owner}: the compiler keeps only the types reached "
        f"from a global variable, a map or a function signature. Keep it with "
        f"`PLB_KEEP_STRUCT({name});` (from <pylibbpf/bpf_tools.h>), a global "
        f"(`struct {name} *keep_{name} __attribute__((unused));`) or a map's "
        f"`__type(value, struct {name})`; `pylibbpf inspect OBJ.bpf.o` lists the structs there are "
        f"(known: {listed})")


def struct_layout(btf: CData, name: str, owner: str = "the object") -> tuple[list[tuple[str, str, int, int]], int]:
    """(rows, size) of ``struct name``: rows are (field, type, count, offset). KeyError if absent."""
    type_id = _libbpf.btf__find_by_name_kind(btf, name, lib.BTF_KIND_STRUCT)
    if type_id < 0:
        type_id = _libbpf.btf__find_by_name_kind(btf, name, lib.BTF_KIND_TYPEDEF)
    if type_id < 0:
        raise _missing_struct(btf, name, owner)
    rows, size = type_layout(btf, type_id, name)
    if rows is None:
        raise KeyError(f"{name!r} in the BTF of {owner} is not a struct")
    return rows, size


def type_layout(btf: CData, type_id: int, label: str) -> tuple[list[tuple[str, str, int, int]] | None, int]:
    """(rows, size) of the struct or union ``type_id`` (typedefs resolved); rows None for other kinds.

    ValueError (naming the member) for what an EventDef cannot hold.
    """
    walker = _Walker(btf, label)
    _, t = walker.type(type_id, label)
    if _libbpf.btf_kind(t) not in (lib.BTF_KIND_STRUCT, lib.BTF_KIND_UNION):
        return None, 0
    walker.record(t, "", 0)
    return walker.rows, int(t.size)


def struct_names(btf: CData) -> list[str]:
    """The names of every named struct in the BTF, in type-id order."""
    names = []
    for type_id in range(1, _libbpf.btf__type_cnt(btf)):
        t = _libbpf.btf__type_by_id(btf, type_id, "btf__type_by_id")
        if _libbpf.btf_kind(t) == lib.BTF_KIND_STRUCT and t.name_off:
            names.append(_libbpf.btf__name_by_offset(btf, t.name_off))
    return names


def printable_name(name: str) -> str:
    """A BTF name for output: bytes that are not UTF-8 (kept as surrogates by
    ``btf__name_by_offset``, so the name finds its type again) shown as ``\\xNN``."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def struct_event_def(btf: CData, name: str, owner: str = "the object") -> EventDef:
    """``struct name`` of ``btf`` as an EventDef (see the module docstring).

    KeyError, explaining why a struct may be missing and how to keep it, when
    there is no such struct; ``owner`` names the object in that message.
    """
    rows, size = struct_layout(btf, name, owner)
    return EventDef.from_layout(printable_name(name), rows, size)


# --- typed values ----------------------------------------------------------------------------

class ValueType(abc.ABC):
    """How the bytes of one BTF type read and write as a Python value.

    ``name`` is a short type name (``u32``, ``bool``, ``char[16]``, ``u64[4]``,
    ``struct event``, ``bytes[12]``), ``size`` its size in bytes. ``decode``
    takes at least ``size`` bytes; ``encode`` returns exactly ``size`` bytes or
    raises TypeError/ValueError whose message starts with ``label``.
    """

    name: str = ""
    size: int = 0
    #: EventDef of a struct or union type, else None.
    event: EventDef | None = None
    #: Why this type reads as bytes (None when it is typed).
    why_bytes: str | None = None
    #: Whether bytes are one of this type's own values (char and u8 arrays, bytes): otherwise a
    #: typed map takes bytes of exactly the type's size as the raw value.
    takes_bytes: bool = False

    @abc.abstractmethod
    def decode(self, raw: bytes) -> Any:
        """Per subclass."""

    @abc.abstractmethod
    def encode(self, value: object, label: str) -> bytes:
        """Per subclass."""

    def described(self) -> EventDef | str:
        """What a user is shown as this type: the EventDef of a struct, else the type name."""
        return self.event if self.event is not None else self.name

    def __repr__(self) -> str:
        return f"<ValueType {self.name} ({self.size} bytes)>"


class BytesType(ValueType):
    """Bytes of a fixed size: the type of maps without BTF, and of types an EventDef cannot hold."""

    takes_bytes = True
    def __init__(self, size: int, why: str | None = None) -> None:
        self.size, self.name, self.why_bytes = size, f"bytes[{size}]", why

    def decode(self, raw: bytes) -> bytes:
        return bytes(raw[:self.size])

    def encode(self, value: object, label: str) -> bytes:
        if isinstance(value, int) and not isinstance(value, bool):
            try:  # an int for bytes: little-endian, as BPF programs store it (the raw protocol's keys)
                return value.to_bytes(self.size, "little", signed=value < 0)
            except OverflowError:
                raise ValueError(f"{label}: {value} does not fit {self.size} bytes") from None
        data = bytes(_check.buffer(value, label)) if not isinstance(value, bytes) else value
        if len(data) != self.size:
            raise ValueError(f"{label}: needs {self.size} bytes, got {len(data)}")
        return data


_INT_FORMATS = {1: "b", 2: "h", 4: "i", 8: "q"}


class IntType(ValueType):
    """An integer (``u8``..``i64``, ``ptr``), a ``bool`` or an enum (an int; names accepted when writing)."""

    def __init__(self, name: str, size: int, signed: bool, *, is_bool: bool = False,
                 enumerators: Mapping[str, int] | None = None) -> None:
        self.name, self.size, self.is_bool = name, size, is_bool
        code = _INT_FORMATS[size]
        self._struct = struct.Struct("<" + (code if signed else code.upper()))
        bits = 8 * size
        self.lo, self.hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        self.enumerators = dict(enumerators or {})

    def decode(self, raw: bytes) -> int | bool:
        value: int = self._struct.unpack_from(raw)[0]
        return bool(value) if self.is_bool else value

    def encode(self, value: object, label: str) -> bytes:
        if self.is_bool:
            if not isinstance(value, bool) and value not in (0, 1):
                raise TypeError(f"{label} ({self.name}) must be a bool, got {value!r} ({type(value).__name__})")
            return self._struct.pack(int(value))  # type: ignore[call-overload]
        if isinstance(value, str) and self.enumerators:
            if value not in self.enumerators:
                raise ValueError(f"{label} ({self.name}) has no enumerator {value!r} "
                                 f"(known: {', '.join(self.enumerators)})")
            value = self.enumerators[value]
        return self._struct.pack(_check.integer(value, f"{label} ({self.name})", lo=self.lo, hi=self.hi))


class FloatType(ValueType):
    """A ``float`` (4 bytes) or ``double`` (8 bytes)."""

    def __init__(self, size: int) -> None:
        self.size, self.name = size, "float" if size == 4 else "double"
        self._struct = struct.Struct("<f" if size == 4 else "<d")

    def decode(self, raw: bytes) -> float:
        return float(self._struct.unpack_from(raw)[0])

    def encode(self, value: object, label: str) -> bytes:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{label} ({self.name}) must be a number, got {value!r} ({type(value).__name__})")
        try:  # an int past a double's range, or a number past a float's: OverflowError from either step
            return self._struct.pack(float(value))
        except OverflowError:
            shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:20]}... ({value.bit_length()}-bit int)" \
                if isinstance(value, int) else repr(value)
            raise ValueError(f"{label} ({self.name}) is out of range for a {self.name}, got {shown}") from None


class CharArrayType(ValueType):
    """``char[n]``: reads as str (up to the first NUL); writes str (UTF-8) or bytes of at most n, NUL-padded."""

    takes_bytes = True
    def __init__(self, count: int) -> None:
        self.size, self.name = count, f"char[{count}]"

    def decode(self, raw: bytes) -> str:
        return bytes(raw[:self.size]).split(b"\0", 1)[0].decode("utf-8", "replace")

    def encode(self, value: object, label: str) -> bytes:
        if isinstance(value, str):
            try:
                data = value.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(f"{label} ({self.name}) cannot be encoded as UTF-8: "
                                 f"{value[e.start:e.end]!r} at position {e.start} ({e.reason})") from None
        elif isinstance(value, (bytes, bytearray, memoryview)):
            data = bytes(value)
        else:
            raise TypeError(f"{label} ({self.name}) must be a str or bytes, got {type(value).__name__}")
        if len(data) > self.size:
            raise ValueError(f"{label} ({self.name}) holds {self.size} bytes, got {len(data)} ({value!r})")
        return data.ljust(self.size, b"\0")


class ByteArrayType(ValueType):
    """``unsigned char[n]`` / ``__u8[n]``: reads as the n bytes, NULs included (a MAC address, a hash).

    Writes bytes-like of at most n (zero-padded, as a C initializer) or a
    sequence of ints 0..255. Reading back gives all n bytes, so a value read
    from a map is the same key when written again.
    """

    takes_bytes = True
    def __init__(self, count: int) -> None:
        self.size, self.name = count, f"u8[{count}]"

    def decode(self, raw: bytes) -> bytes:
        return bytes(raw[:self.size])

    def encode(self, value: object, label: str) -> bytes:
        if isinstance(value, (bytes, bytearray, memoryview)):
            data = bytes(value)
        elif isinstance(value, Iterable) and not isinstance(value, (str, Mapping)):
            items = list(value)
            for i, item in enumerate(items):
                _check.integer(item, f"{label}[{i}] (u8)", lo=0, hi=255)
            data = bytes(items)
        else:
            raise TypeError(f"{label} ({self.name}) must be bytes or a sequence of ints, "
                            f"got {value!r} ({type(value).__name__})")
        if len(data) > self.size:
            raise ValueError(f"{label} ({self.name}) holds {self.size} bytes, got {len(data)}")
        return data.ljust(self.size, b"\0")


class ArrayType(ValueType):
    """An array of another type: reads as a tuple; writes a sequence of at most ``count`` (the rest zero)."""

    def __init__(self, elem: ValueType, count: int) -> None:
        self.elem, self.count = elem, count
        self.size, self.name = elem.size * count, f"{elem.name}[{count}]"

    def decode(self, raw: bytes) -> tuple[Any, ...]:
        n = self.elem.size
        return tuple(self.elem.decode(raw[i * n:(i + 1) * n]) for i in range(self.count))

    def encode(self, value: object, label: str) -> bytes:
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
            raise TypeError(f"{label} ({self.name}) must be a sequence, got {type(value).__name__}")
        items = list(value)
        if len(items) > self.count:
            raise ValueError(f"{label} ({self.name}) holds {self.count} items, got {len(items)}")
        parts = [self.elem.encode(v, f"{label}[{i}]") for i, v in enumerate(items)]
        return b"".join(parts).ljust(self.size, b"\0")


def value_type_of_u32() -> ValueType:
    """A ``u32`` (a devmap's ifindex, a cpumap's queue size where the map has no BTF type)."""
    return IntType("u32", 4, False)


class FdValueType(ValueType):
    """The value of a map of fds: written as an fd (an int, a Map, a Program, a socket), read back as an int.

    ``what`` says what the fd is and what the kernel returns when the value is
    read from user space (a program's or map's id, a socket's cookie).
    """

    def __init__(self, size: int, what: str) -> None:
        self.size, self.name, self.what = size, f"fd[{what}]", what

    def decode(self, raw: bytes) -> int:
        return int.from_bytes(raw[:self.size], "little")

    def encode(self, value: object, label: str) -> bytes:
        if isinstance(value, int) and not isinstance(value, bool):
            fd = value
        elif hasattr(value, "fileno") and callable(value.fileno):
            fd = value.fileno()  # a socket, a file
        elif isinstance(getattr(value, "fd", None), int):
            fd = getattr(value, "fd")  # a Map, a Program  # noqa: B009
        else:
            raise TypeError(f"{label} must be {self.what.split(' (')[0]}: an fd or an object with one "
                            f"(Map, Program, socket), got {type(value).__name__}")
        fd = _check.integer(fd, f"{label} (fd)", lo=0, hi=_check.INT32_MAX)
        return fd.to_bytes(self.size, "little")


class RecordType(ValueType):
    """A struct or union: reads as a record of :attr:`event`; writes a record or a mapping.

    A mapping may nest (``{"ports": {"sport": 80}}``) or use the dotted field
    names (``{"ports.sport": 80}``); missing fields and padding are zero.
    """

    def __init__(self, event: EventDef) -> None:
        self.event, self.size, self.name = event, event.size, f"struct {event.name}"

    def decode(self, raw: bytes) -> EventRecord:
        assert self.event is not None
        return self.event.parse(raw)

    def encode(self, value: object, label: str) -> bytes:
        assert self.event is not None
        if isinstance(value, EventRecord):
            return self.event.serialize(value)
        if not isinstance(value, Mapping):
            raise TypeError(f"{label} ({self.name}) must be a record or a mapping, got {type(value).__name__}")
        try:
            return self.event.serialize(_flatten(value, ""))
        except (TypeError, ValueError) as e:
            raise type(e)(f"{label}: {e}") from None


def _flatten(values: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """``{"a": {"b": 1}, "c": [{"d": 2}]}`` -> ``{"a.b": 1, "c.0.d": 2}`` (the flattened field names)."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, name + "."))
        elif isinstance(value, Sequence) and value and all(isinstance(v, Mapping) for v in value):
            for i, item in enumerate(value):
                flat.update(_flatten(item, f"{name}.{i}."))
        else:
            flat[name] = value
    return flat


def value_type(btf: CData, type_id: int, label: str) -> ValueType:
    """The :class:`ValueType` of BTF type ``type_id`` (typedefs and modifiers resolved).

    ``label`` names what has this type (a variable, a map's key) in the
    EventDef of a struct without a name. Never raises for an unsupported type:
    that becomes a :class:`BytesType` with the reason.
    """
    what = f"btf({label})"
    resolved = _libbpf.btf__resolve_type(btf, type_id, what)
    t = _libbpf.btf__type_by_id(btf, resolved, what)
    kind = _libbpf.btf_kind(t)
    if kind == lib.BTF_KIND_INT:
        if _libbpf.btf_int_offset(t) or _libbpf.btf_int_bits(t) != t.size * 8 or t.size not in _INT_FORMATS:
            return BytesType(int(t.size), f"{label} is a {_libbpf.btf_int_bits(t)}-bit integer")
        encoding = _libbpf.btf_int_encoding(t)
        if encoding & lib.BTF_INT_BOOL:
            return IntType("bool", int(t.size), False, is_bool=True)
        signed = bool(encoding & lib.BTF_INT_SIGNED)
        return IntType(_INT_NAMES[(int(t.size), signed)], int(t.size), signed)
    if kind in (lib.BTF_KIND_ENUM, lib.BTF_KIND_ENUM64):
        signed = bool(_libbpf.btf_kflag(t))
        return IntType(_INT_NAMES[(int(t.size), signed)], int(t.size), signed, enumerators=enumerators(btf, t))
    if kind == lib.BTF_KIND_PTR:
        return IntType("ptr", 8, False)
    if kind == lib.BTF_KIND_FLOAT and t.size in (4, 8):
        return FloatType(int(t.size))
    if kind == lib.BTF_KIND_ARRAY:
        arr = _libbpf.btf_array(t)
        elem = value_type(btf, arr.type, label)
        count = int(arr.nelems)
        if elem.name in ("i8", "u8"):
            char = _char_name(btf, arr.type)
            if char == "char":
                return CharArrayType(count)
            if elem.name == "u8":  # unsigned char, __u8, uint8_t: binary data, not text
                return ByteArrayType(count)
        if isinstance(elem, BytesType):
            return BytesType(elem.size * count, elem.why_bytes)
        return ArrayType(elem, count)
    if kind in (lib.BTF_KIND_STRUCT, lib.BTF_KIND_UNION):
        name = _libbpf.btf__name_by_offset(btf, t.name_off) or label
        try:
            rows, size = type_layout(btf, resolved, name)
            return RecordType(EventDef.from_layout(name, rows or [], size))
        except ValueError as e:
            return BytesType(int(t.size), str(e))
    size = _libbpf.btf__resolve_size(btf, resolved, what) if kind != lib.BTF_KIND_FUNC_PROTO else 0
    return BytesType(size, f"{label} has BTF kind {kind}")


def _char_name(btf: CData, type_id: int) -> str:
    """The C name of a one-byte integer type (``char``, ``signed char``, ``unsigned char``...).

    Only plain ``char`` is text: C code spells a string ``char[n]``, while
    ``unsigned char``/``__u8`` arrays hold binary data (addresses, hashes) whose
    zero bytes are data.
    """
    t = _libbpf.btf__type_by_id(btf, _libbpf.btf__resolve_type(btf, type_id, "btf(char)"), "btf(char)")
    if _libbpf.btf_kind(t) != lib.BTF_KIND_INT or t.size != 1:
        return ""
    return str(_libbpf.btf__name_by_offset(btf, t.name_off))


@dataclass(frozen=True)
class DataSecVar:
    """One variable of a global-data section: its name, byte offset, size and BTF type id."""

    name: str
    offset: int
    size: int
    type_id: int


def datasec_vars(btf: CData, type_id: int) -> tuple[str, list[DataSecVar]] | None:
    """(section name, variables) of the DATASEC ``type_id``; None when it is another kind (or 0)."""
    if type_id <= 0:
        return None
    t = _libbpf.btf__type_by_id(btf, type_id, "btf(datasec)")
    if _libbpf.btf_kind(t) != lib.BTF_KIND_DATASEC:
        return None
    section = _libbpf.btf__name_by_offset(btf, t.name_off)
    infos = _libbpf.btf_var_secinfos(t)
    out = []
    for i in range(_libbpf.btf_vlen(t)):
        info = infos[i]
        var = _libbpf.btf__type_by_id(btf, info.type, f"btf({section})")
        if _libbpf.btf_kind(var) != lib.BTF_KIND_VAR:
            continue
        out.append(DataSecVar(_libbpf.btf__name_by_offset(btf, var.name_off), int(info.offset), int(info.size),
                              int(var.type)))
    return section, out
