"""``pylibbpf profile`` names frames as an independent reference does: at least 99% of them identically.

Two workloads run while the command samples every CPU: a C program (frame
pointers kept) looping over file I/O, getppid() and page faults, so that its
kernel stacks pass through many kernel paths and system-call aliases; and a
CPU-bound Python program (the interpreter's C code, frames through a stack
walk that often lands in data: those must print as ``[unknown]``). Every frame
of their stacks in ``--json`` is then named again by tests/symref.py (its own
reading of /proc/kallsyms with the documented alias rule, and pyelftools over
the mapped files) and compared. The machine is shared: the command runs again
until enough frames were seen, up to a deadline.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from symref import KernelReference, ProcessReference

from pylibbpf.cli import BUNDLED_DIR

ROOT = Path(__file__).resolve().parent.parent
DEADLINE = 180.0

WORKLOAD = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static char buf[4096];

__attribute__((noinline)) void plb_file_io(int fd)
{
	pwrite(fd, buf, sizeof(buf), 0);
	pread(fd, buf, sizeof(buf), 0);
}

__attribute__((noinline)) void plb_getppid(void)
{
	for (int i = 0; i < 200; i++)
		getppid();
}

__attribute__((noinline)) void plb_faults(void)
{
	size_t len = 64 * 4096;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	for (size_t i = 0; i < len; i += 4096)
		p[i] = 1;
	munmap(p, len);
}

int main(int argc, char **argv)
{
	int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		plb_file_io(fd);
		plb_getppid();
		plb_faults();
	}
}
"""

PYTHON_WORKLOAD = """
import sys
print("ready", flush=True)
while True:
    sorted(range(2000), key=lambda x: -x)
    "-".join(str(i) for i in range(500))
"""


@pytest.fixture(scope="module", autouse=True)
def bundled_programs(bpf_privileged: None) -> None:
    import build_bpf  # tools/, on sys.path through conftest

    build_bpf.build(ROOT / "csrc" / "bpf", BUNDLED_DIR, vmlinux_dir=ROOT / "build" / "bpf")


@pytest.fixture(scope="module")
def workloads(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, str]]:
    d = tmp_path_factory.mktemp("profile-names")
    (d / "work.c").write_text(WORKLOAD)
    exe = d / "plb_work"
    subprocess.run(["gcc", "-O1", "-fno-omit-frame-pointer", "-o", str(exe), str(d / "work.c")],
                   check=True, capture_output=True)
    procs = [subprocess.Popen([str(exe), str(d / "data")], stdout=subprocess.PIPE, text=True),
             subprocess.Popen([sys.executable, "-c", PYTHON_WORKLOAD], stdout=subprocess.PIPE, text=True)]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == "ready\n"
        yield {procs[0].pid: "c", procs[1].pid: "python"}
    finally:
        for p in procs:
            p.kill()
            p.wait(30)
            if p.stdout:
                p.stdout.close()


def _sample(pids: dict[int, str]) -> list[dict[str, object]]:
    done = subprocess.run([sys.executable, "-m", "pylibbpf", "profile", "--json", "--duration", "2", "-F", "199"],
                          capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 0, done.stderr
    return [s for s in json.loads(done.stdout)["stacks"] if s["pid"] in pids]


def test_frames_are_named_as_the_reference_names_them(workloads: dict[int, str]) -> None:
    kernel_frames: list[tuple[int, str | None]] = []
    user_frames: dict[str, list[tuple[int, int, str | None]]] = {"c": [], "python": []}
    deadline = time.monotonic() + DEADLINE
    while True:
        for stack in _sample(workloads):
            kernel_frames += [(f["address"], f["name"]) for f in stack["kernel"]]  # type: ignore[attr-defined]
            user_frames[workloads[stack["pid"]]] += [  # type: ignore[index]
                (stack["pid"], f["address"], f["name"]) for f in stack["user"]]  # type: ignore[attr-defined]
        enough = len(kernel_frames) >= 100 and all(len(v) >= 50 for v in user_frames.values())
        if enough or time.monotonic() > deadline:
            break
    assert len(kernel_frames) >= 100 and all(len(v) >= 50 for v in user_frames.values()), \
        f"too few frames sampled: {len(kernel_frames)} kernel, { {k: len(v) for k, v in user_frames.items()} } user"

    kernel = KernelReference()
    processes = {pid: ProcessReference(pid) for pid in workloads}
    compared = [(name, kernel.name(addr)) for addr, name in kernel_frames]
    for frames in user_frames.values():
        compared += [(name, processes[pid].name(addr)) for pid, addr, name in frames]
    different = [(got, want) for got, want in compared if got != want]
    assert len(different) <= len(compared) // 100, (len(different), len(compared), different[:20])
    # the workloads' own functions and the kernel paths they take are among the names
    names = {got for got, _ in compared}
    assert {"plb_getppid", "plb_file_io", "plb_faults"} & names
    assert any(n and n.startswith("__x64_sys_") for n in names) or sys.platform != "linux"
    assert None in {want for _, want in compared}  # the Python workload's stack walk lands outside code
