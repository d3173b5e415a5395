"""An independent reference for symbol names, for the tests that check pylibbpf.syms and `pylibbpf profile`.

Written from the rules the docs state (docs/toolkit.md, "Symbols"), with pyelftools' symbol rows and a
plain reading of /proc/kallsyms and /proc/PID/maps: none of pylibbpf's own code.
"""

from __future__ import annotations

import bisect
import io
import lzma
import os
from pathlib import Path

from elftools.elf.elffile import ELFFile


def kernel_choice(group: list[tuple[str, str]]) -> str:
    """Among (name, kallsyms type) pairs at one address: global first; the __x64_ (or __arm64_) wrapper over
    __ia32_/__x32_/__do_/__se_; fewer leading underscores; the greatest name."""
    left = [(n, t) for n, t in group if t.isupper()] or group
    wrapper = {"x86_64": "__x64_", "aarch64": "__arm64_"}.get(os.uname().machine)

    def bare(n: str) -> str:
        return n[len("__pfx_"):] if n.startswith("__pfx_") else n

    if wrapper:
        wrappers = [(n, t) for n, t in left if bare(n).startswith(wrapper)]
        others = [(n, t) for n, t in left
                  if not any(bare(n).startswith(p) for p in ("__ia32_", "__x32_", "__do_", "__se_", wrapper))]
        left = wrappers or others or left
    fewest = min(len(n) - len(n.lstrip("_")) for n, _ in left)
    left = [(n, t) for n, t in left if len(n) - len(n.lstrip("_")) == fewest]
    return sorted(n for n, _ in left)[-1]


def kallsyms_groups(path: str = "/proc/kallsyms") -> dict[int, list[tuple[str, str]]]:
    groups: dict[int, list[tuple[str, str]]] = {}
    with open(path) as f:
        for line in f:
            addr, kind, name = line.split()[:3]
            if kind not in "aAU" and int(addr, 16):
                groups.setdefault(int(addr, 16), []).append((name, kind))
    return groups


class KernelReference:
    def __init__(self) -> None:
        groups = kallsyms_groups()
        self.addrs = sorted(groups)
        self.names = [kernel_choice(groups[a]) for a in self.addrs]

    def name(self, addr: int) -> str | None:
        i = bisect.bisect_right(self.addrs, addr) - 1
        return self.names[i] if i >= 0 else None


def elf_functions(elf: ELFFile) -> list[tuple[int, int, int, str]]:
    """(start, preference, size, name) of every function; preference: global/weak, no leading underscore,
    larger size, table order (lower is preferred)."""
    out = []
    order = 0
    for table in (".symtab", ".dynsym"):
        section = elf.get_section_by_name(table)
        if section is None or section["sh_type"] not in ("SHT_SYMTAB", "SHT_DYNSYM"):
            continue  # absent, or NOBITS in a debug file
        for s in section.iter_symbols():
            order += 1
            info = s["st_info"]
            if info["type"] not in ("STT_FUNC", "STT_GNU_IFUNC") or not s["st_value"] or not s.name \
                    or s["st_shndx"] == "SHN_UNDEF":
                continue
            bind = {"STB_GLOBAL": 0, "STB_WEAK": 1}.get(info["bind"], 2)
            out.append((s["st_value"], (bind, s.name.startswith("_"), -s["st_size"], order), s["st_size"], s.name))
    return out


class ElfReference:
    """One ELF image's segments and its functions, looked up by the documented cover rule."""

    def __init__(self, elf: ELFFile) -> None:
        self.segments = [(p["p_offset"], p["p_filesz"], p["p_vaddr"]) for p in elf.iter_segments()
                         if p["p_type"] == "PT_LOAD"]
        best: dict[int, tuple[tuple[int, bool, int, int], int, str]] = {}
        functions = elf_functions(elf)
        mini = elf.get_section_by_name(".gnu_debugdata")  # MiniDebugInfo: an xz-compressed ELF's .symtab
        if mini is not None:
            inner = ELFFile(io.BytesIO(lzma.decompress(mini.data())))
            functions += [(st, (p[0], p[1], p[2], p[3] + 10**9), n, m) for st, p, n, m in elf_functions(inner)]
        if elf.get_section_by_name(".symtab") is None:  # a separate debug file, by build-id
            build = next((n["n_desc"] for sec in elf.iter_sections() if sec["sh_type"] == "SHT_NOTE"
                          for n in sec.iter_notes() if n["n_type"] == "NT_GNU_BUILD_ID"), None)
            debug = Path(f"/usr/lib/debug/.build-id/{build[:2]}/{build[2:]}.debug") if build else None
            if debug is not None and debug.is_file():
                with open(debug, "rb") as f:
                    functions += [(st, (p[0], p[1], p[2], p[3] + 2 * 10**9), n, m)
                                  for st, p, n, m in elf_functions(ELFFile(f))]
        for start, pref, size, name in functions:
            if start not in best or pref < best[start][0]:
                best[start] = (pref, size, name)
        self.starts = sorted(best)
        self.sizes = [best[s][1] for s in self.starts]
        self.names = [best[s][2] for s in self.starts]

    def name(self, file_offset: int) -> str | None:
        for off, size, vaddr in self.segments:
            if off <= file_offset < off + size:
                v = vaddr + file_offset - off
                break
        else:
            return None
        i = bisect.bisect_right(self.starts, v) - 1
        if i < 0:
            return None
        end = self.starts[i] + self.sizes[i] if self.sizes[i] else (
            self.starts[i + 1] if i + 1 < len(self.starts) else self.starts[i] + 1)
        return self.names[i] if v < end else None


class ProcessReference:
    """A running process's code names: executable mappings only, files through pyelftools, the vDSO."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._files: dict[str, ElfReference | None] = {}
        self.maps = []
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            parts = line.split(maxsplit=5)
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            self.maps.append((lo, hi, parts[1], int(parts[2], 16), parts[5] if len(parts) > 5 else ""))
        self._vdso: ElfReference | None = None

    def _file(self, path: str) -> ElfReference | None:
        if path not in self._files:
            try:
                with open(path, "rb") as f:
                    self._files[path] = ElfReference(ELFFile(f))
            except Exception:
                self._files[path] = None
        return self._files[path]

    def name(self, addr: int) -> str | None:
        found = [m for m in self.maps if m[0] <= addr < m[1]]
        if not found:
            return None
        lo, hi, perms, offset, path = found[0]
        if "x" not in perms:
            return None
        if path == "[vdso]":
            if self._vdso is None:
                with open(f"/proc/{self.pid}/mem", "rb") as mem:
                    mem.seek(lo)
                    self._vdso = ElfReference(ELFFile(io.BytesIO(mem.read(hi - lo))))
            return self._vdso.name(addr - lo + offset)
        if not path.startswith("/") or path.startswith(("/dev/zero", "/memfd:", "/SYSV")):
            return None
        ref = self._file(path.removesuffix(" (deleted)"))
        return ref.name(addr - lo + offset) if ref is not None else None
