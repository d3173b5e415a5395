"""BPF instruction encoding (pylibbpf.asm) and event-field stores. No kernel needed."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pylibbpf import asm
from pylibbpf.asm import Insn
from pylibbpf.events import TYPES, EventDef, UnknownFieldError, defevent, make_event_def

ConnectionEvent = defevent(
    "ConnectionEvent",
    ("timestamp", "u64"),
    ("pid", "u32"),
    ("saddr", "u32"),
    ("daddr", "u32"),
    ("sport", "u16"),
    ("dport", "u16"),
    ("protocol", "u8"),
    ("direction", "u8"),
    ("padding", "u8", 2),
    ("comm", "char", 16),
)


def hexb(insns: Any) -> str:
    return asm.assemble(insns if isinstance(insns, (list, tuple)) else [insns]).hex(" ")


# -- the seed's examples ----------------------------------------------------------


def test_store_event_field_seed_bytes() -> None:
    insn = asm.store_event_field("r6", ConnectionEvent, "pid", "r7")
    assert insn == Insn(code=0x63, dst=6, src=7, off=8, imm=0)  # BPF_STX|BPF_MEM|BPF_W
    assert bytes(insn) == bytes.fromhex("63 76 08 00 00 00 00 00")
    assert repr(insn) == "Insn(stx_w [r6+8], r7)"


def test_store_event_imm_seed() -> None:
    insn = asm.store_event_imm("r6", ConnectionEvent, "protocol", 6)
    assert insn == Insn(code=0x72, dst=6, off=24, imm=6)  # BPF_ST|BPF_MEM|BPF_B
    assert str(insn) == "st_b [r6+24], 6"


def test_store_event_fields_seed() -> None:
    insns = asm.store_event_fields("r6", ConnectionEvent, {"pid": {"reg": "r7"}, "protocol": {"imm": 6}})
    assert insns == [
        asm.store_event_field("r6", ConnectionEvent, "pid", "r7"),
        asm.store_event_imm("r6", ConnectionEvent, "protocol", 6),
    ]


def test_zero_event_field_seed() -> None:
    assert asm.zero_event_field("r6", ConnectionEvent, "padding") == asm.st("h", "r6", 26, 0)
    assert asm.zero_event_field("r6", ConnectionEvent, "pid") == asm.st("w", "r6", 8, 0)
    # comm is char[16] at offset 28 (packed): aligned stores w, dw, w.
    assert asm.zero_event_field("r6", ConnectionEvent, "comm") == [
        asm.st("w", "r6", 28, 0),
        asm.st("dw", "r6", 32, 0),
        asm.st("w", "r6", 40, 0),
    ]
    # 16 bytes at an 8-aligned offset take two dw stores; 3 bytes take h + b.
    e = defevent("E", ("a", "u64"), ("name", "char", 16), ("tail", "u8", 3))
    assert asm.zero_event_field("r10", e, "name") == [
        asm.st("dw", "r10", 8, 0),
        asm.st("dw", "r10", 16, 0),
    ]
    assert asm.zero_event_field("r10", e, "tail") == [
        asm.st("h", "r10", 24, 0),
        asm.st("b", "r10", 26, 0),
    ]


# -- exact encodings ------------------------------------------------------------

ENCODINGS = [
    (asm.mov("r0", 0), "b7 00 00 00 00 00 00 00"),
    (asm.mov("r1", "r2"), "bf 21 00 00 00 00 00 00"),
    (asm.mov("r1", -1, alu32=True), "b4 01 00 00 ff ff ff ff"),
    (asm.mov("r1", 0xFFFFFFFF, alu32=True), "b4 01 00 00 ff ff ff ff"),
    (asm.mov("r1", "r2", alu32=True), "bc 21 00 00 00 00 00 00"),
    (asm.add("r1", 5), "07 01 00 00 05 00 00 00"),
    (asm.add("r1", "r2", alu32=True), "0c 21 00 00 00 00 00 00"),
    (asm.sub("r1", "r2"), "1f 21 00 00 00 00 00 00"),
    (asm.mul("r3", 7), "27 03 00 00 07 00 00 00"),
    (asm.div("r3", "r4"), "3f 43 00 00 00 00 00 00"),
    (asm.or_("r0", 0x10), "47 00 00 00 10 00 00 00"),
    (asm.and_("r0", "r9"), "5f 90 00 00 00 00 00 00"),
    (asm.lsh("r2", 3), "67 02 00 00 03 00 00 00"),
    (asm.rsh("r2", 63), "77 02 00 00 3f 00 00 00"),
    (asm.neg("r5"), "87 05 00 00 00 00 00 00"),
    (asm.neg("r5", alu32=True), "84 05 00 00 00 00 00 00"),
    (asm.mod("r1", "r2"), "9f 21 00 00 00 00 00 00"),
    (asm.xor("r1", -2), "a7 01 00 00 fe ff ff ff"),
    (asm.arsh("r1", 1), "c7 01 00 00 01 00 00 00"),
    (asm.ldx("dw", "r0", "r1", 8), "79 10 08 00 00 00 00 00"),
    (asm.ldx("w", "r0", "r10", -4), "61 a0 fc ff 00 00 00 00"),
    (asm.ldx("h", "r0", "r1"), "69 10 00 00 00 00 00 00"),
    (asm.ldx(1, "r0", "r1"), "71 10 00 00 00 00 00 00"),
    (asm.stx("dw", "r10", "r1", -8), "7b 1a f8 ff 00 00 00 00"),
    (asm.stx("w", "r6", "r7", 8), "63 76 08 00 00 00 00 00"),
    (asm.stx("h", "r6", "r7", 2), "6b 76 02 00 00 00 00 00"),
    (asm.stx("b", "r6", "r7", 1), "73 76 01 00 00 00 00 00"),
    (asm.st("dw", "r10", -8, 1), "7a 0a f8 ff 01 00 00 00"),
    (asm.st("w", "r10", -4, -1), "62 0a fc ff ff ff ff ff"),
    (asm.st("h", "r1", 0, 2), "6a 01 00 00 02 00 00 00"),
    (asm.st(1, "r1", 0, 2), "72 01 00 00 02 00 00 00"),
    (asm.ja(1), "05 00 01 00 00 00 00 00"),
    (asm.ja(-1), "05 00 ff ff 00 00 00 00"),
    (asm.jeq("r1", 0, 2), "15 01 02 00 00 00 00 00"),
    (asm.jeq("r1", "r2", 2), "1d 21 02 00 00 00 00 00"),
    (asm.jgt("r1", 1, 2), "25 01 02 00 01 00 00 00"),
    (asm.jge("r1", "r2", 2), "3d 21 02 00 00 00 00 00"),
    (asm.jset("r1", 4, 2), "45 01 02 00 04 00 00 00"),
    (asm.jne("r1", 0, 2), "55 01 02 00 00 00 00 00"),
    (asm.jsgt("r1", -1, 2), "65 01 02 00 ff ff ff ff"),
    (asm.jsge("r1", "r2", 2), "7d 21 02 00 00 00 00 00"),
    (asm.jlt("r1", 1, 2), "a5 01 02 00 01 00 00 00"),
    (asm.jle("r1", "r2", 2), "bd 21 02 00 00 00 00 00"),
    (asm.jslt("r1", 0, 2), "c5 01 02 00 00 00 00 00"),
    (asm.jsle("r1", "r2", 2), "dd 21 02 00 00 00 00 00"),
    (asm.jeq("r1", 7, 3, jmp32=True), "16 01 03 00 07 00 00 00"),
    (asm.call(14), "85 00 00 00 0e 00 00 00"),
    (asm.exit_(), "95 00 00 00 00 00 00 00"),
    (asm.ld_imm64("r1", 0x1122334455667788), "18 01 00 00 88 77 66 55 00 00 00 00 44 33 22 11"),
    (asm.ld_imm64("r2", -1), "18 02 00 00 ff ff ff ff 00 00 00 00 ff ff ff ff"),
    (asm.ld_imm64("r2", (1 << 64) - 1), "18 02 00 00 ff ff ff ff 00 00 00 00 ff ff ff ff"),
    (asm.ld_map_fd("r1", 5), "18 11 00 00 05 00 00 00 00 00 00 00 00 00 00 00"),
]


@pytest.mark.parametrize(("insn", "expected"), ENCODINGS, ids=[e for _, e in ENCODINGS])
def test_encoding(insn: Any, expected: str) -> None:
    assert hexb(insn) == expected


def test_constants_match_kernel_headers(tmp_path: Path) -> None:
    """Every mirrored BPF_* constant equals the one in the kernel's uapi headers."""
    cc = shutil.which("cc")
    assert cc is not None, "a C compiler (cc) is needed for this test"
    names = sorted(n for n in dir(asm) if n.startswith("BPF_"))
    src = tmp_path / "consts.c"
    src.write_text(
        "#include <stdio.h>\n#include <linux/bpf.h>\nint main(void) {\n"
        + "".join(f'printf("{n} %d\\n", (int){n});\n' for n in names)
        + "return 0; }\n"
    )
    exe = tmp_path / "consts"
    subprocess.run([cc, "-o", str(exe), str(src)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    kernel = {line.split()[0]: int(line.split()[1]) for line in out.splitlines()}
    assert kernel == {n: getattr(asm, n) for n in names}


def test_ld_imm64_is_a_pair() -> None:
    first, second = asm.ld_imm64("r3", 1 << 40)
    assert first.code == 0x18
    assert (first.dst, first.imm) == (3, 0)
    assert (second.code, second.dst, second.src, second.off, second.imm) == (0, 0, 0, 0, 1 << 8)
    assert str(first) == "ld_imm64 r3, lo 0x0"
    assert str(second) == "ld_imm64_hi 0x100"
    assert str(asm.ld_map_fd("r1", 7)[0]) == "ld_map_fd r1, 7"


# -- Insn ---------------------------------------------------------------------------


def test_insn_value_semantics() -> None:
    a = asm.mov("r0", 1)
    assert a == Insn(0xB7, 0, 0, 0, 1)
    assert hash(a) == hash(Insn(0xB7, 0, 0, 0, 1))
    assert a != asm.mov("r0", 2)
    assert len(bytes(a)) == 8
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.imm = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("insn", "text"),
    [
        (asm.mov("r0", 1), "mov r0, 1"),
        (asm.add("r1", "r2", alu32=True), "add32 r1, r2"),
        (asm.neg("r5"), "neg r5"),
        (asm.ldx("dw", "r0", "r10", -8), "ldx_dw r0, [r10-8]"),
        (asm.st("w", "r10", -4, 0), "st_w [r10-4], 0"),
        (asm.jeq("r1", 0, 2), "jeq r1, 0, +2"),
        (asm.jsgt("r1", "r2", -3, jmp32=True), "jsgt32 r1, r2, -3"),
        (asm.ja(4), "ja +4"),
        (asm.call(1), "call 1"),
        (asm.exit_(), "exit"),
        (Insn(0xFF, 1, 2, 3, 4), "code=0xff dst=r1 src=r2 off=3 imm=4"),
    ],
)
def test_insn_text(insn: Insn, text: str) -> None:
    assert str(insn) == text
    assert repr(insn) == f"Insn({text})"


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"code": 256}, r"Insn code must be <= 255, got 256"),
        ({"code": 0, "dst": 16}, r"Insn dst must be <= 15, got 16"),
        ({"code": 0, "src": -1}, r"Insn src must be >= 0, got -1"),
        ({"code": 0, "off": 1 << 15}, r"Insn off must be <= 32767, got 32768"),
        ({"code": 0, "imm": 1 << 31}, r"Insn imm must be <= 2147483647, got 2147483648"),
    ],
)
def test_insn_rejects_out_of_range_fields(kwargs: dict[str, int], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        Insn(**kwargs)


def test_insn_rejects_non_int_fields() -> None:
    with pytest.raises(TypeError, match="Insn imm must be an int"):
        Insn(0, imm=1.0)  # type: ignore[arg-type]


_insns = st.builds(
    Insn,
    st.integers(0, 255),
    st.integers(0, 15),
    st.integers(0, 15),
    st.integers(asm.S16_MIN, asm.S16_MAX),
    st.integers(asm.S32_MIN, asm.S32_MAX),
)


@settings(deadline=None)
@given(st.lists(_insns, max_size=20))
def test_disassemble_inverts_encoding(insns: list[Insn]) -> None:
    data = b"".join(bytes(i) for i in insns)
    assert asm.disassemble(data) == insns
    for insn in insns:
        assert Insn.from_bytes(bytes(insn)) == insn
        assert str(insn)  # every instruction has some text


def test_disassemble_errors() -> None:
    with pytest.raises(ValueError, match="multiple of 8 bytes, got 9"):
        asm.disassemble(b"\0" * 9)
    with pytest.raises(ValueError, match="8 bytes, got 7"):
        Insn.from_bytes(b"\0" * 7)


# -- operand errors ------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["r11", "R1", "x", "r01", "r-1", "", 3, None, "fp"])
def test_bad_register_names(bad: Any) -> None:
    with pytest.raises(ValueError, match=rf"bad register {bad!r}"):
        asm.mov(bad, 0)
    with pytest.raises(ValueError, match=rf"bad register {bad!r}"):
        asm.stx("w", "r1", bad, 0)
    with pytest.raises(ValueError, match=rf"bad register {bad!r}"):
        asm.store_event_field("r6", ConnectionEvent, "pid", bad)


def test_immediate_ranges() -> None:
    assert asm.mov("r0", asm.S32_MIN).imm == asm.S32_MIN
    assert asm.mov("r0", asm.S32_MAX).imm == asm.S32_MAX
    with pytest.raises(ValueError, match=r"immediate must be [<>]= -?\d+, got 2147483648"):
        asm.mov("r0", 1 << 31)
    with pytest.raises(ValueError, match=r"immediate must be [<>]= -?\d+, got -2147483649"):
        asm.add("r0", -(1 << 31) - 1)
    with pytest.raises(ValueError, match=r"immediate must be [<>]= -?\d+, got 4294967296"):
        asm.mov("r0", 1 << 32, alu32=True)
    with pytest.raises(ValueError, match=r"immediate must be [<>]= -?\d+, got 4294967296"):
        asm.jeq("r0", 1 << 32, 1, jmp32=True)
    with pytest.raises(ValueError, match=r"immediate must be [<>]= -?\d+, got 2147483648"):
        asm.jeq("r0", 1 << 31, 1)
    with pytest.raises(ValueError, match=r"immediate must be [<>]= -?\d+, got 2147483648"):
        asm.st("dw", "r10", -8, 1 << 31)
    with pytest.raises(ValueError, match=r"immediate must be [<>]= -?\d+, got 18446744073709551616"):
        asm.ld_imm64("r1", 1 << 64)
    with pytest.raises(TypeError, match=r"immediate must be an int, got 1\.5"):
        asm.mov("r0", 1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"immediate must be an int, got True"):
        asm.mov("r0", True)


def test_offset_and_other_operand_ranges() -> None:
    with pytest.raises(ValueError, match=r"offset must be [<>]= -?\d+, got 32768"):
        asm.ldx("w", "r0", "r1", 1 << 15)
    with pytest.raises(ValueError, match=r"offset must be [<>]= -?\d+, got -32769"):
        asm.ja(-(1 << 15) - 1)
    with pytest.raises(ValueError, match=r"shift by immediate 64 out of range 0\.\.63"):
        asm.lsh("r1", 64)
    with pytest.raises(ValueError, match=r"shift by immediate 32 out of range 0\.\.31"):
        asm.arsh("r1", 32, alu32=True)
    with pytest.raises(ValueError, match="div by immediate 0"):
        asm.div("r1", 0)
    with pytest.raises(ValueError, match="mod by immediate 0"):
        asm.mod("r1", 0)
    with pytest.raises(ValueError, match="unknown ALU op 'pow'"):
        asm.alu("pow", "r1", 2)
    with pytest.raises(ValueError, match="unknown jump op 'jz'"):
        asm.jmp("jz", "r1", 0, 1)
    with pytest.raises(ValueError, match="bad size 'q'"):
        asm.ldx("q", "r0", "r1")
    with pytest.raises(ValueError, match="bad size 3"):
        asm.st(3, "r0", 0, 0)
    with pytest.raises(ValueError, match=r"map fd must be [<>]= -?\d+, got -1"):
        asm.ld_map_fd("r1", -1)
    with pytest.raises(ValueError, match=r"helper id must be [<>]= -?\d+, got -1"):
        asm.call(-1)


# -- event-field stores ----------------------------------------------------------


def test_store_event_field_sizes() -> None:
    e = defevent("E", ("a", "u8"), ("b", "i16"), ("c", "u32"), ("d", "ptr"), ("ch", "char"))
    assert asm.store_event_field("r1", e, "a", "r2") == asm.stx("b", "r1", "r2", 0)
    assert asm.store_event_field("r1", e, "b", "r2") == asm.stx("h", "r1", "r2", 1)
    assert asm.store_event_field("r1", e, "c", "r2") == asm.stx("w", "r1", "r2", 3)
    assert asm.store_event_field("r1", e, "d", "r2") == asm.stx("dw", "r1", "r2", 7)
    assert asm.store_event_field("r1", e, "ch", "r2") == asm.stx("b", "r1", "r2", 15)


def test_store_event_field_errors() -> None:
    with pytest.raises(ValueError, match=r"field 'comm' of event 'ConnectionEvent' is char\[16\]"):
        asm.store_event_field("r6", ConnectionEvent, "comm", "r7")
    with pytest.raises(ValueError, match=r"field 'padding' .* is u8\[2\]"):
        asm.store_event_field("r6", ConnectionEvent, "padding", "r7")
    with pytest.raises(UnknownFieldError, match=r"has no field 'uid'"):
        asm.store_event_field("r6", ConnectionEvent, "uid", "r7")
    with pytest.raises(ValueError, match=r"bad register 'r12'"):
        asm.store_event_field("r12", ConnectionEvent, "pid", "r7")
    far = EventDef.from_layout("far", [("x", "u32", 1, 40000)], 40004)
    with pytest.raises(ValueError, match=r"field 'x' of event 'far' at offset 40000 is beyond"):
        asm.store_event_field("r1", far, "x", "r2")


IMM_OK = [
    ("u8", 255, 255),
    ("u8", 0, 0),
    ("i8", -128, -128),
    ("i8", 127, 127),
    ("u16", 65535, 65535),
    ("i16", -1, -1),
    ("u32", 0xFFFFFFFF, -1),  # a w store keeps the low 32 bits
    ("u32", 1 << 31, -(1 << 31)),
    ("i32", asm.S32_MIN, asm.S32_MIN),
    ("u64", asm.S32_MAX, asm.S32_MAX),
    ("ptr", 0, 0),
    ("i64", -5, -5),
    ("i64", asm.S32_MIN, asm.S32_MIN),
]


@pytest.mark.parametrize(("type_name", "value", "imm"), IMM_OK)
def test_store_event_imm_fits(type_name: str, value: int, imm: int) -> None:
    e = defevent("E", ("pad", "u8"), ("x", type_name))
    insn = asm.store_event_imm("r6", e, "x", value)
    size_bits = {1: asm.BPF_B, 2: asm.BPF_H, 4: asm.BPF_W, 8: asm.BPF_DW}[e.field_size("x")]
    assert insn == Insn(asm.BPF_ST | asm.BPF_MEM | size_bits, 6, 0, 1, imm)


IMM_BAD = [
    ("u8", 256, r"allowed 0\.\.255$"),
    ("u8", -1, r"allowed 0\.\.255$"),
    ("i8", 128, r"allowed -128\.\.127$"),
    ("u16", 1 << 16, r"allowed 0\.\.65535$"),
    ("u32", 1 << 32, r"allowed 0\.\.4294967295$"),
    ("i32", 1 << 31, r"allowed -2147483648\.\.2147483647$"),
    ("u64", 1 << 31, r"allowed 0\.\.2147483647 \(a 64-bit store sign-extends"),
    ("u64", -1, r"allowed 0\.\.2147483647"),
    ("ptr", 1 << 40, r"allowed 0\.\.2147483647"),
    ("i64", -(1 << 31) - 1, r"allowed -2147483648\.\.2147483647"),
]


@pytest.mark.parametrize(("type_name", "value", "pattern"), IMM_BAD)
def test_store_event_imm_out_of_range(type_name: str, value: int, pattern: str) -> None:
    e = defevent("E", ("x", type_name))
    with pytest.raises(ValueError, match=rf"immediate {value} does not fit field 'x' .*{pattern}"):
        asm.store_event_imm("r6", e, "x", value)


def test_store_event_imm_errors() -> None:
    with pytest.raises(TypeError, match=r"immediate for field 'pid' must be an int"):
        asm.store_event_imm("r6", ConnectionEvent, "pid", "7")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"field 'comm' .* is char\[16\]"):
        asm.store_event_imm("r6", ConnectionEvent, "comm", 0)
    with pytest.raises(ValueError, match=r"immediate 256 does not fit field 'protocol'"):
        asm.store_event_fields("r6", ConnectionEvent, {"protocol": {"imm": 256}})


@pytest.mark.parametrize("how", [{"reg": "r7", "imm": 1}, {}, {"val": 1}, "r7", {"register": "r7"}])
def test_store_event_fields_bad_spec(how: Any) -> None:
    with pytest.raises(ValueError, match=r"field 'pid': expected \{'reg': register\}"):
        asm.store_event_fields("r6", ConnectionEvent, {"pid": how})


@st.composite
def _defs(draw: st.DrawFn) -> EventDef:
    shapes = draw(st.lists(st.tuples(st.sampled_from(TYPES), st.integers(1, 24)), min_size=1, max_size=6))
    layout = draw(st.sampled_from(["packed", "c"]))
    return make_event_def("Z", [(f"f{i}", t, c) for i, (t, c) in enumerate(shapes)], layout)


@settings(max_examples=200, deadline=None)
@given(_defs())
def test_zero_event_field_covers_exactly_the_field(e: EventDef) -> None:
    for f in e.field_infos:
        got = asm.zero_event_field("r10", e, f.name)
        stores = got if isinstance(got, list) else [got]
        covered: list[int] = []
        for s in stores:
            assert s.code & 0x07 == asm.BPF_ST and s.code & 0xE0 == asm.BPF_MEM
            assert (s.dst, s.src, s.imm) == (10, 0, 0)
            width = {asm.BPF_B: 1, asm.BPF_H: 2, asm.BPF_W: 4, asm.BPF_DW: 8}[s.code & 0x18]
            if isinstance(got, list):
                assert s.off % width == 0  # split stores are aligned
            covered += range(s.off, s.off + width)
        assert covered == list(range(f.offset, f.offset + f.size))
        assert isinstance(got, Insn) == (f.size in (1, 2, 4, 8))


# -- programs ---------------------------------------------------------------------


def test_assemble_flattens_pairs_and_lists() -> None:
    data = asm.assemble([asm.ld_map_fd("r1", 3), [asm.mov("r0", 0), [asm.exit_()]]])
    assert len(data) == 4 * 8
    assert asm.disassemble(data) == [*asm.ld_map_fd("r1", 3), asm.mov("r0", 0), asm.exit_()]


def test_assemble_errors() -> None:
    with pytest.raises(TypeError, match=r"program item \[1\]\[0\] is not an Insn: 'exit'"):
        program: Any = [asm.mov("r0", 0), ["exit"]]
        asm.assemble(program)
    first, _ = asm.ld_imm64("r1", 5)
    with pytest.raises(ValueError, match=r"instruction #0 \(ld_imm64 r1, lo 0x5\) lacks its second"):
        asm.assemble([first, asm.exit_()])
    with pytest.raises(ValueError, match="lacks its second ld_imm64 slot"):
        asm.assemble([asm.exit_(), first])


def test_load_program_checks_arguments_before_loading() -> None:
    with pytest.raises(ValueError, match="cannot load an empty program"):
        asm.load_program([], "socket_filter")
    with pytest.raises(ValueError, match=r"bad program type name 'socket filter'"):
        asm.load_program([asm.mov("r0", 0), asm.exit_()], "socket filter")
    with pytest.raises(ValueError, match=r"program type must be [<>]= -?\d+, got -1"):
        asm.load_program([asm.mov("r0", 0), asm.exit_()], -1)
