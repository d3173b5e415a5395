"""What a typed skeleton is made of: an object's maps, programs, globals and events, typed from its BTF.

:func:`read_model` opens a CO-RE object with libbpf (nothing is loaded) and
returns a :class:`Model`, which :mod:`pylibbpf._skelemit` writes out as
Python. The leaves of every type come from :func:`pylibbpf.btf.value_type`,
the walker that types map elements and globals at run time, so a generated
annotation says what ``obj.maps``/``obj.globals`` give back; structs are
walked here, member by member, because a skeleton keeps their nesting (one
class per struct) where an ``EventDef`` flattens it.

A type is one of :class:`Scalar` (int, bool, float), :class:`Text` (``char``
arrays: str), :class:`Raw` (bytes: ``unsigned char`` arrays, unions, structs
with bitfields, what a ValueType holds as bytes), :class:`EnumModel`,
:class:`StructModel` or :class:`ArrayRef` (tuples).
"""

from __future__ import annotations

import keyword
import os
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from . import _libbpf
from ._ffi import ffi, lib
from ._map_types import FD_VALUES, INT_VALUES, PER_CPU_TYPES
from .btf import (
    ArrayType,
    ByteArrayType,
    BytesType,
    CharArrayType,
    FloatType,
    IntType,
    RecordType,
    ValueType,
    datasec_vars,
    struct_names,
    value_type,
)

CData = Any

#: The sections whose variables a skeleton types (as ``obj.globals`` does).
GLOBAL_SECTIONS = (".rodata", ".data", ".bss")
#: Names a generated class body uses in its annotations or code: an attribute of that name would
#: shadow them there, so it gets a ``_``.
SHADOWING = frozenset({"int", "bool", "float", "str", "bytes", "tuple", "typing", "pylibbpf"})
#: struct module codes of the ValueType integer names (little-endian, no alignment: "<" formats).
INT_CODES = {"u8": "B", "i8": "b", "u16": "H", "i16": "h", "u32": "I", "i32": "i", "u64": "Q", "i64": "q",
             "ptr": "Q"}
_MODIFIERS = ("BTF_KIND_TYPEDEF", "BTF_KIND_CONST", "BTF_KIND_VOLATILE", "BTF_KIND_RESTRICT",
              "BTF_KIND_TYPE_TAG")


@dataclass(frozen=True)
class Scalar:
    """An integer, bool or floating-point number: ``py`` is its annotation, ``code`` its struct code."""

    py: str
    code: str
    ctype: str

    @property
    def size(self) -> int:
        return struct.calcsize("<" + self.code)


@dataclass(frozen=True)
class Text:
    """``char[count]``: a str cut at the first NUL."""

    count: int

    @property
    def size(self) -> int:
        return self.count


@dataclass(frozen=True)
class Raw:
    """Bytes of a fixed size. ``union``: BTF calls it a union (obj.maps would give a record);
    ``chars``: a ``char`` array kept as bytes (``raw_chars``; obj.maps would give a str)."""

    size: int
    union: bool = False
    chars: bool = False


@dataclass(eq=False)
class EnumModel:
    """An enum: one ``enum.IntEnum`` class; ``members`` are (attribute, C name, value)."""

    cls: str
    cname: str
    code: str
    members: list[tuple[str, str, int]]

    @property
    def size(self) -> int:
        return struct.calcsize("<" + self.code)


@dataclass(eq=False)
class FieldModel:
    """One member of a struct class: its attribute, C name, byte offset and type."""

    attr: str
    cname: str
    offset: int
    type: TypeRef


@dataclass(eq=False)
class StructModel:
    """A struct: one frozen class; ``const`` names its codec in the module."""

    cls: str
    cname: str
    size: int
    const: str = ""
    fields: list[FieldModel] = field(default_factory=list)


@dataclass(frozen=True)
class ArrayRef:
    """``elem[count]``: a tuple."""

    elem: TypeRef
    count: int

    @property
    def size(self) -> int:
        return self.elem.size * self.count


TypeRef = Scalar | Text | Raw | EnumModel | StructModel | ArrayRef


def needs_codec(t: TypeRef | None) -> bool:
    """Whether a skeleton reads this type itself: the object's own typing (``obj.maps``,
    ``obj.globals``) gives records for structs and unions and ints for enums, not the classes."""
    if isinstance(t, ArrayRef):
        return needs_codec(t.elem)
    return isinstance(t, (EnumModel, StructModel)) or (isinstance(t, Raw) and (t.union or t.chars))


def rawify(t: TypeRef) -> TypeRef:
    """``t`` with its ``char`` arrays as bytes (every byte, NULs included)."""
    if isinstance(t, Text):
        return Raw(t.count, chars=True)
    if isinstance(t, ArrayRef):
        return ArrayRef(rawify(t.elem), t.count)
    return t


def has_text(t: TypeRef) -> bool:
    return isinstance(t, Text) or (isinstance(t, ArrayRef) and has_text(t.elem))


@dataclass(eq=False)
class MapModel:
    """A map: ``name`` is what ``obj.maps`` takes (a global-data map's section name);
    ``key``/``value`` None: bytes."""

    name: str
    attr: str
    map_type: int
    per_cpu: bool
    key: TypeRef | None
    value: TypeRef | None


@dataclass(frozen=True)
class ProgModel:
    name: str
    attr: str
    section: str


@dataclass(eq=False)
class VarModel:
    """A global variable: ``key`` is its name in ``obj.globals``."""

    key: str
    attr: str
    type: TypeRef


@dataclass(eq=False)
class SectionModel:
    """A global-data section: ``attr`` on the skeleton (``rodata``), ``cls`` its class."""

    section: str
    attr: str
    cls: str
    vars: list[VarModel]


@dataclass(eq=False)
class EventModel:
    """A ring buffer's or perf event array's records: the reader ``attr`` of the skeleton."""

    map_name: str
    attr: str
    struct: StructModel
    perf: bool


@dataclass(eq=False)
class Model:
    """Everything a skeleton module holds, in the order it is written (deterministic)."""

    stem: str
    skel: str
    enums: list[EnumModel]
    structs: list[StructModel]
    maps: list[MapModel]
    progs: list[ProgModel]
    sections: list[SectionModel]
    events: list[EventModel]


# --- names ---------------------------------------------------------------------------------

def attr_name(cname: str, taken: set[str]) -> str:
    """A Python attribute for C name ``cname``, not in ``taken`` (which it joins).

    Leading underscores move to the end (a NamedTuple field cannot start with
    one, and a skeleton's own names do): ``_pad`` -> ``pad_``; keywords get a
    ``_`` (``from_``); a name taken already gets more.
    """
    name = re.sub(r"\W", "_", cname)
    stripped = name.lstrip("_")
    name = (stripped or "u") + "_" * (len(name) - len(stripped))
    if name[0].isdigit():
        name = "f" + name
    if keyword.iskeyword(name):
        name += "_"
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def camel(cname: str) -> str:
    """``flow_key`` -> ``FlowKey``, ``run_qlat`` -> ``RunQlat`` (other letters kept as they are)."""
    parts = [p for p in re.split(r"[\W_]+", cname) if p]
    name = "".join(p[0].upper() + p[1:] for p in parts) or "Anon"
    return name if not name[0].isdigit() else "S" + name


def snake_upper(cls: str) -> str:
    """``ExecEvent`` -> ``EXEC_EVENT``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", cls).upper()


def stem_of(path: str) -> str:
    """An object's name as libbpf derives it: its file name up to the first dot."""
    return os.path.basename(path).split(".", 1)[0]


# --- BTF -> types --------------------------------------------------------------------------

class _Types:
    """Turns BTF types into TypeRefs, one class per struct or enum (by BTF type id)."""

    def __init__(self, btf: CData, reserved: set[str], raw_chars: frozenset[str] = frozenset()) -> None:
        self.btf = btf
        self.raw_chars = raw_chars  # "struct.field" names (or "*") whose char arrays stay bytes
        self.raw_used: set[str] = set()
        self.classes = set(reserved)
        self.consts: set[str] = set()
        self.structs: dict[int, StructModel] = {}
        self.enums: dict[int, EnumModel] = {}
        self.order: list[StructModel | EnumModel] = []  # nested types before the types holding them
        self._modifiers = {getattr(lib, k) for k in _MODIFIERS}

    def class_name(self, base: str) -> str:
        name, n = base, 1
        while name in self.classes:
            n += 1
            name = f"{base}{n}"
        self.classes.add(name)
        return name

    def resolve(self, type_id: int) -> tuple[int, CData, str]:
        """(id, type, the last typedef's name) past typedefs and modifiers."""
        typedef = ""
        while True:
            t = _libbpf.btf__type_by_id(self.btf, type_id, "btf(skeleton)")
            kind = _libbpf.btf_kind(t)
            if kind not in self._modifiers:
                return type_id, t, typedef
            if kind == lib.BTF_KIND_TYPEDEF and not typedef:
                typedef = _libbpf.btf__name_by_offset(self.btf, t.name_off)
            type_id = int(t.type)

    def of(self, type_id: int, context: str) -> TypeRef:
        """The TypeRef of BTF type ``type_id``; ``context`` names an anonymous struct or enum."""
        rid, t, typedef = self.resolve(type_id)
        kind = _libbpf.btf_kind(t)
        name = _libbpf.btf__name_by_offset(self.btf, t.name_off) if t.name_off else ""
        if kind in (lib.BTF_KIND_STRUCT, lib.BTF_KIND_UNION):
            return self.struct(rid, t, name or typedef or context, kind == lib.BTF_KIND_UNION)
        vt = value_type(self.btf, rid, context)
        if kind == lib.BTF_KIND_ARRAY and isinstance(vt, ArrayType):
            arr = _libbpf.btf_array(t)
            return ArrayRef(self.of(int(arr.type), context), int(arr.nelems))
        if isinstance(vt, IntType) and vt.enumerators:
            return self.enum(rid, vt, name or typedef or context)
        return leaf(vt)

    def enum(self, rid: int, vt: IntType, cname: str) -> EnumModel:
        if rid not in self.enums:
            taken: set[str] = {"name", "value", "mro"}
            members = [(attr_name(k, taken), k, v) for k, v in vt.enumerators.items()]
            model = EnumModel(self.class_name(camel(cname)), cname, INT_CODES[vt.name], members)
            self.enums[rid] = model
            self.order.append(model)
        return self.enums[rid]

    def struct(self, rid: int, t: CData, cname: str, union: bool) -> TypeRef:
        size = int(t.size)
        if union:
            return Raw(size, union=True)
        if rid in self.structs:
            return self.structs[rid]
        members = self.members(t, 0, cname)
        if members is None:  # a bitfield: bytes (as obj.maps and obj.globals read it)
            return Raw(size)
        cls = self.class_name(camel(cname))
        model = StructModel(cls, cname, size, self.const_name(cls))
        taken = set(SHADOWING)
        for mname, offset, mtype in members:
            mtype = self.chars(mtype, f"{cname}.{mname}")
            if mtype.size:  # a flexible array member takes no bytes of the struct
                model.fields.append(FieldModel(attr_name(mname, taken), mname, offset, mtype))
        self.structs[rid] = model
        self.order.append(model)
        return model

    def members(self, t: CData, base: int, owner: str) -> list[tuple[str, int, TypeRef]] | None:
        """(C name, offset, type) of a struct's members, anonymous structs' members in line;
        None when one is a bitfield."""
        out: list[tuple[str, int, TypeRef]] = []
        members = _libbpf.btf_members(t)
        for i in range(_libbpf.btf_vlen(t)):
            if _libbpf.btf_member_bitfield_size(t, i):
                return None
            m = members[i]
            offset = base + _libbpf.btf_member_bit_offset(t, i) // 8
            mname = _libbpf.btf__name_by_offset(self.btf, m.name_off) if m.name_off else ""
            if not mname:
                _, inner, _ = self.resolve(int(m.type))
                if _libbpf.btf_kind(inner) == lib.BTF_KIND_STRUCT:
                    nested = self.members(inner, offset, owner)
                    if nested is None:
                        return None
                    out += nested
                    continue
                mname = f"anon{i}"
            out.append((mname, offset, self.of(int(m.type), owner + "_" + mname)))
        return out

    def chars(self, t: TypeRef, name: str) -> TypeRef:
        """``t`` as bytes when ``name`` (``struct.field``, a global) is in ``raw_chars`` (or it has "*")."""
        if not has_text(t) or not ({"*", name} & self.raw_chars):
            return t
        self.raw_used.add(name if name in self.raw_chars else "*")
        return rawify(t)

    def const_name(self, cls: str) -> str:
        name = base = snake_upper(cls)
        n = 1
        while name in self.consts:
            n += 1
            name = f"{base}{n}"
        self.consts.add(name)
        return name


def leaf(vt: ValueType) -> TypeRef:
    """The TypeRef of a ValueType that is not a struct, an enum or an array of other types."""
    if isinstance(vt, IntType):
        if vt.is_bool and vt.size == 1:
            return Scalar("bool", "?", "bool")
        return Scalar("int", INT_CODES[vt.name], vt.name)
    if isinstance(vt, FloatType):
        return Scalar("float", "f" if vt.size == 4 else "d", vt.name)
    if isinstance(vt, CharArrayType):
        return Text(vt.size)
    if isinstance(vt, (ByteArrayType, BytesType, RecordType)):
        return Raw(vt.size)
    raise AssertionError(f"no skeleton type for {vt!r}")  # value_type makes no other kind here


# --- the object ----------------------------------------------------------------------------

@dataclass(frozen=True)
class EventSpec:
    """``--event MAP=struct NAME``."""

    map_name: str
    struct: str

    @classmethod
    def parse(cls, text: str) -> EventSpec:
        """``MAP=struct NAME`` (or ``MAP=NAME``); ValueError naming ``text`` otherwise."""
        map_name, sep, rest = str(text).partition("=")
        rest = rest.strip()
        if rest.startswith("struct "):
            rest = rest[len("struct "):].strip()
        if not sep or not map_name.strip() or not re.fullmatch(r"\w+", rest):
            raise ValueError(f"event: expected MAP=struct NAME (as events='struct event'), got {text!r}")
        return cls(map_name.strip(), rest)


class _Object:
    """A CO-RE object opened by libbpf to be read, closed by :meth:`close`."""

    def __init__(self, data: bytes, name: str) -> None:
        self._keep = [ffi.from_buffer(data), _libbpf.cstr(name)]
        opts = ffi.new("struct bpf_object_open_opts *")
        opts.sz = ffi.sizeof("struct bpf_object_open_opts")
        opts.object_name = self._keep[1]
        self._keep.append(opts)
        self.ptr = _libbpf.bpf_object__open_mem(self._keep[0], len(data), opts, f"bpf_object__open_mem({name})")
        btf = _libbpf.bpf_object__btf(self.ptr)
        if btf == ffi.NULL:
            self.close()
            raise ValueError(f"{name}: the object has no BTF (compile it with clang -g): a skeleton is typed from it")
        self.btf = btf

    def close(self) -> None:
        _libbpf.bpf_object__close(self.ptr)
        self._keep.clear()


def read_model(data: bytes, stem: str, events: Sequence[EventSpec] = (),
               skel_name: str | None = None, raw_chars: Sequence[str] = ()) -> Model:
    """The skeleton model of the object ``data`` (its ELF bytes), named after ``stem``.

    ``events`` say which struct each ring buffer or perf event array carries;
    without one, a map takes the struct of the object's only global pointer to
    a struct (``struct event *keep_event __attribute__((unused));``, the usual
    way to keep a struct in BTF), if there is exactly one such struct. Every
    struct such a pointer names gets its class, events or not.
    ``raw_chars`` names the ``char`` arrays read as bytes, not str: a struct's
    member (``event.comm``, the struct's C name), a global variable, or ``*``
    for all of them (map keys and values too).
    ValueError for an event naming a map that is not a ring buffer or perf
    event array, or a ``raw_chars`` name that is no char array of the object;
    KeyError (as ``btf_struct``) for a struct the BTF lacks; BPFError when
    libbpf cannot open the object.
    """
    skel = skel_name or camel(stem) + "Skel"
    obj = _Object(data, stem)
    try:
        model = _Reader(obj.ptr, obj.btf, stem, skel, frozenset(raw_chars)).model(list(events))
    finally:
        obj.close()
    return model


class _Reader:
    def __init__(self, ptr: CData, btf: CData, stem: str, skel: str, raw_chars: frozenset[str]) -> None:
        self.ptr, self.btf, self.stem, self.skel = ptr, btf, stem, skel
        self.maps = _libbpf.bpf_object__maps(ptr)
        self.sections = self.datasecs()
        reserved = {skel, "Maps", "Progs", *(camel(attr_name(s, set())) for s, _, _ in self.sections)}
        self.types = _Types(btf, reserved, raw_chars)

    def datasecs(self) -> list[tuple[str, CData, list[Any]]]:
        """(section, map, variables) of every global-data map with a DATASEC, in object order."""
        out = []
        for m in self.maps:
            if not _libbpf.bpf_map__is_internal(m):
                continue
            sec = datasec_vars(self.btf, _libbpf.bpf_map__btf_value_type_id(m))
            if sec is not None:
                out.append((sec[0], m, sec[1]))
        return out

    def model(self, specs: list[EventSpec]) -> Model:
        events = self.read_events(specs)
        for name in self.hinted_structs():  # kept in BTF for user space: a class (and codec) each
            self.types.of(_libbpf.btf__find_by_name_kind(self.btf, name, lib.BTF_KIND_STRUCT), camel(name))
        maps = self.read_maps()
        sections = self.read_sections()
        progs = self.read_progs()
        unused = sorted(self.types.raw_chars - self.types.raw_used - {"*"})
        if unused:
            raise ValueError(f"raw_chars: {', '.join(map(repr, unused))} names no char array of a struct "
                             "member (struct.field) or a global variable of the object")
        enums = [t for t in self.types.order if isinstance(t, EnumModel)]
        structs = [t for t in self.types.order if isinstance(t, StructModel)]
        return Model(self.stem, self.skel, enums, structs, maps, progs, sections, events)

    def map_name(self, m: CData) -> str:
        for section, sm, _ in self.sections:
            if sm == m:
                return section
        return str(_libbpf.bpf_map__name(m))

    def read_maps(self) -> list[MapModel]:
        taken = set(SHADOWING)
        out = []
        for m in sorted(self.maps, key=self.map_name):
            name = self.map_name(m)
            attr = attr_name(name.lstrip(".").replace(".", "_"), taken)
            mtype = _libbpf.bpf_map__type(m)
            value = self.side(m, _libbpf.bpf_map__btf_value_type_id(m), _libbpf.bpf_map__value_size(m), attr, "Value")
            vsize = _libbpf.bpf_map__value_size(m)
            if mtype in FD_VALUES and vsize in (4, 8):
                value = Scalar("int", "I" if vsize == 4 else "Q", "fd")
            elif value is None and mtype in INT_VALUES and vsize == 4:
                value = Scalar("int", "I", "u32")
            key = self.side(m, _libbpf.bpf_map__btf_key_type_id(m), _libbpf.bpf_map__key_size(m), attr, "Key")
            out.append(MapModel(name, attr, mtype, mtype in PER_CPU_TYPES, key, value))
        return out

    def side(self, m: CData, type_id: int, size: int, attr: str, what: str) -> TypeRef | None:
        """A map's key or value type as ``Map`` reads it: None (bytes) without BTF, for global data,
        for what a ValueType holds as bytes, or when the BTF size is not the map's."""
        if not type_id or _libbpf.bpf_map__is_internal(m):
            return None
        vt = value_type(self.btf, type_id, attr)
        if isinstance(vt, BytesType) or vt.size != size:
            return None
        return self.types.chars(self.types.of(type_id, camel(attr) + what), f"{attr}.{what.lower()}")

    def read_sections(self) -> list[SectionModel]:
        keys: set[str] = set()
        attrs: set[str] = {"maps", "progs", "obj", "links", "loaded", "closed", "open", "load", "attach", "close",
                           "default_object", *SHADOWING}
        out = []
        for section, _, variables in self.sections:
            if not section.startswith(GLOBAL_SECTIONS) or not variables:
                continue
            attr = attr_name(section.lstrip(".").replace(".", "_"), attrs)
            vars_: list[VarModel] = []
            taken = set(SHADOWING)
            for var in variables:
                key = var.name if var.name not in keys else f"{section}:{var.name}"
                keys.add(key)
                vt = value_type(self.btf, var.type_id, var.name)
                t: TypeRef = Raw(var.size) if vt.size != var.size or isinstance(vt, BytesType) else \
                    self.types.chars(self.types.of(var.type_id, camel(var.name)), var.name)
                vars_.append(VarModel(key, attr_name(var.name, taken), t))
            out.append(SectionModel(section, attr, camel(attr), vars_))
        return out

    def read_progs(self) -> list[ProgModel]:
        taken = set(SHADOWING)
        progs = [(_libbpf.bpf_program__name(p), _libbpf.bpf_program__section_name(p))
                 for p in _libbpf.bpf_object__programs(self.ptr)]
        return [ProgModel(name, attr_name(name, taken), section) for name, section in sorted(progs)]

    def hinted_structs(self) -> list[str]:
        """The structs of global pointers to a struct (``struct event *keep_event;``), by name."""
        found = []
        for _, _, variables in self.sections:
            for var in variables:
                _, t, _ = self.types.resolve(var.type_id)
                if _libbpf.btf_kind(t) != lib.BTF_KIND_PTR:
                    continue
                _, target, _ = self.types.resolve(int(t.type))
                if _libbpf.btf_kind(target) == lib.BTF_KIND_STRUCT and target.name_off:
                    found.append(_libbpf.btf__name_by_offset(self.btf, target.name_off))
        return sorted(set(found))

    def read_events(self, specs: list[EventSpec]) -> list[EventModel]:
        readers = {lib.BPF_MAP_TYPE_RINGBUF: False, lib.BPF_MAP_TYPE_PERF_EVENT_ARRAY: True}
        by_name = {str(_libbpf.bpf_map__name(m)): m for m in self.maps}
        chosen: dict[str, str] = {}
        for spec in specs:
            m = by_name.get(spec.map_name)
            if m is None:
                known = ", ".join(sorted(n for n, x in by_name.items() if _libbpf.bpf_map__type(x) in readers))
                raise ValueError(f"event {spec.map_name}=struct {spec.struct}: the object has no map "
                                 f"{spec.map_name!r} (ring buffers and perf event arrays: {known or 'none'})")
            if _libbpf.bpf_map__type(m) not in readers:
                kind = _libbpf.libbpf_map_type_str(_libbpf.bpf_map__type(m))
                raise ValueError(f"event {spec.map_name}=struct {spec.struct}: map {spec.map_name!r} ({kind}) is "
                                 "not a ring buffer or perf event array")
            chosen[spec.map_name] = spec.struct
        hinted = self.hinted_structs()
        out = []
        taken = {"maps", "progs", "obj", "links", "loaded", "closed", "open", "load", "attach", "close",
                 "default_object", *SHADOWING}
        taken |= {attr_name(s.lstrip(".").replace(".", "_"), set()) for s, _, _ in self.sections}
        for name in sorted(by_name):
            m = by_name[name]
            if _libbpf.bpf_map__type(m) not in readers:
                continue
            struct = chosen.get(name) or (hinted[0] if len(hinted) == 1 else None)
            if struct is None:
                continue
            type_id = _libbpf.btf__find_by_name_kind(self.btf, struct, lib.BTF_KIND_STRUCT)
            if type_id < 0:
                names = ", ".join(struct_names(self.btf)) or "none"
                raise KeyError(f"event {name}=struct {struct}: no struct named {struct!r} in the object's BTF "
                               "(the compiler keeps only types reached from a global, a map or a function "
                               f"signature; known: {names})")
            model = self.types.of(type_id, camel(struct))
            if not isinstance(model, StructModel):
                raise ValueError(f"event {name}=struct {struct}: the struct has a bitfield: a skeleton reads "
                                 "its records as bytes only (use the map with a RingBuffer)")
            attr = name if name not in taken else name + "_events"
            out.append(EventModel(name, attr_name(attr, taken), model, readers[_libbpf.bpf_map__type(m)]))
        return out
