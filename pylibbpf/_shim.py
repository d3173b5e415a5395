"""The checked shim layer: the ``plb_*`` calls of ``csrc/`` under their C names.

As :mod:`pylibbpf._libbpf` does for libbpf: every return is checked here, in
one place, and turned into a :class:`~pylibbpf.errors.BPFError` (errno plus
libbpf's message); the negative codes a caller must act on are returned
instead, as each function says. The classes call these functions, never
``lib`` directly.
"""

from __future__ import annotations

import errno
import os
from typing import Any

from ._ffi import ffi, lib
from ._libbpf import check, check_ptr, error

CData = Any  # a cffi pointer; cffi has no static types


def plb_libbpf_release() -> str:
    """The version of the libbpf linked into the compiled module."""
    return str(ffi.string(lib.plb_libbpf_release()).decode())


# --- batches (csrc/plb_batch.h): what the readers drain into ----------------------------------

def plb_batch_new(ncap: int, cap: int) -> CData:
    """A batch freed automatically when the returned pointer is garbage collected."""
    batch = check_ptr(lib.plb_batch_new(ncap, cap), "plb_batch_new")
    return ffi.gc(batch, lib.plb_batch_free)


def plb_batch_take_buf(batch: CData) -> CData:
    """The batch's record bytes (``batch.used`` long; read ``used`` first), now owned by the returned
    pointer: freed when it is garbage collected. The batch allocates a fresh buffer at its next
    append. ValueError when the batch holds no bytes (nothing to hand over)."""
    buf = lib.plb_batch_take_buf(batch)
    if buf == ffi.NULL:
        raise ValueError("plb_batch_take_buf: the batch holds no record bytes")
    return ffi.gc(buf, lib.plb_buf_free)


def plb_block_buf(lo: int, size: int) -> tuple[CData, int]:
    """Uncleared memory for a drain's output and the bytes it holds: a spare kept from a freed
    buffer when one holds ``lo`` to ``2 * size`` bytes, else ``size`` new bytes (csrc/plb_block.h).
    The pointer owns it: garbage collected, it becomes a spare or is freed."""
    room = ffi.new("uint64_t *")
    buf = check_ptr(lib.plb_block_buf(lo, size, room), "plb_block_buf")
    return ffi.gc(buf, lib.plb_block_buf_free), int(room[0])


def plb_block_buf_shrink(buf: CData, size: int) -> CData:
    """``buf`` (from :func:`plb_block_buf`) cut to its first ``size`` bytes, in place where the
    allocator can; returns the pointer that owns them from now on (``buf`` must not be used again)."""
    ffi.gc(buf, None)  # disarm buf's free: the memory now belongs to the pointer returned
    return ffi.gc(lib.plb_block_buf_shrink(buf, size), lib.plb_block_buf_free)


def plb_batch_reset(batch: CData) -> None:
    """Empty ``batch`` (its records, full flag and error): the records were taken."""
    lib.plb_batch_reset(batch)


# --- the interruptible wait (csrc/plb_wait.h; the edge-triggered add and the fence: plb_perfattr.h) ---

def plb_waiter_init(waiter: CData, fd: int, what: str) -> None:
    check(lib.plb_waiter_init(waiter, fd), what)


def plb_waiter_add(waiter: CData, fd: int, what: str) -> None:
    check(lib.plb_waiter_add(waiter, fd), what)


def plb_waiter_remove(waiter: CData, fd: int, what: str) -> None:
    check(lib.plb_waiter_remove(waiter, fd), what)


#: ``plb_rb_wait_drain(waiter, timeout_ms, views, nrings, batch, n, drained) -> int``: wait up to
#: ``timeout_ms`` (0: not at all), then drain up to ``n`` records from the rings ``views[0..nrings-1]``
#: (``struct plb_rb_view *[]``, RingBuffer's own mappings) into ``batch``, in one C call (the GIL
#: released once for both). Returns the wait's result unchecked, as :func:`plb_waiter_wait` (the caller handles
#: -EINTR and -ECANCELED), PLB_DRAIN_CHECK when the drain failed (``drained[0]`` and the batch's
#: error are for ``_libbpf.check_collected``), or PLB_DRAIN_ONE when it took exactly one record that
#: is not a lost-sample notice. The compiled function itself, not a wrapper: its
#: result is already a Python int, and this runs between a wakeup and the first record reaching
#: Python, where each Python frame costs (see docs/performance.md).
plb_rb_wait_drain = lib.plb_rb_wait_drain

#: ``plb_pb_wait_drain(waiter, timeout_ms, pb, batch, drained) -> int``: the same for every CPU's ring
#: of the perf_buffer ``pb`` (``perf_buffer__consume``). The waiter must watch the rings' perf event
#: fds, not libbpf's epoll fd (csrc/plb_wait.h says why). Returns as :data:`plb_rb_wait_drain`;
#: ``drained[0]`` is the batch's record count, or -errno when ``perf_buffer__consume`` failed.
#: The compiled function itself, for the same reason.
plb_pb_wait_drain = lib.plb_pb_wait_drain

#: ``plb_rb_wait_call(waiter, timeout_ms, views, nrings, batch, n, drained, handle) -> int``: :data:`plb_rb_wait_drain`,
#: and when that drained exactly one record, ``plb_py_one(handle, ring, data, len)`` (Python,
#: ``_batch``'s ``@ffi.def_extern``) from inside the call, returning PLB_DRAIN_CALLED. The compiled
#: function itself, for the same reason.
plb_rb_wait_call = lib.plb_rb_wait_call

#: ``plb_pb_wait_call(waiter, timeout_ms, pb, batch, drained, handle) -> int``: the same over
#: :data:`plb_pb_wait_drain` (``plb_py_one``'s tag is the sample's CPU).
plb_pb_wait_call = lib.plb_pb_wait_call


def plb_waiter_add_writable(waiter: CData, fd: int, what: str) -> None:
    check(lib.plb_waiter_add_writable(waiter, fd), what)


def plb_waiter_wait(waiter: CData, timeout_ms: int) -> int:
    """1 when ready, 0 on timeout, or a negative errno the caller acts on (-ECANCELED: woken
    for close; -EINTR: a signal). Releases the GIL while it blocks."""
    return int(lib.plb_waiter_wait(waiter, timeout_ms))


def plb_waiter_wake(waiter: CData) -> None:
    """Wake every wait on ``waiter`` (any thread); the waits return -ECANCELED from now on."""
    lib.plb_waiter_wake(waiter)


def plb_waiter_close(waiter: CData) -> None:
    lib.plb_waiter_close(waiter)


def plb_epoll_add_edge(epfd: int, fd: int, what: str) -> None:
    check(lib.plb_epoll_add_edge(epfd, fd), what)


def plb_full_fence() -> None:
    lib.plb_full_fence()


def plb_fill_hole(addr: int, length: int) -> None:
    """Map zeroed memory over ``[addr, addr + length)`` (a forked child's perf rings)."""
    lib.plb_fill_hole(ffi.cast("void *", addr), length)


# --- perf events (csrc/plb_perfattr.h) --------------------------------------------------------

#: The perf_buffer event callbacks (C function pointers) given to ``perf_buffer__new_raw``:
#: copy each record into a ``plb_batch`` (the ctx), or leave the rings to the merge.
PERF_EVENT_COLLECT: CData = lib.plb_perf_event_collect
PERF_EVENT_IGNORE: CData = lib.plb_perf_event_ignore


def plb_perf_attr_new(sample_type: int, wakeup_events: int, watermark_bytes: int, clockid: int) -> CData:
    """A BPF output perf_event_attr, freed when the returned pointer is garbage collected."""
    attr = check_ptr(lib.plb_perf_attr_new(sample_type, wakeup_events, watermark_bytes, clockid),
                     "plb_perf_attr_new")
    return ffi.gc(attr, lib.plb_perf_attr_free)


def plb_perf_event_open(type_: int, config: int, period_or_freq: int, freq: bool, pid: int, cpu: int,
                        what: str) -> int:
    return check(lib.plb_perf_event_open(type_, config, period_or_freq, 1 if freq else 0, pid, cpu), what)


# --- the ordered merge (csrc/plb_merge.h) -----------------------------------------------------

def plb_merge_source_perf(src: CData, base: CData, size: int, what: str) -> None:
    check(lib.plb_merge_source_perf(src, base, size), what)


def plb_merge_new(cfg: CData, srcs: CData, n: int, what: str) -> CData:
    return check_ptr(lib.plb_merge_new(cfg, srcs, n), what)


def plb_merge_free(m: CData) -> None:
    lib.plb_merge_free(m)


def plb_merge_drain(m: CData, out: CData, max_records: int, flags: int, what: str) -> int:
    """Entries written (>= 0), or -ENOSPC when the first payload needs more room (out.need)."""
    ret = int(lib.plb_merge_drain(m, out, max_records, flags))
    if ret < 0 and ret != -errno.ENOSPC:
        raise error(-ret, what)
    return ret


def plb_merge_out_uniform(out: CData, n: int) -> int:
    """The one length of ``out``'s first ``n`` entries when they are unflagged samples back to back
    (8-byte aligned) from offset 0; -1 otherwise."""
    return int(lib.plb_merge_out_uniform(out, n))


def plb_merge_poll_timeout_ms(m: CData) -> int:
    return int(lib.plb_merge_poll_timeout_ms(m))


def plb_merge_stats(m: CData, st: CData, backlog: CData, n: int) -> None:
    lib.plb_merge_stats(m, st, backlog, n)


# --- ring buffer mmap and walker (csrc/plb_ringbuf.h) -----------------------------------------

def plb_rb_map(map_fd: int, data_size: int, mapping: CData, what: str) -> None:
    check(lib.plb_rb_map(map_fd, data_size, mapping), what)


def plb_rb_unmap(mapping: CData) -> None:
    lib.plb_rb_unmap(mapping)


def plb_rb_consumer_pos(view: CData) -> int:
    return int(lib.plb_rb_consumer_pos(view))


def plb_rb_available(view: CData) -> int:
    return int(lib.plb_rb_available(view))


def rb_producer_pos(view: CData) -> int:
    """The producer position (page 1 of the mapping).

    Not a shim call: one aligned 8-byte load through the view. It is a
    statistic only (what may be read is decided by plb_rb_read, which
    acquire-loads it), so no ordering is needed here.
    """
    return int(view.producer_pos[0])


def plb_rb_read(view: CData, out: CData, out_cap: int, starts: CData, lens: CData, max_records: int,
                consume: bool, out_used: CData, what: str) -> int:
    """Records copied (>= 0), or -EMSGSIZE: the head record alone needs ``out_used[0]`` bytes.

    BPFError(EBADMSG) for a corrupt head, BPFError(EINVAL) for bad arguments.
    """
    ret = int(lib.plb_rb_read(view, out, out_cap, starts, lens, max_records, 1 if consume else 0, out_used))
    if ret == -lib.EMSGSIZE:
        return ret
    return check(ret, what)


# --- bounded queue (csrc/plb_queue.h) ---------------------------------------------------------

def plb_queue_create(max_pending: int, byte_cap: int, drop_cap: int, drop_byte_cap: int, what: str) -> CData:
    """A queue; free it with plb_queue_destroy once no thread uses it (not garbage collected)."""
    return check_ptr(lib.plb_queue_create(max_pending, byte_cap, drop_cap, drop_byte_cap), what)


def plb_queue_destroy(q: CData) -> None:
    """Free the queue; a consumer still inside it makes the C side refuse (-EBUSY) and leak it instead."""
    lib.plb_queue_destroy(q)


def plb_queue_pop_batch(q: CData, out: CData, out_cap: int, starts: CData, lens: CData, max_records: int,
                        timeout_ms: int, out_used: CData, what: str) -> int:
    """Records popped (> 0), 0 on timeout, -EPIPE once closed and empty, or -EMSGSIZE
    (the head record alone needs ``out_used[0]`` bytes). BPFError(EINVAL) otherwise."""
    ret = int(lib.plb_queue_pop_batch(q, out, out_cap, starts, lens, max_records, timeout_ms, out_used))
    if ret in (-lib.EPIPE, -lib.EMSGSIZE):
        return ret
    return check(ret, what)


def plb_queue_pop_dropped_batch(q: CData, out: CData, out_cap: int, starts: CData, lens: CData,
                                max_records: int, out_used: CData, what: str) -> int:
    """Dropped records popped (>= 0, never waits), or -EMSGSIZE as for plb_queue_pop_batch."""
    ret = int(lib.plb_queue_pop_dropped_batch(q, out, out_cap, starts, lens, max_records, out_used))
    if ret == -lib.EMSGSIZE:
        return ret
    return check(ret, what)


def plb_queue_close(q: CData) -> None:
    lib.plb_queue_close(q)


def plb_queue_stats(q: CData, out: CData) -> None:
    lib.plb_queue_stats(q, out)


# --- native reader thread (csrc/plb_reader.h) -------------------------------------------------

def plb_reader_start(view: CData, wake_fd: int, q: CData, batch_size: int, what: str) -> CData:
    """Start the native reader thread; free it with plb_reader_destroy (not garbage collected)."""
    out = ffi.new("struct plb_reader **")
    check(lib.plb_reader_start(out, view, wake_fd, q, batch_size), what)
    return out[0]


def plb_reader_stop(reader: CData) -> int:
    """Stop and join the thread (idempotent): 0, or the positive errno that ended it early.

    Returned rather than raised: the caller still has a queue and a mapping to
    release before it reports the failure (see :func:`error`).
    """
    return -int(lib.plb_reader_stop(reader))


def plb_reader_destroy(reader: CData) -> None:
    lib.plb_reader_destroy(reader)


def plb_reader_stats(reader: CData, out: CData) -> None:
    lib.plb_reader_stats(reader, out)


# --- BTF (csrc/plb_btf.h) ---------------------------------------------------------------------

def plb_btf_dump_c(btf: CData, fd: int, what: str) -> None:
    """Write every type of ``btf`` as C declarations to ``fd`` (which stays open)."""
    check(lib.plb_btf_dump_c(btf, fd), what)


# --- feature probes (csrc/plb_program.h) -------------------------------------------------------

def plb_multi_link_create(prog_fd: int, attach_type: int, target: str, offset: int, what: str) -> int:
    """A kprobe_multi link on kernel function ``target``, or a uprobe_multi link on file ``target`` at
    ``offset``: the link fd (the caller closes it), BPFError with the kernel's errno otherwise."""
    return check(lib.plb_multi_link_create(prog_fd, attach_type, os.fsencode(target), offset), what)


# --- records straight into array rows (csrc/plb_into.h) ----------------------------------------

def plb_into_new() -> CData:
    """A zeroed ``struct plb_into``; its odd-record copy is freed with it (garbage collection)."""
    return ffi.gc(ffi.new("struct plb_into *"), lib.plb_into_release)


def plb_into_reserve(st: CData, cap: int, what: str) -> None:
    check(lib.plb_into_reserve(st, cap), what)


def plb_into_perf_raw_size(rec_size: int) -> int:
    """The raw size the kernel stores for a perf sample of ``rec_size`` bytes: round_up(rec_size + 4, 8) - 4."""
    return int(lib.plb_into_perf_raw_size(rec_size))


#: ``plb_rb_wait_into(waiter, timeout_ms, views, n, into, ring, err) -> int``: RingBuffer.read_into's
#: wait (up to ``timeout_ms``; 0: none) and fill of ``into``'s rows from ``views[ring[0]:n]`` (an array of
#: ``struct plb_rb_view *``) in one C call. Returns the wait's result unchecked, as
#: :func:`plb_waiter_wait` (the caller handles -EINTR and -ECANCELED): 1 when the fill ran and every
#: ring is empty or the rows are full, PLB_INTO_STOPPED when it ran and stopped short at ring
#: ``ring[0]`` (an odd record in ``into.odd``, or ``err[0]``: that ring's -errno, no row filled).
#: The compiled function itself, not a wrapper: it runs between a wakeup and read_into's return.
plb_rb_wait_into = lib.plb_rb_wait_into

#: ``plb_pb_wait_into(waiter, timeout_ms, pb, n, into, ring, err) -> int``: the same over the perf_buffer
#: ``pb``'s ``n`` CPU rings (a ring also stops short for a lost-samples notice).
plb_pb_wait_into = lib.plb_pb_wait_into


def plb_into_merge(m: CData, st: CData, flags: int, what: str) -> int:
    """Rows written from the ordered merge, in merged order; BPFError(EINVAL) for bad arguments."""
    return check(int(lib.plb_into_merge(m, st, flags)), what)


# --- records -> columns (csrc/plb_columns.h): what to_arrow builds Arrow columns from -----------

def plb_columns_arrow(base: CData, base_len: int, starts: CData, lens: CData, first: int, stride: int, n: int,
                      rec_size: int, cols: CData, ncols: int, shortest: CData, out: CData, what: str) -> int:
    """Scatter ``n`` records into fresh columns described by ``*out`` (an Arrow C data interface array).

    Pure C over the caller's memory, without the GIL. Returns 0 (the caller
    now owns ``*out``: move it to pyarrow or call its release), or -EMSGSIZE:
    a record is shorter than ``rec_size`` (``shortest[0]``, unless NULL, is
    the shortest length; ``*out`` untouched). BPFError(EINVAL) for records
    outside ``base_len``, fields outside ``rec_size`` or a string column of
    more than 2 GiB; BPFError(ENOMEM). ``base`` is only read during the call.
    """
    ret = int(lib.plb_columns_arrow(base, base_len, starts, lens, first, stride, n, rec_size, cols, ncols,
                                    shortest, out))
    if ret == -lib.EMSGSIZE:
        return ret
    return check(ret, what)


def plb_columns_arrow_alloc(cap: int, rec_size: int, cols: CData, ncols: int, out: CData, what: str) -> None:
    """Fresh, unwritten columns for up to ``cap`` records of ``rec_size`` bytes, described by ``*out``.

    The caller then owns ``*out`` (:func:`plb_arrow_release` frees it);
    ``cols`` point into its block. BPFError(EINVAL) for a field outside
    ``rec_size``, ``cap`` above 2^32 - 1 or a string column of more than 2 GiB;
    BPFError(ENOMEM).
    """
    check(int(lib.plb_columns_arrow_alloc(cap, rec_size, cols, ncols, out)), what)


def plb_columns_arrow_finish(out: CData, n: int, cols: CData, ncols: int) -> None:
    """``*out`` cut to the ``n`` rows a reader wrote (``n`` <= its ``cap``); ``cols[].high`` made 0/1."""
    lib.plb_columns_arrow_finish(out, n, cols, ncols)


def plb_arrow_release(array: CData) -> None:
    """Release an Arrow C data interface array that no consumer took (its release callback, if still set)."""
    if array.release != ffi.NULL:
        array.release(array)
