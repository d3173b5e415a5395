"""Maps that own their fd (opened by id or pin, or created at run time), and the types of map values.

A :class:`~pylibbpf.Map` of an object reads its type, sizes and BTF types
from libbpf's ``struct bpf_map``. A Map that owns its fd has no such thing:

1. :class:`MapFd` holds the fd (closed once: ``close()`` or the finalizer)
   and the kernel's description of the map (``bpf_map_get_info_by_fd``),
   which never changes once the map exists.
2. Its key and value types come from the map's BTF in the kernel
   (:func:`kernel_types`: ``btf__load_from_kernel_by_id``, read once, then
   freed), or from the types given to ``Map.create`` (:func:`given_types`).
3. Maps whose values are fds, ids or ifindexes are typed by their map type
   (:func:`special_value`), whichever way the map was reached; a map of
   maps reads each inner map back as a Map of its own (``InnerMapType``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from . import _check, _close, _kernel, _libbpf, loaded
from ._ffi import lib
from ._map_types import FD_VALUES, INT_VALUES, MAP_OF_MAPS
from .btf import BytesType, FdValueType, IntType, RecordType, ValueType, value_type, value_type_of_u32
from .errors import BPFError, ClosedError
from .events import EventDef

CData = Any
Types = tuple[ValueType | None, ValueType | None]

#: The scalar type names ``Map.create`` takes for ``key_type`` / ``value_type``: (size, signed).
SCALARS = {"u8": (1, False), "i8": (1, True), "u16": (2, False), "i16": (2, True), "u32": (4, False),
           "i32": (4, True), "u64": (8, False), "i64": (8, True), "bool": (1, False)}


class InnerMapType(FdValueType):
    """A map of maps' value: written as a map (or its fd), read back as a Map of the inner map.

    ``opener`` opens a map by id (``Map.from_id``): each read returns a new
    Map that owns its fd.
    """

    def __init__(self, size: int, opener: Callable[[int], Any]) -> None:
        super().__init__(size, FD_VALUES[lib.BPF_MAP_TYPE_ARRAY_OF_MAPS])
        self.name, self.opener = "map", opener

    def decode(self, raw: bytes) -> Any:
        return self.opener(int.from_bytes(raw[:self.size], "little"))


def special_value(map_type: int, value_size: int, value: ValueType | None,
                  opener: Callable[[int], Any]) -> ValueType | None:
    """The value type a map's type decides (fds, ids, ifindexes), else ``value`` as BTF gave it."""
    if map_type in MAP_OF_MAPS and value_size == 4:
        return InnerMapType(value_size, opener)
    if map_type in FD_VALUES and value_size in (4, 8):
        return FdValueType(value_size, FD_VALUES[map_type])
    if value is None and map_type in INT_VALUES and value_size == 4:
        return value_type_of_u32()
    return value


class MapFd:
    """The fd a Map owns and the kernel's description of its map.

    ``close()`` closes the fd once (idempotent); the finalizer closes a
    forgotten one. ``live()`` is the fd, or ClosedError once closed.
    """

    def __init__(self, fd: int, info: loaded.MapInfo) -> None:
        self.info = info
        self.fd: int | None = fd
        self.pin_path: str | None = None
        self._finalizer = _close.finalizer(self, os.close, fd)

    def live(self) -> int:
        if self.fd is None:
            raise ClosedError(f"map {self.info.name!r}")
        return self.fd

    def close(self) -> None:
        if self.fd is not None:
            self.fd = None
            self._finalizer()


def adopt(fd: int, what: str, types: Callable[[loaded.MapInfo], Types] | None) -> tuple[MapFd, Types]:
    """A MapFd owning ``fd`` (a map's) and its (key, value) types: ``types(info)``, or from its BTF.

    On any error the fd is closed before the error propagates.
    """
    try:
        info = loaded.map_info(fd, what)
        found = kernel_types(info, what) if types is None else types(info)
    except BaseException:
        os.close(fd)
        raise
    return MapFd(fd, info), found


def kernel_types(info: loaded.MapInfo, what: str) -> Types:
    """(key, value) types from the map's BTF in the kernel; None where it has none (or bytes would do)."""
    if not info.btf_id or not (info.btf_key_type_id or info.btf_value_type_id):
        return None, None
    try:
        btf = _kernel.btf__load_from_kernel_by_id(info.btf_id, f"{what}: btf__load_from_kernel_by_id")
    except BPFError:
        return None, None  # BTF this libbpf cannot parse alone (a module's split BTF): bytes
    try:
        return (_typed(btf, info.btf_key_type_id, info.key_size, f"{info.name}_key"),
                _typed(btf, info.btf_value_type_id, info.value_size, f"{info.name}_value"))
    finally:
        _kernel.btf__free(btf)  # the value types keep no pointer into it


def _typed(btf: CData, type_id: int, size: int, label: str) -> ValueType | None:
    if not type_id:
        return None
    vt = value_type(btf, type_id, label)
    return None if isinstance(vt, BytesType) or vt.size != size else vt


def given_types(key_type: object, value_type: object, key_size: int, value_size: int) -> Types:
    """The types ``Map.create`` was given (an EventDef or a scalar name, or None for bytes), size-checked."""
    return (_given(key_type, key_size, "key_type", "key_size"),
            _given(value_type, value_size, "value_type", "value_size"))


def _given(kind: object, size: int, name: str, size_name: str) -> ValueType | None:
    vt: ValueType
    if kind is None:
        return None
    if isinstance(kind, EventDef):
        vt = RecordType(kind)
    elif isinstance(kind, str):
        known = SCALARS.get(kind)
        if known is None:
            raise ValueError(f"{name} {kind!r} is not a scalar type name (known: {', '.join(SCALARS)}) "
                             "or an EventDef")
        vt = IntType(kind, known[0], known[1], is_bool=kind == "bool")
    else:
        raise TypeError(f"{name} must be an EventDef, a scalar type name or None, got {type(kind).__name__}")
    if vt.size != size:
        raise ValueError(f"{name} {vt.name} is {vt.size} bytes, {size_name} is {size}")
    return vt


def map_type_id(value: object) -> int:
    """A ``BPF_MAP_TYPE_*`` value from an int or a name without the prefix, any case (``"hash"``)."""
    if isinstance(value, str):
        name = value.upper().removeprefix("BPF_MAP_TYPE_")
        found = getattr(lib, f"BPF_MAP_TYPE_{name}", None) if name.replace("_", "").isalnum() else None
        if not isinstance(found, int):
            raise ValueError(f"type {value!r} is not a map type (a BPF_MAP_TYPE_* name: 'hash', 'array', ...)")
        return found
    return _check.integer(value, "type", lo=1, hi=_check.UINT32_MAX)


def create(map_type: object, key_size: object, value_size: object, max_entries: object, name: str | None,
           flags: object, key_type: object, value_type: object, inner_fd: int | None) -> tuple[int, Types]:
    """``Map.create``'s arguments checked, the map created: its fd and the (key, value) types given."""
    kind = map_type_id(map_type)
    key_size = _check.integer(key_size, "key_size", lo=0, hi=_check.UINT32_MAX)
    value_size = _check.integer(value_size, "value_size", lo=0, hi=_check.UINT32_MAX)
    max_entries = _check.integer(max_entries, "max_entries", lo=0, hi=_check.UINT32_MAX)
    flags = _check.flags(flags, "flags", bits=32)
    if name is not None and len(_check.string(name, "name")) > 15:
        raise ValueError(f"name {name!r} is longer than the kernel's 15 characters")
    given = given_types(key_type, value_type, key_size, value_size)
    label = name or ""
    fd = _kernel.bpf_map_create(kind, name, key_size, value_size, max_entries, flags, inner_fd,
                                f"bpf_map_create({label})")
    return fd, given


def check_compatible(fd: int, mine: tuple[int, int, int], name: str, path: str, what: str) -> None:
    """ValueError naming both when the map behind ``fd`` (pinned at ``path``) has another type or sizes."""
    info = loaded.map_info(fd, what)
    theirs = (info.type, info.key_size, info.value_size)
    if mine != theirs:
        def shown(t: tuple[int, int, int]) -> str:
            return f"{_libbpf.libbpf_map_type_str(t[0])} with {t[1]}-byte keys and {t[2]}-byte values"
        raise ValueError(f"{what}: the map pinned at {path} is a {shown(theirs)}, map {name!r} is a {shown(mine)}")
