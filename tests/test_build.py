"""Building BPF programs from Python: include_dir(), vmlinux_h(), build.compile, BPFObject.compile, `pylibbpf build`."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import pylibbpf
from pylibbpf import BPFObject, RingBuffer, build

ROOT = Path(__file__).resolve().parent.parent
COMMAND = [sys.executable, "-m", "pylibbpf"]

# One file, every BPF-side header the package ships, a ring buffer and a macro set through cflags.
PROGRAM = """\
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/usdt.bpf.h>

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} events SEC(".maps");

SEC("syscall")
int emit(void *ctx)
{
	__u64 value = MAGIC + bpf_ntohs(bpf_htons(7));
	int i;

	for (i = 0; i < 3; i++) {
		__u64 rec[2] = { i, value };
		bpf_ringbuf_output(&events, rec, sizeof(rec), 0);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache directory of this test's own (vmlinux.h is generated afresh in it)."""
    monkeypatch.setenv("PYLIBBPF_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def no_clang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """PATH holding only an empty directory, and no $CLANG."""
    (tmp_path / "empty-bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.delenv("CLANG", raising=False)
    yield


def read_events(obj: BPFObject) -> list[tuple[int, int]]:
    seen: list[tuple[int, int]] = []
    with RingBuffer(obj.maps["events"], lambda data: seen.append(struct.unpack_from("<QQ", data))) as rb:
        obj.programs["emit"].test_run()
        rb.poll(0.005)
    return seen


# --- include_dir -----------------------------------------------------------------------------

def test_include_dir_holds_libbpfs_bpf_headers() -> None:
    inc = Path(pylibbpf.include_dir())
    assert inc == Path(build.include_dir())
    assert inc.is_relative_to(Path(pylibbpf.__file__).parent)  # shipped in the package
    names = {"bpf_helpers.h", "bpf_helper_defs.h", "bpf_tracing.h", "bpf_core_read.h", "bpf_endian.h", "usdt.bpf.h"}
    assert names <= {p.name for p in (inc / "bpf").iterdir()}
    # The pinned libbpf's own copies, not the system's.
    pinned = ROOT / "vendor" / "libbpf" / "build" / "install" / "include" / "bpf"
    for name in names:
        assert (inc / "bpf" / name).read_bytes() == (pinned / name).read_bytes(), name


def test_include_dir_is_enough_for_a_program(tmp_path: Path) -> None:
    """clang with -I include_dir() and the vmlinux.h directory, nothing else, compiles every header."""
    src = tmp_path / "headers.bpf.c"
    src.write_text(PROGRAM.replace("#include <bpf/usdt.bpf.h>\n", ""))  # it needs the system's <asm/errno.h>
    clang = build.find_clang()
    proc = subprocess.run([clang, "-g", "-O2", "-target", "bpf", "-D__TARGET_ARCH_x86", "-DMAGIC=0", "-nostdinc",
                           f"-I{pylibbpf.include_dir()}", f"-I{Path(build.vmlinux_h()).parent}",
                           "-c", str(src), "-o", str(tmp_path / "headers.bpf.o")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# --- vmlinux_h -------------------------------------------------------------------------------

def test_vmlinux_h_generated_once_and_cached(cache: Path) -> None:
    first = build.vmlinux_h()
    assert Path(first).is_relative_to(cache)
    assert build.btf_identity() in first
    text = Path(first).read_text()
    assert text.startswith("#ifndef __VMLINUX_H__") and "struct task_struct {" in text
    assert "preserve_access_index" in text
    stamp = os.stat(first).st_mtime_ns
    assert build.vmlinux_h() == first and os.stat(first).st_mtime_ns == stamp  # not regenerated


def test_vmlinux_h_keyed_by_the_btf(cache: Path, bpf_objects: dict[str, Path]) -> None:
    """Another BTF (here an object file's) has another identity and its own header."""
    other = build.vmlinux_h(btf_path=bpf_objects["ringbuf"])
    assert other != build.vmlinux_h()
    assert build.btf_identity(bpf_objects["ringbuf"]) in other
    assert "struct emit_args {" in Path(other).read_text()


@pytest.mark.skipif(shutil.which("bpftool") is None and not os.path.exists("/usr/sbin/bpftool"),
                    reason="bpftool is not installed")
def test_vmlinux_h_libbpf_writes_what_bpftool_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The linked libbpf's btf_dump and bpftool give the same declarations (libbpf 1.5 also marks
    1-byte enums with mode(byte), which an older bpftool's libbpf does not)."""
    texts = []
    for using in ("bpftool", "libbpf"):
        monkeypatch.setenv("PYLIBBPF_CACHE_DIR", str(tmp_path / using))
        texts.append(Path(build.vmlinux_h(using=using)).read_text().replace(" __attribute__((mode(byte)))", ""))
    assert texts[0] == texts[1]


def test_vmlinux_h_bad_input(tmp_path: Path, cache: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no BTF"):
        build.vmlinux_h(btf_path=tmp_path / "missing")
    with pytest.raises(ValueError, match="using"):
        build.vmlinux_h(using="gcc")
    junk = tmp_path / "junk"
    junk.write_bytes(b"not BTF at all")
    with pytest.raises(pylibbpf.BPFError):
        build.vmlinux_h(btf_path=junk, using="libbpf")
    assert not list(cache.rglob("vmlinux.h"))  # nothing half-written is cached


# --- compile ---------------------------------------------------------------------------------

def test_bpfobject_compile_text_loads_and_emits(bpf_privileged: None) -> None:
    with BPFObject.compile(PROGRAM, cflags=["-DMAGIC=100"]) as obj:
        assert not obj.loaded
        obj.load()
        assert read_events(obj) == [(0, 107), (1, 107), (2, 107)]


def test_bpfobject_compile_path_loads_and_emits(bpf_privileged: None, tmp_path: Path) -> None:
    src = tmp_path / "oneshot.bpf.c"
    src.write_text(PROGRAM.replace('#include "vmlinux.h"', '#include "vmlinux.h"\n#include "local.h"'))
    (tmp_path / "local.h").write_text("#define MAGIC 5\n")  # found beside the source
    with BPFObject.compile(src) as obj:
        assert obj.name == "oneshot"
        obj.load()
        assert read_events(obj) == [(0, 12), (1, 12), (2, 12)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local.h", "oneshot.bpf.c"]  # nothing left behind


def test_compile_writes_the_object_beside_the_source(tmp_path: Path) -> None:
    src = tmp_path / "prog.bpf.c"
    src.write_text(PROGRAM)
    out = build.compile(src, cflags=["-DMAGIC=1"])
    assert out == tmp_path / "prog.bpf.o"
    with BPFObject.open(out) as obj:
        assert list(obj.programs) == ["emit"] and "events" in obj.maps


def test_compile_without_clang_names_clang(no_clang: None, tmp_path: Path) -> None:
    with pytest.raises(build.CompileError, match=r"clang not found .*apt-get install clang"):
        BPFObject.compile(PROGRAM)


def test_compile_clang_from_env_must_exist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLANG", "/nonexistent/clang-99")
    with pytest.raises(build.CompileError, match=r"\$CLANG is '/nonexistent/clang-99'"):
        build.find_clang()


def test_compile_error_carries_clangs_diagnostics() -> None:
    with pytest.raises(build.CompileError, match="could not compile the C source text") as info:
        BPFObject.compile("int broken = ;\n")
    assert "error: expected expression" in info.value.output
    assert info.value.command[0] == build.find_clang()


# `x == 1;` where `x = 1;` was meant: clang compiles it, and warns.
TYPO = """\
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

SEC("syscall")
int typo(void *ctx)
{
	int x = bpf_get_prandom_u32();

	x == 1;
	return x;
}

char LICENSE[] SEC("license") = "GPL";
"""
UNUSED_COMPARISON = "warning: equality comparison result unused [-Wunused-comparison]"


def test_compile_warnings_reach_the_caller(tmp_path: Path) -> None:
    with pytest.warns(build.CompileWarning) as record:
        BPFObject.compile(TYPO).close()
    compiled = [w for w in record if w.category is build.CompileWarning]
    assert [w.filename for w in compiled] == [__file__]  # the caller's line, not the package's
    (text,) = [str(w.message) for w in compiled]
    assert text.startswith(f"<source>:9:4: {UNUSED_COMPARISON}\n")
    assert "note: use '=' to turn this equality comparison into an assignment" in text  # notes stay with it
    assert "warning generated" not in text
    src = tmp_path / "typo.bpf.c"
    src.write_text(TYPO)
    with pytest.warns(build.CompileWarning, match=rf"^{re.escape(str(src))}:9:4: warning: equality"):
        build.compile(src)


def test_a_clean_compile_warns_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BPFObject.compile(PROGRAM, cflags=["-DMAGIC=1"]).close()


def test_diagnostics_are_cut_one_per_warning() -> None:
    stderr = (
        "a.c:1:1: warning: first [-Wfirst]\n"
        "In file included from a.c:1:\n"
        "                 from c.h:4:\n"
        "b.h:2:3: warning: unused variable 'y' [-Wunused-variable]\n"
        "    2 |   int y;\n"
        "      |       ^\n"
        "a.c:5:4: warning: equality comparison result unused [-Wunused-comparison]\n"
        "    5 |   x == 1;\n"
        "a.c:5:4: note: use '=' to turn this equality comparison into an assignment\n"
        "clang: warning: argument unused during compilation: '-pg' [-Wunused-command-line-argument]\n"
        "3 warnings generated.\n")
    assert build.diagnostics(stderr) == [
        "a.c:1:1: warning: first [-Wfirst]",
        "In file included from a.c:1:\n                 from c.h:4:\n"
        "b.h:2:3: warning: unused variable 'y' [-Wunused-variable]\n"
        "    2 |   int y;\n      |       ^",
        "a.c:5:4: warning: equality comparison result unused [-Wunused-comparison]\n    5 |   x == 1;\n"
        "a.c:5:4: note: use '=' to turn this equality comparison into an assignment",
        "clang: warning: argument unused during compilation: '-pg' [-Wunused-command-line-argument]",
    ]
    assert build.diagnostics("") == []


def test_compile_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="cflags"):
        BPFObject.compile(PROGRAM, cflags="-DMAGIC=1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cflags"):
        BPFObject.compile(PROGRAM, cflags=[1])  # type: ignore[list-item]
    with pytest.raises(FileNotFoundError, match=r"missing\.bpf\.c"):
        BPFObject.compile(tmp_path / "missing.bpf.c")
    with pytest.raises(ValueError, match="output is required"):
        build.compile(PROGRAM)
    with pytest.raises(TypeError, match="source_or_path"):
        BPFObject.compile(42)  # type: ignore[arg-type]


# --- pylibbpf build --------------------------------------------------------------------------

def run_build(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, "build", *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, env=env, cwd=ROOT)


def test_cli_build(tmp_path: Path) -> None:
    src = tmp_path / "tool.bpf.c"
    src.write_text(PROGRAM)
    proc = run_build(str(src), "-D", "MAGIC=3")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{tmp_path / 'tool.bpf.o'}\n"
    proc = run_build(str(src), "-o", str(tmp_path / "other.o"), "--cflags=-DMAGIC=4 -Wall")
    assert proc.returncode == 0, proc.stderr
    with BPFObject.open(tmp_path / "other.o") as obj:
        assert list(obj.programs) == ["emit"]


def test_cli_build_shows_warnings(tmp_path: Path) -> None:
    src = tmp_path / "typo.bpf.c"
    src.write_text(TYPO)
    proc = run_build(str(src))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{tmp_path / 'typo.bpf.o'}\n"
    assert proc.stderr.startswith(f"{src}:9:4: {UNUSED_COMPARISON}\n") and "note: use '='" in proc.stderr
    assert "Traceback" not in proc.stderr and "CompileWarning" not in proc.stderr


def test_cli_build_prints_paths() -> None:
    proc = run_build("--print-include-dir", "--print-vmlinux-h")
    assert proc.returncode == 0, proc.stderr
    inc, vmlinux = proc.stdout.splitlines()
    assert (Path(inc) / "bpf" / "bpf_helpers.h").is_file() and Path(vmlinux).name == "vmlinux.h"


def test_cli_build_errors_are_one_line(tmp_path: Path) -> None:
    proc = run_build(str(tmp_path / "missing.bpf.c"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "missing.bpf.c" in proc.stderr
    src = tmp_path / "tool.bpf.c"
    src.write_text(PROGRAM)
    (tmp_path / "empty-bin").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "CLANG"}
    env["PATH"] = str(tmp_path / "empty-bin")
    proc = run_build(str(src), env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "clang not found" in proc.stderr


def test_cli_build_compile_error_shows_diagnostics(tmp_path: Path) -> None:
    src = tmp_path / "bad.bpf.c"
    src.write_text("int broken = ;\n")
    proc = run_build(str(src))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "bad.bpf.c:1:" in proc.stderr and "expected expression" in proc.stderr
    assert not (tmp_path / "bad.bpf.o").exists()
