"""The running kernel's BTF (``/sys/kernel/btf/vmlinux`` and its modules'): :class:`KernelBTF`, :func:`kernel`.

Exported from :mod:`pylibbpf.btf`; this module holds what that one and the
lookups share (:func:`enumerators`).
"""

from __future__ import annotations

import errno
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _check, _libbpf
from ._close import Closable
from ._ffi import ffi, lib

CData = Any


def enumerators(btf: CData, t: CData) -> dict[str, int]:
    """The enumerators of ENUM or ENUM64 type ``t`` with their values (signedness from BTF)."""
    out = {}
    if _libbpf.btf_kind(t) == lib.BTF_KIND_ENUM:
        items = _libbpf.btf_enum(t)
        signed = _libbpf.btf_kflag(t)
        for i in range(_libbpf.btf_vlen(t)):
            value = int(items[i].val)
            out[_libbpf.btf__name_by_offset(btf, items[i].name_off)] = value if signed else value & 0xFFFFFFFF
    else:
        items64 = _libbpf.btf_enum64(t)
        for i in range(_libbpf.btf_vlen(t)):
            value = int(_libbpf.btf_enum64_value(items64 + i))
            if _libbpf.btf_kflag(t) and value >= 1 << 63:
                value -= 1 << 64
            out[_libbpf.btf__name_by_offset(btf, items64[i].name_off)] = value
    return out


#: Where the kernel publishes its BTF: ``vmlinux``, and one file per loaded module built with BTF.
SYSFS_BTF_DIR = Path("/sys/kernel/btf")

_KINDS = {lib.BTF_KIND_INT: "int", lib.BTF_KIND_PTR: "ptr", lib.BTF_KIND_ARRAY: "array",
          lib.BTF_KIND_STRUCT: "struct", lib.BTF_KIND_UNION: "union", lib.BTF_KIND_ENUM: "enum",
          lib.BTF_KIND_ENUM64: "enum", lib.BTF_KIND_FWD: "fwd", lib.BTF_KIND_TYPEDEF: "typedef",
          lib.BTF_KIND_VOLATILE: "volatile", lib.BTF_KIND_CONST: "const", lib.BTF_KIND_RESTRICT: "restrict",
          lib.BTF_KIND_FUNC: "func", lib.BTF_KIND_FUNC_PROTO: "func_proto", lib.BTF_KIND_VAR: "var",
          lib.BTF_KIND_DATASEC: "datasec", lib.BTF_KIND_FLOAT: "float", lib.BTF_KIND_DECL_TAG: "decl_tag",
          lib.BTF_KIND_TYPE_TAG: "type_tag"}
#: The kinds a name is looked up as, in this order, when ``kind`` is not given.
_LOOKUP = ("struct", "union", "enum", "typedef", "func", "int", "float", "var", "datasec", "fwd")
_KIND_IDS = {"struct": (lib.BTF_KIND_STRUCT,), "union": (lib.BTF_KIND_UNION,),
             "enum": (lib.BTF_KIND_ENUM, lib.BTF_KIND_ENUM64), "typedef": (lib.BTF_KIND_TYPEDEF,),
             "func": (lib.BTF_KIND_FUNC,), "int": (lib.BTF_KIND_INT,), "float": (lib.BTF_KIND_FLOAT,),
             "var": (lib.BTF_KIND_VAR,), "datasec": (lib.BTF_KIND_DATASEC,), "fwd": (lib.BTF_KIND_FWD,)}
_RECORDS = (lib.BTF_KIND_STRUCT, lib.BTF_KIND_UNION)


@dataclass(frozen=True)
class BTFMember:
    """One member of a struct or union: ``name`` (a dotted path from :meth:`KernelBTF.member`, '' for an
    anonymous member), its C ``type``, its byte ``offset`` (of the byte holding its first bit, for a
    bitfield), ``bit_offset`` from the start of the outer struct, and ``bitfield_size`` (0: not a bitfield)."""

    name: str
    type: str
    offset: int
    bit_offset: int
    bitfield_size: int = 0


@dataclass(frozen=True)
class BTFType:
    """What :meth:`KernelBTF.type` says about one type.

    ``kind``: ``struct``, ``union``, ``enum`` (ENUM and ENUM64), ``typedef``, ``func``, ``int``, ``float``,
    ``var``, ``datasec``, ``fwd``, ... ``size`` in bytes (a typedef's resolved size; None for a function or a
    forward declaration). ``members`` for a struct or union, ``values`` (enumerator -> value) for an enum,
    ``target`` the C type a typedef, variable or function refers to (a function: its prototype).
    """

    kind: str
    name: str
    type_id: int
    size: int | None
    members: tuple[BTFMember, ...] = ()
    values: dict[str, int] = field(default_factory=dict)
    target: str | None = None


def _c_name(btf: CData, type_id: int, depth: int = 0) -> str:
    """A C spelling of ``type_id``: ``int``, ``struct list_head``, ``char[16]``, ``const char *``."""
    if type_id == 0:
        return "void"
    if depth > 16:
        return "..."
    t = _libbpf.btf__type_by_id(btf, type_id, "btf(type name)")
    kind = _libbpf.btf_kind(t)
    name = _libbpf.btf__name_by_offset(btf, t.name_off) or "(anon)"
    if kind in (lib.BTF_KIND_STRUCT, lib.BTF_KIND_UNION, lib.BTF_KIND_ENUM, lib.BTF_KIND_ENUM64):
        return f"{_KINDS[kind]} {name}"
    if kind == lib.BTF_KIND_FWD:
        return f"{'union' if _libbpf.btf_kflag(t) else 'struct'} {name}"
    if kind == lib.BTF_KIND_PTR:
        return _c_name(btf, t.type, depth + 1) + " *"
    if kind == lib.BTF_KIND_ARRAY:
        dims = ""
        while _libbpf.btf_kind(t) == lib.BTF_KIND_ARRAY:  # int a[2][3]: array(2) of array(3) of int
            arr = _libbpf.btf_array(t)
            dims += f"[{arr.nelems}]"
            elem = int(arr.type)
            t = _libbpf.btf__type_by_id(btf, elem, "btf(type name)")
        return _c_name(btf, elem, depth + 1) + dims
    if kind in (lib.BTF_KIND_CONST, lib.BTF_KIND_VOLATILE, lib.BTF_KIND_RESTRICT):
        return f"{_KINDS[kind]} {_c_name(btf, t.type, depth + 1)}"
    if kind in (lib.BTF_KIND_TYPE_TAG, lib.BTF_KIND_DECL_TAG):
        return _c_name(btf, t.type, depth + 1)
    if kind == lib.BTF_KIND_FUNC_PROTO:
        return _c_name(btf, t.type, depth + 1) + " (...)"
    return name


def _field_path(struct: object, field: object) -> None:
    """TypeError/ValueError for a struct name or member path that cannot name anything."""
    _check.string(struct, "struct")
    field = _check.string(field, "field")
    if not field or any(not part for part in field.split(".")):
        raise ValueError(f"field must be a member name or a dotted path, got {field!r}")


class KernelBTF(Closable):
    """The BTF of the running kernel (``/sys/kernel/btf/vmlinux``) or of one of its modules, parsed by libbpf.

    Get it from :func:`kernel` (one shared instance, loaded once) or :meth:`load` (one the caller owns).
    Lookups read the parsed BTF in memory and block only while another thread's lookup or ``close()``
    holds the instance's lock. Names missing raise KeyError naming what is missing; a struct member
    that has no byte offset (a bitfield) or a path through a member that is not a struct raises
    ValueError. ``close()`` is idempotent (a module's BTF is closed with the vmlinux one it is split on);
    a lookup after it raises ClosedError; memory not closed is freed when the object is collected.
    """

    _what = "KernelBTF"

    def __init__(self) -> None:
        """Not called directly: an instance comes from :func:`kernel` or :meth:`load`."""
        raise TypeError("KernelBTF is made with pylibbpf.btf.kernel() or KernelBTF.load(path)")

    @classmethod
    def _made(cls, ptr: CData, path: Path, base: KernelBTF | None) -> KernelBTF:
        obj = cls.__new__(cls)
        Closable.__init__(obj)
        obj._setup(ptr, path, base)
        return obj

    def _setup(self, ptr: CData, path: Path, base: KernelBTF | None) -> None:
        self._btf, self._path, self._base = ptr, path, base
        self._modules: dict[str, KernelBTF] = {}
        self._enumerators: dict[str, int] | None = None

    @classmethod
    def load(cls, path: str | os.PathLike[str] = SYSFS_BTF_DIR / "vmlinux") -> KernelBTF:
        """Parse a raw vmlinux BTF file (by default the running kernel's) into a new instance the caller owns
        (close it, or use it as a context manager). Its modules are read from the same directory.
        BPFError (errno from libbpf) when the file is missing or is not BTF."""
        where = Path(_check.path(path, "path"))
        return cls._made(_libbpf.btf__parse(str(where), f"btf__parse({where})"), where, None)

    @property
    def name(self) -> str:
        """``vmlinux`` or the module's name (the file's name)."""
        return self._path.name

    @property
    def path(self) -> str:
        return str(self._path)

    @property
    def c_ptr(self) -> CData:
        """The ``struct btf *`` for raw libbpf calls, valid while this object is open."""
        self._check_open()
        return self._btf

    def _open_btf(self) -> CData:
        """Under the lock: the BTF, or ClosedError."""
        self._check_open()
        return self._btf

    def _usable(self) -> bool:
        """Open, and this process's (not a parent's, inherited through fork)."""
        return not self.closed and self._owner_pid == os.getpid()

    def _find(self, btf: CData, name: str, kind: str | None) -> int:
        """The type id of ``name`` (the first of the lookup kinds when ``kind`` is None), or -1."""
        for k in (kind,) if kind else _LOOKUP:
            for kind_id in _KIND_IDS[k]:
                type_id = _libbpf.btf__find_by_name_kind(btf, name, kind_id)
                if type_id > 0:
                    return type_id
        return -1

    def _describe(self, btf: CData, type_id: int) -> BTFType:
        t = _libbpf.btf__type_by_id(btf, type_id, f"btf({type_id})")
        kind_id = _libbpf.btf_kind(t)
        kind = _KINDS.get(kind_id, str(kind_id))
        name = _libbpf.btf__name_by_offset(btf, t.name_off)
        size: int | None = None
        if kind_id not in (lib.BTF_KIND_FUNC, lib.BTF_KIND_FUNC_PROTO, lib.BTF_KIND_FWD, lib.BTF_KIND_DECL_TAG):
            size = _libbpf.btf__resolve_size(btf, type_id, f"btf({name})")
        members: tuple[BTFMember, ...] = ()
        if kind_id in _RECORDS:
            members = tuple(self._member_at(btf, t, i, 0, None) for i in range(_libbpf.btf_vlen(t)))
        values = enumerators(btf, t) if kind == "enum" else {}
        target = None
        if kind_id in (lib.BTF_KIND_TYPEDEF, lib.BTF_KIND_VAR, lib.BTF_KIND_FUNC, lib.BTF_KIND_PTR,
                       lib.BTF_KIND_CONST, lib.BTF_KIND_VOLATILE, lib.BTF_KIND_RESTRICT):
            target = _c_name(btf, int(t.type))
        return BTFType(kind, name, type_id, size, members, values, target)

    def _member_at(self, btf: CData, t: CData, i: int, base_bits: int, path: str | None) -> BTFMember:
        m = _libbpf.btf_members(t)[i]
        name = _libbpf.btf__name_by_offset(btf, m.name_off)
        bits = base_bits + _libbpf.btf_member_bit_offset(t, i)
        return BTFMember(path if path is not None else name, _c_name(btf, int(m.type)), bits // 8, bits,
                         _libbpf.btf_member_bitfield_size(t, i))

    def type(self, name: str, kind: str | None = None) -> BTFType:
        """The type named ``name``: looked up as a struct, union, enum, typedef, func, int, float, var,
        datasec, fwd, in this order, or as ``kind`` only. KeyError when there is none; ValueError for an
        unknown ``kind``."""
        _check.string(name, "name")
        if kind is not None:
            _check.choice(kind, "kind", tuple(_KIND_IDS))
        self._check_open()
        with self._lock:
            btf = self._open_btf()
            type_id = self._find(btf, name, kind)
            if type_id < 0:
                raise KeyError(f"no {kind or 'type'} named {name!r} in the BTF of {self.name}")
            return self._describe(btf, type_id)

    def has_type(self, name: str, kind: str | None = None) -> bool:
        """Whether :meth:`type` finds ``name`` (as ``kind``, when given)."""
        try:
            self.type(name, kind)
        except KeyError:
            return False
        return True

    def member(self, struct: str, field: str) -> BTFMember:
        """Member ``field`` of struct or union ``struct``: a name, or a dotted path through nested structs
        (``"se.vruntime"``); members of anonymous structs and unions are found by their own name.
        KeyError naming the struct or the field that is missing; ValueError for a path through a member
        that is not a struct or union."""
        _field_path(struct, field)
        self._check_open()
        with self._lock:
            btf = self._open_btf()
            type_id = max(self._find(btf, struct, "struct"), self._find(btf, struct, "union"))
            if type_id < 0:
                type_id = self._find(btf, struct, "typedef")
            t = self._record(btf, type_id, struct) if type_id > 0 else None
            if t is None:
                raise KeyError(f"no struct or union named {struct!r} in the BTF of {self.name}")
            bits, done = 0, list[str]()
            found: tuple[int, int, int] | None = None
            for part in field.split("."):
                if found is not None:
                    t = self._record(btf, found[0], f"{struct}.{'.'.join(done)}")
                    if t is None:
                        raise ValueError(f"{struct}.{'.'.join(done)} is not a struct or union "
                                         f"(it is {_c_name(btf, found[0])}): it has no member {part!r}")
                found = self._search(btf, t, part, bits)
                if found is None:
                    raise KeyError(f"{_c_name(btf, type_id) if not done else struct + '.' + '.'.join(done)} "
                                   f"has no member {part!r} (in the BTF of {self.name})")
                done.append(part)
                bits = found[1]
            assert found is not None
            return BTFMember(field, _c_name(btf, found[0]), found[1] // 8, found[1], found[2])

    def _record(self, btf: CData, type_id: int, label: str) -> CData | None:
        """The struct or union ``type_id`` is (typedefs and modifiers skipped), else None."""
        t = _libbpf.btf__type_by_id(btf, _libbpf.btf__resolve_type(btf, type_id, f"btf({label})"), f"btf({label})")
        return t if _libbpf.btf_kind(t) in _RECORDS else None

    def _search(self, btf: CData, t: CData, name: str, bits: int) -> tuple[int, int, int] | None:
        """(type id, bit offset, bitfield size) of member ``name`` of record ``t`` (at ``bits``), looking into
        anonymous members too, or None."""
        members = _libbpf.btf_members(t)
        for i in range(_libbpf.btf_vlen(t)):
            m = members[i]
            at = bits + _libbpf.btf_member_bit_offset(t, i)
            mname = _libbpf.btf__name_by_offset(btf, m.name_off)
            if mname == name:
                return int(m.type), at, _libbpf.btf_member_bitfield_size(t, i)
            if not mname:
                inner = self._record(btf, int(m.type), name)
                if inner is not None and (found := self._search(btf, inner, name, at)) is not None:
                    return found
        return None

    def has_field(self, struct: str, field: str) -> bool:
        """Whether struct ``struct`` exists and has member ``field`` (see :meth:`member`; a bitfield counts)."""
        _field_path(struct, field)  # bad arguments raise; a missing struct or member answers False
        try:
            self.member(struct, field)
        except (KeyError, ValueError):
            return False
        return True

    def field_offset(self, struct: str, field: str) -> int:
        """The byte offset of ``field`` (see :meth:`member`) from the start of ``struct``. ValueError for a
        bitfield (it has no byte offset: :meth:`member` gives its ``bit_offset``)."""
        m = self.member(struct, field)
        if m.bitfield_size:
            raise ValueError(f"{struct}.{field} is a {m.bitfield_size}-bit bitfield at bit offset {m.bit_offset}: "
                             f"it has no byte offset; member() gives its bit offset")
        return m.offset

    def enum_values(self, enum: str) -> dict[str, int]:
        """Every enumerator of enum ``enum`` (a typedef to an enum too) with its value. KeyError if absent."""
        _check.string(enum, "enum")
        self._check_open()
        with self._lock:
            btf = self._open_btf()
            type_id = self._find(btf, enum, "enum")
            if type_id < 0 and (type_id := self._find(btf, enum, "typedef")) > 0:
                type_id = _libbpf.btf__resolve_type(btf, type_id, f"btf({enum})")
            t = _libbpf.btf__type_by_id(btf, type_id, f"btf({enum})") if type_id > 0 else None
            if t is None or _libbpf.btf_kind(t) not in (lib.BTF_KIND_ENUM, lib.BTF_KIND_ENUM64):
                raise KeyError(f"no enum named {enum!r} in the BTF of {self.name}")
            return enumerators(btf, t)

    def enum_value(self, enum: str, name: str) -> int:
        """The value of enumerator ``name`` of enum ``enum``. KeyError naming the enum or the enumerator."""
        values = self.enum_values(enum)
        _check.string(name, "name")
        if name not in values:
            raise KeyError(f"enum {enum} has no enumerator {name!r} (in the BTF of {self.name})")
        return values[name]

    def enumerator(self, name: str) -> int:
        """The value of enumerator ``name`` of whichever enum has it (the first by type id). The first call
        walks every type once (a fraction of a second for vmlinux); KeyError when no enum has it."""
        _check.string(name, "name")
        self._check_open()
        with self._lock:
            btf = self._open_btf()
            if self._enumerators is None:
                index: dict[str, int] = {}
                for type_id in range(_libbpf.btf__type_cnt(btf) - 1, 0, -1):  # backwards: the first id wins
                    t = _libbpf.btf__type_by_id(btf, type_id, "btf(enum)")
                    if _libbpf.btf_kind(t) in (lib.BTF_KIND_ENUM, lib.BTF_KIND_ENUM64):
                        index.update(enumerators(btf, t))
                self._enumerators = index
            if name not in self._enumerators:
                raise KeyError(f"no enumerator named {name!r} in the BTF of {self.name}")
            return self._enumerators[name]

    def module_names(self) -> list[str]:
        """The kernel modules that have BTF here (the files beside vmlinux), sorted."""
        try:
            return sorted(p.name for p in self._path.parent.iterdir() if p.name != "vmlinux")
        except OSError:
            return []

    def module(self, name: str) -> KernelBTF:
        """The BTF of kernel module ``name`` (``/sys/kernel/btf/<name>``), split on this vmlinux BTF: it finds
        the module's types and vmlinux's. Loaded once, closed with this object. FileNotFoundError when the
        module has no BTF (not loaded, or built without it); ValueError for a name that is not a module's."""
        _check.string(name, "name")
        if not name or "/" in name or name in (".", "..", "vmlinux"):
            raise ValueError(f"module must be a kernel module's name, got {name!r}")
        if self._base is not None:
            raise ValueError(f"{self.name} is a module's BTF: ask the vmlinux one for module {name!r}")
        self._check_open()
        with self._lock:
            btf = self._open_btf()
            cached = self._modules.get(name)
            if cached is not None and cached._usable():
                return cached
            where = self._path.parent / name
            if not where.exists():
                raise FileNotFoundError(errno.ENOENT, f"kernel module {name!r} has no BTF here (the module is not "
                                        f"loaded, or was built without BTF); modules with BTF: "
                                        f"{', '.join(self.module_names()) or 'none'}", str(where))
            mod = KernelBTF._made(_libbpf.btf__parse_split(str(where), btf, f"btf__parse_split({where})"), where, self)
            self._modules[name] = mod
            return mod

    def _release(self) -> None:
        for mod in self._modules.values():
            mod.close()  # split on this BTF: before it is freed
        self._modules.clear()
        ffi.release(self._btf)

    def __repr__(self) -> str:
        return f"<KernelBTF {self.name}{' (closed)' if self.closed else ''}>"


_kernel_lock = threading.Lock()
_kernel: KernelBTF | None = None


def kernel(module: str | None = None) -> KernelBTF:
    """The running kernel's BTF, loaded on the first call and shared by every later one (thread-safe); with
    ``module``, that module's BTF split on it (:meth:`KernelBTF.module`).

    The shared instance lives as long as the process: it is freed at exit. ``close()`` on it frees it now,
    and the next call loads it again (so do calls in a forked child). BPFError when the kernel has no BTF
    (no /sys/kernel/btf/vmlinux: built without CONFIG_DEBUG_INFO_BTF).
    """
    global _kernel
    with _kernel_lock:
        if _kernel is None or not _kernel._usable():
            _kernel = KernelBTF.load(SYSFS_BTF_DIR / "vmlinux")
        shared = _kernel
    return shared if module is None else shared.module(module)
