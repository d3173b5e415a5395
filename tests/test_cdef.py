"""The C shim's cdef: generated from the csrc/ headers, complete, and up to date.

The shim's C declarations are written once, in csrc/*.h; cdef/shim.h is
generated from them by tools/gen_cdef.py and committed. These tests fail when
a header changed without regenerating, and (by a scan independent of the
generator) when a plb_ function of a bound header is missing from the cdef or
the cdef declares one no header does.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pylibbpf import lib

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import gen_cdef  # noqa: E402

INCLUDE = ROOT / "vendor" / "libbpf" / "build" / "install" / "include"
# A function declared at the start of a line: `type name(`, `type *name(`.
_PROTO = re.compile(r"^(?!static\b|typedef\b)[A-Za-z_][\w \*]*?\b(plb_\w+)\s*\(", re.M)


def declared(text: str) -> set[str]:
    return set(_PROTO.findall(text.replace('extern "Python+C" ', "")))


def header_functions(names: list[str] | tuple[str, ...]) -> set[str]:
    return set().union(*(declared((ROOT / "csrc" / n).read_text()) for n in names))


def test_generated_cdefs_are_up_to_date() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_cdef.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_bound_shim_function_is_in_the_cdef_and_no_other() -> None:
    in_headers = header_functions(gen_cdef.shim_headers())
    in_cdef = declared((ROOT / "cdef" / "shim.h").read_text())
    assert len(in_headers) > 45  # batch, wait, ringbuf, queue, reader, merge, perfattr, logging
    assert sorted(in_headers - in_cdef) == []
    assert sorted(in_cdef - in_headers) == []
    # The C-only headers stay out of the binding.
    assert header_functions(gen_cdef.SHIM_INTERNAL) & in_cdef == set()


def test_every_bound_shim_function_is_callable() -> None:
    names = header_functions(gen_cdef.shim_headers())
    assert sorted(n for n in names if not hasattr(lib, n)) == []


def test_handwritten_cdefs_declare_nothing_of_the_shim() -> None:
    generated = {"uapi_types.h", "libbpf_types.h", "libbpf_api.h", "shim.h"}
    for path in sorted((ROOT / "cdef").glob("*.h")):
        if path.name not in generated:
            code = re.sub(r"/\*.*?\*/", " ", path.read_text(), flags=re.S)
            assert re.search(r"\b(plb|PLB)_", code) is None, path.name


def test_a_new_header_declaration_reaches_the_generated_cdef(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The generator reads the headers, not a list: a declaration added to a
    bound header appears in its output, so the up-to-date check fails until
    the cdef is regenerated."""
    csrc = tmp_path / "csrc"
    csrc.mkdir()
    for path in (ROOT / "csrc").glob("*.h"):
        (csrc / path.name).write_text(path.read_text())
    wait = csrc / "plb_wait.h"
    wait.write_text(wait.read_text().replace(
        "#endif", "int plb_waiter_probe(struct plb_waiter *w, unsigned int mask);\n#define PLB_WAIT_PROBE 7\n#endif"))
    monkeypatch.setattr(gen_cdef, "CSRC", csrc)
    text = gen_cdef.shim_cdef(INCLUDE)
    assert "int plb_waiter_probe(struct plb_waiter *w, unsigned int mask);" in text
    assert "#define PLB_WAIT_PROBE ..." in text
    assert text != (ROOT / "cdef" / "shim.h").read_text()
