"""KernelSymbols and ProcessSymbols against the real kernel and real processes.

tests/syms/target.c (with its shared library tests/syms/lib.c) is compiled
here with gcc as a PIE executable, a position-dependent one and a stripped
copy; each run prints the runtime addresses of its functions (and of a vDSO
function), which must resolve back to their names.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import random
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from pylibbpf import KernelSymbols, ProcessSymbols, Symbol

SRC = Path(__file__).resolve().parent / "syms"


def _gcc(*args: str | Path) -> None:
    subprocess.run(["gcc", "-O1", "-g", *map(str, args)], check=True, capture_output=True)


@pytest.fixture(scope="session")
def targets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """name -> executable: "pie", "nopie" (each beside its libsymslib.so), "stripped" (both stripped)."""
    out: dict[str, Path] = {}
    for name, flags in (("pie", ["-fPIE", "-pie"]), ("nopie", ["-fno-pie", "-no-pie"])):
        d = tmp_path_factory.mktemp(f"syms-{name}-{os.getpid()}")
        _gcc("-fPIC", "-shared", SRC / "lib.c", "-o", d / "libsymslib.so")
        _gcc(*flags, SRC / "target.c", "-o", d / "target", f"-L{d}", "-lsymslib", f"-Wl,-rpath,{d}", "-ldl")
        out[name] = d / "target"
    d = tmp_path_factory.mktemp(f"syms-stripped-{os.getpid()}")
    for f in ("target", "libsymslib.so"):
        shutil.copy(out["pie"].parent / f, d / f)
        subprocess.run(["strip", "--strip-all", str(d / f)], check=True)
    # the stripped executable keeps the PIE build's rpath: point it at its own stripped library
    shutil.copy(d / "libsymslib.so", out["pie"].parent / "libsymslib-stripped.so")
    out["stripped"] = d / "target"
    return out


class Running:
    def __init__(self, exe: Path, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None
        self.addrs: dict[str, int] = {}
        for line in self.proc.stdout:
            name, value = line.split()
            if name == "ready":
                break
            if name != "lib_value":
                self.addrs[name] = int(value, 16)

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()


@pytest.fixture
def run() -> Iterator[type[Running]]:
    started: list[Running] = []

    class Tracked(Running):
        def __init__(self, exe: Path, env: dict[str, str] | None = None) -> None:
            super().__init__(exe, env)
            started.append(self)

    yield Tracked
    for r in started:
        r.close()


def _symtab(path: Path) -> dict[str, int]:
    """st_value of every function in the file's .symtab (the unstripped build)."""
    with open(path, "rb") as f:
        section = ELFFile(f).get_section_by_name(".symtab")
        return {s.name: s["st_value"] for s in section.iter_symbols() if s["st_info"]["type"] == "STT_FUNC"}


@pytest.mark.parametrize("variant", ["pie", "nopie"])
def test_functions_resolve_to_their_names(targets: dict[str, Path], run: type[Running], variant: str) -> None:
    exe = targets[variant]
    r = run(exe)
    ps = ProcessSymbols(r.proc.pid)
    lib = str(exe.parent / "libsymslib.so")
    expected = {"syms_exe_global": str(exe), "syms_exe_static": str(exe),
                "syms_lib_global": lib, "syms_lib_static": lib}
    for name, module in expected.items():
        addr = r.addrs[name]
        assert ps.resolve(addr) == Symbol(name, 0, module), name
        assert ps.resolve(addr + 3) == Symbol(name, 3, module), name
    vdso = ps.resolve(r.addrs["__vdso_clock_gettime"])
    assert vdso is not None and vdso.module == "[vdso]" and vdso.offset == 0
    assert vdso.name in ("__vdso_clock_gettime", "clock_gettime")


def test_stripped_binaries_give_module_and_offset(targets: dict[str, Path], run: type[Running]) -> None:
    exe = targets["stripped"]
    env = dict(os.environ, LD_LIBRARY_PATH=str(exe.parent))
    r = run(exe, env)
    ps = ProcessSymbols(r.proc.pid)
    exe_syms = _symtab(targets["pie"])
    lib_syms = _symtab(targets["pie"].parent / "libsymslib.so")
    # no .symtab: the executable's functions have no name, only a place (their ELF virtual address)
    for name in ("syms_exe_global", "syms_exe_static"):
        assert ps.resolve(r.addrs[name] + 1) is None
        assert ps.locate(r.addrs[name] + 1) == Symbol(None, exe_syms[name] + 1, str(exe))
    # the library's exported function is still in .dynsym; its static one is not
    lib = str(exe.parent / "libsymslib.so")
    assert ps.resolve(r.addrs["syms_lib_global"]) == Symbol("syms_lib_global", 0, lib)
    assert ps.locate(r.addrs["syms_lib_global"]) == Symbol("syms_lib_global", 0, lib)
    assert ps.resolve(r.addrs["syms_lib_static"]) is None
    assert ps.locate(r.addrs["syms_lib_static"]) == Symbol(None, lib_syms["syms_lib_static"], lib)


def test_anonymous_memory_and_unmapped_addresses() -> None:
    ps_self = os.getpid()
    private = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    with mmap.mmap(-1, 2 * mmap.PAGESIZE, flags=private) as m, mmap.mmap(-1, mmap.PAGESIZE) as shared:
        addrs = []
        for region in (m, shared):  # private anonymous (JIT code), shared anonymous (shown as /dev/zero)
            view = ctypes.c_char.from_buffer(region)
            addrs.append(ctypes.addressof(view))
            del view
        ps = ProcessSymbols(ps_self)
        for addr in addrs:
            # the kernel may merge the region with an anonymous neighbour: the offset is from the merged start
            assert ps.resolve(addr + 10) is None  # not executable: no code to name
            sym = ps.locate(addr + 10)
            assert sym is not None and sym.name is None and sym.module == "[anon]"
            assert sym.offset >= 10 and (sym.offset - 10) % mmap.PAGESIZE == 0
    assert ps.resolve(0) is None and ps.locate(0) is None
    assert ps.resolve(0xFFFF_FFFF_FFFF_F000) is None and ps.locate(0xFFFF_FFFF_FFFF_F000) is None


def test_refresh_sees_a_library_loaded_later(targets: dict[str, Path]) -> None:
    ps = ProcessSymbols(os.getpid())
    lib_path = targets["pie"].parent / "libsymslib-stripped.so"  # a file this process has not mapped yet
    lib = ctypes.CDLL(str(lib_path))
    addr = ctypes.cast(lib.syms_lib_global, ctypes.c_void_p).value
    assert addr is not None
    assert ps.resolve(addr) is None or ps.resolve(addr) != Symbol("syms_lib_global", 0, str(lib_path))
    ps.refresh()
    assert ps.resolve(addr) == Symbol("syms_lib_global", 0, str(lib_path))


def test_process_errors() -> None:
    with pytest.raises(ProcessLookupError, match="no process 2147483647"):
        ProcessSymbols(2**31 - 1)
    with pytest.raises(ValueError, match="pid must be >= 1"):
        ProcessSymbols(0)
    with pytest.raises(TypeError, match="addr must be an int"):
        ProcessSymbols(os.getpid()).resolve("0x10")  # type: ignore[arg-type]


def _kallsyms_text_entries() -> list[tuple[int, str, str]]:
    """(address, name, module) of /proc/kallsyms text symbols whose address no other symbol shares."""
    rows = []
    with open("/proc/kallsyms") as f:
        for line in f:
            parts = line.split()
            rows.append((int(parts[0], 16), parts[1], parts[2], parts[3].strip("[]") if len(parts) > 3 else "kernel"))
    count: dict[int, int] = {}
    for addr, kind, _, _ in rows:
        if kind not in "aAU":
            count[addr] = count.get(addr, 0) + 1
    return [(addr, name, module) for addr, kind, name, module in rows if kind in "tT" and count[addr] == 1]


def test_kernel_symbols_resolve_to_themselves(bpf_privileged: None) -> None:
    ks = KernelSymbols()
    entries = _kallsyms_text_entries()
    assert len(entries) > 1000
    sample = random.Random(17).sample(entries, 300)
    for addr, name, module in sample:
        assert ks.resolve(addr) == Symbol(name, 0, module)
        assert ks.address(name) is not None
    vfs_read = ks.address("vfs_read")
    assert vfs_read is not None
    assert ks.resolve(vfs_read + 2) == Symbol("vfs_read", 2, "kernel")
    assert ks.resolve(0x1000) is None  # a user-space address
    ks.refresh()
    assert ks.resolve(vfs_read) == Symbol("vfs_read", 0, "kernel")


def test_kernel_symbols_hidden_addresses(tmp_path: Path) -> None:
    hidden = tmp_path / "kallsyms"
    hidden.write_text("0000000000000000 T _text\n0000000000000000 T vfs_read\n0000000000000000 t x\t[mod]\n")
    with pytest.raises(PermissionError, match="kptr_restrict"):
        KernelSymbols(hidden)


def test_kernel_symbols_modules_and_aliases(tmp_path: Path) -> None:
    saved = tmp_path / "kallsyms"
    saved.write_text("ffffffff81000000 t _stext\nffffffff81000000 T _text\nffffffff81000010 T start\n"
                     "0000000000001000 A fixed_percpu_data\nffffffffc0001000 t helper\t[mymod]\n")
    ks = KernelSymbols(saved)
    assert len(ks) == 3
    assert ks.resolve(0xFFFFFFFF81000004) == Symbol("_text", 4, "kernel")  # the global alias wins
    assert ks.resolve(0xFFFFFFFFC0001010) == Symbol("helper", 0x10, "mymod")
    assert ks.resolve(0x1000) is None  # absolute symbols are not addresses
