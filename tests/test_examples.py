"""The examples (examples/*.py) run as a person would run them, on the real kernel."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

pytestmark = pytest.mark.usefixtures("bpf_privileged")


def example(name: str, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, str(EXAMPLES / name), *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_profile_example_counts_the_stacks_of_a_busy_process() -> None:
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        proc = example("profile.py", "--frequency", "300", "--duration", "3", "--pid", str(burner.pid),
                       "--top", "3")
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    finally:
        burner.kill()
        burner.wait()
    samples = int(re.search(r"^(\d+) samples", out, re.M).group(1))  # type: ignore[union-attr]
    assert samples >= 50  # 300 Hz for 3 s on a busy process, with room for a loaded machine
    tops = re.findall(r"^\s+(\d+)  (\S+) \((\d+)\)$", out, re.M)
    assert tops and all(int(pid) == burner.pid for _, _, pid in tops)  # filtered in the kernel
    assert re.search(r"^\s+0x[0-9a-f]{16}$", out, re.M)  # frames from the stack map


def test_uprobe_count_example_counts_calls_per_process(tmp_path: Path) -> None:
    src = tmp_path / "callee.c"
    src.write_text("__attribute__((noinline, used)) int plb_callee(int x) { __asm__ volatile(\"\"); return x; }\n"
                   "int main(void) { int s = 0; for (int i = 0; i < 25; i++) s += plb_callee(i); return s != 300; }\n")
    binary = tmp_path / "callee"
    subprocess.run(["gcc", "-O1", "-o", str(binary), str(src)], check=True)
    proc = example("uprobe_count.py", str(binary), "plb_callee", "--duration", "3")
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        runs = [subprocess.Popen([str(binary)]) for _ in range(2)]
        pids = {r.pid for r in runs}
        assert all(r.wait(timeout=30) == 0 for r in runs)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    rows = {int(pid): int(calls) for pid, calls in re.findall(r"^\s+(\d+)\s+(\d+)$", out, re.M)}
    assert rows == {pid: 25 for pid in pids}
