"""Links kept by their object, links that outlive it, links across fork, and pins checked before use.

Real kernel: tests/bpf/tracepoint.bpf.c counts getpid() per tgid, tests/bpf/programs.bpf.c has the
USDT, perf_event and XDP programs (tests/test_program.py's target binary and veth pair).
"""

from __future__ import annotations

import errno
import gc
import mmap
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_program import C_OWN_SAMPLES, count, in_netns, pin_dir, set_target, target_bin, veth_pair

from pylibbpf import BPFError, BPFObject, Link, Program, features, lib

pytestmark = pytest.mark.usefixtures("bpf_privileged")
__all__ = ["pin_dir", "target_bin", "veth_pair"]  # fixtures shared with test_program

ROOT = Path(__file__).resolve().parent.parent
PID = os.getpid()


def link_id(link: Link) -> int:
    with open(f"/proc/self/fdinfo/{link.fd}") as info:
        return next(int(line.split(":")[1]) for line in info if line.startswith("link_id:"))


def link_exists(kernel_id: int) -> bool:
    fd = lib.bpf_link_get_fd_by_id(kernel_id)
    if fd >= 0:
        os.close(fd)
    return fd >= 0


def getpid_count(obj: BPFObject) -> int:
    return int(obj.maps["calls"].get(PID, 0))


@pytest.fixture
def tp(bpf_objects: dict[str, Path]) -> Iterator[BPFObject]:
    with BPFObject.open(bpf_objects["tracepoint"]) as o:
        o.load()
        yield o


def test_links_the_caller_drops_stay_attached_until_the_object_closes(tp: BPFObject) -> None:
    tp.attach_all()  # the list of links is dropped at once
    gc.collect()
    before = getpid_count(tp)
    for _ in range(5):
        os.getpid()
    assert getpid_count(tp) >= before + 5  # still attached
    ids = [link_id(link) for link in tp.links]
    assert len(ids) == 1 and all(link_exists(i) for i in ids)
    tp.close()
    assert not any(link_exists(i) for i in ids)  # nobody held them: detached with the object


def test_destroy_detaches_on_purpose_and_the_object_forgets_it(tp: BPFObject) -> None:
    link = tp.programs["count_getpid"].attach()
    link.destroy()
    settled = getpid_count(tp)
    for _ in range(3):
        os.getpid()
    assert getpid_count(tp) == settled and tp.links == []


def test_a_link_the_caller_holds_outlives_its_object(tp: BPFObject) -> None:
    link = tp.programs["count_getpid"].attach()
    kept = link_id(link)
    tp.close()
    assert link_exists(kept) and not link.destroyed and link.fd >= 0
    link.destroy()
    assert not link_exists(kept)


def test_usdt_links_destroyed_after_their_object_closed_do_not_crash(target_bin: Path) -> None:
    code = f"""
        from pylibbpf import BPFObject
        obj = BPFObject.open("tests/bpf/build/programs.bpf.o").load()
        first = obj.programs["on_usdt"].attach_usdt({str(target_bin)!r}, "plbtest", "tick", cookie=1)
        second = obj.programs["on_usdt"].attach_usdt({str(target_bin)!r}, "plbtest", "tick", cookie=2)
        first.destroy()
        obj.close()
        second.destroy()
        third_obj = BPFObject.open("tests/bpf/build/programs.bpf.o").load()
        third = third_obj.programs["on_usdt"].attach_usdt({str(target_bin)!r}, "plbtest", "tick")
        third_obj.close()
        del third  # collected after its object closed
        print("ok")
        """
    for _ in range(3):
        result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                                cwd=ROOT, timeout=120)
        assert (result.returncode, result.stdout.strip()) == (0, "ok"), result.stderr[-2000:]


def test_a_forked_child_destroying_its_links_leaves_the_parent_sampling(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["programs"]) as obj:
        obj.load()
        set_target(obj, PID)
        links = obj.programs["on_sample"].attach_perf_event("page-faults", period=1, cpus=[0])
        try:
            child = os.fork()
            if child == 0:  # the child's copies: destroyed and closed, the parent's event untouched
                try:
                    for link in links:
                        link.destroy()
                    obj.close()
                finally:
                    os._exit(0)
            _, status = os.waitpid(child, 0)
            assert os.waitstatus_to_exitcode(status) == 0
            before = count(obj, C_OWN_SAMPLES)
            os.sched_setaffinity(0, {0})
            try:
                with mmap.mmap(-1, 4 << 20) as pages:  # one page fault per page, on CPU 0
                    for offset in range(0, len(pages), mmap.PAGESIZE):
                        pages[offset] = 1
            finally:
                os.sched_setaffinity(0, set(features.online_cpus()))
            assert count(obj, C_OWN_SAMPLES) > before
        finally:
            for link in links:
                link.destroy()


def test_open_pinned_checks_what_the_pin_holds(tp: BPFObject, pin_dir: Path) -> None:
    map_pin = pin_dir / "calls"
    tp.maps["calls"].pin(map_pin)
    with pytest.raises(BPFError, match=r"calls holds a pinned map, not a program") as info:
        Program.open_pinned(map_pin)
    assert info.value.errno == errno.EINVAL
    with pytest.raises(BPFError, match=r"calls holds a pinned map, not a link") as info:
        Link.open_pinned(map_pin)
    assert info.value.errno == errno.EINVAL
    assert map_pin.exists()
    prog_pin = pin_dir / "prog"
    tp.programs["count_getpid"].pin(prog_pin)
    with pytest.raises(BPFError, match=r"prog holds a pinned program, not a link"):
        Link.open_pinned(prog_pin)


def test_unpin_removes_only_its_own_pin_on_bpffs(tp: BPFObject, pin_dir: Path, tmp_path: Path) -> None:
    prog = tp.programs["count_getpid"]
    pin = pin_dir / "prog"
    prog.pin(pin)
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    with Program.open_pinned(pin) as again:
        with pytest.raises(ValueError, match=r"path '.*precious.txt' is not on a BPF file system"):
            again.unpin(outside)
        assert outside.read_text() == "keep me"
        other_pin = pin_dir / "other"
        tp.programs["not_attachable"].pin(other_pin)
        with pytest.raises(BPFError, match=r"other pins another prog .*not this one") as info:
            again.unpin(other_pin)
        assert info.value.errno == errno.EINVAL and other_pin.exists()
        again.unpin(pin)
    assert not pin.exists()
    with pytest.raises(ValueError, match=r"is not on a BPF file system"):
        prog.unpin(outside)
    assert outside.exists()


def test_a_pinned_link_cannot_be_pinned_twice(bpf_objects: dict[str, Path], pin_dir: Path,
                                              veth_pair: tuple[str, str, str]) -> None:
    ns_b, veth_b, _ = veth_pair
    with BPFObject.open(bpf_objects["programs"]) as obj:
        obj.load()
        with in_netns(ns_b):
            xdp = obj.programs["xdp_count"].attach_xdp(veth_b, mode="generic")  # a kernel link fd
        first, second = pin_dir / "xdp1", pin_dir / "xdp2"
        xdp.pin(first)
        with pytest.raises(BPFError, match=r"already pinned at .*xdp1: unpin\(\) it first") as info:
            xdp.pin(second)
        assert info.value.errno == errno.EBUSY and not second.exists()
        kept = link_id(xdp)
        xdp.unpin()
        xdp.destroy()
        assert not first.exists() and not link_exists(kept)  # detached: no pin left behind


def test_link_read_names_a_bad_chunk(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["programs"]) as obj:
        obj.load()
        with obj.programs["dump_pids"].attach_iter() as link:
            for bad in (0, -1, 2**40):
                with pytest.raises(ValueError, match=rf"chunk must be (>= 1|<= 1073741824), got {bad}"):
                    link.read(chunk=bad)
            for bad in (None, 0.5):
                with pytest.raises(TypeError, match=r"chunk must be an int"):
                    link.read(chunk=bad)  # type: ignore[arg-type]
            assert f"pid {PID}\n" in link.read(chunk=7).decode()


def test_test_run_hands_back_the_context(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["programs"]) as obj:
        obj.load()
        xdp_md = bytes(24)  # struct xdp_md, as the kernel hands it back
        assert len(obj.programs["xdp_count"].test_run(data=bytes(64), ctx=xdp_md).ctx_out) == len(xdp_md)
        assert obj.programs["xdp_count"].test_run(data=bytes(64)).ctx_out == b""
        with pytest.raises(ValueError, match=r"repeat must be <= 2147483647, got 2147483648"):
            obj.programs["xdp_count"].test_run(data=bytes(64), repeat=2**31)


def test_a_syscall_program_s_context_comes_back_as_it_left_it(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["bytes_globals"]) as obj:
        obj.programs["bad"].autoload = False
        obj.load()
        run = obj.programs["double_args"].test_run(ctx=(21).to_bytes(8, "little") + (5).to_bytes(8, "little"))
        assert run.ctx_out == (42).to_bytes(8, "little") + (10).to_bytes(8, "little") and run.retval == 52


def test_a_missing_uprobe_binary_is_named_as_missing(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["programs"]) as obj:
        obj.load()
        with pytest.raises(BPFError, match=r"binary 'plb-no-such-binary' not found") as info:
            obj.programs["on_uprobe"].attach_uprobe("plb-no-such-binary", "main")
        assert info.value.errno == errno.ENOENT
