"""PerfBuffer on the real kernel: what libbpf's perf_buffer selftest asserts, through pylibbpf."""

from __future__ import annotations

import asyncio
import select
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from progs import PERF_SAMPLE, blocked_in_epoll, counter, emit_perf, epoll_sets, wait_until

from pylibbpf import BPFObject, ClosedError, PerfBuffer, lib
from pylibbpf.features import online_cpus

pytestmark = pytest.mark.usefixtures("bpf_privileged")


BPF_OBJECT = "perfbuf"  # the obj fixture (tests/conftest.py) loads it


def test_every_online_cpu_delivers_with_its_cpu_number(obj: BPFObject) -> None:
    seen: list[tuple[int, int, int]] = []

    def callback(cpu: int, data: memoryview) -> None:
        seq, _value, sample_cpu, _ = PERF_SAMPLE.unpack_from(data)
        seen.append((cpu, sample_cpu, seq))

    cpus = online_cpus()
    with PerfBuffer(obj.maps["events"], callback) as pb:
        assert pb.buffer_cnt() == len(cpus)
        for cpu in cpus:
            emit_perf(obj.programs["emit_perf"], 5, cpu=cpu, first_seq=cpu * 100)
        deadline = time.monotonic() + 60
        while len(seen) < 5 * len(cpus) and time.monotonic() < deadline:
            pb.poll(0.1)
    assert sorted(seen) == sorted((c, c, c * 100 + i) for c in cpus for i in range(5))
    assert counter(obj, "failed_outputs") == 0


def test_samples_carry_padding_to_8_bytes(obj: BPFObject) -> None:
    sizes: list[int] = []
    with PerfBuffer(obj.maps["events"], lambda cpu, d: sizes.append(len(d))) as pb:
        emit_perf(obj.programs["emit_perf"], 1, cpu=0, extra=1)  # 25-byte sample
        pb.poll(1)
    assert len(sizes) == 1 and 25 <= sizes[0] <= 25 + 7 and (sizes[0] + 4) % 8 == 0


def test_a_full_ring_reports_lost_samples(obj: BPFObject) -> None:
    lost: list[tuple[int, int]] = []
    got: list[int] = []
    with PerfBuffer(obj.maps["events"], lambda cpu, d: got.append(cpu),
                    lost_callback=lambda cpu, n: lost.append((cpu, n)), page_cnt=1) as pb:
        emit_perf(obj.programs["emit_perf"], 1000, cpu=0, extra=64)
        pb.consume()
        # The kernel writes the PERF_RECORD_LOST notice with the next sample that fits.
        emit_perf(obj.programs["emit_perf"], 1, cpu=0, first_seq=1000)
        pb.consume()
        assert lost and all(cpu == 0 for cpu, _ in lost)
        assert pb.lost_samples == sum(n for _, n in lost)
    failed = counter(obj, "failed_outputs")
    assert failed > 0
    assert failed == pb.lost_samples
    assert len(got) + pb.lost_samples == 1001


def test_raw_buffer_is_the_mmapped_ring(obj: BPFObject) -> None:
    with PerfBuffer(obj.maps["events"], lambda cpu, d: None, page_cnt=2) as pb:
        for i in range(pb.buffer_cnt()):
            view = pb.buffer(i)
            assert len(view) == 4096 * 3  # control page + 2 data pages
            data_offset = int.from_bytes(view[1040:1048], "little")  # perf_event_mmap_page.data_offset
            assert data_offset == 4096
            del view
        with pytest.raises(IndexError):
            pb.buffer(pb.buffer_cnt())
        assert pb.buffer_fd(0) >= 0


def test_callback_exception_reaches_the_caller_and_the_rest_follows(obj: BPFObject) -> None:
    seen: list[int] = []

    def callback(cpu: int, data: memoryview) -> None:
        seen.append(PERF_SAMPLE.unpack_from(data)[0])
        if len(seen) == 2:
            raise ValueError("second sample")

    with PerfBuffer(obj.maps["events"], callback) as pb:
        emit_perf(obj.programs["emit_perf"], 6, cpu=0)
        with pytest.raises(ValueError, match="second sample"):
            pb.consume()
        assert pb.consume() == 4
    assert seen == list(range(6))


# -- one sample per wakeup: the latency path, handed over without a Batch ---------------------------

def _sample(data: bytes | memoryview) -> tuple[int, int, int]:
    """(seq, value, cpu) of a perf_sample."""
    seq, value, cpu, _ = PERF_SAMPLE.unpack_from(data)
    return seq, value, cpu


def test_one_sample_per_drain_keeps_the_callback_contract(obj: BPFObject) -> None:
    kept: list[tuple[int, memoryview]] = []
    cpus = online_cpus()
    with PerfBuffer(obj.maps["events"], lambda cpu, d: kept.append((cpu, d))) as pb:
        for seq in range(4):
            cpu = cpus[seq % len(cpus)]
            emit_perf(obj.programs["emit_perf"], 1, cpu=cpu, first_seq=seq, value=3 * seq)
            assert pb.poll(1) == 1
            assert pb.consume() == 0
    # The views outlive their callbacks and the buffer; 24 bytes + the kernel's padding (to 8 with the size).
    assert all(isinstance(v, memoryview) and v.readonly and len(v) == 28 for _, v in kept)
    assert [(cpu, _sample(v)) for cpu, v in kept] == [
        (cpus[s % len(cpus)], (s, 3 * s, cpus[s % len(cpus)])) for s in range(4)]


def test_one_sample_whose_callback_raises_is_delivered_once(obj: BPFObject) -> None:
    seen: list[int] = []

    def callback(cpu: int, data: memoryview) -> None:
        seen.append(_sample(data)[0])
        raise RuntimeError("boom")

    with PerfBuffer(obj.maps["events"], callback) as pb:
        emit_perf(obj.programs["emit_perf"], 1, cpu=0, first_seq=7)
        with pytest.raises(RuntimeError, match="boom"):
            pb.poll(1)
        assert pb.consume() == 0
    assert seen == [7]


@pytest.mark.parametrize("ret", [True, "stop", 1.5, -1])
def test_callback_return_values_are_ignored_one_sample_or_many(obj: BPFObject, ret: object) -> None:
    """PerfBuffer's contract (unlike RingBuffer's): a callback's return value is ignored, neither a
    stop nor a TypeError, on the one-sample path as on the batch path."""
    seen: list[int] = []

    def callback(cpu: int, data: memoryview) -> object:
        seen.append(_sample(data)[0])
        return ret

    with PerfBuffer(obj.maps["events"], callback) as pb:
        emit_perf(obj.programs["emit_perf"], 1, cpu=0, first_seq=0)
        assert pb.poll(1) == 1
        emit_perf(obj.programs["emit_perf"], 3, cpu=0, first_seq=1)
        assert pb.poll(1) == 3
        emit_perf(obj.programs["emit_perf"], 1, cpu=0, first_seq=4)
        assert pb.poll(1) == 1
    assert seen == [0, 1, 2, 3, 4]


def test_read_batch_of_one_sample(obj: BPFObject) -> None:
    cpu = online_cpus()[-1]
    with PerfBuffer(obj.maps["events"], lambda cpu, d: None) as pb:
        emit_perf(obj.programs["emit_perf"], 1, cpu=cpu, first_seq=42, value=9)
        batch = pb.read_batch(1.0)
        assert len(batch) == 1 and list(batch.tags) == [cpu] and list(batch.lost) == [0]
        assert batch[0].readonly and len(batch[0]) == 28
        assert _sample(batch[0]) == (42, 9, cpu)
        assert [_sample(v) for v in batch] == [(42, 9, cpu)]
        assert len(pb.read_batch(0)) == 0


@pytest.mark.parametrize("how", ["poll", "read_batch"])
def test_a_lost_notice_with_one_sample_reaches_the_lost_callback(obj: BPFObject, how: str) -> None:
    """A drain of a notice and a sample is not the one-sample case: both are handled, by poll or read_batch."""
    lost: list[tuple[int, int]] = []
    got: list[tuple[int, int]] = []
    with PerfBuffer(obj.maps["events"], lambda cpu, d: got.append((cpu, _sample(d)[0])),
                    lost_callback=lambda cpu, n: lost.append((cpu, n)), page_cnt=1) as pb:
        emit_perf(obj.programs["emit_perf"], 1000, cpu=0, extra=64)
        pb.consume()
        got.clear()
        # The kernel writes the PERF_RECORD_LOST notice with the next sample that fits.
        emit_perf(obj.programs["emit_perf"], 1, cpu=0, first_seq=5000)
        if how == "poll":
            assert pb.poll(1) == 2
        else:
            batch = pb.read_batch(1.0)
            got.extend((c, _sample(v)[0]) for c, v in zip(batch.tags, batch, strict=True))
        assert got == [(0, 5000)]
        assert len(lost) == 1 and lost[0][0] == 0 and lost[0][1] > 0
        assert pb.lost_samples == lost[0][1]


def test_close_wakes_a_blocked_poll(obj: BPFObject) -> None:
    pb = PerfBuffer(obj.maps["events"], lambda cpu, d: None)
    errors: list[BaseException] = []
    thread = threading.Thread(target=lambda: errors.append(_catch(lambda: pb.poll())))
    thread.start()
    time.sleep(0.05)
    pb.close()
    thread.join(60)
    assert not thread.is_alive() and isinstance(errors[0], ClosedError)
    pb.close()
    with pytest.raises(ClosedError):
        pb.buffer_cnt()


def _catch(fn: object) -> BaseException | None:
    try:
        fn()  # type: ignore[operator]
    except BaseException as e:
        return e
    return None


def test_wrong_map_type_and_bad_options(obj: BPFObject, bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["ringbuf"]) as ring:
        ring.load()
        with pytest.raises(TypeError, match="needs a perf_event_array map; map 'rb' is ringbuf"):
            PerfBuffer(ring.maps["rb"], lambda cpu, d: None)
    with pytest.raises(ValueError, match="page_cnt"):
        PerfBuffer(obj.maps["events"], lambda cpu, d: None, page_cnt=3)
    with pytest.raises(TypeError, match="lost_callback must be callable"):
        PerfBuffer(obj.maps["events"], lambda cpu, d: None, lost_callback=5)  # type: ignore[arg-type]
    assert lib.BPF_MAP_TYPE_PERF_EVENT_ARRAY == obj.maps["events"].type


def test_async_iteration_yields_cpu_and_sample(obj: BPFObject) -> None:
    async def scenario() -> list[tuple[int, int]]:
        pb = PerfBuffer(obj.maps["events"], lambda cpu, d: None)
        got: list[tuple[int, int]] = []

        async def consume() -> None:
            async for cpu, data in pb.events():
                got.append((cpu, PERF_SAMPLE.unpack_from(data)[0]))

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.01)
        emit_perf(obj.programs["emit_perf"], 4, cpu=0, first_seq=7)
        while len(got) < 4:
            await asyncio.sleep(0.01)
        pb.close()
        await asyncio.wait_for(task, 5)
        return got

    assert asyncio.run(scenario()) == [(0, 7), (0, 8), (0, 9), (0, 10)]


# --- the wait: the rings' own perf event fds, drained in the call that waited -----------------


def _waiting(target: Callable[[], None]) -> tuple[threading.Thread, list[BaseException | None]]:
    """``target`` in a thread, once that thread sleeps in epoll_wait; its exception (or None) when done."""
    errors: list[BaseException | None] = []
    thread = threading.Thread(target=lambda: errors.append(_catch(target)))
    thread.start()
    assert wait_until(lambda: thread.native_id is not None and blocked_in_epoll(thread.native_id))
    return thread, errors


def _seq(data: memoryview) -> int:
    return int(PERF_SAMPLE.unpack_from(data)[0])


@pytest.mark.parametrize("how", ["poll", "read_batch"])
def test_a_blocked_wait_wakes_for_a_sample_on_each_cpu(obj: BPFObject, how: str) -> None:
    # The wait set holds one perf event fd per CPU ring: a sample on any of them must wake it.
    got: list[tuple[int, int]] = []
    with PerfBuffer(obj.maps["events"], lambda cpu, d: got.append((cpu, _seq(d)))) as pb:
        for cpu in online_cpus():
            got.clear()

            def wait() -> None:
                if how == "poll":
                    pb.poll()
                else:
                    batch = pb.read_batch(None)
                    got.extend(zip(batch.tags, map(_seq, batch), strict=True))

            thread, errors = _waiting(wait)
            emit_perf(obj.programs["emit_perf"], 1, cpu=cpu, first_seq=100 + cpu)
            thread.join(60)
            assert not thread.is_alive(), f"a sample on CPU {cpu} did not wake a blocked {how}"
            assert errors == [None] and got == [(cpu, 100 + cpu)]


def test_a_blocked_wait_gets_samples_written_on_every_cpu_at_once(obj: BPFObject) -> None:
    cpus = online_cpus()
    got: list[tuple[int, int]] = []
    with PerfBuffer(obj.maps["events"], lambda cpu, d: None) as pb:
        def read_all() -> None:
            while len(got) < 3 * len(cpus):
                batch = pb.read_batch(None)
                got.extend(zip(batch.tags, map(_seq, batch), strict=True))

        thread, errors = _waiting(read_all)
        start = threading.Barrier(len(cpus))

        def emit(cpu: int) -> None:
            start.wait()
            emit_perf(obj.programs["emit_perf"], 3, cpu=cpu, first_seq=10 * cpu)

        writers = [threading.Thread(target=emit, args=(cpu,)) for cpu in cpus]
        for w in writers:
            w.start()
        for w in writers:
            w.join(60)
        thread.join(60)
        assert not thread.is_alive(), f"the reader is still waiting with {got}"
    assert errors == [None]
    assert sorted(got) == [(c, 10 * c + i) for c in cpus for i in range(3)]


def test_a_wakeup_taken_by_another_poll_does_not_strand_its_sample(obj: BPFObject) -> None:
    # A perf event fd reports each wakeup to one poll only. Take ring A's wakeup with a poll() of
    # its fd, as a foreign poller would: its sample must still come, with the next wakeup of any ring.
    cpus = online_cpus()
    first, last = cpus[0], cpus[-1]
    got: list[tuple[int, int]] = []
    with PerfBuffer(obj.maps["events"], lambda cpu, d: got.append((cpu, _seq(d)))) as pb:
        emit_perf(obj.programs["emit_perf"], 1, cpu=first, first_seq=1)
        p = select.poll()
        p.register(pb.buffer_fd(cpus.index(first)), select.POLLIN)
        assert p.poll(5)  # the wakeup is taken here
        thread, errors = _waiting(lambda: pb.poll())
        emit_perf(obj.programs["emit_perf"], 1, cpu=last, first_seq=2)
        thread.join(60)
        assert not thread.is_alive() and errors == [None]
        while len(got) < 2:  # on one CPU both samples come with the one wakeup; else maybe in two polls
            pb.poll(1)
    assert sorted(got, key=lambda g: g[1]) == [(first, 1), (last, 2)]


def test_the_wait_watches_the_perf_fds_directly_not_libbpfs_epoll_set(obj: BPFObject) -> None:
    # An epoll set inside another costs a wakeup hop on every sample, and libbpf's set would take
    # wakeups from ours (a perf fd reports each to one poll): while a PerfBuffer waits, no epoll set
    # watches libbpf's; the set that holds every ring's fd is the reader's own.
    pb = PerfBuffer(obj.maps["events"], lambda cpu, d: None)
    thread, errors = _waiting(lambda: pb.poll())
    try:
        sets = epoll_sets()
        libbpf_set = pb.epoll_fd()
        assert libbpf_set in sets
        assert not [fd for fd, targets in sets.items() if libbpf_set in targets]
        rings = {pb.buffer_fd(i) for i in range(pb.buffer_cnt())}
        assert rings <= set(sets[libbpf_set])
        assert [fd for fd, targets in sets.items() if fd != libbpf_set and rings <= set(targets)]
    finally:
        pb.close()
        thread.join(60)
    assert not thread.is_alive() and isinstance(errors[0], ClosedError)
