"""Regenerate the typed skeletons of the bundled programs and the examples (or check them).

Usage: python tools/gen_skels.py [--check]

The bundled programs (csrc/bpf/*.bpf.c, built into pylibbpf/bpf/ by the
package build) get ``pylibbpf/bpf/NAME_skel.py``; the examples
(examples/*.bpf.c, built into examples/build/ here) get
``examples/NAME_skel.py``. Each skeleton opens its object from beside it
(``--no-embed``): the objects are built on each machine against its kernel's
vmlinux.h, while what a skeleton says (structs, maps, programs, globals)
comes from the program's own source, the same everywhere, so the skeletons
are committed (as the cdef is: tools/gen_cdef.py). ``make build`` runs this;
``--check`` writes nothing and exits 1 naming every skeleton that is out of
date (tests/test_skel.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pylibbpf import build  # noqa: E402
from pylibbpf._skelemit import generate  # noqa: E402
from pylibbpf._skelmodel import EventSpec  # noqa: E402

BUNDLED = ROOT / "pylibbpf" / "bpf"
EXAMPLES = ROOT / "examples"

#: The structs the bundled tools' ring buffer and perf event array carry (they keep them in BTF
#: another way than a global pointer, so the skeleton is told).
TOOL_EVENTS = {name: [f"events=struct {name}_event", f"events_perf=struct {name}_event"]
               for name in ("exec", "exit", "open")}


def skeletons() -> list[tuple[Path, Path, list[str]]]:
    """(object, module, events) of every skeleton kept in the tree."""
    out = [(BUNDLED / f"{src.name[:-2]}.o", BUNDLED / f"{src.name.split('.')[0]}_skel.py",
            TOOL_EVENTS.get(src.name.split(".")[0], []))
           for src in sorted((ROOT / "csrc" / "bpf").glob("*.bpf.c"))]
    out += [(EXAMPLES / "build" / f"{src.name[:-2]}.o", EXAMPLES / f"{src.name.split('.')[0]}_skel.py", [])
            for src in sorted(EXAMPLES.glob("*.bpf.c"))]
    return out


def build_examples() -> None:
    """Compile the examples' objects (rebuilt only when a source is newer)."""
    subprocess.run([sys.executable, str(ROOT / "tools" / "build_bpf.py"), str(EXAMPLES), str(EXAMPLES / "build")],
                   check=True, stdout=subprocess.DEVNULL)


def text_of(obj: Path, module: Path, events: list[str]) -> str:
    """What ``build.skeleton(obj, module, events=events, embed=False)`` writes."""
    relative = os.path.relpath(obj.resolve(), module.resolve().parent)
    return generate(obj.read_bytes(), object_name=obj.name, module_name=module.stem,
                    events=[EventSpec.parse(e) for e in events], object_path=relative)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    build_examples()
    stale, missing = [], []
    for obj, module, events in skeletons():
        if not obj.exists():
            missing.append(str(obj.relative_to(ROOT)))
            continue
        if check:
            if not module.exists() or module.read_text() != text_of(obj, module, events):
                stale.append(str(module.relative_to(ROOT)))
        else:
            build.skeleton(obj, module, events=events, embed=False)
    if missing:
        print(f"gen_skels: not built (run `make build`): {', '.join(missing)}", file=sys.stderr)
        return 1
    if stale:
        print(f"gen_skels: out of date (run `python tools/gen_skels.py`): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
