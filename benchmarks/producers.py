"""Build the producer and the C consumer, and run producer programs with BPF_PROG_TEST_RUN.

The producer (bpf/producer.bpf.c) emits ``count`` events of ``size`` bytes per
trigger; each starts with a u64 sequence number and a u64 bpf_ktime_get_ns().
:class:`Trigger` works on a program fd through libbpf's own
``bpf_prog_test_run_opts`` (``pylibbpf.lib``), so it drives bcc's programs too.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
import traceback
from pathlib import Path

from pylibbpf.features import online_cpus  # one perf ring per online CPU

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "benchmarks"
BUILD = HERE / "build"
LIBBPF = ROOT / "vendor" / "libbpf" / "build" / "install"
PRODUCER_OBJ = BUILD / "producer.bpf.o"
BENCH_C = BUILD / "bench_c"
MEMCPY_C = BUILD / "memcpy_bw"

MERGE_SOURCES = ("plb_merge", "plb_merge_runs", "plb_perfring", "plb_ringbuf")
PRODUCE_ARGS = struct.Struct("<4Q")   # count, first_seq, size, flags (struct produce_args)
BATCH_WAKEUP = 1                      # PRODUCE_BATCH_WAKEUP: one ring-buffer wakeup per trigger
STREAM_SHIFT = 48


def build() -> None:
    """Compile the BPF producer (tools/build_bpf.py) and the C consumer (when their sources are newer)."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import build_bpf
    finally:
        sys.path.pop(0)
    build_bpf.build(HERE / "bpf", BUILD)
    src = HERE / "c" / "bench_c.c"
    lib = LIBBPF / "lib" / "libbpf.a"
    csrc = ROOT / "csrc"
    shim = [csrc / f"{name}.c" for name in MERGE_SOURCES]   # perfmerge: the ordered merge's C core
    inputs = [src, lib, *shim, *csrc.glob("*.h")]
    if not BENCH_C.exists() or BENCH_C.stat().st_mtime < max(p.stat().st_mtime for p in inputs):
        subprocess.run(["gcc", "-O2", "-flto=auto", "-Wall", "-Wextra", f"-I{LIBBPF / 'include'}", f"-I{csrc}",
                        str(src), *map(str, shim), str(lib), "-lelf", "-lz", "-o", str(BENCH_C)], check=True)
    copy_src = HERE / "c" / "memcpy_bw.c"
    if not MEMCPY_C.exists() or MEMCPY_C.stat().st_mtime < copy_src.stat().st_mtime:
        subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", str(copy_src), "-o", str(MEMCPY_C)], check=True)


def pin(cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})


class Trigger:
    """Runs a producer program: ``trigger(count, cpu)`` -> events emitted (fewer when the ring is full).

    ``per_cpu`` producers (perf) run with ``cpu=`` and number each CPU's events
    as their own stream; others run where the caller runs, as stream 0.
    ``max_chunk`` bounds one trigger (bcc's bounded loop).
    """

    def __init__(self, prog_fd: int, size: int, *, per_cpu: bool, max_chunk: int = 1 << 22) -> None:
        from pylibbpf import ffi, lib

        self._lib, self.fd, self.size, self.per_cpu, self.max_chunk = lib, prog_fd, size, per_cpu, max_chunk
        self._ctx = ffi.new("char[]", PRODUCE_ARGS.size)
        self._ctx_buf = ffi.buffer(self._ctx)
        self._opts = ffi.new("struct bpf_test_run_opts *")
        self._opts.sz = ffi.sizeof("struct bpf_test_run_opts")
        self._opts.ctx_in = self._ctx
        self._opts.ctx_size_in = PRODUCE_ARGS.size
        self.cpus = online_cpus() if per_cpu else [0]
        self.next = dict.fromkeys(self.cpus, 0)

    def __call__(self, count: int, cpu: int = 0, flags: int = BATCH_WAKEUP) -> int:
        PRODUCE_ARGS.pack_into(self._ctx_buf, 0, count, cpu << STREAM_SHIFT | self.next[cpu], self.size, flags)
        if self.per_cpu:
            self._opts.flags = self._lib.BPF_F_TEST_RUN_ON_CPU
            self._opts.cpu = cpu
        err = self._lib.bpf_prog_test_run_opts(self.fd, self._opts)
        if err:
            raise OSError(-err, f"bpf_prog_test_run_opts: {os.strerror(-err)}")
        got = int(self._opts.retval)
        if got > count:   # a negative retval: the program refused the arguments
            raise ValueError(f"producer refused count={count} size={self.size}")
        self.next[cpu] += got
        return got

    def fill(self, total: int, interleave: int = 0) -> int:
        """Emit ``total`` events split over the streams, until done or a ring is full; returns how many.

        ``interleave=K``: round-robin over the CPUs, K events per trigger, so
        the rings' timestamps interleave; 0: one CPU's share after the other.
        """
        share = total // len(self.cpus)
        step = min(interleave or share, self.max_chunk)
        done = 0
        left = dict.fromkeys(self.cpus, share)
        while any(left.values()):
            for cpu in self.cpus:
                want = min(left[cpu], step)
                if not want:
                    continue
                got = self(want, cpu)
                done += got
                left[cpu] = 0 if got < want else left[cpu] - got   # a full ring ends that stream's fill
        return done

    def produce(self, total: int, *, chunk: int, rate: float = 0.0) -> None:
        """Emit ``total`` events: chunks back to back, or one event per trigger at ``rate`` per second.

        A full ring refuses part of a chunk: the rest is retried after 50 us, so a
        slow consumer throttles the producer instead of losing events.
        """
        chunk = min(chunk, self.max_chunk)
        period = 1.0 / rate if rate else 0.0
        flags = 0 if rate else BATCH_WAKEUP   # paced events use the kernel's adaptive wakeup
        deadline, done, i = time.perf_counter(), 0, 0
        while done < total:
            if period:
                deadline += period
                delay = deadline - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            count = min(chunk, total - done)
            got = self(count, self.cpus[i % len(self.cpus)], flags)
            done += got
            i += 1
            if got < count:
                time.sleep(50e-6)

    def fork(self, total: int, *, chunk: int, rate: float = 0.0) -> tuple[int, int]:
        """Run :meth:`produce` in a child process pinned to the last CPU: (pid, pipe fd).

        When done the child writes two ``time.perf_counter()`` readings (CLOCK_MONOTONIC,
        so comparable across processes) to the pipe: when it started producing (after
        the fork and the pinning) and when it finished.
        """
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.close(rfd)
                pin(online_cpus()[-1])
                start = time.perf_counter()
                self.produce(total, chunk=chunk, rate=rate)
                os.write(wfd, f"{start!r} {time.perf_counter()!r}".encode())
            except BaseException:
                traceback.print_exc()
                code = 1
            os._exit(code)
        os.close(wfd)
        return pid, rfd
