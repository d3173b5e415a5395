"""BPF instructions: an :class:`Insn` value type, encoders, and event-field stores.

Each encoder returns an :class:`Insn`, the 8-byte ``struct bpf_insn`` the kernel
reads, except :func:`ld_imm64` and :func:`ld_map_fd`, which occupy two 8-byte
slots and return a pair ``(first, second)`` of Insns: the first carries the
opcode, destination and low 32 bits, the second (opcode 0) the high 32 bits.
:func:`assemble` flattens such pairs (and any nested lists) into one program.

Registers are named ``"r0"`` .. ``"r10"`` (``r10`` is the read-only frame
pointer).  Where an operand may be a register or an immediate, a ``str`` is a
register and an ``int`` an immediate.  Operand order follows the kernel's
``BPF_*`` instruction macros (``include/linux/filter.h``): ``ldx(size, dst, src,
off)``, ``stx(size, dst, src, off)``, ``st(size, dst, off, imm)``,
``jeq(dst, src_or_imm, off)``.  Jump offsets count instructions (8-byte slots)
after the jump.

Immediates are signed 32-bit; the 32-bit ALU and jump forms (``alu32=True``,
``jmp32=True``) also take unsigned 32-bit values, encoded as their two's
complement.  Offsets are signed 16-bit.  Anything out of range raises
``ValueError`` naming the value.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

from . import _check
from .events import EventDef, EventField

if TYPE_CHECKING:
    from .program import Program

#: What :func:`assemble` takes: Insns, and lists or tuples of them, nested.
InsnTree = Union["Insn", Sequence["InsnTree"]]

__all__ = [
    "Insn",
    "InsnTree",
    "add",
    "alu",
    "and_",
    "arsh",
    "assemble",
    "call",
    "disassemble",
    "div",
    "exit_",
    "ja",
    "jeq",
    "jge",
    "jgt",
    "jle",
    "jlt",
    "jmp",
    "jne",
    "jset",
    "jsge",
    "jsgt",
    "jsle",
    "jslt",
    "ld_imm64",
    "ld_map_fd",
    "ldx",
    "load_program",
    "lsh",
    "mod",
    "mov",
    "mul",
    "neg",
    "or_",
    "rsh",
    "st",
    "store_event_field",
    "store_event_fields",
    "store_event_imm",
    "stx",
    "sub",
    "xor",
    "zero_event_field",
]

# Instruction classes, include/uapi/linux/bpf_common.h (BPF_CLASS) and
# include/uapi/linux/bpf.h (BPF_JMP32, BPF_ALU64).
BPF_LD = 0x00
BPF_LDX = 0x01
BPF_ST = 0x02
BPF_STX = 0x03
BPF_ALU = 0x04
BPF_JMP = 0x05
BPF_JMP32 = 0x06
BPF_ALU64 = 0x07

# Load/store sizes, bpf_common.h (BPF_SIZE) and bpf.h (BPF_DW).
BPF_W = 0x00
BPF_H = 0x08
BPF_B = 0x10
BPF_DW = 0x18

# Load/store modes, bpf_common.h (BPF_MODE).
BPF_IMM = 0x00
BPF_MEM = 0x60

# ALU operations, bpf_common.h (BPF_OP) and bpf.h (BPF_MOV, BPF_ARSH, BPF_END).
BPF_ADD = 0x00
BPF_SUB = 0x10
BPF_MUL = 0x20
BPF_DIV = 0x30
BPF_OR = 0x40
BPF_AND = 0x50
BPF_LSH = 0x60
BPF_RSH = 0x70
BPF_NEG = 0x80
BPF_MOD = 0x90
BPF_XOR = 0xA0
BPF_MOV = 0xB0
BPF_ARSH = 0xC0
BPF_END = 0xD0

# Jump operations, bpf_common.h (BPF_JA..BPF_JSET) and bpf.h (the rest).
BPF_JA = 0x00
BPF_JEQ = 0x10
BPF_JGT = 0x20
BPF_JGE = 0x30
BPF_JSET = 0x40
BPF_JNE = 0x50
BPF_JSGT = 0x60
BPF_JSGE = 0x70
BPF_CALL = 0x80
BPF_EXIT = 0x90
BPF_JLT = 0xA0
BPF_JLE = 0xB0
BPF_JSLT = 0xC0
BPF_JSLE = 0xD0

# Operand source, bpf_common.h (BPF_SRC): immediate or register.
BPF_K = 0x00
BPF_X = 0x08

# ld_imm64 src_reg marking the immediate as a map fd, bpf.h.
BPF_PSEUDO_MAP_FD = 1

MAX_REG = 10  # r0..r10; MAX_BPF_REG - 1 in the kernel

_ALU_OPS: dict[str, int] = {
    "add": BPF_ADD,
    "sub": BPF_SUB,
    "mul": BPF_MUL,
    "div": BPF_DIV,
    "or": BPF_OR,
    "and": BPF_AND,
    "lsh": BPF_LSH,
    "rsh": BPF_RSH,
    "mod": BPF_MOD,
    "xor": BPF_XOR,
    "mov": BPF_MOV,
    "arsh": BPF_ARSH,
}
_JMP_OPS: dict[str, int] = {
    "jeq": BPF_JEQ,
    "jgt": BPF_JGT,
    "jge": BPF_JGE,
    "jset": BPF_JSET,
    "jne": BPF_JNE,
    "jsgt": BPF_JSGT,
    "jsge": BPF_JSGE,
    "jlt": BPF_JLT,
    "jle": BPF_JLE,
    "jslt": BPF_JSLT,
    "jsle": BPF_JSLE,
}
_SIZES: dict[str | int, int] = {
    "b": BPF_B,
    "h": BPF_H,
    "w": BPF_W,
    "dw": BPF_DW,
    1: BPF_B,
    2: BPF_H,
    4: BPF_W,
    8: BPF_DW,
}
_SIZE_NAMES = {BPF_B: "b", BPF_H: "h", BPF_W: "w", BPF_DW: "dw"}
_ALU_NAMES = {v: k for k, v in _ALU_OPS.items()} | {BPF_NEG: "neg", BPF_END: "end"}
_JMP_NAMES = {v: k for k, v in _JMP_OPS.items()}

S16_MIN, S16_MAX = -(1 << 15), (1 << 15) - 1
S32_MIN, S32_MAX = -(1 << 31), (1 << 31) - 1
U32_MAX = (1 << 32) - 1

# struct bpf_insn: u8 code; u8 dst_reg:4, src_reg:4; s16 off; s32 imm.
# The register bitfields put dst in the low nibble on little-endian hosts.
_INSN = struct.Struct("<BBhi")
_REG = re.compile(r"r(10|[0-9])\Z")


@dataclass(frozen=True)
class Insn:
    """One 8-byte BPF instruction (``struct bpf_insn``), immutable.

    ``bytes(insn)`` is its encoding as the kernel reads it: u8 ``code``, u8 with
    ``dst`` in the low and ``src`` in the high nibble, little-endian s16 ``off``
    and s32 ``imm``.  ``str(insn)`` is a one-line disassembly.  Raises
    ``ValueError`` if a field does not fit its width, ``TypeError`` if it is not
    an int.
    """

    code: int
    dst: int = 0
    src: int = 0
    off: int = 0
    imm: int = 0

    def __post_init__(self) -> None:
        _check.integer(self.code, "Insn code", lo=0, hi=0xFF)
        _check.integer(self.dst, "Insn dst", lo=0, hi=0xF)
        _check.integer(self.src, "Insn src", lo=0, hi=0xF)
        _check.integer(self.off, "Insn off", lo=S16_MIN, hi=S16_MAX)
        _check.integer(self.imm, "Insn imm", lo=S32_MIN, hi=S32_MAX)

    def __bytes__(self) -> bytes:
        return _INSN.pack(self.code, (self.src << 4) | self.dst, self.off, self.imm)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> Insn:
        """Decode one instruction from exactly 8 bytes; raises ``ValueError`` otherwise."""
        if len(data) != _INSN.size:
            raise ValueError(f"an instruction is 8 bytes, got {len(data)}")
        code, regs, off, imm = _INSN.unpack(data)
        return cls(code, regs & 0xF, regs >> 4, off, imm)

    def __str__(self) -> str:
        return _disasm(self)

    def __repr__(self) -> str:
        return f"Insn({_disasm(self)})"


def _mem(reg: int, off: int) -> str:
    return f"[r{reg}{off:+d}]"


def _disasm(i: Insn) -> str:
    cls = i.code & 0x07
    op = i.code & 0xF0
    x = i.code & BPF_X
    size = _SIZE_NAMES[i.code & 0x18]
    if cls in (BPF_ALU, BPF_ALU64) and op in _ALU_NAMES and op != BPF_END:
        name = _ALU_NAMES[op] + ("32" if cls == BPF_ALU else "")
        if op == BPF_NEG:
            return f"{name} r{i.dst}"
        return f"{name} r{i.dst}, {f'r{i.src}' if x else i.imm}"
    if cls in (BPF_JMP, BPF_JMP32):
        suffix = "32" if cls == BPF_JMP32 else ""
        if i.code == BPF_JMP | BPF_JA:
            return f"ja {i.off:+d}"
        if i.code == BPF_JMP | BPF_CALL:
            return f"call {i.imm}"
        if i.code == BPF_JMP | BPF_EXIT:
            return "exit"
        if op in _JMP_NAMES:
            operand = f"r{i.src}" if x else str(i.imm)
            return f"{_JMP_NAMES[op]}{suffix} r{i.dst}, {operand}, {i.off:+d}"
    mode = i.code & 0xE0
    if cls == BPF_LDX and mode == BPF_MEM:
        return f"ldx_{size} r{i.dst}, {_mem(i.src, i.off)}"
    if cls == BPF_ST and mode == BPF_MEM:
        return f"st_{size} {_mem(i.dst, i.off)}, {i.imm}"
    if cls == BPF_STX and mode == BPF_MEM:
        return f"stx_{size} {_mem(i.dst, i.off)}, r{i.src}"
    if i.code == BPF_LD | BPF_IMM | BPF_DW:
        if i.src == BPF_PSEUDO_MAP_FD:
            return f"ld_map_fd r{i.dst}, {i.imm}"
        return f"ld_imm64 r{i.dst}, lo {i.imm & U32_MAX:#x}"
    if i.code == 0 and i.dst == 0 and i.src == 0 and i.off == 0:
        return f"ld_imm64_hi {i.imm & U32_MAX:#x}"  # the second slot of ld_imm64
    return f"code={i.code:#04x} dst=r{i.dst} src=r{i.src} off={i.off} imm={i.imm}"


# -- operand checks ------------------------------------------------------------


def _reg(reg: object) -> int:
    if isinstance(reg, str) and _REG.match(reg):
        return int(reg[1:])
    raise ValueError(f"bad register {reg!r}: registers are 'r0'..'r10'")


def _imm(value: object, wide32: bool = False) -> int:
    # wide32: a 32-bit operation, where 0x80000000..0xffffffff mean the same
    # bits as their negative two's complement.
    hi = U32_MAX if wide32 else S32_MAX
    n = _check.integer(value, "immediate", lo=S32_MIN, hi=hi)
    return n - (1 << 32) if n > S32_MAX else n


def _off(value: object) -> int:
    return _check.integer(value, "offset", lo=S16_MIN, hi=S16_MAX)


def _size(size: object) -> int:
    if isinstance(size, (str, int)) and not isinstance(size, bool) and size in _SIZES:
        return _SIZES[size]
    raise ValueError(f"bad size {size!r}: sizes are 'b', 'h', 'w', 'dw' (or 1, 2, 4, 8)")


# -- ALU -----------------------------------------------------------------------


def alu(op: str, dst: str, src: str | int, *, alu32: bool = False) -> Insn:
    """Encode ``dst = dst <op> src`` (``mov``: ``dst = src``), a register or immediate ``src``.

    ``op`` is one of ``add sub mul div or and lsh rsh mod xor mov arsh``; 64-bit
    unless ``alu32`` (which zero-extends the result).  Raises ``ValueError`` for
    an unknown op, a bad register, an immediate out of range, a shift by an
    immediate outside ``0..63`` (``0..31`` for 32-bit) or division by immediate 0.
    """
    if op not in _ALU_OPS:
        raise ValueError(f"unknown ALU op {op!r} (known: {', '.join(_ALU_OPS)}, and neg())")
    cls = BPF_ALU if alu32 else BPF_ALU64
    code = cls | _ALU_OPS[op]
    if isinstance(src, str):
        return Insn(code | BPF_X, _reg(dst), _reg(src))
    imm = _imm(src, wide32=alu32)
    if op in ("lsh", "rsh", "arsh"):
        bits = 32 if alu32 else 64
        if not 0 <= imm < bits:
            raise ValueError(f"shift by immediate {src} out of range 0..{bits - 1}")
    if op in ("div", "mod") and imm == 0:
        raise ValueError(f"{op} by immediate 0")
    return Insn(code | BPF_K, _reg(dst), 0, 0, imm)


def mov(dst: str, src: str | int, *, alu32: bool = False) -> Insn:
    """``dst = src``; see :func:`alu` for what is raised."""
    return alu("mov", dst, src, alu32=alu32)


def add(dst: str, src: str | int, *, alu32: bool = False) -> Insn:
    """``dst += src``; see :func:`alu` for what is raised."""
    return alu("add", dst, src, alu32=alu32)


def sub(dst: str, src: str | int, *, alu32: bool = False) -> Insn:
    """``dst -= src``; see :func:`alu` for what is raised."""
    return alu("sub", dst, src, alu32=alu32)


def mul(dst: str, src: str | int, *, alu32: bool = False) -> Insn:
    """``dst *= src``; see :func:`alu` for what is raised."""
    return alu("mul", dst, src, alu32=alu32)


def div(dst: str, src: str | int, *, alu32: bool = False) -> Insn:
    """``dst /= src`` (unsigned); see :func:`alu` for what is raised."""
    return alu("div", dst, src, alu32=alu32)


def mod(dst: str, src: str | int, *, alu32: bool = False) -> Insn:
    """``dst %= src`` (unsigned); see :func:`alu` for what is raised."""
    return alu("mod", dst, src, alu32=alu32)


def or_(dst: str, src: str | int, *, alu32: bool = False) -> Insn:
    """``dst |= src``; see :func:`alu` for what is raised."""
    return alu("or", dst, src, alu32=alu32)


def and_(dst: str, src: str | int, *, alu32: bool = False) -> Insn:
    """``dst &= src``; see :func:`alu` for what is raised."""
    return alu("and", dst, src, alu32=alu32)


def xor(dst: str, src: str | int, *, alu32: bool = False) -> Insn:
    """``dst ^= src``; see :func:`alu` for what is raised."""
    return alu("xor", dst, src, alu32=alu32)


def lsh(dst: str, src: str | int, *, alu32: bool = False) -> Insn:
    """``dst <<= src``; see :func:`alu` for what is raised."""
    return alu("lsh", dst, src, alu32=alu32)


def rsh(dst: str, src: str | int, *, alu32: bool = False) -> Insn:
    """``dst >>= src`` (logical); see :func:`alu` for what is raised."""
    return alu("rsh", dst, src, alu32=alu32)


def arsh(dst: str, src: str | int, *, alu32: bool = False) -> Insn:
    """``dst >>= src`` (arithmetic, sign-filling); see :func:`alu` for what is raised."""
    return alu("arsh", dst, src, alu32=alu32)


def neg(dst: str, *, alu32: bool = False) -> Insn:
    """``dst = -dst``; raises ``ValueError`` for a bad register."""
    return Insn((BPF_ALU if alu32 else BPF_ALU64) | BPF_NEG | BPF_K, _reg(dst))


# -- memory --------------------------------------------------------------------


def ldx(size: str | int, dst: str, src: str, off: int = 0) -> Insn:
    """``dst = *(size *)(src + off)``; raises ``ValueError`` for a bad size, register or offset."""
    return Insn(BPF_LDX | _size(size) | BPF_MEM, _reg(dst), _reg(src), _off(off))


def stx(size: str | int, dst: str, src: str, off: int = 0) -> Insn:
    """``*(size *)(dst + off) = src``; raises ``ValueError`` for a bad size, register or offset."""
    return Insn(BPF_STX | _size(size) | BPF_MEM, _reg(dst), _reg(src), _off(off))


def st(size: str | int, dst: str, off: int, imm: int) -> Insn:
    """``*(size *)(dst + off) = imm``; the kernel sign-extends ``imm`` for ``dw``.

    Raises ``ValueError`` for a bad size, register, offset or an ``imm`` outside s32.
    """
    return Insn(BPF_ST | _size(size) | BPF_MEM, _reg(dst), 0, _off(off), _imm(imm))


def _imm64_pair(dst: int, src: int, value: int) -> tuple[Insn, Insn]:
    lo = value & U32_MAX
    hi = (value >> 32) & U32_MAX
    return (
        Insn(BPF_LD | BPF_DW | BPF_IMM, dst, src, 0, lo - (1 << 32) if lo > S32_MAX else lo),
        Insn(0, 0, 0, 0, hi - (1 << 32) if hi > S32_MAX else hi),
    )


def ld_imm64(dst: str, imm: int) -> tuple[Insn, Insn]:
    """``dst = imm`` for a 64-bit ``imm``: two slots, returned as a pair of Insns.

    ``imm`` may be signed or unsigned 64-bit.  Raises ``ValueError`` for a bad
    register or an ``imm`` outside ``-2**63 .. 2**64-1``.
    """
    value = _check.integer(imm, "immediate", lo=-(1 << 63), hi=(1 << 64) - 1)
    return _imm64_pair(_reg(dst), 0, value)


def ld_map_fd(dst: str, fd: int) -> tuple[Insn, Insn]:
    """Load the map with file descriptor ``fd`` into ``dst`` (``BPF_PSEUDO_MAP_FD``).

    Two slots, returned as a pair.  The kernel replaces the fd by the map's
    address when the program loads.  Raises ``ValueError`` for a bad register or
    a negative ``fd``.
    """
    value = _check.integer(fd, "map fd", lo=0, hi=S32_MAX)
    return _imm64_pair(_reg(dst), BPF_PSEUDO_MAP_FD, value)


# -- jumps ---------------------------------------------------------------------


def jmp(op: str, dst: str, src: str | int, off: int, *, jmp32: bool = False) -> Insn:
    """Encode ``if dst <op> src goto +off`` with a register or immediate ``src``.

    ``op`` is one of ``jeq jgt jge jset jne jsgt jsge jlt jle jslt jsle`` (the
    ``js*`` ones compare signed).  ``jmp32`` compares the low 32 bits.  Raises
    ``ValueError`` for an unknown op, a bad register, offset or immediate.
    """
    if op not in _JMP_OPS:
        raise ValueError(f"unknown jump op {op!r} (known: {', '.join(_JMP_OPS)}, and ja())")
    code = (BPF_JMP32 if jmp32 else BPF_JMP) | _JMP_OPS[op]
    if isinstance(src, str):
        return Insn(code | BPF_X, _reg(dst), _reg(src), _off(off))
    return Insn(code | BPF_K, _reg(dst), 0, _off(off), _imm(src, wide32=jmp32))


def ja(off: int) -> Insn:
    """``goto +off``; raises ``ValueError`` for an offset outside s16."""
    return Insn(BPF_JMP | BPF_JA, 0, 0, _off(off))


def jeq(dst: str, src: str | int, off: int, *, jmp32: bool = False) -> Insn:
    """``if dst == src goto +off``; see :func:`jmp` for what is raised."""
    return jmp("jeq", dst, src, off, jmp32=jmp32)


def jne(dst: str, src: str | int, off: int, *, jmp32: bool = False) -> Insn:
    """``if dst != src goto +off``; see :func:`jmp` for what is raised."""
    return jmp("jne", dst, src, off, jmp32=jmp32)


def jgt(dst: str, src: str | int, off: int, *, jmp32: bool = False) -> Insn:
    """``if dst > src goto +off`` (unsigned); see :func:`jmp` for what is raised."""
    return jmp("jgt", dst, src, off, jmp32=jmp32)


def jge(dst: str, src: str | int, off: int, *, jmp32: bool = False) -> Insn:
    """``if dst >= src goto +off`` (unsigned); see :func:`jmp` for what is raised."""
    return jmp("jge", dst, src, off, jmp32=jmp32)


def jlt(dst: str, src: str | int, off: int, *, jmp32: bool = False) -> Insn:
    """``if dst < src goto +off`` (unsigned); see :func:`jmp` for what is raised."""
    return jmp("jlt", dst, src, off, jmp32=jmp32)


def jle(dst: str, src: str | int, off: int, *, jmp32: bool = False) -> Insn:
    """``if dst <= src goto +off`` (unsigned); see :func:`jmp` for what is raised."""
    return jmp("jle", dst, src, off, jmp32=jmp32)


def jset(dst: str, src: str | int, off: int, *, jmp32: bool = False) -> Insn:
    """``if dst & src goto +off``; see :func:`jmp` for what is raised."""
    return jmp("jset", dst, src, off, jmp32=jmp32)


def jsgt(dst: str, src: str | int, off: int, *, jmp32: bool = False) -> Insn:
    """``if dst > src goto +off`` (signed); see :func:`jmp` for what is raised."""
    return jmp("jsgt", dst, src, off, jmp32=jmp32)


def jsge(dst: str, src: str | int, off: int, *, jmp32: bool = False) -> Insn:
    """``if dst >= src goto +off`` (signed); see :func:`jmp` for what is raised."""
    return jmp("jsge", dst, src, off, jmp32=jmp32)


def jslt(dst: str, src: str | int, off: int, *, jmp32: bool = False) -> Insn:
    """``if dst < src goto +off`` (signed); see :func:`jmp` for what is raised."""
    return jmp("jslt", dst, src, off, jmp32=jmp32)


def jsle(dst: str, src: str | int, off: int, *, jmp32: bool = False) -> Insn:
    """``if dst <= src goto +off`` (signed); see :func:`jmp` for what is raised."""
    return jmp("jsle", dst, src, off, jmp32=jmp32)


def call(helper: int) -> Insn:
    """Call BPF helper number ``helper`` (``enum bpf_func_id``); args in r1..r5, result r0.

    Raises ``ValueError`` for a negative or too large id.
    """
    return Insn(BPF_JMP | BPF_CALL, 0, 0, 0, _check.integer(helper, "helper id", lo=0, hi=S32_MAX))


def exit_() -> Insn:
    """Return from the program with r0 as its result."""
    return Insn(BPF_JMP | BPF_EXIT)


# -- programs ------------------------------------------------------------------


def _flatten(items: Iterable[object], out: list[Insn], where: str) -> None:
    for i, item in enumerate(items):
        if isinstance(item, Insn):
            out.append(item)
        elif isinstance(item, (list, tuple)):
            _flatten(item, out, f"{where}[{i}]")
        else:
            raise TypeError(f"program item {where}[{i}] is not an Insn: {item!r}")


def assemble(insns: Iterable[InsnTree]) -> bytes:
    """Encode a program: Insns, and lists or tuples of them (ld_imm64 pairs), flattened.

    Raises ``TypeError`` naming the position of an item that is not an Insn,
    ``ValueError`` if an ``ld_imm64``/``ld_map_fd`` first slot is not followed by
    its second slot.
    """
    flat: list[Insn] = []
    _flatten(insns, flat, "")
    for i, insn in enumerate(flat):
        if insn.code == BPF_LD | BPF_DW | BPF_IMM:
            nxt = flat[i + 1] if i + 1 < len(flat) else None
            if nxt is None or (nxt.code, nxt.dst, nxt.src, nxt.off) != (0, 0, 0, 0):
                raise ValueError(f"instruction #{i} ({insn}) lacks its second ld_imm64 slot")
    return b"".join(bytes(insn) for insn in flat)


def disassemble(data: bytes | bytearray | memoryview) -> list[Insn]:
    """Decode a program into Insns; raises ``ValueError`` if its length is not a multiple of 8."""
    view = memoryview(data).cast("B")
    if len(view) % _INSN.size:
        raise ValueError(f"a program is a multiple of 8 bytes, got {len(view)}")
    return [Insn.from_bytes(view[i : i + _INSN.size]) for i in range(0, len(view), _INSN.size)]


_PROG_TYPE_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")


def load_program(
    insns: Iterable[InsnTree],
    prog_type: int | str,
    license: str = "GPL",
    name: str | None = None,
) -> Program:
    """Load an assembled program into the kernel and return it as a :class:`Program`.

    ``prog_type`` is a ``BPF_PROG_TYPE_*`` value or its name without the
    prefix, any case (``"socket_filter"``, ``"syscall"``, ``"raw_tracepoint"``);
    the name is resolved from the compiled module, not from a copied table.
    ``license`` matters: GPL-only helpers need a GPL-compatible one.  ``name``
    is the kernel-visible program name (truncated by the kernel to 15 chars).
    The returned Program owns its fd; close it (or use it as a context manager).

    Raises ``TypeError``/``ValueError`` as :func:`assemble` does, ``ValueError``
    for an empty program or a malformed ``prog_type``, and ``BPFError`` (with
    the verifier log) if the kernel rejects the program.
    """
    _check.string(license, "license")
    if name is not None:
        _check.string(name, "name")
    insn_bytes = assemble(insns)
    if not insn_bytes:
        raise ValueError("cannot load an empty program")
    kind: int | str
    if isinstance(prog_type, str):
        kind = prog_type.lower().removeprefix("bpf_prog_type_")
        if not _PROG_TYPE_NAME.match(kind):
            raise ValueError(f"bad program type name {prog_type!r}")
    else:
        kind = _check.integer(prog_type, "program type", lo=0, hi=U32_MAX)
    from .program import Program  # the checked layer; imported late, needs the extension

    return Program.load_raw(insn_bytes, kind, license, name)


# -- event-field stores ----------------------------------------------------------


def _scalar_field(event: EventDef, field: str) -> EventField:
    f = event.field(field)
    if f.count != 1:
        raise ValueError(
            f"field {field!r} of event {event.name!r} is {f.type}[{f.count}] ({f.size} bytes): "
            "only a scalar field of 1, 2, 4 or 8 bytes can be stored in one instruction"
        )
    return _field_offset(event, f)


def _field_offset(event: EventDef, f: EventField) -> EventField:
    if f.offset + f.size - 1 > S16_MAX:
        raise ValueError(
            f"field {f.name!r} of event {event.name!r} at offset {f.offset} is beyond "
            f"the s16 reach of a store ({S16_MAX})"
        )
    return f


def store_event_field(reg: str, event: EventDef, field: str, value_reg: str) -> Insn:
    """Store ``value_reg`` into ``field`` of the event at ``reg``: ``stx [reg+offset], value_reg``.

    The store's width is the field's size (``u32`` -> ``BPF_W``).  Raises
    ``UnknownFieldError`` for an unknown field, ``ValueError`` for an array field
    or a bad register.
    """
    f = _scalar_field(event, field)
    return stx(f.size, reg, value_reg, f.offset)


def _field_imm(event: EventDef, f: EventField, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"immediate for field {f.name!r} must be an int, got {value!r}")
    bits = 8 * f.size
    signed = f.type.startswith("i")
    if f.size == 8:
        # BPF_ST_MEM takes a 32-bit immediate and sign-extends it to 64 bits.
        lo, hi = (S32_MIN, S32_MAX) if signed else (0, S32_MAX)
        why = " (a 64-bit store sign-extends a 32-bit immediate; use ld_imm64 and a register)"
    else:
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        why = ""
    if not lo <= value <= hi:
        raise ValueError(
            f"immediate {value} does not fit field {f.name!r} ({f.type}) of event "
            f"{event.name!r}: allowed {lo}..{hi}{why}"
        )
    return value - (1 << 32) if value > S32_MAX else value


def store_event_imm(reg: str, event: EventDef, field: str, imm: int) -> Insn:
    """Store the constant ``imm`` into ``field`` of the event at ``reg`` (``st``).

    ``imm`` must fit the field's type; for 64-bit fields, whose store
    sign-extends a 32-bit immediate, ``u64``/``ptr`` take ``0..2**31-1`` and
    ``i64`` the s32 range.  Raises ``UnknownFieldError`` for an unknown field,
    ``ValueError`` for an array field, a bad register or an ``imm`` that does
    not fit, ``TypeError`` for a non-int ``imm``.
    """
    f = _scalar_field(event, field)
    return Insn(BPF_ST | _SIZES[f.size] | BPF_MEM, _reg(reg), 0, f.offset, _field_imm(event, f, imm))


def store_event_fields(reg: str, event: EventDef, values: Mapping[str, Mapping[str, Any]]) -> list[Insn]:
    """Store several fields: ``{"pid": {"reg": "r7"}, "protocol": {"imm": 6}}`` -> Insns in order.

    Each value is ``{"reg": register}`` (:func:`store_event_field`) or
    ``{"imm": int}`` (:func:`store_event_imm`) and raises what those raise;
    anything else raises ``ValueError`` naming the field.
    """
    out: list[Insn] = []
    for field, how in values.items():
        if not isinstance(how, Mapping) or len(how) != 1 or not ({"reg", "imm"} & set(how)):
            raise ValueError(f"field {field!r}: expected {{'reg': register}} or {{'imm': int}}, got {how!r}")
        if "reg" in how:
            out.append(store_event_field(reg, event, field, how["reg"]))
        else:
            out.append(store_event_imm(reg, event, field, how["imm"]))
    return out


def zero_event_field(reg: str, event: EventDef, field: str) -> Insn | list[Insn]:
    """Zero ``field`` of the event at ``reg`` with ``st`` instructions.

    A field of 1, 2, 4 or 8 bytes takes one store, returned as an Insn.  Any
    other field gets a list of stores covering exactly its bytes, each the
    widest that fits the remaining length and is aligned at its offset
    (assuming ``reg`` is 8-byte aligned, as a stack slot is; the verifier
    rejects misaligned stack stores): 16 bytes at offset 32 -> two ``dw``, 3
    bytes at offset 0 -> ``h`` + ``b``.  Raises ``UnknownFieldError`` for an
    unknown field, ``ValueError`` for a bad register.
    """
    f = _field_offset(event, event.field(field))
    dst = _reg(reg)
    if f.size in _SIZES:
        return Insn(BPF_ST | _SIZES[f.size] | BPF_MEM, dst, 0, f.offset, 0)
    out: list[Insn] = []
    pos, end = f.offset, f.offset + f.size
    while pos < end:
        width = next(w for w in (8, 4, 2, 1) if w <= end - pos and pos % w == 0)
        out.append(Insn(BPF_ST | _SIZES[width] | BPF_MEM, dst, 0, pos, 0))
        pos += width
    return out
