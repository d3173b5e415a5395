"""The checked layer: libbpf calls under their C names, every return checked in one place.

Public classes call these functions, never ``lib`` directly (the shim's own
``plb_*`` calls are in :mod:`pylibbpf._shim`, which shares the error helpers
below). A negative return or a NULL pointer becomes a
:class:`~pylibbpf.errors.BPFError` carrying the errno and libbpf's own message;
nothing here decides policy beyond that.
"""

from __future__ import annotations

import errno
import os
import re
from typing import Any

from ._ffi import capture_log, ffi, lib, sync_log_level
from .errors import BPFError, LoadError

CData = Any  # a cffi pointer; cffi has no static types

_LOG_TAIL_LINES = 40


def strerror(err: int) -> str:
    """libbpf's message for a positive error code (including its private 4000+ codes)."""
    buf = ffi.new("char[]", 256)
    if lib.libbpf_strerror(err, buf, 256) < 0:
        return os.strerror(err)
    return str(ffi.string(buf).decode("utf-8", "replace"))


def error(err: int, what: str) -> BPFError:
    """The exception for a positive errno from the call named ``what``."""
    return BPFError(err, strerror(err), what)


def check(ret: int, what: str) -> int:
    """Return ``ret`` when it is not negative; raise BPFError(-ret) otherwise."""
    if ret < 0:
        raise error(-ret, what)
    return ret


def check_ptr(ptr: CData, what: str) -> CData:
    """Return ``ptr`` unless it is NULL; then raise BPFError from the errno libbpf set."""
    if ptr == ffi.NULL:
        raise error(ffi.errno or 22, what)
    return ptr


def dup(fd: int, what: str) -> int:
    """``os.dup(fd)``, failing as a BPFError that names ``what`` (EBADF: the fd was closed underneath)."""
    try:
        return os.dup(fd)
    except OSError as e:
        raise BPFError(e.errno or errno.EBADF, f"{e.strerror} (closed underneath?)", what) from None


def cstr(value: str | os.PathLike[str] | None) -> CData:
    """A NUL-terminated char[] for a str/path (NULL for None); keep it alive while C uses it."""
    if value is None:
        return ffi.NULL
    raw = os.fsencode(value)
    if b"\0" in raw:
        raise ValueError(f"string {value!r} contains a NUL byte")
    return ffi.new("char[]", raw)


def string(ptr: CData) -> str:
    """A C string as str ('' for NULL)."""
    return "" if ptr == ffi.NULL else str(ffi.string(ptr).decode("utf-8", "replace"))


# --- bpf_object ------------------------------------------------------------------------------

def bpf_object__open_file(path: str, opts: CData, what: str) -> CData:
    if os.path.isdir(path):
        # libbpf 1.5.0 leaks the fd it opened when elf_begin() fails, as it does on a directory
        # (bpf_object__elf_finish returns early without an Elf handle): refuse it before libbpf does.
        raise error(errno.EISDIR, what)
    cpath = cstr(path)
    sync_log_level()
    with capture_log():
        return check_ptr(lib.bpf_object__open_file(cpath, opts), what)


def bpf_object__open_mem(buf: CData, size: int, opts: CData, what: str) -> CData:
    sync_log_level()
    with capture_log():
        return check_ptr(lib.bpf_object__open_mem(buf, size, opts), what)


# libbpf's messages (libbpf.c) that say which part of a load failed.
# A pinned map that could not be reused fails the load too ("error reusing pinned map").
_MAP_FAILED = re.compile(r"map '([^']*)': (?:failed to create|error reusing pinned map|cannot find pinned map|"
                         r"failed to auto-pin)")
_PROG_FAILED = re.compile(r"prog '([^']*)': (?:BPF program load failed|failed to load)")
# The verifier log of a refused program, which libbpf prints whole as one message.
_PROG_LOG = re.compile(r"prog '([^']*)': -- BEGIN PROG LOAD LOG --\n(.*)-- END PROG LOAD LOG --", re.S)
# The verifier's reason and the instruction it refused sit on the last lines of its log (the
# line counting processed instructions ends it).
_VERIFIER_TAIL_LINES = 20


def tail_lines(text: str, n: int) -> str:
    """The last ``n`` lines of ``text``."""
    return "\n".join(text.rstrip("\n").splitlines()[-n:])


def verifier_log_of(messages: list[str], prog: str) -> str:
    """The verifier log libbpf printed for the program named ``prog`` ("" when none was printed)."""
    for message in reversed(messages):
        found = _PROG_LOG.search(message)
        if found and found.group(1) == prog:
            return found.group(2)
    return ""


def bpf_object__load(obj: CData, what: str) -> None:
    """Create the maps, load every program; LoadError naming the map or program the kernel
    refused (``stage``/``name``), with the refused program's whole verifier log and the tail of
    that log (or of libbpf's messages) for its text."""
    sync_log_level()
    with capture_log() as messages:
        ret = lib.bpf_object__load(obj)
    if ret < 0:
        stage, name = "object", ""
        for message in messages:
            found = _MAP_FAILED.search(message) or _PROG_FAILED.search(message)
            if found:
                stage, name = ("map" if found.re is _MAP_FAILED else "program"), found.group(1)
                break
        verifier_log = verifier_log_of(messages, name) if stage == "program" else ""
        if verifier_log:
            tail = tail_lines(verifier_log, _VERIFIER_TAIL_LINES)
        else:
            tail = tail_lines("\n".join(messages), _LOG_TAIL_LINES)
        raise LoadError(-ret, strerror(-ret), what, tail, stage, name, verifier_log)


def bpf_object__close(obj: CData) -> None:
    lib.bpf_object__close(obj)


def bpf_object__name(obj: CData) -> str:
    return string(lib.bpf_object__name(obj))


def bpf_object__programs(obj: CData) -> list[CData]:
    progs, prog = [], lib.bpf_object__next_program(obj, ffi.NULL)
    while prog != ffi.NULL:
        progs.append(prog)
        prog = lib.bpf_object__next_program(obj, prog)
    return progs


def bpf_object__maps(obj: CData) -> list[CData]:
    maps, m = [], lib.bpf_object__next_map(obj, ffi.NULL)
    while m != ffi.NULL:
        maps.append(m)
        m = lib.bpf_object__next_map(obj, m)
    return maps


def bpf_object__btf(obj: CData) -> CData:
    """The object's BTF, or NULL when it has none (not an error)."""
    return lib.bpf_object__btf(obj)


# --- bpf_program ------------------------------------------------------------------------------

def bpf_program__name(prog: CData) -> str:
    return string(lib.bpf_program__name(prog))


def bpf_program__section_name(prog: CData) -> str:
    return string(lib.bpf_program__section_name(prog))


def bpf_program__type(prog: CData) -> int:
    return int(lib.bpf_program__type(prog))


def bpf_program__fd(prog: CData) -> int:
    return int(lib.bpf_program__fd(prog))


def bpf_program__autoattach(prog: CData) -> bool:
    return bool(lib.bpf_program__autoattach(prog))


def bpf_program__attach(prog: CData, what: str) -> CData:
    return check_ptr(lib.bpf_program__attach(prog), what)


def bpf_link__destroy(link: CData) -> None:
    lib.bpf_link__destroy(link)


def bpf_link__disconnect(link: CData) -> None:
    """Make ``bpf_link__destroy`` free the link without detaching it."""
    lib.bpf_link__disconnect(link)


def bpf_link__fd(link: CData) -> int:
    return int(lib.bpf_link__fd(link))


def bpf_prog_test_run_opts(prog_fd: int, opts: CData, what: str) -> None:
    check(lib.bpf_prog_test_run_opts(prog_fd, opts), what)


def bpf_prog_load(prog_type: int, name: CData, license: CData, insns: CData, count: int,
                  opts: CData, what: str) -> int:
    """Load raw instructions; the verifier log (opts.log_buf) goes into LoadError."""
    fd = lib.bpf_prog_load(prog_type, name, license, insns, count, opts)
    if fd < 0:
        log = ""
        if opts != ffi.NULL and opts.log_buf != ffi.NULL:
            log = string(opts.log_buf)
        raise LoadError(-fd, strerror(-fd), what, tail_lines(log, _VERIFIER_TAIL_LINES), verifier_log=log)
    return int(fd)


def libbpf_prog_type_str(prog_type: int) -> str:
    return string(lib.libbpf_bpf_prog_type_str(prog_type)) or f"unknown({prog_type})"


def libbpf_map_type_str(map_type: int) -> str:
    return string(lib.libbpf_bpf_map_type_str(map_type)) or f"unknown({map_type})"


def libbpf_num_possible_cpus() -> int:
    return check(lib.libbpf_num_possible_cpus(), "libbpf_num_possible_cpus")


# --- bpf_map ----------------------------------------------------------------------------------

def bpf_map__name(m: CData) -> str:
    return string(lib.bpf_map__name(m))


def bpf_map__type(m: CData) -> int:
    return int(lib.bpf_map__type(m))


def bpf_map__fd(m: CData) -> int:
    return int(lib.bpf_map__fd(m))


def bpf_map__key_size(m: CData) -> int:
    return int(lib.bpf_map__key_size(m))


def bpf_map__value_size(m: CData) -> int:
    return int(lib.bpf_map__value_size(m))


def bpf_map__max_entries(m: CData) -> int:
    return int(lib.bpf_map__max_entries(m))


def bpf_map__initial_value(m: CData) -> bytes | None:
    """A copy of the initial contents of a .data/.rodata/.bss map (None for other maps)."""
    size = ffi.new("size_t *")
    ptr = lib.bpf_map__initial_value(m, size)
    if ptr == ffi.NULL:
        return None
    return bytes(ffi.buffer(ptr, size[0]))


def bpf_map__set_initial_value(m: CData, data: bytes, what: str) -> None:
    """Replace the initial contents (before load; the size must be the map's value size)."""
    check(lib.bpf_map__set_initial_value(m, data, len(data)), what)


def bpf_map__c_initial_value(m: CData) -> tuple[CData, int]:
    """The global-data map's memory itself (not a copy), ``(NULL, 0)`` when it has none.

    Before load: libbpf's initial image. After load: the kernel map mapped into
    this process for an mmapable map (.data/.bss read-write, .rodata read-only);
    NULL for a map that is not mmapable. Valid while the object is open.
    """
    size = ffi.new("size_t *")
    ptr = lib.bpf_map__initial_value(m, size)
    if ptr == ffi.NULL:
        return ffi.NULL, 0
    return ffi.cast("char *", ptr), int(size[0])


def _logged(ret: int, lines: list[str], what: str) -> int:
    """As :func:`check`, with libbpf's last warning (why it refused) added to the message."""
    if ret < 0:
        why = lines[-1].removeprefix("libbpf: ") if lines else ""
        message = strerror(-ret) + (f" ({why})" if why else "")
        raise BPFError(-ret, message, what)
    return ret


def bpf_map__set_max_entries(m: CData, n: int, what: str) -> None:
    check(lib.bpf_map__set_max_entries(m, n), what)


def bpf_map__set_value_size(m: CData, n: int, what: str) -> None:
    with capture_log() as lines:
        ret = lib.bpf_map__set_value_size(m, n)
    _logged(ret, lines, what)


def bpf_map__map_flags(m: CData) -> int:
    return int(lib.bpf_map__map_flags(m))


def bpf_map__btf_key_type_id(m: CData) -> int:
    return int(lib.bpf_map__btf_key_type_id(m))


def bpf_map__btf_value_type_id(m: CData) -> int:
    return int(lib.bpf_map__btf_value_type_id(m))


def bpf_map__is_internal(m: CData) -> bool:
    return bool(lib.bpf_map__is_internal(m))


def bpf_map__set_pin_path(m: CData, path: str | None, what: str) -> None:
    check(lib.bpf_map__set_pin_path(m, cstr(path)), what)


def bpf_map__pin_path(m: CData) -> str | None:
    ptr = lib.bpf_map__pin_path(m)
    return None if ptr == ffi.NULL else string(ptr)


def bpf_map__pin(m: CData, path: str | None, what: str) -> None:
    with capture_log() as lines:
        ret = lib.bpf_map__pin(m, cstr(path))
    _logged(ret, lines, what)


def bpf_map__unpin(m: CData, path: str | None, what: str) -> None:
    with capture_log() as lines:
        ret = lib.bpf_map__unpin(m, cstr(path))
    _logged(ret, lines, what)


def bpf_map__reuse_fd(m: CData, fd: int, what: str) -> None:
    check(lib.bpf_map__reuse_fd(m, fd), what)


def bpf_map_get_info_by_fd(fd: int, what: str) -> CData:
    """The kernel's ``struct bpf_map_info`` of a map fd (EINVAL when the fd is not a map)."""
    info = ffi.new("struct bpf_map_info *")
    size = ffi.new("__u32 *", ffi.sizeof("struct bpf_map_info"))
    check(lib.bpf_map_get_info_by_fd(fd, info, size), what)
    return info


def bpf_map_batch_opts(elem_flags: int = 0) -> CData:
    opts = ffi.new("struct bpf_map_batch_opts *")
    opts.sz = ffi.sizeof("struct bpf_map_batch_opts")
    opts.elem_flags = elem_flags
    return opts


def bpf_map_lookup_batch(fd: int, in_batch: CData, out_batch: CData, keys: CData, values: CData,
                         count: CData, opts: CData, what: str) -> bool:
    """Read up to ``count[0]`` elements (count[0] then holds how many were read).

    True at the end of the map (ENOENT, the last elements read are counted);
    every other error raises BPFError (ENOSPC: a hash bucket holds more
    elements than ``count[0]``; ENOTSUPP/EOPNOTSUPP/EINVAL: no batch support).
    """
    ret = lib.bpf_map_lookup_batch(fd, in_batch, out_batch, keys, values, count, opts)
    if ret < 0 and -ret != errno.ENOENT:
        raise error(-ret, what)
    return bool(ret < 0)


def bpf_map_lookup_and_delete_batch(fd: int, in_batch: CData, out_batch: CData, keys: CData, values: CData,
                                    count: CData, opts: CData, what: str) -> bool:
    """As :func:`bpf_map_lookup_batch`, deleting what it reads."""
    ret = lib.bpf_map_lookup_and_delete_batch(fd, in_batch, out_batch, keys, values, count, opts)
    if ret < 0 and -ret != errno.ENOENT:
        raise error(-ret, what)
    return bool(ret < 0)


def bpf_map_update_batch(fd: int, keys: CData, values: CData, count: CData, opts: CData, what: str) -> None:
    """Write ``count[0]`` elements; on error, count[0] holds how many were written before it."""
    check(lib.bpf_map_update_batch(fd, keys, values, count, opts), what)


def bpf_map_delete_batch(fd: int, keys: CData, count: CData, opts: CData, what: str) -> bool:
    """Delete ``count[0]`` keys; False when the key at index count[0] (after the call) is missing."""
    ret = lib.bpf_map_delete_batch(fd, keys, count, opts)
    if ret < 0 and -ret != errno.ENOENT:
        raise error(-ret, what)
    return bool(ret >= 0)


def bpf_map_lookup_and_delete_elem(fd: int, key: CData, value: CData, what: str) -> bool:
    """True when found (value filled, element deleted), False for ENOENT; other errors raise."""
    ret = lib.bpf_map_lookup_and_delete_elem(fd, key, value)
    if ret < 0:
        if -ret == errno.ENOENT:
            return False
        raise error(-ret, what)
    return True


def bpf_map_lookup_elem(fd: int, key: CData, value: CData, what: str) -> bool:
    """True when found (value filled), False for ENOENT; other errors raise."""
    if lib.bpf_map_lookup_elem(fd, key, value) < 0:
        err = ffi.errno
        if err == lib.ENOENT:
            return False
        raise error(err, what)
    return True


def bpf_map_update_elem(fd: int, key: CData, value: CData, flags: int, what: str) -> None:
    check(lib.bpf_map_update_elem(fd, key, value, flags), what)


def bpf_map_delete_elem(fd: int, key: CData, what: str) -> bool:
    """True when deleted, False for ENOENT; other errors raise."""
    if lib.bpf_map_delete_elem(fd, key) < 0:
        err = ffi.errno
        if err == lib.ENOENT:
            return False
        raise error(err, what)
    return True


def bpf_map_get_next_key(fd: int, key: CData, next_key: CData, what: str) -> bool:
    """True with next_key filled; False at the end (ENOENT)."""
    if lib.bpf_map_get_next_key(fd, key, next_key) < 0:
        err = ffi.errno
        if err == lib.ENOENT:
            return False
        raise error(err, what)
    return True


# --- ring_buffer / perf_buffer (ringbuf.py, perfbuf.py; _rings.py: perf_buffer__new_raw) --------

def ring_buffer__new(map_fd: int, ctx: CData, what: str) -> CData:
    return check_ptr(lib.ring_buffer__new(map_fd, lib.plb_ringbuf_collect, ctx, ffi.NULL), what)


def ring_buffer__add(rb: CData, map_fd: int, ctx: CData, what: str) -> None:
    check(lib.ring_buffer__add(rb, map_fd, lib.plb_ringbuf_collect, ctx), what)


def check_collected(batch: CData, ret: int, what: str) -> int:
    """Raise for a failed drain into ``batch`` (``ret``: the drain's result, records or -errno); the records collected.

    The batch's own stop (byte limit reached) is not an error; a libbpf error
    or a collection failure raises, the records already collected stay in the batch.
    """
    if ret < 0 and not (ret == lib.PLB_BATCH_FULL and batch.full):
        raise error(-ret, what)
    if batch.err:
        raise error(-batch.err, f"{what}: collecting records")
    return int(batch.n)


def ring_buffer__epoll_fd(rb: CData) -> int:
    return int(lib.ring_buffer__epoll_fd(rb))


def ring_buffer__free(rb: CData) -> None:
    lib.ring_buffer__free(rb)


def perf_buffer__new(map_fd: int, page_cnt: int, ctx: CData, what: str) -> CData:
    return check_ptr(lib.perf_buffer__new(map_fd, page_cnt, lib.plb_perfbuf_collect,
                                          lib.plb_perfbuf_collect_lost, ctx, ffi.NULL), what)


def perf_buffer__new_raw(map_fd: int, page_cnt: int, attr: CData, event_cb: CData, ctx: CData,
                         opts: CData, what: str) -> CData:
    return check_ptr(lib.perf_buffer__new_raw(map_fd, page_cnt, attr, event_cb, ctx, opts), what)


def perf_buffer__epoll_fd(pb: CData) -> int:
    return int(lib.perf_buffer__epoll_fd(pb))


def perf_buffer__buffer_cnt(pb: CData) -> int:
    return int(lib.perf_buffer__buffer_cnt(pb))


def perf_buffer__buffer(pb: CData, idx: int, what: str) -> tuple[CData, int]:
    base = ffi.new("void **")
    size = ffi.new("size_t *")
    check(lib.perf_buffer__buffer(pb, idx, base, size), what)
    return base[0], int(size[0])


def perf_buffer__buffer_fd(pb: CData, idx: int, what: str) -> int:
    return check(lib.perf_buffer__buffer_fd(pb, idx), what)


def perf_buffer__free(pb: CData) -> None:
    lib.perf_buffer__free(pb)


# --- btf (btf.py, build.py) -----------------------------------------------------------------------

def btf__find_by_name_kind(btf: CData, name: str, kind: int) -> int:
    """The type id, or a negative value when there is no such type (not an error here)."""
    return int(lib.btf__find_by_name_kind(btf, name.encode("utf-8", "surrogateescape"), kind))


def btf__type_by_id(btf: CData, type_id: int, what: str) -> CData:
    return check_ptr(lib.btf__type_by_id(btf, type_id), what)


def btf__name_by_offset(btf: CData, offset: int) -> str:
    """The name, bytes that are not UTF-8 kept as surrogates: it finds its type again by name."""
    ptr = lib.btf__name_by_offset(btf, offset)
    return "" if ptr == ffi.NULL else ffi.string(ptr).decode("utf-8", "surrogateescape")  # type: ignore[no-any-return]


def btf__resolve_type(btf: CData, type_id: int, what: str) -> int:
    """Skip typedefs and modifiers (const, volatile, restrict, type tags)."""
    return check(lib.btf__resolve_type(btf, type_id), what)


def btf__resolve_size(btf: CData, type_id: int, what: str) -> int:
    return check(lib.btf__resolve_size(btf, type_id), what)


def btf__type_cnt(btf: CData) -> int:
    return int(lib.btf__type_cnt(btf))


def btf__parse(path: str, what: str) -> CData:
    """BTF from a raw BTF file (/sys/kernel/btf/vmlinux) or an ELF's .BTF, freed when garbage collected."""
    return ffi.gc(check_ptr(lib.btf__parse(os.fsencode(path), ffi.NULL), what), lib.btf__free)


def btf__parse_split(path: str, base: CData, what: str) -> CData:
    """Split BTF (a kernel module's, on vmlinux's ``base``), freed when garbage collected (the caller keeps base)."""
    return ffi.gc(check_ptr(lib.btf__parse_split(os.fsencode(path), base), what), lib.btf__free)


# libbpf's btf.h accessors of one btf_type (static inline there, compiled into the module):
# they read the type record and cannot fail; the caller got the type from btf__type_by_id.

def btf_kind(t: CData) -> int:
    return int(lib.btf_kind(t))


def btf_vlen(t: CData) -> int:
    return int(lib.btf_vlen(t))


def btf_kflag(t: CData) -> bool:
    return bool(lib.btf_kflag(t))


def btf_int_encoding(t: CData) -> int:
    return int(lib.btf_int_encoding(t))


def btf_int_offset(t: CData) -> int:
    return int(lib.btf_int_offset(t))


def btf_int_bits(t: CData) -> int:
    return int(lib.btf_int_bits(t))


def btf_array(t: CData) -> CData:
    return lib.btf_array(t)


def btf_members(t: CData) -> CData:
    return lib.btf_members(t)


def btf_member_bit_offset(t: CData, i: int) -> int:
    return int(lib.btf_member_bit_offset(t, i))


def btf_member_bitfield_size(t: CData, i: int) -> int:
    return int(lib.btf_member_bitfield_size(t, i))


def btf_enum(t: CData) -> CData:
    return lib.btf_enum(t)


def btf_enum64(t: CData) -> CData:
    return lib.btf_enum64(t)


def btf_enum64_value(e: CData) -> int:
    return int(lib.btf_enum64_value(e))


def btf_var_secinfos(t: CData) -> CData:
    return lib.btf_var_secinfos(t)


# --- programs and links: load knobs, attach family, pinning, iterators, stats (program.py) ------

def attached(call: Any, what: str, *args: Any) -> CData:
    """Call an attach function; on NULL, BPFError with libbpf's own last complaint appended.

    libbpf logs why an attach failed (which symbol, which file, which
    tracepoint) before it returns NULL; that line names what was not found.
    """
    sync_log_level()
    with capture_log() as lines:
        ptr = call(*args)
    if ptr == ffi.NULL:
        err = ffi.errno or errno.EINVAL
        said = [line.strip() for line in lines if line.strip()]
        message = strerror(err) + (f" (libbpf: {said[-1].removeprefix('libbpf: ')})" if said else "")
        raise BPFError(err, message, what)
    return ptr


def bpf_program__autoload(prog: CData) -> bool:
    return bool(lib.bpf_program__autoload(prog))


def bpf_program__set_autoload(prog: CData, autoload: bool, what: str) -> None:
    check(lib.bpf_program__set_autoload(prog, autoload), what)


def bpf_program__set_autoattach(prog: CData, autoattach: bool) -> None:
    lib.bpf_program__set_autoattach(prog, autoattach)


def bpf_program__expected_attach_type(prog: CData) -> int:
    return int(lib.bpf_program__expected_attach_type(prog))


def bpf_program__attach_usdt(prog: CData, pid: int, binary: str, provider: str, name: str, cookie: int,
                             what: str) -> CData:
    opts = ffi.new("struct bpf_usdt_opts *")
    opts.sz = ffi.sizeof("struct bpf_usdt_opts")
    opts.usdt_cookie = cookie
    return attached(lib.bpf_program__attach_usdt, what, prog, pid, cstr(binary), cstr(provider), cstr(name),
                    opts)


def bpf_program__attach_xdp(prog: CData, ifindex: int, what: str) -> CData:
    return attached(lib.bpf_program__attach_xdp, what, prog, ifindex)


def bpf_program__attach_tcx(prog: CData, ifindex: int, what: str) -> CData:
    opts = ffi.new("struct bpf_tcx_opts *")
    opts.sz = ffi.sizeof("struct bpf_tcx_opts")
    return attached(lib.bpf_program__attach_tcx, what, prog, ifindex, opts)


def bpf_program__attach_cgroup(prog: CData, cgroup_fd: int, what: str) -> CData:
    return attached(lib.bpf_program__attach_cgroup, what, prog, cgroup_fd)


def bpf_program__attach_iter(prog: CData, map_fd: int | None, what: str) -> CData:
    opts = ffi.new("struct bpf_iter_attach_opts *")
    opts.sz = ffi.sizeof("struct bpf_iter_attach_opts")
    if map_fd is not None:
        info = ffi.new("union bpf_iter_link_info *")
        lib.plb_iter_info_set_map_fd(info, map_fd)
        opts.link_info = info
        opts.link_info_len = ffi.sizeof("union bpf_iter_link_info")
    return attached(lib.bpf_program__attach_iter, what, prog, opts)


def bpf_program__pin(prog: CData, path: str, what: str) -> None:
    check(lib.bpf_program__pin(prog, cstr(path)), what)


def bpf_program__unpin(prog: CData, path: str, what: str) -> None:
    check(lib.bpf_program__unpin(prog, cstr(path)), what)


def bpf_link_create(prog_fd: int, target_fd: int, attach_type: int, flags: int, what: str) -> int:
    """A kernel link fd (BPF_LINK_CREATE) for attachments libbpf's bpf_link cannot parameterize."""
    opts = ffi.new("struct bpf_link_create_opts *")
    opts.sz = ffi.sizeof("struct bpf_link_create_opts")
    opts.flags = flags
    return check(lib.bpf_link_create(prog_fd, target_fd, attach_type, opts), what)


def bpf_link_update(link_fd: int, prog_fd: int, what: str) -> None:
    check(lib.bpf_link_update(link_fd, prog_fd, ffi.NULL), what)


def bpf_link__open(path: str, what: str) -> CData:
    return attached(lib.bpf_link__open, what, cstr(path))


def bpf_link__pin(link: CData, path: str, what: str) -> None:
    check(lib.bpf_link__pin(link, cstr(path)), what)


def bpf_link__unpin(link: CData, what: str) -> None:
    check(lib.bpf_link__unpin(link), what)


def bpf_link__pin_path(link: CData) -> str | None:
    ptr = lib.bpf_link__pin_path(link)
    return None if ptr == ffi.NULL else string(ptr)


def bpf_link__update_program(link: CData, prog: CData, what: str) -> None:
    check(lib.bpf_link__update_program(link, prog), what)


def bpf_obj_pin(fd: int, path: str, what: str) -> None:
    check(lib.bpf_obj_pin(fd, cstr(path)), what)


def bpf_obj_get(path: str, what: str) -> int:
    return check(lib.bpf_obj_get(cstr(path)), what)


def bpf_fd_kind(fd: int) -> str:
    """What a BPF fd is: ``"prog"``, ``"map"``, ``"link"``, ``"btf"`` ('' for any other file).

    Read from the name of the fd's anonymous inode, which the kernel gives
    each kind of BPF object (``anon_inode:bpf-prog``, ``anon_inode:bpf-map``;
    a link is ``bpf_link`` when created, ``bpf-link`` when reopened from a
    pin): a pin reopened with ``bpf_obj_get`` says what it is before it is
    used as one.
    """
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""
    kinds = {"anon_inode:bpf-prog": "prog", "anon_inode:bpf-map": "map", "anon_inode:bpf_link": "link",
             "anon_inode:bpf-link": "link", "anon_inode:btf": "btf"}
    return kinds.get(target, "")


def bpf_obj_get_kind(path: str, kind: str, what: str) -> int:
    """``bpf_obj_get(path)``, checked to be a ``kind`` (``prog``, ``map``, ``link``): the new fd.

    BPFError (ENOENT) when nothing is pinned there, (EINVAL) naming what the
    pin holds when it is another kind of BPF object.
    """
    fd = bpf_obj_get(path, what)
    found = bpf_fd_kind(fd)
    if found != kind:
        os.close(fd)
        names = {"prog": "program", "map": "map", "link": "link", "btf": "BTF object"}
        raise BPFError(errno.EINVAL, f"{path} holds a pinned {names.get(found, 'object of unknown kind')}, "
                       f"not a {names[kind]}", what)
    return fd


def object_id(fd: int) -> int:
    """The kernel id of a BPF program, map or link fd (from /proc/self/fdinfo), 0 when it has none."""
    with open(f"/proc/self/fdinfo/{fd}") as info:
        for line in info:
            key, _, value = line.partition(":")
            if key in ("prog_id", "map_id", "link_id"):
                return int(value)
    return 0


def check_pinned_is(path: str, kind: str, fd: int, what: str) -> None:
    """Check that the ``kind`` pinned at ``path`` is the object behind ``fd`` (same kernel id).

    BPFError (ENOENT) when nothing is pinned there, (EINVAL) when the pin
    holds something else: an unpin then removes only its own pin.
    """
    pinned = bpf_obj_get_kind(path, kind, what)
    try:
        mine, theirs = object_id(fd), object_id(pinned)
    finally:
        os.close(pinned)
    if mine != theirs:
        raise BPFError(errno.EINVAL, f"{path} pins another {kind} (id {theirs}), not this one (id {mine}): "
                       "left in place", what)


def unlink_pin(path: str, what: str) -> None:
    """Remove a pin (a file on bpffs); BPFError with the errno when it cannot be removed."""
    try:
        os.unlink(path)
    except OSError as e:
        raise BPFError(e.errno or errno.EINVAL, f"cannot unpin {path}: {e.strerror}", what) from None


def cbuf(data: bytes) -> CData:
    """A C copy of ``data`` (at least one byte: zero-sized keys still need a valid pointer)."""
    return ffi.new("char[]", data) if data else ffi.new("char[]", 1)


def bpf_iter_create(link_fd: int, what: str) -> int:
    return check(lib.bpf_iter_create(link_fd), what)


def bpf_enable_stats(stats_type: int, what: str) -> int:
    return check(lib.bpf_enable_stats(stats_type), what)


def bpf_prog_get_info_by_fd(prog_fd: int, what: str) -> CData:
    """The program's ``struct bpf_prog_info`` (type, id, name, run_cnt, run_time_ns, ...)."""
    info = ffi.new("struct bpf_prog_info *")
    size = ffi.new("__u32 *", ffi.sizeof("struct bpf_prog_info"))
    check(lib.bpf_prog_get_info_by_fd(prog_fd, info, size), what)
    return info


def bpf_xdp_flags(mode: str) -> int:
    """The XDP_FLAGS_* attach mode bit for 'generic' / 'native' ('default': 0, the kernel picks)."""
    return {"default": 0, "generic": int(lib.XDP_FLAGS_SKB_MODE), "native": int(lib.XDP_FLAGS_DRV_MODE)}[mode]


# --- feature probes (features.py) ------------------------------------------------------------------

def _probe(call: Any, what: str, *args: Any) -> bool:
    """A libbpf feature probe's answer. libbpf answers 0 ("not supported") also when the kernel refused
    the probe for lack of privileges; its last bpf() call leaves that errno behind (nothing after the
    failed call touches it): EPERM is raised, as the probe answered nothing."""
    ffi.errno = 0
    ret = check(call(*args, ffi.NULL), what)
    if ret == 0 and ffi.errno == errno.EPERM:
        raise error(errno.EPERM, what)
    return ret == 1


def libbpf_probe_bpf_prog_type(prog_type: int, what: str) -> bool:
    return _probe(lib.libbpf_probe_bpf_prog_type, what, prog_type)


def libbpf_probe_bpf_map_type(map_type: int, what: str) -> bool:
    return _probe(lib.libbpf_probe_bpf_map_type, what, map_type)


def libbpf_probe_bpf_helper(prog_type: int, helper_id: int, what: str) -> bool:
    """libbpf answers 1 ("assume supported") for any load failure without a verifier message naming
    the helper, a refused one included: the caller probes the program type first."""
    return _probe(lib.libbpf_probe_bpf_helper, what, prog_type, helper_id)


# --- user ring buffer (ringbuf.py: UserRingBuffer) -------------------------------------------------

def user_ring_buffer__new(map_fd: int, what: str) -> CData:
    return attached(lib.user_ring_buffer__new, what, map_fd, ffi.NULL)


def user_ring_buffer__reserve(rb: CData, size: int) -> tuple[CData, int]:
    """(sample to fill, 0), or (NULL, errno): ENOSPC when the ring has no room now, E2BIG when it never will."""
    sample = lib.user_ring_buffer__reserve(rb, size)
    return sample, (ffi.errno if sample == ffi.NULL else 0)


def user_ring_buffer__submit(rb: CData, sample: CData) -> None:
    lib.user_ring_buffer__submit(rb, sample)


def user_ring_buffer__free(rb: CData) -> None:
    lib.user_ring_buffer__free(rb)

