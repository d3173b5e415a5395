"""The pylibbpf consumers under test, one small function each.

Adding a consumer: write a function ``(size, check) -> Reader`` and decorate it
with ``@consumer(name, kind)``; ``requires`` names the pylibbpf attribute it
needs, so the run records a skip (with the reason) until that exists.
``__main__`` picks consumers up from :data:`CONSUMERS`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .harness import Reader, SeqCheck
from .producers import PRODUCER_OBJ, Trigger

RING_MAP, PERF_MAP, FAILURES_MAP = "rb", "events", "failures"
PERF_PAGES = 8192          # pages per CPU ring (32 MiB): holds a perf drain run's events
NOTES: list[str] = []      # remarks about how a consumer had to be set up, reported with its rows


@dataclass
class Consumer:
    name: str
    kind: str                                  # "ringbuf" or "perfbuf": which C consumer is its ceiling
    factory: Callable[[int, SeqCheck], Reader]
    requires: str | None = None                # a pylibbpf attribute that must exist
    modes: tuple[str, ...] = ("drain", "steady", "latency")

    def skip_reason(self) -> str | None:
        if self.requires is None:
            return None
        import pylibbpf

        if not hasattr(pylibbpf, self.requires):
            return f"pylibbpf.{self.requires} is not importable yet"
        return None


CONSUMERS: dict[str, Consumer] = {}


def consumer(name: str, kind: str, requires: str | None = None,
             modes: tuple[str, ...] = ("drain", "steady", "latency")) -> Callable[[Any], Any]:
    def register(factory: Callable[[int, SeqCheck], Reader]) -> Callable[[int, SeqCheck], Reader]:
        CONSUMERS[name] = Consumer(name, kind, factory, requires, modes)
        return factory
    return register


def libbpf_producer(kind: str, size: int) -> tuple[Any, Trigger, Callable[[], int]]:
    """Open and load the producer object: (object, its trigger, its failure counter)."""
    from pylibbpf import BPFObject

    obj = BPFObject.open(str(PRODUCER_OBJ))
    obj.load()
    prog = obj.programs["produce_perf" if kind == "perfbuf" else "produce_ring"]
    key = 1 if kind == "perfbuf" else 0

    def failures() -> int:
        raw = obj.maps[FAILURES_MAP].raw.lookup(key)
        return int.from_bytes(raw, "little") if isinstance(raw, bytes) else 0

    return obj, Trigger(prog.fd, size, per_cpu=kind == "perfbuf"), failures


def closing(*things: Any) -> Callable[[], None]:
    def close() -> None:
        for thing in things:
            thing.close()
    return close


def event_def(size: int) -> Any:
    """The event layout for to_numpy: pylibbpf.events' defevent, or a stand-in with the same interface."""
    try:
        from pylibbpf.events import defevent

        return defevent("Ev", ("seq", "u64"), ("ts", "u64"), ("payload", "u8", size - 16))
    except ImportError as exc:
        import numpy as np

        NOTES.append(f"pylibbpf.events not importable ({exc}): to_numpy got a plain numpy dtype")

        class Plain:
            name = "Ev"

            def __init__(self) -> None:
                self.size = size
                self._dtype = np.dtype([("seq", "<u8"), ("ts", "<u8"), ("payload", "u1", (size - 16,))])

            def numpy_dtype(self, itemsize: int | None = None) -> Any:
                return self._dtype

        return Plain()


# -- ring buffers ---------------------------------------------------------------

@consumer("pylibbpf-ringbuf-callback", "ringbuf")
def ringbuf_callback(size: int, check: SeqCheck) -> Reader:
    """RingBuffer with a Python callback per event: poll() when waiting, consume() when not."""
    from pylibbpf import RingBuffer

    obj, trigger, failures = libbpf_producer("ringbuf", size)
    rb = RingBuffer(obj.maps[RING_MAP], check.on_ring())
    return Reader(lambda t: rb.poll(t / 1000) if t else rb.consume(), trigger, failures, closing(rb, obj))


@consumer("pylibbpf-ringbuf-noop", "ringbuf", modes=("drain", "steady"))
def ringbuf_noop(size: int, check: SeqCheck) -> Reader:
    """RingBuffer with a callback that does nothing: the cost of one Python call per event.

    Counted from ``poll()``/``consume()``'s return value (events handled), so
    these rows carry no per-event sequence check; the totals are still checked.
    """
    from pylibbpf import RingBuffer

    obj, trigger, failures = libbpf_producer("ringbuf", size)
    rb = RingBuffer(obj.maps[RING_MAP], lambda data: None)
    return Reader(lambda t: check.add(rb.poll(t / 1000) if t else rb.consume()), trigger, failures, closing(rb, obj))


@consumer("pylibbpf-ringbuf-batch", "ringbuf")
def ringbuf_batch(size: int, check: SeqCheck) -> Reader:
    """rb.read_batch(): one C drain per call, the records iterated as memoryviews in Python."""
    from pylibbpf import RingBuffer

    obj, trigger, failures = libbpf_producer("ringbuf", size)
    rb = RingBuffer(obj.maps[RING_MAP], lambda data: None)

    def step(timeout_ms: int) -> int:
        batch = rb.read_batch(timeout_ms / 1000)   # seconds
        return check.walk(batch, len(batch))

    return Reader(step, trigger, failures, closing(rb, obj))


@consumer("pylibbpf-ringbuf-numpy", "ringbuf")
def ringbuf_numpy(size: int, check: SeqCheck) -> Reader:
    """rb.read_batch().to_numpy(event): the whole batch parsed into a structured array, no Python loop."""
    from pylibbpf import RingBuffer

    ev = event_def(size)
    check.warm_up(ev.numpy_dtype())   # numpy imports parts of itself on first use: not in the first batch
    obj, trigger, failures = libbpf_producer("ringbuf", size)
    rb = RingBuffer(obj.maps[RING_MAP], lambda data: None)
    return Reader(lambda t: check.walk_array(rb.read_batch(t / 1000).to_numpy(ev)), trigger, failures,
                  closing(rb, obj))


def text_event_def(size: int) -> Any:
    """The event as an EventDef, its payload text (``char``): the record path's layout."""
    from pylibbpf.events import defevent

    return defevent("Ev", ("seq", "u64"), ("ts", "u64"), ("payload", "char", size - 16))


def skeleton_codec(size: int) -> Any:
    """The codec of ``struct bench_ev<size>`` from the producer's generated skeleton
    (``pylibbpf.build.skeleton``, written into benchmarks/build/ and imported from there)."""
    import importlib.util

    from pylibbpf import build

    path = build.skeleton(PRODUCER_OBJ, PRODUCER_OBJ.with_name("producer_skel.py"), embed=False)
    spec = importlib.util.spec_from_file_location("producer_skel", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, f"BENCH_EV{size}")


@consumer("pylibbpf-ringbuf-record", "ringbuf", modes=("drain",))
def ringbuf_record(size: int, check: SeqCheck) -> Reader:
    """rb.read_batch(), each record parsed into an EventRecord by EventDef.parse: the record path."""
    from pylibbpf import RingBuffer

    parse = text_event_def(size).parse
    obj, trigger, failures = libbpf_producer("ringbuf", size)
    rb = RingBuffer(obj.maps[RING_MAP])

    def step(timeout_ms: int) -> int:
        records = [parse(view) for view in rb.read_batch(timeout_ms / 1000)]
        return check.walk_rows([r.seq for r in records], [])

    return Reader(step, trigger, failures, closing(rb, obj))


@consumer("pylibbpf-ringbuf-skel", "ringbuf", modes=("drain",))
def ringbuf_skel(size: int, check: SeqCheck) -> Reader:
    """rb.read_batch() into the skeleton's struct class: one struct.iter_unpack per batch, one call
    per record (the generated loader: payload to str)."""
    from pylibbpf import RingBuffer

    codec = skeleton_codec(size)
    obj, trigger, failures = libbpf_producer("ringbuf", size)
    rb = RingBuffer(obj.maps[RING_MAP])

    def step(timeout_ms: int) -> int:
        records = codec.unpack_batch(rb.read_batch(timeout_ms / 1000))
        return check.walk_rows([r.seq for r in records], [])

    return Reader(step, trigger, failures, closing(rb, obj))


#: Bytes of the array a read_into row fills per call: about what one read_batch drains (cache-sized).
INTO_BYTES = 1 << 20


@consumer("pylibbpf-ringbuf-into", "ringbuf")
def ringbuf_into(size: int, check: SeqCheck) -> Reader:
    """rb.read_into(array): records copied once, ring -> the rows of one preallocated structured array."""
    from pylibbpf import RingBuffer

    ev = event_def(size)
    import numpy as np

    out = np.zeros(max(64, INTO_BYTES // size), ev.numpy_dtype())
    obj, trigger, failures = libbpf_producer("ringbuf", size)
    rb = RingBuffer(obj.maps[RING_MAP], lambda data: None)

    def step(timeout_ms: int) -> int:
        n = rb.read_into(out, timeout_ms / 1000)   # seconds
        return check.walk_array(out[:n])

    return Reader(step, trigger, failures, closing(rb, obj))


class ArrowRows:
    """A RecordBatch seen as walk_array reads an array: ``len`` rows, ``rows["seq"]`` a numpy column (no copy)."""

    def __init__(self, batch: Any) -> None:
        self.batch = batch

    def __len__(self) -> int:
        return int(self.batch.num_rows)

    def __getitem__(self, name: str) -> Any:
        return self.batch.column(name).to_numpy()


def arrow_reader(size: int, check: SeqCheck, read: Callable[[Any, Any, float], Any]) -> Reader:
    """A RingBuffer whose records ``read(rb, event, timeout_s)`` gives as a RecordBatch, checked by
    its ``seq``/``ts`` columns; a record handed back through ``take_odd`` fails the run."""
    from pylibbpf import Batch, RingBuffer

    ev = event_def(size)
    # Warm up as the numpy rows do: numpy and pyarrow import parts of themselves on first use.
    # A RecordBatch's first column() and to_numpy() took ~0.5 ms here, about a tenth of the
    # first fill-and-drain of a 1 KiB drain; the numpy paths of walk_array are warmed by check.warm_up.
    check.warm_up(ev.numpy_dtype())
    ArrowRows(Batch.one(bytes(ev.size)).to_arrow(ev))["seq"]
    obj, trigger, failures = libbpf_producer("ringbuf", size)
    rb = RingBuffer(obj.maps[RING_MAP], lambda data: None)

    def step(timeout_ms: int) -> int:
        got = check.walk_array(ArrowRows(read(rb, ev, timeout_ms / 1000)))
        if rb.odd_records:
            raise AssertionError(f"{rb.odd_records} records of another size than the event")
        return got

    return Reader(step, trigger, failures, closing(rb, obj))


@consumer("pylibbpf-ringbuf-arrow", "ringbuf")
def ringbuf_arrow(size: int, check: SeqCheck) -> Reader:
    """rb.read_batch().to_arrow(event): the batch as a pyarrow RecordBatch (one C pass into fresh columns)."""
    return arrow_reader(size, check, lambda rb, ev, timeout: rb.read_batch(timeout).to_arrow(ev))


@consumer("pylibbpf-ringbuf-readarrow", "ringbuf")
def ringbuf_read_arrow(size: int, check: SeqCheck) -> Reader:
    """rb.read_arrow(event): records straight from the ring into Arrow columns (one copy, no batch)."""
    return arrow_reader(size, check, lambda rb, ev, timeout: rb.read_arrow(ev, timeout))


# -- perf buffers ---------------------------------------------------------------

@consumer("pylibbpf-perfbuf-callback", "perfbuf")
def perfbuf_callback(size: int, check: SeqCheck) -> Reader:
    """PerfBuffer (libbpf perf_buffer__new defaults: wakeup_events=1) with a callback per sample."""
    from pylibbpf import PerfBuffer

    obj, trigger, failures = libbpf_producer("perfbuf", size)
    pb = PerfBuffer(obj.maps[PERF_MAP], check.on_perf(), page_cnt=PERF_PAGES)
    return Reader(lambda t: pb.poll(t / 1000) if t else pb.consume(), trigger, failures, closing(pb, obj))


@consumer("pylibbpf-perfbuf-batch", "perfbuf")
def perfbuf_batch(size: int, check: SeqCheck) -> Reader:
    """pb.read_batch(): every CPU's ring drained in one C call (lost-sample notices are kept out of it)."""
    from pylibbpf import PerfBuffer

    obj, trigger, failures = libbpf_producer("perfbuf", size)
    pb = PerfBuffer(obj.maps[PERF_MAP], lambda cpu, data: None, page_cnt=PERF_PAGES)

    def step(timeout_ms: int) -> int:
        batch = pb.read_batch(timeout_ms / 1000)   # seconds
        return check.walk(batch, len(batch))

    return Reader(step, trigger, failures, closing(pb, obj))


# -- hooks for readers that are still being written -------------------------------

@consumer("pylibbpf-ordered-batch", "perfbuf", requires="OrderedReader")
def ordered_batch(size: int, check: SeqCheck) -> Reader:
    """OrderedReader over the perf event array, merged by the event's timestamp (offset 8), read in batches.

    Its perf rings use the same page count as the other perf consumers; a
    drain round's time includes the merge window (5 ms) that the last records
    wait for when the other rings are empty.
    """
    import pylibbpf

    obj, trigger, failures = libbpf_producer("perfbuf", size)
    rd = pylibbpf.OrderedReader(obj.maps[PERF_MAP], timestamp=8, page_cnt=PERF_PAGES)

    def step(timeout_ms: int) -> int:
        batch = rd.read_batch(timeout_ms / 1000)   # seconds
        return check.walk(batch, len(batch))

    return Reader(step, trigger, failures, closing(rd, obj))


@consumer("pylibbpf-ordered-numpy", "perfbuf", requires="OrderedReader")
def ordered_numpy(size: int, check: SeqCheck) -> Reader:
    """OrderedReader.read_batch().to_numpy(event): the merged batch parsed without a Python loop."""
    import pylibbpf

    ev = event_def(size)
    check.warm_up(ev.numpy_dtype())
    obj, trigger, failures = libbpf_producer("perfbuf", size)
    rd = pylibbpf.OrderedReader(obj.maps[PERF_MAP], timestamp=8, page_cnt=PERF_PAGES)
    return Reader(lambda t: check.walk_array(rd.read_batch(t / 1000).to_numpy(ev)), trigger, failures,
                  closing(rd, obj))


@consumer("pylibbpf-ordered-into", "perfbuf", requires="OrderedReader")
def ordered_into(size: int, check: SeqCheck) -> Reader:
    """OrderedReader.read_into(array, timestamps=...): the merge writes each record once, into its row."""
    import numpy as np

    import pylibbpf

    ev = event_def(size)
    rows = max(64, INTO_BYTES // size)
    out, ts = np.zeros(rows, ev.numpy_dtype()), np.zeros(rows, np.uint64)
    obj, trigger, failures = libbpf_producer("perfbuf", size)
    rd = pylibbpf.OrderedReader(obj.maps[PERF_MAP], timestamp=8, page_cnt=PERF_PAGES)

    def step(timeout_ms: int) -> int:
        n = rd.read_into(out, timeout_ms / 1000, timestamps=ts)
        return check.walk_array(out[:n])

    return Reader(step, trigger, failures, closing(rd, obj))


@consumer("pylibbpf-backpressure", "ringbuf", requires="BackpressureConsumer", modes=("drain", "steady"))
def backpressure(size: int, check: SeqCheck) -> Reader:
    """BackpressureConsumer: a native reader thread fills a bounded queue, a Python thread calls back.

    The queue holds a whole drain run (1 Mi records, 128 MiB), so records are
    dropped only when the callback falls that far behind; drops show as missing.
    """
    import pylibbpf

    obj, trigger, failures = libbpf_producer("ringbuf", size)
    bc = pylibbpf.BackpressureConsumer(obj.maps[RING_MAP], check.on_ring(), max_pending=1 << 20,
                                       max_pending_bytes=128 << 20, batch_size=1024)

    def close() -> None:
        bc.stop()
        obj.close()

    return Reader(lambda t: time.sleep(max(t, 1) / 1000), trigger, failures, close, start=bc.start)
