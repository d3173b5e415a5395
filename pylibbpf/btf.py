"""Event layouts read from BTF: what the compiler laid out, as an EventDef.

``struct_event_def(obj, "event")`` walks ``struct event`` in the object's BTF
through libbpf's btf API and returns an :class:`~pylibbpf.events.EventDef` whose
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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _libbpf
from ._ffi import lib

if TYPE_CHECKING:
    from .events import EventDef
    from .object import BPFObject

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
        kind = lib.btf_kind(t)
        if kind == lib.BTF_KIND_INT:
            if lib.btf_int_offset(t) or lib.btf_int_bits(t) != t.size * 8:
                raise self.refuse(member, "is a bit-sized integer")
            name = _libbpf.btf__name_by_offset(self.btf, t.name_off)
            if t.size == 1 and name in ("char", "signed char", "unsigned char"):
                return "char" if name == "char" else ("i8" if name == "signed char" else "u8")
            return _INT_NAMES[(t.size, bool(lib.btf_int_encoding(t) & lib.BTF_INT_SIGNED))]
        if kind in (lib.BTF_KIND_ENUM, lib.BTF_KIND_ENUM64):
            return _INT_NAMES[(t.size, bool(lib.btf_kflag(t)))]
        if kind == lib.BTF_KIND_PTR:
            return "ptr"
        kinds = {lib.BTF_KIND_FLOAT: "is a floating-point number", lib.BTF_KIND_FUNC_PROTO: "is a function"}
        raise self.refuse(member, kinds.get(kind, f"has BTF kind {kind}"))

    def member(self, type_id: int, name: str, offset: int) -> None:
        """Add the rows for one member of type ``type_id`` at byte ``offset``."""
        _, t = self.type(type_id, name)
        kind = lib.btf_kind(t)
        if kind in (lib.BTF_KIND_STRUCT, lib.BTF_KIND_UNION):
            self.record(t, name, offset)
        elif kind == lib.BTF_KIND_ARRAY:
            self.array(t, name, offset)
        else:
            self.rows.append((name, self.scalar(t, name), 1, offset))

    def array(self, t: CData, name: str, offset: int) -> None:
        arr = lib.btf_array(t)
        count = int(arr.nelems)
        _, elem = self.type(arr.type, name)
        while lib.btf_kind(elem) == lib.BTF_KIND_ARRAY:  # int a[2][3] -> 6 ints
            inner = lib.btf_array(elem)
            count *= int(inner.nelems)
            _, elem = self.type(inner.type, name)
        if count == 0:
            return  # a flexible array member occupies no bytes of the struct
        if lib.btf_kind(elem) in (lib.BTF_KIND_STRUCT, lib.BTF_KIND_UNION):
            for i in range(count):
                self.record(elem, f"{name}.{i}", offset + i * int(elem.size))
        else:
            self.rows.append((name, self.scalar(elem, name), count, offset))

    def record(self, t: CData, prefix: str, offset: int) -> None:
        """Flatten a struct (every member) or a union (its first member)."""
        members = lib.btf_members(t)
        vlen = lib.btf_vlen(t)
        if lib.btf_kind(t) == lib.BTF_KIND_UNION:
            vlen = min(vlen, 1)
        for i in range(vlen):
            m = members[i]
            mname = _libbpf.btf__name_by_offset(self.btf, m.name_off)
            full = f"{prefix}.{mname}" if prefix and mname else (mname or prefix)
            if lib.btf_member_bitfield_size(t, i):
                raise self.refuse(full or f"#{i}", f"is a bitfield ({lib.btf_member_bitfield_size(t, i)} bits)")
            self.member(m.type, full, offset + lib.btf_member_bit_offset(t, i) // 8)


def struct_layout(btf: CData, name: str) -> tuple[list[tuple[str, str, int, int]], int]:
    """(rows, size) of ``struct name``: rows are (field, type, count, offset). KeyError if absent."""
    type_id = _libbpf.btf__find_by_name_kind(btf, name, lib.BTF_KIND_STRUCT)
    if type_id < 0:
        type_id = _libbpf.btf__find_by_name_kind(btf, name, lib.BTF_KIND_TYPEDEF)
    if type_id < 0:
        raise KeyError(f"no struct named {name!r} in the BTF")
    walker = _Walker(btf, name)
    _, t = walker.type(type_id, name)
    if lib.btf_kind(t) not in (lib.BTF_KIND_STRUCT, lib.BTF_KIND_UNION):
        raise KeyError(f"{name!r} in the BTF is not a struct")
    walker.record(t, "", 0)
    return walker.rows, int(t.size)


def struct_names(btf: CData) -> list[str]:
    """The names of every named struct in the BTF, in type-id order."""
    names = []
    for type_id in range(1, _libbpf.btf__type_cnt(btf)):
        t = _libbpf.btf__type_by_id(btf, type_id, "btf__type_by_id")
        if lib.btf_kind(t) == lib.BTF_KIND_STRUCT and t.name_off:
            names.append(_libbpf.btf__name_by_offset(btf, t.name_off))
    return names


def printable_name(name: str) -> str:
    """A BTF name for output: bytes that are not UTF-8 (kept as surrogates by
    ``btf__name_by_offset``, so the name finds its type again) shown as ``\\xNN``."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def struct_event_def(obj: BPFObject, name: str) -> EventDef:
    """``struct name`` of the object's BTF as an EventDef (see the module docstring)."""
    from .events import EventDef

    rows, size = struct_layout(obj._btf(), name)
    return EventDef._from_layout(printable_name(name), rows, size)
