"""obj.globals and typed maps on binary arrays, floats, resized sections, failed loads and close races.

tests/bpf/bytes_globals.bpf.c holds a MAC address (``__u8[6]`` with zero
bytes), a ``char`` array, floats, a section resized before load and a program
the verifier refuses (``bad``: autoload off unless a test wants load() to fail).
"""

from __future__ import annotations

import errno
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from pylibbpf import BPFError, BPFObject, LoadError

pytestmark = pytest.mark.usefixtures("bpf_privileged")

MAC = bytes([0x00, 0x11, 0x00, 0x22, 0x00, 0x00])
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def obj(bpf_objects: dict[str, Path]) -> Iterator[BPFObject]:
    with BPFObject.open(bpf_objects["bytes_globals"]) as o:
        o.programs["bad"].autoload = False
        yield o


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter: a crash there fails the test instead of ending pytest."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_u8_arrays_are_bytes_with_every_zero_byte(obj: BPFObject) -> None:
    g = obj.globals
    assert (g["gw_mac"], g.type_of("gw_mac")) == (MAC, "u8[6]")
    assert (g["gw_name"], g.type_of("gw_name")) == ("gw", "char[8]")  # char arrays stay text
    g["gw_mac"] = b"\x00\x00\x00\x00\x00\x01"
    assert g["gw_mac"] == b"\x00\x00\x00\x00\x00\x01"
    g["gw_mac"] = [0, 1, 0]  # a sequence of ints, the rest zero
    assert g["gw_mac"] == b"\x00\x01\x00\x00\x00\x00"
    with pytest.raises(ValueError, match=r"global 'gw_mac' \(u8\[6\]\) holds 6 bytes, got 7"):
        g["gw_mac"] = bytes(7)
    with pytest.raises(ValueError, match=r"global 'gw_mac'\[1\] \(u8\) must be <= 255, got 256"):
        g["gw_mac"] = [0, 256]
    with pytest.raises(TypeError, match=r"global 'gw_mac' \(u8\[6\]\) must be bytes or a sequence of ints"):
        g["gw_mac"] = "aa:bb"


def test_u8_array_map_keys_round_trip(obj: BPFObject) -> None:
    obj.load()
    m = obj.maps["macs"]
    assert obj.programs["remember"].test_run().retval == 7  # the program stores the .rodata MAC as a key
    other = bytes(6)
    m[other] = 5  # a key of zeros only: distinct from the MAC
    assert m.key_type == "u8[6]"
    assert dict(m.items()) == {MAC: 1, other: 5}
    for key in list(m):  # a key read back is the same key
        assert m[key] in (1, 5)
        del m[key]
    assert len(m) == 0


def test_a_resized_section_shows_its_array_at_the_new_length(obj: BPFObject) -> None:
    g = obj.globals
    assert g["slots"] == (0,)  # read before the resize: the layout must not stay cached
    obj.maps[".data.slots"].value_size = 4 * 4
    assert g["slots"] == (0, 0, 0, 0) and g.type_of("slots") == "u32[4]"
    g["slots"] = [10, 20, 30, 40]
    g["last_index"] = 3
    obj.load()
    obj.programs["remember"].test_run()
    assert g["last_slot"] == 40 and g["slots"] == (10, 20, 30, 40)


def test_floats_out_of_range_name_the_variable(obj: BPFObject) -> None:
    g = obj.globals
    g["ratio_f"], g["ratio_d"] = 1.5, 2**60
    assert (g["ratio_f"], g["ratio_d"]) == (1.5, float(2**60))
    with pytest.raises(ValueError, match=r"global 'ratio_f' \(float\) is out of range for a float, got 1e\+300"):
        g["ratio_f"] = 1e300
    with pytest.raises(ValueError, match=r"global 'ratio_d' \(double\) is out of range for a double, got .*2001-bit"):
        g["ratio_d"] = 2**2000
    assert (g["ratio_f"], g["ratio_d"]) == (1.5, float(2**60))  # unchanged


def test_a_global_set_after_a_failed_load_is_refused() -> None:
    result = run_python("""
        import errno
        from pylibbpf import BPFError, BPFObject, LoadError
        obj = BPFObject.open("tests/bpf/build/bytes_globals.bpf.o")
        try:
            obj.load()
        except LoadError:
            pass
        for name in ("limit", "gw_mac", "ratio_d"):
            value = obj.globals[name]  # reading the initial image is still safe
            try:
                obj.globals[name] = value
            except BPFError as e:
                assert e.errno == errno.EPERM, e
                print(name, "refused:", e.strerror)
        obj.close()
        """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count("refused: global") == 3
    assert "BPFObject.load() failed" in result.stdout


def test_a_failed_load_is_reported_as_such(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["bytes_globals"]) as obj:
        with pytest.raises(LoadError):
            obj.load()
        assert obj.load_failed and not obj.loaded
        with pytest.raises(BPFError) as info:
            obj.globals["limit"] = 1
        assert info.value.errno == errno.EPERM


def test_globals_racing_close_raise_closed_error_never_crash() -> None:
    result = run_python("""
        import threading
        from pylibbpf import BPFObject, ClosedError
        outcomes = {"read": 0, "closed": 0}
        for _ in range(60):
            obj = BPFObject.open("tests/bpf/build/bytes_globals.bpf.o")
            obj.programs["bad"].autoload = False
            obj.load()
            g = obj.globals
            started = threading.Event()
            def hammer():
                started.set()
                while True:
                    try:
                        g["last_slot"] = g["last_slot"] + 1
                        g["gw_mac"]
                        outcomes["read"] += 1
                    except ClosedError:
                        outcomes["closed"] += 1
                        return
            t = threading.Thread(target=hammer)
            t.start()
            started.wait()
            obj.close()
            t.join()
        print(outcomes["closed"])
        """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["60"]  # every thread ended on ClosedError
