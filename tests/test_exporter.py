"""pylibbpf.exporter: configuration errors, decoders, the Collector, and the command's HTTP side.

The real Prometheus server's part is tests/test_exporter_prometheus.py.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client")
pytest.importorskip("yaml")

from prometheus_client import CollectorRegistry, generate_latest

import pylibbpf
from pylibbpf import BPFObject, KernelSymbols
from pylibbpf.exporter import (
    Collector,
    ConfigError,
    Exporter,
    decoders,
    load,
)
from pylibbpf.exporter.config import Decoder
from pylibbpf.maps import Map

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "exporter"
COMMAND = [sys.executable, "-m", "pylibbpf", "exporter"]


def _write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


# --- configuration errors: file, line, what ------------------------------------------------------

@pytest.mark.parametrize("text, line, message", [
    ("programs:\n  - name: x\n    object: a.o\n   bad: [\n", 4, "not valid YAML"),
    ("programs:\n  - name: x\n    objekt: a.o\n", 3, "unknown key 'objekt' in a program"),
    ("programs:\n  - name: x\n", 2, "needs exactly one of 'object:'"),
    ("programs:\n  - name: x\n    object: a.o\n    metrics:\n      counters:\n        - name: c\n          help: h\n"
     "          map: m\n          labels:\n            - {name: l, decoders: [{name: nosuch}]}\n",
     10, "unknown decoder 'nosuch'"),
    ("programs:\n  - name: x\n    object: a.o\n    metrics:\n      histograms:\n        - name: h\n          help: h\n"
     "          map: m\n", 6, "needs 'bucket_max:'"),
    ("programs:\n  - name: x\n    object: a.o\n    metrics:\n      histograms:\n        - name: h\n          help: h\n"
     "          map: m\n          bucket_max: 3\n          bucket_type: log\n", 10, "bucket_type must be one of"),
    ("programs:\n  - name: x\n    object: a.o\n    metrics:\n      counters:\n        - name: 9bad\n          help: h\n"
     "          map: m\n", 6, "Prometheus metric name"),
    ("programs: []\n", 1, "programs is empty"),
])
def test_config_errors_name_file_and_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert str(caught.value).startswith(f"{path}:{line}: "), str(caught.value)
    assert message in str(caught.value)


@pytest.fixture(scope="module")
def syscalls_object(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pylibbpf import build

    return build.compile(EXAMPLES / "syscalls.bpf.c", tmp_path_factory.mktemp("exporter") / "syscalls.bpf.o")


@pytest.mark.parametrize("metric, line, message", [
    ("        - name: c\n          help: h\n          map: nosuch\n", 6, "unknown map 'nosuch' for c in program 'x' "
     "(maps: syscalls, write_sizes"),
    ("        - name: c\n          help: h\n          map: syscalls\n          labels:\n"
     "            - {name: l, field: pid}\n", 10, "unknown field 'pid' for label 'l' of c in map 'syscalls''s key "
     "(fields: comm, nr)"),
    ("        - name: c\n          help: h\n          map: syscalls\n          labels:\n"
     "            - {name: l}\n", 10, "needs a 'field:'"),
])
def test_config_errors_found_with_the_object(tmp_path: Path, syscalls_object: Path, bpf_privileged: None,
                                             metric: str, line: int, message: str) -> None:
    path = _write(tmp_path, f"programs:\n  - name: x\n    object: {syscalls_object}\n    metrics:\n      counters:\n"
                  + metric)
    with pytest.raises(ConfigError) as caught:
        Exporter(load(path))
    assert str(caught.value).startswith(f"{path}:{line}: "), str(caught.value)
    assert message in str(caught.value)
    assert not [p for p in pylibbpf.programs() if p.name in ("count_syscall", "write_size")
                and p.id in _ids_of_this_process()]


def _ids_of_this_process() -> set[int]:
    """Ids of the BPF programs this process holds an fd of."""
    ids = set()
    for fd in os.listdir("/proc/self/fdinfo"):
        try:
            text = Path(f"/proc/self/fdinfo/{fd}").read_text()
        except OSError:
            continue
        m = re.search(r"^prog_id:\s+(\d+)", text, re.M)
        if m:
            ids.add(int(m.group(1)))
    return ids


def test_a_histogram_over_a_non_integer_key_is_refused(tmp_path: Path, syscalls_object: Path,
                                                       bpf_privileged: None) -> None:
    path = _write(tmp_path, f"""
        programs:
          - name: x
            object: {syscalls_object}
            metrics:
              histograms:
                - name: h
                  help: h
                  map: syscalls
                  bucket_max: 10
        """)
    with pytest.raises(ConfigError, match=r":6: h: a histogram over a non-integer key \(map 'syscalls''s key is "
                       r"syscall_key\)"):
        Exporter(load(path))
    path = _write(tmp_path, f"""
        programs:
          - name: x
            object: {syscalls_object}
            metrics:
              histograms:
                - {{name: h, help: h, map: syscalls, bucket_max: 10, bucket_field: comm}}
        """)
    with pytest.raises(ConfigError, match=r":6: h: a histogram needs an integer bucket, and 'comm' is char\[16\]"):
        Exporter(load(path))


def test_an_unknown_global_is_refused(tmp_path: Path, bpf_privileged: None) -> None:
    path = _write(tmp_path, f"programs:\n  - name: x\n    source: {EXAMPLES / 'execs.bpf.c'}\n"
                  "    globals: {nosuch: 1}\n")
    with pytest.raises(ConfigError, match=r"config.yaml:2: program 'x' has no global 'nosuch'"):
        Exporter(load(path))


def test_the_command_refuses_a_bad_config_in_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "programs:\n  - name: x\n    object: a.o\n    metrics: {counterz: []}\n")
    done = subprocess.run([*COMMAND, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr == (f"pylibbpf exporter: {path}:4: unknown key 'counterz' in the metrics of 'x' "
                           "(known: counters, gauges, histograms)\n")


def test_a_taken_port_is_refused_before_anything_loads(tmp_path: Path) -> None:
    path = _write(tmp_path, "programs:\n  - name: x\n    source: does-not-exist.bpf.c\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([*COMMAND, str(path), "--listen", f"127.0.0.1:{port}"], capture_output=True, text=True,
                              timeout=120)
    assert done.returncode == 1
    # the source is never compiled (it does not exist): the port was checked first
    assert done.stderr == f"pylibbpf exporter: cannot listen on 127.0.0.1:{port}: Address already in use\n"


# --- decoders ---------------------------------------------------------------------------------------

def _decode(value: object, *steps: Decoder) -> str | None:
    return decoders.chain(steps)(value)


def test_decoders(tmp_path: Path) -> None:
    assert _decode(b"bash\0junk") == "bash" and _decode(7) == "7"
    assert _decode(42, Decoder("uint")) == "42"
    assert _decode(b"ab\0", Decoder("string")) == "ab"
    assert _decode(255, Decoder("hex")) == "0xff" and _decode(b"\x01\xfe", Decoder("hex")) == "01fe"
    assert _decode(-errno.ENOENT, Decoder("errno")) == "ENOENT"
    assert _decode(bytes([10, 0, 0, 1]), Decoder("inet_ip")) == "10.0.0.1"
    assert _decode(bytes(15) + b"\x01", Decoder("inet_ip")) == "::1"
    assert _decode("b", Decoder("static_map", static_map={"b": "bee"})) == "bee"
    assert _decode("c", Decoder("static_map", static_map={"b": "bee"})) == "c"
    keep = Decoder("regexp", regexps=("^py", "sh$"))
    assert _decode(b"python3", keep) == "python3" and _decode(b"bash", keep) == "bash"
    assert _decode(b"ls", keep) is None
    assert _decode(b"python3", keep, Decoder("static_map", static_map={"python3": "py"})) == "py"
    with pytest.raises(ValueError, match="the uint decoder needs an integer field"):
        _decode(b"x", Decoder("uint"))


def test_the_syscall_decoder_uses_this_architectures_numbers(tmp_path: Path) -> None:
    source = tmp_path / "nr.c"
    source.write_text('#include <stdio.h>\n#include <sys/syscall.h>\nint main(void) { printf("%d %d %d %d\\n", '
                      "SYS_read, SYS_write, SYS_getppid, SYS_openat); return 0; }\n")
    subprocess.run(["gcc", str(source), "-o", str(tmp_path / "nr")], check=True)
    numbers = [int(n) for n in subprocess.run([str(tmp_path / "nr")], capture_output=True, text=True,
                                              check=True).stdout.split()]
    names = [_decode(n, Decoder("syscall")) for n in numbers]
    assert names == ["read", "write", "getppid", "openat"]
    assert _decode(99999, Decoder("syscall")) == "99999"


def test_the_ksym_and_cgroup_decoders(bpf_privileged: None, tmp_path: Path) -> None:
    ks = KernelSymbols()
    addr = ks.address("vfs_read")
    assert addr is not None
    assert _decode(addr + 3, Decoder("ksym")) == "vfs_read"
    root = decoders.cgroup_root()
    group = Path(root) / f"plb-exporter-{os.getpid()}"
    group.mkdir()
    try:
        assert _decode(os.stat(group).st_ino, Decoder("cgroup")) == f"/{group.name}"
        assert _decode(os.stat(root).st_ino, Decoder("cgroup")) == "/"
    finally:
        group.rmdir()


# --- the Collector --------------------------------------------------------------------------------

def _samples(registry: CollectorRegistry, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for family in registry.collect():
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def _set_comm(name: bytes) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(15, name, 0, 0, 0)  # PR_SET_NAME


def test_the_collector_in_three_lines(syscalls_object: Path, bpf_privileged: None,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    comm = f"plbc{os.getpid() % 100000}".encode()
    with BPFObject.open(syscalls_object) as obj:
        obj.load()
        obj.attach_all()
        registry = CollectorRegistry()
        registry.register(Collector(obj, {"name": "sys", "metrics": {
            "counters": [{"name": "syscalls_total", "help": "by name", "map": "syscalls", "labels": [
                {"name": "comm", "field": "comm", "decoders": [{"name": "string"}]},
                {"name": "syscall", "field": "nr", "decoders": ["syscall"]}]}],
            "histograms": [{"name": "write_size_bytes", "help": "sizes", "map": "write_sizes", "bucket_type": "exp2",
                            "bucket_field": "bucket", "bucket_max": 12, "labels": [
                                {"name": "comm", "field": "comm", "decoders": ["string"]}]}]}}))
        reads: list[str] = []
        real = Map.lookup_batch

        def counting(self: Map) -> list[tuple[object, object]]:
            reads.append(self.name)
            return real(self)

        monkeypatch.setattr(Map, "lookup_batch", counting)
        previous = Path("/proc/self/comm").read_text().strip().encode()
        _set_comm(comm)
        try:
            for _ in range(7):
                os.getppid()
            with open(os.devnull, "wb", buffering=0) as null:
                for size in (1, 2, 3, 1000, 1000, 5000):
                    null.write(b"x" * size)
        finally:
            _set_comm(previous)
        text = generate_latest(registry).decode()
        assert sorted(reads) == ["syscalls", "write_sizes"]  # each map read once per scrape
        c = comm.decode()
        assert _samples(registry, "pylibbpf_syscalls_total")[(("comm", c), ("syscall", "getppid"))] == 7
        buckets = {dict(k)["le"]: v for k, v in _samples(registry, "pylibbpf_write_size_bytes_bucket").items()
                   if dict(k)["comm"] == c}
        # exp2: bucket i holds (2^(i-1), 2^i]: 1 -> le 1, 2 -> le 2, 3 -> le 4, 1000 -> le 1024, 5000 -> +Inf
        assert buckets["1.0"] == 1 and buckets["2.0"] == 2 and buckets["4.0"] == 3 and buckets["512.0"] == 3
        assert buckets["1024.0"] == 5 and buckets["4096.0"] == 5 and buckets["+Inf"] == 6
        assert _samples(registry, "pylibbpf_write_size_bytes_count")[(("comm", c),)] == 6
        # _sum: each value at its bucket's le (+Inf's at the last le): an upper bound of 1+2+3+1000+1000+5000
        assert _samples(registry, "pylibbpf_write_size_bytes_sum")[(("comm", c),)] == 1 + 2 + 4 + 1024 * 2 + 4096
        assert _samples(registry, "pylibbpf_map_entries")[(("map", "syscalls"), ("program", "sys"))] > 0
        assert "pylibbpf_exporter_decoder_drops_total" in text and "pylibbpf_exporter_collect_seconds" in text


def test_per_cpu_values_are_summed(bpf_privileged: None) -> None:
    obj = BPFObject.compile(EXAMPLES / "runqlat.bpf.c")
    with obj:
        obj.load()
        counts = obj.maps["runq_latency"]
        cpus = len(counts[0])
        counts[3] = tuple(range(1, cpus + 1))
        registry = CollectorRegistry()
        registry.register(Collector(obj, {"metrics": {"histograms": [
            {"name": "h", "help": "h", "map": "runq_latency", "bucket_max": 26, "bucket_multiplier": 0.5}]}}))
        buckets = {dict(k)["le"]: v for k, v in _samples(registry, "pylibbpf_h_bucket").items()}
        assert buckets["2.0"] == 0 and buckets["4.0"] == sum(range(1, cpus + 1))  # bucket 3: le 2^3 * 0.5


# --- the command ---------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, accept: str = "") -> tuple[int, str, str]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def _wait_serving(proc: subprocess.Popen[str]) -> None:
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert "serving http://" in line, line + (proc.stderr.read() if proc.poll() is not None else "")


@pytest.fixture
def served(tmp_path: Path, bpf_privileged: None) -> Iterator[tuple[subprocess.Popen[str], str]]:
    config = tmp_path / "syscalls.yaml"
    shutil.copy(EXAMPLES / "syscalls.yaml", config)
    shutil.copy(EXAMPLES / "syscalls.bpf.c", tmp_path)
    shutil.copy(EXAMPLES / "exporter.h", tmp_path)
    port = _free_port()
    proc = subprocess.Popen([*COMMAND, str(config), "--listen", f"127.0.0.1:{port}"], stderr=subprocess.PIPE,
                            text=True)
    try:
        _wait_serving(proc)
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(60)
        if proc.stderr:
            proc.stderr.close()


def test_the_command_serves_text_openmetrics_and_health(served: tuple[subprocess.Popen[str], str]) -> None:
    _, url = served
    status, content_type, body = _get(url + "/metrics")
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    assert "# TYPE pylibbpf_syscalls_total counter" in body
    assert 'pylibbpf_exporter_programs_attached{program="syscalls"} 2.0' in body
    status, content_type, body = _get(url + "/metrics", "application/openmetrics-text; version=1.0.0")
    assert status == 200 and content_type.startswith("application/openmetrics-text")
    assert body.endswith("# EOF\n") and "# TYPE pylibbpf_syscalls counter" in body
    assert _get(url + "/healthz")[:3:2] == (200, "ok\n")
    assert _get(url + "/nothing")[0] == 404


def _exporter_program_ids(pid: int) -> set[int]:
    ids = set()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            m = re.search(r"^prog_id:\s+(\d+)", Path(f"/proc/{pid}/fdinfo/{fd}").read_text(), re.M)
        except OSError:
            continue
        if m:
            ids.add(int(m.group(1)))
    return ids


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_detaches_everything_and_exits_0(served: tuple[subprocess.Popen[str], str], signum: int) -> None:
    proc, _ = served
    ids = _exporter_program_ids(proc.pid)
    assert len(ids) == 2
    assert ids <= {p.id for p in pylibbpf.programs()}
    proc.send_signal(signum)
    assert proc.wait(60) == 0
    deadline = time.monotonic() + 30
    while ids & {p.id for p in pylibbpf.programs()} and time.monotonic() < deadline:
        time.sleep(0.05)  # the kernel frees a program once its last reference is gone (RCU)
    assert not ids & {p.id for p in pylibbpf.programs()}


# --- the shipped examples ------------------------------------------------------------------------

@pytest.mark.parametrize("name, metric", [
    ("runqlat", "pylibbpf_runqueue_latency_seconds_count"), ("execs", "pylibbpf_execs_total"),
    ("biolatency", "pylibbpf_bio_latency_seconds_count"), ("syscalls", "pylibbpf_syscalls_total")])
def test_the_example_configs_load_attach_and_scrape(name: str, metric: str, bpf_privileged: None,
                                                    tmp_path: Path) -> None:
    with Exporter(load(EXAMPLES / f"{name}.yaml")) as exporter:
        subprocess.run(["true"], check=True)  # an exec, an exit, wakeups and context switches
        with open(tmp_path / "data", "wb") as f:  # block I/O: written through to the disk
            f.write(os.urandom(1 << 20))
            f.flush()
            os.fsync(f.fileno())
        body, _ = exporter.scrape()
        text = body.decode()
        attached = re.search(rf'pylibbpf_exporter_programs_attached\{{program="{name}"\}} (\S+)', text)
        assert attached is not None and float(attached.group(1)) >= 2
        assert re.search(rf"^{metric}\{{.*\}} [1-9]", text, re.M) or (name == "runqlat" and re.search(
            rf"^{metric} [1-9]", text, re.M)), text[:2000]
        if name == "execs":
            assert 'pylibbpf_execs_total{comm="true"}' in text
