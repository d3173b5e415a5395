"""Bad input, table-driven: every case is tried and must raise its error with its message.

``CASES`` lists (input, call, error, message): ``call(ctx)`` must raise exactly
``error`` (the type itself, not a subclass), with a message that the regex
``message`` finds (``re.search``). ``ctx`` is a :class:`Ctx` made by
:func:`bad_input_context`: loaded test objects, an unloaded one and a closed
one. Nothing here touches BPF at import time, so ``tools/bad_input_table.py``
imports ``CASES``, runs them and renders the Reliability page's bad-input table (docs/reliability.md) from
what each one actually raised; :func:`test_readme_table_is_current` keeps that
table honest.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from progs import emit_ring

from pylibbpf import (
    BackpressureConsumer,
    Batch,
    BPFError,
    BPFObject,
    ClosedError,
    EventDef,
    Histogram,
    Link,
    LoadError,
    Map,
    OrderedReader,
    PerfBuffer,
    PerfReader,
    Program,
    RingBufConsumer,
    RingBuffer,
    SamplingConsumer,
    UserRingBuffer,
    btf,
    build,
    defevent,
    features,
    make_event_parser,
    make_event_serializer,
    map_ringbuf,
    peek_ringbuf_events,
    process_events,
    read_ringbuf_events,
    store_event_field,
    store_event_fields,
    store_event_imm,
)
from pylibbpf.asm import exit_, load_program, mov
from pylibbpf.events import UnknownFieldError

ROOT = Path(__file__).resolve().parent.parent
RINGBUF_OBJ = ROOT / "tests" / "bpf" / "build" / "ringbuf.bpf.o"  # built by the ctx fixture's bpf_objects
TABLE_PAGE = ROOT / "docs" / "reliability.md"  # the page that holds the table
START, END = "<!-- bad-input-table:start -->", "<!-- bad-input-table:end -->"


class Ctx:
    """What the cases work on: loaded objects ``rb`` (ringbuf), ``perf`` (perfbuf), ``ordered``,
    ``progs`` (programs), ``tp`` (tracepoint); ``unloaded`` (ringbuf) and ``tp_unloaded`` (tracepoint),
    opened only; ``closed`` (ringbuf, loaded then closed)."""

    def __init__(self, paths: Mapping[str, Path]) -> None:
        self._objs: list[BPFObject] = []
        self.rb = self._open(paths["ringbuf"], load=True)
        self.perf = self._open(paths["perfbuf"], load=True)
        self.ordered = self._open(paths["ordered"], load=True)
        self.progs = self._open(paths["programs"], load=True)
        self.unloaded = self._open(paths["ringbuf"], load=False)
        self.tp = self._open(paths["tracepoint"], load=True)
        self.tp_unloaded = self._open(paths["tracepoint"], load=False)
        self.closed = self._open(paths["ringbuf"], load=True)
        self.closed.close()

    def _open(self, path: Path, load: bool) -> BPFObject:
        obj = BPFObject.open(path)
        self._objs.append(obj)
        return obj.load() if load else obj

    def close(self) -> None:
        for obj in self._objs:
            obj.close()


@contextlib.contextmanager
def bad_input_context(paths: Mapping[str, Path]) -> Iterator[Ctx]:
    """A :class:`Ctx` over the compiled test objects (name -> path), closed on exit."""
    ctx = Ctx(paths)
    try:
        yield ctx
    finally:
        ctx.close()


@dataclass(frozen=True)
class Case:
    input: str                      #: what was tried, as the Reliability page's table shows it
    call: Callable[[Ctx], Any]      #: tries it; must raise
    error: type[BaseException]      #: the exact exception type
    message: str                    #: a regex the message must contain


# Used by several cases: an event of the DSL's seed.
Conn = defevent("ConnectionEvent", ("timestamp", "u64"), ("pid", "u32"), ("protocol", "u8"), ("comm", "char", 16))


def _u4_dtype() -> Any:
    import numpy as np

    return np.dtype("u4")


def _nothing(*_args: Any) -> None:
    return None


def _after_close(make: Callable[[], Any], use: Callable[[Any], Any]) -> Any:
    """Make a resource, close it, then use it."""
    thing = make()
    thing.close()
    return use(thing)


def _raw_link(c: Ctx) -> Any:
    """A raw tracepoint link of programs.bpf.c (not an iterator, not pinned)."""
    return c.progs.programs["count_raw"].attach_raw_tracepoint("sys_enter")


def _then_close(thing: Any, use: Callable[[Any], Any]) -> Any:
    """Use a resource, closing it whatever happens."""
    with thing:
        return use(thing)


def _returns_str(_data: memoryview) -> str:
    return "done"


def _poll_one(c: Ctx, rb: RingBuffer) -> int:
    """Write one record into ringbuf.bpf.c's rb and poll it."""
    emit_ring(c.rb.programs["emit"], 1)
    return rb.poll(1)


def _fd_closed_underneath(fd: int, use: Callable[[], Any]) -> Any:
    """Close ``fd`` behind its owner's back, try ``use``, then put an fd back at that number
    (the owner closes it)."""
    saved = os.dup(fd)
    os.close(fd)
    try:
        return use()
    finally:
        os.dup2(saved, fd)
        os.close(saved)


CASES: list[Case] = [
    # --- paths and bytes ------------------------------------------------------------------------
    Case("`BPFObject.open('/nonexistent/x.bpf.o')`", lambda c: BPFObject.open("/nonexistent/x.bpf.o"),
         BPFError, r"\[Errno 2\] No such file or directory: .*bpf_object__open_file\(/nonexistent/x.bpf.o\)"),
    Case("`BPFObject.open('/')` (a directory)", lambda c: BPFObject.open("/"),
         BPFError, r"\[Errno 21\] Is a directory: .*bpf_object__open_file\(/\)"),
    Case("`BPFObject.open('/dev/null')` (not an ELF file)", lambda c: BPFObject.open("/dev/null"),
         BPFError, r"\[Errno 4001\] BPF object format invalid: .*bpf_object__open_file\(/dev/null\)"),
    Case("`BPFObject.open(b'')`", lambda c: BPFObject.open(b""),
         BPFError, r"\[Errno 22\] Invalid argument: .*bpf_object__open_mem\(<bytes>\)"),
    Case("`BPFObject.open(b'not an ELF')`", lambda c: BPFObject.open(b"not an ELF"),
         BPFError, r"\[Errno 4001\] BPF object format invalid"),
    Case("`BPFObject.open(b'\\x7fELF' + bytes(60))` (a truncated ELF)",
         lambda c: BPFObject.open(b"\x7fELF" + bytes(60)), BPFError, r"\[Errno 4001\] BPF object format invalid"),
    Case("`BPFObject.open(None)`", lambda c: BPFObject.open(None),  # type: ignore[arg-type]
         TypeError, r"takes a path or bytes, not NoneType"),
    # --- objects, programs, maps ------------------------------------------------------------------
    Case("`obj.load()` a second time", lambda c: c.rb.load(), BPFError, r"\[Errno 22\] object is already loaded"),
    Case("`obj.maps['nope']`", lambda c: c.rb.maps["nope"], KeyError, r"no map named 'nope' in ringbuf \(known: "),
    Case("`obj.programs['nope']`", lambda c: c.rb.programs["nope"], KeyError, r"no program named 'nope'"),
    Case("`prog.test_run()` before `load()`", lambda c: c.unloaded.programs["emit"].test_run(),
         BPFError, r"program 'emit' is not loaded: call BPFObject.load\(\) first"),
    Case("`prog.test_run(repeat=0)`", lambda c: c.rb.programs["emit"].test_run(repeat=0),
         ValueError, r"repeat must be >= 1, got 0"),
    Case("`map.raw.lookup(b'abc')` (a 3-byte key for 4-byte keys)",
         lambda c: c.rb.maps["failed_reserves"].raw.lookup(b"abc"), ValueError, r"key is 3 bytes, .* has 4-byte keys"),
    Case("`map.raw.lookup(2**40)` (an int key too large)", lambda c: c.rb.maps["failed_reserves"].raw.lookup(2**40),
         ValueError, r"does not fit the map's 4-byte key"),
    Case("`map.raw.update(0, 'x')` (a str value)", lambda c: c.rb.maps["failed_reserves"].raw.update(0, "x"),
         TypeError, r"value must be bytes, not str"),
    Case("`map.raw.update(0, bytes(3))` (a short value)",
         lambda c: c.rb.maps["failed_reserves"].raw.update(0, bytes(3)), ValueError,
         r"value is 3 bytes, .* 8-byte values"),
    Case("`prog.test_run(repeat=None)`", lambda c: c.rb.programs["emit"].test_run(repeat=None),  # type: ignore[arg-type]
         TypeError, r"repeat must be an int, got None \(NoneType\)"),
    Case("`prog.test_run(repeat=nan)`", lambda c: c.rb.programs["emit"].test_run(repeat=math.nan),  # type: ignore[arg-type]
         TypeError, r"repeat must be an int, got nan \(float\)"),
    Case("`prog.test_run(cpu=-1)`", lambda c: c.perf.programs["emit_perf"].test_run(cpu=-1),
         ValueError, r"cpu must be >= 0, got -1"),
    Case("`prog.test_run(data='text')`", lambda c: c.rb.programs["emit"].test_run(data="text"),  # type: ignore[arg-type]
         TypeError, r"data must be bytes-like, got a str 'text' \(encode it first\)"),
    Case("`map.raw.update(0, bytes(8), flags=-1)`",
         lambda c: c.rb.maps["failed_reserves"].raw.update(0, bytes(8), flags=-1),
         ValueError, r"flags must be >= 0, got -1"),
    Case("`map.delete(0)` on an array map", lambda c: c.rb.maps["failed_reserves"].delete(0),
         TypeError, r"map 'failed_reserves' is an array map: its elements always exist and cannot be deleted"),
    Case("`map[b'abc']` (3 bytes for a 4-byte u32 key)", lambda c: c.rb.maps["failed_reserves"][b"abc"],
         ValueError, r"key is 3 bytes, map 'failed_reserves' has 4-byte keys"),
    Case("`map[0] = b'abc'` (3 bytes for an 8-byte u64 value)",
         lambda c: c.rb.maps["failed_reserves"].update(0, b"abc"),
         ValueError, r"value is 3 bytes, map 'failed_reserves' has 8-byte values"),
    Case("`map[0] = 1.5` (a float for a u64 value)", lambda c: c.rb.maps["failed_reserves"].update(0, 1.5),
         TypeError, r"map 'failed_reserves' value \(u64\) must be an int, got 1.5"),
    Case("`map[-1]` (a negative u32 key)", lambda c: c.rb.maps["failed_reserves"][-1],
         ValueError, r"map 'failed_reserves' key \(u32\) must be >= 0, got -1"),
    Case("`map[0] = 'x'` (a str for a u64 value)", lambda c: c.rb.maps["failed_reserves"].__setitem__(0, "x"),
         TypeError, r"map 'failed_reserves' value \(u64\) must be an int, got 'x'"),
    Case("`map.update(0, 1, flags=-1)`", lambda c: c.rb.maps["failed_reserves"].update(0, 1, flags=-1),
         ValueError, r"flags must be >= 0, got -1"),
    Case("`map.update_batch({0: 2**64})`", lambda c: c.rb.maps["failed_reserves"].update_batch({0: 2**64}),
         ValueError, r"value \(u64\) must be <= 18446744073709551615"),
    Case("`map.update_batch(5)`", lambda c: c.rb.maps["failed_reserves"].update_batch(5),  # type: ignore[arg-type]
         TypeError, r"expected a mapping or \(key, value\) pairs, got int"),
    Case("`hash_map.delete_batch(b'key')`", lambda c: c.tp.maps["calls"].delete_batch(b"key"),
         TypeError, r"keys must be an iterable of keys, got bytes"),
    Case("`ringbuf_map[0]`", lambda c: c.rb.maps["rb"][0],
         TypeError, r"map 'rb' is a ringbuf map: it has no elements to look up or set; read it with RingBuffer"),
    Case("`perf_event_array_map.pop_items()`", lambda c: c.perf.maps["events"].pop_items(),
         TypeError, r"map 'events' is a perf_event_array map: it has no elements .* PerfBuffer"),
    Case("`map.stack(0)` (not a stack map)", lambda c: c.rb.maps["failed_reserves"].stack(0),
         TypeError, r"map 'failed_reserves' is array, not stack_trace"),
    Case("`map.max_entries = 100` after `load()`",
         lambda c: setattr(c.rb.maps["failed_reserves"], "max_entries", 100),
         BPFError, r"\[Errno 16\] map 'failed_reserves' is already created: max_entries can only be set before"),
    Case("`map.max_entries = 0`", lambda c: setattr(c.unloaded.maps["failed_reserves"], "max_entries", 0),
         ValueError, r"max_entries must be >= 1, got 0"),
    Case("`map.value_size = '8'`", lambda c: setattr(c.unloaded.maps["failed_reserves"], "value_size", "8"),
         TypeError, r"value_size must be an int, got '8'"),
    Case("`map.pin('/tmp/x')` (not on bpffs)", lambda c: c.rb.maps["failed_reserves"].pin("/tmp/pylibbpf-x"),
         BPFError, r"\[Errno 22\] Invalid argument \(specified path /tmp/pylibbpf-x is not on BPF FS\)"),
    Case("`map.pin(42)`", lambda c: c.rb.maps["failed_reserves"].pin(42),  # type: ignore[arg-type]
         TypeError, r"path must be a path \(str or os.PathLike\), got 42"),
    Case("`map.unpin()` (never pinned)", lambda c: c.rb.maps["failed_reserves"].unpin(),
         BPFError, r"map 'failed_reserves' is not pinned"),
    Case("`map.reuse_pinned('/sys/fs/bpf/nothing')`",
         lambda c: c.unloaded.maps["failed_reserves"].reuse_pinned("/sys/fs/bpf/pylibbpf-nothing-here"),
         BPFError, r"\[Errno 2\] No such file or directory: .*bpf_obj_get"),
    Case("`map.reuse_pinned(path)` after `load()`", lambda c: c.rb.maps["rb"].reuse_pinned("/sys/fs/bpf/x"),
         BPFError, r"\[Errno 16\] map 'rb' is already created: reuse_pinned\(\) can only be set before"),
    # --- globals and BTF --------------------------------------------------------------------------
    Case("`obj.globals['nope']`", lambda c: c.tp.globals["nope"],
         KeyError, r"no global variable named 'nope' in tracepoint \(known: target_tgid\)"),
    Case("`obj.globals['target_tgid'] = 1` after `load()` (.rodata)",
         lambda c: c.tp.globals.__setitem__("target_tgid", 1),
         BPFError, r"\[Errno 1\] global 'target_tgid' is in .rodata, frozen by BPFObject.load\(\)"),
    Case("`obj.globals['target_tgid'] = -1` (a u32)", lambda c: c.tp_unloaded.globals.__setitem__("target_tgid", -1),
         ValueError, r"global 'target_tgid' \(u32\) must be >= 0, got -1"),
    Case("`obj.globals['target_tgid'] = '1'`", lambda c: c.tp_unloaded.globals.__setitem__("target_tgid", "1"),
         TypeError, r"global 'target_tgid' \(u32\) must be an int, got '1'"),
    Case("`del obj.globals['target_tgid']`", lambda c: c.tp_unloaded.globals.__delitem__("target_tgid"),
         TypeError, r"global 'target_tgid' cannot be deleted"),
    Case("`obj.btf_struct('nope')`", lambda c: c.tp.btf_struct("nope"),
         KeyError, r"no struct named 'nope' in the BTF of object 'tracepoint': the compiler keeps only the types "
                   r"reached from a global variable, a map or a function signature"),
    # --- map types --------------------------------------------------------------------------------
    Case("`RingBuffer(perf_event_array_map, cb)`", lambda c: RingBuffer(c.perf.maps["events"], _nothing),
         TypeError, r"RingBuffer needs a ringbuf map; map 'events' is perf_event_array"),
    Case("`PerfBuffer(ringbuf_map, cb)`", lambda c: PerfBuffer(c.rb.maps["rb"], _nothing),
         TypeError, r"PerfBuffer needs a perf_event_array map; map 'rb' is ringbuf"),
    Case("`PerfReader(array_map)`", lambda c: PerfReader(c.rb.maps["failed_reserves"]),
         TypeError, r"PerfReader needs a perf_event_array map; map 'failed_reserves' is array"),
    Case("`OrderedReader(array_map)`", lambda c: OrderedReader(c.ordered.maps["counters"]),
         TypeError, r"needs a perf_event_array map or ringbuf maps; map 'counters' is array"),
    Case("`OrderedReader([rb0, rb0], timestamp=0)`",
         lambda c: OrderedReader([c.ordered.maps["rb0"], c.ordered.maps["rb0"]], timestamp=0),
         ValueError, r"the same ring buffer map appears twice"),
    Case("`BackpressureConsumer(perf_event_array_map, cb)`",
         lambda c: BackpressureConsumer(c.perf.maps["events"], _nothing),
         TypeError, r"BackpressureConsumer needs a ringbuf map; map 'events' is perf_event_array"),
    Case("`map_ringbuf(array_map)`", lambda c: map_ringbuf(c.rb.maps["failed_reserves"]),
         TypeError, r"map_ringbuf needs a ringbuf map; map 'failed_reserves' is array"),
    Case("`RingBuffer('rb', cb)` (a name, not a Map)", lambda c: RingBuffer("rb", _nothing),  # type: ignore[arg-type]
         TypeError, r"RingBuffer needs a Map, not str"),
    Case("`RingBuffer(map_of_an_unloaded_object, cb)`", lambda c: RingBuffer(c.unloaded.maps["rb"], _nothing),
         BPFError, r"map 'rb' is not created: call BPFObject.load\(\) first"),
    # --- options ----------------------------------------------------------------------------------
    Case("`RingBuffer(map, 42)` (callback not callable)", lambda c: RingBuffer(c.rb.maps["rb"], 42),  # type: ignore[arg-type]
         TypeError, r"callback must be callable, got 42 \(int\)"),
    Case("`RingBuffer(map, cb, max_batch=0)`", lambda c: RingBuffer(c.rb.maps["rb"], _nothing, max_batch=0),
         ValueError, r"max_batch must be >= 1, got 0"),
    Case("`RingBuffer(map, cb, max_batch=None)`",
         lambda c: RingBuffer(c.rb.maps["rb"], _nothing, max_batch=None),  # type: ignore[arg-type]
         TypeError, r"max_batch must be an int, got None \(NoneType\)"),
    Case("`RingBuffer(map, cb, max_batch=0.5)`",
         lambda c: RingBuffer(c.rb.maps["rb"], _nothing, max_batch=0.5),  # type: ignore[arg-type]
         TypeError, r"max_batch must be an int, got 0.5 \(float\)"),
    Case("`RingBuffer(map, cb, max_batch=nan)`",
         lambda c: RingBuffer(c.rb.maps["rb"], _nothing, max_batch=math.nan),  # type: ignore[arg-type]
         TypeError, r"max_batch must be an int, got nan \(float\)"),
    Case("`PerfBuffer(map, cb, page_cnt=None)`",
         lambda c: PerfBuffer(c.perf.maps["events"], _nothing, page_cnt=None),  # type: ignore[arg-type]
         TypeError, r"page_cnt must be an int, got None \(NoneType\)"),
    Case("`PerfBuffer(map, cb, page_cnt=0.5)`",
         lambda c: PerfBuffer(c.perf.maps["events"], _nothing, page_cnt=0.5),  # type: ignore[arg-type]
         TypeError, r"page_cnt must be an int, got 0.5 \(float\)"),
    Case("`PerfBuffer(map, cb, page_cnt=3)`", lambda c: PerfBuffer(c.perf.maps["events"], _nothing, page_cnt=3),
         ValueError, r"page_cnt must be a power of two, got 3"),
    Case("`PerfReader(map, per_cpu_buffer=0)`", lambda c: PerfReader(c.perf.maps["events"], per_cpu_buffer=0),
         ValueError, r"per_cpu_buffer must be >= 1, got 0"),
    Case("`PerfReader(map, watermark=4096)` (the whole ring)",
         lambda c: PerfReader(c.perf.maps["events"], watermark=4096),
         ValueError, r"watermark must be >= 0 and below the ring size 4096, got 4096"),
    Case("`PerfReader(map, watermark=64, wakeup_events=2)`",
         lambda c: PerfReader(c.perf.maps["events"], watermark=64, wakeup_events=2),
         ValueError, r"watermark and wakeup_events cannot both be set"),
    Case("`OrderedReader(map, late='reorder')`", lambda c: OrderedReader(c.ordered.maps["events"], late="reorder"),
         ValueError, r"late must be one of 'deliver', 'drop'; got 'reorder'"),
    Case("`OrderedReader(map, window_ms=-1)`", lambda c: OrderedReader(c.ordered.maps["events"], window_ms=-1),
         ValueError, r"window_ms must be >= 0, got -1"),
    Case("`OrderedReader(map, timestamp='ts')` (no `event=`)",
         lambda c: OrderedReader(c.ordered.maps["events"], timestamp="ts"),
         ValueError, r"timestamp field 'ts' needs event=EventDef"),
    Case("`OrderedReader([rb0, rb1])` (kernel time, ring buffers)",
         lambda c: OrderedReader([c.ordered.maps["rb0"], c.ordered.maps["rb1"]]),
         ValueError, r"timestamp='kernel' needs a perf event array"),
    Case("`OrderedReader(map, timestamp=True)`", lambda c: OrderedReader(c.ordered.maps["events"], timestamp=True),
         TypeError, r"timestamp must be 'kernel', a byte offset or a field name, not a bool"),
    Case("`BackpressureConsumer(map, cb, max_pending=0)`",
         lambda c: BackpressureConsumer(c.rb.maps["rb"], _nothing, max_pending=0),
         ValueError, r"max_pending must be >= 1, got 0"),
    Case("`BackpressureConsumer(map, cb, max_pending='10')`",
         lambda c: BackpressureConsumer(c.rb.maps["rb"], _nothing, max_pending="10"),  # type: ignore[arg-type]
         TypeError, r"max_pending must be an int, got '10' \(str\)"),
    Case("`SamplingConsumer(map, cb, sample_rate=1.5)`",
         lambda c: SamplingConsumer(c.rb.maps["rb"], _nothing, sample_rate=1.5),
         ValueError, r"sample_rate must be <= 1.0, got 1.5"),
    Case("`SamplingConsumer(map, cb, sample_rate=nan)`",
         lambda c: SamplingConsumer(c.rb.maps["rb"], _nothing, sample_rate=math.nan),
         ValueError, r"sample_rate must be a finite number, got nan"),
    Case("`RingBufConsumer(map, cb, batch_size=0)`",
         lambda c: RingBufConsumer(c.rb.maps["rb"], _nothing, batch_size=0),
         ValueError, r"batch_size must be >= 1, got 0"),
    Case("`RingBufConsumer(map, cb, batch_size=2**31)`",
         lambda c: RingBufConsumer(c.rb.maps["rb"], _nothing, batch_size=2**31),
         ValueError, r"batch_size must be <= 1048576, got 2147483648"),
    Case("`RingBufConsumer(map, cb, deserializer=5)`",
         lambda c: RingBufConsumer(c.rb.maps["rb"], _nothing, deserializer=5),  # type: ignore[arg-type]
         TypeError, r"deserializer must be callable, got 5 \(int\)"),
    Case("`process_events(map, 'print')` (callback not callable)",
         lambda c: process_events(c.rb.maps["rb"], "print"),  # type: ignore[arg-type]
         TypeError, r"callback must be callable, got 'print' \(str\)"),
    Case("`peek_ringbuf_events(map, max_events=-1)`",
         lambda c: peek_ringbuf_events(c.rb.maps["rb"], max_events=-1),
         ValueError, r"max_events must be >= 0, got -1"),
    Case("`RingBuffer(map, cb)` whose callback returns `'done'`",
         lambda c: _then_close(RingBuffer(c.rb.maps["rb"], _returns_str), lambda rb: _poll_one(c, rb)),
         TypeError, r"callback _returns_str must return None or an int, returned 'done' \(str\)"),
    # --- buffers ----------------------------------------------------------------------------------
    Case("`ConnectionEvent.parse(b'short')`", lambda c: Conn.parse(b"short"),
         ValueError, r"event 'ConnectionEvent' needs 29 bytes, buffer has 5"),
    Case("`ConnectionEvent.parse(b'short', partial=True)` (no trailing array cut short)",
         lambda c: Conn.parse(b"\0" * 12, partial=True),
         ValueError, r"event 'ConnectionEvent' needs 13 bytes, buffer has 12"),
    Case("`ConnectionEvent.parse(123)`", lambda c: Conn.parse(123),
         TypeError, r"cannot parse int, need a bytes-like object"),
    Case("`ConnectionEvent.serialize({'comm': 'x' * 17})`", lambda c: Conn.serialize({"comm": "x" * 17}),
         ValueError, r"field 'comm' holds 16 bytes, got 17"),
    Case("`read_ringbuf_events(layout, max_events=-1)`",
         lambda c: _then_close(map_ringbuf(c.rb.maps["rb"]), lambda lay: read_ringbuf_events(lay, -1)),
         ValueError, r"max_events must be >= 0, got -1"),
    Case("`perf_buffer.buffer(99)` (no such ring)",
         lambda c: _then_close(PerfBuffer(c.perf.maps["events"], _nothing), lambda pb: pb.buffer(99)),
         IndexError, r"perf buffer slot 99 out of range"),
    # --- DSL specs --------------------------------------------------------------------------------
    Case("`defevent('E', ('x', 'u128'))`", lambda c: defevent("E", ("x", "u128")),
         ValueError, r"event 'E': unknown type 'u128' for field 'x'"),
    Case("`defevent('E', ('x', 'u32'), ('x', 'u8'))`", lambda c: defevent("E", ("x", "u32"), ("x", "u8")),
         ValueError, r"duplicate field name 'x'"),
    Case("`defevent('E', ('x', 'u8', 0))`", lambda c: defevent("E", ("x", "u8", 0)),
         ValueError, r"count of field 'x' must be >= 1, got 0"),
    Case("`defevent('E', ('x', 'u8', 2**62))`", lambda c: defevent("E", ("x", "u8", 2**62)),
         ValueError, r"event 'E': count of field 'x' must be <= 2147483647, got 4611686018427387904"),
    Case("`defevent('E', ('x', 'u64', 2**31 - 1))` (16 GiB)", lambda c: defevent("E", ("x", "u64", 2**31 - 1)),
         ValueError, r"event 'E': size must be <= 2147483647, got 17179869176"),
    Case("`defevent('E', ('x', 'u8', None))`", lambda c: defevent("E", ("x", "u8", None)),
         TypeError, r"event 'E': count of field 'x' must be an int, got None"),
    Case("`defevent('E', ('x', 'u8'), layout='weird')`", lambda c: defevent("E", ("x", "u8"), layout="weird"),
         ValueError, r"unknown layout 'weird'"),
    Case("`defevent('E')` (no fields)", lambda c: defevent("E"), ValueError, r"event 'E' has no fields"),
    Case("`make_event_parser(['u33'])`", lambda c: make_event_parser(["u33"]),
         ValueError, r"unknown type 'u33'"),
    Case("`make_event_serializer(['u8'])((256,))`", lambda c: make_event_serializer(["u8"])((256,)),
         ValueError, r"value 256 out of range for field 'f0' \(u8: 0..255\)"),
    Case("`ConnectionEvent.serialize({'nope': 1})`", lambda c: Conn.serialize({"nope": 1}),
         UnknownFieldError, r"event 'ConnectionEvent' has no field 'nope'"),
    Case("`ConnectionEvent.serialize({'pid': -1})`", lambda c: Conn.serialize({"pid": -1}),
         ValueError, r"value -1 out of range for field 'pid'"),
    Case("`ConnectionEvent.serialize({'pid': 'x'})`", lambda c: Conn.serialize({"pid": "x"}),
         TypeError, r"field 'pid' \(u32\) needs an int, got str"),
    # --- registers and instructions ---------------------------------------------------------------
    Case("`store_event_field('r11', ConnectionEvent, 'pid', 'r7')`",
         lambda c: store_event_field("r11", Conn, "pid", "r7"), ValueError, r"bad register 'r11'"),
    Case("`store_event_field('r6', ConnectionEvent, 'pid', 'x7')`",
         lambda c: store_event_field("r6", Conn, "pid", "x7"), ValueError, r"bad register 'x7'"),
    Case("`store_event_field('r6', ConnectionEvent, 'comm', 'r7')` (an array field)",
         lambda c: store_event_field("r6", Conn, "comm", "r7"),
         ValueError, r"only a scalar field of 1, 2, 4 or 8 bytes can be stored in one instruction"),
    Case("`store_event_imm('r6', ConnectionEvent, 'protocol', 256)`",
         lambda c: store_event_imm("r6", Conn, "protocol", 256),
         ValueError, r"immediate 256 does not fit field 'protocol' \(u8\)"),
    Case("`store_event_fields('r6', ConnectionEvent, {'pid': {'bad': 1}})`",
         lambda c: store_event_fields("r6", Conn, {"pid": {"bad": 1}}),
         ValueError, r"expected \{'reg': register\} or \{'imm': int\}"),
    Case("`mov('r0', 2**40)`", lambda c: mov("r0", 2**40), ValueError, r"immediate must be <= \d+, got 1099511627776"),
    Case("`load_program([], 'syscall')`", lambda c: load_program([], "syscall"),
         ValueError, r"cannot load an empty program"),
    Case("`load_program(insns, 'nosuchtype')`", lambda c: load_program([mov("r0", 0), exit_()], "nosuchtype"),
         ValueError, r"unknown program type 'nosuchtype'"),
    Case("`load_program([exit_()], 'syscall')` (r0 never set)", lambda c: load_program([exit_()], "syscall"),
         LoadError, r"\[Errno 13\] Permission denied: .*bpf_prog_load\(asm_prog\)"),
    # --- attach calls, links, pins (programs.bpf.c) ---------------------------------------------------
    Case("`prog.attach()` of a `SEC('perf_event')` program", lambda c: c.progs.programs["on_sample"].attach(),
         BPFError, r"\[Errno 95\] SEC\('perf_event'\) does not say where to attach: use attach_perf_event\(\)"),
    Case("`prog.autoload = False` after `load()`",
         lambda c: setattr(c.progs.programs["run_me"], "autoload", False),
         BPFError, r"\[Errno 16\] program 'run_me' is already loaded: set autoload before load\(\)"),
    Case("`prog.attach_tracepoint('syscalls', 'sys_enter_nope')`",
         lambda c: c.progs.programs["count_tp"].attach_tracepoint("syscalls", "sys_enter_nope"),
         BPFError, r"\[Errno 2\] no tracepoint syscalls/sys_enter_nope"),
    Case("`prog.attach_raw_tracepoint('nope_nope')`",
         lambda c: c.progs.programs["count_raw"].attach_raw_tracepoint("nope_nope"),
         BPFError, r"\[Errno 2\] no raw tracepoint 'nope_nope'"),
    Case("`prog.attach_kprobe('plb_no_such_function')`",
         lambda c: c.progs.programs["on_kprobe"].attach_kprobe("plb_no_such_function"),
         BPFError, r"this kernel has no kprobes|plb_no_such_function"),
    Case("`prog.attach_uprobe('/nonexistent/bin', 'main')`",
         lambda c: c.progs.programs["on_uprobe"].attach_uprobe("/nonexistent/bin", "main"),
         BPFError, r"\[Errno 2\] binary /nonexistent/bin not found"),
    Case("`prog.attach_uprobe('/bin/true', 'plb_no_such_symbol')`",
         lambda c: c.progs.programs["on_uprobe"].attach_uprobe("/bin/true", "plb_no_such_symbol"),
         BPFError, r"\[Errno 2\] no symbol 'plb_no_such_symbol' in /bin/true"),
    Case("`prog.attach_uprobe('libplbnosuchlib', 'f')`",
         lambda c: c.progs.programs["on_uprobe"].attach_uprobe("libplbnosuchlib", "f"),
         BPFError, r"\[Errno 2\] library 'libplbnosuchlib' not found"),
    Case("`prog.attach_uprobe('/bin/true')` (no symbol, no offset)",
         lambda c: c.progs.programs["on_uprobe"].attach_uprobe("/bin/true"),
         ValueError, r"attach_uprobe needs symbol= or a file offset="),
    Case("`prog.attach_usdt('/bin/true', 'plbtest', 'nope')`",
         lambda c: c.progs.programs["on_usdt"].attach_usdt("/bin/true", "plbtest", "nope"),
         BPFError, r"no USDT probe plbtest:nope in /bin/true"),
    Case("`prog.attach_perf_event('cpu-clocks')`",
         lambda c: c.progs.programs["on_sample"].attach_perf_event("cpu-clocks"),
         ValueError, r"unknown perf event 'cpu-clocks' \(known: cpu-clock, "),
    Case("`prog.attach_perf_event(frequency=99, period=1000)`",
         lambda c: c.progs.programs["on_sample"].attach_perf_event(frequency=99, period=1000),
         ValueError, r"give frequency= or period=, not both"),
    Case("`prog.attach_perf_event(cpus=[4096])`",
         lambda c: c.progs.programs["on_sample"].attach_perf_event(cpus=[4096]),
         ValueError, r"cpus \[4096\] are not online"),
    Case("`prog.attach_xdp('plbnope0')`", lambda c: c.progs.programs["xdp_count"].attach_xdp("plbnope0"),
         BPFError, r"\[Errno 19\] no network interface named 'plbnope0'"),
    Case("`prog.attach_xdp('lo', mode='offload')`",
         lambda c: c.progs.programs["xdp_count"].attach_xdp("lo", mode="offload"),
         ValueError, r"mode must be one of 'default', 'generic', 'native'; got 'offload'"),
    Case("`prog.attach_tcx(999999)`", lambda c: c.progs.programs["tcx_count"].attach_tcx(999999),
         BPFError, r"\[Errno 19\] no network interface with index 999999"),
    Case("`prog.attach_cgroup('/nonexistent/cg')`",
         lambda c: c.progs.programs["sock_create"].attach_cgroup("/nonexistent/cg"),
         BPFError, r"\[Errno 2\] no cgroup directory /nonexistent/cg"),
    Case("`prog.attach_cgroup('/proc')` (not a cgroup)",
         lambda c: c.progs.programs["sock_create"].attach_cgroup("/proc"),
         BPFError, r"\[Errno 20\] /proc is not a cgroup v2 directory"),
    Case("`prog.pin('/tmp/x')` (not in bpffs)", lambda c: c.progs.programs["run_me"].pin("/tmp/plb_not_bpffs"),
         BPFError, r"\[Errno 22\]"),
    Case("`Program.open_pinned('/nonexistent/pin')`", lambda c: Program.open_pinned("/nonexistent/pin"),
         BPFError, r"\[Errno 2\] No such file or directory: .*bpf_obj_get\(/nonexistent/pin\)"),
    Case("`Link.open_pinned('/nonexistent/pin')`", lambda c: Link.open_pinned("/nonexistent/pin"),
         BPFError, r"\[Errno 2\] No such file or directory"),
    Case("`link.read()` of a raw tracepoint link",
         lambda c: _then_close(_raw_link(c), lambda ln: ln.read()),
         TypeError, r"link of 'count_raw' is not an iterator"),
    Case("`link.unpin()` of a link not pinned",
         lambda c: _then_close(_raw_link(c), lambda ln: ln.unpin()),
         BPFError, r"\[Errno 22\] link of 'count_raw' is not pinned"),
    Case("`link.update_program('alt_raw')` (a name, not a Program)",
         lambda c: _then_close(_raw_link(c), lambda ln: ln.update_program("alt_raw")),
         TypeError, r"update_program needs a Program, not str"),
    Case("`link.fd` after `destroy()`",
         lambda c: _after_close(lambda: _raw_link(c), lambda ln: ln.fd),
         ClosedError, r"^link of 'count_raw' is closed$"),
    Case("`UserRingBuffer(array_map)`", lambda c: UserRingBuffer(c.progs.maps["counts"]),
         TypeError, r"UserRingBuffer needs a user_ringbuf map; map 'counts' is array"),
    Case("`urb.submit(bytes(5000))` (larger than the ring)",
         lambda c: _then_close(UserRingBuffer(c.progs.maps["urb"]), lambda u: u.submit(bytes(5000))),
         ValueError, r"a record of 5000 bytes can never fit this 4096-byte ring"),
    Case("`urb.submit(b'x', timeout=-1)`",
         lambda c: _then_close(UserRingBuffer(c.progs.maps["urb"]), lambda u: u.submit(b"x", timeout=-1)),
         ValueError, r"timeout must be >= 0"),
    Case("`urb.submit(b'x')` after `close()`",
         lambda c: _after_close(lambda: UserRingBuffer(c.progs.maps["urb"]), lambda u: u.submit(b"x")),
         ClosedError, r"^UserRingBuffer is closed$"),
    Case("`features.program_type('nope')`", lambda c: features.program_type("nope"),
         ValueError, r"unknown program type 'nope'"),
    # --- timeouts ---------------------------------------------------------------------------------
    Case("`perf_reader.read(timeout=-1)`",
         lambda c: _then_close(PerfReader(c.perf.maps["events"]), lambda r: r.read(timeout=-1)),
         ValueError, r"timeout must be >= 0.0, got -1"),
    Case("`ordered_reader.read(timeout=nan)`",
         lambda c: _then_close(OrderedReader(c.ordered.maps["events"]), lambda r: r.read(timeout=math.nan)),
         ValueError, r"timeout must be a finite number, got nan"),
    Case("`perf_reader.read(timeout=0)` with nothing to read",
         lambda c: _then_close(PerfReader(c.perf.maps["events"]), lambda r: r.read(timeout=0)),
         TimeoutError, r"PerfReader: no record within 0 s"),
    Case("`ordered_reader.read(timeout=0)` with nothing to read",
         lambda c: _then_close(OrderedReader(c.ordered.maps["events"]), lambda r: r.read(timeout=0)),
         TimeoutError, r"OrderedReader: no record within 0 s"),
    Case("`ring_buffer.poll(-1)` (the old milliseconds' forever)",
         lambda c: _then_close(RingBuffer(c.rb.maps["rb"], _nothing), lambda rb: rb.poll(-1)),
         ValueError, r"timeout must be >= 0 seconds, or None to wait forever, got -1 \(RingBuffer.poll takes"),
    Case("`perf_buffer.poll('1')`",
         lambda c: _then_close(PerfBuffer(c.perf.maps["events"], _nothing), lambda pb: pb.poll("1")),  # type: ignore[arg-type]
         TypeError, r"timeout must be a number, got '1' \(str\)"),
    Case("`ring_buffer.poll()` of a RingBuffer made without a callback",
         lambda c: _then_close(RingBuffer(c.rb.maps["rb"]), lambda rb: rb.poll(0)),
         TypeError, r"RingBuffer.poll\(\) calls a callback per record, and ring 0 \('rb'\) has none"),
    Case("`process_events(map, cb, timeout=-0.5)`",
         lambda c: process_events(c.rb.maps["rb"], _nothing, timeout=-0.5),
         ValueError, r"timeout must be >= 0 seconds, or None to wait forever, got -0.5"),
    Case("`process_events(map, cb, timeout_ms=0.5)` (deprecated keyword)",
         lambda c: process_events(c.rb.maps["rb"], _nothing, timeout_ms=0.5),  # type: ignore[arg-type]
         TypeError, r"timeout_ms must be an int, got 0.5 \(float\)"),
    Case("`consumer.stop(drain_timeout=None)`",
         lambda c: BackpressureConsumer(c.rb.maps["rb"], _nothing).stop(drain_timeout=None),  # type: ignore[arg-type]
         TypeError, r"drain_timeout must be a number, got None \(NoneType\)"),
    Case("`consumer.stop(drain_timeout=nan)`",
         lambda c: BackpressureConsumer(c.rb.maps["rb"], _nothing).stop(drain_timeout=math.nan),
         ValueError, r"drain_timeout must be a finite number, got nan"),
    Case("`consumer.stop(drain_timeout=-1)`",
         lambda c: BackpressureConsumer(c.rb.maps["rb"], _nothing).stop(drain_timeout=-1),
         ValueError, r"drain_timeout must be >= 0, got -1"),
    # --- fds closed underneath ----------------------------------------------------------------------
    Case("`PerfBuffer(map, cb)` after `os.close(map.fd)`",
         lambda c: _fd_closed_underneath(c.perf.maps["events"].fd, lambda: PerfBuffer(c.perf.maps["events"], _nothing)),
         BPFError, r"\[Errno 9\] Bad file descriptor \(closed underneath\?\): .PerfBuffer: map 'events'"),
    Case("`OrderedReader(map)` after `os.close(map.fd)`",
         lambda c: _fd_closed_underneath(c.ordered.maps["events"].fd, lambda: OrderedReader(c.ordered.maps["events"])),
         BPFError, r"\[Errno 9\] Bad file descriptor \(closed underneath\?\): .OrderedReader: map 'events'"),
    Case("`RingBuffer(map, cb)` after `os.close(map.fd)`",
         lambda c: _fd_closed_underneath(c.rb.maps["rb"].fd, lambda: RingBuffer(c.rb.maps["rb"], _nothing)),
         BPFError, r"\[Errno 22\] Invalid argument: .ring_buffer__new\(rb\)"),
    # --- use after close --------------------------------------------------------------------------
    Case("`ring_buffer.poll()` after `close()`",
         lambda c: _after_close(lambda: RingBuffer(c.rb.maps["rb"], _nothing), lambda rb: rb.poll(0)),
         ClosedError, r"^RingBuffer is closed$"),
    Case("`perf_buffer.buffer(0)` after `close()`",
         lambda c: _after_close(lambda: PerfBuffer(c.perf.maps["events"], _nothing), lambda pb: pb.buffer(0)),
         ClosedError, r"^PerfBuffer is closed$"),
    Case("`perf_reader.read()` after `close()`",
         lambda c: _after_close(lambda: PerfReader(c.perf.maps["events"]), lambda r: r.read()),
         ClosedError, r"^PerfReader is closed$"),
    Case("`ordered_reader.read()` after `close()`",
         lambda c: _after_close(lambda: OrderedReader(c.ordered.maps["events"]), lambda r: r.read()),
         ClosedError, r"^OrderedReader is closed$"),
    Case("`layout.available()` after `unmap_ringbuf(layout)`",
         lambda c: _after_close(lambda: map_ringbuf(c.rb.maps["rb"]), lambda lay: lay.available()),
         ClosedError, r"^RingBufLayout is closed$"),
    Case("`map.lookup(0)` after `obj.close()`", lambda c: c.closed.maps["failed_reserves"].lookup(0),
         ClosedError, r"^BPF object 'ringbuf' is closed$"),
    Case("`prog.test_run()` after `obj.close()`", lambda c: c.closed.programs["emit"].test_run(),
         ClosedError, r"^BPF object 'ringbuf' is closed$"),
    Case("`obj.load()` after `obj.close()`", lambda c: c.closed.load(),
         ClosedError, r"^BPF object 'ringbuf' is closed$"),
    Case("`RingBuffer(map_of_a_closed_object, cb)`", lambda c: RingBuffer(c.closed.maps["rb"], _nothing),
         ClosedError, r"^BPF object 'ringbuf' is closed$"),
    Case("`BackpressureConsumer(map_of_a_closed_object, cb)`",
         lambda c: BackpressureConsumer(c.closed.maps["rb"], _nothing),
         ClosedError, r"^BPF object 'ringbuf' is closed$"),
    # -- events and globals: parse/serialize inputs, float globals ----------------------------
    Case("`Conn.parse(memoryview(bytearray(64))[::2])` (a strided view)",
         lambda c: Conn.parse(memoryview(bytearray(64))[::2]),
         TypeError, r"event 'ConnectionEvent': cannot parse a non-contiguous buffer"),
    Case("`Conn.serialize({'comm': '\\ud800'})` (a lone surrogate)", lambda c: Conn.serialize({"comm": "\ud800"}),
         ValueError, r"field 'comm' \(char\[16\]\) cannot be encoded as UTF-8: '\\ud800' at position 0"),
    Case("`Conn.parse(buf, raw_chars={'pid'})` (not a char field)",
         lambda c: Conn.parse(bytes(Conn.size), raw_chars={"pid"}),
         ValueError, r"raw_chars names 'pid', which is not a char field \(char fields: comm\)"),
    Case("`EventDef.from_layout('E', [('a', 'u32', 1, 2**70)], 8)` (a field at a huge offset)",
         lambda c: EventDef.from_layout("E", [("a", "u32", 1, 2**70)], 8),
         ValueError, r"event 'E': field 'a' at offset 1180591620717411303424 with size 4 does not fit in 8 bytes"),

    # --- histograms -----------------------------------------------------------------------------
    Case("`Histogram.log2({3: 2**64}).to_numpy()` (a count past uint64)",
         lambda c: Histogram.log2({3: 2**64}).to_numpy(),
         OverflowError, r"the count of slot 3 is 18446744073709551616, outside uint64"),
    # -- batches: the event_def argument ------------------------------------------------------
    Case("`batch.to_numpy(np.dtype('u4'))` (a dtype, not an EventDef)",
         lambda c: Batch.empty().to_numpy(_u4_dtype()),
         TypeError, r"^Batch.to_numpy: event_def must be an EventDef \(pylibbpf.defevent, obj.btf_struct\), got "),
    Case("`batch.to_arrow(None)`", lambda c: Batch.empty().to_arrow(None),
         TypeError, r"^Batch.to_arrow: event_def must be an EventDef .*, got NoneType None"),

    # -- programs and links: test_run, unpin, iterator reads ----------------------------------
    Case("`prog.test_run(repeat=2**31)`", lambda c: c.rb.programs["emit"].test_run(repeat=2**31),
         ValueError, r"^repeat must be <= 2147483647, got 2147483648$"),
    Case("`prog.unpin('/proc/x')` (not on bpffs)", lambda c: c.rb.programs["emit"].unpin("/proc/plb-not-a-pin"),
         ValueError, r"^path '/proc/plb-not-a-pin' is not on a BPF file system \(bpffs; /proc is on proc\)"),
    Case("`iter_link.read(chunk=0)`",
         lambda c: _then_close(c.progs.programs["dump_pids"].attach_iter(), lambda link: link.read(chunk=0)),
         ValueError, r"^chunk must be >= 1, got 0$"),

    # -- readers: the ordered merge's timestamp offset ----------------------------------------
    Case("`OrderedReader(map, timestamp=2**32)`", lambda c: OrderedReader(c.ordered.maps["events"], timestamp=2**32),
         ValueError, r"^timestamp offset must be <= 4294967287 \(a u64 inside a record\), got 4294967296$"),
    Case("`OrderedReader(map, timestamp=2**64)`", lambda c: OrderedReader(c.ordered.maps["events"], timestamp=2**64),
         ValueError, r"^timestamp offset must be <= 4294967287 \(a u64 inside a record\), got 18446744073709551616$"),

    # -- event layouts from C declarations (EventDef.from_c) -----------------------------------
    Case("`EventDef.from_c('struct e { nosuch_t x; };', 'e')` (an unknown type)",
         lambda c: EventDef.from_c("struct e { nosuch_t x; };", "e"),
         ValueError, r"^EventDef.from_c: clang could not compile header_text: <header_text>:1:12: error: unknown "
                     r"type name 'nosuch_t'$"),
    Case("`EventDef.from_c('struct e { int x; };', 'struct f')` (not defined)",
         lambda c: EventDef.from_c("struct e { int x; };", "struct f"),
         KeyError, r"^EventDef.from_c: header_text does not define struct f$"),
    Case("`EventDef.from_c('struct e { int x; };', 'union e')`",
         lambda c: EventDef.from_c("struct e { int x; };", "union e"),
         ValueError, r"^struct must be a struct's name, 'struct NAME' or 'NAME', got 'union e'$"),
    Case("`EventDef.from_c(b'struct e { int x; };', 'e')` (bytes)",
         lambda c: EventDef.from_c(b"struct e { int x; };", "e"),  # type: ignore[arg-type]
         TypeError, r"^header_text must be"),
    Case("`EventDef.from_c('struct e { int x : 3; };', 'e')` (a bitfield)",
         lambda c: EventDef.from_c("struct e { int x : 3; };", "e"),
         ValueError, r"^struct e: member 'x' is a bitfield \(3 bits\): not supported in an EventDef$"),
    # -- the attach kinds beside the basic family: cookies, multi-probes, tc, sockets, freplace --
    Case("`prog.attach_tracepoint(..., cookie=-1)`",
         lambda c: c.progs.programs["count_tp"].attach_tracepoint("syscalls", "sys_enter_getppid", cookie=-1),
         ValueError, r"^cookie must be >= 0, got -1$"),
    Case("`prog.attach_raw_tracepoint('sys_enter', cookie=2**64)`",
         lambda c: c.progs.programs["count_raw"].attach_raw_tracepoint("sys_enter", cookie=2**64),
         ValueError, r"^cookie must be <= 18446744073709551615, got 18446744073709551616$"),
    Case("`prog.attach_uprobe_multi('/bin/true')` (no targets)",
         lambda c: c.progs.programs["on_uprobe"].attach_uprobe_multi("/bin/true"),
         ValueError, r"^attach_uprobe_multi needs exactly one of pattern, symbols= or offsets= \(got none\)$"),
    Case("`prog.attach_uprobe_multi(b, symbols=['a'], cookies=[1, 2])`",
         lambda c: c.progs.programs["on_uprobe"].attach_uprobe_multi("/bin/true", symbols=["a"], cookies=[1, 2]),
         ValueError, r"^attach_uprobe_multi: cookies has 2 values for 1 symbols$"),
    Case("`prog.attach_kprobe_multi(symbols=[])`",
         lambda c: c.progs.programs["on_kprobe"].attach_kprobe_multi(symbols=[]),
         ValueError, r"^attach_kprobe_multi: symbols is empty$"),
    Case("`prog.attach_tc('lo', priority=-1)`", lambda c: c.progs.programs["tcx_count"].attach_tc("lo", priority=-1),
         ValueError, r"^priority must be >= 0, got -1$"),
    Case("`prog.attach_tc('plbnope0')`", lambda c: c.progs.programs["tcx_count"].attach_tc("plbnope0"),
         BPFError, r"^\[Errno 19\] no network interface named 'plbnope0'"),
    Case("`prog.attach_sockmap(array_map)`",
         lambda c: c.progs.programs["tcx_count"].attach_sockmap(c.progs.maps["counts"]),
         BPFError, r"^\[Errno 22\] map 'counts' is not a sockmap or sockhash"),
    Case("`prog.attach_netns('/nonexistent/ns')`",
         lambda c: c.progs.programs["tcx_count"].attach_netns("/nonexistent/ns"),
         BPFError, r"^\[Errno 2\] cannot open network namespace /nonexistent/ns"),
    Case("`prog.attach_netfilter('ipx', 'local_in', 0)`",
         lambda c: c.progs.programs["tcx_count"].attach_netfilter("ipx", "local_in", 0),
         ValueError, r"^pf must be one of ipv4, ipv6 or a number, got 'ipx'$"),
    Case("`prog.attach_freplace(target)` (no func_name)",
         lambda c: c.progs.programs["run_me"].attach_freplace(c.progs.programs["run_me"]),
         ValueError, r"^attach_freplace needs target and func_name together"),
    Case("`prog.set_attach_target(target, 'f')` after load",
         lambda c: c.progs.programs["run_me"].set_attach_target(c.progs.programs["run_me"], "f"),
         BPFError, r"^\[Errno 16\] program 'run_me' is already loaded: set the attach target before load\(\)"),
    Case("`obj.struct_ops['nope']`", lambda c: c.progs.struct_ops["nope"],
         KeyError, r"^no struct_ops map named 'nope' in programs \(known: none\)$"),
    # -- objects by id and pin, maps made at run time -----------------------------------------
    Case("`Map.from_id(0)`", lambda c: Map.from_id(0), ValueError, r"^map_id must be >= 1, got 0$"),
    Case("`Map.from_id('1')`", lambda c: Map.from_id("1"), TypeError, r"^map_id must be an int, got '1' \(str\)$"),
    Case("`Map.from_id(2**32 - 2)` (no such map)", lambda c: Map.from_id(2**32 - 2),
         BPFError, r"\[Errno 2\] No such file or directory: .*bpf_map_get_fd_by_id\(4294967294\)"),
    Case("`Program.from_id(-1)`", lambda c: Program.from_id(-1), ValueError, r"^prog_id must be >= 1, got -1$"),
    Case("`Link.from_id(None)`", lambda c: Link.from_id(None), TypeError,  # type: ignore[arg-type]
         r"^link_id must be an int, got None"),
    Case("`Map.from_pin('/sys/fs/bpf/plb-nothing')`", lambda c: Map.from_pin("/sys/fs/bpf/plb-nothing"),
         BPFError, r"\[Errno 2\] No such file or directory: .*bpf_obj_get\(/sys/fs/bpf/plb-nothing\)"),
    Case("`Map.create('nope', 4, 4, 1)`", lambda c: Map.create("nope", 4, 4, 1),
         ValueError, r"^type 'nope' is not a map type \(a BPF_MAP_TYPE_\* name"),
    Case("`Map.create('hash', 4, 8, 1, key_type='u16')`", lambda c: Map.create("hash", 4, 8, 1, key_type="u16"),
         ValueError, r"^key_type u16 is 2 bytes, key_size is 4$"),
    Case("`Map.create('hash', 4, 8, 1, value_type=3)`", lambda c: Map.create("hash", 4, 8, 1, value_type=3),  # type: ignore[arg-type]
         TypeError, r"^value_type must be an EventDef, a scalar type name or None, got int$"),
    Case("`Map.create('hash', 4, 8, 1, name='x' * 16)`", lambda c: Map.create("hash", 4, 8, 1, name="x" * 16),
         ValueError, r"^name 'x{16}' is longer than the kernel's 15 characters$"),
    Case("`Map.create('array', 3, 4, 1)` (array keys are 4 bytes)", lambda c: Map.create("array", 3, 4, 1),
         BPFError, r"\[Errno 22\] Invalid argument: .*bpf_map_create\(\)"),
    Case("`m.inner_map = 3`", lambda c: setattr(c.progs.maps["counts"], "inner_map", 3),
         TypeError, r"^inner_map must be a Map, got int$"),

    # -- the kernel's BTF and the feature probes ------------------------------------------------
    Case("`btf.kernel().field_offset('task_struct', 'no_such')`",
         lambda c: btf.kernel().field_offset("task_struct", "no_such"),
         KeyError, r"struct task_struct has no member 'no_such' \(in the BTF of vmlinux\)"),
    Case("`btf.kernel().field_offset('task_struct', 'sched_reset_on_fork')` (a bitfield)",
         lambda c: btf.kernel().field_offset("task_struct", "sched_reset_on_fork"),
         ValueError, r"^task_struct.sched_reset_on_fork is a 1-bit bitfield at bit offset \d+: it has no byte offset"),
    Case("`btf.kernel().enum_value('bpf_prog_type', 'NOPE')`",
         lambda c: btf.kernel().enum_value("bpf_prog_type", "NOPE"),
         KeyError, r"enum bpf_prog_type has no enumerator 'NOPE'"),
    Case("`btf.kernel(module='../x')`", lambda c: btf.kernel(module="../x"),
         ValueError, r"^module must be a kernel module's name, got '../x'$"),
    Case("`features.attach_kind('fentry_multi')`", lambda c: features.attach_kind("fentry_multi"),
         ValueError, r"^name must be one of 'tp_btf', .*; got 'fentry_multi'$"),
    Case("`features.tracepoint('../x', 'y')`", lambda c: features.tracepoint("../x", "y"),
         ValueError, r"^category must be a tracefs event name \(letters, digits, _ . -\), got '../x'$"),
    # -- typed skeletons: what pylibbpf.build.skeleton() is given -----------------------------
    Case("`build.skeleton('/nonexistent/x.bpf.o')`", lambda c: build.skeleton("/nonexistent/x.bpf.o"),
         FileNotFoundError, r"^object_path: no such file '/nonexistent/x.bpf.o'$"),
    Case("`build.skeleton(obj, name='1x')`", lambda c: build.skeleton(RINGBUF_OBJ, name="1x"),
         ValueError, r"^name must be an identifier \(the class is NAMESkel\), got '1x'$"),
    Case("`build.skeleton(obj, 'x.txt')`", lambda c: build.skeleton(RINGBUF_OBJ, "x.txt"),
         ValueError, r"^output must be a module file NAME.py with NAME an identifier, got 'x.txt'$"),
    Case("`build.skeleton(obj, events=['rb'])`", lambda c: build.skeleton(RINGBUF_OBJ, events=["rb"]),
         ValueError, r"^event: expected MAP=struct NAME \(as events='struct event'\), got 'rb'$"),
    Case("`build.skeleton(obj, events='rb=struct x')` (a str, not a list)",
         lambda c: build.skeleton(RINGBUF_OBJ, events="rb=struct x"),
         TypeError, r"^events must be a sequence of 'MAP=struct NAME' strings, got 'rb=struct x'$"),
    Case("`build.skeleton(obj, events=['rb=struct nope'])`",
         lambda c: build.skeleton(RINGBUF_OBJ, events=["rb=struct nope"]),
         KeyError, r"^event rb=struct nope: no struct named 'nope' in the object's BTF"),
    Case("`build.skeleton(obj, raw_chars=['emit_args.nope'])`",
         lambda c: build.skeleton(RINGBUF_OBJ, raw_chars=["emit_args.nope"]),
         ValueError, r"^raw_chars: 'emit_args.nope' names no char array of a struct member"),

]


# --- running the cases and rendering the table ----------------------------------------------------

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")


def message_of(exc: BaseException) -> str:
    """The exception's message, first line only (a LoadError adds the verifier log after it), with
    addresses normalised; a plain KeyError's message without the quotes str() adds."""
    if type(exc) is KeyError and len(exc.args) == 1 and isinstance(exc.args[0], str):
        text = exc.args[0]
    else:
        text = str(exc)
    return _ADDRESS.sub("0x…", text.splitlines()[0] if text else "")


def run_case(case: Case, ctx: Ctx) -> BaseException | None:
    """Try the case: the exception it raised, or None (then anything it made is closed)."""
    try:
        made = case.call(ctx)
    except Exception as exc:
        return exc
    close = getattr(made, "close", None)
    if callable(close):
        close()
    return None


def _cell(text: str) -> str:
    text = text.replace("|", "\\|")
    return f"`{text}`" if "`" not in text else text


def render_table(ctx: Ctx) -> str:
    """The bad-input table of docs/reliability.md, from what each case raises now."""
    lines = ["| input | error | message |", "|---|---|---|"]
    for case in CASES:
        exc = run_case(case, ctx)
        error = "(no error)" if exc is None else type(exc).__name__
        if isinstance(exc, OSError) and exc.errno is not None:
            error += f" (errno {exc.errno})"
        message = "" if exc is None else _cell(message_of(exc))
        lines.append(f"| {case.input.replace('|', chr(92) + '|')} | {error} | {message} |")
    return "\n".join(lines)


def readme_table(text: str) -> str | None:
    """The table between the markers in the page's text, or None when the markers are missing."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        return None
    return text[start + len(START):end].strip()


def replace_readme_table(text: str, table: str) -> str:
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"docs/reliability.md has no {START} ... {END} markers")
    return f"{text[:start + len(START)]}\n{table}\n{text[end:]}"


# --- the tests ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ctx(bpf_objects: dict[str, Path]) -> Iterator[Ctx]:
    with bad_input_context(bpf_objects) as c:
        yield c


@pytest.mark.parametrize("case", CASES, ids=[c.input.strip("`") for c in CASES])
def test_bad_input(ctx: Ctx, case: Case) -> None:
    exc = run_case(case, ctx)
    assert exc is not None, f"{case.input}: no error raised"
    assert type(exc) is case.error, f"{case.input}: {type(exc).__name__} ({exc}), expected {case.error.__name__}"
    assert re.search(case.message, message_of(exc)), f"{case.input}: {message_of(exc)!r} !~ {case.message!r}"


def test_the_table_covers_every_kind_of_bad_input() -> None:
    assert len(CASES) >= 25
    assert len({c.input for c in CASES}) == len(CASES), "inputs must be unique: they are the table's rows"


def test_messages_are_stable(ctx: Ctx) -> None:
    """Two runs give the same table: no fds, addresses or pids in the messages."""
    assert render_table(ctx) == render_table(ctx)


def test_readme_table_is_current(ctx: Ctx) -> None:
    current = readme_table(TABLE_PAGE.read_text())
    assert current is not None, f"docs/reliability.md lacks the {START} / {END} markers"
    generated = render_table(ctx)
    assert current == generated, (
        "the Reliability page's bad-input table (docs/reliability.md) differs from what the cases raise now: "
        "run `.venv/bin/python tools/bad_input_table.py --write` (as root) and commit docs/reliability.md")
