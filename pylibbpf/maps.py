"""BPF maps as typed mappings.

:class:`Map` is one map of a :class:`~pylibbpf.BPFObject` (``bpf_map``), or a
map that owns its fd (:meth:`Map.from_id`, :meth:`Map.from_pin`,
:meth:`Map.create`; :mod:`pylibbpf._map_fd`): a
``collections.abc.MutableMapping`` whose keys and values are typed from the
map's BTF (``__type(key, ...)``, ``__type(value, ...)``), with batch operations,
sizing and pinning before load, maps of maps, and stack-trace reading.
``Map.raw`` is the same protocol on bytes (:class:`RawMap`). ``obj.globals``
lives in :mod:`pylibbpf.globals`.

The owner (the object) is reached only through its public ``name``,
``loaded`` and ``c_ptr`` (which raises ClosedError once it is closed), so this
module does not import the object module.
"""

from __future__ import annotations

import abc
import builtins
import errno
import os
import sys
from collections.abc import (
    Callable,
    ItemsView,
    Iterable,
    Iterator,
    KeysView,
    Mapping,
    MutableMapping,
    Sequence,
    ValuesView,
)
from typing import TYPE_CHECKING, Any, Generic, Protocol

from . import _check, _kernel, _libbpf, _map_batch, _map_fd, loaded
from ._ffi import ffi, lib
from ._map_batch import ENOTSUPP as ENOTSUPP  # also reachable as pylibbpf.maps.ENOTSUPP
from ._map_types import ARRAY_TYPES, KEYLESS, MAP_OF_MAPS, NO_ELEMENTS, PER_CPU_TYPES, K, V
from .btf import BytesType, ValueType, value_type
from .errors import BPFError
from .events import EventDef

CData = Any



class MapOwner(Protocol):
    """What a map needs of its object: its name, whether it is loaded, its C handle (or ClosedError)."""

    @property
    def name(self) -> str: ...

    @property
    def loaded(self) -> bool: ...

    @property
    def c_ptr(self) -> CData: ...


_NO_KEY: Any = object()  # pop()'s "no argument" marker: None is a key or a default like any other


class _Elements(MutableMapping[Any, Any]):
    """The element protocol of a map, shared by :class:`Map` (typed) and :class:`RawMap` (bytes).

    Subclasses say how keys and values are encoded and decoded.
    """

    _map: Map

    # -- encoding (per subclass) --------------------------------------------------------------

    @abc.abstractmethod
    def _key_bytes(self, key: object, what: str) -> bytes:
        """Per subclass."""

    @abc.abstractmethod
    def _key_value(self, raw: bytes) -> Any:
        """Per subclass."""

    @abc.abstractmethod
    def _one_value_bytes(self, value: object, what: str) -> bytes:
        """Per subclass."""

    @abc.abstractmethod
    def _one_value(self, raw: bytes) -> Any:
        """Per subclass."""

    def _value_bytes(self, value: object, what: str) -> bytes:
        """The kernel's value layout: per-CPU maps take one value per possible CPU, 8-byte aligned."""
        m = self._map
        count, stride = m._value_layout()
        if not m.per_cpu:
            return self._one_value_bytes(value, what)
        if isinstance(value, (str, bytes, bytearray, memoryview, Mapping)) or not isinstance(value, Sequence):
            raise TypeError(f"{what}: map {m.name!r} is per-CPU: its value is a sequence of {count} values "
                            f"(one per possible CPU), not {type(value).__name__}")
        if len(value) != count:
            raise ValueError(f"{what}: map {m.name!r} takes {count} value(s), one per possible CPU, got {len(value)}")
        return b"".join(self._one_value_bytes(v, what).ljust(stride, b"\0") for v in value)

    def _value(self, raw: bytes) -> Any:
        m = self._map
        if not m.per_cpu:
            return self._one_value(raw)
        count, stride = m._value_layout()
        return tuple(self._one_value(raw[i * stride:(i + 1) * stride]) for i in range(count))

    # -- queues, stacks, bloom filters (no keys) ---------------------------------------------------

    def push(self, value: Any, *, flags: int = 0) -> None:
        """Push ``value`` onto a queue or stack map (``bpf_map_update_elem`` with no key).

        ``flags``: ``lib.BPF_EXIST`` replaces the oldest value when the map is
        full; otherwise a full map raises BPFError (E2BIG). TypeError for
        another map type.
        """
        what = f"push({self._map.name})"
        fd = self._map._keyless_fd(what, (lib.BPF_MAP_TYPE_QUEUE, lib.BPF_MAP_TYPE_STACK))
        _libbpf.bpf_map_update_elem(fd, ffi.NULL, _libbpf.cbuf(self._value_bytes(value, what)),
                                    _check.flags(flags, "flags"), what)

    def pop(self, key: Any = _NO_KEY, default: Any = _NO_KEY) -> Any:
        """``m.pop()``: remove and return the next value of a queue (oldest) or stack (newest), None when empty.

        ``m.pop(key[, default])`` on a map with keys: as ``dict.pop``.
        """
        if key is not _NO_KEY:
            return super().pop(key) if default is _NO_KEY else super().pop(key, default)
        what = f"pop({self._map.name})"
        fd = self._map._keyless_fd(what, (lib.BPF_MAP_TYPE_QUEUE, lib.BPF_MAP_TYPE_STACK))
        value = ffi.new("char[]", max(1, self._map.value_size))
        if not _libbpf.bpf_map_lookup_and_delete_elem(fd, ffi.NULL, value, what):
            return None
        return self._value(bytes(ffi.buffer(value, self._map.value_size)))

    def peek(self) -> Any:
        """The value :meth:`pop` would return, left in place; None when empty."""
        what = f"peek({self._map.name})"
        fd = self._map._keyless_fd(what, (lib.BPF_MAP_TYPE_QUEUE, lib.BPF_MAP_TYPE_STACK))
        value = ffi.new("char[]", max(1, self._map.value_size))
        if not _libbpf.bpf_map_lookup_elem(fd, ffi.NULL, value, what):
            return None
        return self._value(bytes(ffi.buffer(value, self._map.value_size)))

    def add(self, value: Any) -> None:
        """Add ``value`` to a bloom filter map; ``value in m`` then is True (and may be for others)."""
        what = f"add({self._map.name})"
        fd = self._map._keyless_fd(what, (lib.BPF_MAP_TYPE_BLOOM_FILTER,))
        _libbpf.bpf_map_update_elem(fd, ffi.NULL, _libbpf.cbuf(self._value_bytes(value, what)), 0, what)

    # -- one element ----------------------------------------------------------------------------

    def lookup(self, key: Any) -> Any:
        """The value of ``key``, or None when the key is not in the map (``bpf_map_lookup_elem``)."""
        what = f"bpf_map_lookup_elem({self._map.name})"
        raw = self._map._lookup(self._key_bytes(key, what), what)
        return None if raw is None else self._value(raw)

    def __getitem__(self, key: Any) -> Any:
        value = self.lookup(key)
        if value is None:
            raise KeyError(key)
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        self._update_one(key, value, 0)

    def _update_one(self, key: Any, value: Any, flags: int) -> None:
        what = f"bpf_map_update_elem({self._map.name})"
        fd = self._map._element_fd(what)
        ckey = _libbpf.cbuf(self._key_bytes(key, what))
        _libbpf.bpf_map_update_elem(fd, ckey, _libbpf.cbuf(self._value_bytes(value, what)), flags, what)

    def update(self, *args: Any, flags: int = 0, **kwargs: Any) -> None:  # type: ignore[override]
        """``update(key, value, flags=0)``: set one element; ``update(mapping_or_pairs)``: set several.

        ``flags``: ``lib.BPF_ANY`` (0, create or replace), ``BPF_NOEXIST``
        (create only: BPFError EEXIST when the key is there), ``BPF_EXIST``
        (replace only: BPFError ENOENT). The mapping form sets element by
        element, as ``dict.update``; :meth:`update_batch` sets them in one call.
        """
        flags = _check.flags(flags, "flags")
        if len(args) == 3 and not kwargs:  # update(key, value, flags), the positional form
            flags = _check.flags(args[2], "flags")
            args = args[:2]
        if len(args) == 2 and not kwargs:
            self._update_one(args[0], args[1], flags)
            return
        if len(args) > 1:
            raise TypeError(f"update takes (key, value) or one mapping, got {len(args)} arguments")
        for key, value in _check.key_value_pairs(args[0] if args else {}, kwargs):
            self._update_one(key, value, flags)

    def delete(self, key: Any) -> None:
        """Remove ``key`` (``bpf_map_delete_elem``); KeyError when it is not there.

        TypeError for array maps, whose elements always exist (set them to zero).
        """
        what = f"bpf_map_delete_elem({self._map.name})"
        fd = self._map._element_fd(what)
        self._map._refuse_delete(what)
        if not _libbpf.bpf_map_delete_elem(fd, _libbpf.cbuf(self._key_bytes(key, what)), what):
            raise KeyError(key)

    def __delitem__(self, key: Any) -> None:
        self.delete(key)

    def __contains__(self, key: object) -> bool:
        """``key in m``; for a bloom filter, ``value in m``: False means never added, True maybe added."""
        if self._map.type == lib.BPF_MAP_TYPE_BLOOM_FILTER:
            what = f"contains({self._map.name})"
            fd = self._map._keyless_fd(what, (lib.BPF_MAP_TYPE_BLOOM_FILTER,))
            return _libbpf.bpf_map_lookup_elem(fd, ffi.NULL, _libbpf.cbuf(self._value_bytes(key, what)), what)
        return self.lookup(key) is not None

    # -- iteration ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        """The keys, by ``bpf_map_get_next_key`` (a key deleted meanwhile may restart a hash walk)."""
        for raw in self._map._raw_keys():
            yield self._key_value(raw)

    def __len__(self) -> int:
        """``max_entries`` for array maps; the number of keys (a walk) for the others."""
        m = self._map
        if m.type in ARRAY_TYPES:
            return m.max_entries
        return sum(1 for _ in m._raw_keys())

    def items(self) -> ItemsView[Any, Any]:
        """(key, value) pairs, read in batches where the map type has them (see :meth:`lookup_batch`)."""
        return _map_batch.BatchItems(self)

    def values(self) -> ValuesView[Any]:
        return _map_batch.BatchValues(self)

    def clear(self) -> None:
        """Remove every element (batched); array maps, whose elements cannot be removed, are zeroed."""
        m = self._map
        what = f"clear({m.name})"
        m._element_fd(what)
        if m.type in ARRAY_TYPES:
            m._write_raw([(k, bytes(m._value_layout()[0] * m._value_layout()[1])) for k in m._raw_keys()], 0)
        else:
            m._delete_raw(list(m._raw_keys()))

    # -- batches --------------------------------------------------------------------------------

    def lookup_batch(self) -> list[tuple[Any, Any]]:
        """Every (key, value) pair, read with ``BPF_MAP_LOOKUP_BATCH`` (a few hundred per call).

        Falls back to a walk (``get_next_key`` + ``lookup_elem`` per key) for a
        map type or kernel without the batch command. Not a snapshot: elements
        the program changes meanwhile may be read before or after the change.
        """
        return [(self._key_value(k), self._value(v)) for k, v in self._map._read_raw(delete=False)]

    def pop_items(self) -> list[tuple[Any, Any]]:
        """Read and remove every element: counters read each interval, nothing counted twice or lost.

        Hash maps: ``BPF_MAP_LOOKUP_AND_DELETE_BATCH`` (each element read and
        deleted atomically), falling back to ``bpf_map_lookup_and_delete_elem``
        per key. Array maps cannot remove elements: they are read, then set to
        zero, batch by batch (an increment between the read and the zeroing of
        its batch is lost: use a hash map for exact counts).
        """
        m = self._map
        if m.type in ARRAY_TYPES:
            pairs = m._read_raw(delete=False)
            zero = bytes(m._value_layout()[0] * m._value_layout()[1])
            m._write_raw([(k, zero) for k, _ in pairs], 0)
        else:
            pairs = m._read_raw(delete=True)
        return [(self._key_value(k), self._value(v)) for k, v in pairs]

    def update_batch(self, mapping: Mapping[Any, Any] | Iterable[tuple[Any, Any]], flags: int = 0) -> None:
        """Set every (key, value) of ``mapping`` with ``BPF_MAP_UPDATE_BATCH``.

        ``flags`` as for :meth:`update`, applied to each element. The elements
        are checked and encoded before any is written; a kernel error raises
        after the ones before it were written. Falls back to one update per
        element for a map type or kernel without the batch command.
        """
        flags = _check.flags(flags, "flags")
        m = self._map
        what = f"bpf_map_update_batch({m.name})"
        m._element_fd(what)
        pairs = [(self._key_bytes(k, what), self._value_bytes(v, what)) for k, v in _check.key_value_pairs(mapping, {})]
        m._write_raw(pairs, flags)

    def delete_batch(self, keys: Iterable[Any]) -> int:
        """Delete ``keys`` with ``BPF_MAP_DELETE_BATCH``; returns how many were deleted.

        Keys not in the map are skipped (a program or LRU eviction may have
        removed them). TypeError for array maps. Falls back to one delete per
        key for a map type or kernel without the batch command.
        """
        m = self._map
        what = f"bpf_map_delete_batch({m.name})"
        m._element_fd(what)
        m._refuse_delete(what)
        if isinstance(keys, (str, bytes, Mapping)):
            raise TypeError(f"{what}: keys must be an iterable of keys, got {type(keys).__name__}")
        return m._delete_raw([self._key_bytes(k, what) for k in keys])

    # Maps are kernel objects: equal only to themselves (a Mapping would compare contents).
    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)


class RawMap(_Elements):
    """``Map.raw``: the map's element protocol on bytes, whatever its BTF says.

    Keys are bytes of ``key_size`` (an int is accepted, little-endian); values
    are bytes of ``value_size``, or for per-CPU maps a tuple with one bytes
    value per possible CPU. Same methods as :class:`Map`: ``m.raw[k]``,
    ``lookup``, ``update``, ``delete``, ``lookup_batch``, ``pop_items``...
    """

    def __init__(self) -> None:
        """Not called directly: ``m.raw`` is a map's RawMap."""
        raise TypeError("RawMap objects come from a map's m.raw")

    def _key_bytes(self, key: object, what: str) -> bytes:
        return self._map._raw_key(key, what)

    def _key_value(self, raw: bytes) -> bytes:
        return raw

    def _one_value_bytes(self, value: object, what: str) -> bytes:
        return self._map._raw_value(value, what)

    def _one_value(self, raw: bytes) -> bytes:
        return bytes(raw[:self._map.value_size])

    def __repr__(self) -> str:
        return f"<RawMap {self._map.name!r}>"


class Map(_Elements, Generic[K, V]):
    """One map of a BPFObject (``bpf_map``): a typed ``MutableMapping``, ``Map[K, V]`` to type checkers.

    Keys and values are typed from the map's BTF: ints, bools, str for char
    arrays, tuples for other arrays, records (``EventDef.parse`` results) for
    structs, which are written from a record or a mapping; bytes where the map
    has no BTF type (``__uint(key_size, ...)``) or a type a record cannot hold
    (``key_type``/``value_type`` say which). Per-CPU maps give a tuple with one
    value per possible CPU and take a sequence of that length. ``m.raw`` is the
    same protocol on bytes.

    ``m[k]`` (KeyError when missing), ``m.lookup(k)`` (None when missing),
    ``m[k] = v``, ``m.update(k, v, flags=)``, ``del m[k]``, ``k in m``,
    ``len(m)``, iteration, ``keys/values/items/get/clear``, and the batch
    operations ``lookup_batch``, ``update_batch``, ``delete_batch``,
    ``pop_items``. Element access needs the object loaded (BPFError EINVAL
    before), raises ClosedError once it is closed, and TypeError for ring
    buffers and perf event arrays, which have no elements to look up.
    Array maps: ``del`` is a TypeError (their elements always exist) and
    ``len`` is ``max_entries``. A map of maps takes a Map (or its fd) as a
    value and reads each inner map back as a new Map that owns its fd.

    A map of an object lives as long as its object; a map that owns its fd
    (:meth:`from_id`, :meth:`from_pin`, :meth:`create`, a map of maps'
    value) is closed with :meth:`close` (idempotent; a context manager; its
    finalizer closes a forgotten one), and the kernel frees the map when
    nothing else holds it.
    """

    if TYPE_CHECKING:  # the element protocol in the map's key and value types (a generated skeleton's maps)
        def __getitem__(self, key: K) -> V: ...
        def __setitem__(self, key: K, value: V) -> None: ...
        def __delitem__(self, key: K) -> None: ...
        def __iter__(self) -> Iterator[K]: ...
        def lookup(self, key: K) -> V | None: ...
        def keys(self) -> KeysView[K]: ...
        def values(self) -> ValuesView[V]: ...
        def items(self) -> ItemsView[K, V]: ...
        def lookup_batch(self) -> list[tuple[K, V]]: ...
        def pop_items(self) -> list[tuple[K, V]]: ...
        def update_batch(self, mapping: Mapping[K, V] | Iterable[tuple[K, V]], flags: int = 0) -> None: ...
        def delete_batch(self, keys: Iterable[K]) -> int: ...

    def __init__(self) -> None:
        """Not called directly: a map comes from ``obj.maps[name]``, :meth:`from_id`, :meth:`from_pin`
        or :meth:`create`."""
        raise TypeError("Map objects come from obj.maps[name], Map.from_id(), Map.from_pin() or Map.create()")

    def _setup(self, owner: MapOwner | None, ptr: CData, btf: CData | None,
               own: _map_fd.MapFd | None = None, types: _map_fd.Types | None = None) -> None:
        self._owner = owner
        self._ptr = ptr
        self._own = own  # the fd and description of a map that owns its fd (None: an object's)
        self._btf = btf  # the object's BTF (None: no BTF), owned by the object
        self._map = self
        self._inner: Map | None = None
        self.name = _libbpf.bpf_map__name(ptr) if own is None else own.info.name
        self.raw = raw_map(self)
        self._types: tuple[ValueType | None, ValueType | None] | None = None
        self._ncpus = 0
        if own is not None and types is not None:
            self._types = (types[0], _map_fd.special_value(own.info.type, own.info.value_size, types[1],
                                                           Map.from_id))
        self._value_types()  # now, before load: see _value_types

    def _check(self) -> CData:
        """The ``struct bpf_map *`` (None for a map that owns its fd); ClosedError once closed."""
        if self._own is not None:
            self._own.live()
            return None
        assert self._owner is not None
        self._owner.c_ptr  # noqa: B018 -- raises ClosedError once the object is closed
        return self._ptr

    def _fixed(self) -> _map_fd.MapFd:
        assert self._own is not None  # callers checked that _check() is None: a map that owns its fd
        return self._own

    # -- maps that own their fd ----------------------------------------------------------------------

    @classmethod
    def from_id(cls, map_id: int) -> Map:
        """Open the map with kernel id ``map_id`` (``bpf_map_get_fd_by_id``): a Map that owns a new fd.

        Typed from the map's BTF in the kernel where it has key/value types
        (a map an object with BTF created), else bytes. BPFError (ENOENT)
        when no map has that id, (EPERM) without CAP_SYS_ADMIN.
        """
        map_id = _check.integer(map_id, "map_id", lo=1, hi=_check.UINT32_MAX)
        what = f"bpf_map_get_fd_by_id({map_id})"
        return _owned(_kernel.get_fd_by_id("map", map_id, what), what, None)

    @classmethod
    def from_pin(cls, path: str | os.PathLike[str]) -> Map:
        """Open the map pinned at ``path`` in bpffs (``bpf_obj_get``): a Map that owns a new fd.

        Typed as :meth:`from_id`. BPFError (ENOENT) when nothing is pinned
        there, (EINVAL) naming what the pin holds when it is not a map.
        """
        p = _check.path(path, "path")
        what = f"bpf_obj_get({p})"
        return _owned(_libbpf.bpf_obj_get_kind(p, "map", what), what, None)

    @classmethod
    def create(cls, type: int | str, key_size: int, value_size: int, max_entries: int, *, name: str | None = None,
               flags: int = 0, key_type: EventDef | str | None = None, value_type: EventDef | str | None = None,
               inner_map: Map | None = None) -> Map:
        """Create a map in the kernel (``bpf_map_create``): a Map that owns its fd.

        ``type``: a ``lib.BPF_MAP_TYPE_*`` value or its name without the prefix,
        any case (``"hash"``, ``"array_of_maps"``); ``name``: up to 15 letters,
        digits, ``_`` or ``.``; ``flags``: ``lib.BPF_F_*`` map flags.
        ``key_type`` / ``value_type``: an EventDef or a scalar type name
        (``"u32"``, ``"i64"``, ``"bool"``...) of exactly ``key_size`` /
        ``value_size`` bytes types the keys or values in Python; None leaves
        them bytes (an int is accepted as a little-endian key). The kernel's
        map gets no BTF: opened again by id it reads as bytes. Maps of fds and
        of maps are typed by their map type. ``inner_map``: for a map of maps,
        a map with the type and sizes of its inner maps.

        ValueError/TypeError naming the parameter; BPFError with the kernel's
        errno when it refuses (EINVAL: sizes the type does not take).
        """
        if inner_map is not None and not isinstance(inner_map, Map):
            raise TypeError(f"inner_map must be a Map, got {builtins.type(inner_map).__name__}")
        fd, given = _map_fd.create(type, key_size, value_size, max_entries, name, flags, key_type, value_type,
                                   None if inner_map is None else inner_map.fd)
        return _owned(fd, f"bpf_map_create({name or ''})", lambda info: given)

    def close(self) -> None:
        """Close the fd of a map that owns one (an object's maps close with their object). Idempotent."""
        if self._own is not None:
            self._own.close()

    def __enter__(self) -> Map:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def inner_map(self) -> Map | None:
        """The template of a map of maps' inner maps, set before load; None when none was set here.

        ``outer.inner_map = template`` (``bpf_map__set_inner_map_fd``), for a
        map of maps declared without ``__array(values, ...)``; keep the
        template open until ``load()``. TypeError for another map type;
        BPFError (EBUSY) after load, (EINVAL) when one was set already
        (it replaces the ``__array`` template of a map that declares one).
        """
        self._check()
        return self._inner

    @inner_map.setter
    def inner_map(self, template: Map) -> None:
        what = f"bpf_map__set_inner_map_fd({self.name})"
        if not isinstance(template, Map):
            raise TypeError(f"inner_map must be a Map, got {type(template).__name__}")
        ptr = self._before_load("inner_map", what)
        if self.type not in MAP_OF_MAPS:
            raise TypeError(f"{what}: map {self.name!r} is a {self.type_name} map, not a map of maps")
        fd = template.fd
        if fd < 0:
            raise BPFError(errno.EINVAL, f"template map {template.name!r} is not created: load its object first",
                           what)
        _kernel.bpf_map__set_inner_map_fd(ptr, fd, what)
        self._inner = template  # libbpf keeps the fd number only: the template must stay open until load

    # -- what it is ------------------------------------------------------------------------------

    def info(self) -> loaded.MapInfo:
        """What the kernel says of the map (``bpf_map_get_info_by_fd``): its id, name, type, sizes, BTF id."""
        what, fd = f"bpf_map_get_info_by_fd({self.name})", self.fd
        if fd < 0:
            raise BPFError(errno.EINVAL, f"map {self.name!r} is not created: call BPFObject.load() first", what)
        return loaded.map_info(fd, what)

    @property
    def c_ptr(self) -> CData:
        """The ``struct bpf_map *`` for ``pylibbpf.lib`` calls; valid while the object is open.

        ``ffi.NULL`` for a map that owns its fd (use :attr:`fd`). ClosedError
        once the object (or the map) is closed.
        """
        ptr = self._check()
        return ffi.NULL if ptr is None else ptr

    @property
    def type(self) -> int:
        """The map type (``lib.BPF_MAP_TYPE_*``)."""
        ptr = self._check()
        return self._fixed().info.type if ptr is None else _libbpf.bpf_map__type(ptr)

    @property
    def type_name(self) -> str:
        return _libbpf.libbpf_map_type_str(self.type)

    @property
    def fd(self) -> int:
        """The map's fd; -1 before the object is loaded."""
        ptr = self._check()
        return self._fixed().live() if ptr is None else _libbpf.bpf_map__fd(ptr)

    @property
    def key_size(self) -> int:
        ptr = self._check()
        return self._fixed().info.key_size if ptr is None else _libbpf.bpf_map__key_size(ptr)

    @property
    def value_size(self) -> int:
        """Bytes of one value (of one CPU's value for per-CPU maps).

        Settable before load (``bpf_map__set_value_size``); BPFError (EBUSY)
        after, naming the map.
        """
        ptr = self._check()
        return self._fixed().info.value_size if ptr is None else _libbpf.bpf_map__value_size(ptr)

    @value_size.setter
    def value_size(self, size: int) -> None:
        size = _check.integer(size, "value_size", lo=1, hi=_check.UINT32_MAX)
        what = f"bpf_map__set_value_size({self.name})"
        ptr = self._before_load("value_size", what)
        _libbpf.bpf_map__set_value_size(ptr, size, what)
        self._types = None

    @property
    def max_entries(self) -> int:
        """How many elements the map holds at most (ring buffers: bytes).

        Settable before load (``bpf_map__set_max_entries``; ring buffers are
        rounded up to a page multiple by libbpf); BPFError (EBUSY) after.
        """
        ptr = self._check()
        return self._fixed().info.max_entries if ptr is None else _libbpf.bpf_map__max_entries(ptr)

    @max_entries.setter
    def max_entries(self, n: int) -> None:
        n = _check.integer(n, "max_entries", lo=1, hi=_check.UINT32_MAX)
        what = f"bpf_map__set_max_entries({self.name})"
        _libbpf.bpf_map__set_max_entries(self._before_load("max_entries", what), n, what)

    @property
    def per_cpu(self) -> bool:
        return self.type in PER_CPU_TYPES

    @property
    def key_type(self) -> EventDef | str | None:
        """The key's type from BTF: an EventDef for a struct, a type name (``"u32"``), None for bytes."""
        return _described(self._value_types()[0])

    @property
    def value_type(self) -> EventDef | str | None:
        """The value's type from BTF (one CPU's value for per-CPU maps), as :attr:`key_type`."""
        return _described(self._value_types()[1])

    @property
    def initial_value(self) -> bytes | None:
        """A copy of the contents of a global-data map (``.rodata``, ``.data``, ``.bss``).

        None for other maps. Before load this is what the ELF holds (or what
        :meth:`set_initial_value` or ``obj.globals`` wrote). Prefer
        ``obj.globals`` to work with the variables by name.
        """
        ptr = self._check()
        return None if ptr is None else _libbpf.bpf_map__initial_value(ptr)

    def set_initial_value(self, data: bytes) -> None:
        """Set the initial contents of a global-data map before ``load()`` (``bpf_map__set_initial_value``).

        ``data`` replaces the whole section, so it must be exactly
        ``value_size`` bytes (ValueError otherwise). BPFError (EBUSY) once the
        object is loaded; BPFError (EINVAL) for a map that is not global data.
        ``obj.globals["name"] = value`` sets one variable instead.
        """
        ptr = self._before_load("set_initial_value()", f"bpf_map__set_initial_value({self.name})")
        raw = bytes(data)
        if len(raw) != self.value_size:
            raise ValueError(f"initial value of map {self.name!r} must be {self.value_size} bytes, got {len(raw)}")
        _libbpf.bpf_map__set_initial_value(ptr, raw, f"bpf_map__set_initial_value({self.name})")

    # -- pinning ---------------------------------------------------------------------------------

    @property
    def pin_path(self) -> str | None:
        """Where the map is (or will be at load) pinned in bpffs; None when it is not."""
        ptr = self._check()
        return self._fixed().pin_path if ptr is None else _libbpf.bpf_map__pin_path(ptr)

    def pin(self, path: str | os.PathLike[str]) -> None:
        """Pin the map at ``path`` on a bpffs (``/sys/fs/bpf/...``), so it outlives this object.

        Before load: the map is pinned there when ``load()`` creates it, and if
        a compatible map is already pinned there, ``load()`` reuses that one
        instead (libbpf's pin-path rule; an incompatible one fails the load,
        naming the map). After load: pinned now (``bpf_map__pin``). BPFError
        from libbpf otherwise, e.g. EINVAL for a path not on bpffs, EEXIST
        when something is pinned there already.
        """
        path = _check.path(path, "path")
        ptr = self._check()
        if ptr is None:  # a map that owns its fd
            _libbpf.bpf_obj_pin(self.fd, path, f"bpf_obj_pin({self.name}, {path})")
            self._fixed().pin_path = path
        elif self._loaded():
            previous = self.pin_path
            try:
                _libbpf.bpf_map__pin(ptr, path, f"bpf_map__pin({self.name}, {path})")
            except BPFError:
                if previous is None:  # libbpf kept the refused path: forget it
                    _libbpf.bpf_map__set_pin_path(ptr, None, f"bpf_map__set_pin_path({self.name})")
                raise
        else:
            _libbpf.bpf_map__set_pin_path(ptr, path, f"bpf_map__set_pin_path({self.name}, {path})")

    def unpin(self) -> None:
        """Remove the map's pin (``bpf_map__unpin``) and forget its path (before load: not pinned at load).

        Only this map's own pin is removed: BPFError (EINVAL) when the map has
        no pin path or what is pinned there now is another map (left in
        place), (ENOENT) when nothing is; ValueError for a path off bpffs.
        """
        ptr = self._check()
        what = f"bpf_map__unpin({self.name})"
        path = self.pin_path
        if path is None:
            raise BPFError(errno.EINVAL, f"map {self.name!r} is not pinned", what)
        if self._loaded():
            _check.bpffs_path(path, "pin path")
            _libbpf.check_pinned_is(path, "map", self.fd, what)
            if ptr is None:
                _libbpf.unlink_pin(path, what)
                self._fixed().pin_path = None
                return
            _libbpf.bpf_map__unpin(ptr, None, what)
        _libbpf.bpf_map__set_pin_path(ptr, None, what)  # so that pin() may choose another path

    def reuse_pinned(self, path: str | os.PathLike[str]) -> None:
        """Use the map pinned at ``path`` (by another process or object) instead of creating one.

        Before load only (BPFError EBUSY after). The pinned map must have this
        map's type, key size and value size (ValueError naming both
        otherwise); its max_entries and flags are taken. BPFError (ENOENT)
        when nothing is pinned there, (EINVAL) naming what the pin holds when
        it is not a map.
        """
        path = _check.path(path, "path")
        what = f"bpf_map__reuse_fd({self.name}, {path})"
        ptr = self._before_load("reuse_pinned()", what)
        self._value_types()  # typed from this object's BTF: libbpf takes the pinned map's BTF ids
        fd = _libbpf.bpf_obj_get_kind(path, "map", f"bpf_obj_get({path})")
        try:
            _map_fd.check_compatible(fd, (self.type, self.key_size, self.value_size), self.name, path, what)
            _libbpf.bpf_map__reuse_fd(ptr, fd, what)
        finally:
            os.close(fd)

    # -- stacks -------------------------------------------------------------------------------

    def stack(self, stack_id: int) -> list[int]:
        """The frame addresses of ``stack_id`` in a BPF_MAP_TYPE_STACK_TRACE map (innermost first).

        The stack holds ``value_size // 8`` slots; the frames are those before
        the first 0. KeyError when no stack has that id; ValueError for a
        negative id (an error ``bpf_get_stackid()`` returned, named);
        TypeError for another map type.
        """
        what = f"stack({self.name})"
        if self.type != lib.BPF_MAP_TYPE_STACK_TRACE:
            raise TypeError(f"{what}: map {self.name!r} is {self.type_name}, not stack_trace")
        if isinstance(stack_id, int) and not isinstance(stack_id, bool) and stack_id < 0:
            raise ValueError(f"{what}: stack_id {stack_id} is an error from bpf_get_stackid(): "
                             f"{errno.errorcode.get(-stack_id, '?')} ({os.strerror(-stack_id)})")
        stack_id = _check.integer(stack_id, "stack_id", hi=_check.UINT32_MAX)
        ptr = self._check()
        flags = self._fixed().info.flags if ptr is None else _libbpf.bpf_map__map_flags(ptr)
        if flags & lib.BPF_F_STACK_BUILD_ID:
            raise TypeError(f"{what}: map {self.name!r} holds build-id stacks: read them with m.raw")
        raw = self._lookup(stack_id.to_bytes(4, "little"), what)
        if raw is None:
            raise KeyError(stack_id)
        return _map_batch.stack_frames(raw)

    # -- the element layer ----------------------------------------------------------------------

    def _loaded(self) -> bool:
        """Whether the map exists in the kernel (a map that owns its fd always does)."""
        return self._owner is None or self._owner.loaded

    def _before_load(self, attr: str, what: str) -> CData:
        ptr = self._check()
        if self._loaded():
            raise BPFError(errno.EBUSY, f"map {self.name!r} is already created: "
                           f"{attr} can only be set before BPFObject.load()", what)
        return ptr

    def _value_types(self) -> tuple[ValueType | None, ValueType | None]:
        """(key, value) types from BTF, None where the map has none or it does not match the size.

        Read when the object is opened and again only when a resize before
        load invalidates them: libbpf clears the BTF ids of some map types
        when it creates them (cgroup arrays, perf event arrays), so reading
        them after load would give another answer than before.
        """
        if self._types is None:
            ptr = self._check()
            value = self._side_type(_libbpf.bpf_map__btf_value_type_id(ptr), self.value_size, "value")
            value = _map_fd.special_value(_libbpf.bpf_map__type(ptr), self.value_size, value, Map.from_id)
            self._types = (self._side_type(_libbpf.bpf_map__btf_key_type_id(ptr), self.key_size, "key"), value)
        return self._types

    def _side_type(self, type_id: int, size: int, side: str) -> ValueType | None:
        if not type_id or self._btf is None or _libbpf.bpf_map__is_internal(self._ptr):
            return None
        vt = value_type(self._btf, type_id, f"{self.name}_{side}")
        return None if isinstance(vt, BytesType) or vt.size != size else vt  # bytes: the raw protocol

    def _key_bytes(self, key: object, what: str) -> bytes:
        kt = self._value_types()[0]
        if kt is None or (isinstance(key, _BYTES_LIKE) and not kt.takes_bytes):
            return self._raw_key(key, what)  # exact-size bytes on a typed map: the raw key
        return kt.encode(key, f"map {self.name!r} key")

    def _key_value(self, raw: bytes) -> Any:
        kt = self._value_types()[0]
        return raw if kt is None else kt.decode(raw)

    def _one_value_bytes(self, value: object, what: str) -> bytes:
        vt = self._value_types()[1]
        if vt is None or (isinstance(value, _BYTES_LIKE) and not vt.takes_bytes):
            return self._raw_value(value, what)  # exact-size bytes on a typed map: the raw value
        return vt.encode(value, f"map {self.name!r} value")

    def _one_value(self, raw: bytes) -> Any:
        vt = self._value_types()[1]
        return bytes(raw[:self.value_size]) if vt is None else vt.decode(raw)

    def _raw_key(self, key: object, what: str) -> bytes:
        return _map_batch.raw_key(key, self.key_size, self.name, what)

    def _raw_value(self, value: object, what: str) -> bytes:
        return _map_batch.raw_value(value, self.value_size, self.name, what)

    def _value_layout(self) -> tuple[int, int]:
        """(number of values, stride): per-CPU maps hold one 8-byte-aligned value per possible CPU."""
        vsize = self.value_size
        if self.per_cpu:
            if not self._ncpus:
                self._ncpus = _libbpf.libbpf_num_possible_cpus()
            return self._ncpus, (vsize + 7) & ~7
        return 1, vsize

    def _keyless_fd(self, what: str, types: tuple[int, ...]) -> int:
        """The fd of a created map of one of ``types`` (queue, stack, bloom filter); TypeError otherwise."""
        fd = self.fd
        if self.type not in types:
            names = " or ".join(_libbpf.libbpf_map_type_str(t) for t in types)
            raise TypeError(f"{what}: map {self.name!r} is a {self.type_name} map, not a {names} map")
        if fd < 0:
            raise BPFError(errno.EINVAL, f"map {self.name!r} is not created: call BPFObject.load() first", what)
        return fd

    def _element_fd(self, what: str) -> int:
        """The fd for element access: the map must be created and have elements."""
        fd = self.fd
        keyless = KEYLESS.get(self.type)
        if keyless is not None:
            raise TypeError(f"{what}: map {self.name!r} is a {self.type_name} map: it has no keys; "
                            f"use {keyless}")
        kind = NO_ELEMENTS.get(self.type)
        if kind is not None:
            raise TypeError(f"{what}: map {self.name!r} is a {self.type_name} map: it has no elements to "
                            f"look up or set; read it with {kind}")
        if fd < 0:
            raise BPFError(errno.EINVAL, f"map {self.name!r} is not created: call BPFObject.load() first", what)
        return fd

    def _refuse_delete(self, what: str) -> None:
        if self.type in ARRAY_TYPES:
            raise TypeError(f"{what}: map {self.name!r} is an {self.type_name} map: its elements always exist "
                            "and cannot be deleted (set them to zero instead)")

    def _lookup(self, key: bytes, what: str) -> bytes | None:
        fd = self._element_fd(what)
        count, stride = self._value_layout()
        value = ffi.new("char[]", max(1, count * stride))
        if not _libbpf.bpf_map_lookup_elem(fd, _libbpf.cbuf(key), value, what):
            return None
        return bytes(ffi.buffer(value, count * stride))

    def _raw_keys(self) -> Iterator[bytes]:
        what = f"bpf_map_get_next_key({self.name})"
        fd = self._element_fd(what)
        size = self.key_size
        cur, nxt = ffi.new("char[]", max(1, size)), ffi.new("char[]", max(1, size))
        prev = ffi.NULL
        while _libbpf.bpf_map_get_next_key(fd, prev, nxt, what):
            yield bytes(ffi.buffer(nxt, size))
            # Between two keys the caller may have closed the object: its fd number may already
            # name another map, so the walk goes on only while the object is open.
            self._check()
            ffi.memmove(cur, nxt, max(1, size))
            prev = cur

    def _read_raw(self, delete: bool) -> list[tuple[bytes, bytes]]:
        """Every (key, value) as bytes, in batches; ``delete`` removes what is read."""
        name = "bpf_map_lookup_and_delete_batch" if delete else "bpf_map_lookup_batch"
        fd = self._element_fd(f"{name}({self.name})")
        count, stride = self._value_layout()
        return _map_batch.read_all(fd, self.name, self.key_size, count * stride, self._raw_keys, delete)

    def _write_raw(self, pairs: list[tuple[bytes, bytes]], flags: int) -> None:
        _map_batch.write_all(self._element_fd(f"bpf_map_update_batch({self.name})"), self.name, pairs, flags)

    def _delete_raw(self, keys: list[bytes]) -> int:
        return _map_batch.delete_all(self._element_fd(f"bpf_map_delete_batch({self.name})"), self.name, keys)

    def __repr__(self) -> str:
        return f"<Map {self.name!r}{' closed' if self._own is not None and self._own.fd is None else ''}>"


_BYTES_LIKE = (bytes, bytearray, memoryview)


def new_map(owner: MapOwner, ptr: CData, btf: CData | None) -> Map:
    """The Map of ``ptr`` (a ``struct bpf_map *``) of ``owner``, typed from ``btf`` (None: bytes)."""
    m = Map.__new__(Map)
    m._setup(owner, ptr, btf)
    return m


def _owned(fd: int, what: str, types: Callable[[Any], _map_fd.Types] | None) -> Map:
    """The Map that owns ``fd`` (a map's; closed on error), typed by ``types(info)`` or from its BTF."""
    own, found = _map_fd.adopt(fd, what, types)
    m = Map.__new__(Map)
    m._setup(None, None, None, own, found)
    return m


def raw_map(m: Map) -> RawMap:
    """``m.raw``: the bytes protocol over ``m``."""
    raw = RawMap.__new__(RawMap)
    raw._map = m
    return raw


def _described(vt: ValueType | None) -> EventDef | str | None:
    if vt is None:
        return None
    return vt.event if vt.event is not None else vt.name



# pylibbpf.maps() lists the kernel's maps (loaded.MapsModule); pylibbpf.maps stays this module.
sys.modules[__name__].__class__ = loaded.MapsModule
