"""``pylibbpf features``: what this kernel and machine support, and what each attach call needs."""

from __future__ import annotations

import argparse
import errno
import json
import sys
from typing import Any

from .. import features
from ..errors import BPFError
from ._common import privilege_error, write_output

#: The attach calls and the probes each depends on (names of features.report()).
NEEDS = {
    "attach_tracepoint": ("program_type(tracepoint)", "tracefs"),
    "attach_raw_tracepoint": ("program_type(raw_tracepoint)",),
    "attach_kprobe": ("program_type(kprobe)", "kprobes"),
    "attach_uprobe / attach_usdt": ("program_type(kprobe)", "uprobes"),
    "attach_perf_event (software events)": ("program_type(perf_event)",),
    "attach_perf_event (hardware events)": ("program_type(perf_event)", "hardware_pmu"),
    "attach_xdp": ("program_type(xdp)",),
    "attach_tcx": ("program_type(sched_cls)", "attach_kind(tcx)"),
    "attach_cgroup": ("program_type(cgroup_sock)", "cgroup2"),
    'SEC("tp_btf")': ("attach_kind(tp_btf)",),
    'SEC("fentry")': ("attach_kind(fentry)",),
    'SEC("fexit")': ("attach_kind(fexit)",),
    'SEC("lsm")': ("attach_kind(lsm)",),
    'SEC("kprobe.multi")': ("attach_kind(kprobe_multi)",),
    'SEC("uprobe.multi")': ("attach_kind(uprobe_multi)",),
    'SEC("netkit")': ("attach_kind(netkit)",),
    "UserRingBuffer": ("map_type(user_ringbuf)", "helper(syscall, user_ringbuf_drain)"),
}


def add_parser(sub: Any) -> None:
    p = sub.add_parser("features", help="what this kernel supports (program and map types, helpers, probes)",
                       description="Probe the running kernel (libbpf's feature probes and sysfs) and say, "
                       "for each attach call, whether it works here and what is missing.")
    p.add_argument("--json", action="store_true", help="print the probes' answers as JSON")
    p.add_argument("-v", "--verbose", action="store_true", help="show libbpf's messages")
    p.set_defaults(func=cmd_features)


def why(missing: list[str]) -> str:
    """What the report lacks; an attach kind says why (probed again, for its reason)."""
    kinds = [n.removeprefix("attach_kind(").removesuffix(")") for n in missing if n.startswith("attach_kind(")]
    if kinds and len(kinds) == len(missing):
        try:
            reason = features.attach_kind_missing(kinds[0])
        except BPFError:
            reason = None
        if reason:
            return reason
    return "missing " + ", ".join(missing)


def cmd_features(args: argparse.Namespace) -> int:
    try:
        report = features.report()
    except BPFError as e:
        if e.errno in (errno.EPERM, errno.EACCES):
            raise privilege_error(e) from e
        raise
    if args.json:
        write_output(sys.stdout, json.dumps(report, indent=2) + "\n")
        return 0
    width = max(len(name) for name in NEEDS)
    lines = []
    for name, needs in NEEDS.items():
        missing = [n for n in needs if not report[n]]
        lines.append(f"{name:<{width}}  {'yes' if not missing else 'no: ' + why(missing)}\n")
    write_output(sys.stdout, "".join(lines))
    return 0
