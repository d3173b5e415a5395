"""The benchmark's sequence check (benchmarks/harness.py) on synthetic arrays, no kernel needed.

The check is what lets a benchmark row claim no event was lost, repeated or
reordered: its vectorised array path (``walk_array``, what the numpy, read_into,
Arrow and ordered rows use) must count exactly what the per-event loop
(``walk_rows``, the callback rows' logic) counts, on any sequence.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.harness import SMALL_ARRAY, STREAM_SHIFT, SeqCheck

DTYPE = np.dtype([("seq", "<u8"), ("ts", "<u8"), ("pad", "V16")])


def rows(seqs: list[int]) -> np.ndarray:
    arr = np.zeros(len(seqs), DTYPE)
    arr["seq"] = np.array(seqs, dtype=np.uint64)
    return arr


def state(check: SeqCheck) -> tuple[int, int, int, int, dict[int, int]]:
    nexts = dict(check.next)
    nexts[check.expect >> STREAM_SHIFT] = check.expect   # where the current stream stands
    return check.received, check.gaps, check.seq_errors, check.expect, nexts


def both(chunks: list[list[int]]) -> tuple[SeqCheck, SeqCheck]:
    by_array, by_loop = SeqCheck(), SeqCheck()
    for chunk in chunks:
        assert by_array.walk_array(rows(chunk)) == len(chunk)
        by_loop.walk_rows(chunk, [0] * len(chunk))
    return by_array, by_loop


def cut_into(seqs: list[int], cuts: list[int]) -> list[list[int]]:
    """``seqs`` as the arrays a reader would hand out: pieces of the lengths in ``cuts``, then the rest."""
    chunks, at = [], 0
    for cut in [*cuts, len(seqs)]:
        if at < len(seqs):
            chunks.append(seqs[at:at + cut])
            at += cut
    return chunks


def run_of(stream: int, start: int, n: int) -> list[int]:
    return [(stream << STREAM_SHIFT) + start + i for i in range(n)]


def test_consecutive_arrays_count_without_errors() -> None:
    n = 4 * SMALL_ARRAY
    by_array, by_loop = both([run_of(0, 0, n), run_of(0, n, n), run_of(0, 2 * n, 1)])
    assert state(by_array) == state(by_loop) == (2 * n + 1, 0, 0, 2 * n + 1, {0: 2 * n + 1})


def test_a_gap_a_repeat_and_a_step_back_are_counted() -> None:
    n = 4 * SMALL_ARRAY
    gap = run_of(0, 0, n) + run_of(0, n + 5, n)           # 5 missing in the middle
    repeat = [*run_of(0, 2 * n + 5, n), 2 * n + 5 + n - 1]   # the last one again
    start_late = run_of(0, 3 * n + 9, n)                  # the array's first is past the expected
    by_array, by_loop = both([gap, repeat, start_late])
    assert state(by_array) == state(by_loop)
    assert by_array.gaps == 5 + 4 and by_array.seq_errors == 1


def test_an_array_whose_first_and_last_fit_but_middle_does_not() -> None:
    # last - first == n - 1 with a swapped pair inside: only the per-step compare sees it.
    seqs = run_of(0, 0, 4 * SMALL_ARRAY)
    seqs[7], seqs[8] = seqs[8], seqs[7]
    by_array, by_loop = both([seqs])
    assert state(by_array) == state(by_loop)
    assert by_array.seq_errors == 1


def test_interleaved_streams_are_each_checked() -> None:
    a, b = run_of(0, 0, 40), run_of(1, 0, 40)
    mixed = [s for pair in zip(a, b) for s in pair]
    by_array, by_loop = both([mixed, run_of(1, 40, 3 * SMALL_ARRAY)])
    assert state(by_array) == state(by_loop)
    assert (by_array.gaps, by_array.seq_errors) == (0, 0)


seq_steps = st.lists(st.sampled_from([1, 1, 1, 1, 0, 2, 3, -1, -5]), min_size=1, max_size=120)


@settings(max_examples=300, deadline=None)
@given(steps=seq_steps, cuts=st.lists(st.integers(1, 60), max_size=6),
       streams=st.lists(st.sampled_from([0, 1, 2, 1 << 13]), min_size=1, max_size=120))
def test_array_path_counts_what_the_loop_counts(steps: list[int], cuts: list[int], streams: list[int]) -> None:
    per_stream: dict[int, int] = {}
    seqs = []
    for i, step in enumerate(steps):
        stream = streams[i % len(streams)]
        at = max(0, per_stream.get(stream, -1) + step)
        per_stream[stream] = at
        seqs.append((stream << STREAM_SHIFT) + at)
    by_array, by_loop = both(cut_into(seqs, cuts))
    assert state(by_array) == state(by_loop)


def test_streams_in_blocks_are_checked_run_by_run() -> None:
    # An ordered merge's batch: one CPU's records, then the next CPU's, then the first's again.
    n = 4 * SMALL_ARRAY
    blocks = run_of(0, 0, n) + run_of(1, 0, n) + run_of(0, n, n)
    by_array, by_loop = both([blocks, run_of(1, n, n) + run_of(0, 2 * n, 3)])
    assert state(by_array) == state(by_loop) == (4 * n + 3, 0, 0, 2 * n + 3,
                                                {0: 2 * n + 3, 1: (1 << STREAM_SHIFT) + 2 * n})
    # A block that starts past where its stream stands, or before it (a repeat): the general
    # path counts them exactly as the loop does.
    gap = run_of(1, 2 * n + 2, n) + run_of(0, 2 * n + 3, n)
    repeat = run_of(1, 3 * n + 1, n) + run_of(0, 3 * n + 3, n)
    by_array, by_loop = both([blocks, run_of(1, n, n), gap, repeat])
    assert state(by_array) == state(by_loop)
    assert (by_array.gaps, by_array.seq_errors) == (2 + 3, 1)


@settings(max_examples=300, deadline=None)
@given(blocks=st.lists(st.tuples(st.sampled_from([0, 1, 2]), st.integers(1, 40),
                                 st.sampled_from([0, 0, 0, 0, 1, -1, 3])), min_size=1, max_size=12),
       cuts=st.lists(st.integers(1, 200), max_size=4))
def test_blocks_of_streams_count_what_the_loop_counts(blocks: list[tuple[int, int, int]], cuts: list[int]) -> None:
    # Each block: a stream, a length, and where it starts against where that stream stands
    # (0: right there; else a gap or a step back).
    at: dict[int, int] = {}
    seqs = []
    for stream, length, skew in blocks:
        first = max(0, at.get(stream, 0) + skew)
        seqs += run_of(stream, first, length)
        at[stream] = first + length
    by_array, by_loop = both(cut_into(seqs, cuts))
    assert state(by_array) == state(by_loop)


def drain_reader(check: SeqCheck) -> Any:
    """A Reader over a list standing in for a ring: ``fill`` appends the next seqs, a step takes 100."""
    from types import SimpleNamespace

    from benchmarks.harness import Reader

    pending: list[int] = []

    def fill(n: int) -> int:
        pending.extend(range(check.expect + len(pending), check.expect + len(pending) + n))
        return n

    def step(timeout_ms: int) -> int:
        got = check.walk_array(rows(pending[:100]))
        del pending[:100]
        return got

    trigger = SimpleNamespace(fill=fill)   # a Trigger's fill, no kernel
    return Reader(step=step, trigger=cast(Any, trigger), failures=lambda: 0, close=lambda: None)


def test_a_drain_keeps_each_rounds_time_and_faults() -> None:
    """run_drain's repetition keeps a time and a fault count per fill-and-drain (to tell a slow
    warm-up from a slow process), one per round, and the time adds up to wall_s."""
    from benchmarks.harness import run_drain

    check = SeqCheck()
    out = run_drain(drain_reader(check), check, events=1000, min_time_s=10.0, max_rounds=3, warmup_rounds=0)
    assert out["rounds"] == 3 and check.received == out["produced"] == 3000 and check.gaps == 0
    assert out["timed_events"] == 3000 and out["warmup_s"] == out["warmup_faults"] == []
    assert len(out["round_s"]) == len(out["round_faults"]) == 3
    assert abs(sum(out["round_s"]) - out["wall_s"]) < 1e-9 and all(f >= 0 for f in out["round_faults"])


def test_a_drain_times_its_rounds_after_the_warm_up() -> None:
    """The warm-up rounds are filled and drained like the others but neither timed nor counted in
    the rate: timed_events is the timed rounds' events, and the rate helper divides those."""
    from benchmarks.__main__ import events_per_s
    from benchmarks.harness import run_drain, timed_events

    check = SeqCheck()
    out = run_drain(drain_reader(check), check, events=1000, min_time_s=10.0, max_rounds=3, warmup_rounds=2)
    assert check.received == out["produced"] == 5000 and check.gaps == 0
    assert out["rounds"] == 3 and out["timed_events"] == 3000 and timed_events(out | {"received": 5000}) == 3000
    assert len(out["warmup_s"]) == len(out["warmup_faults"]) == 2 and len(out["round_s"]) == 3
    assert events_per_s(out | {"received": 5000}) == 3000 / out["wall_s"]
    # bench_c's steady and latency runs carry no timed_events: every event received counts
    assert timed_events({"received": 7}) == 7


def test_a_steady_run_is_timed_from_the_producers_start() -> None:
    """run_beside times from the start the forked producer reports, not from before the fork:
    a fork that takes 0.2 s (a large parent) is not the consumer's time."""
    import os
    import time
    from types import SimpleNamespace

    from benchmarks.harness import Reader, run_beside

    check = SeqCheck()
    started: list[float] = []

    def fork(total: int, *, chunk: int, rate: float = 0.0) -> tuple[int, int]:
        time.sleep(0.2)                    # the fork and the child's pinning, slow
        started.append(time.perf_counter())
        rfd, wfd = os.pipe()
        os.write(wfd, f"{started[0]!r} {started[0] + 0.001!r}".encode())
        os.close(wfd)
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        return pid, rfd

    def step(timeout_ms: int) -> int:
        return check.add(1000) if started and not check.received else 0

    trigger = SimpleNamespace(fork=fork)
    reader = Reader(step=step, trigger=cast(Any, trigger), failures=lambda: 0, close=lambda: None)
    t_before = time.perf_counter()
    out = run_beside(reader, check, 1000, chunk=100)
    assert check.received == 1000
    assert out["producer_s"] is not None and abs(out["producer_s"] - 0.001) < 1e-6
    # timed from the reported start: the 0.2 s before it are not in wall_s
    assert 0 <= out["wall_s"] < time.perf_counter() - t_before - 0.19
