"""The ``pylibbpf`` command end to end: ``python -m pylibbpf`` in a subprocess on the real kernel.

Every trace waits for the command's "tracing ..." line on stderr (printed once
the programs are attached) before it makes the events it looks for, and those
events come from processes the test starts and controls: no sleeping on the
hope that the tracer is ready.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from progs import wait_until, with_default_sigint

from pylibbpf import cli
from pylibbpf.cli import _common as cli_common
from pylibbpf.cli import trace as cli_trace

COMMAND = [sys.executable, "-m", "pylibbpf"]
READY_TIMEOUT = 60.0
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module", autouse=True)
def bundled_programs() -> None:
    """The command's programs, rebuilt when csrc/bpf/ is newer (as the package build does)."""
    import build_bpf  # tools/, on sys.path through conftest

    if build_bpf.VMLINUX_BTF.exists():
        build_bpf.build(ROOT / "csrc" / "bpf", cli.BUNDLED_DIR, vmlinux_dir=ROOT / "build" / "bpf")


class Tracer:
    """``pylibbpf trace ...`` in a subprocess; its stdout and stderr are collected by threads."""

    def __init__(self, *args: str) -> None:
        # SIGINT at its default action, whatever this process inherited: interrupt() is Ctrl-C.
        self.proc = subprocess.Popen(with_default_sigint([*COMMAND, "trace", *args]), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.out: list[str] = []
        self.err: list[str] = []
        self._ready = threading.Event()
        self._threads = [threading.Thread(target=self._collect, args=(self.proc.stdout, self.out, False)),
                         threading.Thread(target=self._collect, args=(self.proc.stderr, self.err, True))]
        for t in self._threads:
            t.start()

    def _collect(self, stream: Any, lines: list[str], watch: bool) -> None:
        for line in stream:
            lines.append(line)
            if watch and line.startswith("tracing "):
                self._ready.set()
        if watch:
            self._ready.set()  # the command ended: never wait forever

    def wait_ready(self) -> None:
        """Return once the programs are attached; fail with the command's stderr if it ended first."""
        assert self._ready.wait(READY_TIMEOUT), "the tracer did not start in time"
        assert any(line.startswith("tracing ") for line in self.err), f"tracer failed: {''.join(self.err)}"

    def finish(self, timeout: float = 120.0) -> int:
        """Wait for the end (the --duration given); returns the exit status."""
        try:
            rc = self.proc.wait(timeout)
        finally:
            self.close()
        return rc

    def interrupt(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.finish()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for t in self._threads:
            t.join()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out]

    @property
    def stderr(self) -> str:
        return "".join(self.err)


def run_command(*args: str, prefix: tuple[str, ...] = (), timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, *COMMAND, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """A person-readable failure: non-zero exit, exactly one line on stderr, no traceback."""
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def run_true() -> int:
    """Exec /bin/true in a child and return its pid (the exec keeps it)."""
    child = subprocess.Popen(["/bin/true"])
    child.wait()
    return child.pid


# --- trace ---------------------------------------------------------------------------------------

def test_trace_exec_json_shows_the_exec(bpf_privileged: None) -> None:
    tracer = Tracer("exec", "--json", "--duration", "2")
    try:
        tracer.wait_ready()
        pid = run_true()
        rc = tracer.finish()
    finally:
        tracer.close()
    assert rc == 0, tracer.stderr
    mine = [r for r in tracer.records() if r["pid"] == pid]
    assert len(mine) == 1, tracer.out
    assert mine[0]["filename"] == "/bin/true"
    assert mine[0]["comm"] == "true"
    assert mine[0]["ppid"] == os.getpid()
    assert mine[0]["uid"] == os.getuid()
    assert mine[0]["ts"] > 0 and "time" in mine[0]
    summary = tracer.err[-1]
    assert summary.startswith("exec: ") and " events, " in summary and " drops, " in summary
    assert " late, " in summary and "events/s" in summary


def test_trace_exec_table(bpf_privileged: None) -> None:
    tracer = Tracer("exec", "--duration", "1.5")
    try:
        tracer.wait_ready()
        pid = run_true()
        rc = tracer.finish()
    finally:
        tracer.close()
    assert rc == 0, tracer.stderr
    assert tracer.out[0].split() == ["TIME", "PID", "PPID", "UID", "COMM", "FILENAME"]
    rows = [line.split() for line in tracer.out[1:]]
    assert [str(pid), str(os.getpid()), str(os.getuid()), "true", "/bin/true"] in [r[1:] for r in rows]


@contextlib.contextmanager
def held_child(script: str) -> Iterator[subprocess.Popen[bytes]]:
    """A shell that runs ``script`` once :func:`release` sends it a line (so that it acts
    while a tracer is attached); killed at exit if still running."""
    child = subprocess.Popen(["sh", "-c", f"read line; {script}"], stdin=subprocess.PIPE)
    try:
        yield child
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdin is not None:
            child.stdin.close()


def release(child: subprocess.Popen[bytes]) -> int:
    """Let a :func:`held_child` run its script; returns its exit status."""
    assert child.stdin is not None
    child.stdin.write(b"go\n")
    child.stdin.close()
    return child.wait()


def test_trace_exec_pid_filter(bpf_privileged: None) -> None:
    with held_child("exec /bin/true") as child:
        tracer = Tracer("exec", "--json", "--duration", "2", "--pid", str(child.pid))
        try:
            tracer.wait_ready()
            other = run_true()
            release(child)
            rc = tracer.finish()
        finally:
            tracer.close()
    assert rc == 0, tracer.stderr
    records = tracer.records()
    assert [(r["pid"], r["filename"]) for r in records] == [(child.pid, "/bin/true")]
    assert other not in {r["pid"] for r in records}
    assert f"pid {child.pid}" in tracer.err[0]


def test_trace_exit_code_and_comm_filter(bpf_privileged: None) -> None:
    with held_child("exit 3") as child:
        tracer = Tracer("exit", "--json", "--duration", "2", "--comm", "sh")
        try:
            tracer.wait_ready()
            run_true()  # exits too, but is not named sh
            assert release(child) == 3
            rc = tracer.finish()
        finally:
            tracer.close()
    assert rc == 0, tracer.stderr
    records = tracer.records()
    assert records and all(r["comm"] == "sh" for r in records)
    mine = [r for r in records if r["pid"] == child.pid]
    assert len(mine) == 1
    assert mine[0]["exit_code"] == 3 and mine[0]["signal"] == 0
    assert mine[0]["ppid"] == os.getpid()
    assert 0 < mine[0]["lifetime_ns"] < 120 * 10**9


def test_trace_open_sees_our_file(bpf_privileged: None, tmp_path: Path) -> None:
    target = tmp_path / f"pylibbpf-open-{os.getpid()}-{time.monotonic_ns()}.txt"
    tracer = Tracer("open", "--json", "--duration", "2")
    try:
        tracer.wait_ready()
        while tracer.proc.poll() is None:  # open it over and over until the tracer ends
            with open(target, "w"):
                pass
            time.sleep(0.05)
        rc = tracer.finish()
    finally:
        tracer.close()
    assert rc == 0, tracer.stderr
    mine = [r for r in tracer.records() if r["path"] == str(target)]
    assert mine, f"no open of {target} among {len(tracer.out)} events"
    first = mine[0]
    assert first["pid"] == os.getpid()
    assert first["ret"] >= 0
    assert first["flags"] & os.O_CREAT and first["flags"] & os.O_ACCMODE == os.O_WRONLY


def test_ctrl_c_exits_cleanly_with_a_summary(bpf_privileged: None) -> None:
    tracer = Tracer("exec", "--json")
    try:
        tracer.wait_ready()
        pid = run_true()
        wait_until(lambda: any(str(pid) in line for line in tracer.out), timeout=READY_TIMEOUT, interval=0.05)
        rc = tracer.interrupt()
    finally:
        tracer.close()
    assert rc == 0, tracer.stderr
    assert "Traceback" not in tracer.stderr
    assert pid in {r["pid"] for r in tracer.records()}
    assert tracer.err[-1].startswith("exec: ")


def test_ctrl_c_reaches_the_tracer_when_the_suite_ignores_sigint(bpf_privileged: None) -> None:
    """Regression: ``make test &`` from a script runs the suite with SIGINT ignored, which its commands
    inherit (Python then installs no KeyboardInterrupt handler), so the tracer never saw the test's
    Ctrl-C and was killed 30 s later. The tests start commands with SIGINT at its default action."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        tracer = Tracer("exec")
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        tracer.wait_ready()
        rc = tracer.interrupt()
    finally:
        tracer.close()
    assert rc == 0, tracer.stderr
    assert tracer.err[-1].startswith("exec: ")


@pytest.mark.parametrize("fmt", [[], ["--json"]])
def test_closed_stdout_pipe_exits_cleanly(bpf_privileged: None, tmp_path: Path, fmt: list[str]) -> None:
    """``pylibbpf trace exec | head -1``: the tracer notices the pipe closing and exits 0."""
    err = tmp_path / "stderr"
    # The tracer's --duration is far beyond the test's deadline: only the closed pipe can end it in time.
    tracer = " ".join([*COMMAND, "trace", "exec", "--duration", "3600", *fmt])
    script = f"{tracer} 2>{err} | head -1; exit ${{PIPESTATUS[0]}}"
    pipeline = subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        ended = wait_until(lambda: run_true() > 0 and pipeline.poll() is not None, timeout=120, interval=0.1)
        out, _ = pipeline.communicate(timeout=30) if ended else ("", "")
    finally:
        if pipeline.poll() is None:
            pipeline.kill()
            pipeline.communicate()
    stderr = err.read_text()
    assert ended, "the tracer kept running after its reader left"
    assert pipeline.returncode == 0, stderr
    assert len(out.splitlines()) == 1
    if fmt:
        assert json.loads(out)["filename"]
    assert "Traceback" not in stderr and "Exception" not in stderr
    assert stderr.splitlines()[-1].startswith("exec: ")


def test_trace_max_pending(bpf_privileged: None) -> None:
    tracer = Tracer("exec", "--json", "--duration", "2", "--max-pending", "100")
    try:
        tracer.wait_ready()
        pid = run_true()
        rc = tracer.finish()
    finally:
        tracer.close()
    assert rc == 0, tracer.stderr
    assert pid in {r["pid"] for r in tracer.records()}
    assert "backpressure" in tracer.err[0]


def test_trace_sample_everything(bpf_privileged: None) -> None:
    tracer = Tracer("exec", "--json", "--duration", "2", "--sample", "1", "--max-pending", "500")
    try:
        tracer.wait_ready()
        pid = run_true()
        rc = tracer.finish()
    finally:
        tracer.close()
    assert rc == 0, tracer.stderr
    assert pid in {r["pid"] for r in tracer.records()}
    assert "sampled 100%" in tracer.err[-1]


def test_trace_ordered(bpf_privileged: None) -> None:
    tracer = Tracer("exec", "--json", "--duration", "2", "--ordered")
    try:
        tracer.wait_ready()
        pids = [run_true() for _ in range(5)]
        rc = tracer.finish()
    finally:
        tracer.close()
    assert rc == 0, tracer.stderr
    records = tracer.records()
    assert set(pids) <= {r["pid"] for r in records}
    stamps = [r["ts"] for r in records]
    if ", 0 late," in tracer.err[-1]:  # out-of-order events are only allowed when counted as late
        assert stamps == sorted(stamps)


# --- inspect -------------------------------------------------------------------------------------

def test_inspect_lists_programs_maps_and_layouts(bpf_objects: dict[str, Path]) -> None:
    proc = run_command("inspect", str(bpf_objects["layout"]))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "use_types" in text and "syscall" in text
    assert "events" in text and "ringbuf" in text
    assert "struct layout_event (120 bytes)" in text
    lines = text.splitlines()
    comm = next(line.split() for line in lines if line.split()[-1:] == ["comm"])
    assert comm == ["32", "16", "char[16]", "comm"]
    bitfield = next(line for line in lines if "layout_bitfield" in line)
    assert "bitfield" in bitfield.split("layout_bitfield", 1)[1]
    assert "globals (3)" in text  # the .rodata layout_info and the two keep_* pointers
    assert next(line.split() for line in lines if line.split()[:1] == ["layout_info"])[1:] == [".rodata", "u64[15]"]


def test_inspect_json(bpf_objects: dict[str, Path]) -> None:
    proc = run_command("inspect", "--json", str(bpf_objects["layout"]))
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["object"] == "layout"
    assert {"name": "use_types", "section": "syscall", "type": "syscall"} in info["programs"]
    events = next(m for m in info["maps"] if m["name"] == "events")
    assert events == {"name": "events", "type": "ringbuf", "key_size": 0, "value_size": 0, "max_entries": 4096}
    structs = {s["name"]: s for s in info["structs"]}
    layout = structs["layout_event"]
    assert layout["size"] == 120
    fields = {f["name"]: f for f in layout["fields"]}
    assert fields["pid"] == {"name": "pid", "type": "u32", "count": 1, "offset": 8, "size": 4}
    assert fields["ports.dport"]["offset"] == 14
    assert fields["matrix"] == {"name": "matrix", "type": "i16", "count": 6, "offset": 64, "size": 12}
    assert "bitfield" in structs["layout_bitfield"]["error"]
    assert "fields" not in structs["layout_bitfield"]
    assert {"name": "keep_event", "section": ".bss", "type": "ptr"} in info["globals"]


def without_privileges() -> tuple[str, ...]:
    """A command prefix that runs the command with no capability at all (none permitted, inheritable,
    ambient or in the bounding set) and the no-root securebits, so that root's uid grants nothing.

    The uid stays the same: the command still reaches the checkout and its .venv wherever the clone
    lives (another uid could not enter a 0700 home or ``mktemp -d`` folder)."""
    setpriv = shutil.which("setpriv")
    assert setpriv is not None, "setpriv (util-linux) is needed"
    return (setpriv, "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all",
            "--securebits=+noroot,+noroot_locked,+no_setuid_fixup,+no_setuid_fixup_locked,+keep_caps_locked")


def test_without_privileges_means_no_capability() -> None:
    status = subprocess.run([*without_privileges(), "cat", "/proc/self/status"], capture_output=True, text=True,
                            check=True).stdout
    caps = dict(line.split(":\t") for line in status.splitlines() if line.startswith("Cap"))
    assert caps and all(int(v, 16) == 0 for v in caps.values()), caps


def test_inspect_bundled_objects_without_privileges(bpf_privileged: None) -> None:
    """Inspect only opens the object: it works without any privilege, on every bundled tool."""
    for tool in cli_trace.TOOLS.values():
        proc = run_command("inspect", "--json", "--struct", tool.event, str(tool.object_path),
                           prefix=without_privileges())
        assert proc.returncode == 0, proc.stderr
        info = json.loads(proc.stdout)
        assert [s["name"] for s in info["structs"]] == [tool.event]
        assert info["structs"][0]["fields"][0]["name"] == "ts"  # the timestamp comes first
        assert {"events", "events_perf"} <= {m["name"] for m in info["maps"]}
        assert all(p["type"] == "tracepoint" for p in info["programs"])


def test_rodata_configuration_before_load(bpf_privileged: None) -> None:
    """The filters travel in .rodata (the skeleton's ``rodata.cfg``), set before load and frozen after."""
    from pylibbpf import BPFError

    with cli_trace.TOOLS["exec"].skeleton.open() as skel:
        rodata = skel.obj.maps["exec.rodata"]
        config = skel.obj.btf_struct("tool_config")
        assert rodata.initial_value == bytes(config.size)
        cli_trace.configure(skel, pid=42, comm="a-very-long-command-name", use_perf=True)
        values = config.parse(rodata.initial_value)   # the bytes the skeleton wrote, read with the BTF layout
        assert (values.target_tgid, values.exclude_tgid, values.use_perf) == (42, os.getpid(), 1)
        assert values.target_comm == "a-very-long-com"  # 15 bytes: what the kernel keeps of a name
        assert skel.rodata.cfg.target_comm == "a-very-long-com"
        skel.load()
        with pytest.raises(BPFError):
            skel.rodata.cfg = skel.rodata.cfg._replace(target_tgid=1)


# --- errors a person can act on ------------------------------------------------------------------

def test_inspect_not_a_bpf_object(tmp_path: Path) -> None:
    junk = tmp_path / "junk.bpf.o"
    junk.write_bytes(b"this is not an ELF file\n" * 10)
    assert_one_line_error(run_command("inspect", str(junk)), str(junk), "not a BPF object")


def test_inspect_missing_file(tmp_path: Path) -> None:
    assert_one_line_error(run_command("inspect", str(tmp_path / "nope.bpf.o")), "no such file")


def test_unknown_tool() -> None:
    proc = run_command("trace", "fork")
    assert proc.returncode == 2
    assert_one_line_error(proc, "invalid choice", "fork")


def test_not_root(bpf_privileged: None) -> None:
    proc = run_command("trace", "exec", "--duration", "1", prefix=without_privileges())
    assert_one_line_error(proc, "needs root or CAP_BPF+CAP_PERFMON")


@pytest.mark.parametrize("command", [("trace", "exec"), ("runqlat",)])
def test_no_btf(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
                command: tuple[str, ...]) -> None:
    monkeypatch.setattr(cli_common, "VMLINUX_BTF", tmp_path / "vmlinux")
    assert cli.main([*command, "--duration", "1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no BTF" in err and str(tmp_path / "vmlinux") in err


def test_tracefs_missing_and_not_mountable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(cli_trace, "TRACEFS_DIRS", (tmp_path / "tracing", tmp_path / "debug" / "tracing"))
    monkeypatch.setattr(cli_trace, "_mount_tracefs", lambda where: "mount: permission denied")
    with pytest.raises(cli.CommandError, match=r"tracefs is not mounted .* permission denied"):
        cli_trace.ensure_tracefs()


def test_tracefs_mounted_is_fine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "tracing" / "events").mkdir(parents=True)
    monkeypatch.setattr(cli_trace, "TRACEFS_DIRS", (tmp_path / "tracing",))
    monkeypatch.setattr(cli_trace, "_mount_tracefs", lambda where: pytest.fail("mounted although present"))
    cli_trace.ensure_tracefs()


def test_bad_option_values() -> None:
    for args in (["--sample", "2"], ["--duration", "0"], ["--max-pending", "-1"], ["--sample", "0.5", "--ordered"],
                 ["--max-pending", "5", "--ordered"], ["--pid", "x"]):
        proc = run_command("trace", "exec", *args)
        assert proc.returncode == 2, args
        assert_one_line_error(proc)


# --- pieces ----------------------------------------------------------------------------------------

def test_open_flags_text() -> None:
    assert cli_trace.open_flags(os.O_RDONLY) == "O_RDONLY"
    assert cli_trace.open_flags(os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC) == \
        "O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC"
    assert cli_trace.open_flags(os.O_RDWR | 0x40000000).startswith("O_RDWR|")


def test_python_dash_m_help() -> None:
    proc = run_command("--help")
    assert proc.returncode == 0 and "trace" in proc.stdout and "inspect" in proc.stdout


# --- trace --format arrow --------------------------------------------------------------------------

def _opens_script(path: Path, count: int) -> str:
    """A shell loop that opens ``path`` ``count`` times itself (a redirection: no new process)."""
    return f"i=0; while [ $i -lt {count} ]; do : < {path}; i=$((i+1)); done"


def _own_opens(table: Any, path: Path) -> Any:
    return [r for r in table.to_pylist() if r["path"] == str(path)]


@pytest.mark.parametrize("mode", [[], ["--ordered"], ["--max-pending", "1000"]], ids=["ring", "ordered", "queue"])
def test_trace_arrow_file_survives_ctrl_c(bpf_privileged: None, tmp_path: Path, mode: list[str]) -> None:
    import pyarrow as pa

    target = tmp_path / f"opened-{os.getpid()}"
    target.write_text("x")
    out = tmp_path / "trace.arrows"
    with held_child(_opens_script(target, 25)) as child:
        tracer = Tracer("open", "--format", "arrow", "-o", str(out), "--pid", str(child.pid), *mode)
        try:
            tracer.wait_ready()
            assert release(child) == 0
            rc = tracer.interrupt()   # no --duration: Ctrl-C ends it
        finally:
            tracer.close()
    assert rc == 0, tracer.stderr
    assert tracer.out == []
    assert out.read_bytes().endswith(b"\xff\xff\xff\xff\x00\x00\x00\x00")   # the end-of-stream marker
    with pa.ipc.open_stream(out) as stream:   # a complete stream: schema, batches, end marker
        table = stream.read_all()
    assert table.schema.metadata == {b"pylibbpf.event": b"open_event"}
    extra = ["timestamp", "late", "cpu"] if mode == ["--ordered"] else []
    assert table.schema.names == ["ts", "pid", "tid", "flags", "ret", "comm", "path", *extra]
    assert table.schema.field("comm").type == pa.string() and table.schema.field("pid").type == pa.uint32()
    mine = _own_opens(table, target)
    assert len(mine) == 25, tracer.stderr
    assert {(r["pid"], r["comm"]) for r in mine} == {(child.pid, "sh")}
    assert all(r["ret"] >= 0 for r in mine)
    assert {r["pid"] for r in table.to_pylist()} == {child.pid}   # filtered in the kernel


def test_trace_arrow_to_stdout(bpf_privileged: None, tmp_path: Path) -> None:
    import pyarrow as pa

    target = tmp_path / f"opened-{os.getpid()}"
    target.write_text("x")
    with held_child(_opens_script(target, 10)) as child:
        proc = subprocess.Popen([*COMMAND, "trace", "open", "--format", "arrow", "-o", "-", "--pid", str(child.pid),
                                 "--duration", "3"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        try:
            assert proc.stderr is not None
            first = proc.stderr.readline().decode()
            assert first.startswith("tracing "), first
            assert release(child) == 0
            data, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 0, err
    table = pa.ipc.open_stream(data).read_all()
    assert len(_own_opens(table, target)) == 10


def test_trace_arrow_refuses_what_it_cannot_write(tmp_path: Path) -> None:
    import pty

    assert_one_line_error(run_command("trace", "open", "--format", "arrow"), "-o FILE")
    assert_one_line_error(run_command("trace", "open", "-o", str(tmp_path / "x")), "--format arrow")
    assert_one_line_error(run_command("trace", "open", "--json", "--format", "arrow", "-o", "-"), "contradict")
    missing = tmp_path / "no-such-dir" / "out.arrows"
    assert_one_line_error(run_command("trace", "open", "--format", "arrow", "-o", str(missing)),
                          f"cannot write {missing}")
    primary, secondary = pty.openpty()   # stdout a terminal: no binary on it
    try:
        proc = subprocess.run([*COMMAND, "trace", "open", "--format", "arrow", "-o", "-"], stdout=secondary,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, timeout=60)
    finally:
        os.close(primary)
        os.close(secondary)
    assert_one_line_error(proc, "redirect stdout")


def test_trace_arrow_without_pyarrow_names_the_extra(tmp_path: Path) -> None:
    code = ("import sys; sys.modules['pyarrow'] = None; from pylibbpf.cli import main; "
            f"sys.exit(main(['trace', 'open', '--format', 'arrow', '-o', {str(tmp_path / 'out')!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert_one_line_error(proc, "pip install 'pylibbpf-cffi[arrow]'")


def test_trace_arrow_reader_gone_ends_quietly(bpf_privileged: None, tmp_path: Path) -> None:
    target = tmp_path / f"opened-{os.getpid()}"
    target.write_text("x")
    with held_child(_opens_script(target, 200)) as child:
        proc = subprocess.Popen([*COMMAND, "trace", "open", "--format", "arrow", "-o", "-", "--pid", str(child.pid)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert proc.stdout is not None and proc.stderr is not None
            first = proc.stderr.readline().decode()
            assert first.startswith("tracing "), first
            proc.stdout.close()   # the reader goes away (as `| head -c 0` would)
            assert release(child) == 0
            rc = proc.wait(timeout=60)   # no --duration: the closed pipe ends the trace
            err = proc.stderr.read().decode()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()
    assert rc == 0, err
    assert "Traceback" not in err and err.startswith("open: "), err
