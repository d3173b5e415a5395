"""Count the calls of one function of a program or library, per process, with a uprobe.

    sudo .venv/bin/python examples/uprobe_count.py BINARY SYMBOL [--pid PID] [--duration S]

BINARY is a path, a program in PATH or a library name ("libc"); SYMBOL is
resolved in its ELF symbol table by libbpf (``Program.attach_uprobe``). Prints
``ready`` once the probe is in place, then, after ``--duration`` seconds (or
Ctrl-C), one line per process: pid and number of calls. Uses the public API
and the object's typed skeleton (uprobe_count_skel.py) only.
"""

from __future__ import annotations

import argparse
import sys
import time

from build_objects import object_path
from uprobe_count_skel import UprobeCountSkel


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binary", help="a path, a program name or a library name such as libc")
    ap.add_argument("symbol", help="the function to count")
    ap.add_argument("--pid", type=int, default=-1, help="only this process (default: every process)")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds to count (default 10)")
    args = ap.parse_args(argv)

    with UprobeCountSkel.open(object_path("uprobe_count")) as skel:
        skel.load()
        with skel.progs.on_call.attach_uprobe(args.binary, args.symbol, pid=args.pid):
            print("ready", flush=True)
            try:
                time.sleep(args.duration)
            except KeyboardInterrupt:
                pass
        rows = sorted(skel.maps.calls.items(), key=lambda r: -r[1])  # Map[int, int]: pid -> calls
        print(f"{'PID':>8} {'CALLS':>10}  {args.symbol} in {args.binary}")
        for pid, calls in rows:
            print(f"{pid:>8} {calls:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
