"""Every ```python example in README.md runs as written (from the repository root)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = re.findall(r"^```python\n(.*?)^```$", (ROOT / "README.md").read_text(), re.S | re.M)


@pytest.mark.usefixtures("bpf_objects")  # the examples use tests/bpf/build/*.bpf.o
@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_readme_example_runs(index: int) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", EXAMPLES[index]], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"README example #{index} failed:\n{EXAMPLES[index]}\n{proc.stderr}"


def test_readme_has_examples() -> None:
    assert len(EXAMPLES) >= 4
