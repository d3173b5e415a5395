"""An object's global variables: ``obj.globals``, typed from BTF.

The variables of every ``.rodata*``, ``.data*`` and ``.bss*`` section, read
from the section's DATASEC in the object's BTF. Before load a variable is read
and written in libbpf's initial image of its section; after load in the
section the kernel maps into this process (``.data``/``.bss`` live, ``.rodata``
read-only). A section resized before load (``m.value_size = n`` on its map)
shows its last array at the new length. ``obj.globals.raw`` is the same
variables as bytes (:class:`RawGlobals`).

Every read and write holds the variables' lock, and :meth:`Globals.close`
(called by ``BPFObject.close()`` before the object's memory is freed) takes it
too: a thread racing ``close()`` either finishes its access first or gets
ClosedError, never a read of unmapped memory.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Iterable, Iterator, MutableMapping
from typing import Any, Protocol

from . import _close, _libbpf
from ._ffi import ffi
from .btf import BytesType, DataSecVar, ValueType, datasec_vars, value_type
from .errors import BPFError, ClosedError
from .events import EventDef
from .maps import Map

CData = Any
GLOBAL_SECTIONS = (".rodata", ".data", ".bss")


class GlobalsOwner(Protocol):
    """What the variables need of their object: name, load state, C handle (or ClosedError)."""

    @property
    def name(self) -> str: ...

    @property
    def loaded(self) -> bool: ...

    @property
    def load_failed(self) -> bool: ...

    @property
    def c_ptr(self) -> CData: ...


class _Guard:
    """The variables' lock, made anew in a forked child (a parent's thread may have held it)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        _close.after_fork(self)

    def _after_fork_in_child(self) -> None:
        self.lock = threading.RLock()


class _Var:
    __slots__ = ("map", "name", "offset", "section", "size", "type")

    def __init__(self, name: str, section: str, m: Map, offset: int, size: int, vt: ValueType) -> None:
        self.name, self.section, self.map, self.offset, self.size, self.type = name, section, m, offset, size, vt


def _datasec(m: Map, btf: CData | None) -> tuple[str, list[DataSecVar]] | None:
    """(section, variables) of a global-data map, from its DATASEC in BTF; None for other maps."""
    if btf is None or not _libbpf.bpf_map__is_internal(m.c_ptr):
        return None
    return datasec_vars(btf, _libbpf.bpf_map__btf_value_type_id(m.c_ptr))


def global_sections(maps: Iterable[Map], btf: CData | None) -> dict[str, Map]:
    """Section name (``.rodata``, ``.data.x``) -> its map, for every global-data map with BTF.

    libbpf names these maps after the object (``execsnoo.rodata``: a truncated
    object name before ``.rodata``); the section name is what the source says.
    """
    out = {}
    for m in maps:
        sec = _datasec(m, btf)
        if sec is not None:
            out[sec[0]] = m
    return out


class Globals(MutableMapping[str, Any]):
    """``obj.globals``: the object's global variables by name (``.rodata*``, ``.data*``, ``.bss*``).

    Typed from BTF (DATASEC/VAR) as map values are (ints range-checked, bool,
    enums, floats, str for ``char`` arrays, bytes for ``unsigned char``/``__u8``
    arrays, tuples for other arrays, records for structs; bytes for what a
    record cannot hold). Before load, an assignment sets that variable's
    initial value and leaves the rest of its section as it was. After load,
    ``.data``/``.bss`` variables are read and written live in the section the
    kernel maps into this process (the program sees a write at once, and reads
    see the program's writes); a ``.rodata`` variable can be read but not
    written (frozen by the load: BPFError EPERM naming it). After a failed
    ``load()`` no variable can be written (BPFError EPERM: libbpf has frozen
    the sections; only ``close()`` is left).

    Unknown names raise KeyError listing the known ones; a value of the wrong
    type or out of range raises TypeError/ValueError naming the variable.
    A name defined in two sections (static variables) is also reachable as
    ``"section:name"``. ClosedError once the object is closed, also for an
    access racing ``close()`` in another thread. A read returns a copy: nothing
    refers to the section's memory afterwards.
    """

    def __init__(self) -> None:
        """Not called directly: ``obj.globals`` is an object's Globals."""
        raise TypeError("Globals objects come from obj.globals")

    def _setup(self, owner: GlobalsOwner, maps: Iterable[Map], btf: CData | None) -> None:
        self._owner = owner
        self._btf = btf
        self._sections = global_sections(maps, btf) if btf is not None else {}
        self._guard = _Guard()
        self._closed = False
        #: The same variables as bytes (:class:`RawGlobals`): ``globals.raw["cfg"]`` is the
        #: variable's bytes, ``globals.raw["cfg"] = data`` writes exactly its size.
        self.raw = raw_globals(self)
        self._sizes: dict[str, int] = {}
        self._vars: dict[str, _Var] = {}
        self._scan()

    def _scan(self) -> None:
        """(Re)read every section's variables from BTF (libbpf rewrites it when a section is resized)."""
        found: dict[str, _Var] = {}
        for section, m in self._sections.items():
            if not section.startswith(GLOBAL_SECTIONS):
                continue  # .kconfig, .ksyms, .addr_space...: libbpf fills them
            datasec = _datasec(m, self._btf)
            if datasec is None:
                continue
            self._sizes[section] = m.value_size
            for var in datasec[1]:
                vt = value_type(self._btf, var.type_id, var.name)
                if vt.size != var.size:
                    vt = BytesType(var.size, f"{var.name}: BTF size {vt.size} != section size {var.size}")
                key = var.name if var.name not in found else f"{section}:{var.name}"
                found[key] = _Var(var.name, section, m, var.offset, var.size, vt)
        self._vars = found

    def _var(self, name: str) -> _Var:
        """The variable ``name``; the caller holds the lock. ClosedError once closed."""
        if self._closed:
            raise ClosedError(f"globals of BPF object {self._owner.name!r}")
        self._owner.c_ptr  # noqa: B018 -- ClosedError once the object is closed
        var = self._vars.get(name) if isinstance(name, str) else None
        if var is not None and not self._owner.loaded and var.map.value_size != self._sizes.get(var.section):
            self._scan()  # the section was resized: its last array has a new length
            var = self._vars.get(name)
        if var is None:
            known = ", ".join(self._vars) or "none"
            raise KeyError(f"no global variable named {name!r} in {self._owner.name} (known: {known})")
        return var

    def section(self, name: str) -> str:
        """The ELF section that holds variable ``name`` (``.rodata``, ``.bss``, ``.data.x``...)."""
        with self._guard.lock:
            return self._var(name).section

    def type_of(self, name: str) -> EventDef | str:
        """The variable's type: an EventDef for a struct, else a type name (``u32``, ``char[16]``, ``u8[6]``)."""
        with self._guard.lock:
            return self._var(name).type.described()

    def _section_memory(self, var: _Var) -> tuple[CData, int]:
        return _libbpf.bpf_map__c_initial_value(var.map.c_ptr)

    def __getitem__(self, name: str) -> Any:
        var, raw = self._read(name)
        return var.type.decode(raw)

    def _read(self, name: str) -> tuple[_Var, bytes]:
        """The variable ``name`` and a copy of its bytes, read under the lock."""
        with self._guard.lock:
            var = self._var(name)
            ptr, size = self._section_memory(var)
            if ptr != ffi.NULL and var.offset + var.size <= size:
                raw = ffi.buffer(ptr + var.offset, var.size)[:]
            else:  # loaded but not mmapable (only static variables): read the map's one element
                section = var.map.raw.lookup(0)
                raw = section[var.offset:var.offset + var.size]
        return var, raw

    def __setitem__(self, name: str, value: Any) -> None:
        with self._guard.lock:
            var = self._var(name)
            self._write(name, var, var.type.encode(value, f"global {name!r}"))

    def _write(self, name: str, var: _Var, data: bytes) -> None:
        """Write ``data`` (exactly the variable's size) into variable ``name``; the caller holds the lock."""
        if self._owner.load_failed:
            raise BPFError(errno.EPERM, f"global {name!r}: BPFObject.load() failed, so libbpf has frozen "
                           "the sections: only close() is left", f"globals[{name!r}]")
        loaded = self._owner.loaded
        if loaded and var.section.startswith(".rodata"):
            raise BPFError(errno.EPERM, f"global {name!r} is in {var.section}, frozen by BPFObject.load(): "
                           "set it before load()", f"globals[{name!r}]")
        ptr, size = self._section_memory(var)
        if ptr != ffi.NULL and var.offset + var.size <= size:
            ffi.memmove(ptr + var.offset, data, len(data))
        elif loaded:  # not mmapable: rewrite the section's one element (not atomic with the program)
            section = bytearray(var.map.raw[0])
            section[var.offset:var.offset + var.size] = data
            var.map.raw[0] = bytes(section)
        else:
            raise BPFError(errno.EINVAL, f"global {name!r}: section {var.section} has no initial image",
                           f"globals[{name!r}]")

    def _write_raw(self, name: str, value: object) -> None:
        """``globals.raw[name] = value``: bytes of exactly the variable's size."""
        with self._guard.lock:
            var = self._var(name)
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise TypeError(f"global {name!r}: raw value must be bytes, not {type(value).__name__}")
            data = bytes(value)
            if len(data) != var.size:
                raise ValueError(f"global {name!r}: raw value must be {var.size} bytes, got {len(data)}")
            self._write(name, var, data)

    def __delitem__(self, name: str) -> None:
        with self._guard.lock:
            self._var(name)
        raise TypeError(f"global {name!r} cannot be deleted (assign it instead)")

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._vars))

    def __len__(self) -> int:
        return len(self._vars)

    def close(self) -> None:
        """End access to the variables (BPFObject.close() calls it first). Idempotent.

        Waits for a read or write in progress in another thread; every access
        after it raises ClosedError.
        """
        with self._guard.lock:
            self._closed = True

    def __repr__(self) -> str:
        return f"<globals of {self._owner.name}: {', '.join(self._vars) or 'none'}>"


class RawGlobals(MutableMapping[str, bytes]):
    """``obj.globals.raw``: the variables as bytes, as ``Map.raw`` is a map's elements as bytes.

    ``raw[name]`` is a copy of the variable's bytes; ``raw[name] = data`` writes
    ``data``, which must be bytes-like of exactly the variable's size
    (ValueError otherwise). Names, sections, the lock, what may be written
    when, and the errors are those of :class:`Globals`.
    """

    _globals: Globals

    def __init__(self) -> None:
        """Not called directly: ``obj.globals.raw`` is an object's RawGlobals."""
        raise TypeError("RawGlobals objects come from obj.globals.raw")

    def __getitem__(self, name: str) -> bytes:
        return self._globals._read(name)[1]

    def __setitem__(self, name: str, value: bytes) -> None:
        self._globals._write_raw(name, value)

    def __delitem__(self, name: str) -> None:
        del self._globals[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._globals)

    def __len__(self) -> int:
        return len(self._globals)

    def __repr__(self) -> str:
        return f"<raw {repr(self._globals)[1:]}"


def raw_globals(g: Globals) -> RawGlobals:
    """``g.raw``: the bytes protocol over ``g``."""
    raw = RawGlobals.__new__(RawGlobals)
    raw._globals = g
    return raw


def new_globals(owner: GlobalsOwner, maps: Iterable[Map], btf: CData | None) -> Globals:
    """The variables of ``owner``'s global-data ``maps``, typed from ``btf``."""
    g = Globals.__new__(Globals)
    g._setup(owner, maps, btf)
    return g
