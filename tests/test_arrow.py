"""Batch.to_arrow / OrderedBatch.to_arrow on the real kernel: events from tests/bpf/arrow.bpf.c
(integers, a signed field, a u16 array, a char[16] comm) read through RingBuffer, PerfBuffer and
OrderedReader, converted to pyarrow RecordBatches and compared with to_numpy and EventDef.parse."""

from __future__ import annotations

import array
import gc
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from progs import RAW_TP_ARGS, old_ts

from pylibbpf import Batch, BPFObject, OrderedBatch, OrderedReader, PerfBuffer, Program, RingBuffer
from pylibbpf._arrow import record_batch
from pylibbpf.events import defevent

EVENT = defevent("arrow_event", ("seq", "u64"), ("ts", "u64"), ("delta", "i32"), ("vals", "u16", 3),
                 ("pad", "u16"), ("comm", "char", 16), ("tail", "u32"))
# comms[i % 4] of record i: a short name, 16 bytes without a NUL, an empty one, and invalid UTF-8
COMMS = [b"bash\0zzz", b"x" * 15 + "é".encode()[:1], b"", b"caf\xc3\xa9\xff\xfe!"]
TO_RING, TO_PERF = 0, 1


@contextmanager
def arrow_object(path: Path) -> Iterator[BPFObject]:
    """arrow.bpf.o loaded, its comms map filled with COMMS."""
    with BPFObject.open(path) as o:
        o.load()
        for i, comm in enumerate(COMMS):
            o.maps["comms"].raw[i] = comm.ljust(16, b"\0")
        yield o


@pytest.fixture
def obj(bpf_objects: dict[str, Path]) -> Iterator[BPFObject]:
    with arrow_object(bpf_objects["arrow"]) as o:
        yield o


@pytest.fixture
def prog(obj: BPFObject) -> Program:
    return obj.programs["emit_arrow"]


@pytest.fixture
def cpu() -> int:
    return min(os.sched_getaffinity(0))


def emit(prog: Program, count: int, *, target: int, first_seq: int = 0, ts: int = 0, cpu: int = 0) -> None:
    prog.test_run(ctx=RAW_TP_ARGS.pack(count, first_seq, ts, target), cpu=cpu)


def read_all(read_batch: Any, count: int) -> list[Any]:
    """Non-empty batches until ``count`` records arrived (a generous deadline: the machine is shared)."""
    batches, got, deadline = [], 0, time.monotonic() + 10
    while got < count and time.monotonic() < deadline:
        batch = read_batch()
        if len(batch):
            batches.append(batch)
            got += len(batch)
    assert got == count
    return batches


def expected(seqs: list[int]) -> dict[str, list[Any]]:
    """The columns arrow.bpf.c writes for these sequence numbers (record i of a run, seqs[i], has the comm
    COMMS[i % 4])."""
    comms = [COMMS[(s - seqs[0]) % 4].ljust(16, b"\0")[:16].split(b"\0")[0].decode("utf-8", "replace") for s in seqs]
    return {"seq": seqs, "delta": [-s for s in seqs], "vals": [[s, s + 1, 65535] for s in seqs],
            "comm": comms, "tail": [0xDEADBEEF] * len(seqs)}


def check_event_columns(table: Any, seqs: list[int]) -> None:
    got = table.to_pydict()
    for name, values in expected(seqs).items():
        assert got[name] == values, name


def test_ring_buffer_batch(obj: BPFObject, prog: Program) -> None:
    with RingBuffer(obj.maps["rb"], lambda data: None) as rb:
        emit(prog, 8, target=TO_RING, ts=100)
        batches = read_all(lambda: rb.read_batch(0), 8)
    for batch in batches:
        out = batch.to_arrow(EVENT)
        assert isinstance(out, pa.RecordBatch)
        assert out.schema.names == EVENT.fields
        assert out.schema.metadata == {b"pylibbpf.event": b"arrow_event"}
        assert [out.schema.field(n).type for n in ("seq", "delta", "vals", "comm", "tail")] == [
            pa.uint64(), pa.int32(), pa.list_(pa.uint16(), 3), pa.string(), pa.uint32()]
        # the same values as parsing each record (comm: cut at the NUL, invalid UTF-8 replaced)
        parsed = [EVENT.parse(view)._asdict() for view in batch]
        assert out.to_pylist() == [{**p, "vals": list(p["vals"])} for p in parsed]
    table = pa.Table.from_batches([b.to_arrow(EVENT) for b in batches])
    check_event_columns(table, list(range(8)))
    assert table.column("ts").to_pylist() == [100 + i for i in range(8)]
    assert table.column("comm").to_pylist()[:4] == ["bash", "x" * 15 + "\ufffd", "", "café\ufffd\ufffd!"]


def test_columns_are_fresh_memory_independent_of_the_batch(obj: BPFObject, prog: Program) -> None:
    with RingBuffer(obj.maps["rb"], lambda data: None) as rb:
        emit(prog, 64, target=TO_RING)
        batches = read_all(lambda: rb.read_batch(0), 64)
    numeric = defevent("numeric", ("seq", "u64"), ("ts", "u64"), ("delta", "i32"), ("vals", "u16", 3))
    outs = []
    for batch in batches:
        want = batch.to_numpy(numeric)
        # the C pass allocates the columns itself (one block), not Arrow's memory pool
        before = pa.total_allocated_bytes()
        out = batch.to_arrow(numeric)
        assert pa.total_allocated_bytes() == before
        blob = np.frombuffer(batch.blob, dtype=np.uint8)
        lo, hi = blob.ctypes.data, blob.ctypes.data + blob.nbytes
        for column in out.columns:
            for buf in column.buffers():
                assert buf is None or not lo <= buf.address < hi
                assert buf is None or buf.address % 64 == 0   # Arrow's recommended alignment
        assert out.column("seq").to_pylist() == want["seq"].tolist()
        assert out.column("vals").to_pylist() == want["vals"].tolist()
        outs.append((out, want))
    del batches, batch, blob
    gc.collect()
    for out, want in outs:   # the batches are gone: the columns are still there, unchanged
        out.validate(full=True)
        assert out.column("ts").to_pylist() == want["ts"].tolist()
    # a structured array is copied too: changing it afterwards does not change the RecordBatch
    one = defevent("one", ("seq", "u64"))
    arr = np.arange(5, dtype=np.uint64).view(one.numpy_dtype())
    out = record_batch(arr, one)
    arr["seq"][:] = 9
    assert out.column(0).to_pylist() == [0, 1, 2, 3, 4]


def test_perf_buffer_batch(obj: BPFObject, prog: Program, cpu: int) -> None:
    with PerfBuffer(obj.maps["events"], lambda c, data: None) as pb:
        emit(prog, 10, target=TO_PERF, first_seq=5, cpu=cpu)
        batches = read_all(lambda: pb.read_batch(0), 10)
    table = pa.Table.from_batches([b.to_arrow(EVENT) for b in batches])
    check_event_columns(table, list(range(5, 15)))   # perf samples are padded to 8 bytes: cut


def test_ordered_batch_from_perf_array(obj: BPFObject, prog: Program, cpu: int) -> None:
    base = old_ts()
    with OrderedReader(obj.maps["events"], timestamp=8) as rd:
        emit(prog, 6, target=TO_PERF, ts=base, cpu=cpu)
        batches = read_all(lambda: rd.read_batch(timeout=1), 6)
    for batch in batches:
        out = batch.to_arrow(EVENT)
        assert out.schema.names == [*EVENT.fields, "timestamp", "late", "cpu"]
        assert out.schema.field("timestamp").type == pa.uint64()
        assert out.schema.field("late").type == pa.bool_() and out.schema.field("cpu").type == pa.uint32()
        assert out.column("timestamp").to_pylist() == list(batch.timestamps)
        assert out.column("cpu").to_pylist() == list(batch.tags)
    table = pa.Table.from_batches([b.to_arrow(EVENT) for b in batches])
    check_event_columns(table, list(range(6)))
    assert table.column("timestamp").to_pylist() == [base + i for i in range(6)]
    assert table.column("late").to_pylist() == [False] * 6 and table.column("cpu").to_pylist() == [cpu] * 6


def test_ordered_batch_from_ring_buffer_names_the_ring(obj: BPFObject, prog: Program) -> None:
    base = old_ts()
    with OrderedReader([obj.maps["rb"]], timestamp=8) as rd:
        emit(prog, 5, target=TO_RING, ts=base)
        batches = read_all(lambda: rd.read_batch(timeout=1), 5)
    table = pa.Table.from_batches([b.to_arrow(EVENT) for b in batches])
    assert table.schema.names == [*EVENT.fields, "timestamp", "late", "ring"]
    assert table.column("ring").to_pylist() == [0] * 5
    check_event_columns(table, list(range(5)))


def test_ordered_columns_do_not_hide_event_fields(obj: BPFObject, prog: Program, cpu: int) -> None:
    named = defevent("named", ("seq", "u64"), ("timestamp", "u64"), ("cpu", "i32"))
    base = old_ts()
    with OrderedReader(obj.maps["events"], timestamp=8) as rd:
        emit(prog, 3, target=TO_PERF, ts=base, cpu=cpu)
        batches = read_all(lambda: rd.read_batch(timeout=1), 3)
    table = pa.Table.from_batches([b.to_arrow(named) for b in batches])
    assert table.schema.names == ["seq", "timestamp", "cpu", "timestamp_", "late", "cpu_"]
    assert table.column("timestamp").to_pylist() == table.column("timestamp_").to_pylist()
    assert table.column("cpu").to_pylist() == [0, -1, -2]   # the event's own field (delta)
    assert table.column("cpu_").to_pylist() == [cpu] * 3


def test_empty_batches_keep_the_schema(obj: BPFObject) -> None:
    with RingBuffer(obj.maps["rb"], lambda data: None) as rb:
        empty = rb.read_batch(0).to_arrow(EVENT)
    assert empty.num_rows == 0 and empty.schema.names == EVENT.fields
    assert empty.schema.metadata == {b"pylibbpf.event": b"arrow_event"}
    with OrderedReader(obj.maps["events"], timestamp=8) as rd:
        ordered = rd.read_batch(timeout=0).to_arrow(EVENT)
    assert ordered.num_rows == 0 and ordered.schema.names == [*EVENT.fields, "timestamp", "late", "cpu"]


def test_wrong_event_raises_what_to_numpy_raises(obj: BPFObject, prog: Program) -> None:
    too_big = defevent("too_big", ("seq", "u64"), ("rest", "u8", 100))
    with RingBuffer(obj.maps["rb"], lambda data: None) as rb:
        emit(prog, 2, target=TO_RING)
        batch = read_all(lambda: rb.read_batch(0), 2)[0]
    with pytest.raises(ValueError) as from_numpy:
        batch.to_numpy(too_big)
    with pytest.raises(ValueError) as from_arrow:
        batch.to_arrow(too_big)
    assert str(from_arrow.value) == str(from_numpy.value)
    assert "too_big" in str(from_arrow.value) and "48" in str(from_arrow.value)


def test_invalid_utf8_is_replaced_like_parse() -> None:
    ev = defevent("s", ("name", "char", 6))
    raw = [b"ok\0\0\0\0", b"\xff\xfe\xfdab\0", b"\xe2\x82", b"abcdef"]
    arr = ev.parse_many(b"".join(r.ljust(6, b"\0") for r in raw))
    out = record_batch(arr, ev)
    assert out.column(0).to_pylist() == [ev.parse(r.ljust(6, b"\0")).name for r in raw]
    assert out.column(0).to_pylist() == ["ok", "\ufffd\ufffd\ufffdab", "\ufffd", "abcdef"]
    out.validate(full=True)


def test_missing_pyarrow_names_the_extra() -> None:
    code = textwrap.dedent("""
        import sys
        sys.modules["pyarrow"] = None   # import pyarrow now raises ImportError
        from pylibbpf import Batch, OrderedBatch
        from pylibbpf.events import defevent
        ev = defevent("e", ("pid", "u32"))
        for batch in (Batch.empty(), OrderedBatch.empty()):
            try:
                batch.to_arrow(ev)
            except ImportError as exc:
                print(exc)
            else:
                print("no error")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    lines = out.stdout.splitlines()
    assert lines == [
        "Batch.to_arrow needs pyarrow, which is not installed: pip install 'pylibbpf-cffi[arrow]'",
        "OrderedBatch.to_arrow needs pyarrow, which is not installed: pip install 'pylibbpf-cffi[arrow]'",
    ]


def test_arrow_columns_equal_numpy_columns_synthetic() -> None:
    ev = defevent("syn", ("a", "i8"), ("b", "u16"), ("c", "i64", 2), ("d", "ptr"), layout="c")
    rows = [{"a": -5, "b": 7, "c": [-1, 2**62], "d": 2**64 - 1}, {"a": 127, "b": 0, "c": [0, -(2**63)], "d": 0}]
    arr = ev.parse_many(b"".join(ev.serialize(r) for r in rows))
    out = record_batch(arr, ev)
    assert out.to_pylist() == rows
    # Arrow's own types: DataType.to_pandas_dtype() imports pandas on some pyarrow versions.
    assert [f.type for f in out.schema if f.name in ("a", "b", "d")] == [pa.int8(), pa.uint16(), pa.uint64()]


def synthetic_batch(records: list[bytes], as_arrays: bool) -> Batch:
    """A Batch over ``records`` laid out as the C collectors lay them out (8-aligned starts)."""
    batch = Batch.empty()
    blob, starts = b"", []
    for rec in records:
        starts.append(len(blob))
        blob += rec + b"\0" * (-len(rec) % 8)
    batch.blob, batch.view = blob, memoryview(blob)
    lens = [len(r) for r in records]
    batch.starts = array.array("I", starts) if as_arrays else starts
    batch.lens = array.array("I", lens) if as_arrays else lens
    batch.tags, batch.lost = [0] * len(records), [0] * len(records)
    return batch


@pytest.mark.parametrize("n", [1, 2, 40])
@pytest.mark.parametrize("as_arrays", [False, True])
def test_every_index_form_gives_to_numpy_columns(n: int, as_arrays: bool) -> None:
    # one record (passed as a start offset), a few (one index array), many (the batch's arrays);
    # records longer than the event are cut, strings are cut at the NUL or kept whole
    ev = defevent("idx", ("pid", "u32"), ("comm", "char", 7), ("b", "u8"), ("vals", "i16", 3), layout="c")
    rows = [{"pid": i, "comm": "abcdefg"[: i % 8], "b": i % 256, "vals": [i, -i, 7]} for i in range(n)]
    records = [ev.serialize(r) + b"\xff" * (i % 3) for i, r in enumerate(rows)]
    batch = synthetic_batch(records, as_arrays)
    out = batch.to_arrow(ev)
    out.validate(full=True)
    assert out.to_pylist() == rows
    want = batch.to_numpy(ev)
    assert out.column("pid").to_numpy().tolist() == want["pid"].tolist()
    # a short record anywhere: the same ValueError as to_numpy, whichever form the indices have
    records[n // 2] = records[n // 2][: ev.size - 2]
    short = synthetic_batch(records, as_arrays)
    with pytest.raises(ValueError) as from_numpy:
        short.to_numpy(ev)
    with pytest.raises(ValueError) as from_arrow:
        short.to_arrow(ev)
    assert str(from_arrow.value) == str(from_numpy.value)


def test_ordered_batch_delivered_records_are_left_out() -> None:
    # records a callback already took (batch.next) are not converted, and the merge's columns line up
    ev = defevent("o", ("seq", "u64"))
    batch = OrderedBatch.empty("ring")
    recs = [ev.serialize({"seq": i}) for i in range(5)]
    plain = synthetic_batch(recs, False)
    batch.blob, batch.view, batch.starts, batch.lens = plain.blob, plain.view, plain.starts, plain.lens
    batch.tags, batch.lost = [0, 1, 0, 1, 0], [0] * 5
    batch.timestamps, batch.late = array.array("Q", [10, 20, 30, 40, 50]), [False, False, True, False, False]
    batch.next = 2
    out = batch.to_arrow(ev)
    assert out.to_pydict() == {"seq": [2, 3, 4], "timestamp": [30, 40, 50], "late": [True, False, False],
                               "ring": [0, 1, 0]}


def test_a_full_and_a_short_column_block_both_come_back() -> None:
    """A reader's RecordBatches come in two sizes (full drains, and the short one a round ends
    with): once released, each size's column block serves the next RecordBatch of that size, so a
    loop of such rounds reuses two blocks instead of taking fresh memory (plb_block.h: the spare
    keeps the largest block released lately and the last smaller one). In a new process: the
    spare is process-wide."""
    code = textwrap.dedent("""
        import array
        from pylibbpf import Batch, defevent
        ev = defevent("two", ("a", "u64"), ("b", "u64"))
        def batch(n):
            b = Batch.empty()
            b.blob = bytes(16 * n)
            b.view = memoryview(b.blob)
            b.starts, b.lens = array.array("I", range(0, 16 * n, 16)), array.array("I", [16] * n)
            b.tags, b.lost = [0] * n, [0] * n
            return b
        full, short = batch(60000), batch(9000)
        def address(n_batch):
            out = n_batch.to_arrow(ev)
            return out.column("a").buffers()[1].address
        seen = []
        for _ in range(4):
            seen.append((address(full), address(short)))   # each RecordBatch released at once
        print(len({f for f, _ in seen[1:]}), len({s for _, s in seen[1:]}), seen[1][0] != seen[1][1])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["1", "1", "True"]
