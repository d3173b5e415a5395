"""Keep every online CPU busy: one busy-looping process per CPU, until stopped.

Used by ``make test-loaded`` to run the test suite beside a CPU hog, the way a
loaded machine runs it. SIGTERM or SIGINT ends the hog and its processes; so
does the end of the process that started the hog (a killed ``make`` leaves
nothing spinning), and a busy process ends within a second of the hog::

    python tools/cpu_hog.py [--procs N]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import sys
import time
import types


def _spin(parent: int) -> None:
    """Burn CPU until the hog is gone (a killed hog never leaves spinners behind)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    while os.getppid() == parent:
        n = 0
        while n < 1_000_000:
            n += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=len(os.sched_getaffinity(0)),
                        help="busy processes to run (default: one per online CPU)")
    args = parser.parse_args(argv)
    if args.procs < 1:
        parser.error(f"--procs: must be >= 1, got {args.procs}")
    spinners = [multiprocessing.Process(target=_spin, args=(os.getpid(),), daemon=True) for _ in range(args.procs)]

    def stop(signum: int, frame: types.FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for p in spinners:
        p.start()
    sys.stderr.write(f"cpu_hog: {args.procs} busy processes (pids {', '.join(str(p.pid) for p in spinners)})\n")
    sys.stderr.flush()
    starter = os.getppid()
    try:
        while os.getppid() == starter:
            time.sleep(1.0)
    finally:
        for p in spinners:
            p.terminate()
        for p in spinners:
            p.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
