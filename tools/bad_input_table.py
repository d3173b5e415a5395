"""Render the Reliability page's bad-input table (docs/reliability.md) from the cases in tests/test_bad_input.py.

    .venv/bin/python tools/bad_input_table.py            # print the table
    .venv/bin/python tools/bad_input_table.py --write    # put it in docs/reliability.md, between the markers
    .venv/bin/python tools/bad_input_table.py --check    # exit 1 when docs/reliability.md's table is out of date

Each case is run and the table shows what it actually raised (type, errno,
first line of the message). Run as root from anywhere: the cases load the
test BPF objects, compiled into tests/bpf/build as the test setup does.
`make test` runs tests/test_bad_input.py::test_readme_table_is_current, which
fails when docs/reliability.md's table and this output differ.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tools"))

import build_bpf  # noqa: E402
import test_bad_input as cases  # noqa: E402


def generate() -> str:
    logging.getLogger("pylibbpf.libbpf").setLevel(logging.CRITICAL)  # libbpf's complaints about the bad input
    src = ROOT / "tests" / "bpf"
    paths = {p.name[: -len(".bpf.o")]: p for p in build_bpf.build(src, src / "build")}
    with cases.bad_input_context(paths) as ctx:
        return cases.render_table(ctx)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="replace the table in docs/reliability.md")
    mode.add_argument("--check", action="store_true", help="exit 1 when docs/reliability.md's table differs")
    args = ap.parse_args(argv)
    table = generate()
    readme = cases.TABLE_PAGE
    if args.write:
        text = readme.read_text()
        new = cases.replace_readme_table(text, table)
        if new != text:
            readme.write_text(new)
            print(f"{readme}: table updated ({len(cases.CASES)} cases)")
        else:
            print(f"{readme}: table already current ({len(cases.CASES)} cases)")
        return 0
    if args.check:
        if cases.readme_table(readme.read_text()) != table:
            print(f"{readme}: the bad-input table is out of date: run {Path(__file__).name} --write",
                  file=sys.stderr)
            return 1
        return 0
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
