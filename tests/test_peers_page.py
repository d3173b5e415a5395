"""docs/peers.md names, in every pylibbpf cell, the test that runs the feature: each must exist."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "peers.md"


def _test_names() -> set[str]:
    names = set()
    for path in (ROOT / "tests").glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                names.add(node.name)
    return names


def test_every_cited_test_exists() -> None:
    rows = [line for line in PAGE.read_text().splitlines()
            if line.startswith("| ") and not line.startswith("| feature")]
    cited = [name for row in rows for name in re.findall(r"`(test_[a-z0-9_]+)`", row.split("|")[2])]
    assert len(cited) >= 20
    missing = sorted(set(cited) - _test_names())
    assert missing == []


def test_every_pylibbpf_cell_is_y_or_an_error_here() -> None:
    for line in PAGE.read_text().splitlines():
        if line.startswith("| ") and not line.startswith(("| feature", "|---")):
            cell = line.split("|")[2].strip()
            assert cell.startswith(("Y", "error here")), line
