"""The measurement engine shared by every Python consumer (pylibbpf and bcc).

A consumer is a :class:`Reader`: ``step(timeout_ms)`` takes whatever it can
(waiting up to ``timeout_ms``; 0 means "do not wait") and feeds each event to a
:class:`SeqCheck`, which verifies the sequence numbers and counts what arrived.
The run functions below drive a Reader through the three modes and return the
raw figures; ``__main__`` turns them into the published rows.
"""

from __future__ import annotations

import os
import resource
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .producers import Trigger

U64 = struct.Struct("<Q")
HEAD = struct.Struct("<QQ")   # seq, ts: the head of every event
SMALL_ARRAY = 16              # walk_array checks arrays up to this length in a Python loop
MANY_STREAMS = 1 << 12        # walk_array counts streams below this in an array, sorts the others
MANY_RUNS = 64                # walk_array checks arrays of fewer runs (streams in blocks) run by run
STREAM_SHIFT = 48             # seq = stream << 48 | n; a stream is a producer CPU (perf) or the one ring


def now_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class SeqCheck:
    """Checks that every stream's sequence numbers arrive consecutively; records latencies if asked.

    The hot paths keep the next expected seq in a local and call :meth:`jump`
    only when an event is not the expected one (a new stream, a gap, a repeat).
    """

    def __init__(self, latency: bool = False) -> None:
        self.latency = latency
        self.next: dict[int, int] = {}   # stream -> next expected seq, saved when the stream changes
        self.expect = 0                  # the walk paths' expected seq
        self.gaps = 0                    # events skipped over (missing in the middle)
        self.seq_errors = 0              # events repeated or out of order
        self.lat_ns: list[int] = []
        self.unchecked = False           # counted through add(): no per-event sequence check
        self._n = 0
        self._counters: list[Callable[[], int]] = []
        self._steps: Any = ()                # consecutive()'s and runs()' scratch columns, grown as needed
        self._ones: Any = ()

    @property
    def received(self) -> int:
        # Read after every step of every consumer: a plain loop, no generator.
        n = self._n
        for count in self._counters:
            n += count()
        return n

    def add(self, n: int) -> int:
        """Count ``n`` events that were not checked one by one (the empty-callback rows); returns ``n``."""
        self._n += n
        self.unchecked = True
        return n

    def count(self, counter: Callable[[], int]) -> None:
        """Add a consumer's own event counter (a closure's count) to ``received``."""
        self._counters.append(counter)

    def jump(self, expect: int, seq: int) -> int:
        """Slow path: leave the stream of ``expect``, check ``seq`` against its own stream; the next expected."""
        self.next[expect >> STREAM_SHIFT] = expect
        stream = seq >> STREAM_SHIFT
        want = self.next.get(stream, stream << STREAM_SHIFT)
        if seq > want:
            self.gaps += seq - want
        elif seq < want:
            self.seq_errors += 1
        return seq + 1

    def on_ring(self) -> Callable[[Any], int]:
        """A per-event callback ``cb(data)`` (returns 0, as libbpf-style callbacks may)."""
        unpack, head, jump, lat, clock = U64.unpack_from, HEAD.unpack_from, self.jump, self.lat_ns, now_ns
        expect = n = 0

        def cb(data: Any) -> int:
            nonlocal expect, n
            seq = unpack(data)[0]
            expect = seq + 1 if seq == expect else jump(expect, seq)
            n += 1
            return 0

        def cb_latency(data: Any) -> int:
            nonlocal expect, n
            t = clock()
            seq, ts = head(data)
            lat.append(t - ts)
            expect = seq + 1 if seq == expect else jump(expect, seq)
            n += 1
            return 0

        self.count(lambda: n)
        return cb_latency if self.latency else cb

    def on_perf(self) -> Callable[[int, Any], None]:
        """A per-sample perf callback ``cb(cpu, data)``: the same work as :meth:`on_ring`, no extra call."""
        unpack, head, jump, lat, clock = U64.unpack_from, HEAD.unpack_from, self.jump, self.lat_ns, now_ns
        expect = n = 0

        def cb(cpu: int, data: Any) -> None:
            nonlocal expect, n
            seq = unpack(data)[0]
            expect = seq + 1 if seq == expect else jump(expect, seq)
            n += 1

        def cb_latency(cpu: int, data: Any) -> None:
            nonlocal expect, n
            t = clock()
            seq, ts = head(data)
            lat.append(t - ts)
            expect = seq + 1 if seq == expect else jump(expect, seq)
            n += 1

        self.count(lambda: n)
        return cb_latency if self.latency else cb

    def walk(self, views: Iterable[Any], count: int) -> int:
        """Check ``count`` events given as buffers (a Batch's memoryviews) in a plain loop."""
        unpack, expect = U64.unpack_from, self.expect
        if self.latency:
            t = now_ns()
            for view in views:
                seq, ts = HEAD.unpack_from(view)
                self.lat_ns.append(t - ts)
                expect = seq + 1 if seq == expect else self.jump(expect, seq)
        else:
            for view in views:
                seq = unpack(view)[0]
                expect = seq + 1 if seq == expect else self.jump(expect, seq)
        self.expect = expect
        self._n += count
        return count

    def walk_array(self, arr: Any) -> int:
        """Check a numpy structured array with ``seq``/``ts`` fields, vectorised per stream.

        A Python loop runs only over a stream whose numbers are not consecutive.
        """
        import numpy as np

        n = len(arr)
        if not n:
            return 0
        if n <= SMALL_ARRAY:
            # One or a few records per wakeup (latency runs): a dozen numpy calls would cost
            # ~15 us here, more than the loop; the CPU a wakeup costs delays the next one
            # on a shared CPU, so the check must not outweigh the reader it checks.
            # The clock is read first: the array is in hand now; taking the columns out
            # for the check is the check's time, not the reader's.
            t = now_ns() if self.latency else 0
            return self.walk_rows(arr["seq"].tolist(), arr["ts"].tolist(), t)
        if self.latency:
            t = now_ns()
            self.lat_ns.extend((t - arr["ts"].astype(np.int64)).tolist())
        seqs = arr["seq"]
        self.next[self.expect >> STREAM_SHIFT] = self.expect
        if self.consecutive(seqs) or self.runs(seqs):
            self._n += n
            return n
        streams = seqs >> np.uint64(STREAM_SHIFT)
        if int(streams.max()) < MANY_STREAMS:
            # The streams present, from a count per stream: np.unique sorts the column (~29 ns an
            # event when two CPUs' records alternate, more than the merge that produced them).
            ids = np.flatnonzero(np.bincount(streams.astype(np.intp))).tolist()
        else:
            ids = np.unique(streams).tolist()
        one = len(ids) == 1
        for stream in ids:
            sub = seqs if one else seqs[streams == stream]
            want = self.next.get(stream, stream << STREAM_SHIFT)
            if int(sub[0]) == want and (len(sub) == 1 or bool((np.diff(sub) == 1).all())):
                self.next[stream] = int(sub[-1]) + 1
            else:
                expect = want
                for seq in sub.tolist():
                    expect = seq + 1 if seq == expect else self.jump(expect, seq)
                self.next[stream] = expect
        self.expect = self.next[int(streams[-1])]
        self._n += n
        return n

    def consecutive(self, seqs: Any) -> bool:
        """The usual array of one stream, every seq one more than the one before and the first the
        one expected: record where the stream stands and return True. False leaves everything as it
        was, for :meth:`walk_array`'s general path (several streams, a gap, a repeat).

        As strict as the C consumer's per-event compare (every seq is checked), in three passes
        over the column into memory made once: numpy's ``diff``/``unique`` and a temporary per
        step allocate and free a column-sized array each (~11 ns per 32-byte event in all, more
        than the C drain; ~2 ns this way).
        """
        import numpy as np

        n = len(seqs)
        first, last = int(seqs[0]), int(seqs[-1])
        stream = first >> STREAM_SHIFT
        if (first != self.next.get(stream, stream << STREAM_SHIFT) or last - first != n - 1
                or last >> STREAM_SHIFT != stream):
            return False
        if n > 1:
            steps, ones = self.scratch(n - 1)
            np.subtract(seqs[1:], seqs[:-1], out=steps)   # u64: a step back wraps to a huge step
            if not np.equal(steps, 1, out=ones).all():
                return False
        self.next[stream] = self.expect = last + 1
        return True

    def runs(self, seqs: Any) -> bool:
        """An array of a few runs (fewer than :data:`MANY_RUNS`), each consecutive and starting where
        its stream stands: an ordered merge's batch that passes from one CPU's records to the next's.
        Records where each stream stands and returns True; False leaves everything as it was.

        Every seq is compared, in the three passes of :meth:`consecutive` plus a Python step per
        run, where the general path masks the column once per stream.
        """
        import numpy as np

        n = len(seqs)
        steps, ones = self.scratch(n - 1)
        np.subtract(seqs[1:], seqs[:-1], out=steps)
        breaks = np.flatnonzero(np.not_equal(steps, 1, out=ones))
        if len(breaks) >= MANY_RUNS:
            return False
        nexts: dict[int, int] = {}
        begin = 0
        for end in [*(breaks + 1).tolist(), n]:   # each run: seqs[begin:end], every step in it 1
            first, last = int(seqs[begin]), int(seqs[end - 1])
            stream = first >> STREAM_SHIFT
            if first != nexts.get(stream, self.next.get(stream, stream << STREAM_SHIFT)) \
                    or last >> STREAM_SHIFT != stream:
                return False
            nexts[stream] = last + 1
            begin = end
        self.next.update(nexts)
        self.expect = nexts[stream]   # the last run's stream is where the check now stands
        return True

    def scratch(self, n: int) -> tuple[Any, Any]:
        """Columns of ``n`` u64 steps and ``n`` bools, from memory kept across calls."""
        import numpy as np

        if len(self._steps) < n:
            self._steps = np.empty(max(n, 2 * len(self._steps)), np.uint64)
            self._ones = np.empty(len(self._steps), np.bool_)
        return self._steps[:n], self._ones[:n]

    def walk_rows(self, seqs: list[int], stamps: list[int], t: int = 0) -> int:
        """Check records given as (seq, ts) columns of Python ints, in a plain loop, as :meth:`walk` does.

        ``t``: when the records were in hand (CLOCK_MONOTONIC ns); 0: now.
        """
        expect = self.expect
        if self.latency:
            t = t or now_ns()
            self.lat_ns.extend(t - ts for ts in stamps)
        for seq in seqs:
            expect = seq + 1 if seq == expect else self.jump(expect, seq)
        self.expect = expect
        self._n += len(seqs)
        return len(seqs)

    def warm_up(self, dtype: Any) -> None:
        """Run :meth:`walk_array`'s numpy paths once on a throwaway check, before the measurement.

        numpy imports parts of itself on first use (``np.unique`` took ~30 ms
        here): without this, the first batch of a latency run waited for it, and
        the records queued meanwhile made the p99.
        """
        import numpy as np

        arr = np.zeros(4, dtype=dtype)
        arr["seq"] = [0, 1 << STREAM_SHIFT, 1, (1 << STREAM_SHIFT) + 1]
        SeqCheck(latency=self.latency).walk_array(arr)

    def latency_us(self) -> tuple[float | None, float | None]:
        """(p50, p99) in microseconds, or (None, None) without samples."""
        if not self.lat_ns:
            return None, None
        lat = sorted(self.lat_ns)
        return lat[len(lat) // 2] / 1e3, lat[len(lat) * 99 // 100] / 1e3


@dataclass
class Reader:
    """One consumer under test: how to take events, how to trigger its producer, how to clean up."""

    step: Callable[[int], object]      # take what is there, waiting up to timeout_ms (0: do not wait)
    trigger: Trigger                   # runs this consumer's producer program
    failures: Callable[[], int]        # the producer's failed reserves/outputs so far
    close: Callable[[], None]
    start: Callable[[], None] | None = None   # consumers with their own thread start here


def timed_events(raw: dict[str, Any]) -> int:
    """The events a run's rate counts: those of its timed rounds (a drain's warm-up rounds are
    not timed, see :func:`run_drain`; bench_c reports the same field), else all it received."""
    return int(raw.get("timed_events", raw["received"]))


def run_drain(reader: Reader, check: SeqCheck, events: int, min_time_s: float, max_rounds: int,
              settle_s: float = 0.0, warmup_rounds: int = 1) -> dict[str, Any]:
    """Fill the ring(s) with ``events`` events, then time consuming them; repeat until ``min_time_s`` of consuming.

    ``warmup_rounds``: rounds filled and drained first, untimed (their time and
    faults are kept as ``warmup_s``/``warmup_faults``). A process's first fill-and-drain
    pays once for what later ones reuse: the first touch of the reader's
    memory (its blocks, a huge page), numpy's and pyarrow's first calls. With
    three timed rounds, as a Python perf row gets (a perf ring fills slowly), that
    one-off weighed a third of the rate (ordered numpy 99 vs 123 M ev/s at 32 B
    with 20 rounds) while the C consumer spread it over up to 200 rounds: every
    drain row, C's too (bench_c), now times steady rounds only.

    ``settle_s``: a pause between the fill and the timing. An ordered reader may
    hand out a record only once every ring's frontier has passed it, which for
    the newest records is ``window_ms`` after they were written; without the
    pause a drain round would time that wait (a fixed 5 ms) rather than the
    reader, and the rate would be the event count over the window.
    """
    produced = rounds = timed = 0
    wall = cpu = 0.0
    round_s: list[float] = []      # each round's time and minor page faults, kept in the JSON: a slow
    round_faults: list[int] = []   # repetition shows whether one round or every round was slow
    warmup_s: list[float] = []
    warmup_faults: list[int] = []
    fail0 = reader.failures()
    started = False
    while True:
        produced += reader.trigger.fill(events)
        if settle_s:
            time.sleep(settle_s)
        faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        before = check.received
        t0, c0 = time.perf_counter(), time.process_time()
        if reader.start and not started:
            reader.start()
            started = True
        last, last_t = check.received, time.perf_counter()
        while check.received < produced:
            reader.step(0)
            got = check.received
            if got != last:
                last, last_t = got, time.perf_counter()
            elif time.perf_counter() - last_t > 1.0:
                break   # nothing for 1 s with events outstanding: they are missing
        took = time.perf_counter() - t0
        took_cpu = time.process_time() - c0
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
        if len(warmup_s) < warmup_rounds and check.received >= produced:
            warmup_s.append(took)
            warmup_faults.append(faults)
            continue
        wall += took
        cpu += took_cpu
        timed += check.received - before
        round_s.append(took)
        round_faults.append(faults)
        rounds += 1
        if check.received < produced or wall >= min_time_s or rounds >= max_rounds:
            break
    return {"produced": produced, "wall_s": wall, "cpu_s": cpu, "rounds": rounds, "timed_events": timed,
            "producer_full": reader.failures() - fail0, "round_s": round_s, "round_faults": round_faults,
            "warmup_s": warmup_s, "warmup_faults": warmup_faults}


def run_beside(reader: Reader, check: SeqCheck, events: int, *, chunk: int, rate: float = 0.0) -> dict[str, Any]:
    """A forked producer emits ``events`` (in chunks, or one per trigger at ``rate``/s) while we consume.

    The rate is events over the time from the producer's start to the last
    event consumed; ``producer_s`` is when the producer finished (a consumer
    done right after it kept up: its rate is the producer's). The start is the
    child's own clock reading once forked and pinned, not the parent's before
    the fork: forking a process that maps its rings and blocks took ~9 ms here,
    7% of a 140 ms run of pylibbpf's callback and 3% of bcc's slower one. A run ends when
    everything arrived, or when the producer has exited and nothing came for
    2 s (the rest is missing).
    """
    fail0 = reader.failures()
    if reader.start:
        reader.start()
    t0, c0 = time.perf_counter(), time.process_time()
    pid, done_fd = reader.trigger.fork(events, chunk=chunk, rate=rate)
    t_last = idle_since = None
    got = check.received
    try:
        # The same loop for every Python consumer (bcc's too): one count per step, as little
        # as possible between one wait and the next (CPU per wakeup delays the next wakeup).
        while got < events:
            before = got
            reader.step(10)
            now = time.perf_counter()
            got = check.received
            if got != before:
                t_last, idle_since = now, None
            elif idle_since is None:
                idle_since = now
            elif now - idle_since > 2.0 and os.waitpid(pid, os.WNOHANG)[0] == pid:
                pid = 0
                break
        cpu = time.process_time() - c0
    finally:
        if pid:
            os.waitpid(pid, 0)
        with os.fdopen(done_fd, "rb") as f:
            producer_times = f.read().split()
    producer_s = None
    if len(producer_times) == 2:
        t0 = float(producer_times[0])   # the producer's start (Trigger.fork)
        producer_s = float(producer_times[1]) - t0
    wall = max(0.0, (t_last or time.perf_counter()) - t0)
    return {"produced": events, "wall_s": wall, "cpu_s": cpu, "rounds": 1, "producer_s": producer_s,
            "producer_full": reader.failures() - fail0}


def measure(reader: Reader, check: SeqCheck, mode: str, params: dict[str, Any]) -> dict[str, Any]:
    """Run one mode; the result carries what arrived and the sequence check's findings."""
    try:
        if mode == "drain":
            out = run_drain(reader, check, params["events"], params["min_time_s"], params["max_rounds"],
                            params.get("settle_s", 0.0), params.get("warmup_rounds", 1))
        elif mode == "steady":
            out = run_beside(reader, check, params["events"], chunk=params["chunk"])
        else:
            out = run_beside(reader, check, params["events"], chunk=1, rate=params["rate"])
    finally:
        reader.close()
    p50, p99 = check.latency_us()
    out.update(received=check.received, gaps=check.gaps, seq_errors=check.seq_errors, p50_us=p50, p99_us=p99)
    if check.unchecked:
        out.setdefault("notes", []).append("empty callback: counted from the consumer's return value, "
                                           "no per-event sequence check")
    return out
