"""``pylibbpf.btf.kernel()`` against an independent reading of the same BTF.

The reference is ``bpftool btf dump file /sys/kernel/btf/vmlinux format raw``
parsed here: every type's kind, name, size and members with their bit offsets,
every enum's values. Offsets of nested and anonymous members are summed from
that dump by the test's own walk.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from pylibbpf import BPFError, ClosedError, ffi, lib
from pylibbpf.btf import BTFType, KernelBTF, kernel

VMLINUX = Path("/sys/kernel/btf/vmlinux")
pytestmark = pytest.mark.skipif(not VMLINUX.exists(), reason="the kernel has no BTF")

_HEAD = re.compile(r"\[(\d+)\] (\w+) '([^']*)'(.*)")
_ITEM = re.compile(r"\t'([^']*)'(.*)")


def attrs(text: str) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in text.split() if "=" in kv)


class Raw:
    """bpftool's raw dump: types by id (kind, name, attributes, items) and ids by (kind, name)."""

    def __init__(self, text: str) -> None:
        self.types: dict[int, dict[str, Any]] = {}
        self.ids: dict[tuple[str, str], int] = {}
        current: dict[str, Any] | None = None
        for line in text.splitlines():
            if m := _HEAD.match(line):
                current = {"kind": m[2], "name": m[3], "attrs": attrs(m[4]), "items": []}
                self.types[int(m[1])] = current
                self.ids.setdefault((m[2], m[3]), int(m[1]))
            elif (m := _ITEM.match(line)) and current is not None:
                current["items"].append((m[1], attrs(m[2])))

    def resolve(self, type_id: int) -> int:
        while self.types[type_id]["kind"] in ("TYPEDEF", "CONST", "VOLATILE", "RESTRICT", "TYPE_TAG"):
            type_id = int(self.types[type_id]["attrs"]["type_id"])
        return type_id

    def find(self, record: int, name: str, bits: int = 0) -> tuple[int, int, int] | None:
        """(type id, bit offset, bitfield size) of member ``name``, looking into anonymous members."""
        for mname, a in self.types[record]["items"]:
            at = bits + int(a["bits_offset"])
            if mname == name:
                return int(a["type_id"]), at, int(a.get("bitfield_size", 0))
            inner = self.resolve(int(a["type_id"]))
            if mname == "(anon)" and self.types[inner]["kind"] in ("STRUCT", "UNION"):
                if (found := self.find(inner, name, at)) is not None:
                    return found
        return None

    def path(self, struct: str, path: str) -> tuple[int, int]:
        """(bit offset, bitfield size) of a dotted member path of ``struct``."""
        record, bits, size = self.ids[("STRUCT", struct)], 0, 0
        for part in path.split("."):
            found = self.find(record, part, bits)
            assert found is not None, (struct, path)
            type_id, bits, size = found
            record = self.resolve(type_id)
        return bits, size


@pytest.fixture(scope="module")
def raw() -> Raw:
    if shutil.which("bpftool") is None:
        pytest.skip("needs bpftool for the reference dump")
    text = subprocess.run(["bpftool", "btf", "dump", "file", str(VMLINUX), "format", "raw"], capture_output=True,
                          text=True, check=True, timeout=120).stdout
    return Raw(text)


def test_every_member_of_task_struct_has_bpftools_offset(raw: Raw) -> None:
    k = kernel()
    items = raw.types[raw.ids[("STRUCT", "task_struct")]]["items"]
    named = [(n, a) for n, a in items if n != "(anon)"]
    assert len(named) > 50
    for name, a in named:
        bits, size = int(a["bits_offset"]), int(a.get("bitfield_size", 0))
        m = k.member("task_struct", name)
        assert (m.bit_offset, m.bitfield_size, m.offset) == (bits, size, bits // 8), name
        assert k.has_field("task_struct", name)
        if size:
            with pytest.raises(ValueError, match=rf"task_struct.{name} is a {size}-bit bitfield at bit offset {bits}"):
                k.field_offset("task_struct", name)
        else:
            assert k.field_offset("task_struct", name) == bits // 8, name
    described = k.type("task_struct")
    assert described.kind == "struct" and described.size == int(raw.types[described.type_id]["attrs"]["size"])
    assert [m.name for m in described.members] == [("" if n == "(anon)" else n) for n, _ in items]
    assert [m.bit_offset for m in described.members] == [int(a["bits_offset"]) for _, a in items]


@pytest.mark.parametrize(("struct", "path"), [("task_struct", "pid"), ("task_struct", "tgid"),
                                              ("task_struct", "__state"), ("task_struct", "comm"),
                                              ("task_struct", "se.vruntime"), ("task_struct", "se.load.weight"),
                                              ("sk_buff", "len"), ("sk_buff", "next"), ("sk_buff", "tstamp"),
                                              ("file", "f_inode")])
def test_nested_and_anonymous_members_match_bpftools_offsets(raw: Raw, struct: str, path: str) -> None:
    # sk_buff's next and tstamp live in anonymous unions and structs: found by their own name.
    bits, size = raw.path(struct, path)
    m = kernel().member(struct, path)
    assert (m.name, m.bit_offset, m.bitfield_size) == (path, bits, size)
    assert kernel().field_offset(struct, path) == bits // 8


def test_has_field_answers_what_a_tool_asks(raw: Raw) -> None:
    k = kernel()
    assert k.has_field("task_struct", "__state") is (raw.path("task_struct", "__state") is not None)
    assert not k.has_field("task_struct", "no_such_field")
    assert not k.has_field("no_such_struct", "pid")
    assert not k.has_field("task_struct", "pid.nested")  # pid is an int: nothing under it
    with pytest.raises(ValueError, match=r"field must be a member name or a dotted path, got 'se\.\.x'"):
        k.has_field("task_struct", "se..x")


def test_missing_names_are_named_in_the_error() -> None:
    k = kernel()
    with pytest.raises(KeyError, match="struct task_struct has no member 'no_such_field'"):
        k.field_offset("task_struct", "no_such_field")
    with pytest.raises(KeyError, match="no struct or union named 'no_such_struct'"):
        k.field_offset("no_such_struct", "pid")
    with pytest.raises(KeyError, match=r"task_struct.se has no member 'nope'"):
        k.field_offset("task_struct", "se.nope")
    with pytest.raises(ValueError, match=r"task_struct.pid is not a struct or union \(it is pid_t\)"):
        k.field_offset("task_struct", "pid.x")
    with pytest.raises(KeyError, match="no type named 'no_such_type_at_all'"):
        k.type("no_such_type_at_all")
    with pytest.raises(KeyError, match="no enum named 'task_struct'"):
        k.enum_value("task_struct", "X")
    with pytest.raises(KeyError, match="enum bpf_prog_type has no enumerator 'BPF_PROG_TYPE_NOPE'"):
        k.enum_value("bpf_prog_type", "BPF_PROG_TYPE_NOPE")
    with pytest.raises(KeyError, match="no enumerator named 'NO_SUCH_ENUMERATOR'"):
        k.enumerator("NO_SUCH_ENUMERATOR")
    with pytest.raises(ValueError, match="kind must be one of"):
        k.type("task_struct", "class")
    with pytest.raises(TypeError, match="struct must be a str"):
        k.field_offset(None, "pid")  # type: ignore[arg-type]


def test_enum_values_match_bpftool(raw: Raw) -> None:
    k = kernel()
    expected = {n: int(a["val"]) for n, a in raw.types[raw.ids[("ENUM", "bpf_prog_type")]]["items"]}
    assert k.enum_values("bpf_prog_type") == expected
    assert k.type("bpf_prog_type").values == expected and k.type("bpf_prog_type").kind == "enum"
    assert k.enum_value("bpf_prog_type", "BPF_PROG_TYPE_TRACING") == expected["BPF_PROG_TYPE_TRACING"]
    assert k.enumerator("BPF_PROG_TYPE_TRACING") == expected["BPF_PROG_TYPE_TRACING"]
    # ... and the value libbpf was compiled with (the uapi header): one numbering.
    assert expected["BPF_PROG_TYPE_TRACING"] == lib.BPF_PROG_TYPE_TRACING


def test_types_of_each_kind_describe_themselves(raw: Raw) -> None:
    k = kernel()
    pid_t = k.type("pid_t")
    assert (pid_t.kind, pid_t.size, pid_t.target) == ("typedef", 4, "__kernel_pid_t")
    assert pid_t.type_id == raw.ids[("TYPEDEF", "pid_t")]
    func = k.type("vfs_read")
    assert (func.kind, func.size, func.type_id) == ("func", None, raw.ids[("FUNC", "vfs_read")])
    union = k.type("bpf_attr", "union")
    assert union.kind == "union" and union.size == int(raw.types[union.type_id]["attrs"]["size"])
    assert k.type("int").kind == "int" and k.type("int").size == 4
    assert isinstance(k.type("list_head"), BTFType)
    comm = k.member("task_struct", "comm")
    assert comm.type == "char[16]"
    assert k.has_type("task_struct", "struct") and not k.has_type("task_struct", "union")
    assert k.has_type("bpf_prog_type") and not k.has_type("no_such_type_at_all")


def test_kernel_is_loaded_once_and_shared_across_threads() -> None:
    first = kernel()
    assert kernel() is first
    first.close()
    first.close()  # idempotent
    with pytest.raises(ClosedError):
        first.type("task_struct")
    got: list[KernelBTF] = []
    threads = [threading.Thread(target=lambda: got.append(kernel())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and all(g is got[0] for g in got) and got[0] is not first and not got[0].closed
    assert got[0].has_field("task_struct", "pid")


def test_an_owned_instance_closes_with_its_context() -> None:
    with KernelBTF.load() as k:
        assert k.name == "vmlinux" and k.field_offset("task_struct", "pid") == kernel().field_offset("task_struct",
                                                                                                      "pid")
    assert k.closed
    with pytest.raises(ClosedError):
        k.has_field("task_struct", "pid")
    with pytest.raises(BPFError):
        KernelBTF.load("/nonexistent/vmlinux")
    with pytest.raises(TypeError, match="KernelBTF is made with"):
        KernelBTF()


def test_a_module_without_btf_is_a_clear_error() -> None:
    if (VMLINUX.parent / "nf_tables").exists():
        pytest.skip("nf_tables is loaded with BTF here")
    with pytest.raises(FileNotFoundError, match="kernel module 'nf_tables' has no BTF here"):
        kernel(module="nf_tables")
    with pytest.raises(FileNotFoundError, match="nf_tables"):
        kernel().module("nf_tables")
    for bad in ("../x", "", "a/b", "vmlinux"):
        with pytest.raises(ValueError, match="module must be a kernel module's name"):
            kernel().module(bad)


def write_split_module(base_path: Path, out: Path) -> None:
    """A module's BTF as the kernel publishes it: split on vmlinux, with one struct of its own."""
    base = lib.btf__parse(str(base_path).encode(), ffi.NULL)
    split = lib.btf__new_empty_split(base)
    try:
        u32 = lib.btf__find_by_name_kind(base, b"u32", lib.BTF_KIND_TYPEDEF)
        u64 = lib.btf__find_by_name_kind(base, b"u64", lib.BTF_KIND_TYPEDEF)
        assert u32 > 0 and u64 > 0 and lib.btf__add_struct(split, b"plb_mod_state", 16) > 0
        assert lib.btf__add_field(split, b"flags", u32, 0, 0) == 0
        assert lib.btf__add_field(split, b"bytes", u64, 64, 0) == 0
        size = ffi.new("__u32 *")
        data = lib.btf__raw_data(split, size)
        out.write_bytes(bytes(ffi.buffer(data, size[0])))
    finally:
        lib.btf__free(split)
        lib.btf__free(base)


def test_a_module_btf_is_split_on_vmlinux(tmp_path: Path) -> None:
    (tmp_path / "vmlinux").symlink_to(VMLINUX)
    write_split_module(VMLINUX, tmp_path / "plb_mod")
    with KernelBTF.load(tmp_path / "vmlinux") as k:
        assert k.module_names() == ["plb_mod"]
        mod = k.module("plb_mod")
        assert k.module("plb_mod") is mod and mod.name == "plb_mod"
        assert mod.field_offset("plb_mod_state", "bytes") == 8 and mod.type("plb_mod_state").size == 16
        assert mod.type("plb_mod_state").type_id > k.type("task_struct").type_id  # after vmlinux's ids
        assert mod.has_field("task_struct", "pid")  # vmlinux's types, through the split
        assert not k.has_type("plb_mod_state")
        with pytest.raises(ValueError, match="is a module's BTF"):
            mod.module("other")
    assert mod.closed  # closed with the vmlinux BTF it is split on
