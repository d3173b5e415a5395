"""A map's elements as bytes: raw keys and values checked, batches with the per-element fallback.

What :class:`~pylibbpf.Map`'s ``lookup_batch``, ``pop_items``, ``update_batch``,
``delete_batch`` and ``clear`` run once their keys and values are bytes:

1. Each call tries the kernel's batch command, a few hundred elements at a
   time (``BATCH_ROOM``; a hash bucket holding more grows the room).
2. A map type or kernel without the command answers the first call with
   ENOTSUPP, EOPNOTSUPP or EINVAL: the same work is then done one element
   at a time (``get_next_key`` + ``lookup_elem`` / ``update_elem`` /
   ``delete_elem``), so every map type gets the same result.

The caller passes the map's fd, name (for messages), key size and value layout
(one value, or one 8-byte aligned value per possible CPU), and its key walk.
"""

from __future__ import annotations

import errno
import struct
from collections.abc import Callable, ItemsView, Iterable, Iterator, ValuesView
from typing import Any

from . import _libbpf
from ._ffi import ffi
from .errors import BPFError

CData = Any

# include/linux/errno.h: the kernel's own ENOTSUPP, what BPF_MAP_*_BATCH returns for a map
# type without that batch operation (not in userspace errno.h).
ENOTSUPP = 524
# Errors of a batch command that mean "this map type (or kernel) has no batch operation":
# ENOTSUPP/EOPNOTSUPP from a map type without it, EINVAL from a kernel without the command.
NO_BATCH = frozenset({ENOTSUPP, errno.EOPNOTSUPP, errno.EINVAL})
BATCH_ROOM = 256  # elements per batch call (grown when one hash bucket holds more)
MAX_BATCH_ROOM = 1 << 20


def raw_key(key: object, size: int, name: str, what: str) -> bytes:
    """A raw key: bytes of exactly ``size``, or an int (little-endian, as BPF programs store it)."""
    if isinstance(key, int) and not isinstance(key, bool):
        try:
            raw = key.to_bytes(size, "little", signed=key < 0)
        except OverflowError:
            raise ValueError(f"{what}: key {key} does not fit the map's {size}-byte key") from None
    elif isinstance(key, (bytes, bytearray, memoryview)):
        raw = bytes(key)
    else:
        raise TypeError(f"{what}: key must be bytes or int, not {type(key).__name__}")
    if len(raw) != size:
        raise ValueError(f"{what}: key is {len(raw)} bytes, map {name!r} has {size}-byte keys")
    return raw


def raw_value(value: object, size: int, name: str, what: str) -> bytes:
    """A raw value: bytes of exactly ``size``."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"{what}: value must be bytes, not {type(value).__name__}")
    if len(value) != size:
        raise ValueError(f"{what}: value is {len(value)} bytes, map {name!r} has {size}-byte values")
    return bytes(value)


class NoBatch(Exception):
    """The batch command is not available for this map: take the per-element path."""


def read_all(fd: int, name: str, key_size: int, value_bytes: int, keys: Callable[[], Iterable[bytes]],
             delete: bool) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of the map as bytes; ``delete`` removes what is read.

    ``value_bytes``: one element's value as the kernel lays it out (all CPUs'
    values for a per-CPU map); ``keys``: the map's key walk, for the fallback.
    """
    op = "bpf_map_lookup_and_delete_batch" if delete else "bpf_map_lookup_batch"
    try:
        return _read_batched(fd, key_size, value_bytes, delete, f"{op}({name})")
    except NoBatch:
        return _read_each(fd, name, value_bytes, keys, delete)


def _read_batched(fd: int, ksize: int, vsize: int, delete: bool, what: str) -> list[tuple[bytes, bytes]]:
    call = _libbpf.bpf_map_lookup_and_delete_batch if delete else _libbpf.bpf_map_lookup_batch
    # The kernel's batch token: the previous key for arrays, a u32 bucket index for hashes.
    token_size = max(ksize, 8)
    in_token, out_token = ffi.new("char[]", token_size), ffi.new("char[]", token_size)
    room = BATCH_ROOM
    keys, values = ffi.new("char[]", room * max(1, ksize)), ffi.new("char[]", room * max(1, vsize))
    n = ffi.new("__u32 *")
    opts = _libbpf.bpf_map_batch_opts()
    in_batch = ffi.NULL
    out: list[tuple[bytes, bytes]] = []
    while True:
        n[0] = room
        try:
            done = call(fd, in_batch, out_token, keys, values, n, opts, what)
        except BPFError as e:
            if e.errno == errno.ENOSPC and room < MAX_BATCH_ROOM:  # one bucket holds more than room
                room *= 4
                keys, values = ffi.new("char[]", room * max(1, ksize)), ffi.new("char[]", room * max(1, vsize))
                continue
            if e.errno in NO_BATCH and in_batch == ffi.NULL:
                raise NoBatch from None
            raise
        got = int(n[0])
        kbuf, vbuf = ffi.buffer(keys, got * ksize)[:], ffi.buffer(values, got * vsize)[:]
        out.extend((kbuf[i * ksize:(i + 1) * ksize], vbuf[i * vsize:(i + 1) * vsize]) for i in range(got))
        if done:
            return out
        ffi.memmove(in_token, out_token, token_size)
        in_batch = in_token


def _read_each(fd: int, name: str, vsize: int, keys: Callable[[], Iterable[bytes]],
               delete: bool) -> list[tuple[bytes, bytes]]:
    """The per-element path: walk the keys, read (and delete) each; keys gone meanwhile are skipped."""
    what = f"bpf_map_lookup_{'and_delete_' if delete else ''}elem({name})"
    value = ffi.new("char[]", max(1, vsize))
    out = []
    for key in list(keys()):
        ckey = _libbpf.cbuf(key)
        found = _pop_one(fd, ckey, value, what) if delete else _libbpf.bpf_map_lookup_elem(fd, ckey, value, what)
        if found:
            out.append((key, bytes(ffi.buffer(value, vsize))))
    return out


def _pop_one(fd: int, ckey: CData, value: CData, what: str) -> bool:
    try:
        return _libbpf.bpf_map_lookup_and_delete_elem(fd, ckey, value, what)
    except BPFError as e:
        if e.errno not in NO_BATCH:
            raise
    # No lookup-and-delete for this map type: read, then delete (not atomic).
    return _libbpf.bpf_map_lookup_elem(fd, ckey, value, what) and _libbpf.bpf_map_delete_elem(fd, ckey, what)


def write_all(fd: int, name: str, pairs: list[tuple[bytes, bytes]], flags: int) -> None:
    """Set every (key, value) of ``pairs`` (bytes), ``flags`` applied to each element."""
    what = f"bpf_map_update_batch({name})"
    n = ffi.new("__u32 *")
    opts = _libbpf.bpf_map_batch_opts(flags)
    for start in range(0, len(pairs), BATCH_ROOM * 16):
        chunk = pairs[start:start + BATCH_ROOM * 16]
        keys = _libbpf.cbuf(b"".join(k for k, _ in chunk))
        values = _libbpf.cbuf(b"".join(v for _, v in chunk))
        n[0] = len(chunk)
        try:
            _libbpf.bpf_map_update_batch(fd, keys, values, n, opts, what)
        except BPFError as e:
            if not (e.errno in NO_BATCH and start == 0):  # the kernel leaves n as it was
                raise
            each = f"bpf_map_update_elem({name})"
            for key, value in pairs:
                _libbpf.bpf_map_update_elem(fd, _libbpf.cbuf(key), _libbpf.cbuf(value), flags, each)
            return


def delete_all(fd: int, name: str, keys: list[bytes]) -> int:
    """Delete ``keys`` (bytes); keys not in the map are skipped. How many were deleted."""
    what = f"bpf_map_delete_batch({name})"
    n = ffi.new("__u32 *")
    opts = _libbpf.bpf_map_batch_opts()
    deleted, start = 0, 0
    while start < len(keys):
        chunk = keys[start:start + BATCH_ROOM * 16]
        n[0] = len(chunk)
        try:
            complete = _libbpf.bpf_map_delete_batch(fd, _libbpf.cbuf(b"".join(chunk)), n, opts, what)
        except BPFError as e:
            if not (e.errno in NO_BATCH and start == 0):
                raise
            each = f"bpf_map_delete_elem({name})"
            return sum(1 for key in keys if _libbpf.bpf_map_delete_elem(fd, _libbpf.cbuf(key), each))
        deleted += int(n[0])
        # The kernel stops at a missing key (ENOENT): skip it and go on after it.
        start += int(n[0]) + (0 if complete else 1)
    return deleted


def stack_frames(raw: bytes) -> list[int]:
    """The frame addresses of a stack trace map's value: its u64 slots before the first 0."""
    frames = []
    for (addr,) in struct.iter_unpack("<Q", raw[:len(raw) // 8 * 8]):
        if addr == 0:
            break
        frames.append(addr)
    return frames


class BatchItems(ItemsView[Any, Any]):
    """A map's ``items()``: each iteration is one batch lookup (``lookup_batch``), not one per key."""

    _mapping: Any

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        yield from self._mapping.lookup_batch()


class BatchValues(ValuesView[Any]):
    """A map's ``values()``: each iteration is one batch lookup."""

    _mapping: Any

    def __iter__(self) -> Iterator[Any]:
        for _, value in self._mapping.lookup_batch():
            yield value
