"""What this kernel and machine support, asked ahead of time (libbpf's feature probes and sysfs).

::

    from pylibbpf import features
    features.program_type("perf_event")          # True / False: BPF_PROG_TYPE_PERF_EVENT loads here
    features.map_type("user_ringbuf")            # BPF_MAP_TYPE_USER_RINGBUF
    features.helper("kprobe", "get_stackid")     # bpf_get_stackid() from a kprobe/perf program
    features.kprobes()                           # the kernel has kprobes
    features.hardware_pmu()                      # hardware perf events (cycles, ...) can be opened
    features.attach_kind("fentry")               # an fentry program loads and attaches here
    features.attach_kind_missing("fentry")       # None, or why not
    features.tracepoint("sched", "sched_switch") # tracefs lists this tracepoint
    features.report()                            # all of the above for every attach call, as a dict

Names are the kernel's without their prefix (``BPF_PROG_TYPE_``, ``BPF_MAP_TYPE_``,
``BPF_FUNC_``), any case, or the ``lib`` constants themselves. An unknown
name is a ValueError; a probe the kernel refuses for lack of privileges is a
BPFError (EPERM). Probing loads tiny programs and creates tiny maps: it needs
the same privileges as loading.

``attach_kind`` answers for the kinds of :data:`ATTACH_KINDS` by doing what a
tool would: it loads a program that returns at once, with the expected attach
type and BTF target of that kind, and creates the link where loading alone
does not tell (every link is closed before the call returns):

- ``tp_btf``, ``fentry``, ``fexit``, ``lsm``: load against the kernel's BTF
  (the tracepoint ``bpf_test_finish`` or ``sched_switch``, the function
  ``bpf_fentry_test1`` that only ``BPF_PROG_TEST_RUN`` calls, the LSM hook
  ``file_open``), then create the link;
- ``kprobe``: the program type, and the kprobe PMU (:func:`kprobes`);
- ``kprobe_multi``: a link on ``bpf_fentry_test1``; ``uprobe_multi``: a link
  on a temporary file that no process maps;
- ``tcx``, ``netkit``: a link for interface index 0, which the kernel's tcx and
  netkit code refuse with ENODEV (no such device) and a kernel without them
  with EINVAL; attaching to a real interface also needs CAP_NET_ADMIN.

A kind the kernel refuses with EPERM while it loads raw_tracepoint programs
(a security policy, a lockdown) is answered False, with the reason from
:func:`attach_kind_missing`; EPERM for raw_tracepoint too means this process
may not probe: BPFError (EPERM).
"""

from __future__ import annotations

import errno
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from . import _check, _libbpf, _shim, btf
from ._ffi import ffi, lib
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
    when this process may not load it (no answer: the kernel refused before looking at the type).

    ``tracing`` and ``lsm`` programs need a BTF target: they are probed as :func:`attach_kind` loads
    them (``tracing``: a tp_btf or an fentry program loads; ``lsm``: an LSM program does), without a link.
    """
    t = _constant("BPF_PROG_TYPE_", name, "program type")
    if t == lib.BPF_PROG_TYPE_TRACING:
        return _btf_load_missing("tp_btf") is None or _btf_load_missing("fentry") is None
    if t == lib.BPF_PROG_TYPE_LSM:
        return _btf_load_missing("lsm") is None
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


# --- attach kinds: a program loaded, and its link created where loading does not tell -------------

#: The kinds :func:`attach_kind` answers for.
ATTACH_KINDS = ("tp_btf", "fentry", "fexit", "lsm", "kprobe", "kprobe_multi", "uprobe_multi", "tcx", "netkit")
#: What a link's errno means, where the kernel's code for it says more than its message.
_LINK_HINTS = {("kprobe_multi", errno.EOPNOTSUPP): "the kernel was built without fprobe (CONFIG_FPROBE)",
               ("netkit", errno.EINVAL): "the kernel was built without netkit devices (CONFIG_NETKIT)"}
#: A function the kernel keeps for BPF_PROG_TEST_RUN of tracing programs (net/bpf/test_run.c): nothing
#: else calls it, so a probe's link on it never runs.
_PROBE_FUNC = "bpf_fentry_test1"
#: Per BTF-target kind: program type, expected attach type, BTF kind and the names tried as the target.
_BTF_KINDS = {
    "tp_btf": (lib.BPF_PROG_TYPE_TRACING, lib.BPF_TRACE_RAW_TP, "typedef",
               ("btf_trace_bpf_test_finish", "btf_trace_sched_switch")),
    "fentry": (lib.BPF_PROG_TYPE_TRACING, lib.BPF_TRACE_FENTRY, "func", (_PROBE_FUNC,)),
    "fexit": (lib.BPF_PROG_TYPE_TRACING, lib.BPF_TRACE_FEXIT, "func", (_PROBE_FUNC,)),
    "lsm": (lib.BPF_PROG_TYPE_LSM, lib.BPF_LSM_MAC, "func", ("bpf_lsm_file_open",)),
}
# `r0 = 0; exit`: BPF_ALU64 | BPF_MOV | BPF_K (BPF_K is 0x00) and BPF_JMP (0x05) | BPF_EXIT, from
# include/uapi/linux/bpf_common.h and bpf.h.
_RETURN_0 = bytes([lib.BPF_ALU64 | lib.BPF_MOV, 0, 0, 0, 0, 0, 0, 0, 0x05 | lib.BPF_EXIT, 0, 0, 0, 0, 0, 0, 0])


def _load(kind: str, prog_type: int, attach_type: int, btf_id: int = 0) -> int | str:
    """The fd of a program returning 0, loaded as ``kind``; else why not. BPFError (EPERM) when this
    process may not load tracing programs at all (raw_tracepoint refused too)."""
    opts = ffi.new("struct bpf_prog_load_opts *")
    opts.sz = ffi.sizeof("struct bpf_prog_load_opts")
    opts.expected_attach_type = attach_type
    opts.attach_btf_id = btf_id
    code = ffi.from_buffer("struct bpf_insn[]", _RETURN_0)
    try:
        return _libbpf.bpf_prog_load(prog_type, _libbpf.cstr("probe_" + kind[:9]), _libbpf.cstr("GPL"), code,
                                     len(_RETURN_0) // 8, opts, f"bpf_prog_load({kind} probe)")
    except BPFError as e:
        if e.errno == errno.EPERM:
            if prog_type in (lib.BPF_PROG_TYPE_SCHED_CLS,):
                raise  # CAP_NET_ADMIN's programs: EPERM is this process's privileges
            program_type("raw_tracepoint")  # BPFError (EPERM) when this process may not load tracing ones
            return (f"the kernel refuses {kind} programs (EPERM) while it loads raw_tracepoint ones: "
                    f"a security policy (a lockdown, an LSM) forbids them")
        return f"the kernel does not load {kind} programs ({e.strerror})"


def _btf_load(kind: str) -> int | str:
    """A ``kind`` program (one of _BTF_KINDS) loaded against its target in the kernel's BTF, or why not."""
    prog_type, attach_type, btf_kind, targets = _BTF_KINDS[kind]
    try:
        vmlinux = btf.kernel()
    except BPFError as e:
        return f"the kernel has no BTF ({e.strerror}): {kind} programs need it"
    target = next((t for t in targets if vmlinux.has_type(t, btf_kind)), None)
    if target is None:
        return f"the kernel's BTF has no {btf_kind} {' or '.join(targets)} to probe {kind} with"
    return _load(kind, prog_type, attach_type, vmlinux.type(target, btf_kind).type_id)


def _btf_load_missing(kind: str) -> str | None:
    fd = _btf_load(kind)
    if isinstance(fd, str):
        return fd
    os.close(fd)
    return None


def _linked(kind: str, fd: int | str, link: Callable[[int], int], ok_errnos: tuple[int, ...] = ()) -> str | None:
    """Create a link for the loaded program ``fd`` (then close both): None when it works, or why not.
    An errno of ``ok_errnos`` is the kernel's code for ``kind`` refusing only the probe's target."""
    if isinstance(fd, str):
        return fd
    try:
        os.close(link(fd))
    except BPFError as e:
        if e.errno in ok_errnos:
            return None
        hint = _LINK_HINTS.get((kind, e.errno or 0))
        return f"{kind} programs load, but the kernel refuses their link ({e.strerror}){': ' + hint if hint else ''}"
    finally:
        os.close(fd)
    return None


def _uprobe_multi_link(fd: int) -> int:
    # A file no process maps: the uprobe is registered and installed nowhere.
    with tempfile.NamedTemporaryFile(prefix="pylibbpf-probe-") as f:
        f.write(bytes(64))
        f.flush()
        return _shim.plb_multi_link_create(fd, lib.BPF_TRACE_UPROBE_MULTI, f.name, 0, "uprobe_multi probe link")


def attach_kind_missing(name: str) -> str | None:
    """None when programs of attach kind ``name`` (one of :data:`ATTACH_KINDS`) load and attach here, else
    a sentence saying why not. Probes on every call (see the module docstring): it loads a program and
    may create and close a link, so it takes a few milliseconds. ValueError for an unknown kind;
    BPFError (EPERM) when this process may not probe."""
    kind = _check.choice(_check.string(name, "name"), "name", ATTACH_KINDS)
    if kind in _BTF_KINDS:
        attach_type = _BTF_KINDS[kind][1]
        return _linked(kind, _btf_load(kind), lambda fd: _libbpf.bpf_link_create(
            fd, 0, attach_type, 0, f"bpf_link_create({kind} probe)"))
    if kind == "kprobe":
        if not program_type("kprobe"):
            return "the kernel does not load kprobe programs"
        return kprobes_missing()
    if kind in ("kprobe_multi", "uprobe_multi"):
        at = lib.BPF_TRACE_KPROBE_MULTI if kind == "kprobe_multi" else lib.BPF_TRACE_UPROBE_MULTI
        fd = _load(kind, lib.BPF_PROG_TYPE_KPROBE, at)
        if kind == "uprobe_multi":
            return _linked(kind, fd, _uprobe_multi_link)
        # ESRCH: the kernel looked the function up (kprobe_multi works) and did not find it
        return _linked(kind, fd, lambda fd: _shim.plb_multi_link_create(
            fd, at, _PROBE_FUNC, 0, "kprobe_multi probe link"), (errno.ESRCH,))
    at = lib.BPF_TCX_INGRESS if kind == "tcx" else lib.BPF_NETKIT_PRIMARY
    fd = _load(kind, lib.BPF_PROG_TYPE_SCHED_CLS, at)
    return _linked(kind, fd, lambda fd: _libbpf.bpf_link_create(fd, 0, at, 0, f"bpf_link_create({kind} probe)"),
                   (errno.ENODEV,))


def attach_kind(name: str) -> bool:
    """Whether programs of attach kind ``name`` (one of :data:`ATTACH_KINDS`) load and attach here
    (:func:`attach_kind_missing` is None). ValueError for an unknown kind; BPFError (EPERM) when this
    process may not probe."""
    return attach_kind_missing(name) is None


_TRACEPOINT_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def tracepoint(category: str, name: str) -> bool:
    """Whether tracefs lists tracepoint ``category:name`` (``events/<category>/<name>`` in
    :func:`tracefs_dir`): what :meth:`Program.attach_tracepoint` needs. False, too, when tracefs is not
    mounted or this process may not read it. ValueError for a name that is not one component
    (``"../x"``, ``""``, a ``/``)."""
    for value, param in ((category, "category"), (name, "name")):
        if not _TRACEPOINT_PART.fullmatch(_check.string(value, param)) or ".." in value:
            raise ValueError(f"{param} must be a tracefs event name (letters, digits, _ . -), got {value!r}")
    return os.path.isdir(os.path.join(tracefs_dir(), "events", category, name))


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
    answers.update({f"attach_kind({k})": answer(attach_kind, k) for k in ATTACH_KINDS})
    answers["map_type(user_ringbuf)"] = answer(map_type, "user_ringbuf")
    answers["map_type(stack_trace)"] = answer(map_type, "stack_trace")
    answers["helper(perf_event, get_stackid)"] = answer(helper, "perf_event", "get_stackid")
    answers["helper(syscall, user_ringbuf_drain)"] = answer(helper, "syscall", "user_ringbuf_drain")
    if len(refused) == len(answers):
        raise refused[0]
    answers["tracefs"] = os.path.isdir(os.path.join(tracefs_dir(), "events"))
    answers["tracepoint(sched/sched_switch)"] = tracepoint("sched", "sched_switch")
    answers["kprobes"] = kprobes()
    answers["uprobes"] = uprobes()
    answers["hardware_pmu"] = hardware_pmu()
    answers["cgroup2"] = cgroup2_mount() is not None
    return answers
