"""ProcessSymbols and the files a process maps, when those files are hostile or broken.

- After the process exited, the name of a file it mapped may have been replaced by anyone who can
  write the directory: a FIFO there must never be opened (an open for reading blocks until a writer
  comes: ``pylibbpf profile`` running as root would hang), nor anything but the mapped file.
- A mapped file whose ELF header points nowhere is located as a file without symbols (module and
  offset) instead of raising OSError.

Real processes map real files (Python's mmap in a child); the resolution runs in a subprocess that
this test watches: it must finish without anyone ever opening the FIFO for reading.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from progs import wait_until

from pylibbpf import ProcessSymbols, Symbol

#: A child that maps the file argv[1] (read-only, shared) and waits for stdin to close.
MAPPER = ("import mmap, sys; f = open(sys.argv[1], 'rb'); m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ); "
          "print('ready', flush=True); sys.stdin.read()")

#: Maps argv[1] in a child, reads its mappings, lets it exit, puts a FIFO at each name in argv[2]
#: (a JSON list, after unlinking the file when argv[3] is "unlink-first"), then resolves.
RESOLVER = r"""
import json, os, subprocess, sys
from pylibbpf import ProcessSymbols
path, fifos, unlink_first = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] == "unlink-first"
child = subprocess.Popen([sys.executable, "-c", sys.argv[4], path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
assert child.stdout.readline() == "ready\n"
if unlink_first:
    os.unlink(path)  # while mapped: /proc/PID/maps names it "PATH (deleted)"
ps = ProcessSymbols(child.pid)
start = next(int(line.split("-")[0], 16) for line in open(f"/proc/{child.pid}/maps") if path in line)
child.stdin.close()
child.wait()
if not unlink_first:
    os.unlink(path)
for name in fifos:
    os.mkfifo(name)
print("resolving", flush=True)
sym = ps.locate(start + 0x10)
print(json.dumps([sym.name, sym.offset, sym.module] if sym else None), flush=True)
"""


def _has_reader(fifo: Path) -> bool:
    """True once someone opened the FIFO for reading (a non-blocking open for writing then succeeds)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as e:
        assert e.errno in (errno.ENXIO, errno.ENOENT), e
        return False
    os.close(fd)  # the reader sees end of file: the resolution goes on and ends
    return True


@pytest.mark.parametrize("unlink_first", [False, True], ids=["replaced after exit", "deleted while mapped"])
def test_a_fifo_at_an_exited_process_file_is_never_opened(tmp_path: Path, unlink_first: bool) -> None:
    path = tmp_path / "lib.so"
    shutil.copy("/bin/true", path)
    fifos = [str(path), f"{path} (deleted)"]
    resolver = subprocess.Popen([sys.executable, "-c", RESOLVER, str(path), json.dumps(fifos),
                                 "unlink-first" if unlink_first else "after-exit", MAPPER],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    try:
        assert resolver.stdout is not None
        assert resolver.stdout.readline() == "resolving\n"
        opened: list[str] = []

        def settled() -> bool:
            opened.extend(f for f in fifos if _has_reader(Path(f)))
            return bool(opened) or resolver.poll() is not None

        assert wait_until(settled, timeout=120.0)
        result = resolver.stdout.read()
        assert resolver.wait(120) == 0
    finally:
        if resolver.poll() is None:
            resolver.kill()
            resolver.wait()
        if resolver.stdout is not None:
            resolver.stdout.close()
    assert opened == [], f"the resolution opened the FIFO {opened} for reading"
    # nothing left to read: the module and the offset in it, as for a file without symbols
    assert json.loads(result) == [None, 0x10, str(path)]


def test_a_broken_elf_header_resolves_to_module_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "broken.so"
    data = bytearray(Path("/bin/true").read_bytes())
    struct.pack_into("<Q", data, 0x20, 2**62)  # e_phoff far beyond any file: the seek fails with EINVAL
    path.write_bytes(bytes(data))
    child = subprocess.Popen([sys.executable, "-c", MAPPER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        ps = ProcessSymbols(child.pid)
        start = next(int(line.split("-")[0], 16) for line in open(f"/proc/{child.pid}/maps") if str(path) in line)
        assert ps.locate(start + 0x40) == Symbol(None, 0x40, str(path))
    finally:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.close()
        child.wait()
        child.stdout.close()
