"""BPFObject, Program, Map, Link on the real kernel, and their bad inputs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pylibbpf import BPFError, BPFObject, ClosedError, Link, LoadError, lib

pytestmark = pytest.mark.usefixtures("bpf_privileged")


def test_open_load_and_list(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["ringbuf"]) as obj:
        assert not obj.loaded
        assert set(obj.programs) == {"emit"}
        assert {"rb", "rb2", "failed_reserves"} <= set(obj.maps)
        assert obj.maps["rb"].fd == -1  # not created before load
        obj.load()
        assert obj.loaded
        prog = obj.programs["emit"]
        assert prog.fd >= 0 and prog.type == lib.BPF_PROG_TYPE_SYSCALL and prog.section == "syscall"
        rb = obj.maps["rb"]
        assert rb.type == lib.BPF_MAP_TYPE_RINGBUF and rb.max_entries == 64 * 1024 and rb.fd >= 0
        assert rb.type_name == "ringbuf"


def test_open_from_bytes(bpf_objects: dict[str, Path]) -> None:
    data = bpf_objects["tracepoint"].read_bytes()
    with BPFObject.open(data, object_name="from_bytes") as obj:
        obj.load()
        assert obj.name == "from_bytes"
        assert obj.programs["not_attachable"].test_run().retval == 7


def test_attach_all_attaches_by_section_and_destroy_detaches(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["tracepoint"]) as obj:
        obj.load()
        links = obj.attach_all()
        assert [link.name for link in links] == ["count_getpid"]  # the syscall program is skipped
        calls = obj.maps["calls"]
        pid = os.getpid()
        for _ in range(5):
            os.getpid()
        counted = calls.get(pid, 0)
        assert counted >= 5
        for link in links:
            link.destroy()
            link.destroy()  # idempotent
        for _ in range(5):
            os.getpid()
        assert calls[pid] == counted


def test_program_attach_returns_a_context_manager_link(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["tracepoint"]) as obj:
        obj.load()
        with obj.programs["count_getpid"].attach() as link:
            assert isinstance(link, Link) and link.fd >= 0
            os.getpid()
            assert obj.maps["calls"].lookup(os.getpid()) is not None
        with pytest.raises(ClosedError):
            link.fd  # noqa: B018


def test_raw_map_operations(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["tracepoint"]) as obj:
        obj.load()
        calls = obj.maps["calls"].raw
        assert calls.lookup(1) is None
        calls.update(1, (10).to_bytes(8, "little"))
        calls.update(b"\x02\0\0\0", (20).to_bytes(8, "little"), lib.BPF_NOEXIST)
        with pytest.raises(BPFError) as info:
            calls.update(2, (30).to_bytes(8, "little"), lib.BPF_NOEXIST)
        assert info.value.errno == 17  # EEXIST
        assert sorted(calls.keys()) == [b"\x01\0\0\0", b"\x02\0\0\0"]
        assert dict(calls.items())[b"\x02\0\0\0"] == (20).to_bytes(8, "little")
        calls.delete(1)
        with pytest.raises(KeyError):
            calls.delete(1)
        with pytest.raises(ValueError, match="4-byte keys"):
            calls.lookup(b"\0" * 3)
        with pytest.raises(ValueError, match="8-byte values"):
            calls.update(3, b"\0")
        with pytest.raises(TypeError, match="key must be bytes or int"):
            calls.lookup("one")  # type: ignore[arg-type]


def test_per_cpu_map_values(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["perfbuf"]) as obj:
        obj.load()
        scratch = obj.maps["scratch"]
        values = scratch.raw.lookup(0)
        assert isinstance(values, tuple) and len(values) == lib.libbpf_num_possible_cpus()
        assert all(len(v) == scratch.value_size for v in values)


def test_test_run_pins_to_a_cpu(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["ringbuf"]) as obj:
        obj.load()
        run = obj.programs["emit"].test_run(ctx=bytes(32))
        assert run.retval == 0 and run.data_out == b""
        with pytest.raises(ValueError, match="repeat"):
            obj.programs["emit"].test_run(repeat=0)


def test_missing_file() -> None:
    with pytest.raises(BPFError) as info:
        BPFObject.open("/nonexistent/prog.bpf.o")
    assert info.value.errno == 2
    assert "/nonexistent/prog.bpf.o" in str(info.value)


def test_garbage_bytes_and_wrong_types(tmp_path: Path) -> None:
    with pytest.raises(BPFError) as info:
        BPFObject.open(b"this is not an ELF file")
    assert info.value.errno == lib.LIBBPF_ERRNO__FORMAT
    junk = tmp_path / "junk.o"
    junk.write_bytes(b"\0" * 64)
    with pytest.raises(BPFError):
        BPFObject.open(junk)
    with pytest.raises(TypeError, match="path or bytes"):
        BPFObject.open(42)  # type: ignore[arg-type]


def test_unknown_names_list_the_known_ones(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["ringbuf"]) as obj:
        with pytest.raises(KeyError, match=r"no program named 'nope'.*known: emit"):
            obj.programs["nope"]
        with pytest.raises(KeyError, match=r"no map named 'nope'.*failed_reserves, rb, rb2"):
            obj.maps["nope"]


def test_use_after_close(bpf_objects: dict[str, Path]) -> None:
    obj = BPFObject.open(bpf_objects["ringbuf"])
    obj.load()
    prog, rb = obj.programs["emit"], obj.maps["rb"]
    obj.close()
    obj.close()  # idempotent
    assert obj.closed
    for action in (obj.load, lambda: prog.fd, lambda: rb.fd, lambda: prog.test_run(), obj.attach_all,
                   lambda: rb.lookup(0)):
        with pytest.raises(ClosedError, match="closed"):
            action()


def test_unloaded_object_gives_clear_errors(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["ringbuf"]) as obj:
        with pytest.raises(BPFError, match="not loaded"):
            obj.programs["emit"].test_run()
        with pytest.raises(BPFError, match="not created"):
            obj.maps["failed_reserves"].lookup(0)


def test_verifier_rejection_carries_the_log(bpf_objects: dict[str, Path]) -> None:
    with BPFObject.open(bpf_objects["rejected"]) as obj:
        with pytest.raises(LoadError) as info:
            obj.load()
        assert info.value.errno == 13  # EACCES: the verifier said no
        assert "map_value_or_null" in info.value.log
        assert "verifier log" in str(info.value)
        assert not obj.loaded
