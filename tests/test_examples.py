"""The examples (examples/*.py) run as a person would run them, on the real kernel, with public names only."""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import pylibbpf

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

@pytest.fixture(scope="module")
def sigsnoop_object() -> Path:
    sys.path.insert(0, str(EXAMPLES))
    from build_objects import object_path

    return object_path("sigsnoop")


def run_sigsnoop(obj: Path, *options: str, send: list[tuple[int, int]]) -> list[list[str]]:
    """Start sigsnoop filtered on this process, send ``(pid, sig)`` signals once it traces, stop it."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    tool = subprocess.Popen([sys.executable, str(EXAMPLES / "sigsnoop.py"), "--object", str(obj),
                             "-p", str(os.getpid()), "-i", "0.2", *options],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert tool.stderr is not None
        ready = tool.stderr.readline()  # printed once the program is attached
        assert "tracing signals" in ready, ready + tool.stderr.read()
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(tool.stdout or ()), daemon=True)
        reader.start()
        for pid, sig in send:
            os.kill(pid, sig)
        deadline = time.monotonic() + 30
        while not any(line.startswith("interval") for line in list(lines)) and time.monotonic() < deadline:
            time.sleep(0.05)  # until an interval's counts were read with pop_items
        tool.send_signal(signal.SIGTERM)
        tool.wait(timeout=60)
        reader.join(timeout=60)
        err = tool.stderr.read()
    finally:
        if tool.poll() is None:
            tool.kill()
            tool.wait()
        for stream in (tool.stdout, tool.stderr):
            if stream is not None:
                stream.close()
    assert tool.returncode == 0, err
    return [line.split() for line in lines]


def counted(lines: list[list[str]]) -> dict[str, int]:
    """Counts by signal name, summed over the interval (pop_items) and final (lookup_batch) lines."""
    totals: dict[str, int] = {}
    for words in lines:
        if words and words[0] in ("interval", "rest") and words[1] == f"pid={os.getpid()}":
            sig = words[2].removeprefix("sig=")
            totals[sig] = totals.get(sig, 0) + int(words[3].removeprefix("n="))
    return totals


def test_sigsnoop_reports_events_and_counts(sigsnoop_object: Path) -> None:
    with subprocess.Popen(["sleep", "60"]) as target:
        try:
            sent = [(target.pid, signal.SIGUSR1)] * 3 + [(target.pid, signal.SIGCONT)] * 2
            lines = run_sigsnoop(sigsnoop_object, send=sent)
        finally:
            target.kill()
    events = [w for w in lines if w and w[0] == str(os.getpid()) and w[3] == str(target.pid)]
    assert [w[2] for w in events] == ["SIGUSR1"] * 3 + ["SIGCONT"] * 2
    # The SIGTERM that stopped the tool is ours too: counted before it was delivered.
    assert counted(lines) == {"SIGUSR1": 3, "SIGCONT": 2, "SIGTERM": 1}
    assert any(w[:1] == ["interval"] for w in lines)  # counts read with pop_items during the run


def test_sigsnoop_signal_filter_in_rodata(sigsnoop_object: Path) -> None:
    with subprocess.Popen(["sleep", "60"]) as target:
        try:
            sent = [(target.pid, signal.SIGCONT), (target.pid, signal.SIGUSR2), (target.pid, signal.SIGCONT)]
            lines = run_sigsnoop(sigsnoop_object, "-s", str(int(signal.SIGCONT)), send=sent)
        finally:
            target.kill()
    events = [w for w in lines if w and w[0] == str(os.getpid())]
    assert [w[2] for w in events] == ["SIGCONT", "SIGCONT"]  # SIGUSR2 and the SIGTERM that stopped it: filtered
    assert counted(lines) == {"SIGCONT": 2}


def test_examples_use_only_public_names() -> None:
    """No pylibbpf.lib/ffi, no private module, no private attribute: what a user may write (the
    generated skeletons, *_skel.py, are pylibbpf's code: tests/test_skel.py checks them)."""
    for path in EXAMPLES.glob("*.py"):
        if path.name.endswith("_skel.py"):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pylibbpf"):
                assert node.module == "pylibbpf", f"{path.name}: imports {node.module}"
                for alias in node.names:
                    assert alias.name in pylibbpf.__all__ and alias.name not in ("lib", "ffi"), alias.name
            if isinstance(node, ast.Attribute):
                assert not node.attr.startswith("_") or node.attr.startswith("__"), f"{path.name}: .{node.attr}"
                assert node.attr not in ("lib", "ffi", "c_ptr"), f"{path.name}: .{node.attr}"
