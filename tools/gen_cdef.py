"""Generate cdef/*.h (the CFFI declarations of libbpf's public API) from the pinned headers.

Usage: python tools/gen_cdef.py [INCLUDE_DIR]   (default: vendor/libbpf/build/install/include)

A developer runs this when the libbpf pin moves, reviews the diff, and commits
the result; the build itself only reads the committed files. The declarations
come from clang's AST of libbpf.h, bpf.h and btf.h, so nothing is typed by hand:
- every enumerator of the uapi headers is emitted without its value (`...`), so
  the C compiler supplies it when the extension is built;
- structs are emitted with their plain fields and a trailing `...;`, so the
  compiler, not this file, decides sizes and offsets; fields CFFI cannot take
  through `...` (bitfields, nested anonymous records) are left out;
- functions are emitted with the prototypes clang reports.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "cdef"
LIBBPF_HEADERS = ("bpf/libbpf.h", "bpf/bpf.h", "bpf/btf.h", "bpf/libbpf_legacy.h")
UAPI_HEADERS = ("linux/bpf.h", "linux/btf.h")
# Declared by hand in cdef/libbpf_callbacks.h: their va_list cannot cross CFFI.
SKIP_TYPEDEFS = {"libbpf_print_fn_t", "btf_dump_printf_fn_t"}
SKIP_FUNCTIONS = {
    # take or return a va_list printer; the shim installs a C printer instead
    "libbpf_set_print", "btf_dump__new", "btf_dump__new_v0_6_0", "btf_dump__new_deprecated",
}


def header_of(node: dict, current: str | None) -> str | None:
    loc = node.get("loc", {})
    f = loc.get("file") or loc.get("spellingLoc", {}).get("file") or loc.get("expansionLoc", {}).get("file")
    return f if f else current


def short(path: str | None) -> str:
    return path.split("include/")[-1] if path else ""


def ast(include: Path) -> list[tuple[str, dict]]:
    src = "".join(f"#include <{h}>\n" for h in LIBBPF_HEADERS[:3])
    out = subprocess.run(
        ["clang-19", "-Xclang", "-ast-dump=json", "-fsyntax-only", f"-I{include}", "-x", "c", "-"],
        input=src, capture_output=True, text=True, check=True,
    ).stdout
    nodes, cur = [], None
    for node in json.loads(out)["inner"]:
        cur = header_of(node, cur)
        nodes.append((short(cur), node))
    return nodes


def enum_decl(node: dict) -> list[str]:
    names = [c["name"] for c in node.get("inner", []) if c["kind"] == "EnumConstantDecl"]
    if not names:
        return []  # a forward declaration; the definition comes from the uapi header
    if node.get("name"):
        return [f"enum {node['name']} {{ " + ", ".join(names) + ", ... };"]
    return [f"#define {n} ..." for n in names]


_SIMPLE = re.compile(r"^(const )?((unsigned |signed )?(char|short|int|long|long long)|__[us](8|16|32|64)|size_t|"
                     r"(const )?(struct|enum|union) \w+|void|bool|_Bool|int)( ?\*+)?( const)?$")


def field_decl(field: dict) -> str | None:
    if field.get("isBitfield") or not field.get("name"):
        return None
    qt = field["type"]["qualType"]
    m = re.match(r"^(.*?) ?\[(\d+)\]$", qt)
    base, arr = (m.group(1), f"[{m.group(2)}]") if m else (qt, "")
    if not _SIMPLE.match(base):
        return None
    return f"    {base} {field['name']}{arr};"


def record_decl(node: dict) -> list[str]:
    if not node.get("name") or not node.get("completeDefinition"):
        return [f"{node['tagUsed']} {node['name']};"] if node.get("name") else []
    lines = [f"{node['tagUsed']} {node['name']} {{"]
    inner = node.get("inner", [])
    for i, child in enumerate(inner):
        if child["kind"] == "FieldDecl":
            if child["type"]["qualType"].startswith(("union (", "struct (")):
                continue
            decl = field_decl(child)
            if decl:
                lines.append(decl)
        elif child["kind"] == "RecordDecl" and not child.get("name") and child.get("completeDefinition"):
            # an anonymous union/struct member: inline it when every field is plain
            nxt = inner[i + 1] if i + 1 < len(inner) else {}
            if nxt.get("kind") == "FieldDecl" and nxt.get("name"):
                continue  # a named member of anonymous type: not reachable through `...`
            sub = [field_decl(f) for f in child.get("inner", []) if f["kind"] == "FieldDecl"]
            if sub and all(sub):
                lines.append(f"    {child['tagUsed']} {{")
                lines.extend("    " + s for s in sub if s)
                lines.append("    };")
    lines.append("    ...;")
    lines.append("};")
    return lines


def function_decl(node: dict) -> str:
    qt = node["type"]["qualType"]
    ret = qt.split("(")[0].strip()
    params = [p for p in node.get("inner", []) if p["kind"] == "ParmVarDecl"]
    plist = ", ".join(f"{p['type']['qualType']} {p.get('name', '')}".strip() for p in params) or "void"
    plist = re.sub(r"(.*\(\*)\)(\(.*\)) (\w+)", r"\1\3)\2", plist)
    if node.get("variadic"):
        plist += ", ..."
    sep = "" if ret.endswith("*") else " "
    return f"{ret}{sep}{node['name']}({plist});"


_DEFINE = re.compile(r"^#define\s+([A-Z][A-Z0-9_]*)\s+\S", re.M)


def integer_macros(include: Path) -> list[str]:
    """Object-like macros of the uapi and libbpf headers that are integer constants.

    Candidates come from the headers' text; the C compiler decides which ones
    are integer constant expressions (the rest are dropped, a few rounds at most).
    """
    names: list[str] = []
    for hdr in UAPI_HEADERS + LIBBPF_HEADERS[:3]:
        for name in _DEFINE.findall((include / hdr).read_text()):
            if name not in names and not name.startswith("__"):
                names.append(name)
    prelude = "".join(f"#include <{h}>\n" for h in LIBBPF_HEADERS[:3])
    while True:
        body = "".join(f"enum {{ plb_check_{i} = (long long)({n}) != 0 }};\n" for i, n in enumerate(names))
        proc = subprocess.run(["clang-19", "-fsyntax-only", "-ferror-limit=0", f"-I{include}", "-x", "c", "-"],
                              input=prelude + body, capture_output=True, text=True)
        bad = {int(m) for m in re.findall(r"plb_check_(\d+)", proc.stderr)}
        if proc.returncode == 0 or not bad:
            return names
        names = [n for i, n in enumerate(names) if i not in bad]


def main() -> int:
    include = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "vendor/libbpf/build/install/include"
    nodes = ast(include)
    files: dict[str, list[str]] = {"uapi_types.h": [], "libbpf_types.h": [], "libbpf_api.h": []}
    enumerators: set[str] = set()
    for _hdr, node in nodes:
        if node["kind"] == "EnumDecl":
            enumerators.update(c["name"] for c in node.get("inner", []) if c["kind"] == "EnumConstantDecl")
    seen: set[str] = set()
    for hdr, node in nodes:
        kind = node["kind"]
        key = f"{kind}:{node.get('name')}"
        if hdr in UAPI_HEADERS:
            if kind == "EnumDecl":
                files["uapi_types.h"] += enum_decl(node)
            elif kind == "RecordDecl" and node.get("name") and key not in seen:
                files["uapi_types.h"] += record_decl(node)
        elif hdr in LIBBPF_HEADERS:
            if kind == "EnumDecl":
                files["libbpf_types.h"] += enum_decl(node)
            elif kind == "RecordDecl" and node.get("name") and key not in seen:
                files["libbpf_types.h"] += record_decl(node)
            elif kind == "TypedefDecl" and node["name"] not in SKIP_TYPEDEFS:
                qt = node["type"]["qualType"]
                m = re.match(r"^(.*?)\(\*\)(\(.*\))$", qt)
                decl = f"typedef {m.group(1)}(*{node['name']}){m.group(2)};" if m else f"typedef {qt} {node['name']};"
                files["libbpf_types.h"].append(decl)
            elif kind == "FunctionDecl" and node["name"] not in SKIP_FUNCTIONS and key not in seen:
                files["libbpf_api.h"].append(function_decl(node))
        if node.get("completeDefinition") or kind in ("FunctionDecl", "EnumDecl"):
            seen.add(key)
    macros = [n for n in integer_macros(include) if n not in enumerators]
    files["uapi_types.h"] += [f"#define {n} ..." for n in macros]
    banner = ("/* Generated by tools/gen_cdef.py from libbpf's public headers: do not edit by hand.\n"
              " * Values, sizes and offsets are left to the C compiler (`...`). */\n")
    for name, lines in files.items():
        (OUT / name).write_text(banner + "\n".join(lines) + "\n")
        print(f"cdef/{name}: {len(lines)} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
