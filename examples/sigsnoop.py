"""sigsnoop: trace signals as they are generated, with per-sender counts each interval.

A port-style tool written with pylibbpf's public API and the object's typed
skeleton (sigsnoop_skel.py, made by ``pylibbpf skel``; ``make build`` keeps it
current): the filters are ``const volatile`` globals set through
``skel.rodata`` before load, events come through a ring buffer as
``SigEvent`` records (``skel.events``), and the counts live in a typed hash map
(``Map[SigKey, int]``) read and emptied each interval with ``pop_items()``;
what is left at the end is read with ``lookup_batch()``.

Run as root (the BPF object is compiled on first use, see build_objects.py):

    python examples/sigsnoop.py [-p PID] [-s SIG] [-x] [-i SECONDS] [-d SECONDS]

Ctrl-C (or SIGTERM) stops it after draining what is pending.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from build_objects import object_path
from sigsnoop_skel import SigEvent, SigKey, SigsnoopSkel


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


class Stop(Exception):
    """Raised from the SIGTERM handler to leave the loop like Ctrl-C does."""


def _on_term(signum: int, frame: FrameType | None) -> None:
    raise Stop


def print_counts(title: str, pairs: list[tuple[SigKey, int]]) -> None:
    for key, n in sorted(pairs, key=lambda kv: (-kv[1], kv[0].pid, kv[0].sig)):
        print(f"{title} pid={key.pid} sig={signal_name(key.sig)} n={n}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Trace signals as they are generated.")
    ap.add_argument("-p", "--pid", type=int, default=0, help="only signals sent by this process")
    ap.add_argument("-s", "--signal", type=int, default=0, help="only this signal number")
    ap.add_argument("-x", "--failed", action="store_true", help="only signals that were not delivered")
    ap.add_argument("-i", "--interval", type=float, default=1.0, help="seconds between count summaries")
    ap.add_argument("-d", "--duration", type=float, default=None, help="stop after this many seconds")
    ap.add_argument("--object", type=Path, default=None, help="a compiled sigsnoop.bpf.o (default: build it)")
    args = ap.parse_args(argv)

    with SigsnoopSkel.open(args.object or object_path("sigsnoop")) as skel:
        skel.rodata.targ_pid = args.pid              # filters: .rodata, set before load
        skel.rodata.targ_sig = args.signal
        skel.rodata.failed_only = args.failed
        skel.load()
        counts = skel.maps.counts                    # Map[SigKey, int]

        def show(events: list[SigEvent]) -> None:
            for e in events:
                print(f"{e.pid:<7} {e.comm:<16} {signal_name(e.sig):<9} {e.tpid:<7} {e.result}", flush=True)

        links = skel.attach()
        signal.signal(signal.SIGTERM, _on_term)
        print(f"{'PID':<7} {'COMM':<16} {'SIG':<9} {'TPID':<7} RESULT", flush=True)
        print("tracing signals; Ctrl-C to end", file=sys.stderr, flush=True)
        end = None if args.duration is None else time.monotonic() + args.duration
        try:
            next_summary = time.monotonic() + args.interval
            try:
                while end is None or time.monotonic() < end:
                    show(skel.events.read_batch(0.1))   # SigEvent records, one drain at a time
                    if time.monotonic() >= next_summary:
                        print_counts("interval", counts.pop_items())  # read and reset, atomically per key
                        next_summary += args.interval
            except (KeyboardInterrupt, Stop):
                pass
            show(skel.events.read_batch(0))             # what arrived before the stop
        finally:
            for link in links:
                link.destroy()
        print_counts("rest", counts.lookup_batch())   # since the last interval
        if skel.bss.dropped:                          # .bss, read live
            print(f"dropped {skel.bss.dropped} events (ring buffer full)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
