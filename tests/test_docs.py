"""The documentation holds: every ```python block of README.md and docs/ runs, and the pages keep their bars."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
EXAMPLES = [(page, i, code) for page in PAGES
            for i, code in enumerate(re.findall(r"^```python\n(.*?)^```$", page.read_text(), re.S | re.M))]
# Words that narrate how the work went rather than what is true now.
ORDINALS = ("first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|"
            "fourteenth|fifteenth|sixteenth")
# "the seventh session", "the first round", "later rounds": the benchmarks say "warm-up", "fill-and-drain".
HISTORY = re.compile(rf"(?i:\b({ORDINALS}|later|earlier|previous|next)('s)? (sessions?|rounds?)\b)")


@pytest.fixture(scope="session")
def example_objects() -> None:
    """The examples' objects (examples/build/), which their skeletons (examples/*_skel.py) open."""
    import build_bpf

    build_bpf.build(ROOT / "examples", ROOT / "examples" / "build")


# The blocks use tests/bpf/build/*.bpf.o, and the examples' skeletons (importable by name, as a
# tool beside its skeleton imports it).
@pytest.mark.usefixtures("bpf_objects", "example_objects")
@pytest.mark.parametrize(("page", "index", "code"), EXAMPLES,
                         ids=[f"{p.relative_to(ROOT)}#{i}" for p, i, _ in EXAMPLES])
def test_every_example_runs(page: Path, index: int, code: str) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "examples")]))
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"{page.relative_to(ROOT)} example #{index} failed:\n{code}\n{proc.stderr}"


def test_the_pages_have_examples() -> None:
    assert len(EXAMPLES) >= 15
    assert any(p.name == "README.md" for p, _, _ in EXAMPLES)


def test_the_readme_is_short_and_names_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    assert "make demo" in text and "make test" in text


def test_the_performance_pages_are_short() -> None:
    assert len((ROOT / "benchmarks" / "README.md").read_text().splitlines()) <= 200
    assert len((ROOT / "docs" / "performance.md").read_text().splitlines()) <= 400


def test_no_page_narrates_the_history_of_the_work() -> None:
    dirs = ("pylibbpf", "csrc", "benchmarks", "tests", "tools", "examples")
    sources = (p for d in dirs for p in (ROOT / d).rglob("*")
               if p.suffix in (".py", ".c", ".h") and "build" not in p.parts)
    files = [*PAGES, ROOT / "benchmarks" / "README.md", *sources]
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in files for m in HISTORY.finditer(p.read_text())
             if p.name != "test_docs.py"]
    assert found == []


def test_every_page_is_in_the_site() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert {p for p in pages if f": {p}" not in nav} == set()


def test_the_api_reference_covers_every_public_name() -> None:
    import inspect

    import pylibbpf

    page = (ROOT / "docs" / "api.md").read_text()
    documented = set(re.findall(r"^::: pylibbpf\.(\w+)$", page, re.M))
    missing = []
    for name in pylibbpf.__all__:
        obj = getattr(pylibbpf, name)
        module = obj.__name__ if inspect.ismodule(obj) else getattr(obj, "__module__", None)
        where = (module or "").removeprefix("pylibbpf.")
        if name not in documented and where not in documented and f"`{name}`" not in page:
            missing.append(name)
    assert missing == []


def test_the_site_shows_sphinx_roles_as_names() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "tools" / "mkdocs_hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    html = "see :class:<code>~pylibbpf.Batch</code> and :meth:<code>read_into</code>"
    assert hooks.on_page_content(html) == "see <code>Batch</code> and <code>read_into</code>"
