"""EventDef.from_c / pylibbpf.build.event_def: a C struct declaration through clang's BTF.

The references are independent of clang and of pylibbpf: each struct is also compiled by gcc for
this machine (x86-64 and arm64 lay these fields out as BPF does: 8-byte aligned 64-bit integers)
into a program that prints sizeof and offsetof of every field.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import pylibbpf
from pylibbpf import EventDef

# libbpf-tools-style headers, declared as those tools declare their events (the tool's own header
# uses the kernel's types from vmlinux.h, included before it by the .bpf.c and by from_c).
OPENSNOOP = """\
#define TASK_COMM_LEN 16
#define NAME_MAX 255
#define INVALID_UID ((uid_t)-1)

struct args_t {
	const char *fname;
	int flags;
};

struct event {
	/* user terminology for pid: */
	__u64 ts;
	pid_t pid;
	uid_t uid;
	int ret;
	int flags;
	__u64 callers[2];
	char comm[TASK_COMM_LEN];
	char fname[NAME_MAX];
};
"""
EXITSNOOP = """\
#define TASK_COMM_LEN 16

struct event {
	__u64 start_time;
	__u64 exit_time;
	__u32 pid;
	__u32 tid;
	__u32 ppid;
	__u32 sig;
	int exit_code;
	char comm[TASK_COMM_LEN];
};
"""
BOOTSTRAP = """\
#define TASK_COMM_LEN 16
#define MAX_FILENAME_LEN 127

struct event {
	int pid;
	int ppid;
	unsigned exit_code;
	unsigned long long duration_ns;
	char comm[TASK_COMM_LEN];
	char filename[MAX_FILENAME_LEN];
	bool exit_event;
};
"""
BASHREADLINE = """\
#define MAX_LINE_SIZE 80

struct str_t {
	__u32 pid;
	char str[MAX_LINE_SIZE];
};
"""
TOOLS = {
    "opensnoop": (OPENSNOOP, "event", ["ts", "pid", "uid", "ret", "flags", "callers", "comm", "fname"]),
    "exitsnoop": (EXITSNOOP, "event", ["start_time", "exit_time", "pid", "tid", "ppid", "sig", "exit_code",
                                       "comm"]),
    "bootstrap": (BOOTSTRAP, "event", ["pid", "ppid", "exit_code", "duration_ns", "comm", "filename",
                                       "exit_event"]),
    "bashreadline": (BASHREADLINE, "str_t", ["pid", "str"]),
}


def gcc_layout(tmp_path: Path, header: str, struct: str, fields: list[str]) -> tuple[int, list[tuple[str, int, int]]]:
    """(sizeof, [(field, offsetof, sizeof)]) of ``struct`` as gcc lays it out on this machine."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed (the reference layout is gcc's)")
    lines = [f'\tprintf("%zu\\n", sizeof(struct {struct}));'] + [
        f'\tprintf("{f} %zu %zu\\n", offsetof(struct {struct}, {f}), sizeof(((struct {struct} *)0)->{f}));'
        for f in fields]
    source = tmp_path / f"{struct}_layout.c"
    source.write_text("#include <stdbool.h>\n#include <stddef.h>\n#include <stdio.h>\n#include <sys/types.h>\n"
                      "#include <linux/types.h>\n" + header + "\nint main(void)\n{\n" + "\n".join(lines)
                      + "\n\treturn 0;\n}\n")
    exe = tmp_path / f"{struct}_layout"
    subprocess.run([gcc, "-o", str(exe), str(source)], check=True, capture_output=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    rows = [line.split() for line in out[1:] if line]
    return int(out[0]), [(name, int(off), int(size)) for name, off, size in rows]


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_libbpf_tools_events_match_gccs_layout(tool: str, tmp_path: Path) -> None:
    header, struct, fields = TOOLS[tool]
    event = EventDef.from_c(header, f"struct {struct}")
    size, rows = gcc_layout(tmp_path, header, struct, fields)
    assert event.name == struct and event.size == size
    assert [(f.name, f.offset, f.size) for f in event.field_infos] == rows
    # the same layout that clang gives a BPF object with the struct (what obj.btf_struct reads)
    assert event == pylibbpf.build.event_def(header, struct)


def test_field_types_follow_the_c_types() -> None:
    event = EventDef.from_c(OPENSNOOP, "struct event")
    assert [(f.name, f.type, f.count) for f in event.field_infos] == [
        ("ts", "u64", 1), ("pid", "i32", 1), ("uid", "u32", 1), ("ret", "i32", 1), ("flags", "i32", 1),
        ("callers", "u64", 2), ("comm", "char", 16), ("fname", "char", 255)]
    record = event.parse(event.serialize({"ts": 5, "pid": 42, "comm": "bash", "fname": "/etc/passwd"}))
    assert (record.ts, record.pid, record.comm, record.fname) == (5, 42, "bash", "/etc/passwd")


def test_the_tools_own_header_through_include_dirs_and_cflags(tmp_path: Path) -> None:
    (tmp_path / "tool.h").write_text("struct event {\n\t__u32 pid;\n\tchar comm[COMM_LEN];\n\t__u64 ts;\n};\n")
    event = EventDef.from_c('#include "tool.h"\n', "event", include_dirs=[tmp_path], cflags=["-DCOMM_LEN=12"])
    assert [(f.name, f.offset) for f in event.field_infos] == [("pid", 0), ("comm", 4), ("ts", 16)]
    assert event.size == 24


def test_the_result_is_cached_by_the_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    header = "struct cached_event {\n\t__u64 ts;\n\t__u8 flag;\n};\n"
    first = EventDef.from_c(header, "struct cached_event")
    # without a compiler: the same text comes from the cache, new text needs clang
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CLANG", raising=False)
    assert EventDef.from_c(header, "cached_event") is first
    with pytest.raises(FileNotFoundError, match=r"clang not found.*apt-get install clang-19"):
        EventDef.from_c(header + "\n", "cached_event")


def test_clangs_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"(?s)clang could not compile header_text.*<header_text>:2:.*error:"):
        EventDef.from_c("struct broken {\n\tunknown_t x;\n};\n", "struct broken")


def test_a_struct_the_text_does_not_define_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="does not define struct missing"):
        EventDef.from_c(EXITSNOOP, "struct missing")
    with pytest.raises(KeyError, match="does not define struct later"):
        EventDef.from_c("struct later;\nstruct other { struct later *p; };\n", "struct later")


@pytest.mark.parametrize(("header", "struct", "exc", "match"), [
    (EXITSNOOP, "struct", ValueError, "struct must be a struct's name"),
    (EXITSNOOP, "struct 1event", ValueError, "struct must be a struct's name"),
    (EXITSNOOP, "union event", ValueError, "struct must be a struct's name"),
    (EXITSNOOP, 5, TypeError, "struct"),
    (b"struct event { int x; };", "event", TypeError, "header_text"),
])
def test_bad_arguments(header: object, struct: object, exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        EventDef.from_c(header, struct)  # type: ignore[arg-type]


def test_bad_include_dirs_and_cflags() -> None:
    with pytest.raises(TypeError, match="include_dirs"):
        EventDef.from_c(EXITSNOOP, "event", include_dirs="include")
    with pytest.raises(TypeError, match="cflags"):
        EventDef.from_c(EXITSNOOP, "event", cflags="-DX=1")
