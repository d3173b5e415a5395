"""`pylibbpf exporter` scraped by a real Prometheus server (Debian's ``prometheus``; `make test` installs it).

The test starts the exporter on the shipped syscalls example and a Prometheus
server of its own (a temporary configuration scraping the exporter every
second, temporary storage, free ports), runs a deterministic workload under a
command name of its own (``getppid()`` N times, ``write()`` of 1000 bytes M
times), then asks Prometheus' HTTP API, polling until a deadline, for:

- the counter ``pylibbpf_syscalls_total{comm=..., syscall="getppid"}``: exactly N;
- ``histogram_quantile(0.5, ...)`` over ``pylibbpf_write_size_bytes_bucket``:
  every write is in the bucket (512, 1024], so Prometheus' linear
  interpolation gives 512 + 512 × 0.5 = 768 (and 0.9 gives 972.8).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "exporter"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
DEADLINE = 120.0
N_GETPPID = 37
N_WRITES = 11

WORKLOAD = """
import ctypes, os, sys
ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)   # PR_SET_NAME: the comm label
for _ in range(int(sys.argv[2])):
    os.getppid()
fd = os.open(os.devnull, os.O_WRONLY)
for _ in range(int(sys.argv[3])):
    os.write(fd, b"x" * 1000)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ensure_prometheus() -> str:
    if not os.access(PROMETHEUS, os.X_OK):
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "prometheus"],
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"), check=True, capture_output=True)
    return shutil.which("prometheus") or PROMETHEUS


@pytest.fixture
def exporter(tmp_path: Path, bpf_privileged: None) -> Iterator[str]:
    for name in ("syscalls.yaml", "syscalls.bpf.c", "exporter.h"):
        shutil.copy(EXAMPLES / name, tmp_path)
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pylibbpf", "exporter", str(tmp_path / "syscalls.yaml"),
                             "--listen", f"127.0.0.1:{port}"], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "serving http://" in line, line
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        assert proc.wait(60) == 0
        if proc.stderr:
            proc.stderr.close()


@pytest.fixture
def prometheus(tmp_path: Path, exporter: str) -> Iterator[str]:
    binary = _ensure_prometheus()
    config = tmp_path / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
                      f"  - job_name: pylibbpf\n    static_configs:\n      - targets: ['{exporter}']\n")
    port = _free_port()
    proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(60)


def _query(prometheus: str, promql: str) -> list[dict[str, object]]:
    url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            answer = json.loads(response.read())
    except OSError:
        return []  # not listening yet
    assert answer["status"] == "success", answer
    result: list[dict[str, object]] = answer["data"]["result"]
    return result


def _until(prometheus: str, promql: str, expected: float) -> float | None:
    """The query's single value once it equals ``expected`` (polled until the deadline), else the last seen."""
    deadline = time.monotonic() + DEADLINE
    last = None
    while time.monotonic() < deadline:
        result = _query(prometheus, promql)
        if len(result) == 1:
            last = float(result[0]["value"][1])  # type: ignore[index]
            if abs(last - expected) < 1e-9:
                return last
        time.sleep(0.5)
    return last


def test_prometheus_scrapes_a_counter_and_a_histogram(prometheus: str) -> None:
    comm = f"plbprom{os.getpid() % 100000}"
    # the exporter is up and scraped before the workload: its series start from the workload's counts
    assert _until(prometheus, 'up{job="pylibbpf"}', 1.0) == 1.0
    subprocess.run([sys.executable, "-c", WORKLOAD, comm, str(N_GETPPID), str(N_WRITES)], check=True, timeout=60)
    counter = f'pylibbpf_syscalls_total{{comm="{comm}", syscall="getppid"}}'
    assert _until(prometheus, counter, N_GETPPID) == N_GETPPID
    buckets = f'pylibbpf_write_size_bytes_bucket{{comm="{comm}"}}'
    assert _until(prometheus, f"histogram_quantile(0.5, {buckets})", 768.0) == 768.0
    assert _until(prometheus, f"histogram_quantile(0.9, {buckets})", 972.8) == pytest.approx(972.8)
    assert _until(prometheus, f'pylibbpf_write_size_bytes_count{{comm="{comm}"}}', N_WRITES) == N_WRITES
    attached = _until(prometheus, 'pylibbpf_exporter_programs_attached{program="syscalls"}', 2.0)
    assert attached == 2.0
