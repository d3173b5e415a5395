"""The package's layout rules, checked on its source (no kernel needed).

docs/architecture.md states them: imports run one way (no cycle, function-local
imports included), no module reads another module's private names, and only
the compiled-module layer (``_ffi``), the checked layers (``_libbpf``, ``_kernel``,
``_shim``) call into ``lib``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "pylibbpf"

#: The modules that may use ``lib.<function>``: the compiled module and the checked layers.
LIB_CALLERS = {"pylibbpf._ffi", "pylibbpf._libbpf", "pylibbpf._libbpf_attach", "pylibbpf._kernel", "pylibbpf._shim"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): ast.parse(p.read_text(), str(p)) for p in sorted(PACKAGE.rglob("*.py"))}
PACKAGES = {module_name(p) for p in PACKAGE.rglob("__init__.py")}


def base_of(mod: str, node: ast.ImportFrom) -> str:
    """The absolute module an ``from X import ...`` names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    package = mod if mod in PACKAGES else mod.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def imports(mod: str) -> list[tuple[ast.AST, str, str | None]]:
    """(node, imported module, name imported from it or None) for every import, local ones too."""
    out: list[tuple[ast.AST, str, str | None]] = []
    for node in ast.walk(MODULES[mod]):
        if isinstance(node, ast.Import):
            out += [(node, alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = base_of(mod, node)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.append((node, sub, None) if sub in MODULES else (node, base, alias.name))
    return [(n, m, name) for n, m, name in out if m in MODULES]


def graph() -> dict[str, set[str]]:
    return {mod: {m for _, m, _ in imports(mod) if m != mod} for mod in MODULES}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(edges[m]):
            if state.get(n) == 1:
                return [*stack[stack.index(n):], n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(edges):
        if m not in state and (found := visit(m)):
            return found
    return None


#: Underscore names that are public API by convention: the named-tuple protocol (EventRecord has it too).
NAMEDTUPLE_API = {"_asdict", "_fields", "_replace", "_make", "_field_defaults"}


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__")) and name not in NAMEDTUPLE_API


def private_names(tree: ast.Module) -> set[str]:
    """The private names a module defines: functions, classes, assigned names and attributes, slots."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Store):
            names.add(node.id if isinstance(node, ast.Name) else node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__slots__" for t in node.targets):
            names |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    return {n for n in names if is_private(n)}


def module_aliases(mod: str) -> dict[str, str]:
    """Local names bound to a package module (``from . import _close``, ``import pylibbpf.x as y``)."""
    out: dict[str, str] = {}
    for node in ast.walk(MODULES[mod]):
        if isinstance(node, ast.ImportFrom):
            base = base_of(mod, node)
            for alias in node.names:
                if f"{base}.{alias.name}" in MODULES:
                    out[alias.asname or alias.name] = f"{base}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES and alias.asname:
                    out[alias.asname] = alias.name
    return out


def private_reads(mod: str) -> list[str]:
    """Where ``mod`` reads a private name another package module defines and it does not."""
    own = private_names(MODULES[mod])
    others = set().union(*(private_names(t) for m, t in MODULES.items() if m != mod))
    aliases = module_aliases(mod)
    found = []
    for node, target, name in imports(mod):
        if name is not None and is_private(name):
            found.append(f"{mod}:{node.lineno}: from {target} import {name}")
    for node in ast.walk(MODULES[mod]):
        if not isinstance(node, ast.Attribute) or not is_private(node.attr):
            continue
        value = node.value
        if isinstance(value, ast.Name) and value.id in aliases:
            found.append(f"{mod}:{node.lineno}: {value.id}.{node.attr} (a private name of {aliases[value.id]})")
        elif isinstance(value, ast.Name) and value.id in ("self", "cls"):
            continue
        elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super":
            continue
        elif node.attr not in own and node.attr in others:
            found.append(f"{mod}:{node.lineno}: {ast.unparse(node)} (defined in another module only)")
    return found


def lib_uses(mod: str) -> list[str]:
    """``lib.<function>`` in ``mod``: a C call (or C function pointer) outside the checked layers.

    Constants (``lib.BPF_MAP_TYPE_RINGBUF``, upper case) are values the compiler
    resolved, not calls: there is no return to check, so any module may read them.
    """
    found = []
    for node in ast.walk(MODULES[mod]):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "lib"
                and not node.attr.isupper()):
            found.append(f"{mod}:{node.lineno}: lib.{node.attr}")
    return found


def test_the_package_is_parsed() -> None:
    # The checks below are only as good as the module list: make sure it is the package.
    assert {"pylibbpf", "pylibbpf._ffi", "pylibbpf._shim", "pylibbpf.ordered", "pylibbpf.cli"} <= set(MODULES)


def test_imports_run_one_way() -> None:
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


@pytest.mark.parametrize("mod", sorted(MODULES))
def test_no_module_reads_another_modules_private_names(mod: str) -> None:
    assert private_reads(mod) == []


@pytest.mark.parametrize("mod", sorted(set(MODULES) - LIB_CALLERS))
def test_only_the_checked_layers_call_lib(mod: str) -> None:
    assert lib_uses(mod) == []


def test_the_rules_catch_what_they_are_for() -> None:
    # A module written the forbidden ways is reported by each rule.
    bad = ast.parse("from ._close import _unless_exiting\nfrom . import _close\n"
                    "def f(layout):\n    _close._pid\n    layout._ring_turn\n    lib.plb_waiter_wake(None)\n")
    MODULES["pylibbpf._probe"] = bad
    try:
        reads = private_reads("pylibbpf._probe")
        assert len(reads) == 3, reads
        assert lib_uses("pylibbpf._probe") == ["pylibbpf._probe:6: lib.plb_waiter_wake"]
    finally:
        del MODULES["pylibbpf._probe"]


def documented_order() -> list[str]:
    """The modules of docs/architecture.md's table "Python modules", in its order."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    table = text.split("## Python modules", 1)[1].split("\n## ", 1)[0]
    order: list[str] = []
    for line in table.splitlines():
        if not line.startswith("| `"):
            continue
        for cell in line.split("|")[1].split(","):
            name = cell.strip().strip("`").removesuffix(".py").removesuffix("/")
            order.append("pylibbpf" if name == "__init__" else f"pylibbpf.{name}")
    return order


def test_the_documented_module_order_is_the_import_order() -> None:
    # docs/architecture.md: "a module imports only modules above it in this table".
    order = documented_order()
    edges = graph()
    # A module of a subpackage counts as the subpackage (cli/trace.py is cli/).
    subpackages = [o for o in order if o != "pylibbpf"]
    top = {m: next((o for o in subpackages if m.startswith(o + ".")), m) for m in MODULES}
    missing = sorted(m for m in MODULES if top[m] not in order and m not in ("pylibbpf._version", "pylibbpf.__main__"))
    assert missing == [], f"modules missing from the table: {missing}"
    upward = [f"{m} -> {t}" for m in MODULES for t in edges[m]
              if top[m] in order and top[t] in order and top[m] != top[t]
              and order.index(top[t]) > order.index(top[m])]
    assert upward == []


MAX_MODULE_LINES = 900


def test_no_module_is_over_the_size_rule() -> None:
    # STYLE: small modules with one job each; a module growing past this is split along its jobs.
    sizes = {str(path.relative_to(PACKAGE.parent)): len(path.read_text().splitlines())
             for path in PACKAGE.rglob("*.py")}
    assert {p: n for p, n in sizes.items() if n > MAX_MODULE_LINES} == {}
