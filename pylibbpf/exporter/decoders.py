"""Label decoders: a key field's value to a label's text, chained; None drops the series.

Each decoder takes what the previous one gave (the field's value first: an
int, bytes, a str for a char array, or a tuple for an array) and returns a
str, or None to drop the series:

- ``uint``: an integer as decimal;
- ``string``: a char array up to its first NUL (bytes decoded as UTF-8, bad bytes replaced);
- ``hex``: an integer as ``0x...``, bytes as hex digits;
- ``ksym``: a kernel address as its symbol's name (:class:`pylibbpf.KernelSymbols`; ``0x...`` when
  none covers it);
- ``syscall``: a system call number as its name, from this architecture's table in the kernel's
  UAPI headers (``asm/unistd_64.h`` and kin); the number itself when the table has none;
- ``static_map``: the text through the ``static_map:`` mapping (the text itself when unmapped);
- ``regexp``: the text when one of ``regexps:`` matches it (``re.search``), else the series is dropped;
- ``cgroup``: a cgroup id (its inode on cgroup v2) as the cgroup's path below the cgroup v2 root;
- ``inet_ip``: 4 or 16 bytes (or an int, as a little-endian IPv4 address) as an IP address;
- ``errno``: an error number (either sign) as its name (``ENOENT``).
"""

from __future__ import annotations

import errno as _errno
import glob
import ipaddress
import os
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any

from ..syms import KernelSymbols
from .config import Decoder

#: Where the kernel's UAPI headers give each architecture's system-call numbers (first found wins).
SYSCALL_HEADERS = {
    "x86_64": ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h"),
    "aarch64": ("/usr/include/aarch64-linux-gnu/asm/unistd.h", "/usr/include/asm-generic/unistd.h"),
}
#: Where cgroup v2 is mounted when /proc/self/mounts does not say (the ``cgroup`` decoder walks it).
CGROUP_ROOT = "/sys/fs/cgroup"

_NR = re.compile(r"^#define\s+__NR3?2?_([A-Za-z0-9_]+)\s+(\d+)\s*$")
_tables_lock = threading.Lock()
_syscalls: dict[int, str] | None = None
_ksyms: KernelSymbols | None = None


def syscall_table() -> dict[int, str]:
    """number -> name for this machine's architecture, read once from the UAPI header (empty without one)."""
    global _syscalls
    with _tables_lock:
        if _syscalls is None:
            table: dict[int, str] = {}
            for path in SYSCALL_HEADERS.get(os.uname().machine, ()):
                try:
                    with open(path, encoding="ascii", errors="replace") as f:
                        for line in f:
                            m = _NR.match(line)
                            if m:
                                table.setdefault(int(m.group(2)), m.group(1))
                except OSError:
                    continue
                if table:
                    break
            _syscalls = table
        return _syscalls


def _kernel_symbols() -> KernelSymbols:
    global _ksyms
    with _tables_lock:
        if _ksyms is None:
            _ksyms = KernelSymbols()
        return _ksyms


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).split(b"\0", 1)[0].decode("utf-8", "replace")
    if isinstance(value, tuple):
        return ",".join(_text(v) for v in value)
    return str(value)


def _integer(value: Any, decoder: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.lstrip("-").isdigit():
            return int(value)
        raise ValueError(f"the {decoder} decoder needs an integer field, got {value!r}")
    return value


class _Cgroups:
    """cgroup id (the directory's inode on cgroup v2) -> path below the root; walked again on a miss."""

    def __init__(self) -> None:
        self._paths: dict[int, str] = {}
        self._lock = threading.Lock()

    def path(self, cgroup_id: int) -> str:
        with self._lock:
            if cgroup_id not in self._paths:
                self._paths = self._walk()
            return self._paths.get(cgroup_id, str(cgroup_id))

    @staticmethod
    def _walk() -> dict[int, str]:
        root = cgroup_root()
        paths: dict[int, str] = {}
        try:
            device = os.stat(root).st_dev
        except OSError:
            return paths
        for directory, subdirs, _ in os.walk(root):
            try:
                st = os.stat(directory)
            except OSError:
                continue
            if st.st_dev != device:  # another file system mounted below (a v1 hierarchy): not cgroup v2
                subdirs.clear()
                continue
            paths[st.st_ino] = "/" + os.path.relpath(directory, root).removeprefix(".")
        return paths


_cgroups = _Cgroups()


def cgroup_root() -> str:
    """Where cgroup v2 is mounted: the first ``cgroup2`` file system of /proc/self/mounts (the hybrid
    layout mounts it at /sys/fs/cgroup/unified), else :data:`CGROUP_ROOT`."""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 2 and parts[2] == "cgroup2":
                    return parts[1]
    except OSError:
        pass
    return CGROUP_ROOT


def _decode_one(decoder: Decoder, value: Any) -> str | None:
    name = decoder.name
    if name == "uint":
        return str(_integer(value, name))
    if name == "string":
        return _text(value)
    if name == "hex":
        if isinstance(value, (bytes, bytearray)):
            return bytes(value).hex()
        return hex(_integer(value, name))
    if name == "ksym":
        addr = _integer(value, name)
        sym = _kernel_symbols().resolve(addr) if addr else None
        return sym.name if sym is not None and sym.name else hex(addr)
    if name == "syscall":
        nr = _integer(value, name)
        return syscall_table().get(nr, str(nr))
    if name == "static_map":
        text = _text(value)
        return decoder.static_map.get(text, text)
    if name == "regexp":
        text = _text(value)
        return text if any(re.search(p, text) for p in decoder.regexps) else None
    if name == "cgroup":
        return _cgroups.path(_integer(value, name))
    if name == "inet_ip":
        if isinstance(value, int) and not isinstance(value, bool):
            value = value.to_bytes(4, "little")
        raw = bytes(value) if isinstance(value, (bytes, bytearray)) else None
        if raw is None or len(raw) not in (4, 16):
            raise ValueError(f"the inet_ip decoder needs 4 or 16 bytes, got {value!r}")
        return str(ipaddress.ip_address(raw))
    if name == "errno":
        number = abs(_integer(value, name))
        return _errno.errorcode.get(number, str(number))
    raise ValueError(f"unknown decoder {name!r}")


def chain(decoders: Iterable[Decoder]) -> Callable[[Any], str | None]:
    """One function running ``decoders`` in order; with none, the value's text (``string``'s rule for
    char arrays and bytes, decimal for integers). Raises ValueError for a value a decoder cannot take."""
    steps = tuple(decoders)
    if not steps:
        return _text

    def run(value: Any) -> str | None:
        for decoder in steps:
            value = _decode_one(decoder, value)
            if value is None:
                return None
        return str(value)

    return run


def syscall_headers_present() -> list[str]:
    """The UAPI headers :func:`syscall_table` can read on this machine (for diagnostics)."""
    return [p for p in SYSCALL_HEADERS.get(os.uname().machine, ()) if glob.glob(p)]
