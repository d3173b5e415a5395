"""``pylibbpf profile`` and a SIGTERM that arrives after the sampling ended, while it symbolizes: what
was sampled is still printed (it used to exit 0 having printed nothing).

The moment is made deterministic without sleeping: the command's stderr is a one-page pipe that this
test fills itself, so the command's "symbolizing" line blocks in (anon_)pipe_write (seen in
/proc/PID/wchan) right where symbolization begins; SIGTERM goes then, and only then is the pipe
drained. The burner of tests/test_profile.py provides the samples.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from progs import wait_until, with_default_sigint
from test_profile import BURNER, DEADLINE, FOLDED_LINE, FUNCTION, bundled_programs  # noqa: F401 (a fixture)

COMMAND = [sys.executable, "-m", "pylibbpf", "profile"]


@pytest.fixture
def burner(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    (tmp_path / "burn.c").write_text(BURNER)
    exe = tmp_path / "plb_burn"
    subprocess.run(["gcc", "-O0", "-fno-omit-frame-pointer", "-fno-inline", "-o", str(exe), str(tmp_path / "burn.c")],
                   check=True, capture_output=True)
    proc = subprocess.Popen([str(exe)])
    yield proc
    proc.kill()
    proc.wait(timeout=DEADLINE)


def _cpu_ticks(pid: int) -> int:
    """User + system time of ``pid`` in clock ticks (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _wchan(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return ""


def _read_line(fd: int) -> bytes:
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(fd, 1)
        if not chunk:
            break
        line += chunk
    return line


def test_sigterm_while_symbolizing_prints_what_was_sampled(burner: subprocess.Popen[bytes]) -> None:
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)
    capacity = fcntl.fcntl(w, fcntl.F_GETPIPE_SZ)
    proc = subprocess.Popen(with_default_sigint([*COMMAND, "--pid", str(burner.pid), "--frequency", "199", "--folded"]),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=w)
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read() if proc.stdout else b""))
    reader.start()
    try:
        first = _read_line(r)
        assert first.startswith(b"sampling "), first
        # samples of the burner exist once it has run a while on a CPU (199 Hz: ~60 in 30 ticks)
        base = _cpu_ticks(burner.pid)
        assert wait_until(lambda: _cpu_ticks(burner.pid) >= base + 30, timeout=DEADLINE)
        os.write(w, b"x" * capacity)  # the pipe is full: the command's next stderr line blocks
        proc.send_signal(signal.SIGINT)  # Ctrl-C: the sampling ends
        assert wait_until(lambda: _wchan(proc.pid).endswith("pipe_write") or proc.poll() is not None, timeout=DEADLINE)
        assert proc.poll() is None, "the command ended without writing a line after the sampling"
        proc.send_signal(signal.SIGTERM)  # while it is about to symbolize
    finally:
        os.close(w)
        chunks = []
        while chunk := os.read(r, 65536):
            chunks.append(chunk)
        os.close(r)
        proc.wait(timeout=DEADLINE)
        reader.join(DEADLINE)
        if proc.stdout is not None:
            proc.stdout.close()
    err = b"".join(chunks)[capacity:].decode()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert err.startswith("sampling ended; symbolizing"), err
    summary = re.search(r"^(\d+) samples, \d+ distinct stacks", err, re.M)
    assert summary, err
    lines = out[0].decode().splitlines()
    assert all(FOLDED_LINE.match(line) for line in lines), lines
    assert sum(int(line.rsplit(" ", 1)[1]) for line in lines) == int(summary.group(1)) > 0
    assert any(FUNCTION in line for line in lines), lines
