"""``pylibbpf inspect`` of crafted objects: the description or a one-line error, never a traceback.

Each case patches one name of a built object's BTF string table (the .BTF
section's strings) so that it is not valid UTF-8, then runs the command in
this process (text and --json).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from pylibbpf.cli import main


def btf_strings(elf: bytes) -> list[tuple[int, int]]:
    """(file offset, length) of every non-empty string in the .BTF section's string table."""
    e_shoff, = struct.unpack_from("<Q", elf, 0x28)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", elf, 0x3A)

    def section(i: int) -> tuple[int, int, int]:
        name, _type, _flags, _addr, off, size = struct.unpack_from("<IIQQQQ", elf, e_shoff + i * e_shentsize)
        return name, off, size

    _, names_off, _ = section(e_shstrndx)
    for i in range(e_shnum):
        name, off, _size = section(i)
        if elf[names_off + name:].split(b"\0", 1)[0] == b".BTF":
            hdr_len, _type_off, _type_len, str_off, str_len = struct.unpack_from("<I4I", elf, off + 4)
            start = off + hdr_len + str_off
            out, pos = [], start
            for s in elf[start:start + str_len].split(b"\0"):
                if s:
                    out.append((pos, len(s)))
                pos += len(s) + 1
            return out
    raise AssertionError("no .BTF section")


def inspect(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    rc = main(["inspect", *extra, str(path)])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("name", ["layout", "ringbuf"])
def test_inspect_with_a_name_that_is_not_utf8(bpf_objects: dict[str, Path], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str], name: str) -> None:
    original = bpf_objects[name].read_bytes()
    strings = btf_strings(original)
    assert len(strings) > 10
    crafted = tmp_path / "crafted.bpf.o"
    described = 0
    for pos, length in strings:
        data = bytearray(original)
        data[pos + length // 2] = 0xFF  # never valid in UTF-8
        crafted.write_bytes(data)
        for extra in ((), ("--json",)):
            rc, out, err = inspect(crafted, capsys, *extra)
            if rc == 0:
                assert out and not err, err
                if extra:
                    json.loads(out)
                out.encode("utf-8")  # printable: no lone surrogates
                described += 1
            else:
                assert rc == 1 and len(err.splitlines()) == 1, err
    assert described  # most names are free text to libbpf: the object still opens


def test_a_struct_name_that_is_not_utf8_is_described(bpf_objects: dict[str, Path], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    original = bpf_objects["layout"].read_bytes()
    (pos, _length), = [(p, n) for p, n in btf_strings(original) if original[p:p + n] == b"layout_event"]
    data = bytearray(original)
    data[pos + 1] = 0xFF
    crafted = tmp_path / "crafted.bpf.o"
    crafted.write_bytes(data)
    rc, out, err = inspect(crafted, capsys)
    assert rc == 0, err
    assert "struct l\\xffyout_event (" in out
    rc, out, err = inspect(crafted, capsys, "--json")
    assert rc == 0, err
    assert "l\\xffyout_event" in [s["name"] for s in json.loads(out)["structs"]]
