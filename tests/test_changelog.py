"""CHANGELOG.md: Keep a Changelog's shape, and a section for the version the package says it is.

The file opens with ``# Changelog``; each release is a ``## [X.Y.Z]`` heading
(optionally `` - YYYY-MM-DD`` or `` - Unreleased``), newest first, its changes
under ``### Added`` / ``Changed`` / ``Deprecated`` / ``Removed`` / ``Fixed`` /
``Security`` as ``- `` items. ``__version__`` (stamped into the compiled
module, which refuses to load under another version) must be the newest
release listed, with at least one entry.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import pylibbpf
from pylibbpf import ffi, lib

CHANGELOG = Path(__file__).resolve().parent.parent / "CHANGELOG.md"
KINDS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")
_RELEASE = re.compile(r"## \[(\d+)\.(\d+)\.(\d+)\](?: - (?:\d{4}-\d{2}-\d{2}|Unreleased))?")


def changelog_problems(text: str, version: str) -> list[str]:
    """What is wrong with ``text`` as a Keep a Changelog file for the package at ``version`` (none: [])."""
    problems: list[str] = []
    lines = text.splitlines()
    if not lines or lines[0] != "# Changelog":
        problems.append("the first line is not '# Changelog'")
    releases: list[tuple[int, int, int]] = []
    entries: dict[tuple[int, int, int], int] = {}
    kinds_seen: set[str] = set()
    kind: str | None = None
    for number, line in enumerate(lines, 1):
        if line.startswith("## "):
            found = _RELEASE.fullmatch(line)
            if not found:
                problems.append(f"line {number}: {line!r} is not '## [X.Y.Z]' or '## [X.Y.Z] - YYYY-MM-DD|Unreleased'")
                kind = None
                continue
            release = (int(found[1]), int(found[2]), int(found[3]))
            if release in entries:
                problems.append(f"line {number}: {line!r} repeats a version")
            elif releases and release > releases[-1]:
                problems.append(f"line {number}: {line!r} is newer than the release above it (newest first)")
            releases.append(release)
            entries.setdefault(release, 0)
            kinds_seen, kind = set(), None
        elif line.startswith("### "):
            name = line[4:]
            if not releases:
                problems.append(f"line {number}: {line!r} is outside a release")
            elif name not in KINDS:
                problems.append(f"line {number}: {line!r} is not one of {', '.join(KINDS)}")
            elif name in kinds_seen:
                problems.append(f"line {number}: {line!r} appears twice in one release")
            kinds_seen.add(name)
            kind = name
        elif line.startswith("#"):
            if number != 1:
                problems.append(f"line {number}: {line!r}: only '#', '##' and '###' headings belong here")
        elif line.startswith("- "):
            if kind is None:
                problems.append(f"line {number}: an entry outside a '### Added/Changed/...' subsection")
            else:
                entries[releases[-1]] += 1
        elif line.strip() and kind is not None and not line.startswith("  "):
            problems.append(f"line {number}: {line!r} under '### {kind}' is neither a '- ' entry "
                            "nor indented under one")
    wanted = tuple(int(part) for part in version.split("."))
    if wanted not in entries:
        problems.append(f"no '## [{version}]' section for __version__ {version}")
    else:
        if releases[0] != wanted:
            problems.append(f"__version__ {version} is not the newest release listed "
                            f"({'.'.join(map(str, releases[0]))})")
        if not entries[wanted]:
            problems.append(f"the '## [{version}]' section lists no change")
    return problems


def test_the_changelog_has_the_shape_and_the_version() -> None:
    assert changelog_problems(CHANGELOG.read_text(), pylibbpf.__version__) == []


def test_the_version_is_the_same_everywhere() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", pylibbpf.__version__)
    assert ffi.string(lib.plb_package_version()).decode() == pylibbpf.__version__


GOOD = """# Changelog

Intro.

## [0.3.0] - Unreleased

### Added

- a thing

### Fixed

- another

## [0.2.0] - 2026-12-01

### Changed

- a break: do this instead
  (continued)

## [0.1.0]

The first release.
"""


@pytest.mark.parametrize(("text", "version", "problem"), [
    (GOOD, "0.3.0", None),
    (GOOD, "0.4.0", r"no '## \[0.4.0\]' section for __version__ 0.4.0"),
    (GOOD, "0.2.0", r"__version__ 0.2.0 is not the newest release listed \(0.3.0\)"),
    (GOOD.replace("# Changelog", "# Changes"), "0.3.0", r"first line is not '# Changelog'"),
    (GOOD.replace("## [0.2.0] - 2026-12-01", "## 0.2.0"), "0.3.0", r"'## 0.2.0' is not '## \[X.Y.Z\]'"),
    (GOOD.replace("## [0.1.0]", "## [0.9.0]"), "0.3.0", r"newer than the release above it"),
    (GOOD.replace("### Fixed", "### Bugs"), "0.3.0", r"'### Bugs' is not one of Added, Changed"),
    (GOOD.replace("### Fixed", "### Added"), "0.3.0", r"'### Added' appears twice in one release"),
    (GOOD.replace("- a thing", "a thing"), "0.3.0", r"'a thing' under '### Added' is neither"),
    (GOOD.replace("- a thing\n", "").replace("- another\n", ""), "0.3.0",
     r"the '## \[0.3.0\]' section lists no change"),
    (GOOD.replace("Intro.", "- stray"), "0.3.0", r"an entry outside a '### Added/Changed/...' subsection"),
])
def test_changelog_problems_are_found(text: str, version: str, problem: str | None) -> None:
    found = changelog_problems(text, version)
    if problem is None:
        assert found == []
    else:
        assert any(re.search(problem, p) for p in found), found
