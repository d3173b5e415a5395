"""Test setup: kernel file systems, privilege policy, BPF test objects, the fd-leak and thread checks.

BPF tests need CAP_BPF/CAP_SYS_ADMIN. Without them they skip, unless
PYLIBBPF_REQUIRE_BPF=1 (set by `make test` and CI), which turns the skip into
a failure: in CI the BPF tests must run.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pylibbpf import BPFObject

ROOT = Path(__file__).resolve().parent.parent
BPF_SRC = ROOT / "tests" / "bpf"
BPF_OUT = BPF_SRC / "build"
sys.path.insert(0, str(ROOT / "tools"))

REQUIRE_BPF = os.environ.get("PYLIBBPF_REQUIRE_BPF") == "1"


def _mounted(fstype: str, where: str) -> bool:
    with open("/proc/self/mounts") as mounts:
        return any(line.split()[1:3] == [where, fstype] for line in mounts)


def _mount(fstype: str, where: str, probe: str) -> None:
    """Mount a kernel file system when it is missing (tracefs for tracepoints, bpffs for pins)."""
    if os.path.exists(os.path.join(where, probe)) if probe else _mounted(fstype, where):
        return
    os.makedirs(where, exist_ok=True)
    subprocess.run(["mount", "-t", fstype, fstype, where], check=False, capture_output=True)


def _bpf_privilege_problem() -> str | None:
    """None when this process can create BPF maps, else why not."""
    from pylibbpf import ffi, lib

    fd = lib.bpf_map_create(lib.BPF_MAP_TYPE_ARRAY, b"plb_probe", 4, 4, 1, ffi.NULL)
    if fd < 0:
        return f"cannot create BPF maps: {os.strerror(-fd)} (needs root or CAP_BPF+CAP_PERFMON)"
    os.close(fd)
    return None


@pytest.fixture(scope="session")
def bpf_privileged() -> None:
    """Skip (or fail, under PYLIBBPF_REQUIRE_BPF=1) when BPF is not usable here."""
    problem = _bpf_privilege_problem()
    if problem:
        if REQUIRE_BPF:
            pytest.fail(f"PYLIBBPF_REQUIRE_BPF=1 but {problem}")
        pytest.skip(problem)
    _mount("tracefs", "/sys/kernel/tracing", "events")
    _mount("bpf", "/sys/fs/bpf", "")
    if not _mounted("bpf", "/sys/fs/bpf"):
        pytest.fail("bpffs is not mounted at /sys/fs/bpf and mounting it failed")


@pytest.fixture
def bpffs_dir(bpf_privileged: None) -> Iterator[Path]:
    """A directory of its own on bpffs for this test (pid in the name), removed with what is pinned in it."""
    path = Path("/sys/fs/bpf") / f"pylibbpf-test-{os.getpid()}-{threading.get_ident()}"
    path.mkdir()
    try:
        yield path
    finally:
        for pinned in path.iterdir():
            pinned.unlink()
        path.rmdir()


@pytest.fixture(scope="session")
def bpf_objects(bpf_privileged: None) -> dict[str, Path]:
    """The test BPF programs (tests/bpf/*.bpf.c), compiled once per session: name -> .bpf.o path."""
    import build_bpf

    return {p.name[: -len(".bpf.o")]: p for p in build_bpf.build(BPF_SRC, BPF_OUT)}


@pytest.fixture
def rb_obj(bpf_objects: dict[str, Path]) -> Iterator[BPFObject]:
    """ringbuf.bpf.o, loaded (closed after the test)."""
    with BPFObject.open(bpf_objects["ringbuf"]) as o:
        yield o.load()


@pytest.fixture
def perf_obj(bpf_objects: dict[str, Path]) -> Iterator[BPFObject]:
    """perfbuf.bpf.o, loaded (closed after the test)."""
    with BPFObject.open(bpf_objects["perfbuf"]) as o:
        yield o.load()


@pytest.fixture
def no_consumer_thread_left() -> Iterator[None]:
    """Fail a test that leaves a consumer thread running: stop() joins every one."""
    yield
    left = [t.name for t in threading.enumerate() if t.name.startswith("pylibbpf-")]
    assert not left, f"consumer threads still running: {left}"


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture(autouse=True)
def no_fd_leak(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that leaves file descriptors open (after a garbage collection)."""
    gc.collect()
    before = _open_fds()
    yield
    gc.collect()
    leaked = _open_fds() - before
    details = []
    for fd in sorted(leaked, key=int):
        try:
            details.append(f"{fd} -> {os.readlink(f'/proc/self/fd/{fd}')}")
        except OSError:
            pass  # the listing's own fd, gone already
    if details:
        pytest.fail(f"{request.node.name} leaked file descriptors: {', '.join(details)}")


@pytest.fixture
def obj(request: pytest.FixtureRequest, bpf_objects: dict[str, Path]) -> Iterator[BPFObject]:
    """The test module's BPF object (its ``BPF_OBJECT``, a name in tests/bpf/build), loaded; closed after.

    A module that sets its object up otherwise (globals before load, ...) defines its own ``obj``.
    """
    name = getattr(request.module, "BPF_OBJECT", None)
    if name is None:
        pytest.fail(f"{request.module.__name__} uses the obj fixture but sets no BPF_OBJECT")
    with BPFObject.open(bpf_objects[name]) as o:
        o.load()
        yield o
