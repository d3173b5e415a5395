"""pylibbpf: libbpf for Python.

CO-RE objects, BPF ring buffers and perf buffers read in C batches, an ordered
cross-CPU merge, consumers with backpressure, and an event-struct DSL.
``pylibbpf.ffi`` / ``pylibbpf.lib`` give the raw libbpf C API for anything the
classes do not wrap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _shim, features, loaded
from ._batch import Batch, OrderedBatch, Record
from ._ffi import ffi, lib
from ._into import FLAG_FORCED, FLAG_LATE, FLAG_LOST, OddRecord
from ._rings import RingBufLayout
from ._version import __version__
from .asm import Insn, load_program, store_event_field, store_event_fields, store_event_imm, zero_event_field
from .build import include_dir
from .consumers import (
    BackpressureConsumer,
    BackpressureStats,
    ConsumerStats,
    RingBufConsumer,
    SamplingConsumer,
    SamplingStats,
    backpressure_consumer,
    ringbuf_consumer,
    sampling_consumer,
)
from .errors import BPFError, ClosedError, LoadError
from .events import (
    EventDef,
    defevent,
    make_event_def,
    make_event_handler,
    make_event_parser,
    make_event_serializer,
)
from .globals import Globals, RawGlobals
from .hist import Histogram
from .link import Link
from .loaded import LinkInfo, MapInfo, ProgramInfo, links, programs
from .maps import Map, RawMap
from .object import BPFObject
from .ordered import OrderedReader, OrderedStats
from .perfbuf import PerfBuffer, PerfReader
from .program import Program, ProgramStats, TestRun, enable_stats
from .ringbuf import (
    RingBuffer,
    UserRingBuffer,
    map_ringbuf,
    peek_ringbuf_events,
    process_events,
    read_ringbuf_events,
    read_ringbuf_into,
    unmap_ringbuf,
)
from .syms import KernelSymbols, ProcessSymbols, Symbol

if TYPE_CHECKING:  # at run time pylibbpf.maps is the module, and calling it lists the maps (loaded.MapsModule)
    from .loaded import maps as maps


def libbpf_version() -> str:
    """The version of the libbpf linked into pylibbpf (the pin: 1.5.0)."""
    return _shim.plb_libbpf_release()


__all__ = [
    "FLAG_FORCED",
    "FLAG_LATE",
    "FLAG_LOST",
    "BPFError",
    "BPFObject",
    "BackpressureConsumer",
    "BackpressureStats",
    "Batch",
    "ClosedError",
    "ConsumerStats",
    "EventDef",
    "Globals",
    "Histogram",
    "Insn",
    "KernelSymbols",
    "Link",
    "LinkInfo",
    "LoadError",
    "Map",
    "MapInfo",
    "OddRecord",
    "OrderedBatch",
    "OrderedReader",
    "OrderedStats",
    "PerfBuffer",
    "PerfReader",
    "ProcessSymbols",
    "Program",
    "ProgramInfo",
    "ProgramStats",
    "RawGlobals",
    "RawMap",
    "Record",
    "RingBufConsumer",
    "RingBufLayout",
    "RingBuffer",
    "SamplingConsumer",
    "SamplingStats",
    "Symbol",
    "TestRun",
    "UserRingBuffer",
    "__version__",
    "backpressure_consumer",
    "defevent",
    "enable_stats",
    "features",
    "ffi",
    "include_dir",
    "lib",
    "libbpf_version",
    "links",
    "load_program",
    "loaded",
    "make_event_def",
    "make_event_handler",
    "make_event_parser",
    "make_event_serializer",
    "map_ringbuf",
    "maps",
    "peek_ringbuf_events",
    "process_events",
    "programs",
    "read_ringbuf_events",
    "read_ringbuf_into",
    "ringbuf_consumer",
    "sampling_consumer",
    "store_event_field",
    "store_event_fields",
    "store_event_imm",
    "unmap_ringbuf",
    "zero_event_field",
]
