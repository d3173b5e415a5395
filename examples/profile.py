"""A sampling profiler: sample every CPU a few hundred times a second, count stacks, print the top ones.

    sudo .venv/bin/python examples/profile.py [--frequency HZ] [--duration S] [--pid PID] [--top N]

A ``SEC("perf_event")`` program runs on each sample of a cpu-clock perf event
opened on every online CPU (``Program.attach_perf_event``); it counts
(process, kernel stack id, user stack id) in a hash map and keeps the frames in
a stack-trace map. At the end the most frequent stacks are printed as raw
addresses, user frames first (symbolizing them is pylibbpf.syms' job). Uses
the public API and the object's typed skeleton (profile_skel.py, made by
``pylibbpf skel``) only.
"""

from __future__ import annotations

import argparse
import sys
import time

from build_objects import object_path
from profile_skel import ProfileSkel

from pylibbpf import Map


def stack_frames(stacks: Map[bytes, bytes], stack_id: int) -> list[int]:
    """The frame addresses of a stack id (negative ids are the kernel's errors: no stack)."""
    if stack_id < 0:
        return []
    try:
        return stacks.stack(stack_id)
    except KeyError:  # evicted by another stack with the same hash
        return []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frequency", type=int, default=199, help="samples a second on each CPU (default 199)")
    ap.add_argument("--duration", type=float, default=5.0, help="seconds to sample (default 5)")
    ap.add_argument("--pid", type=int, default=0, help="only this process (default: every process)")
    ap.add_argument("--top", type=int, default=10, help="stacks to print (default 10)")
    args = ap.parse_args(argv)

    with ProfileSkel.open(object_path("profile")) as skel:
        skel.load()
        skel.maps.target[0] = args.pid
        links = skel.progs.on_sample.attach_perf_event("cpu-clock", frequency=args.frequency)
        print(f"sampling {len(links)} CPUs at {args.frequency} Hz for {args.duration} s", file=sys.stderr)
        try:
            time.sleep(args.duration)
        finally:
            for link in links:
                link.destroy()
        # Keys are SampleKey records (pid, kernel and user stack ids, comm); values ints.
        counted = sorted(((n, key) for key, n in skel.maps.samples.items()), reverse=True)
        total = sum(n for n, _ in counted)
        print(f"{total} samples, {len(counted)} distinct stacks")
        stacks = skel.maps.stacks
        for n, key in counted[:args.top]:
            print(f"{n:8d}  {key.comm} ({key.pid})")
            for addr in stack_frames(stacks, key.user_stack) + stack_frames(stacks, key.kernel_stack):
                print(f"          {addr:#018x}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
