"""The function symbols of one ELF file, as sorted arrays: what ``ProcessSymbols`` looks addresses up in.

A file's symbols come from every table it or its debug information has:

- ``.symtab`` and ``.dynsym`` of the file itself;
- ``.gnu_debugdata`` (MiniDebugInfo: an xz-compressed ELF whose ``.symtab`` holds the local functions
  a distribution strips), decompressed with the stdlib's ``lzma``;
- a separate debug file found by the file's build-id, ``DEBUG_DIRS[i]/.build-id/ab/cdef....debug``
  (what ``debuginfod`` and the ``-dbgsym`` packages install), when its build-id matches.

Only code is kept: ``STT_FUNC`` and ``STT_GNU_IFUNC`` symbols with an address, a name and a section.
Where several functions start at one address, one name is kept: a global or weak binding over a local
one, then a name without a leading underscore (``printf`` over ``_IO_printf``), then the larger size,
then the first in table order (``.symtab``, ``.dynsym``, MiniDebugInfo, the debug file). A function
covers ``[start, start + size)``; one of size 0 covers up to the next function.

The symbol rows are read straight from the section bytes, as numpy columns when numpy is installed
(a 100 000-symbol table in a few tens of milliseconds) and with ``struct.iter_unpack`` otherwise;
pyelftools reads the headers, sections and notes. Parsed files are cached by build-id (and size), or
by device, inode, modification time and size for a file without one.
"""

from __future__ import annotations

import bisect
import errno
import io
import lzma
import os
import stat
import struct
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import IO, Any

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import NoteSection, SymbolTableSection

#: Where separate debug files are looked up by build-id (``<dir>/.build-id/ab/cdef....debug``).
DEBUG_DIRS: list[str] = ["/usr/lib/debug"]
#: How many parsed ELF files stay cached.
ELF_CACHE_SIZE = 128
#: The most bytes a ``.gnu_debugdata`` section may decompress to (a corrupt or hostile one stops there).
MAX_DEBUGDATA = 256 << 20

_STT_FUNC, _STT_GNU_IFUNC = 2, 10
_STB_LOCAL, _STB_GLOBAL, _STB_WEAK = 0, 1, 2
#: What pyelftools raises, or lets through, for a file that is not ELF or is damaged.
PARSE_ERRORS = (ELFError, OSError, ValueError, EOFError, KeyError, AttributeError, IndexError, TypeError,
                OverflowError, struct.error, lzma.LZMAError)


class ElfSymbols:
    """One ELF file's PT_LOAD segments and function symbols (sorted by start address)."""

    __slots__ = ("_name_offsets", "_strings", "build_id", "ends", "segments", "starts")

    def __init__(self, segments: Sequence[tuple[int, int, int]], starts: list[int], ends: list[int],
                 name_offsets: list[int], strings: bytes, build_id: str | None) -> None:
        self.segments = tuple(segments)  # (p_offset, p_filesz, p_vaddr)
        self.starts = starts
        self.ends = ends
        self._name_offsets = name_offsets
        self._strings = strings
        self.build_id = build_id

    def __len__(self) -> int:
        return len(self.starts)

    def vaddr(self, file_offset: int) -> int | None:
        """The virtual address the ELF gives the byte at ``file_offset``, None outside every PT_LOAD."""
        for offset, size, vaddr in self.segments:
            if offset <= file_offset < offset + size:
                return vaddr + file_offset - offset
        return None

    def name(self, i: int) -> str:
        start = self._name_offsets[i]
        return self._strings[start:self._strings.index(b"\0", start)].decode("utf-8", "replace")

    def lookup(self, vaddr: int) -> tuple[str, int] | None:
        """(name, offset) of the function that covers ``vaddr``, None when none does."""
        i = bisect.bisect_right(self.starts, vaddr) - 1
        if i >= 0 and vaddr < self.ends[i]:
            return self.name(i), vaddr - self.starts[i]
        return None

    def names(self) -> Iterable[str]:
        return (self.name(i) for i in range(len(self.starts)))


NOT_ELF = ElfSymbols((), [], [], [], b"", None)


# --- reading the tables ------------------------------------------------------------------------

class _Rows:
    """The function rows of every table read so far: parallel lists, names in one string blob."""

    def __init__(self) -> None:
        self.values: list[Any] = []
        self.sizes: list[Any] = []
        self.binds: list[Any] = []
        self.names: list[Any] = []
        self.blobs: list[bytes] = []
        self._blob_size = 0

    def add_table(self, elf: ELFFile, section: SymbolTableSection) -> None:
        strtab = elf.get_section(section["sh_link"])
        strings = strtab.data() + b"\0"
        raw = section.data()
        is64 = elf.elfclass == 64
        order = "<" if elf.little_endian else ">"
        rows = _numpy_rows(raw, strings, is64, order) if _np is not None else _python_rows(raw, strings, is64, order)
        if rows is None:
            return
        values, sizes, binds, names = rows
        self.values.append(values)
        self.sizes.append(sizes)
        self.binds.append(binds)
        self.names.append(names + self._blob_size if _np is not None else [n + self._blob_size for n in names])
        self.blobs.append(strings)
        self._blob_size += len(strings)

    def build(self, segments: Sequence[tuple[int, int, int]], build_id: str | None) -> ElfSymbols:
        strings = b"".join(self.blobs)
        if not self.values:
            return ElfSymbols(segments, [], [], [], strings, build_id)
        if _np is not None:
            return _numpy_build(self, strings, segments, build_id)
        return _python_build(self, strings, segments, build_id)


try:
    import numpy as _np
except ImportError:  # numpy is optional: the stdlib path below does the same, more slowly
    _np = None  # type: ignore[assignment]


def _numpy_rows(raw: bytes, strings: bytes, is64: bool, order: str) -> tuple[Any, Any, Any, Any] | None:
    if is64:
        dtype = _np.dtype([("name", order + "u4"), ("info", "u1"), ("other", "u1"), ("shndx", order + "u2"),
                           ("value", order + "u8"), ("size", order + "u8")])
    else:
        dtype = _np.dtype([("name", order + "u4"), ("value", order + "u4"), ("size", order + "u4"),
                           ("info", "u1"), ("other", "u1"), ("shndx", order + "u2")])
    table = _np.frombuffer(raw, dtype, count=len(raw) // dtype.itemsize)
    kind = table["info"] & 0xF
    keep = (((kind == _STT_FUNC) | (kind == _STT_GNU_IFUNC)) & (table["value"] != 0) & (table["shndx"] != 0)
            & (table["name"] != 0) & (table["name"] < len(strings) - 1))
    table = table[keep]
    if not len(table):
        return None
    return (table["value"].astype(_np.uint64), table["size"].astype(_np.uint64), table["info"] >> 4,
            table["name"].astype(_np.int64))


def _python_rows(raw: bytes, strings: bytes, is64: bool, order: str) -> tuple[Any, Any, Any, Any] | None:
    values: list[int] = []
    sizes: list[int] = []
    binds: list[int] = []
    names: list[int] = []
    last = len(strings) - 1
    if is64:
        fmt, pick = order + "IBBHQQ", (0, 1, 3, 4, 5)
    else:
        fmt, pick = order + "IIIBBH", (0, 3, 5, 1, 2)
    n_name, n_info, n_shndx, n_value, n_size = pick
    for row in struct.iter_unpack(fmt, raw[:len(raw) - len(raw) % struct.calcsize(fmt)]):
        info = row[n_info]
        if (info & 0xF) not in (_STT_FUNC, _STT_GNU_IFUNC) or not row[n_value] or not row[n_shndx]:
            continue
        if not 0 < row[n_name] < last:
            continue
        values.append(row[n_value])
        sizes.append(row[n_size])
        binds.append(info >> 4)
        names.append(row[n_name])
    return (values, sizes, binds, names) if values else None


def _bind_rank(bind: int) -> int:
    return {_STB_GLOBAL: 0, _STB_WEAK: 1}.get(bind, 2)


def _ends(starts: list[int], sizes: list[int]) -> list[int]:
    """start + size, or the next function's start for a size-0 function (start + 1 for the last)."""
    return [s + n if n else (starts[i + 1] if i + 1 < len(starts) else s + 1)
            for i, (s, n) in enumerate(zip(starts, sizes))]


def _numpy_build(rows: _Rows, strings: bytes, segments: Sequence[tuple[int, int, int]],
                 build_id: str | None) -> ElfSymbols:
    values = _np.concatenate(rows.values)
    sizes = _np.concatenate(rows.sizes)
    binds = _np.concatenate(rows.binds)
    names = _np.concatenate(rows.names)
    blob = _np.frombuffer(strings, _np.uint8)
    rank = _np.where(binds == _STB_GLOBAL, 0, _np.where(binds == _STB_WEAK, 1, 2))
    underscore = blob[names] == ord("_")
    order = _np.lexsort((-sizes.astype(_np.int64), underscore, rank, values))  # stable: table order last
    values = values[order]
    first = _np.ones(len(values), bool)
    first[1:] = values[1:] != values[:-1]
    chosen = order[first]
    starts = values[first].tolist()
    return ElfSymbols(segments, starts, _ends(starts, sizes[chosen].tolist()), names[chosen].tolist(), strings,
                      build_id)


def _python_build(rows: _Rows, strings: bytes, segments: Sequence[tuple[int, int, int]],
                  build_id: str | None) -> ElfSymbols:
    table = []
    for values, sizes, binds, names in zip(rows.values, rows.sizes, rows.binds, rows.names):
        for value, size, bind, name in zip(values, sizes, binds, names):
            table.append((value, _bind_rank(bind), strings[name] == ord("_"), -size, size, name))
    table.sort(key=lambda row: row[:4])  # stable: table order last
    starts: list[int] = []
    sizes_kept: list[int] = []
    offsets: list[int] = []
    for value, _, _, _, size, name in table:
        if starts and starts[-1] == value:
            continue
        starts.append(value)
        sizes_kept.append(size)
        offsets.append(name)
    return ElfSymbols(segments, starts, _ends(starts, sizes_kept), offsets, strings, build_id)


# --- one file --------------------------------------------------------------------------------

def build_id(elf: ELFFile) -> str | None:
    """The file's GNU build-id as hex, None when it has none."""
    for section in elf.iter_sections():
        if not isinstance(section, NoteSection):
            continue
        for note in section.iter_notes():
            if note["n_type"] == "NT_GNU_BUILD_ID" and note["n_name"] == "GNU":
                desc = note["n_desc"]
                return desc if isinstance(desc, str) else bytes(desc).hex()
    return None


def _symbol_tables(elf: ELFFile) -> list[SymbolTableSection]:
    return [s for name in (".symtab", ".dynsym") if isinstance(s := elf.get_section_by_name(name),
                                                                 SymbolTableSection)]


def _debugdata(elf: ELFFile) -> ELFFile | None:
    """The ELF file inside ``.gnu_debugdata`` (MiniDebugInfo), None when there is none or it is damaged."""
    section = elf.get_section_by_name(".gnu_debugdata")
    if section is None:
        return None
    try:
        unpacker = lzma.LZMADecompressor()
        image = unpacker.decompress(section.data(), max_length=MAX_DEBUGDATA)
        return ELFFile(io.BytesIO(image))
    except PARSE_ERRORS:
        return None


def debug_file(build: str) -> str | None:
    """The separate debug file of build-id ``build`` under one of :data:`DEBUG_DIRS`, None when absent."""
    if len(build) < 4 or any(c not in "0123456789abcdef" for c in build):
        return None
    for root in DEBUG_DIRS:
        path = os.path.join(root, ".build-id", build[:2], build[2:] + ".debug")
        try:
            if stat.S_ISREG(os.stat(path).st_mode):
                return path
        except OSError:
            continue
    return None


def _read_debug_file(path: str, build: str, rows: _Rows) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return
        try:
            elf = ELFFile(f)
            if build_id(elf) != build:
                return  # a stale or foreign file at that name: its addresses would be wrong
            for table in _symbol_tables(elf):
                rows.add_table(elf, table)
        except PARSE_ERRORS:
            return


def parse(stream: IO[bytes] | ELFFile) -> ElfSymbols:
    """Every function symbol the file (a stream, or its ELFFile already read) and its debug
    information give (see the module's docstring).

    Raises one of :data:`PARSE_ERRORS` when ``stream`` is not an ELF file or its headers are damaged.
    """
    elf = stream if isinstance(stream, ELFFile) else ELFFile(stream)
    segments = tuple((seg["p_offset"], seg["p_filesz"], seg["p_vaddr"]) for seg in elf.iter_segments()
                     if seg["p_type"] == "PT_LOAD")
    build = build_id(elf)
    rows = _Rows()
    tables = _symbol_tables(elf)
    for table in tables:
        rows.add_table(elf, table)
    mini = _debugdata(elf)
    if mini is not None:
        try:
            for table in _symbol_tables(mini):
                rows.add_table(mini, table)
        except PARSE_ERRORS:
            pass
    if build is not None and not any(t.name == ".symtab" for t in tables):
        path = debug_file(build)
        if path is not None:
            _read_debug_file(path, build, rows)
    return rows.build(segments, build)


_cache_lock = threading.Lock()
_cache: OrderedDict[tuple[object, ...], ElfSymbols] = OrderedDict()


def cached(stream: IO[bytes], fallback_key: tuple[object, ...]) -> ElfSymbols:
    """The parsed symbols of ``stream``: one parse per build-id and size (``fallback_key`` for a file
    without a build-id); a file that is not ELF, or is damaged, has none (:data:`NOT_ELF`)."""
    key = fallback_key
    elf: ELFFile | None = None
    try:
        stream.seek(0, os.SEEK_END)
        size = stream.tell()
        stream.seek(0)
        elf = ELFFile(stream)
        build = build_id(elf)
        if build is not None:
            key = ("build-id", build, size)
    except PARSE_ERRORS:
        pass
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    try:
        if elf is None:  # the header did not read: not ELF
            raise ELFError("not an ELF file")
        parsed = parse(elf)  # the headers read above, not read again
    except PARSE_ERRORS:
        # not an ELF file (a locale archive, a font mapped by a process), a truncated one, or a header
        # whose offsets point nowhere (pyelftools then seeks before the start: OSError): no symbols,
        # its addresses resolve to the module and an offset
        parsed = NOT_ELF
    with _cache_lock:
        _cache[key] = parsed
        while len(_cache) > ELF_CACHE_SIZE:
            _cache.popitem(last=False)
    return parsed


def clear_cache() -> None:
    """Forget every parsed file (a debug file was installed since, say)."""
    with _cache_lock:
        _cache.clear()


def open_regular(path: str) -> int:
    """A read-only fd on the regular file at ``path`` (symlinks followed); OSError otherwise.

    Opened non-blocking, then checked: a FIFO opens without waiting for a writer and is refused.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def defines_function(elf: ELFFile, name: bytes) -> bool:
    """Whether a symbol table of ``elf`` (``.symtab``, ``.dynsym``) defines a function called ``name``."""
    target = name + b"\0"
    for section in _symbol_tables(elf):
        strings = elf.get_section(section["sh_link"]).data() + b"\0"
        offsets = set()
        at = strings.find(target)
        while at >= 0:  # every place the name ends a string, suffixes of longer names included
            offsets.add(at)
            at = strings.find(target, at + 1)
        if not offsets:
            continue
        is64 = elf.elfclass == 64
        order = "<" if elf.little_endian else ">"
        if _np is not None:
            rows = _numpy_rows(section.data(), strings, is64, order)
            if rows is not None and bool(_np.isin(rows[3], sorted(offsets)).any()):
                return True
        else:
            rows = _python_rows(section.data(), strings, is64, order)
            if rows is not None and any(offset in offsets for offset in rows[3]):
                return True
    return False
