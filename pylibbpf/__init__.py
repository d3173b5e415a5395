"""pylibbpf: libbpf for Python.

CO-RE objects, BPF ring buffers and perf buffers read in C batches, an ordered
cross-CPU merge, consumers with backpressure, and an event-struct DSL.
``pylibbpf.ffi`` / ``pylibbpf.lib`` give the raw libbpf C API for anything the
classes do not wrap.
"""

from __future__ import annotations

from ._ffi import ffi, lib
from ._reader import Batch
from ._version import __version__
from .asm import Insn, load_program, store_event_field, store_event_fields, store_event_imm, zero_event_field
from .errors import BPFError, ClosedError, LoadError
from .events import (
    EventDef,
    defevent,
    make_event_def,
    make_event_handler,
    make_event_parser,
    make_event_serializer,
)
from .object import BPFObject, Link, Map, Program, TestRun
from .perfbuf import PerfBuffer
from .ringbuf import RingBuffer


def libbpf_version() -> str:
    """The version of the libbpf linked into pylibbpf (the pin: 1.5.0)."""
    return str(ffi.string(lib.plb_libbpf_release()).decode())


__all__ = [
    "BPFError",
    "BPFObject",
    "Batch",
    "ClosedError",
    "EventDef",
    "Insn",
    "Link",
    "LoadError",
    "Map",
    "PerfBuffer",
    "Program",
    "RingBuffer",
    "TestRun",
    "__version__",
    "defevent",
    "ffi",
    "lib",
    "libbpf_version",
    "load_program",
    "make_event_def",
    "make_event_handler",
    "make_event_parser",
    "make_event_serializer",
    "store_event_field",
    "store_event_fields",
    "store_event_imm",
    "zero_event_field",
]
