"""Generate the CFFI declarations in cdef/ from the C headers they describe.

Usage: python tools/gen_cdef.py [--check] [INCLUDE_DIR]
       (INCLUDE_DIR: libbpf's installed headers, default vendor/libbpf/build/install/include)

Two sets of files, both generated, both committed (the build only reads them):
- cdef/uapi_types.h, libbpf_types.h, libbpf_api.h: libbpf's public API, from
  the pinned libbpf.h, bpf.h and btf.h. Regenerate when the pin moves.
- cdef/shim.h: pylibbpf's C shim, from csrc/pylibbpf_shim.h and the plb_*.h
  headers it includes (every csrc/*.h but the C-only ones in SHIM_INTERNAL).
  Regenerate whenever a csrc/*.h header changes: the C declarations are
  written once, in csrc/, and never again by hand.
--check writes nothing and exits 1 when a committed file differs from what
would be generated (tests/test_cdef.py runs it, so a header changed without
regenerating fails `make test`).

The declarations come from clang's AST, so nothing is typed by hand:
- every enumerator of the uapi headers is emitted without its value (`...`), so
  the C compiler supplies it when the extension is built;
- structs are emitted with their plain fields and a trailing `...;`, so the
  compiler, not this file, decides sizes and offsets; fields CFFI cannot take
  through `...` (bitfields, nested anonymous records) are left out of libbpf's
  structs (a shim struct with such a field is an error: all its fields are bound);
- functions are emitted with the prototypes clang reports (static inline
  functions are C-only and left out);
- object-like macros whose value the compiler accepts as an integer constant
  expression become `#define NAME ...`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "cdef"
CSRC = ROOT / "csrc"
LIBBPF_HEADERS = ("bpf/libbpf.h", "bpf/bpf.h", "bpf/btf.h", "bpf/libbpf_legacy.h")
UAPI_HEADERS = ("linux/bpf.h", "linux/btf.h")
# Declared by hand in cdef/libbpf_callbacks.h: their va_list cannot cross CFFI.
SKIP_TYPEDEFS = {"libbpf_print_fn_t", "btf_dump_printf_fn_t"}
SKIP_FUNCTIONS = {
    # take or return a va_list printer; the shim installs a C printer instead
    "libbpf_set_print", "btf_dump__new", "btf_dump__new_v0_6_0", "btf_dump__new_deprecated",
}
# The shim: csrc/SHIM_UMBRELLA includes every header Python binds.
SHIM_UMBRELLA = "pylibbpf_shim.h"
# C-only headers: internals of the shim's sources, never bound (Python reaches
# the perf-ring cursor and the merge's internals only through plb_merge.h).
SHIM_INTERNAL = ("plb_perfring.h", "plb_merge_internal.h", "plb_block_internal.h", "plb_ringwalk.h", "plb_vectorise.h")
# Declared in C, defined by CFFI from a Python function (`extern "Python+C"`).
SHIM_PYTHON_CALLBACKS = {"plb_py_log", "plb_py_one"}


def header_of(node: dict, current: str | None) -> str | None:
    loc = node.get("loc", {})
    f = loc.get("file") or loc.get("spellingLoc", {}).get("file") or loc.get("expansionLoc", {}).get("file")
    return f if f else current


def short(path: str | None) -> str:
    return path.split("include/")[-1] if path else ""


def ast(include: Path, src: str, extra: tuple[Path, ...] = ()) -> list[tuple[str, dict]]:
    """The top-level nodes of src's AST, each with the header it comes from."""
    flags = [f"-I{d}" for d in (*extra, include)]
    out = subprocess.run(
        ["clang-19", "-Xclang", "-ast-dump=json", "-fsyntax-only", *flags, "-x", "c", "-"],
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


def integer_constants(names: list[str], prelude: str, flags: list[str]) -> list[str]:
    """The names (object-like macros) the C compiler accepts as integer constant
    expressions after prelude; the rest are dropped, a few rounds at most."""
    while names:
        body = "".join(f"enum {{ plb_check_{i} = (long long)({n}) != 0 }};\n" for i, n in enumerate(names))
        proc = subprocess.run(["clang-19", "-fsyntax-only", "-ferror-limit=0", *flags, "-x", "c", "-"],
                              input=prelude + body, capture_output=True, text=True)
        bad = {int(m) for m in re.findall(r"plb_check_(\d+)", proc.stderr)}
        if proc.returncode == 0 or not bad:
            return names
        names = [n for i, n in enumerate(names) if i not in bad]
    return names


def integer_macros(include: Path) -> list[str]:
    """Object-like macros of the uapi and libbpf headers that are integer constants."""
    names: list[str] = []
    for hdr in UAPI_HEADERS + LIBBPF_HEADERS[:3]:
        for name in _DEFINE.findall((include / hdr).read_text()):
            if name not in names and not name.startswith("__"):
                names.append(name)
    prelude = "".join(f"#include <{h}>\n" for h in LIBBPF_HEADERS[:3])
    return integer_constants(names, prelude, [f"-I{include}"])


def libbpf_cdefs(include: Path) -> dict[str, str]:
    """cdef/uapi_types.h, libbpf_types.h and libbpf_api.h from libbpf's headers."""
    nodes = ast(include, "".join(f"#include <{h}>\n" for h in LIBBPF_HEADERS[:3]))
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
                files["libbpf_types.h"].append(typedef_decl(node))
            elif kind == "FunctionDecl" and node["name"] not in SKIP_FUNCTIONS and key not in seen:
                files["libbpf_api.h"].append(function_decl(node))
        if node.get("completeDefinition") or kind in ("FunctionDecl", "EnumDecl"):
            seen.add(key)
    macros = [n for n in integer_macros(include) if n not in enumerators]
    files["uapi_types.h"] += [f"#define {n} ..." for n in macros]
    banner = ("/* Generated by tools/gen_cdef.py from libbpf's public headers: do not edit by hand.\n"
              " * Values, sizes and offsets are left to the C compiler (`...`). */\n")
    return {name: banner + "\n".join(lines) + "\n" for name, lines in files.items()}


def typedef_decl(node: dict) -> str:
    qt = node["type"]["qualType"]
    m = re.match(r"^(.*?)\(\*\)(\(.*\))$", qt)
    return f"typedef {m.group(1)}(*{node['name']}){m.group(2)};" if m else f"typedef {qt} {node['name']};"


def shim_field(record: str, field: dict) -> str:
    """A shim struct's field, whatever its type: every field is bound."""
    if field.get("isBitfield") or not field.get("name"):
        raise SystemExit(f"struct {record}: a bitfield or unnamed field cannot be declared to CFFI")
    qt, name = field["type"]["qualType"], field["name"]
    if "(*)" in qt:
        return f"    {qt.replace('(*)', f'(*{name})', 1)};"
    m = re.match(r"^(.*?) ?(\[\d+\])$", qt)
    base, arr = (m.group(1), m.group(2)) if m else (qt, "")
    return f"    {base}{'' if base.endswith('*') else ' '}{name}{arr};"


def shim_headers() -> list[str]:
    """The bound headers: every csrc/*.h but the C-only ones."""
    return sorted(p.name for p in CSRC.glob("*.h") if p.name not in SHIM_INTERNAL)


def shim_cdef(include: Path) -> str:
    """cdef/shim.h: every declaration of the bound csrc/ headers, header by header
    in the order csrc/pylibbpf_shim.h includes them."""
    nodes = ast(include, f'#include "{SHIM_UMBRELLA}"\n', (CSRC,))
    sections: dict[str, list[str]] = {}
    for hdr, node in nodes:
        name = Path(hdr).name
        if not hdr or Path(hdr).resolve().parent != CSRC or name in SHIM_INTERNAL:
            continue
        lines = sections.setdefault(name, [])
        kind = node["kind"]
        if kind == "RecordDecl" and node.get("completeDefinition"):
            lines.append(f"{node['tagUsed']} {node['name']} {{")
            lines += [shim_field(node["name"], f) for f in node.get("inner", []) if f["kind"] == "FieldDecl"]
            lines += ["    ...;", "};"]
        elif kind == "RecordDecl":
            lines.append(f"{node['tagUsed']} {node['name']};")
        elif kind == "EnumDecl":
            lines += enum_decl(node)
        elif kind == "TypedefDecl":
            lines.append(typedef_decl(node))
        elif kind == "FunctionDecl" and not node.get("inline") and node.get("storageClass") != "static":
            decl = re.sub(r"\* (\w)", r"*\1", function_decl(node))  # `void *ctx`, as csrc/ writes it
            lines.append(f'extern "Python+C" {decl}' if node["name"] in SHIM_PYTHON_CALLBACKS else decl)
    missing = sorted(set(shim_headers()) - set(sections))
    if missing:
        raise SystemExit(f"csrc/{SHIM_UMBRELLA} does not include {', '.join(missing)} "
                         f"(include it, or list it in SHIM_INTERNAL if it is C-only)")
    flags = [f"-I{CSRC}", f"-I{include}"]
    prelude = f'#include "{SHIM_UMBRELLA}"\n'
    out = ["/* Generated by tools/gen_cdef.py from csrc/pylibbpf_shim.h and the headers it includes:",
           " * do not edit by hand; change the header and run `python tools/gen_cdef.py`.",
           " * Values, sizes and offsets are left to the C compiler (`...`). */"]
    for name, lines in sections.items():
        defines = [n for n in _DEFINE.findall((CSRC / name).read_text()) if not n.endswith("_H")]
        out += ["", f"/* csrc/{name} */", *lines]
        out += [f"#define {n} ..." for n in integer_constants(defines, prelude, flags)]
    return "\n".join(out) + "\n"


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--check"]
    check = "--check" in sys.argv[1:]
    include = Path(args[0]) if args else ROOT / "vendor/libbpf/build/install/include"
    files = {**libbpf_cdefs(include), "shim.h": shim_cdef(include)}
    stale = []
    for name, text in files.items():
        path = OUT / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(f"cdef/{name}")
        elif not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"cdef/{name}: written, {text.count(chr(10))} lines")
    if stale:
        print(f"out of date: {', '.join(stale)}; run `python tools/gen_cdef.py` and commit the result",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
