"""List the LIBBPF_API function declarations of libbpf's public headers.

Usage: python tools/list_libbpf_api.py INCLUDE_DIR [--names]

Used two ways: by tests/test_binding.py to check that every public function
of the pinned headers is callable through ``pylibbpf.lib`` (so the cdef files
cannot silently fall behind), and by a developer as a starting point when the
pin moves and cdef/*.h must be updated.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HEADERS = ("bpf/libbpf.h", "bpf/bpf.h", "bpf/btf.h")
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_ATTR = re.compile(r"LIBBPF_DEPRECATED(_SINCE)?\s*\((?:[^()]|\([^()]*\))*\)|__attribute__\s*\(\(.*?\)\)", re.S)
_NAME = re.compile(r"(\w+)\s*\(")


def declarations(include_dir: Path) -> dict[str, list[str]]:
    """Map each header to its LIBBPF_API declarations (one normalised line each)."""
    out: dict[str, list[str]] = {}
    for header in HEADERS:
        text = _COMMENT.sub(" ", (include_dir / header).read_text())
        decls = []
        for chunk in text.split("LIBBPF_API")[1:]:
            depth, end = 0, None
            for i, ch in enumerate(chunk):
                if ch == "(":
                    depth += 1
                elif ch == ")":
                    depth -= 1
                elif ch in ";{" and depth == 0:
                    end = i
                    break
            if end is None:
                continue
            decl = " ".join(_ATTR.sub(" ", chunk[:end]).split())
            decls.append(decl + ";")
        out[header] = decls
    return out


def function_name(decl: str) -> str:
    """The function's name: the identifier before the first '(' that is not '(*'."""
    head = decl.split("(*")[0] if "(*" in decl.split("(")[0] + "(" else decl
    return _NAME.findall(head)[0]


def main(argv: list[str]) -> int:
    include_dir = Path(argv[1])
    for header, decls in declarations(include_dir).items():
        print(f"/* {header} */")
        for decl in decls:
            print(function_name(decl) if "--names" in argv else decl)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
