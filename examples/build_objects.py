"""Compile the examples' BPF programs (examples/*.bpf.c) on first use, with the repository's BPF build.

The objects land in examples/build/ (git-ignored) and are rebuilt when their
source changes. Needs clang-19 and bpftool, which `make setup` installs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD = HERE / "build"


def object_path(name: str) -> Path:
    """The compiled examples/NAME.bpf.o, built (or rebuilt) now when needed."""
    subprocess.run([sys.executable, str(HERE.parent / "tools" / "build_bpf.py"), str(HERE), str(BUILD)],
                   check=True, stdout=subprocess.DEVNULL)
    return BUILD / f"{name}.bpf.o"
