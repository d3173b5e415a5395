"""What this kernel and machine support, asked ahead of time (libbpf's feature probes and sysfs).

::

    from pylibbpf import features
    features.program_type("perf_event")          # True / False: BPF_PROG_TYPE_PERF_EVENT loads here
    features.map_type("user_ringbuf")            # BPF_MAP_TYPE_USER_RINGBUF
    features.helper("kprobe", "get_stackid")     # bpf_get_stackid() from a kprobe/perf program
    features.kprobes()                           # the kernel has kprobes
    features.hardware_pmu()                      # hardware perf events (cycles, ...) can be opened
    features.report()                            # all of the above for every attach call, as a dict

Names are the kernel's without their prefix (``BPF_PROG_TYPE_``, ``BPF_MAP_TYPE_``,
``BPF_FUNC_``), any case, or the ``lib`` constants themselves. An unknown
name is a ValueError; a probe the kernel refuses for lack of privileges is a
BPFError (EPERM). Probing loads tiny programs and creates tiny maps: it needs
the same privileges as loading.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

from . import _libbpf
from ._ffi import lib
from .errors import BPFError

#: Where sysfs lists the PMUs (kprobe, uprobe, tracepoint, software, cpu for the hardware one).
PMU_DIR = Path("/sys/bus/event_source/devices")
#: Where tracefs may be mounted (libbpf reads tracepoint ids and legacy probes from either).
TRACEFS_DIRS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))
_ONLINE_CPUS = Path("/sys/devices/system/cpu/online")


def _constant(prefix: str, name: str | int, what: str) -> int:
    if isinstance(name, bool) or not isinstance(name, (str, int)):
        raise TypeError(f"{what} must be a name or a lib.{prefix}* value, got {name!r}")
    if isinstance(name, int):
        return name
    value = getattr(lib, prefix + name.upper().removeprefix(prefix), None)
    if not isinstance(value, int):
        raise ValueError(f"unknown {what} {name!r} (no lib.{prefix}{name.upper()})")
    return value


def _helper_id(name: str | int) -> int:
    if isinstance(name, str):
        value = getattr(lib, "BPF_FUNC_" + name.lower().removeprefix("bpf_func_").removeprefix("bpf_"), None)
        if not isinstance(value, int):
            raise ValueError(f"unknown helper {name!r} (no lib.BPF_FUNC_{name})")
        return value
    return _constant("BPF_FUNC_", name, "helper")


def program_type(name: str | int) -> bool:
    """Whether the kernel loads programs of this type (``libbpf_probe_bpf_prog_type``); BPFError (EPERM)
    when this process may not load it (no answer: the kernel refused before looking at the type)."""
    t = _constant("BPF_PROG_TYPE_", name, "program type")
    return _libbpf.libbpf_probe_bpf_prog_type(t, f"libbpf_probe_bpf_prog_type({name})")


def map_type(name: str | int) -> bool:
    """Whether the kernel creates maps of this type (``libbpf_probe_bpf_map_type``); BPFError (EPERM)
    when this process may not create it."""
    t = _constant("BPF_MAP_TYPE_", name, "map type")
    return _libbpf.libbpf_probe_bpf_map_type(t, f"libbpf_probe_bpf_map_type({name})")


def helper(prog_type: str | int, name: str | int) -> bool:
    """Whether programs of ``prog_type`` may call helper ``name`` (``libbpf_probe_bpf_helper``).

    The program type is probed first: False when the kernel has no such type, BPFError (EPERM)
    when this process may not load it (libbpf's helper probe takes any refused load for a yes).
    """
    t = _constant("BPF_PROG_TYPE_", prog_type, "program type")
    helper_id = _helper_id(name)
    if not program_type(t):
        return False
    return _libbpf.libbpf_probe_bpf_helper(t, helper_id, f"libbpf_probe_bpf_helper({prog_type}, {name})")


def tracefs_dir() -> str:
    """Where tracefs is mounted (the first of :data:`TRACEFS_DIRS` with ``events/``), else the usual place."""
    for d in TRACEFS_DIRS:
        if os.path.isdir(d / "events"):  # False, not PermissionError, where tracefs is root's only
            return str(d)
    return str(TRACEFS_DIRS[0])


def kprobes_missing() -> str | None:
    """None when the kernel has kprobes, else a sentence saying what is missing."""
    if (PMU_DIR / "kprobe").exists() or any((d / "kprobe_events").exists() for d in TRACEFS_DIRS):
        return None
    return ("this kernel has no kprobes: no kprobe PMU in /sys/bus/event_source/devices and no kprobe_events "
            "in tracefs (built without CONFIG_KPROBES / CONFIG_KPROBE_EVENTS); attach to a tracepoint or "
            "raw tracepoint instead")


def kprobes() -> bool:
    """Whether kprobes (and so attach_kprobe) work on this kernel."""
    return kprobes_missing() is None


def uprobes() -> bool:
    """Whether uprobes (and USDT probes, which are uprobes) work on this kernel."""
    return (PMU_DIR / "uprobe").exists() or any((d / "uprobe_events").exists() for d in TRACEFS_DIRS)


def hardware_pmu() -> bool:
    """Whether the CPU's PMU is exposed (hardware perf events: cycles, instructions, ...)."""
    return (PMU_DIR / "cpu").exists() or any(p.name.startswith("armv8") for p in _pmus())


def _pmus() -> list[Path]:
    try:
        return list(PMU_DIR.iterdir())
    except OSError:
        return []


def cgroup2_mount() -> str | None:
    """The first cgroup v2 mount point (from /proc/self/mountinfo), or None."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        pre, _, post = line.partition(" - ")
        if post.split(" ", 1)[0] == "cgroup2":
            return pre.split(" ")[4].replace("\\040", " ")
    return None


def online_cpus() -> list[int]:
    """The online CPUs, from the same file libbpf's perf_buffer reads (one perf ring each)."""
    cpus: list[int] = []
    for part in _ONLINE_CPUS.read_text().strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def report() -> dict[str, bool]:
    """Every answer the attach table needs, by name (probes run now, on this kernel).

    A probe the kernel refuses to this process (EPERM: a security module may refuse fentry or
    LSM programs even to root) answers False here. When it refuses every probe, nothing was
    probed: BPFError (EPERM), as from the probe functions.
    """
    refused: list[BPFError] = []

    def answer(probe: Callable[..., bool], *args: str) -> bool:
        try:
            return probe(*args)
        except BPFError as e:
            if e.errno != errno.EPERM:
                raise
            refused.append(e)
            return False

    answers = {f"program_type({t})": answer(program_type, t) for t in
               ("tracepoint", "raw_tracepoint", "kprobe", "perf_event", "xdp", "sched_cls", "cgroup_sock",
                "tracing", "syscall")}
    answers["map_type(user_ringbuf)"] = answer(map_type, "user_ringbuf")
    answers["map_type(stack_trace)"] = answer(map_type, "stack_trace")
    answers["helper(perf_event, get_stackid)"] = answer(helper, "perf_event", "get_stackid")
    answers["helper(syscall, user_ringbuf_drain)"] = answer(helper, "syscall", "user_ringbuf_drain")
    if len(refused) == len(answers):
        raise refused[0]
    answers["tracefs"] = os.path.isdir(os.path.join(tracefs_dir(), "events"))
    answers["kprobes"] = kprobes()
    answers["uprobes"] = uprobes()
    answers["hardware_pmu"] = hardware_pmu()
    answers["cgroup2"] = cgroup2_mount() is not None
    return answers
