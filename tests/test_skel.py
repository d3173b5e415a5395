"""Typed skeletons: generated from tests/bpf/skel.bpf.c, imported, run on the kernel, checked by ruff and mypy.

The generated module is written into a temporary directory and imported
from there (it needs nothing but ``pylibbpf``); mypy and ruff run on it as
subprocesses, as a user's CI would.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import pylibbpf
from pylibbpf import BPFError, BPFObject, ClosedError, RingBuffer, build
from pylibbpf.cli import main
from pylibbpf.skel import Codec

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent


def import_path(path: Path) -> ModuleType:
    """Import the module at ``path`` under its file name (each test's module is its own)."""
    name = f"{path.stem}_{abs(hash(path))}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def skel_path(bpf_objects: dict[str, Path], tmp_path: Path) -> Path:
    """tests/bpf/skel.bpf.o's skeleton (object embedded), written into tmp_path."""
    return build.skeleton(bpf_objects["skel"], tmp_path / "tskel.py")


@pytest.fixture
def mod(skel_path: Path) -> Iterator[ModuleType]:
    module = import_path(skel_path)
    yield module
    sys.modules.pop(module.__name__, None)


def run_tool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_BIN / args[0]), *args[1:]], cwd=cwd, capture_output=True, text=True)


def test_the_generated_skeleton_runs_the_program(mod: ModuleType) -> None:
    m = mod
    with m.SkelSkel.open() as skel:
        # .rodata before load: every kind of variable, read back from the initial image
        skel.rodata.targ_pid = 1234
        skel.rodata.verbose = True
        skel.rodata.label = "hello"
        skel.rodata.color = m.TskelColor.TSKEL_BLUE
        skel.rodata.cfg = m.TskelCfg(level=5, tag="tg", origin=m.TskelPoint(-7, 8))
        skel.rodata.weights = (1, 2, 300)
        skel.rodata.corners = (m.TskelPoint(), m.TskelPoint(30, 40))
        assert skel.rodata.cfg == m.TskelCfg(5, "tg", m.TskelPoint(-7, 8))
        assert skel.rodata.color is m.TskelColor.TSKEL_BLUE
        assert skel.rodata.corners == (m.TskelPoint(0, 0), m.TskelPoint(30, 40))
        assert skel.data_custom.custom == 7
        skel.load()
        skel.maps.by_color[m.TskelColor.TSKEL_BLUE] = 0     # emit() only adds to an existing count
        perf = skel.perf_events     # its rings open now: samples written before had nowhere to go
        skel.progs.emit.test_run(cpu=0)

        want = m.TskelEvent(seq=0, pid=1234, color=m.TskelColor.TSKEL_BLUE, comm="hello",
                            mac=b"\xaa\0\0\0\0\x01", ok=True, pad_=0, at=m.TskelPoint(-7, 8),
                            path=(m.TskelPoint(0, 0), m.TskelPoint(30, 40)), grid=((0, 0, 0), (0, 0, 300)),
                            count=5, index=9, bytes_=1)
        assert skel.events.read_batch(0) == [want]            # the ring buffer (the BTF hint)
        assert perf.read_batch(1.0) == [want]                 # the perf event array, same struct
        ev = want
        assert (ev.count, ev.index, ev.bytes_) == (5, 9, 1)   # fields named like tuple methods / builtins

        # a map with a struct key and value
        stats = skel.maps.flows[m.TskelKey(1234, 80, 6)]
        assert stats == m.TskelStats(packets=1, last=m.TskelColor.TSKEL_BLUE, comm="hello",
                                     range=m.TskelStatsRange(0, 5))
        skel.maps.flows[m.TskelKey(1, 2, 3)] = m.TskelStats(packets=9, comm="x")
        assert skel.maps.flows[m.TskelKey(1, 2, 3)] == m.TskelStats(9, m.TskelColor(0), "x", m.TskelStatsRange())
        assert sorted(skel.maps.flows) == [m.TskelKey(1, 2, 3), m.TskelKey(1234, 80, 6)]
        skel.maps.flows[m.TskelKey(1, 2, 3)] = {"packets": 4, "range": {"hi": 2}}   # a mapping, as obj.maps takes
        assert skel.maps.flows[m.TskelKey(1, 2, 3)] == m.TskelStats(4, m.TskelColor(0), "", m.TskelStatsRange(0, 2))
        assert isinstance(skel.maps.flows, pylibbpf.Map)
        # an enum key; a per-CPU struct value; a char[16] value (the object's own typing)
        assert dict(skel.maps.by_color.items()) == {m.TskelColor.TSKEL_BLUE: 1}
        assert next(iter(skel.maps.by_color)) is m.TskelColor.TSKEL_BLUE
        ncpu = len(skel.maps.points[0])
        skel.maps.points[1] = tuple(m.TskelPoint(i, -i) for i in range(ncpu))
        assert skel.maps.points[1] == tuple(m.TskelPoint(i, -i) for i in range(ncpu))
        skel.maps.names[2] = "abc"
        assert skel.maps.names[2] == "abc"

        # .data/.bss live after load
        assert skel.bss.emitted == 1
        skel.data.step = 5
        skel.progs.emit.test_run(cpu=0)
        assert skel.bss.emitted == 6
        assert [e.seq for e in skel.events.read_batch(0)] == [1]
        assert skel.data.ratio == 0.5
        skel.bss.num = b"\x01\x02"                          # a union: its bytes
        assert skel.bss.num == b"\x01\x02" + bytes(6)
        assert skel.bss.bits == bytes(4)                    # a struct with bitfields: its bytes

        # .rodata after load: a clear error naming the variable
        with pytest.raises(BPFError, match=r"global 'targ_pid' is in \.rodata, frozen") as e:
            skel.rodata.targ_pid = 1
        assert e.value.errno == errno.EPERM
        with pytest.raises(BPFError, match=r"global 'cfg' is in \.rodata"):
            skel.rodata.cfg = m.TskelCfg()
        # a misspelled name is an AttributeError, on every group
        for group, name in ((skel.rodata, "targ_pidd"), (skel.maps, "flow"), (skel.progs, "emitt"), (skel, "event")):
            with pytest.raises(AttributeError):
                setattr(group, name, 1)
        with pytest.raises(AttributeError):
            getattr(skel.bss, "emited")  # noqa: B009
    assert skel.closed
    with pytest.raises(ClosedError):
        skel.maps  # noqa: B018
    skel.close()  # idempotent


def test_struct_classes_are_frozen_slotted_and_typed(mod: ModuleType) -> None:
    m = mod
    ev = m.TskelEvent(pid=3)
    assert ev == m.TskelEvent(0, 3) and ev.comm == "" and ev.grid == ((0, 0, 0), (0, 0, 0))
    with pytest.raises(AttributeError):
        ev.pid = 4
    with pytest.raises(AttributeError):
        ev.extra = 1
    assert not hasattr(ev, "__dict__")
    assert ev._replace(pid=4).pid == 4 and ev._asdict()["pid"] == 3
    assert m.TskelColor(40) is m.TskelColor.TSKEL_BLUE
    assert m.TskelColor(7) == 7 and m.TskelColor(7).name == "7"   # a value no enumerator has still reads


def test_codecs_write_what_they_read_and_name_bad_fields(mod: ModuleType) -> None:
    m = mod
    codec: Codec[Any] = m.TSKEL_EVENT
    ev = m.TskelEvent(seq=2**64 - 1, pid=5, color=m.TskelColor.TSKEL_RED, comm="abc", mac=b"\x01\x02",
                      ok=True, at=m.TskelPoint(-1, 1), path=(m.TskelPoint(1, 2),), grid=((1,), (4, 5, 6)),
                      count=3, index=4, bytes_=5)
    data = codec.pack(ev)
    assert len(data) == codec.size == 96
    back = codec.unpack(data + b"pad")                     # longer buffers: padding ignored
    assert back == ev._replace(mac=b"\x01\x02" + bytes(4), path=(m.TskelPoint(1, 2), m.TskelPoint()),
                               grid=((1, 0, 0), (4, 5, 6)))
    with pytest.raises(ValueError, match=r"^TskelEvent\.pid \(u32\) must be in 0\.\.4294967295, got -1$"):
        codec.pack(ev._replace(pid=-1))
    with pytest.raises(ValueError, match=r"^TskelEvent\.comm \(char\[16\]\) holds 16 bytes, got 17"):
        codec.pack(ev._replace(comm="x" * 17))
    with pytest.raises(TypeError, match=r"^TskelEvent\.at must be a TskelPoint \(struct tskel_point\), got tuple"):
        codec.pack(ev._replace(at=(1, 2)))
    with pytest.raises(ValueError, match=r"^TskelEvent\.path\[1\]\.y \(i32\) must be in"):
        codec.pack(ev._replace(path=(m.TskelPoint(), m.TskelPoint(0, 2**40))))
    with pytest.raises(ValueError, match=r"^TskelEvent\.grid \(u16\[3\]\[2\]\) holds 2 items, got 3"):
        codec.pack(ev._replace(grid=((), (), ())))
    with pytest.raises(TypeError, match=r"^TskelEvent\.ok \(bool\) must be a bool, got 'yes'"):
        codec.pack(ev._replace(ok="yes"))
    with pytest.raises(ValueError, match=r"^struct tskel_event needs 96 bytes, got 10$"):
        codec.unpack(bytes(10))
    with pytest.raises(ValueError, match=r"^struct tskel_event: stride 8 is smaller than the type \(96 bytes\)"):
        codec.unpack_many(data, stride=8)
    assert codec.unpack_many(data + bytes(8) + data, stride=104) == [back, back]
    assert codec.unpack_many(b"") == []


def test_the_specs_refuse_what_struct_would_take_or_choke_on() -> None:
    from pylibbpf import skel

    bools = skel.value_codec("bool[2]", skel.Array(skel.Bool(), 2), lambda r: r, ())
    with pytest.raises(TypeError, match=r"^flags\[1\] \(bool\) must be a bool, got 'yes' \(str\)$"):
        bools.pack((True, "yes"), "flags")              # struct's "?" would store True
    assert bools.pack((True,)) == b"\x01\x00"
    double = skel.value_codec("double", skel.Float("d"), lambda r: r[0], 0.0)
    with pytest.raises(ValueError, match=r"^ratio \(double\) is out of range for a double, got a 1329-bit int$"):
        double.pack(10**400, "ratio")
    with pytest.raises(TypeError, match=r"^ratio \(double\) must be a number, got '1' \(str\)$"):
        double.pack("1", "ratio")


def test_a_batch_converts_in_one_pass_as_record_by_record(bpf_objects: dict[str, Path], mod: ModuleType) -> None:
    m = mod
    with m.SkelSkel.open() as skel:
        skel.rodata.label = "batch"
        skel.load()
        for _ in range(40):
            skel.progs.emit.test_run(cpu=0)
        batch = RingBuffer(skel.maps.events)
        with batch as rb:
            got = rb.read_batch(0)
            assert len(got) == 40 and isinstance(got.starts, range)   # a uniform batch: iter_unpack
            fast = m.TSKEL_EVENT.unpack_batch(got)
            assert fast == [m.TSKEL_EVENT.unpack(view) for view in got]
            assert [e.seq for e in fast] == list(range(40)) and {e.comm for e in fast} == {"batch"}
            got.next = 35                                              # records already delivered are left out
            assert [e.seq for e in m.TSKEL_EVENT.unpack_batch(got)] == [35, 36, 37, 38, 39]
            got.keep([0, 2, 4])                                        # not back to back: record by record
            assert [e.seq for e in m.TSKEL_EVENT.unpack_batch(got)] == [35, 37, 39]
        short = pylibbpf.Batch.one(bytes(20))
        with pytest.raises(ValueError, match=r"^struct tskel_event needs 96 bytes, got 20$"):
            m.TSKEL_EVENT.unpack_batch(short)


def test_iterating_a_reader_ends_when_the_skeleton_closes(mod: ModuleType) -> None:
    got: list[Any] = []
    first = threading.Event()
    with mod.SkelSkel.open() as skel:
        skel.load()
        reader = skel.events

        def run() -> None:
            for ev in reader:          # blocks in read_batch() until a record or close()
                got.append(ev)
                first.set()

        t = threading.Thread(target=run)
        t.start()
        skel.progs.emit.test_run(cpu=0)
        assert first.wait(10)
    t.join(10)                         # close() woke the blocked read: the loop ended
    assert not t.is_alive() and [e.seq for e in got] == [0]


def test_the_reader_exists_once_loaded_and_closes_with_the_skeleton(mod: ModuleType) -> None:
    with mod.SkelSkel.open() as skel:
        with pytest.raises(BPFError, match=r"the reader of map 'events' exists once the object is loaded"):
            skel.events  # noqa: B018
        skel.load()
        reader = skel.events
        assert skel.events is reader
    with pytest.raises(ClosedError):
        reader.read_batch(0)


def test_a_skeleton_refuses_an_object_it_was_not_made_from(mod: ModuleType,
                                                           bpf_objects: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match=r"^SkelSkel: the object 'skel' has no map '.bss', map '.data', map "
                                         r"'.data.custom', map '.rodata' and 20 more: the skeleton was generated "
                                         r"from another object \(generate it again\)$"):
        mod.SkelSkel.open(bpf_objects["ringbuf"])
    with mod.SkelSkel.open(bpf_objects["skel"].read_bytes()) as skel:   # another copy of the same object
        assert skel.obj.name == "skel"


def test_the_same_object_gives_the_same_bytes_ruff_format_clean(bpf_objects: dict[str, Path],
                                                                 tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = build.skeleton(bpf_objects["skel"], tmp_path / "a" / "tskel.py")
    second = build.skeleton(bpf_objects["skel"], tmp_path / "b" / "tskel.py")
    text = first.read_text()
    assert second.read_text() == text
    mtime = first.stat().st_mtime_ns
    assert build.skeleton(bpf_objects["skel"], first).read_text() == text
    assert first.stat().st_mtime_ns == mtime          # not rewritten: make sees nothing new
    for args in (["format", "--check", "--isolated"], ["format", "--check", "--config", str(ROOT / "pyproject.toml")],
                 ["check", "--isolated"], ["check", "--config", str(ROOT / "pyproject.toml")]):
        done = run_tool("ruff", *args, str(first), cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr


MYPY_USER_OK = """\
    from tskel import SkelSkel, TskelCfg, TskelColor, TskelEvent, TskelKey, TskelStats

    def run() -> list[int]:
        with SkelSkel.open() as skel:
            skel.rodata.targ_pid = 1
            skel.rodata.cfg = TskelCfg(level=2)
            skel.load()
            stats: TskelStats = skel.maps.flows[TskelKey(1, 80, 6)]
            colors: dict[TskelColor, int] = dict(skel.maps.by_color.items())
            events: list[TskelEvent] = skel.events.read_batch(0.1)
            return [e.pid + e.at.x + stats.packets + len(colors) for e in events]
"""


def test_mypy_strict_checks_the_module_and_the_code_using_it(skel_path: Path, tmp_path: Path) -> None:
    user = tmp_path / "user.py"
    user.write_text(textwrap.dedent(MYPY_USER_OK))
    done = run_tool("python", "-m", "mypy", "--strict", "--no-incremental", skel_path.name, "user.py", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    bad = tmp_path / "bad.py"
    bad.write_text(textwrap.dedent("""\
        from tskel import SkelSkel

        def run() -> int:
            with SkelSkel.open() as skel:
                skel.load()
                skel.rodata.targ_pid = "1234"
                return sum(e.pidd for e in skel.events.read_batch(0))
    """))
    done = run_tool("python", "-m", "mypy", "--strict", "--no-incremental", "bad.py", cwd=tmp_path)
    assert done.returncode == 1, done.stdout
    assert 'bad.py:6: error: Incompatible types in assignment (expression has type "str", variable has type ' \
           '"int")' in done.stdout
    assert 'bad.py:7: error: "TskelEvent" has no attribute "pidd"' in done.stdout
    # mypy's message names the types; with --pretty it shows the assignment too, naming the global
    done = run_tool("python", "-m", "mypy", "--strict", "--no-incremental", "--pretty", "bad.py", cwd=tmp_path)
    lines = done.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("bad.py:6: error: Incompatible types"))
    assert 'skel.rodata.targ_pid = "1234"' in "\n".join(lines[at:at + 4]), done.stdout


def test_sibling_mode_opens_the_object_beside_the_module(bpf_objects: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "objs").mkdir()
    obj = shutil.copy(bpf_objects["skel"], tmp_path / "objs" / "skel.bpf.o")
    (tmp_path / "mods").mkdir()
    path = build.skeleton(obj, tmp_path / "mods" / "skel_mod.py", embed=False)
    text = path.read_text()
    assert "base64" not in text and 'pathlib.Path(__file__).parent / "../objs/skel.bpf.o"' in text
    module = import_path(path)
    try:
        with module.SkelSkel.open() as skel:
            assert skel.rodata.cfg.level == 3
        os.unlink(obj)
        with pytest.raises(BPFError) as e:
            module.SkelSkel.open()
        assert e.value.errno == errno.ENOENT
    finally:
        sys.modules.pop(module.__name__, None)


def test_events_from_the_command_line_and_their_errors(bpf_objects: dict[str, Path], tmp_path: Path) -> None:
    ring = bpf_objects["ringbuf"]
    out = tmp_path / "rb_skel.py"
    path = build.skeleton(ring, out, events=["rb=struct emit_args", "rb2=emit_args"])
    module = import_path(path)
    try:
        for reader in ("rb", "rb2"):
            prop = getattr(module.RingbufSkel, reader)
            assert prop.fget.__annotations__["return"] == "pylibbpf.skel.Events[EmitArgs]"
        assert not hasattr(module.RingbufSkel, "rb3")   # no --event and no hint: no reader
    finally:
        sys.modules.pop(module.__name__, None)
    with pytest.raises(ValueError, match=r"map 'failed_reserves' \(array\) is not a ring buffer or perf event array"):
        build.skeleton(ring, out, events=["failed_reserves=struct emit_args"])
    with pytest.raises(ValueError, match=r"the object has no map 'nope' \(ring buffers and perf event arrays: rb, rb2"):
        build.skeleton(ring, out, events=["nope=struct emit_args"])
    with pytest.raises(KeyError, match=r"no struct named 'nope' in the object's BTF .*known: emit_args, emit_ctx"):
        build.skeleton(ring, out, events=["rb=struct nope"])
    with pytest.raises(ValueError, match=r"^event: expected MAP=struct NAME"):
        build.skeleton(ring, out, events=["rb"])


def test_raw_chars_keep_char_arrays_as_bytes(bpf_objects: dict[str, Path], tmp_path: Path) -> None:
    path = build.skeleton(bpf_objects["skel"], tmp_path / "raw_skel.py",
                          raw_chars=["tskel_event.comm", "label", "names.value"])
    text = path.read_text()
    command = " ".join(text.split('"""')[1].replace("\\\n", " ").split())
    assert "--raw-chars label --raw-chars names.value --raw-chars tskel_event.comm" in command
    m = import_path(path)
    try:
        with m.SkelSkel.open() as skel:
            skel.rodata.label = b"hi\xff"                      # bytes, not str (not UTF-8 either)
            assert skel.rodata.label == b"hi\xff" + bytes(9)    # every byte of char[12]
            skel.load()
            perf = skel.perf_events
            skel.progs.emit.test_run(cpu=0)
            ev = perf.read_batch(1.0)[0]
            assert ev.comm == b"hi\xff" + bytes(13)             # the struct member named: bytes
            skel.maps.names[1] = b"x"
            assert skel.maps.names[1] == b"x" + bytes(15)        # a map's char[16] value: bytes
            assert m.TskelStats().comm == ""                   # members not named stay str
    finally:
        sys.modules.pop(m.__name__, None)
    every = build.skeleton(bpf_objects["skel"], tmp_path / "every_skel.py", raw_chars=["*"]).read_text()
    assert "comm: str" not in every and "comm: bytes" in every
    with pytest.raises(ValueError, match=r"^raw_chars: 'tskel_event\.nope', 'verbose' names no char array"):
        build.skeleton(bpf_objects["skel"], tmp_path / "x.py", raw_chars=["tskel_event.nope", "verbose"])


def test_the_command_writes_the_module(bpf_objects: dict[str, Path], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    obj = shutil.copy(bpf_objects["skel"], tmp_path / "run_qlat.bpf.o")
    assert main(["skel", str(obj)]) == 0
    out = tmp_path / "run_qlat_skel.py"
    assert capsys.readouterr().out == f"{out}\n"
    assert "class RunQlatSkel(pylibbpf.skel.Skeleton):" in out.read_text()
    assert main(["skel", str(obj), "-o", str(tmp_path / "x.py"), "--name", "Probe", "--no-embed",
                 "--event", "events=struct tskel_event"]) == 0
    text = (tmp_path / "x.py").read_text()
    assert "class ProbeSkel(" in text and "base64" not in text
    assert ("pylibbpf skel run_qlat.bpf.o -o x.py --name Probe --event \\\n"
            "        'events=struct tskel_event' --no-embed\n") in text
    capsys.readouterr()
    assert main(["skel", str(tmp_path / "missing.bpf.o")]) == 1
    assert capsys.readouterr().err == f"pylibbpf skel: object_path: no such file '{tmp_path / 'missing.bpf.o'}'\n"
    with pytest.raises(SystemExit) as e:
        main(["skel", str(obj), "--event", "events"])
    assert e.value.code == 2
    assert "argument --event: expected MAP=struct NAME" in capsys.readouterr().err
    assert main(["skel", str(obj), "--event", "flows=struct tskel_event"]) == 1
    assert "map 'flows' (hash) is not a ring buffer" in capsys.readouterr().err


def test_build_writes_the_skeleton_beside_the_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which("clang") is None and shutil.which("clang-19") is None:
        pytest.skip("clang is not installed")
    src = tmp_path / "tiny.bpf.c"
    src.write_text(textwrap.dedent("""\
        #include "vmlinux.h"
        #include <bpf/bpf_helpers.h>
        struct tiny_ev { __u32 pid; char comm[16]; };
        struct tiny_ev *keep_tiny_ev __attribute__((unused));
        struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 4096); } out SEC(".maps");
        const volatile __u32 want = 0;
        SEC("syscall") int go(void *ctx) { return want; }
        char LICENSE[] SEC("license") = "GPL";
    """))
    assert main(["build", str(src), "--skel"]) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'tiny.bpf.o'}\n{tmp_path / 'tiny_skel.py'}\n"
    module = import_path(tmp_path / "tiny_skel.py")
    try:
        with module.TinySkel.open() as skel:
            skel.rodata.want = 7
            skel.load()
            assert skel.progs.go.test_run().retval == 7
            assert skel.out.read_batch(0) == []
    finally:
        sys.modules.pop(module.__name__, None)
    with pytest.raises(SystemExit) as e:
        main(["build", str(src), "--event", "out=struct tiny_ev"])
    assert e.value.code == 2
    assert "--event describes the skeleton: it needs --skel" in capsys.readouterr().err
    with pytest.raises(ValueError, match="events and raw_chars describe a skeleton: they need skel=True"):
        build.compile(src, events=["out=struct tiny_ev"])


def test_raw_globals_are_the_variables_bytes(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["skel"]) as obj:
        raw = obj.globals.raw
        assert raw["cfg"] == (3).to_bytes(4, "little") + b"t" + bytes(7) + (-1).to_bytes(4, "little", signed=True) \
            + (2).to_bytes(4, "little")
        assert len(raw) == len(obj.globals) and list(raw) == list(obj.globals)
        raw["targ_pid"] = (42).to_bytes(4, "little")
        assert obj.globals["targ_pid"] == 42
        with pytest.raises(ValueError, match=r"^global 'targ_pid': raw value must be 4 bytes, got 2$"):
            raw["targ_pid"] = b"ab"
        with pytest.raises(TypeError, match=r"^global 'targ_pid': raw value must be bytes, not int$"):
            raw["targ_pid"] = 42
        with pytest.raises(KeyError, match="no global variable named 'nope'"):
            raw["nope"]
        assert repr(raw) == "<raw globals of skel: " + ", ".join(obj.globals) + ">"
        obj.load()
        with pytest.raises(BPFError, match=r"global 'targ_pid' is in \.rodata, frozen"):
            raw["targ_pid"] = bytes(4)
        raw["step"] = (3).to_bytes(8, "little")
        assert obj.globals["step"] == 3


def test_the_bundled_and_example_skeletons_are_up_to_date() -> None:
    # As the cdef (tests/test_cdef.py): generated, committed, and regenerated by `make build`.
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_skels.py"), "--check"], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
