"""Symbol-table loading: how long ``ProcessSymbols`` takes to make a large ELF file's functions ready.

    python -m benchmarks.symbols [--repeat N] [--json FILE]

Rows, each the median of ``--repeat`` cold loads (the cache cleared before each):

- ``libLLVM .dynsym``: the largest shared library on the machine (``libLLVM.so*``), what a
  profile of clang or any LLVM user loads first;
- ``120k-function .symtab``: a shared object of 120 000 functions assembled here (gas macros);
- ``pyelftools rows``: the same files read symbol by symbol through pyelftools' ``iter_symbols``,
  the way a straightforward reader does it: the ratio column is pylibbpf's time over it.

Target: a 100 000+ symbol table ready in <= 0.5 s.
"""

from __future__ import annotations

import argparse
import glob
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from elftools.elf.elffile import ELFFile

from pylibbpf import _elfsyms

TARGET_SECONDS = 0.5
N_FUNCTIONS = 120_000


def large_object(directory: Path, functions: int = N_FUNCTIONS) -> Path:
    """``directory/liblarge.so``: ``functions`` functions ``f0``, ``f1``, ... (the odd ones global, the
    even ones local), each ``nop; nop; ret`` with an ``int3`` after it that no function covers;
    assembled with gas macros (tests/test_syms_rules.py reads it too)."""
    source = directory / "large.s"
    source.write_text(
        ".text\n.altmacro\n"
        ".macro fn n\n.if \\n % 2\n.globl f\\n\n.endif\n.type f\\n, @function\nf\\n: nop\nnop\nret\n"
        ".size f\\n, . - f\\n\nint3\n.endm\n"
        f".set i, 0\n.rept {functions}\nfn %i\n.set i, i + 1\n.endr\n")
    out = directory / "liblarge.so"
    subprocess.run(["gcc", "-shared", "-nostdlib", str(source), "-o", str(out)], check=True, capture_output=True)
    return out


def _pyelftools_rows(path: Path) -> int:
    n = 0
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for name in (".symtab", ".dynsym"):
            section = elf.get_section_by_name(name)
            if section is None or section["sh_type"] not in ("SHT_SYMTAB", "SHT_DYNSYM"):
                continue
            for sym in section.iter_symbols():
                if sym["st_info"]["type"] in ("STT_FUNC", "STT_GNU_IFUNC") and sym["st_value"]:
                    n += 1
    return n


def _pylibbpf(path: Path) -> int:
    _elfsyms.clear_cache()
    with open(path, "rb") as f:
        return len(_elfsyms.parse(f))


def _median_seconds(fn: Any, path: Path, repeat: int) -> tuple[float, int]:
    times = []
    count = 0
    for _ in range(repeat):
        start = time.perf_counter()
        count = fn(path)
        times.append(time.perf_counter() - start)
    return statistics.median(times), count


def measure(repeat: int) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        files = [("120k-function .symtab", large_object(Path(tmp)))]
        llvm = sorted(glob.glob("/usr/lib/*/libLLVM*.so*"), key=lambda p: Path(p).stat().st_size)
        if llvm:
            files.insert(0, ("libLLVM .dynsym", Path(llvm[-1])))
        for label, path in files:
            ours, functions = _median_seconds(_pylibbpf, path, repeat)
            theirs, _ = _median_seconds(_pyelftools_rows, path, max(1, repeat // 3))
            rows.append({"file": label, "path": str(path), "functions": functions, "seconds": ours,
                         "pyelftools_seconds": theirs, "ratio": ours / theirs, "met": ours <= TARGET_SECONDS})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| file | functions | ready in s | pyelftools rows, s | × pyelftools | <= 0.5 s |",
             "|---|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['file']} | {r['functions']} | {r['seconds']:.3f} | {r['pyelftools_seconds']:.2f} "
                     f"| {r['ratio']:.3f} | {'yes' if r['met'] else 'no'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = measure(args.repeat)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
