"""``pylibbpf runqlat`` on the real kernel, over a workload of sleeping threads the test starts.

Each of the workload's threads sleeps SLEEPS times; every sleep ends with a
wakeup and a switch onto a CPU, so the histogram of that process must count
at least THREADS * SLEEPS waits. The workload starts sleeping only after the
command said it is tracing (its "tracing ..." line), and is filtered by pid:
other engineers' processes share the machine.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from progs import TracingStderr, ctrl_c_after_line, with_default_sigint

from pylibbpf import btf
from pylibbpf.cli import BUNDLED_DIR
from pylibbpf.cli.runqlat import choose_flavour, cmd_runqlat, open_runqlat, read_histograms

COMMAND = [sys.executable, "-m", "pylibbpf", "runqlat"]
ROOT = Path(__file__).resolve().parent.parent
THREADS, SLEEPS = 4, 25
DEADLINE = 120.0

WORKLOAD = f"""
import sys, threading, time
sys.stdin.readline()
def sleeper():
    for _ in range({SLEEPS}):
        time.sleep(0.002)
threads = [threading.Thread(target=sleeper) for _ in range({THREADS})]
for t in threads: t.start()
for t in threads: t.join()
print("done", flush=True)
sys.stdin.readline()
"""


@pytest.fixture(scope="module", autouse=True)
def bundled_programs(bpf_privileged: None) -> None:
    import build_bpf  # tools/, on sys.path through conftest

    build_bpf.build(ROOT / "csrc" / "bpf", BUNDLED_DIR, vmlinux_dir=ROOT / "build" / "bpf")


class Workload:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", WORKLOAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        self.pid = self.proc.pid

    def run(self) -> None:
        """Sleep THREADS * SLEEPS times; returns once every thread is done."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline() == "done\n"

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=DEADLINE)
        self.proc.stdout.close()


@pytest.fixture
def workload() -> Iterator[Workload]:
    w = Workload()
    yield w
    w.close()


class Runqlat:
    """The command in a subprocess; stderr collected by a thread that notices the "tracing" line."""

    def __init__(self, *args: str) -> None:
        # SIGINT at its default action, whatever this process inherited: finish(SIGINT) is Ctrl-C.
        self.proc = subprocess.Popen(with_default_sigint([*COMMAND, *args]), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        watch = TracingStderr(self.proc)
        self.err, self.ready, self._thread = watch.lines, watch.ready, watch.thread

    def wait_ready(self) -> None:
        assert self.ready.wait(DEADLINE), "runqlat never started tracing"
        assert self.proc.poll() is None, "".join(self.err)

    def finish(self, sig: int | None = None) -> tuple[int, str]:
        """Send ``sig`` (if any) and wait for the end; a command still running after DEADLINE is killed."""
        try:
            if sig is not None:
                self.proc.send_signal(sig)
            out, _ = self.proc.communicate(timeout=DEADLINE)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.communicate()
            self._thread.join(DEADLINE)
        return self.proc.returncode, out


def test_histogram_counts_every_wakeup(workload: Workload) -> None:
    r = Runqlat("--pid", str(workload.pid), "--json")
    r.wait_ready()
    workload.run()
    code, out = r.finish(signal.SIGTERM)  # SIGTERM ends the run as Ctrl-C: the histogram is printed, exit 0
    assert code == 0, "".join(r.err)
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 1 and rows[0]["unit"] == "usecs"
    assert rows[0]["total"] >= THREADS * SLEEPS
    assert sum(b["count"] for b in rows[0]["buckets"]) == rows[0]["total"]


def test_text_per_process_and_sigint(workload: Workload) -> None:
    r = Runqlat("--pid", str(workload.pid), "--per-process")
    r.wait_ready()
    workload.run()
    code, out = r.finish(signal.SIGINT)
    assert code == 0, "".join(r.err)
    lines = out.splitlines()
    # one section per process, headed "pid = PID COMM" (bcc's section header); only the workload passes --pid
    assert [line for line in lines if line.startswith("pid = ")] == [f"pid = {workload.pid} {_comm(workload.pid)}"]
    header = lines.index("     usecs               : count    distribution")
    counts = [int(line.split(":")[1].split("|")[0]) for line in lines[header + 1:] if "->" in line]
    assert sum(counts) >= THREADS * SLEEPS


def test_ctrl_c_right_after_the_tracing_line_prints_the_histogram(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Regression: the "tracing ..." line was written before the try that turns Ctrl-C into the
    histogram, so a Ctrl-C at that moment ended the command with nothing printed."""
    ctrl_c_after_line(cmd_runqlat, ["runqlat", "--duration", "3600", "--json"], "tracing ", monkeypatch)
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 1 and rows[0]["unit"] == "usecs", rows


def _comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def test_intervals_and_count_end_the_run() -> None:
    r = Runqlat("--interval", "0.3", "--count", "3", "-m", "--json")
    r.wait_ready()
    code, out = r.finish()
    assert code == 0, "".join(r.err)
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 3 and all(row["unit"] == "msecs" for row in rows)


def test_closed_stdout_ends_with_status_0() -> None:
    proc = subprocess.Popen([*COMMAND, "--interval", "0.2", "--json"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    json.loads(proc.stdout.readline())  # the first interval: system-wide, never empty of lines
    proc.stdout.close()
    assert proc.wait(timeout=DEADLINE) == 0
    err = proc.stderr.read()
    proc.stderr.close()
    assert "Traceback" not in err and "Broken pipe" not in err


def test_duration_and_usage_errors() -> None:
    done = subprocess.run([*COMMAND, "--duration", "0.5"], capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("\n     usecs               : count    distribution\n")
    bad = subprocess.run([*COMMAND, "--count", "0"], capture_output=True, text=True, timeout=DEADLINE)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--count: must be > 0, got 0" in bad.stderr


@pytest.mark.parametrize("flavour", ["tp_btf", "raw_tp"])
def test_both_program_sets_count(workload: Workload, flavour: str) -> None:
    # The command picks tp_btf on this kernel; the raw_tp set is what older kernels get.
    obj, used = open_runqlat(pid=workload.pid, per_process=True, milliseconds=False, flavour=flavour)
    with obj:
        assert used == flavour
        loaded = {p.section.split("/")[0] for p in obj.programs.values() if p.fd >= 0}
        assert loaded == {flavour}
        links = obj.attach_all()
        try:
            workload.run()
            deadline = time.monotonic() + DEADLINE
            total = 0
            while total < THREADS * SLEEPS and time.monotonic() < deadline:
                hists = read_histograms(obj, clear=False)
                total = sum(h.total for h in hists.values())
                time.sleep(0.05)
            assert set(hists) == {workload.pid}
            assert total >= THREADS * SLEEPS
        finally:
            for link in links:
                link.destroy()


def test_default_flavour_is_chosen_before_load(monkeypatch: pytest.MonkeyPatch) -> None:
    obj, used = open_runqlat(pid=None, per_process=False, milliseconds=True)
    with obj:
        assert used == "tp_btf"  # this kernel takes tp_btf and types the sched tracepoints
    assert choose_flavour() == "tp_btf"
    # a kernel whose BTF lacks a tracepoint's type gets raw_tp, with no load tried first
    real = btf.kernel()
    monkeypatch.setattr(btf.KernelBTF, "has_type", lambda self, name, *kind: name != "btf_trace_sched_switch")
    assert choose_flavour() == "raw_tp"
    obj, used = open_runqlat(pid=None, per_process=False, milliseconds=True)
    with obj:
        assert used == "raw_tp"
        assert {p.section.split("/")[0] for p in obj.programs.values() if p.autoload} == {"raw_tp"}
    assert real is btf.kernel()
    with pytest.raises(ValueError, match="flavour must be one of tp_btf, raw_tp, got 'kprobe'"):
        open_runqlat(pid=None, per_process=False, milliseconds=True, flavour="kprobe")
