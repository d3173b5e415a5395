"""Where the ``pylibbpf`` command's output cannot go: stdout closed at start (``>&-``) or a write that
fails (``/dev/full``). Each command says so in one line on stderr, exits non-zero and never prints a
traceback; a closed pipe's reader going away stays a quiet exit 0 (tests/test_cli.py).

Every case runs ``python -m pylibbpf`` in a subprocess on the real kernel; the events a trace
must write come from files this test opens after the command's "tracing ..." line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from progs import TracingStderr

from pylibbpf.cli import BUNDLED_DIR

COMMAND = [sys.executable, "-m", "pylibbpf"]
TIMEOUT = 120.0
#: Runs the rest of its arguments with fd 1 closed (the interpreter then has no sys.stdout).
STDOUT_CLOSED = ["sh", "-c", 'exec "$@" >&-', "sh"]
#: One run of every command that prints on stdout, short and harmless.
COMMANDS = {
    "trace": ["trace", "exec", "--duration", "0.2"],
    "runqlat": ["runqlat", "--duration", "0.2"],
    "profile": ["profile", "--duration", "0.2"],
    "features": ["features"],
    "inspect": ["inspect", str(BUNDLED_DIR / "exec.bpf.o")],
    "build": ["build", "--print-include-dir"],
}


def assert_last_line_error(done: subprocess.CompletedProcess[str], command: str, message: str) -> None:
    """Non-zero exit, no traceback, the error as the last line of stderr and no summary after it (a
    trace's "tracing ..." progress line may come first)."""
    assert done.returncode != 0, done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert lines and lines[-1].startswith(f"pylibbpf {command}: ") and message in lines[-1], done.stderr
    assert all(line.startswith(("tracing ", "sampling ")) for line in lines[:-1]), done.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_stdout_closed_at_start_is_one_line(bpf_privileged: None, command: str) -> None:
    done = subprocess.run([*STDOUT_CLOSED, *COMMAND, *COMMANDS[command]], stdin=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=TIMEOUT)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"pylibbpf {command}: stdout is closed"), done.stderr


def test_stdout_closed_does_not_matter_to_an_arrow_file(bpf_privileged: None, tmp_path: Path) -> None:
    """``trace --format arrow -o FILE`` writes nothing on stdout: it runs, and its file is a stream."""
    pa = pytest.importorskip("pyarrow")
    out = tmp_path / "open.arrow"
    done = subprocess.run([*STDOUT_CLOSED, *COMMAND, "trace", "open", "--format", "arrow", "-o", str(out),
                           "--duration", "0.2"], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    with pa.ipc.open_stream(out.read_bytes()) as reader:
        assert "filename" in reader.schema.names or "path" in reader.schema.names


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_stdout_on_a_full_device_is_one_line(bpf_privileged: None, command: str) -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run([*COMMAND, *COMMANDS[command]], stdin=subprocess.DEVNULL, stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=TIMEOUT)
    assert_last_line_error(done, command, "cannot write to stdout: No space left on device")


class Trace:
    """``pylibbpf trace open ...`` in a subprocess; ``wait_ready`` returns once it is attached."""

    def __init__(self, *args: str, stdout: Any = subprocess.DEVNULL) -> None:
        self.proc = subprocess.Popen([*COMMAND, "trace", "open", *args], stdin=subprocess.DEVNULL, stdout=stdout,
                                     stderr=subprocess.PIPE, text=True)
        watch = TracingStderr(self.proc)
        self.err, self._ready, self._thread = watch.lines, watch.ready, watch.thread

    def wait_ready(self) -> None:
        assert self._ready.wait(TIMEOUT) and self.proc.poll() is None, "".join(self.err)

    def finish(self) -> subprocess.CompletedProcess[str]:
        rc = self.proc.wait(TIMEOUT)
        self._thread.join(TIMEOUT)
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        return subprocess.CompletedProcess(self.proc.args, rc, "", "".join(self.err))


@pytest.mark.parametrize("mode", [[], ["--max-pending", "100"], ["--ordered"]], ids=["batches", "queue", "ordered"])
@pytest.mark.parametrize("events", [False, True], ids=["no events", "events"])
def test_arrow_to_a_full_device_is_one_line(bpf_privileged: None, mode: list[str], events: bool) -> None:
    pytest.importorskip("pyarrow")
    with tempfile.TemporaryDirectory() as d:
        trace = Trace("--format", "arrow", "-o", "/dev/full", "--duration", "2", *mode)
        trace.wait_ready()
        if events:
            for i in range(50):
                Path(d, f"f{i}").write_text("x")
        done = trace.finish()
    assert_last_line_error(done, "trace", "cannot write to /dev/full: No space left on device")


def test_table_with_events_to_a_full_device_is_one_line(bpf_privileged: None, tmp_path: Path) -> None:
    fd = os.open("/dev/full", os.O_WRONLY)
    try:
        trace = Trace("--duration", "2", stdout=fd)
    finally:
        os.close(fd)
    trace.wait_ready()
    for i in range(50):
        (tmp_path / f"f{i}").write_text("x")
    assert_last_line_error(trace.finish(), "trace", "cannot write to stdout: No space left on device")
