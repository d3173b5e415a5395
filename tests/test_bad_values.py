"""Every parameter of every public call, tried with the values a caller gets wrong.

``PARAMS`` lists (call, parameter, kind, try): ``try(ctx, value)`` passes
``value`` as that parameter, every other argument valid. The kind says which
values are wrong for it (``BAD[kind]``: None where a number is needed, a bool,
a float for an int, NaN, infinities, negative and huge numbers, strings,
bytes, lists). Each must raise TypeError or ValueError at the call, with a
message naming the parameter and showing the value: never an OverflowError,
a MemoryError, a comparison error from inside, or a silent acceptance.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from progs import emit_ring, rb_event
from test_bad_input import Ctx, bad_input_context

from pylibbpf import (
    BackpressureConsumer,
    BPFError,
    BPFObject,
    ClosedError,
    OrderedReader,
    PerfBuffer,
    PerfReader,
    Record,
    RingBufConsumer,
    RingBuffer,
    SamplingConsumer,
    UserRingBuffer,
    defevent,
    make_event_def,
    map_ringbuf,
    peek_ringbuf_events,
    process_events,
    read_ringbuf_events,
)
from pylibbpf.asm import call, exit_, ja, ld_imm64, ld_map_fd, load_program, mov, st

pytestmark = pytest.mark.usefixtures("bpf_privileged")

NAN, INF = math.nan, math.inf
HUGE = 2**64


def _wrong_types(*extra: object) -> list[object]:
    return [True, "1", b"1", [1], *extra]


#: kind -> the wrong values for it (each must raise TypeError or ValueError).
BAD: dict[str, list[object]] = {
    # an int >= 1 (sizes, counts)
    "count": [None, *_wrong_types(0.5, 1.0, NAN, INF), 0, -1, HUGE],
    # an int >= 1 or None
    "optional_count": [*_wrong_types(0.5, NAN, INF), 0, -1, HUGE],
    # an int >= 0 or None
    "optional_index": [*_wrong_types(0.5, NAN, INF), -1, HUGE],
    # an int >= 0 or None, where a huge one means "no limit"
    "optional_limit": [*_wrong_types(0.5, NAN, INF), -1],
    # an int >= 0
    "index": [None, *_wrong_types(0.5, NAN), -1, HUGE],
    # any int (a slot number checked against the rings: only the type here)
    "int": [None, *_wrong_types(0.5, NAN, INF)],
    # a timeout in seconds: None or a finite number >= 0
    "timeout": [*_wrong_types(NAN, INF, -INF), -1, -0.5],
    # a finite number >= 0
    "seconds": [None, *_wrong_types(NAN, INF, -INF), -1, -0.5],
    # a number in [0, 1]
    "rate": [None, *_wrong_types(NAN, INF), -0.1, 1.5],
    # something callable
    "callable": [None, 42, "print", b"x"],
    # None or something callable
    "optional_callable": [42, "print", b"x"],
    # a str
    "string": [None, 42, b"x", ["x"], "a\0b"],
    # None or a str
    "optional_string": [42, b"x", ["x"], "a\0b"],
    # bytes-like
    "buffer": [None, 42, "text", 1.5, [1, 2]],
    # a flags word (or a u64 cookie): 0 .. 2**64-1
    "flags": [None, *_wrong_types(0.5, NAN), -1, HUGE],
    # a pid: -1 (any) or 0 .. 2**31-1
    "pid": [None, *_wrong_types(0.5, NAN), -2, 2**31, HUGE],
}


def _nothing(*_args: Any) -> None:
    return None


def _closing(thing: Any, use: Callable[[Any], Any]) -> Any:
    with thing:
        return use(thing)


@dataclass(frozen=True)
class Param:
    call: str                              #: the call, as a person would write it
    name: str                              #: the parameter: the message must name it
    kind: str                              #: a key of BAD
    attempt: Callable[[Ctx, Any], Any]     #: makes the call with the value


def _insns() -> list[Any]:
    return [mov("r0", 0), exit_()]


PARAMS: list[Param] = [
    # --- RingBuffer --------------------------------------------------------------------------------
    Param("RingBuffer(map, cb, max_batch=)", "max_batch", "count",
          lambda c, v: RingBuffer(c.rb.maps["rb"], _nothing, max_batch=v)),
    Param("RingBuffer(map, callback)", "callback", "optional_callable", lambda c, v: RingBuffer(c.rb.maps["rb"], v)),
    Param("RingBuffer.add(map, callback)", "callback", "optional_callable",
          lambda c, v: _closing(RingBuffer(c.rb.maps["rb"], _nothing), lambda rb: rb.add(c.rb.maps["rb2"], v))),
    Param("RingBuffer.poll(timeout)", "timeout", "timeout",
          lambda c, v: _closing(RingBuffer(c.rb.maps["rb"], _nothing), lambda rb: rb.poll(v))),
    Param("RingBuffer.read_batch(timeout=)", "timeout", "timeout",
          lambda c, v: _closing(RingBuffer(c.rb.maps["rb"], _nothing), lambda rb: rb.read_batch(v))),
    # --- PerfBuffer --------------------------------------------------------------------------------
    Param("PerfBuffer(map, cb, page_cnt=)", "page_cnt", "count",
          lambda c, v: PerfBuffer(c.perf.maps["events"], _nothing, page_cnt=v)),
    Param("PerfBuffer(map, callback)", "callback", "optional_callable",
          lambda c, v: PerfBuffer(c.perf.maps["events"], v)),
    Param("PerfBuffer(map, cb, lost_callback=)", "lost_callback", "optional_callable",
          lambda c, v: PerfBuffer(c.perf.maps["events"], _nothing, lost_callback=v)),
    Param("PerfBuffer.poll(timeout)", "timeout", "timeout",
          lambda c, v: _closing(PerfBuffer(c.perf.maps["events"], _nothing), lambda pb: pb.poll(v))),
    Param("PerfBuffer.read_batch(timeout=)", "timeout", "timeout",
          lambda c, v: _closing(PerfBuffer(c.perf.maps["events"], _nothing), lambda pb: pb.read_batch(v))),
    Param("PerfBuffer.buffer(i)", "i", "int",
          lambda c, v: _closing(PerfBuffer(c.perf.maps["events"], _nothing), lambda pb: pb.buffer(v))),
    Param("PerfBuffer.buffer_fd(i)", "i", "index",
          lambda c, v: _closing(PerfBuffer(c.perf.maps["events"], _nothing), lambda pb: pb.buffer_fd(v))),
    # --- PerfReader --------------------------------------------------------------------------------
    Param("PerfReader(map, per_cpu_buffer=)", "per_cpu_buffer", "count",
          lambda c, v: PerfReader(c.perf.maps["events"], per_cpu_buffer=v)),
    Param("PerfReader(map, watermark=)", "watermark", "index",
          lambda c, v: PerfReader(c.perf.maps["events"], watermark=v)),
    Param("PerfReader(map, wakeup_events=)", "wakeup_events", "optional_index",
          lambda c, v: PerfReader(c.perf.maps["events"], wakeup_events=v)),
    Param("PerfReader.read(timeout=)", "timeout", "timeout",
          lambda c, v: _closing(PerfReader(c.perf.maps["events"]), lambda r: r.read(timeout=v))),
    Param("PerfReader.read_record_into(record, timeout=)", "timeout", "timeout",
          lambda c, v: _closing(PerfReader(c.perf.maps["events"]), lambda r: r.read_record_into(Record(), timeout=v))),
    # --- OrderedReader -----------------------------------------------------------------------------
    Param("OrderedReader(map, window_ms=)", "window_ms", "seconds",
          lambda c, v: OrderedReader(c.ordered.maps["events"], window_ms=v)),
    Param("OrderedReader(map, page_cnt=)", "page_cnt", "count",
          lambda c, v: OrderedReader(c.ordered.maps["events"], page_cnt=v)),
    Param("OrderedReader(map, late=)", "late", "string",
          lambda c, v: OrderedReader(c.ordered.maps["events"], late=v)),
    Param("OrderedReader.read(timeout=)", "timeout", "timeout",
          lambda c, v: _closing(OrderedReader(c.ordered.maps["events"]), lambda r: r.read(timeout=v))),
    Param("OrderedReader.read_batch(timeout=)", "timeout", "timeout",
          lambda c, v: _closing(OrderedReader(c.ordered.maps["events"]), lambda r: r.read_batch(timeout=v))),
    # --- consumers ---------------------------------------------------------------------------------
    Param("RingBufConsumer(map, callback)", "callback", "optional_callable",
          lambda c, v: RingBufConsumer(c.rb.maps["rb"], v)),
    Param("RingBufConsumer(map, cb, deserializer=)", "deserializer", "optional_callable",
          lambda c, v: RingBufConsumer(c.rb.maps["rb"], _nothing, deserializer=v)),
    Param("RingBufConsumer(map, cb, batch_size=)", "batch_size", "count",
          lambda c, v: RingBufConsumer(c.rb.maps["rb"], _nothing, batch_size=v)),
    Param("RingBufConsumer.stop(drain_timeout=)", "drain_timeout", "seconds",
          lambda c, v: RingBufConsumer(c.rb.maps["rb"], _nothing).stop(drain_timeout=v)),
    Param("BackpressureConsumer(map, cb, max_pending=)", "max_pending", "count",
          lambda c, v: BackpressureConsumer(c.rb.maps["rb"], _nothing, max_pending=v)),
    Param("BackpressureConsumer(map, cb, max_pending_bytes=)", "max_pending_bytes", "optional_index",
          lambda c, v: BackpressureConsumer(c.rb.maps["rb"], _nothing, max_pending_bytes=v)),
    Param("BackpressureConsumer(map, cb, drop_handler=)", "drop_handler", "optional_callable",
          lambda c, v: BackpressureConsumer(c.rb.maps["rb"], _nothing, drop_handler=v)),
    Param("BackpressureConsumer(map, cb, batch_size=)", "batch_size", "count",
          lambda c, v: BackpressureConsumer(c.rb.maps["rb"], _nothing, batch_size=v)),
    Param("BackpressureConsumer.stop(drain_timeout=)", "drain_timeout", "seconds",
          lambda c, v: BackpressureConsumer(c.rb.maps["rb"], _nothing).stop(drain_timeout=v)),
    Param("BackpressureConsumer.healthy(max_drop_rate=)", "max_drop_rate", "seconds",
          lambda c, v: BackpressureConsumer(c.rb.maps["rb"], _nothing).healthy(max_drop_rate=v)),
    Param("BackpressureConsumer.healthy(max_queue_utilization=)", "max_queue_utilization", "seconds",
          lambda c, v: BackpressureConsumer(c.rb.maps["rb"], _nothing).healthy(max_queue_utilization=v)),
    Param("SamplingConsumer(map, cb, sample_rate=)", "sample_rate", "rate",
          lambda c, v: SamplingConsumer(c.rb.maps["rb"], _nothing, sample_rate=v)),
    # --- the mmap layer ----------------------------------------------------------------------------
    Param("read_ringbuf_events(layout, max_events=)", "max_events", "optional_limit",
          lambda c, v: _closing(map_ringbuf(c.rb.maps["rb"]), lambda lay: read_ringbuf_events(lay, v))),
    Param("peek_ringbuf_events(map, max_events=)", "max_events", "optional_limit",
          lambda c, v: peek_ringbuf_events(c.rb.maps["rb"], max_events=v)),
    Param("peek_ringbuf_events(map, deserializer=)", "deserializer", "optional_callable",
          lambda c, v: peek_ringbuf_events(c.rb.maps["rb"], deserializer=v)),
    Param("process_events(map, callback)", "callback", "callable",
          lambda c, v: process_events(c.rb.maps["rb"], v, timeout=0.0)),
    Param("process_events(map, cb, max_events=)", "max_events", "optional_limit",
          lambda c, v: process_events(c.rb.maps["rb"], _nothing, max_events=v, timeout=0.0)),
    Param("process_events(map, cb, timeout=)", "timeout", "timeout",
          lambda c, v: process_events(c.rb.maps["rb"], _nothing, timeout=v)),
    Param("process_events(map, cb, deserializer=)", "deserializer", "optional_callable",
          lambda c, v: process_events(c.rb.maps["rb"], _nothing, deserializer=v, timeout=0.0)),
    # --- objects, programs, maps -------------------------------------------------------------------
    Param("Program.test_run(repeat=)", "repeat", "count", lambda c, v: c.rb.programs["emit"].test_run(repeat=v)),
    Param("Program.test_run(cpu=)", "cpu", "optional_index", lambda c, v: c.perf.programs["emit_perf"].test_run(cpu=v)),
    Param("Program.test_run(data_size_out=)", "data_size_out", "optional_index",
          lambda c, v: c.rb.programs["emit"].test_run(data_size_out=v)),
    Param("Program.test_run(data=)", "data", "buffer", lambda c, v: c.rb.programs["emit"].test_run(data=v)),
    Param("Program.test_run(ctx=)", "ctx", "buffer", lambda c, v: c.rb.programs["emit"].test_run(ctx=v)),
    Param("Map.update(key, value, flags=)", "flags", "flags",
          lambda c, v: c.rb.maps["failed_reserves"].update(0, bytes(8), flags=v)),
    Param("BPFObject.open(path, kconfig=)", "kconfig", "optional_string",
          lambda c, v: BPFObject.open(b"", kconfig=v)),
    Param("BPFObject.open(path, object_name=)", "object_name", "optional_string",
          lambda c, v: BPFObject.open(b"", object_name=v)),
    Param("BPFObject.open(path, btf_custom_path=)", "btf_custom_path", "optional_string",
          lambda c, v: BPFObject.open(b"", btf_custom_path=v)),
    # --- programs' attach calls, the user ring buffer (their checks: program.py, ringbuf.py) ----------
    Param("Program.attach_kprobe(func, offset=)", "offset", "index",
          lambda c, v: c.progs.programs["on_kprobe"].attach_kprobe("do_nothing", offset=v)),
    Param("Program.attach_uprobe(binary, symbol, offset=)", "offset", "index",
          lambda c, v: c.progs.programs["on_uprobe"].attach_uprobe("/bin/true", "main", offset=v)),
    Param("Program.attach_uprobe(binary, symbol, pid=)", "pid", "pid",
          lambda c, v: c.progs.programs["on_uprobe"].attach_uprobe("/bin/true", "main", pid=v)),
    Param("Program.attach_usdt(binary, provider, name, pid=)", "pid", "pid",
          lambda c, v: c.progs.programs["on_usdt"].attach_usdt("/bin/true", "p", "n", pid=v)),
    Param("Program.attach_usdt(binary, provider, name, cookie=)", "cookie", "flags",
          lambda c, v: c.progs.programs["on_usdt"].attach_usdt("/bin/true", "p", "n", cookie=v)),
    Param("Program.attach_perf_event(period=)", "period", "optional_count",
          lambda c, v: c.progs.programs["on_sample"].attach_perf_event(period=v)),
    Param("Program.attach_perf_event(frequency=)", "frequency", "optional_count",
          lambda c, v: c.progs.programs["on_sample"].attach_perf_event(frequency=v)),
    Param("Program.attach_perf_event(pid=)", "pid", "pid",
          lambda c, v: c.progs.programs["on_sample"].attach_perf_event(pid=v)),
    Param("UserRingBuffer.submit(data)", "data", "buffer",
          lambda c, v: _closing(UserRingBuffer(c.progs.maps["urb"]), lambda u: u.submit(v))),
    Param("UserRingBuffer.submit(data, timeout=)", "timeout", "timeout",
          lambda c, v: _closing(UserRingBuffer(c.progs.maps["urb"]), lambda u: u.submit(b"x", timeout=v))),
    # --- the DSL and the assembler -----------------------------------------------------------------
    Param("defevent(name, (field, type, count))", "count of field", "count",
          lambda c, v: defevent("E", ("x", "u8", v))),
    Param("make_event_def(name, [(field, type, count)])", "count of field", "count",
          lambda c, v: make_event_def("E", [("x", "u64", v)])),
    Param("call(helper)", "helper id", "index", lambda c, v: call(v)),
    Param("ld_imm64(reg, imm)", "immediate", "int", lambda c, v: ld_imm64("r1", v)),
    Param("ld_map_fd(reg, fd)", "map fd", "index", lambda c, v: ld_map_fd("r1", v)),
    Param("ja(off)", "offset", "int", lambda c, v: ja(v)),
    Param("st(size, reg, off, imm)", "immediate", "int", lambda c, v: st("w", "r10", -8, v)),
    Param("load_program(insns, prog_type, license=)", "license", "string",
          lambda c, v: load_program(_insns(), "syscall", license=v)),
    Param("load_program(insns, prog_type, name=)", "name", "optional_string",
          lambda c, v: load_program(_insns(), "syscall", name=v)),
]




@pytest.fixture(scope="module")
def ctx(bpf_objects: dict[str, Path]) -> Iterator[Ctx]:
    with bad_input_context(bpf_objects) as c:
        yield c


def _shown(value: object) -> str:
    """How the message must show the value (the start of its repr; a NUL as the repr escapes it)."""
    return repr(value)[:20]


def _defect(ctx: Ctx, param: Param, value: object) -> str | None:
    """What is wrong with how ``param`` takes ``value`` (None: a TypeError/ValueError naming both)."""
    try:
        made = param.attempt(ctx, value)
    except (TypeError, ValueError) as exc:
        message = str(exc)
        if param.name not in message:
            return f"{message!r} does not name {param.name!r}"
        if _shown(value) not in message:
            return f"{message!r} does not show the value"
        return None
    except Exception as exc:  # the point: anything else is a defect
        return f"{type(exc).__name__}: {exc}"
    close = getattr(made, "close", None)
    if callable(close):
        close()
    return "accepted"


@pytest.mark.parametrize("param", PARAMS, ids=[f"{p.call}:{p.name}" for p in PARAMS])
def test_a_bad_value_is_named_at_the_call(ctx: Ctx, param: Param) -> None:
    defects = [f"{param.call} with {value!r}: {defect}" for value in BAD[param.kind]
               if (defect := _defect(ctx, param, value)) is not None]
    assert not defects, "\n".join(defects)


def test_every_kind_is_used() -> None:
    assert {p.kind for p in PARAMS} == set(BAD)
    assert sum(len(BAD[p.kind]) for p in PARAMS) > 400


# --- values that are right, however large ----------------------------------------------------------

def test_a_timeout_of_years_in_seconds_waits_instead_of_overflowing(ctx: Ctx) -> None:
    """30 days, a year, 1e12 s: more than a C int of milliseconds holds; they mean "wait", cut short by close()."""
    for timeout in (30 * 86400, 365 * 86400.0, 1e12):
        for make in (lambda: PerfReader(ctx.perf.maps["events"]), lambda: OrderedReader(ctx.ordered.maps["events"])):
            reader = make()
            outcome: list[BaseException] = []

            def read(r: Any = reader, t: float = timeout, out: list[BaseException] = outcome) -> None:
                try:
                    r.read(timeout=t)
                except BaseException as exc:  # recorded and checked below
                    out.append(exc)

            waiter = threading.Thread(target=read)
            waiter.start()
            waiter.join(0.2)
            assert waiter.is_alive(), f"read(timeout={timeout}) returned: {outcome}"
            reader.close()
            waiter.join(10)
            assert not waiter.is_alive()
            assert len(outcome) == 1 and type(outcome[0]) is ClosedError, outcome


def test_a_long_drain_timeout_is_accepted(ctx: Ctx) -> None:
    consumer = BackpressureConsumer(ctx.rb.maps["rb"], _nothing)
    consumer.start()
    consumer.stop(drain_timeout=1e9)  # nothing queued: returns at once
    assert not consumer.running


def test_a_callback_returning_a_str_names_the_callback(ctx: Ctx) -> None:
    """TypeError naming the callback and what it returned; that record counts as delivered, the rest
    of the batch stays for the next call."""
    got: list[int] = []

    def wrong(data: memoryview) -> str | None:
        got.append(rb_event(data)[0])
        return "done" if len(got) == 1 else None

    with RingBuffer(ctx.rb.maps["rb"], wrong) as rb:
        emit_ring(ctx.rb.programs["emit"], 3)
        with pytest.raises(TypeError, match=r"callback .*wrong must return None or an int, returned 'done' \(str\)"):
            rb.poll(1)
        assert rb.consume() == 2
    assert got == [0, 1, 2]


def test_a_map_fd_closed_underneath_is_a_bpf_error_naming_the_map(ctx: Ctx) -> None:
    """Someone closed the map's fd behind the object's back: the readers that dup it say which map."""
    m = ctx.perf.maps["events"]
    fd = m.fd
    saved = os.dup(fd)
    os.close(fd)
    try:
        for make in (lambda: PerfBuffer(m, _nothing), lambda: PerfReader(m), lambda: OrderedReader(m)):
            with pytest.raises(BPFError) as info:
                make()
            assert type(info.value) is BPFError and info.value.errno == 9
            assert "map 'events'" in str(info.value), str(info.value)
    finally:
        os.dup2(saved, fd)  # the object closes it on close()
        os.close(saved)
