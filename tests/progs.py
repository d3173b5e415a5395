"""Drivers for the test BPF programs in tests/bpf (struct layouts from tests/bpf/test_events.h)."""

from __future__ import annotations

import struct

from pylibbpf import BPFObject, Program

EMIT_ARGS = struct.Struct("<IIQQII")   # struct emit_args
RB_EVENT = struct.Struct("<QQII")      # struct rb_event
PERF_SAMPLE = struct.Struct("<QQII")   # struct perf_sample (+ extra bytes)
RAW_TP_ARGS = struct.Struct("<4Q")     # args[0..3] of struct bpf_raw_tracepoint_args


def emit_ring(prog: Program, count: int, *, first_seq: int = 0, value: int = 0, flags: int = 0,
              discard_every: int = 0, target: int = 0) -> None:
    """Run ringbuf.bpf.c:emit: `count` rb_event records into rb (target 0) or rb2 (target 1)."""
    prog.test_run(ctx=EMIT_ARGS.pack(count, flags, first_seq, value, discard_every, target))


def emit_perf(prog: Program, count: int, *, cpu: int, first_seq: int = 0, value: int = 0,
              extra: int = 0) -> None:
    """Run perfbuf.bpf.c:emit_perf on `cpu`: `count` samples of 24 + extra bytes."""
    prog.test_run(ctx=RAW_TP_ARGS.pack(count, first_seq, value, extra), cpu=cpu)


def rb_event(data: bytes | memoryview) -> tuple[int, int, int]:
    """(seq, value, ring) of an rb_event."""
    seq, value, ring, _ = RB_EVENT.unpack_from(data)
    return seq, value, ring


def counter(obj: BPFObject, map_name: str) -> int:
    """The u64 at key 0 of a one-entry array map."""
    raw = obj.maps[map_name].lookup(0)
    assert isinstance(raw, bytes)
    return int.from_bytes(raw, "little")
