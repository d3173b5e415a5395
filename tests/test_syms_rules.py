"""The naming rules of pylibbpf.syms, each against a reference computed here.

- Kernel aliases: every address of this kernel's /proc/kallsyms with several names, against the
  stated rule implemented again below from its description.
- Code only: data objects, addresses past a function's size, non-executable memory have no name.
- Where function names come from: MiniDebugInfo (``.gnu_debugdata``), a debug file found by
  build-id, a 120 000-function ``.symtab`` (with and without numpy).
- JIT code: a process's ``/tmp/perf-PID.map`` (a synthetic JIT here, CPython's ``-X perf``).
"""

from __future__ import annotations

import ctypes
import lzma
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from symref import kallsyms_groups, kernel_choice

from benchmarks import symbols as symbols_benchmark
from pylibbpf import KernelSymbols, ProcessSymbols, Symbol, _elfsyms
from pylibbpf.syms import elf_has_symbol, preferred_kernel_name

SRC = Path(__file__).resolve().parent / "syms"

# --- kernel aliases ------------------------------------------------------------------------------


def test_every_kernel_alias_group_resolves_by_the_rule(bpf_privileged: None) -> None:
    ks = KernelSymbols()
    groups = {a: g for a, g in kallsyms_groups().items() if len(g) > 1}
    assert len(groups) > 20, "this kernel should have alias groups (syscall wrappers)"
    for addr, group in groups.items():
        expected = kernel_choice(group)
        sym = ks.resolve(addr)
        assert sym is not None and sym.name == expected and sym.offset == 0, (hex(addr), group)
        assert set(ks.aliases(addr)) == {n for n, _ in group} and ks.aliases(addr)[0] == expected
        assert ks.aliases(addr + 1) == ks.aliases(addr) or ks.resolve(addr + 1).offset == 0  # type: ignore[union-attr]
        for name, _ in group:
            assert ks.address(name) is not None
    getppid = ks.address("__x64_sys_getppid")
    assert getppid is not None and getppid == ks.address("__ia32_sys_getppid")
    assert ks.resolve(getppid) == Symbol("__x64_sys_getppid", 0, "kernel")


def test_the_alias_rule_step_by_step() -> None:
    x86 = "x86_64"
    assert preferred_kernel_name([("_stext", False), ("_text", True)], x86) == "_text"
    assert preferred_kernel_name([("__do_sys_getppid", False), ("__ia32_sys_getppid", True),
                                  ("__x64_sys_getppid", True)], x86) == "__x64_sys_getppid"
    assert preferred_kernel_name([("__pfx___ia32_sys_pause", True), ("__pfx___x64_sys_pause", True)],
                                 x86) == "__pfx___x64_sys_pause"
    assert preferred_kernel_name([("__se_sys_x", True), ("other", True)], x86) == "other"
    assert preferred_kernel_name([("memset", True), ("__memset", True), ("__pi_memset", True)], x86) == "memset"
    assert preferred_kernel_name([("hash_ip4_destroy", False), ("hash_ip6_destroy", False)], x86) == \
        "hash_ip6_destroy"
    assert preferred_kernel_name([("__arm64_sys_read", True), ("__do_sys_read", True)], "aarch64") == \
        "__arm64_sys_read"
    with pytest.raises(ValueError, match="no names"):
        preferred_kernel_name([], x86)


def test_saved_kallsyms_aliases_and_address(tmp_path: Path) -> None:
    saved = tmp_path / "kallsyms"
    saved.write_text("ffffffff81000000 t __do_sys_getppid\nffffffff81000000 T __ia32_sys_getppid\n"
                     "ffffffff81000000 T __x64_sys_getppid\nffffffff81000040 T next\n")
    ks = KernelSymbols(saved)
    if os.uname().machine == "x86_64":
        assert ks.resolve(0xFFFFFFFF81000008) == Symbol("__x64_sys_getppid", 8, "kernel")
    assert set(ks.aliases(0xFFFFFFFF81000008)) == {"__do_sys_getppid", "__ia32_sys_getppid", "__x64_sys_getppid"}
    assert ks.aliases(0xFFFFFFFF81000040) == ("next",)
    assert ks.aliases(0x1000) == ()
    assert {ks.address(n) for n in ("__do_sys_getppid", "__ia32_sys_getppid", "__x64_sys_getppid")} == \
        {0xFFFFFFFF81000000}
    assert ks.address("missing") is None
    assert len(ks) == 2


# --- code only ------------------------------------------------------------------------------------


def _functions(path: str | Path) -> list[tuple[int, int, str]]:
    """(start, size, name) of every defined function of the file's .symtab and .dynsym (pyelftools)."""
    out = []
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for section in (elf.get_section_by_name(".symtab"), elf.get_section_by_name(".dynsym")):
            if section is None:
                continue
            for s in section.iter_symbols():
                if s["st_info"]["type"] in ("STT_FUNC", "STT_GNU_IFUNC") and s["st_value"] and s.name \
                        and s["st_shndx"] != "SHN_UNDEF":
                    out.append((s["st_value"], s["st_size"], s.name))
    return out


def test_a_data_object_is_not_a_frame() -> None:
    ps = ProcessSymbols(os.getpid())
    data = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "PyCFunction_Type"))
    assert ps.resolve(data) is None
    where = ps.locate(data)
    assert where is not None and where.name is None
    code = ctypes.cast(ctypes.pythonapi.PyObject_Repr, ctypes.c_void_p).value
    assert code is not None
    found = ps.resolve(code)
    assert found is not None and found.name == "PyObject_Repr" and found.offset == 0


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("syms-rules")
    subprocess.run(["gcc", "-O1", "-g", "-fPIE", "-pie", "-Wl,--build-id=sha1", str(SRC / "target.c"),
                    str(SRC / "lib.c"), "-o", str(d / "target"), "-ldl"], check=True, capture_output=True)
    return d / "target"


@pytest.fixture
def running() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        if p.stdin:
            p.stdin.close()
        p.wait(30)
        if p.stdout:
            p.stdout.close()


def _start(exe: Path, procs: list[subprocess.Popen[str]]) -> tuple[int, dict[str, int]]:
    p = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    procs.append(p)
    addrs: dict[str, int] = {}
    assert p.stdout is not None
    for line in p.stdout:
        name, value = line.split()
        if name == "ready":
            break
        addrs[name] = int(value, 16)
    return p.pid, addrs


def test_past_a_function_size_is_unknown(built: Path, running: list[subprocess.Popen[str]]) -> None:
    pid, addrs = _start(built, running)
    functions = sorted(_functions(built))
    starts = {s for s, _, _ in functions}
    ps = ProcessSymbols(pid)
    bias = addrs["syms_exe_global"] - next(s for s, _, n in functions if n == "syms_exe_global")
    gaps = 0
    for start, size, name in functions:
        assert ps.resolve(start + bias) is not None, name
        end = start + size
        if size and end not in starts and not any(s <= end < s + n for s, n, _ in functions):
            # the padding after a function, before the next: no function covers it
            assert ps.resolve(end + bias) is None, (name, hex(end))
            where = ps.locate(end + bias)
            assert where is not None and where.name is None and where.offset == end
            gaps += 1
    assert gaps >= 2


def test_minidebuginfo_names_stripped_local_functions(built: Path, tmp_path: Path,
                                                      running: list[subprocess.Popen[str]]) -> None:
    exe = tmp_path / "target"
    shutil.copy(built, exe)
    debug = tmp_path / "target.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(exe), str(debug)], check=True)
    mini = tmp_path / "mini"
    subprocess.run(["objcopy", "-S", "--remove-section", ".comment", "--keep-symbol=syms_exe_static",
                    "--keep-symbol=syms_exe_global", str(debug), str(mini)], check=True)
    xz = tmp_path / "mini.xz"
    xz.write_bytes(lzma.compress(mini.read_bytes()))
    subprocess.run(["strip", "--strip-all", str(exe)], check=True)
    pid, addrs = _start(exe, running)
    ps = ProcessSymbols(pid)
    assert ps.resolve(addrs["syms_exe_static"]) is None  # stripped: nothing to name it by
    subprocess.run(["objcopy", "--add-section", f".gnu_debugdata={xz}", str(exe), str(tmp_path / "with-mini")],
                   check=True)
    pid, addrs = _start(tmp_path / "with-mini", running)
    ps = ProcessSymbols(pid)
    assert ps.resolve(addrs["syms_exe_static"] + 2) == Symbol("syms_exe_static", 2, str(tmp_path / "with-mini"))
    assert ps.resolve(addrs["syms_exe_global"]) == Symbol("syms_exe_global", 0, str(tmp_path / "with-mini"))


def _build_id(path: Path) -> str:
    with open(path, "rb") as f:
        build = _elfsyms.build_id(ELFFile(f))
    assert build is not None
    return build


def test_debug_file_by_build_id(built: Path, tmp_path: Path, running: list[subprocess.Popen[str]],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    exe = tmp_path / "target"
    shutil.copy(built, exe)
    build = _build_id(exe)
    root = tmp_path / "debug"
    debug = root / ".build-id" / build[:2] / (build[2:] + ".debug")
    debug.parent.mkdir(parents=True)
    subprocess.run(["objcopy", "--only-keep-debug", str(exe), str(debug)], check=True)
    subprocess.run(["strip", "--strip-all", str(exe)], check=True)
    monkeypatch.setattr(_elfsyms, "DEBUG_DIRS", [str(tmp_path / "nothing-here"), str(root)])
    _elfsyms.clear_cache()
    pid, addrs = _start(exe, running)
    assert ProcessSymbols(pid).resolve(addrs["syms_exe_static"]) == Symbol("syms_exe_static", 0, str(exe))
    # a debug file of another build at that name is not believed
    other = tmp_path / "other"
    subprocess.run(["gcc", "-O0", "-g", "-DOTHER", "-Wl,--build-id=sha1", str(SRC / "target.c"), str(SRC / "lib.c"),
                    "-o", str(other), "-ldl"], check=True, capture_output=True)
    subprocess.run(["objcopy", "--only-keep-debug", str(other), str(debug)], check=True)
    _elfsyms.clear_cache()
    pid, addrs = _start(exe, running)
    assert ProcessSymbols(pid).resolve(addrs["syms_exe_static"]) is None
    _elfsyms.clear_cache()


# --- a large table ----------------------------------------------------------------------------------

N_FUNCTIONS = 120_000


@pytest.fixture(scope="module")
def large_object(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shared object with N_FUNCTIONS functions (every other one local): benchmarks.symbols makes it."""
    return symbols_benchmark.large_object(tmp_path_factory.mktemp("syms-large"), N_FUNCTIONS)


@pytest.mark.parametrize("with_numpy", [True, False])
def test_a_large_symbol_table(large_object: Path, with_numpy: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not with_numpy:
        monkeypatch.setattr(_elfsyms, "_np", None)
    with open(large_object, "rb") as f:
        table = _elfsyms.parse(f)
    assert len(table) == N_FUNCTIONS
    reference = {name: (start, size) for start, size, name in _functions(large_object)}
    assert len(reference) == N_FUNCTIONS
    for name in random.Random(5).sample(sorted(reference), 2000):
        start, size = reference[name]
        assert table.lookup(start) == (name, 0)
        assert table.lookup(start + size - 1) == (name, size - 1)
        assert table.lookup(start + size) is None  # the int3 after each function
    lib = ctypes.CDLL(str(large_object))
    addr = ctypes.cast(lib.f99999, ctypes.c_void_p).value
    assert ProcessSymbols(os.getpid()).resolve(addr) == Symbol("f99999", 0, str(large_object))


def test_elf_has_symbol(built: Path, large_object: Path, tmp_path: Path) -> None:
    assert elf_has_symbol(built, "syms_exe_static") and elf_has_symbol(built, "main")
    assert not elf_has_symbol(built, "syms_exe") and not elf_has_symbol(built, "printf")  # printf is undefined here
    assert elf_has_symbol(large_object, "f119999") and not elf_has_symbol(large_object, "f120000")
    assert elf_has_symbol(large_object, "f0")  # a local function of .symtab
    with pytest.raises(FileNotFoundError):
        elf_has_symbol(tmp_path / "missing", "main")
    not_elf = tmp_path / "text"
    not_elf.write_text("hello")
    with pytest.raises(ValueError, match="is not a readable ELF file"):
        elf_has_symbol(not_elf, "main")
    with pytest.raises(ValueError, match="name must be a non-empty"):
        elf_has_symbol(built, "")
    with pytest.raises(TypeError, match="name"):
        elf_has_symbol(built, 5)  # type: ignore[arg-type]
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        elf_has_symbol(fifo, "main")


def test_parsed_once_per_build_id(built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copies = [tmp_path / "a", tmp_path / "b"]
    for c in copies:
        shutil.copy(built, c)
    parsed: list[object] = []
    real = _elfsyms.parse

    def counting(stream: object) -> _elfsyms.ElfSymbols:
        parsed.append(stream)
        return real(stream)  # type: ignore[arg-type]

    monkeypatch.setattr(_elfsyms, "parse", counting)
    _elfsyms.clear_cache()
    tables = []
    for c in copies:
        with open(c, "rb") as f:
            tables.append(_elfsyms.cached(f, ("file", str(c))))
    assert len(parsed) == 1 and tables[0] is tables[1]
    _elfsyms.clear_cache()


# --- JIT code ------------------------------------------------------------------------------------

JIT = r"""
import ctypes, mmap, os, sys
region = mmap.mmap(-1, 2 * mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
base = ctypes.addressof(ctypes.c_char.from_buffer(region))
if sys.argv[1] == "write":
    with open(f"/tmp/perf-{os.getpid()}.map", "w") as f:
        f.write(f"{base:x} 40 jitted_add\n{base + 0x100:x} 20 jitted_mul\n")
print(base, flush=True)
sys.stdin.read()
"""


def _jit(mode: str) -> tuple[subprocess.Popen[str], int]:
    p = subprocess.Popen([sys.executable, "-c", JIT, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    return p, int(p.stdout.readline())


def _stop(p: subprocess.Popen[str]) -> None:
    assert p.stdin is not None and p.stdout is not None
    p.stdin.close()
    p.wait(30)
    p.stdout.close()
    Path(f"/tmp/perf-{p.pid}.map").unlink(missing_ok=True)


def test_jit_frames_from_the_perf_map() -> None:
    p, base = _jit("write")
    try:
        ps = ProcessSymbols(p.pid)
        perf_map = f"/tmp/perf-{p.pid}.map"
        assert ps.resolve(base + 4) == Symbol("jitted_add", 4, perf_map)
        assert ps.resolve(base + 0x110) == Symbol("jitted_mul", 0x10, perf_map)
        assert ps.resolve(base + 0x80) is None  # between entries
        with open(perf_map, "a") as f:  # the JIT compiled more code: read again
            f.write(f"{base + 0x80:x} 8 jitted_late\n")
        assert ps.resolve(base + 0x81) == Symbol("jitted_late", 1, perf_map)
    finally:
        _stop(p)


def test_a_fifo_or_foreign_perf_map_is_not_read() -> None:
    p, base = _jit("none")
    perf_map = Path(f"/tmp/perf-{p.pid}.map")
    try:
        os.mkfifo(perf_map)
        assert ProcessSymbols(p.pid).resolve(base) is None  # no hang: a FIFO is refused without a read
        perf_map.unlink()
        perf_map.write_text(f"{base:x} 40 planted\n")
        os.chown(perf_map, 12345, 12345)  # another user's file at that name
        assert ProcessSymbols(p.pid).resolve(base) is None
        os.chown(perf_map, 0, 0)
        assert ProcessSymbols(p.pid).resolve(base) == Symbol("planted", 0, str(perf_map))
    finally:
        _stop(p)


def _python_with_perf_support() -> str | None:
    for version in ("3.13", "3.12"):
        for exe in sorted(Path.home().glob(f".pyenv/versions/{version}*/bin/python{version}")):
            return str(exe)
    return None


def test_cpython_perf_trampolines_are_named() -> None:
    exe = _python_with_perf_support()
    if exe is None:
        pytest.skip("no CPython 3.12+ under ~/.pyenv/versions")
    code = ("import sys\ndef spin_here():\n    return sum(range(10))\n"
            "for _ in range(1000): spin_here()\nprint('ready', flush=True)\nsys.stdin.read()\n")
    p = subprocess.Popen([exe, "-X", "perf", "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
        entries = [line.split(maxsplit=2) for line in Path(f"/tmp/perf-{p.pid}.map").read_text().splitlines()]
        spin = [(int(a, 16), int(n, 16), name) for a, n, name in entries if "spin_here" in name]
        assert spin, "CPython -X perf wrote no trampoline for spin_here"
        start, size, name = spin[-1]
        found = ProcessSymbols(p.pid).resolve(start + size // 2)
        assert found is not None and found.name == name and name.startswith("py::spin_here")
    finally:
        _stop(p)  # type: ignore[arg-type]
