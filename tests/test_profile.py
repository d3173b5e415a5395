"""``pylibbpf profile`` on the real kernel, over a process the suite compiles that burns CPU in a known function.

The burner (built with gcc, frame pointers kept, nothing inlined) spends its
time in ``plb_burn_cpu_here`` called from ``main``: sampled with ``--pid``,
that function must show up in the folded output (under ``main``, root first),
in the top table and in the JSON. The machine is shared and loaded: a run that
happened to catch no sample of the burner is repeated until a deadline rather
than asserted on.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from progs import ctrl_c_after_line

from pylibbpf.cli import BUNDLED_DIR
from pylibbpf.cli.profile import Frame, Stack, Symbolizer, cmd_profile, format_folded, format_table
from pylibbpf.syms import Symbol

COMMAND = [sys.executable, "-m", "pylibbpf", "profile"]
ROOT = Path(__file__).resolve().parent.parent
DEADLINE = 120.0
FUNCTION = "plb_burn_cpu_here"

BURNER = f"""
volatile unsigned long plb_sink;

void {FUNCTION}(void)
{{
	for (unsigned long i = 0; i < 100000; i++)
		plb_sink += i * i;
}}

int main(void)
{{
	for (;;)
		{FUNCTION}();
}}
"""

#: A folded line: frames without ';' separated by ';', a space, the count.
FOLDED_LINE = re.compile(r"^[^;\n]+(;[^;\n]+)* \d+$")


@pytest.fixture(scope="module", autouse=True)
def bundled_programs(bpf_privileged: None) -> None:
    import build_bpf  # tools/, on sys.path through conftest

    build_bpf.build(ROOT / "csrc" / "bpf", BUNDLED_DIR, vmlinux_dir=ROOT / "build" / "bpf")


@pytest.fixture(scope="module")
def burner_exe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("profile")
    (d / "burn.c").write_text(BURNER)
    exe = d / "plb_burn"
    subprocess.run(["gcc", "-O0", "-fno-omit-frame-pointer", "-fno-inline", "-o", str(exe), str(d / "burn.c")],
                   check=True, capture_output=True)
    return exe


@pytest.fixture
def burner(burner_exe: Path) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([str(burner_exe)])
    yield proc
    proc.kill()
    proc.wait(timeout=DEADLINE)


def _profile(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done


def _until(found: Callable[[str], bool], *args: str) -> str:
    """Run the command until its output satisfies ``found`` (a loaded machine may starve the burner)."""
    deadline = time.monotonic() + DEADLINE
    while True:
        out = _profile(*args).stdout
        if found(out) or time.monotonic() > deadline:
            return out


def test_folded_output_shows_the_burning_function(burner: subprocess.Popen[bytes]) -> None:
    out = _until(lambda o: FUNCTION in o, "--pid", str(burner.pid), "--duration", "3", "--frequency", "199",
                 "--folded")
    lines = out.splitlines()
    assert lines and all(FOLDED_LINE.match(line) for line in lines), out
    assert all(line.startswith("plb_burn;") for line in lines), out  # --pid: only the burner's comm
    hot = [line for line in lines if FUNCTION in line]
    assert hot, out
    # root first: main is the caller, so it comes before the function on some line
    frames = [line.rsplit(" ", 1)[0].split(";") for line in hot]
    assert any("main" in f and f.index("main") < f.index(FUNCTION) for f in frames), out
    for f in frames:  # kernel frames (suffixed _[k]) come after every user frame
        is_kernel = [name.endswith("_[k]") for name in f]
        assert is_kernel == sorted(is_kernel), f


def test_top_table_shows_the_burning_function(burner: subprocess.Popen[bytes]) -> None:
    out = _until(lambda o: FUNCTION in o, "--pid", str(burner.pid), "--duration", "3", "--frequency", "199",
                 "--top", "5")
    blocks = [b.splitlines() for b in out.strip("\n").split("\n\n")]
    assert 1 <= len(blocks) <= 5, out
    counts = []
    for block in blocks:
        # frames innermost first, then "-  COMM (PID)", then the count
        assert re.fullmatch(rf"    -\s+plb_burn \({burner.pid}\)", block[-2]), block
        counts.append(int(block[-1]))
        assert all(line.startswith("    ") for line in block[:-2]), block
    assert counts == sorted(counts, reverse=True)  # hottest first
    hot = next(b for b in blocks if f"    {FUNCTION}" in b)
    if "    main" in hot:
        assert hot.index(f"    {FUNCTION}") < hot.index("    main")  # innermost first


def test_json_and_user_only(burner: subprocess.Popen[bytes], burner_exe: Path) -> None:
    out = _until(lambda o: FUNCTION in o, "--pid", str(burner.pid), "--duration", "2", "--frequency", "199",
                 "--json", "-U")
    doc = json.loads(out)
    assert doc["frequency"] == 199 and doc["samples"] == sum(s["count"] for s in doc["stacks"]) > 0
    assert {s["pid"] for s in doc["stacks"]} == {burner.pid}
    assert all(s["kernel"] == [] and s["comm"] == "plb_burn" for s in doc["stacks"])  # -U: no kernel stacks
    frames = [f for s in doc["stacks"] for f in s["user"] if f["name"] == FUNCTION]
    assert frames and all(f["module"] == str(burner_exe) and f["address"] > 0 for f in frames)


def test_kernel_only_has_no_user_frames() -> None:
    doc = json.loads(_profile("--duration", "1", "--frequency", "199", "--json", "-K").stdout)
    assert all(s["user"] == [] and not s["missed_user_stack"] for s in doc["stacks"])
    # system-wide, something ran in the kernel; kernel frames resolve to kallsyms names
    names = [f["name"] for s in doc["stacks"] for f in s["kernel"]]
    assert all(s["pid"] > 0 for s in doc["stacks"])  # the idle task is left out without -I
    if names:
        assert all(f["module"] is not None for s in doc["stacks"] for f in s["kernel"])


def test_sigterm_prints_what_was_sampled(burner: subprocess.Popen[bytes]) -> None:
    proc = subprocess.Popen([*COMMAND, "--pid", str(burner.pid), "--frequency", "199", "--folded"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    ready = threading.Event()
    err: list[str] = []

    def collect() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            err.append(line)
            if line.startswith("sampling "):
                ready.set()
        ready.set()

    t = threading.Thread(target=collect)
    t.start()
    assert ready.wait(DEADLINE) and proc.poll() is None, "".join(err)
    time.sleep(0.5)  # not asserted on: a run with no sample prints nothing, still exit 0
    proc.send_signal(signal.SIGTERM)
    assert proc.stdout is not None
    out = proc.stdout.read()  # stderr is the thread's to read
    proc.stdout.close()
    proc.wait(timeout=DEADLINE)
    t.join(DEADLINE)
    proc.stderr.close()
    assert proc.returncode == 0, "".join(err)
    assert all(FOLDED_LINE.match(line) for line in out.splitlines()), out
    assert re.search(r"^\d+ samples, \d+ distinct stacks", "".join(err), re.M), err


def test_ctrl_c_right_after_the_sampling_line_prints_the_stacks(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Regression: the "sampling ..." line was written before the try that turns Ctrl-C into the
    output, so a Ctrl-C at that moment ended the command with nothing printed."""
    err = ctrl_c_after_line(cmd_profile, ["profile", "--duration", "3600", "--json"], "sampling ", monkeypatch)
    assert isinstance(json.loads(capsys.readouterr().out), dict)
    assert "samples" in err.splitlines()[-1]


@pytest.mark.parametrize("args", [[], ["--duration", "0.5"]], ids=["while sampling", "at the output"])
def test_closed_stdout_exits_0(args: list[str]) -> None:
    proc = subprocess.Popen([*COMMAND, "--frequency", "199", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader goes away before (or while) anything is written
    assert proc.wait(timeout=DEADLINE) == 0
    err = proc.stderr.read()
    proc.stderr.close()
    assert "Traceback" not in err and "Broken pipe" not in err


def _exited_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize(("args", "status", "message"), [
    (["--frequency", "0"], 2, "--frequency: must be > 0, got 0"),
    (["--frequency", "10000000"], 1, "--frequency 10000000 is above the kernel's limit of"),
    (["--cpu", "4096"], 1, "--cpu 4096 is not an online CPU (online: 0"),
    (["--pid", "EXITED"], 1, "no such process"),
    (["--folded", "--json"], 2, "argument --json: not allowed with argument --folded"),
    (["-K", "-U"], 2, "argument -U/--user-only: not allowed with argument -K/--kernel-only"),
    (["--top", "-1"], 2, "--top: must be > 0, got -1"),
])
def test_bad_arguments_are_one_line(args: list[str], status: int, message: str) -> None:
    args = [str(_exited_pid()) if a == "EXITED" else a for a in args]
    done = subprocess.run([*COMMAND, "--duration", "1", *args], capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == status, done.stderr
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert done.stdout == ""


# --- output formats, on synthetic stacks -------------------------------------------------------

def _stack(count: int, user: list[str], kernel: list[str], pid: int = 42, comm: str = "app") -> Stack:
    return Stack(pid, comm, count, kernel=tuple(Frame(0xFFFF0000 + i, Symbol(n, 0, "kernel"), True)
                                                for i, n in enumerate(kernel)),
                 user=tuple(Frame(0x1000 + i, Symbol(n, 4, "/bin/app"), False) for i, n in enumerate(user)))


def test_folded_and_table_text() -> None:
    stacks = [_stack(3, ["inner", "main"], ["do_sys", "entry"]), _stack(5, ["inner", "main"], []),
              _stack(2, ["inner", "main"], [])]  # same frames as the one before: merged, 7
    assert format_folded(stacks, None) == "app;main;inner 7\napp;main;inner;entry_[k];do_sys_[k] 3\n"
    assert format_folded(stacks, 1) == "app;main;inner 7\n"
    assert format_table(stacks, 10) == (
        "    inner\n    main\n    -                app (42)\n        7\n\n"
        "    do_sys\n    entry\n    inner\n    main\n    -                app (42)\n        3\n\n")


def test_missing_frames_and_exited_processes() -> None:
    missed = Stack(7, "k", 1, kernel=(), user=(), missed_kernel=True, missed_user=True)
    assert format_folded([missed], None) == "k;[Missed User Stack];[Missed Kernel Stack]_[k] 1\n"
    frame = Symbolizer(None).user_frame(_exited_pid(), 0x55D0C0DE1139)
    assert frame.symbol is None and frame.text == "[unknown]"
    stripped = Frame(0x7F00, Symbol(None, 0x2724A, "/usr/lib/libc.so.6"), False)
    assert stripped.text == "[unknown]"
    assert stripped.as_json() == {"address": 0x7F00, "name": None, "offset": 0x2724A, "module": "/usr/lib/libc.so.6"}
