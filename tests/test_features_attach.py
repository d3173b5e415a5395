"""``features.attach_kind``, ``program_type("tracing")`` and ``features.tracepoint`` against independent attempts.

Each answer is compared with what a tool gets when it does the real thing: a
compiled program of that kind (tests/bpf/attach_kinds.bpf.c) loaded alone and
attached with libbpf, a netkit device created with ``ip``, a tracepoint program
attached with ``attach_tracepoint``. On this kernel tp_btf, uprobe_multi and tcx
work; fentry, fexit and lsm are refused, kprobes are absent, and so are fprobe
(kprobe_multi) and netkit: the comparison holds either way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pylibbpf import BPFError, BPFObject, Program, features, ffi, lib

#: The program of tests/bpf/attach_kinds.bpf.c for each attach kind, and how a tool attaches it.
ATTACH: dict[str, tuple[str, Callable[[Program], Any]]] = {
    "tp_btf": ("on_tp_btf", Program.attach),
    "fentry": ("on_fentry", Program.attach),
    "fexit": ("on_fexit", Program.attach),
    "lsm": ("on_lsm", Program.attach),
    "kprobe": ("on_kprobe", lambda p: p.attach_kprobe("bpf_fentry_test1")),
    "kprobe_multi": ("on_kprobe_multi", Program.attach),
    "tcx": ("on_tcx", lambda p: p.attach_tcx("lo")),
}


def loaded_alone(path: Path, prog: str) -> BPFObject:
    """attach_kinds.bpf.o with only ``prog`` loaded (the others of kinds this kernel refuses stay out)."""
    o = BPFObject.open(path)
    for p in o.programs.values():
        p.autoload = p.name == prog
    o.globals["target_tgid"] = os.getpid()
    return o


def attempt(path: Path, prog: str, attach: Callable[[Program], Any]) -> bool:
    """Whether the program loads and attaches, as a tool would do it (its link destroyed after)."""
    with loaded_alone(path, prog) as o:
        try:
            o.load()
            link = attach(o.programs[prog])
        except BPFError:
            return False
        link.destroy()
        return True


@pytest.mark.parametrize("kind", sorted(ATTACH))
def test_attach_kind_matches_loading_and_attaching(bpf_objects: dict[str, Path], kind: str) -> None:
    prog, attach = ATTACH[kind]
    works = attempt(bpf_objects["attach_kinds"], prog, attach)
    assert features.attach_kind(kind) is works
    reason = features.attach_kind_missing(kind)
    assert (reason is None) is works and (works or kind.split("_")[0] in reason or "kprobe" in reason), reason


def libc_path() -> str:
    for line in Path("/proc/self/maps").read_text().splitlines():
        if line.split()[-1].split("/")[-1].startswith("libc.so"):
            return line.split()[-1]
    pytest.skip("no libc.so mapped into the test process")


def test_uprobe_multi_matches_a_link_that_counts(bpf_objects: dict[str, Path]) -> None:
    """A uprobe_multi link on libc's getpid() in this process counts each os.getpid() call."""
    with loaded_alone(bpf_objects["attach_kinds"], "on_uprobe_multi") as o:
        o.load()
        link = lib.bpf_program__attach_uprobe_multi(o.programs["on_uprobe_multi"].c_ptr, os.getpid(),
                                                    libc_path().encode(), b"getpid", ffi.NULL)
        works = link != ffi.NULL
        if works:
            try:
                for _ in range(5):
                    os.getpid()
                assert o.maps["hits"][0] >= 5
            finally:
                lib.bpf_link__destroy(link)
    assert features.attach_kind("uprobe_multi") is works


def test_netkit_matches_creating_a_netkit_device() -> None:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs unshare and ip")
    done = subprocess.run(["unshare", "-n", "ip", "link", "add", "nk0", "type", "netkit"], capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=30)
    assert features.attach_kind("netkit") is (done.returncode == 0), done.stderr
    if done.returncode:
        assert "CONFIG_NETKIT" in (features.attach_kind_missing("netkit") or "")


def test_program_type_tracing_matches_loading_a_tracing_program(bpf_objects: dict[str, Path]) -> None:
    loads = False
    for prog in ("on_tp_btf", "on_fentry"):
        with loaded_alone(bpf_objects["attach_kinds"], prog) as o:
            try:
                o.load()
                loads = True
            except BPFError:
                pass
    assert features.program_type("tracing") is loads
    assert features.program_type("TRACING") is loads and features.program_type(lib.BPF_PROG_TYPE_TRACING) is loads
    assert features.report()["program_type(tracing)"] is loads


def test_program_type_lsm_matches_loading_an_lsm_program(bpf_objects: dict[str, Path]) -> None:
    with loaded_alone(bpf_objects["attach_kinds"], "on_lsm") as o:
        try:
            o.load()
            loads = True
        except BPFError:
            loads = False
    assert features.program_type("lsm") is loads


def test_attach_kind_refuses_unknown_kinds() -> None:
    with pytest.raises(ValueError, match=r"name must be one of .*'tp_btf'.*got 'fentry_multi'"):
        features.attach_kind("fentry_multi")
    with pytest.raises(TypeError, match="name must be a str"):
        features.attach_kind(3)  # type: ignore[arg-type]


def test_the_report_has_every_attach_kind() -> None:
    report = features.report()
    assert {k: report[f"attach_kind({k})"] for k in features.ATTACH_KINDS} == {
        k: features.attach_kind(k) for k in features.ATTACH_KINDS}
    assert report["tracepoint(sched/sched_switch)"] is features.tracepoint("sched", "sched_switch")


# --- tracepoints ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("category", "name"), [("sched", "sched_switch"), ("syscalls", "sys_enter_getpid"),
                                                ("sched", "no_such_tracepoint"), ("no_such_category", "x")])
def test_tracepoint_matches_attaching_to_it(bpf_objects: dict[str, Path], category: str, name: str) -> None:
    with BPFObject.open(bpf_objects["programs"]) as o:
        for p in o.programs.values():
            p.autoload = p.name == "count_tp"
        o.load()
        try:
            o.programs["count_tp"].attach_tracepoint(category, name).destroy()
            works = True
        except BPFError as e:
            assert e.errno == 2, e  # ENOENT: what a tool checking first avoids
            works = False
    assert features.tracepoint(category, name) is works


@pytest.mark.parametrize("bad", ["../x", "..", "", "a/b", "sched/../..", "x\0y"])
def test_tracepoint_refuses_names_that_are_not_one_event(bad: str) -> None:
    with pytest.raises(ValueError, match=r"must be a tracefs event name|NUL"):
        features.tracepoint(bad, "sched_switch")
    with pytest.raises(ValueError, match=r"must be a tracefs event name|NUL"):
        features.tracepoint("sched", bad)
    with pytest.raises(TypeError, match="category must be a str"):
        features.tracepoint(b"sched", "x")  # type: ignore[arg-type]


def test_features_command_shows_the_attach_kinds() -> None:
    proc = subprocess.run([sys.executable, "-m", "pylibbpf", "features"], capture_output=True, text=True,
                          check=True, env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent)))
    lines = {line.split("  ")[0].strip(): line.split("  ", 1)[1].strip() for line in proc.stdout.splitlines()}
    for kind, row in (("tp_btf", 'SEC("tp_btf")'), ("fentry", 'SEC("fentry")'), ("lsm", 'SEC("lsm")'),
                      ("uprobe_multi", 'SEC("uprobe.multi")'), ("netkit", 'SEC("netkit")')):
        reason = features.attach_kind_missing(kind)
        assert lines[row] == ("yes" if reason is None else f"no: {reason}")
