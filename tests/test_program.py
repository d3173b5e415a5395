"""Program's attach family, load knobs, links, pinning, stats, features and UserRingBuffer on the real kernel.

tests/bpf/programs.bpf.c has one program per attach call; each counts its runs
in `counts` at its own slot (C_* below). The tracing ones count only the
process whose tgid the test writes into the `target` map, because other
engineers' processes run on the same machine. Everything a test creates in the
kernel or the file system (bpffs pins, cgroups, network namespaces, veths,
binaries) has a name unique to this run and is removed afterwards.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import mmap
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from progs import counter, wait_until

from pylibbpf import (
    BPFError,
    BPFObject,
    ClosedError,
    Link,
    Program,
    ProgramStats,
    UserRingBuffer,
    enable_stats,
    features,
    ffi,
)

pytestmark = pytest.mark.usefixtures("bpf_privileged")

(C_TP, C_RAW, C_UPROBE, C_URETPROBE, C_USDT, C_SAMPLES, C_OWN_SAMPLES, C_XDP, C_TCX, C_SOCK, C_ALT_RAW,
 C_RUN_ME, C_DRAINED_SUM, C_DRAINED, C_LAST_RET, C_USDT_ARG, C_USDT_COOKIE) = range(17)

PID = os.getpid()

# A tiny program to probe: plb_target() is the uprobe target, plbtest:tick a USDT probe. With a
# second argument it waits for one byte on stdin first, so a test can attach with its pid.
TARGET_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <unistd.h>

__attribute__((noinline, used)) int plb_target(int x)
{
	__asm__ volatile("");
	return x * 2 + 1;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1, sum = 0;
	char c;

	if (argc > 2 && read(0, &c, 1) != 1)
		return 2;
	for (int i = 0; i < n; i++) {
		sum += plb_target(i);
		DTRACE_PROBE1(plbtest, tick, i);
	}
	printf("%d\n", sum);
	return 0;
}
"""


@pytest.fixture(scope="module")
def target_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TARGET_C compiled with gcc (sys/sdt.h from systemtap-sdt-dev)."""
    out = tmp_path_factory.mktemp("uprobe") / "plb_target"
    src = out.with_suffix(".c")
    src.write_text(TARGET_C)
    subprocess.run(["gcc", "-O1", "-g", "-o", str(out), str(src)], check=True)
    return out


@pytest.fixture
def obj(bpf_objects: dict[str, Path]) -> Iterator[BPFObject]:
    """programs.bpf.o, loaded, counting this process."""
    with BPFObject.open(bpf_objects["programs"]) as o:
        o.load()
        set_target(o, PID)
        yield o


def set_target(o: BPFObject, tgid: int) -> None:
    o.maps["target"][0] = tgid


def count(o: BPFObject, slot: int) -> int:
    return counter(o, "counts", slot)


def run_target(binary: Path, calls: int) -> None:
    """Run the target to completion (it calls plb_target `calls` times)."""
    proc = subprocess.run([str(binary), str(calls)], check=True, capture_output=True)
    assert proc.stdout.strip() == str(calls * calls).encode()  # sum of 2i+1 for i < calls


def file_offset(binary: Path, symbol: str) -> int:
    """The file offset of `symbol` (what a uprobe by offset takes): its address mapped through PT_LOAD."""
    data = binary.read_bytes()
    nm = subprocess.run(["nm", str(binary)], check=True, capture_output=True, text=True).stdout
    addr = next(int(line.split()[0], 16) for line in nm.splitlines() if line.endswith(" " + symbol))
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == 1 and p_vaddr <= addr < p_vaddr + p_filesz:  # PT_LOAD
            return addr - p_vaddr + p_offset
    raise AssertionError(f"{symbol} is in no PT_LOAD segment")


# --- knobs and attach_all ---------------------------------------------------------------------------

def test_knobs_before_load(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["programs"]) as o:
        prog = o.programs["on_sample"]
        assert prog.autoload and prog.autoattach
        assert prog.type_name == "perf_event" and prog.section == "perf_event"
        assert prog.c_ptr is not None
        o.programs["on_kprobe"].autoload = False
        o.programs["dump_task"].autoattach = False
        o.programs["dump_pids"].autoattach = False
        assert not o.programs["on_kprobe"].autoload and not o.programs["dump_task"].autoattach
        o.load()
        assert o.programs["on_kprobe"].fd == -1 and o.programs["count_tp"].fd >= 0
        with pytest.raises(BPFError, match="already loaded: set autoload before load"):
            prog.autoload = False
        with pytest.raises(BPFError, match="not loaded: autoload is off"):
            o.programs["on_kprobe"].attach_kprobe("do_sys_open")
        assert o.attach_all() == []  # the only auto-attachable programs have autoattach off


def test_attach_all_attaches_exactly_the_auto_attachable_and_logs_the_rest(
        bpf_objects: dict[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    with BPFObject.open(bpf_objects["programs"]) as o:
        o.programs["on_kprobe"].autoload = False
        o.load()
        with caplog.at_level(logging.INFO, logger="pylibbpf.object"):
            links = o.attach_all()
        try:
            assert [link.name for link in links] == ["dump_task", "dump_pids"]
            skipped = {r.getMessage().split("'")[1]: r.getMessage() for r in caplog.records
                       if r.name == "pylibbpf.object"}
            assert set(skipped) == set(o.programs) - {"dump_task", "dump_pids"}
            assert "use attach_perf_event()" in skipped["on_sample"]
            assert "names no binary" in skipped["readline_ret"] and "attach_uprobe()" in skipped["readline_ret"]
            assert "autoload is off" in skipped["on_kprobe"]
            assert "use attach_cgroup()" in skipped["sock_create"]
        finally:
            for link in links:
                link.destroy()


def test_attach_by_section_explains_what_is_missing(obj: BPFObject) -> None:
    with pytest.raises(BPFError, match=r"SEC\('perf_event'\) does not say where to attach: use attach_perf_event"):
        obj.programs["on_sample"].attach()


# --- tracepoints ------------------------------------------------------------------------------------

def test_tracepoint_and_raw_tracepoint_fire_on_syscalls(obj: BPFObject) -> None:
    with obj.programs["count_tp"].attach_tracepoint("syscalls", "sys_enter_getppid"), \
            obj.programs["count_raw"].attach_raw_tracepoint("sys_enter"):
        for _ in range(7):
            os.getppid()
        assert count(obj, C_TP) == 7
        assert count(obj, C_RAW) >= 7  # every syscall of this process
    os.getppid()
    assert count(obj, C_TP) == 7  # detached


def test_unknown_tracepoints_are_named(obj: BPFObject) -> None:
    with pytest.raises(BPFError, match="no tracepoint syscalls/sys_enter_nope") as info:
        obj.programs["count_tp"].attach_tracepoint("syscalls", "sys_enter_nope")
    assert info.value.errno == errno.ENOENT
    with pytest.raises(BPFError, match="no raw tracepoint 'nope_nope'"):
        obj.programs["count_raw"].attach_raw_tracepoint("nope_nope")


def test_kprobe_says_the_kernel_has_none(obj: BPFObject) -> None:
    if features.kprobes():
        with obj.programs["on_kprobe"].attach_kprobe("do_sys_openat2") as link:
            assert link.fd >= 0
        return
    with pytest.raises(BPFError, match="this kernel has no kprobes") as info:
        obj.programs["on_kprobe"].attach_kprobe("do_sys_openat2", retprobe=True)
    assert info.value.errno == errno.EOPNOTSUPP


# --- uprobes and USDT -------------------------------------------------------------------------------

def test_uprobe_and_uretprobe_by_symbol(obj: BPFObject, target_bin: Path) -> None:
    with obj.programs["on_uprobe"].attach_uprobe(target_bin, "plb_target"), \
            obj.programs["on_uretprobe"].attach_uprobe(target_bin, "plb_target", retprobe=True):
        run_target(target_bin, 5)
        assert count(obj, C_UPROBE) == 5
        assert count(obj, C_URETPROBE) == 5
        assert count(obj, C_LAST_RET) == 2 * 4 + 1  # the last call's return value


def test_uprobe_by_offset(obj: BPFObject, target_bin: Path) -> None:
    offset = file_offset(target_bin, "plb_target")
    with obj.programs["on_uprobe"].attach_uprobe(target_bin, offset=offset):
        run_target(target_bin, 3)
    assert count(obj, C_UPROBE) == 3


def test_uprobe_with_a_pid_sees_only_that_process(obj: BPFObject, target_bin: Path) -> None:
    waiting = subprocess.Popen([str(target_bin), "4", "wait"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        with obj.programs["on_uprobe"].attach_uprobe(target_bin, "plb_target", pid=waiting.pid):
            run_target(target_bin, 6)  # another process: not counted
            assert count(obj, C_UPROBE) == 0
            out, _ = waiting.communicate(b"x", timeout=30)
            assert out.strip() == b"16"
            assert count(obj, C_UPROBE) == 4
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()


def test_uprobe_on_a_library_by_name(obj: BPFObject) -> None:
    with obj.programs["on_uprobe"].attach_uprobe("libc", "getppid", pid=PID):
        for _ in range(3):
            ctypes.CDLL(None).getppid()
    assert count(obj, C_UPROBE) == 3


def test_uprobe_bad_arguments_name_what_was_not_found(obj: BPFObject, target_bin: Path) -> None:
    prog = obj.programs["on_uprobe"]
    with pytest.raises(BPFError, match="binary /nonexistent/bin not found"):
        prog.attach_uprobe("/nonexistent/bin", "main")
    with pytest.raises(BPFError, match=f"no symbol 'no_such_function' in {target_bin}") as info:
        prog.attach_uprobe(target_bin, "no_such_function")
    assert info.value.errno == errno.ENOENT
    with pytest.raises(BPFError, match="library 'libnosuchlibplb' not found"):
        prog.attach_uprobe("libnosuchlibplb", "f")
    with pytest.raises(ValueError, match="needs symbol= or a file offset="):
        prog.attach_uprobe(target_bin)
    with pytest.raises(ValueError, match="pid must be >= -1"):
        prog.attach_uprobe(target_bin, "plb_target", pid=-2)


def test_usdt(obj: BPFObject, target_bin: Path) -> None:
    with obj.programs["on_usdt"].attach_usdt(target_bin, "plbtest", "tick", cookie=0xC0FFEE):
        run_target(target_bin, 4)
    assert count(obj, C_USDT) == 4
    assert count(obj, C_USDT_ARG) == 3  # the last probe's argument
    assert count(obj, C_USDT_COOKIE) == 0xC0FFEE
    with pytest.raises(BPFError, match=f"no USDT probe plbtest:nope in {target_bin}"):
        obj.programs["on_usdt"].attach_usdt(target_bin, "plbtest", "nope")


# --- perf events ------------------------------------------------------------------------------------

def test_perf_event_sampling_on_every_cpu_fills_a_stack_map(obj: BPFObject) -> None:
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        set_target(obj, burner.pid)
        links = obj.programs["on_sample"].attach_perf_event("cpu-clock", frequency=400)
        try:
            assert len(links) == len(features.online_cpus())
            assert wait_until(lambda: count(obj, C_OWN_SAMPLES) >= 20, timeout=60)
        finally:
            for link in links:
                link.destroy()
        ids = list(obj.maps["stack_counts"].keys())  # typed: u32 stack ids
        assert ids
        frames = obj.maps["stacks"].raw.lookup(ids[0])
        assert isinstance(frames, bytes) and any(struct.unpack(f"<{len(frames) // 8}Q", frames))
        settled = count(obj, C_SAMPLES)
        time.sleep(0.1)
        assert count(obj, C_SAMPLES) == settled  # the links owned the perf events: all closed
    finally:
        burner.kill()
        burner.wait()


def test_perf_event_with_a_period_on_chosen_cpus(obj: BPFObject) -> None:
    links = obj.programs["on_sample"].attach_perf_event("page-faults", period=1, cpus=[0])
    try:
        assert len(links) == 1
        set_target(obj, PID)
        os.sched_setaffinity(0, {0})
        try:
            # A fresh anonymous mapping, written page by page: one page fault per page on CPU 0.
            # (A zeroed bytearray may come from calloc'd pages that are never touched.)
            with mmap.mmap(-1, 8 << 20) as pages:
                for offset in range(0, len(pages), mmap.PAGESIZE):
                    pages[offset] = 1
        finally:
            os.sched_setaffinity(0, set(features.online_cpus()))
        assert count(obj, C_OWN_SAMPLES) > 0
    finally:
        for link in links:
            link.destroy()


def test_hardware_events_say_why_they_are_missing(obj: BPFObject) -> None:
    if features.hardware_pmu():
        for link in obj.programs["on_sample"].attach_perf_event("cycles", cpus=[0]):
            link.destroy()
        return
    with pytest.raises(BPFError, match="hardware event 'cycles' is not available: this machine exposes no "
                       "hardware PMU"):
        obj.programs["on_sample"].attach_perf_event("cycles")


def test_perf_event_bad_arguments(obj: BPFObject) -> None:
    prog = obj.programs["on_sample"]
    with pytest.raises(ValueError, match="unknown perf event 'cpu-clocks'"):
        prog.attach_perf_event("cpu-clocks")
    with pytest.raises(ValueError, match="frequency= or period=, not both"):
        prog.attach_perf_event(frequency=99, period=1000)
    with pytest.raises(ValueError, match=r"cpus \[4096\] are not online"):
        prog.attach_perf_event(cpus=[4096])
    with pytest.raises(ValueError, match="frequency must be >= 1"):
        prog.attach_perf_event(frequency=0)


# --- network: xdp and tcx inside namespaces of our own ----------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNET = 0x40000000


@contextlib.contextmanager
def in_netns(name: str) -> Iterator[None]:
    """Run the block with this thread in network namespace `name` (interfaces resolve there)."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    target = os.open(f"/run/netns/{name}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(target, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns")
        try:
            yield
        finally:
            if _libc.setns(own, _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back")
    finally:
        os.close(own)
        os.close(target)


@pytest.fixture
def veth_pair() -> Iterator[tuple[str, str, str]]:
    """(namespace B, interface in B, B's address): a veth pair between two namespaces of this run."""
    ns_a, ns_b = f"plbA{PID}", f"plbB{PID}"
    veth_a, veth_b = f"va{PID}"[:15], f"vb{PID}"[:15]
    ip = ["ip"]
    try:
        for cmd in ([*ip, "netns", "add", ns_a], [*ip, "netns", "add", ns_b],
                    [*ip, "link", "add", veth_a, "netns", ns_a, "type", "veth", "peer", "name", veth_b,
                     "netns", ns_b],
                    [*ip, "-n", ns_a, "addr", "add", "192.0.2.1/24", "dev", veth_a],
                    [*ip, "-n", ns_b, "addr", "add", "192.0.2.2/24", "dev", veth_b],
                    [*ip, "-n", ns_a, "link", "set", veth_a, "up"],
                    [*ip, "-n", ns_b, "link", "set", veth_b, "up"]):
            subprocess.run(cmd, check=True, capture_output=True)
        yield ns_b, veth_b, ns_a
    finally:
        for ns in (ns_a, ns_b):
            subprocess.run([*ip, "netns", "del", ns], capture_output=True)


def send_udp(ns: str, count: int) -> None:
    """`count` UDP datagrams from namespace `ns` to 192.0.2.2 (the other end of the veth)."""
    with in_netns(ns), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for i in range(count):
            s.sendto(b"plb%d" % i, ("192.0.2.2", 9))


def test_xdp_and_tcx_count_packets_on_a_veth(obj: BPFObject, veth_pair: tuple[str, str, str]) -> None:
    ns_b, veth_b, ns_a = veth_pair
    with in_netns(ns_b):
        xdp = obj.programs["xdp_count"].attach_xdp(veth_b, mode="generic")
        tcx = obj.programs["tcx_count"].attach_tcx(veth_b, "ingress")
    try:
        assert xdp.c_ptr == ffi.NULL and xdp.fd >= 0  # a kernel link fd: the mode needs BPF_LINK_CREATE flags
        send_udp(ns_a, 10)
        assert wait_until(lambda: count(obj, C_XDP) >= 10 and count(obj, C_TCX) >= 10)
    finally:
        xdp.destroy()
        tcx.destroy()
    before = count(obj, C_XDP), count(obj, C_TCX)
    send_udp(ns_a, 3)
    assert (count(obj, C_XDP), count(obj, C_TCX)) == before


def test_xdp_default_mode_and_egress(obj: BPFObject, veth_pair: tuple[str, str, str]) -> None:
    ns_b, veth_b, ns_a = veth_pair
    with in_netns(ns_b):
        index = socket.if_nametoindex(veth_b)
        with obj.programs["xdp_count"].attach_xdp(index), \
                obj.programs["tcx_count"].attach_tcx(veth_b, direction="egress"):
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(b"out", ("192.0.2.1", 9))  # leaves through veth_b: tcx egress
            send_udp(ns_a, 5)
            assert wait_until(lambda: count(obj, C_XDP) >= 5 and count(obj, C_TCX) >= 1)


def test_no_such_interface(obj: BPFObject) -> None:
    with pytest.raises(BPFError, match="no network interface named 'plbnope0'") as info:
        obj.programs["xdp_count"].attach_xdp("plbnope0")
    assert info.value.errno == errno.ENODEV
    with pytest.raises(BPFError, match="no network interface with index 999999"):
        obj.programs["tcx_count"].attach_tcx(999999)
    with pytest.raises(ValueError, match="mode must be one of"):
        obj.programs["xdp_count"].attach_xdp("lo", mode="offload")


# --- cgroups ----------------------------------------------------------------------------------------

@pytest.fixture
def child_cgroup() -> Iterator[Path]:
    """A cgroup v2 directory of this run (cgroup2 mounted first where it is not)."""
    root = features.cgroup2_mount()
    if root is None:
        root = f"/tmp/plb_cgroup2_{PID}"
        os.makedirs(root, exist_ok=True)
        subprocess.run(["mount", "-t", "cgroup2", "none", root], check=True)
    path = Path(root) / f"plb_test_{PID}"
    path.mkdir()
    try:
        yield path
    finally:
        assert wait_until(lambda: not (path / "cgroup.procs").read_text().strip())
        path.rmdir()


def test_cgroup_counts_sockets_of_a_process_moved_in(obj: BPFObject, child_cgroup: Path) -> None:
    with obj.programs["sock_create"].attach_cgroup(child_cgroup):
        socket.socket().close()  # this process is not in the cgroup
        assert count(obj, C_SOCK) == 0
        script = (f"import os, socket\nopen({str(child_cgroup / 'cgroup.procs')!r}, 'w').write(str(os.getpid()))\n"
                  "for _ in range(3): socket.socket().close()\n")
        subprocess.run([sys.executable, "-c", script], check=True)
        assert count(obj, C_SOCK) == 3


def test_cgroup_bad_paths(obj: BPFObject, tmp_path: Path) -> None:
    prog = obj.programs["sock_create"]
    with pytest.raises(BPFError, match="no cgroup directory /nonexistent/cg") as info:
        prog.attach_cgroup("/nonexistent/cg")
    assert info.value.errno == errno.ENOENT
    with pytest.raises(BPFError, match=f"{tmp_path} is not a cgroup v2 directory") as info:
        prog.attach_cgroup(tmp_path)
    assert info.value.errno == errno.ENOTDIR


# --- iterators --------------------------------------------------------------------------------------

def test_task_iterator_lists_this_process(obj: BPFObject) -> None:
    with obj.programs["dump_task"].attach_iter() as link:
        first = link.read().decode()
        assert f"\n{PID} " in "\n" + first
        assert link.read().decode().count("\n") > 1  # a link runs the iterator again on every read
    with pytest.raises(TypeError, match="not an iterator"), \
            obj.programs["count_raw"].attach_raw_tracepoint("sys_enter") as raw:
        raw.read()


# --- pinning, reopening, updating -------------------------------------------------------------------

@pytest.fixture
def pin_dir(tmp_path: Path) -> Iterator[Path]:
    """A bpffs instance of this test's own (each bpf mount is a new one), unmounted afterwards."""
    d = tmp_path / "bpffs"
    d.mkdir()
    subprocess.run(["mount", "-t", "bpf", "bpf", str(d)], check=True)
    try:
        yield d
    finally:
        subprocess.run(["umount", str(d)], check=True)


def test_pinned_link_outlives_its_link_and_reopens(obj: BPFObject, pin_dir: Path) -> None:
    path = pin_dir / "raw_link"
    link = obj.programs["count_raw"].attach_raw_tracepoint("sys_enter")
    link.pin(path)
    assert link.pin_path == str(path)
    link.destroy()
    os.getppid()
    assert count(obj, C_RAW) > 0  # still attached through the pin
    with Link.open_pinned(path) as again:
        assert again.fd >= 0 and again.pin_path == str(path)
        again.unpin()
        assert not path.exists()
    settled = count(obj, C_RAW)
    os.getppid()
    assert count(obj, C_RAW) == settled  # last holder gone: detached
    with pytest.raises(BPFError) as info:
        Link.open_pinned(path)
    assert info.value.errno == errno.ENOENT


def test_update_program_swaps_atomically(obj: BPFObject) -> None:
    with obj.programs["dump_task"].attach_iter() as link:
        assert f"\n{PID} " in "\n" + link.read().decode()
        link.update_program(obj.programs["dump_pids"])
        assert f"pid {PID}\n" in link.read().decode()
        with pytest.raises(BPFError) as info:
            link.update_program(obj.programs["run_me"])  # another program type
        assert info.value.errno == errno.EINVAL
    with obj.programs["count_raw"].attach_raw_tracepoint("sys_enter") as raw, pytest.raises(BPFError) as info:
        raw.update_program(obj.programs["alt_raw"])  # raw tracepoint links cannot be updated
    assert info.value.errno == errno.EOPNOTSUPP or info.value.errno == errno.EINVAL


def test_pinned_program_reopens_and_runs(obj: BPFObject, pin_dir: Path) -> None:
    path = pin_dir / "run_me"
    obj.programs["run_me"].pin(path)
    with Program.open_pinned(path) as again:
        assert again.name == "run_me" and again.type == obj.programs["run_me"].type
        assert again.c_ptr == ffi.NULL  # it owns an fd, not a libbpf program
        again.test_run()
        assert count(obj, C_RUN_ME) == 1
    obj.programs["run_me"].unpin(path)
    assert not path.exists()
    with pytest.raises(BPFError) as info:
        obj.programs["run_me"].pin("/tmp/not_bpffs_plb")
    assert info.value.errno == errno.EINVAL


# --- statistics -------------------------------------------------------------------------------------

def test_stats_count_test_runs_while_enabled(obj: BPFObject) -> None:
    prog = obj.programs["run_me"]
    with enable_stats() as stats:
        start = prog.stats()
        for _ in range(3):
            prog.test_run()
        now = prog.stats()
    assert stats.closed
    assert isinstance(now, ProgramStats)
    assert now.run_count - start.run_count == 3
    assert now.run_time_ns > start.run_time_ns


# --- features ---------------------------------------------------------------------------------------

def test_features_answer_from_the_kernel() -> None:
    assert features.program_type("tracepoint") and features.program_type("XDP")
    assert features.map_type("user_ringbuf") and features.map_type("stack_trace")
    assert features.helper("perf_event", "get_stackid")
    assert not features.helper("socket_filter", "override_return")
    assert features.uprobes()
    with pytest.raises(ValueError, match="unknown program type 'nope'"):
        features.program_type("nope")
    with pytest.raises(ValueError, match="unknown helper 'nope'"):
        features.helper("xdp", "nope")
    report = features.report()
    assert report["kprobes"] == features.kprobes() and report["map_type(user_ringbuf)"]


def test_features_command_explains_what_is_missing() -> None:
    proc = subprocess.run([sys.executable, "-m", "pylibbpf", "features"], capture_output=True, text=True,
                          check=True, env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent)))
    lines = {line.split("  ")[0].strip(): line for line in proc.stdout.splitlines()}
    assert lines["attach_tracepoint"].endswith("yes")
    assert lines["attach_kprobe"].endswith("yes" if features.kprobes() else "no: missing kprobes")
    assert lines["attach_perf_event (hardware events)"].endswith(
        "yes" if features.hardware_pmu() else "no: missing hardware_pmu")


# --- the user ring buffer ---------------------------------------------------------------------------

def drain(o: BPFObject) -> int:
    return o.programs["drain_user"].test_run().retval


def test_user_ring_buffer_drained_by_bpf(obj: BPFObject) -> None:
    with UserRingBuffer(obj.maps["urb"]) as urb:
        for v in (1, 2, 3, 40):
            urb.submit(v.to_bytes(8, "little"))
        assert drain(obj) == 4
        assert count(obj, C_DRAINED_SUM) == 46 and count(obj, C_DRAINED) == 4
        assert drain(obj) == 0


def test_user_ring_buffer_full_wait_and_interruption(obj: BPFObject) -> None:
    urb = UserRingBuffer(obj.maps["urb"])
    record = (7).to_bytes(8, "little")
    fitted = 0
    with pytest.raises(TimeoutError, match="no room for 8 bytes"):
        while True:
            urb.submit(record, timeout=0)
            fitted += 1
    assert fitted == 4096 // 16  # 8-byte header + 8-byte record each
    done = threading.Event()
    errors: list[BaseException] = []

    def blocked_submit() -> None:
        try:
            urb.submit(record)
            done.set()
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=blocked_submit)
    t.start()
    time.sleep(0.2)
    assert not done.is_set()  # the ring is full: it waits
    assert drain(obj) == fitted  # the kernel drains and wakes the producer
    t.join(30)
    assert done.is_set() and not errors
    while True:  # fill again, then interrupt a blocked submit with close()
        try:
            urb.submit(record, timeout=0)
        except TimeoutError:
            break
    t = threading.Thread(target=blocked_submit)
    t.start()
    time.sleep(0.2)
    urb.close()
    t.join(30)
    assert not t.is_alive() and len(errors) == 1 and isinstance(errors[0], ClosedError)
    urb.close()  # idempotent
    with pytest.raises(ClosedError):
        urb.submit(record)


def test_user_ring_buffer_too_large_and_wrong_map(obj: BPFObject) -> None:
    with UserRingBuffer(obj.maps["urb"]) as urb:
        assert urb.max_record_size == 4096 - 8
        with pytest.raises(ValueError, match="a record of 5000 bytes can never fit this 4096-byte ring"):
            urb.submit(bytes(5000))
        with pytest.raises(TypeError, match="data must be bytes-like"):
            urb.submit("text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="UserRingBuffer needs a user_ringbuf map; map 'counts' is array"):
        UserRingBuffer(obj.maps["counts"])
