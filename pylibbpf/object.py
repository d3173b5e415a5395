"""CO-RE objects: BPFObject (Map lives in :mod:`pylibbpf.maps`, Globals in :mod:`pylibbpf.globals`;
Program and TestRun in :mod:`pylibbpf.program`, Link in :mod:`pylibbpf.link`).

An object is opened (ELF parsed, nothing in the kernel yet), then loaded (CO-RE
relocations resolved against the running kernel's BTF, maps created, programs
verified). Programs and maps belong to their object: once the object is
closed, using them raises ClosedError.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

from . import _check, _close, _libbpf, _libbpf_attach, build
from ._ffi import ffi, lib
from .btf import struct_event_def, struct_names
from .errors import BPFError, ClosedError
from .globals import global_sections, new_globals
from .link import Link, new_link
from .maps import Map, new_map
from .program import Program, new_program

logger = logging.getLogger("pylibbpf.object")

CData = Any
T = TypeVar("T")


class NamedTable(Mapping[str, T]):
    """A read-only name -> item mapping whose KeyError lists the known names."""

    def __init__(self, kind: str, owner: str, items: dict[str, T], aliases: dict[str, T] | None = None) -> None:
        self._kind, self._owner, self._items = kind, owner, items
        self._aliases = aliases or {}  # other names an item answers to (not listed)

    def __getitem__(self, name: str) -> T:
        try:
            return self._items[name] if name in self._items else self._aliases[name]
        except KeyError:
            known = ", ".join(sorted(self._items)) or "none"
            raise KeyError(f"no {self._kind} named {name!r} in {self._owner} (known: {known})") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"<{self._kind}s of {self._owner}: {', '.join(self._items)}>"


def _free_object(ptr: CData, keepalive: list[Any]) -> None:
    """bpf_object__close, then drop the buffers libbpf pointed into (after: it may still read them)."""
    _libbpf.bpf_object__close(ptr)
    keepalive.clear()


class _ObjectMemory:
    """libbpf's ``struct bpf_object``, freed when its BPFObject and every link made from it are done.

    Counted users: the BPFObject until ``close()``, and each link its programs
    made until the link is destroyed. A USDT link detaches through the
    object's USDT bookkeeping, so the object's memory must outlive it; the
    finalizer frees it anyway if this holder is collected first.
    """

    def __init__(self, ptr: CData, keepalive: list[Any]) -> None:
        self._lock = threading.Lock()
        self._users = 1
        self._free = _close.finalizer(self, _free_object, ptr, keepalive)
        _close.after_fork(self)

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()

    def hold(self) -> None:
        with self._lock:
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            last = self._users == 0
        if last:
            self._free()


class BPFObject:
    """A BPF ELF object (``bpf_object``): open it, load it, then use its programs and maps.

    ``BPFObject.open(path_or_bytes)`` parses the ELF without touching the kernel
    (BPFError on a missing file or bad ELF). ``load()`` creates the maps and
    loads the programs (LoadError with the verifier log's tail when the kernel
    refuses one). ``close()`` is idempotent and also available as a context
    manager; programs, maps and the object itself raise ClosedError after it.

    Every link its programs make (``attach_all()``, ``Program.attach*()``) is
    kept by the object until ``close()``, as a C skeleton keeps its links: a
    Link the caller drops stays attached. ``close()`` destroys the links no
    one else holds; a Link the caller still holds stays attached until it is
    destroyed (the program stays loaded for it, and the object's libbpf memory
    until the last such link is gone).

    An object dropped without ``close()`` is closed when garbage collected
    (its programs and maps keep it alive while they are referenced), but not
    at interpreter exit, when the kernel reclaims everything anyway.
    """

    def __init__(self) -> None:
        """Not called directly: an object comes from :meth:`open` or :meth:`compile`."""
        raise TypeError("BPFObject is made with BPFObject.open(path_or_bytes) or BPFObject.compile(source)")

    @classmethod
    def _made(cls, ptr: CData, name: str, keepalive: list[Any]) -> BPFObject:
        """The object for a ``struct bpf_object *`` libbpf just opened."""
        obj = cls.__new__(cls)
        obj._setup(ptr, name, keepalive)
        return obj

    def _setup(self, ptr: CData, name: str, keepalive: list[Any]) -> None:
        self._ptr = ptr
        self._name = name
        self._keepalive = keepalive  # buffers libbpf points into (ELF bytes, option strings)
        self._loaded = False
        self._load_failed = False
        self._lock = threading.Lock()
        self._links: list[Link] = []
        # Freed once this object is closed and every link made from it is destroyed; its finalizer
        # is the safety net for an object dropped without close().
        self._memory = _ObjectMemory(ptr, keepalive)
        _close.after_fork(self)
        self.programs: NamedTable[Program] = NamedTable(
            "program", name,
            {p.name: p for p in (new_program(x, alive=self._check, keeper=self)
                                 for x in _libbpf.bpf_object__programs(ptr))})
        btf = _libbpf.bpf_object__btf(ptr)
        btf = None if btf == ffi.NULL else btf
        maps = [new_map(self, x, btf) for x in _libbpf.bpf_object__maps(ptr)]
        # A global-data map also answers to its section's name: obj.maps[".rodata"] is "execsnoo.rodata".
        self.maps: NamedTable[Map] = NamedTable("map", name, {m.name: m for m in maps}, global_sections(maps, btf))
        #: The global variables by name (see :class:`~pylibbpf.globals.Globals`).
        self.globals = new_globals(self, maps, btf)
        #: The struct_ops maps by name (``SEC(".struct_ops.link")`` variables), each registered with
        #: :meth:`StructOps.attach`.
        self.struct_ops: NamedTable[StructOps] = NamedTable(
            "struct_ops map", name, {m.name: new_struct_ops(m, self) for m in maps
                                     if m.type == lib.BPF_MAP_TYPE_STRUCT_OPS})

    @classmethod
    def open(cls, path_or_bytes: str | os.PathLike[str] | bytes | bytearray | memoryview, *,
             btf_custom_path: str | os.PathLike[str] | None = None, kconfig: str | None = None,
             object_name: str | None = None) -> BPFObject:
        """Open a BPF object from a file path or from the ELF bytes themselves.

        Raises FileNotFoundError-like BPFError (errno ENOENT) for a missing file,
        BPFError for anything that is not a BPF ELF object, TypeError for other
        argument types.
        """
        if btf_custom_path is not None:
            btf_custom_path = _check.path(btf_custom_path, "btf_custom_path")
        if kconfig is not None:
            _check.string(kconfig, "kconfig")
        if object_name is not None:
            _check.string(object_name, "object_name")
        keep: list[Any] = []
        opts = ffi.new("struct bpf_object_open_opts *")
        opts.sz = ffi.sizeof("struct bpf_object_open_opts")
        for field, value in (("btf_custom_path", btf_custom_path), ("kconfig", kconfig),
                             ("object_name", object_name)):
            if value is not None:
                c = _libbpf.cstr(value)
                keep.append(c)
                setattr(opts, field, c)
        keep.append(opts)
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            data = ffi.from_buffer(bytes(path_or_bytes))
            keep.append(data)
            label = object_name or "<bytes>"
            ptr = _libbpf.bpf_object__open_mem(data, len(data), opts, f"bpf_object__open_mem({label})")
        elif isinstance(path_or_bytes, (str, os.PathLike)):
            path = os.fspath(path_or_bytes)
            ptr = _libbpf.bpf_object__open_file(path, opts, f"bpf_object__open_file({path})")
        else:
            raise TypeError(f"BPFObject.open takes a path or bytes, not {type(path_or_bytes).__name__}")
        return cls._made(ptr, _libbpf.bpf_object__name(ptr), keep)

    def _after_fork_in_child(self) -> None:
        """A fresh lock: a thread of the parent may have held it at the fork."""
        self._lock = threading.Lock()

    @classmethod
    def compile(cls, source_or_path: str | os.PathLike[str] | bytes, *, cflags: Sequence[str] = ()) -> BPFObject:
        """Compile BPF C with clang and open the object (not loaded yet), as bcc's one-file tools do.

        ``source_or_path``: a ``.bpf.c`` path, or the C text (``bytes``, or a
        ``str`` with a newline); see :func:`pylibbpf.build.compile` for the
        include path (``vmlinux.h``, ``<bpf/bpf_helpers.h>``) and ``cflags``.
        No file is left behind. Blocks while clang runs; raises
        :class:`pylibbpf.build.CompileError` when clang is missing or fails;
        its warnings are issued as :class:`pylibbpf.build.CompileWarning`.
        """
        data, name = build.compile_bytes(source_or_path, cflags=cflags)
        return cls.open(data, object_name=name)

    @property
    def name(self) -> str:
        return self._name

    @property
    def loaded(self) -> bool:
        """True once ``load()`` succeeded."""
        return self._loaded

    @property
    def load_failed(self) -> bool:
        """True once ``load()`` raised: libbpf cannot load the object again, only ``close()`` is left."""
        return self._load_failed

    def _check(self) -> CData:
        if self._ptr is None:
            raise ClosedError(f"BPF object {self._name!r}")
        return self._ptr

    @property
    def c_ptr(self) -> CData:
        """The ``struct bpf_object *`` for ``pylibbpf.lib`` calls; valid while the object is open.

        ClosedError once it is closed. Do not close it through ``lib``.
        """
        return self._check()

    def load(self) -> BPFObject:
        """Relocate against the running kernel's BTF, create maps, load programs. Returns self."""
        with self._lock:
            ptr = self._check()
            if self._loaded:
                raise BPFError(lib.EINVAL, "object is already loaded", f"bpf_object__load({self._name})")
            try:
                _libbpf.bpf_object__load(ptr, f"bpf_object__load({self._name})")
            except BPFError:
                self._load_failed = True  # libbpf cannot retry a load: only close() is left
                raise
            self._loaded = True
        return self

    def attach_all(self) -> list[Link]:
        """Attach every loaded program that can attach by its SEC() name alone; returns their links.

        Skipped, each with an INFO message on the ``pylibbpf.object`` logger
        saying why: programs not loaded (``autoload`` off), programs with
        ``autoattach`` off, and programs whose SEC() does not say where to
        attach (``SEC("perf_event")``, ``SEC("xdp")``, ``SEC("syscall")``, a
        bare ``SEC("uprobe")`` or one naming no binary, ...): those take an
        ``attach_*`` call with parameters. Every struct_ops map is then
        registered (:meth:`StructOps.attach`), as a C skeleton's attach does.
        If an attach fails, the links already made are destroyed and the error
        is raised.
        """
        self._check()
        links: list[Link] = []
        try:
            for prog in self.programs.values():
                why = _not_auto_attachable(prog)
                if why is None:
                    try:
                        links.append(prog.attach())
                        continue
                    except BPFError as e:
                        if e.errno != errno.EOPNOTSUPP:
                            raise
                        why = str(e.strerror)
                logger.info("attach_all(%s): skipped program %r: %s", self._name, prog.name, why)
            for ops in self.struct_ops.values():
                links.append(ops.attach())
        except BaseException:
            for link in links:
                link.destroy()
            raise
        return links

    def keep_link(self, link: Link) -> None:
        """Keep ``link`` attached until ``close()`` (every attach call of the object's programs does this).

        The link also holds the object's libbpf memory until it is destroyed.
        ClosedError once the object is closed.
        """
        with self._lock:
            self._check()
            link.hold(self._memory)
            self._memory.hold()
            self._links = [kept for kept in self._links if not kept.destroyed]
            self._links.append(link)

    @property
    def links(self) -> list[Link]:
        """The links the object keeps (made by its programs, not destroyed yet)."""
        with self._lock:
            return [link for link in self._links if not link.destroyed]

    def btf_struct(self, name: str) -> Any:
        """The layout of ``struct name`` from the object's BTF, as an EventDef.

        KeyError when the BTF has no such struct, saying why it may be missing
        (the compiler keeps only the types reached from a global, a map or a
        function signature) and how to keep it.
        """
        return struct_event_def(self._btf(), name, f"object {self._name!r}")

    def btf_struct_names(self) -> list[str]:
        """The names of every named struct in the object's BTF, in type-id order.

        Works on an opened object (no load needed). BPFError (ENOENT) when the
        object has no BTF.
        """
        return struct_names(self._btf())

    def _btf(self) -> CData:
        ptr = _libbpf.bpf_object__btf(self._check())
        if ptr == ffi.NULL:
            raise BPFError(lib.ENOENT, "object has no BTF (compile with clang -g)", f"btf({self._name})")
        return ptr

    def close(self) -> None:
        """Close the object: its links no one else holds are destroyed, its maps and programs freed.

        Maps and programs leave the kernel unless pinned or held by a link the
        caller still holds. Idempotent.
        """
        with self._lock:
            if self._ptr is None:
                return
            self.globals.close()  # waits for a read or write of a section in progress
            self._ptr = None
            links, self._links = self._links, []
        # The links only this object held are collected here, and their finalizers detach them;
        # a link the caller holds keeps working (and keeps the object's memory) until destroyed.
        del links
        self._memory.release()

    @property
    def closed(self) -> bool:
        return self._ptr is None

    def __enter__(self) -> BPFObject:
        self._check()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = ("closed" if self._ptr is None else "loaded" if self._loaded
                 else "load failed" if self._load_failed else "open")
        return f"<BPFObject {self._name!r} {state}>"


class StructOps:
    """A struct_ops map of an object: a kernel ops table (a TCP congestion control, a scheduler)
    whose functions are the object's ``SEC("struct_ops/...")`` programs.

    Valid while its object is open (ClosedError after). ``attach()``
    registers it with the kernel once the object is loaded.
    """

    def __init__(self) -> None:
        """Not called directly: struct_ops maps come from ``obj.struct_ops[name]``."""
        raise TypeError("StructOps objects come from obj.struct_ops[name]")

    def _setup(self, map: Map, keeper: BPFObject) -> None:
        self._map = map
        self._keeper = keeper
        self.name = map.name

    @property
    def map(self) -> Map:
        """The struct_ops map itself (its value is the ops table the kernel registers)."""
        return self._map

    def attach(self) -> Link:
        """Register the ops table with the kernel (``bpf_map__attach_struct_ops``); the Link unregisters it.

        A variable in ``SEC(".struct_ops.link")`` gives a kernel link (pinnable,
        detached when destroyed); one in ``SEC(".struct_ops")`` stays
        registered until its map is freed. Kept by the object until
        ``obj.close()``, as every link of its programs. BPFError (EINVAL) before
        load; (EEXIST) when the kernel has an ops table of that name already
        (a TCP congestion control's ``.name``).
        """
        what = f"bpf_map__attach_struct_ops({self.name})"
        ptr = self._map.c_ptr
        if self._map.fd < 0:
            raise BPFError(errno.EINVAL, f"struct_ops map {self.name!r} is not created: call BPFObject.load() "
                           "first", what)
        link = new_link(_libbpf_attach.bpf_map__attach_struct_ops(ptr, what), self.name)
        self._keeper.keep_link(link)
        return link

    def __repr__(self) -> str:
        return f"<StructOps {self.name!r}>"


def new_struct_ops(map: Map, keeper: BPFObject) -> StructOps:
    """The StructOps of a struct_ops map of ``keeper``, which keeps the links it makes."""
    ops = StructOps.__new__(StructOps)
    ops._setup(map, keeper)
    return ops


def _not_auto_attachable(prog: Program) -> str | None:
    """Why attach_all() leaves ``prog`` alone, or None to attach it by its SEC()."""
    if prog.fd < 0:
        return "not loaded (autoload is off)"
    if not prog.autoattach:
        return "autoattach is off"
    kind, _, target = prog.section.partition("/")
    if kind.split(".")[0] in ("uprobe", "uretprobe", "usdt") and ":" not in target:
        # libbpf reads 'uprobe/BINARY:FUNCTION' ('usdt/BINARY:PROVIDER:NAME'); anything else names no binary.
        return (f"SEC({prog.section!r}) names no binary ({kind}/BINARY:...): use "
                f"{'attach_usdt()' if kind == 'usdt' else 'attach_uprobe()'}")
    return None
