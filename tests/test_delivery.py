"""Every record exactly once across calls, whatever ends a call early (docs/reliability.md, "Faults").

- ``RingBuffer.events()`` / ``PerfBuffer.events()`` left with ``break`` or by
  cancelling the task: the records drained but not yielded wait for the next call;
- ``PerfBuffer.read_batch()`` / ``events()`` whose ``lost_callback`` raises: the
  samples of that batch wait for the next call.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
from collections.abc import Callable
from typing import Any

import pytest
from progs import emit_perf, emit_ring, rb_event

from pylibbpf import BPFObject, ClosedError, PerfBuffer, RingBuffer

pytestmark = pytest.mark.usefixtures("bpf_privileged")

RECORDS = 1000
STEPS = [1, 1, 35, 213, 250, 498]  # records taken by each early-ended iteration, in turn (998 in all)




def _ring(obj: BPFObject) -> tuple[Any, Callable[[Any], int]]:
    emit_ring(obj.programs["emit"], RECORDS)
    return RingBuffer(obj.maps["rb"], lambda d: None), lambda item: rb_event(item)[0]


def _perf(obj: BPFObject) -> tuple[Any, Callable[[Any], int]]:
    pb = PerfBuffer(obj.maps["events"], lambda cpu, d: None, page_cnt=16)  # 1,000 samples fit in one ring
    emit_perf(obj.programs["emit_perf"], RECORDS, cpu=0)
    return pb, lambda item: int(struct.unpack_from("<Q", item[1])[0])


async def _take(reader: Any, seq_of: Callable[[Any], int], count: int, got: list[int]) -> None:
    """Take ``count`` records, then leave the loop with ``break``."""
    taken = 0
    async for item in reader.events():
        got.append(seq_of(item))
        taken += 1
        if taken == count:
            break


async def _take_then_cancel(reader: Any, seq_of: Callable[[Any], int], count: int, got: list[int]) -> None:
    """Take ``count`` records in a task, then cancel it while it waits for the next one."""
    taken = asyncio.Event()
    want = len(got) + count

    async def consume() -> None:
        async for item in reader.events():
            got.append(seq_of(item))
            if len(got) == want:
                taken.set()
                await asyncio.sleep(3600)  # the task is cancelled here, inside the loop

    task = asyncio.create_task(consume())
    await asyncio.wait_for(taken.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("how", ["break", "cancel"])
@pytest.mark.parametrize("kind", ["RingBuffer", "PerfBuffer"])
def test_leaving_events_early_keeps_the_rest_of_the_batch(rb_obj: BPFObject, perf_obj: BPFObject,
                                                          kind: str, how: str) -> None:
    reader, seq_of = _ring(rb_obj) if kind == "RingBuffer" else _perf(perf_obj)

    async def scenario() -> list[int]:
        got: list[int] = []
        for count in STEPS:  # a record lost by an earlier iteration makes a later one wait: TimeoutError
            await asyncio.wait_for((_take if how == "break" else _take_then_cancel)(reader, seq_of, count, got), 10)
        # The rest through the other paths: read_batch() and poll() start with what is pending.
        batch = reader.read_batch(0)
        got.extend(seq_of(v if kind == "RingBuffer" else (batch.tags[i], v)) for i, v in enumerate(batch))
        return got

    with reader:
        got = asyncio.run(scenario())
        assert reader.poll(0) == 0
    assert sorted(got) == list(range(RECORDS)), f"missing {sorted(set(range(RECORDS)) - set(got))[:10]}..."
    assert got == list(range(RECORDS))  # and in order


def _fill_then_lose(obj: BPFObject, pb: PerfBuffer, after: int) -> int:
    """Overflow CPU 0's ring, drain it, then write ``after`` samples: the kernel puts its lost-samples
    notice before them. Returns how many samples were drained first."""
    prog = obj.programs["emit_perf"]
    emit_perf(prog, 1000, cpu=0, extra=64)  # a one-page ring: most of them are lost
    first = 0
    while len(batch := pb.read_batch(0)):
        first += len(batch)
    emit_perf(prog, after, cpu=0, first_seq=10_000)
    return first


class Boom(Exception):
    pass


def test_a_raising_lost_callback_keeps_the_samples_after_the_notice(perf_obj: BPFObject) -> None:
    calls: list[tuple[int, int]] = []
    raising = [True]

    def lost(cpu: int, count: int) -> None:
        calls.append((cpu, count))
        if raising[0]:
            raising[0] = False
            raise Boom

    with PerfBuffer(perf_obj.maps["events"], lambda cpu, d: None, lost_callback=lost, page_cnt=1) as pb:
        _fill_then_lose(perf_obj, pb, 10)
        with pytest.raises(Boom):
            pb.read_batch(0)
        lost_after_raise = pb.lost_samples
        batch = pb.read_batch(0)
        seqs = [struct.unpack_from("<Q", v)[0] for v in batch]
        assert pb.lost_samples == lost_after_raise  # the notice was counted once
    assert seqs == list(range(10_000, 10_010))
    assert len(calls) == 1 and calls[0][0] == 0 and calls[0][1] > 0


def test_a_raising_lost_callback_in_events_keeps_the_samples(perf_obj: BPFObject) -> None:
    raising = [True]

    def lost(cpu: int, count: int) -> None:
        if raising[0]:
            raising[0] = False
            raise Boom

    async def scenario(pb: PerfBuffer) -> list[int]:
        got: list[int] = []
        with pytest.raises(Boom):
            async for _cpu, data in pb.events():
                got.append(struct.unpack_from("<Q", data)[0])

        async def rest() -> None:
            async for _cpu, data in pb.events():
                got.append(struct.unpack_from("<Q", data)[0])
                if len(got) == 10:
                    break

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(rest(), 10)
        return got

    with PerfBuffer(perf_obj.maps["events"], lambda cpu, d: None, lost_callback=lost, page_cnt=1) as pb:
        _fill_then_lose(perf_obj, pb, 10)
        assert asyncio.run(scenario(pb)) == list(range(10_000, 10_010))


def test_poll_with_a_raising_lost_callback_delivers_every_sample(perf_obj: BPFObject) -> None:
    """The callback path, for comparison: poll() stops at the notice, the next poll() goes on."""
    got: list[int] = []
    raising = [True]

    def lost(cpu: int, count: int) -> None:
        if raising[0]:
            raising[0] = False
            raise Boom

    with PerfBuffer(perf_obj.maps["events"], lambda cpu, d: got.append(struct.unpack_from("<Q", d)[0]),
                    lost_callback=lost, page_cnt=1) as pb:
        _fill_then_lose(perf_obj, pb, 10)
        with pytest.raises(Boom):
            pb.poll(0)
        pb.poll(0)
    assert got == list(range(10_000, 10_010))


# --- an exception the moment the C drain returns (a Ctrl-C arriving during it) ----------------------

def _interrupt_after(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    """Make ``module.name`` (a drain) raise KeyboardInterrupt right after it returns, once: what a
    SIGINT arriving while the C call runs does (Python raises at the next bytecode)."""
    real = getattr(module, name)
    fired: list[int] = []

    def drain_then_interrupt(*args: Any) -> Any:
        result = real(*args)
        if not fired:
            fired.append(1)
            raise KeyboardInterrupt
        return result

    monkeypatch.setattr(module, name, drain_then_interrupt)
    return fired


@pytest.mark.parametrize("kind", ["ring", "perf"])
def test_records_drained_when_an_interrupt_surfaces_are_delivered_once(
        rb_obj: BPFObject, perf_obj: BPFObject, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    reader, seq_of = _ring(rb_obj) if kind == "ring" else _perf(perf_obj)
    with reader:
        # The reader's wait-and-drain C call (_shim.plb_rb_wait_drain / plb_pb_wait_drain), as it makes it.
        fired = _interrupt_after(monkeypatch, reader, "_drain_c")
        with pytest.raises(KeyboardInterrupt):
            reader.read_batch(timeout=0)
        assert fired == [1]
        got: list[int] = []
        while True:
            batch = reader.read_batch(timeout=0)
            if not len(batch):
                break
            got.extend(seq_of(item if kind == "ring" else (0, item)) for item in batch)
    assert got == list(range(RECORDS))   # none lost to the interrupt, none twice


def _one_record_reader(kind: str, rb_obj: BPFObject, perf_obj: BPFObject, seq: int,
                       on_seq: Callable[[int], Any]) -> Any:
    """A RingBuffer or PerfBuffer calling ``on_seq(seq)`` per record, with one record ``seq`` written:
    its poll takes the path that calls the callback from inside the C call that waited."""
    reader: Any
    if kind == "ring":
        reader = RingBuffer(rb_obj.maps["rb"], lambda d: on_seq(rb_event(d)[0]))
        emit_ring(rb_obj.programs["emit"], 1, first_seq=seq)
    else:  # a perf ring exists only once the reader opened it: the sample comes after
        reader = PerfBuffer(perf_obj.maps["events"], lambda cpu, d: on_seq(struct.unpack_from("<Q", d)[0]))
        emit_perf(perf_obj.programs["emit_perf"], 1, cpu=0, first_seq=seq)
    return reader


def _deliver_the_rest(reader: Any, kind: str, how: str, got: list[int]) -> None:
    """After the interrupted call: the next poll (or read_batch) delivers the one record, then nothing."""
    if how == "poll":
        assert reader.poll(0) == 1
    else:
        batch = reader.read_batch(0)
        got.extend(rb_event(v)[0] if kind == "ring" else struct.unpack_from("<Q", v)[0] for v in batch)
    assert reader.poll(0) == 0


@pytest.mark.parametrize("kind", ["ring", "perf"])
@pytest.mark.parametrize("how", ["poll", "read_batch"])
def test_one_record_drained_when_an_interrupt_surfaces_is_delivered_once(
        rb_obj: BPFObject, perf_obj: BPFObject, monkeypatch: pytest.MonkeyPatch, kind: str, how: str) -> None:
    """The one-record path: an interrupt the moment the C call returns. read_batch's call (no Batch
    made yet) leaves the record pending, and the next call delivers it; poll's call has already
    delivered it from inside (plb_py_*_one), so the next poll has nothing to deliver."""
    got: list[int] = []
    with _one_record_reader(kind, rb_obj, perf_obj, 11, got.append) as reader:
        fired = _interrupt_after(monkeypatch, reader, "_call_c" if how == "poll" else "_drain_c")
        with pytest.raises(KeyboardInterrupt):
            reader.poll(1) if how == "poll" else reader.read_batch(1.0)
        assert fired == [1]
        if how == "poll":
            assert got == [11] and reader.poll(0) == 0
        else:
            assert got == []
            _deliver_the_rest(reader, kind, how, got)
    assert got == [11]


@pytest.mark.parametrize("kind", ["ring", "perf"])
@pytest.mark.parametrize("how", ["poll", "read_batch"])
def test_one_record_interrupted_after_the_hand_over_is_delivered_once(
        rb_obj: BPFObject, perf_obj: BPFObject, monkeypatch: pytest.MonkeyPatch, kind: str, how: str) -> None:
    """The one-record path: an interrupt after the record left the drain's call but before its
    callback ran (or its batch was made) leaves it pending; the next call delivers it."""
    import pylibbpf._batch
    import pylibbpf._reader

    fired: list[int] = []

    def interrupt_once(real: Callable[..., Any]) -> Callable[..., Any]:
        def step(*args: Any) -> Any:
            if not fired:
                fired.append(1)
                raise KeyboardInterrupt
            return real(*args)
        return step

    got: list[int] = []
    with _one_record_reader(kind, rb_obj, perf_obj, 21, got.append) as reader:
        if how == "poll":  # the view made for the callback (plb_py_one): between the hand-over and the call
            monkeypatch.setattr(pylibbpf._reader, "memoryview", interrupt_once(memoryview), raising=False)
        else:              # the batch of one made for read_batch
            monkeypatch.setattr(pylibbpf._batch.Batch, "one", classmethod(interrupt_once(
                pylibbpf._batch.Batch.one.__func__)))  # type: ignore[attr-defined]
        with pytest.raises(KeyboardInterrupt):
            reader.poll(1) if how == "poll" else reader.read_batch(1.0)
        assert fired == [1] and got == []
        monkeypatch.undo()
        _deliver_the_rest(reader, kind, how, got)
    assert got == [21]


@pytest.mark.parametrize("kind", ["ring", "perf"])
def test_a_lone_records_callback_may_close_its_reader(rb_obj: BPFObject, perf_obj: BPFObject, kind: str) -> None:
    """The callback runs inside poll's C call, but with the reader's lock released: closing there
    frees the reader at once (no deadlock), and poll still counts the record."""
    got: list[int] = []

    def on_seq(seq: int) -> None:
        got.append(seq)
        reader.close()

    reader = _one_record_reader(kind, rb_obj, perf_obj, 5, on_seq)
    assert reader.poll(1) == 1
    assert got == [5] and reader.closed
    with pytest.raises(ClosedError):
        reader.poll(0)


@pytest.mark.parametrize("kind", ["ring", "perf"])
def test_close_from_another_thread_does_not_wait_for_a_lone_records_callback(
        rb_obj: BPFObject, perf_obj: BPFObject, kind: str) -> None:
    """As for every callback: another thread's close() returns while the callback still runs, and
    the poll that called it returns the record's count once the callback does."""
    entered, release = threading.Event(), threading.Event()
    polled: list[Any] = []

    def on_seq(seq: int) -> None:
        entered.set()
        release.wait(60)

    reader = _one_record_reader(kind, rb_obj, perf_obj, 5, on_seq)

    def poll() -> None:
        try:
            polled.append(reader.poll(1))
        except BaseException as e:  # reported by the assertion below
            polled.append(e)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        assert entered.wait(60)
        closer = threading.Thread(target=reader.close)
        closer.start()
        closer.join(60)
        assert not closer.is_alive() and reader.closed  # closed while the callback is still inside
        assert poller.is_alive()
    finally:
        release.set()
        poller.join(60)
    assert polled == [1]
