"""Time in seconds on every reader call, the deprecated milliseconds, and readers without a callback."""

from __future__ import annotations

import asyncio
import inspect
import warnings
from pathlib import Path

import numpy as np
import pytest
from progs import emit_perf, emit_ring

from pylibbpf import BPFObject, PerfBuffer, RingBuffer, defevent, process_events

pytestmark = pytest.mark.usefixtures("bpf_privileged")

RB_EVENT = defevent("rb_event", ("seq", "u64"), ("value", "u64"), ("cpu", "u32"), ("pad", "u32"))  # struct rb_event


def test_poll_takes_seconds_and_warns_for_milliseconds(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["ringbuf"]) as obj:
        obj.load()
        got: list[bytes] = []
        with RingBuffer(obj.maps["rb"], lambda d: got.append(bytes(d))) as rb:
            emit_ring(obj.programs["emit"], 2)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                assert rb.poll(30.0) == 2  # seconds; no warning for the new spelling
            emit_ring(obj.programs["emit"], 1)
            with pytest.warns(DeprecationWarning, match=r"RingBuffer.poll\(timeout_ms=...\) is deprecated: "
                                                         r"pass timeout= in seconds"):
                assert rb.poll(timeout_ms=30_000) == 1
            with pytest.raises(TypeError, match=r"give timeout= \(seconds\) or the deprecated timeout_ms=, not both"):
                rb.poll(1.0, timeout_ms=1000)
            with pytest.raises(ValueError, match=r"timeout must be >= 0 seconds, or None to wait forever, got -1"):
                rb.poll(-1)
            assert rb.poll(0) == 0 and len(got) == 3
        emit_ring(obj.programs["emit"], 1)
        with pytest.warns(DeprecationWarning, match=r"process_events\(timeout_ms=...\) is deprecated"):
            assert process_events(obj.maps["rb"], lambda _r: None, max_events=1, timeout_ms=30_000) == 1


def test_poll_and_consume_keep_their_signatures() -> None:
    for cls in (RingBuffer, PerfBuffer):
        assert list(inspect.signature(cls.poll).parameters) == ["self", "timeout", "timeout_ms"]
        assert inspect.signature(cls.poll).parameters["timeout"].default is None
        assert list(inspect.signature(cls.consume).parameters) == ["self"]
    assert "seconds" in (RingBuffer.poll.__doc__ or "")


def test_a_ring_buffer_without_a_callback_reads_every_other_way(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["ringbuf"]) as obj:
        obj.load()
        emit = obj.programs["emit"]
        with RingBuffer(obj.maps["rb"]) as rb:
            emit_ring(emit, 2, first_seq=10)
            assert [RB_EVENT.parse(r).seq for r in rb.read_batch(30)] == [10, 11]
            emit_ring(emit, 2, first_seq=20)
            out = np.zeros(4, dtype=RB_EVENT.numpy_dtype())
            assert rb.read_into(out, 30) == 2 and list(out["seq"][:2]) == [20, 21]
            emit_ring(emit, 1, first_seq=30)
            assert rb.read_arrow(RB_EVENT, 30).column("seq").to_pylist() == [30]
            emit_ring(emit, 1, first_seq=40)

            async def first() -> int:
                async for data in rb.events():
                    return int(RB_EVENT.parse(data).seq)
                return -1

            assert asyncio.run(first()) == 40
            for call in (lambda: rb.poll(0), rb.consume):
                with pytest.raises(TypeError, match=r"RingBuffer.(poll|consume)\(\) calls a callback per record, "
                                                    r"and ring 0 \('rb'\) has none"):
                    call()


def test_a_perf_buffer_without_a_callback_reads_batches(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["perfbuf"]) as obj:
        obj.load()
        with PerfBuffer(obj.maps["events"]) as pb:
            emit_perf(obj.programs["emit_perf"], 3, cpu=0)
            assert len(pb.read_batch(30)) == 3
            with pytest.raises(TypeError, match=r"PerfBuffer.poll\(\) calls a callback per sample, and none was given"):
                pb.poll(0)
