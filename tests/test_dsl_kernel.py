"""The event DSL on the kernel: a program assembled in Python writes an event that parses back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pylibbpf import BPFObject, LoadError, RingBuffer, asm, lib
from pylibbpf.events import EventDef, defevent

pytestmark = pytest.mark.usefixtures("bpf_privileged")

FIELDS = (("timestamp", "u64"), ("pid", "u32"), ("saddr", "u32"), ("daddr", "u32"),
          ("sport", "u16"), ("dport", "u16"), ("protocol", "u8"), ("direction", "u8"),
          ("padding", "u8", 2), ("comm", "char", 16))


@pytest.fixture
def ring_obj(bpf_objects: dict[str, Path]) -> Iterator[BPFObject]:
    with BPFObject.open(bpf_objects["ringbuf"]) as obj:
        obj.load()
        yield obj


def emit_program(map_fd: int, ev: EventDef) -> list[asm.InsnTree]:
    """reserve(ev.size) -> store every field -> submit, as a SEC("syscall") program would."""
    comm_off = ev.offset("comm")
    return [
        asm.ld_map_fd("r1", map_fd),
        asm.mov("r2", ev.size),
        asm.mov("r3", 0),
        asm.call(lib.BPF_FUNC_ringbuf_reserve),
        asm.jne("r0", 0, 2),
        asm.mov("r0", 1),
        asm.exit_(),
        asm.mov("r6", "r0"),
        asm.ld_imm64("r7", 0x1122334455667788),
        asm.mov("r8", 4242),
        asm.store_event_fields("r6", ev, {
            "timestamp": {"reg": "r7"}, "pid": {"reg": "r8"}, "saddr": {"imm": 0x0100007F},
            "daddr": {"imm": 0x0200007F}, "sport": {"imm": 40000}, "dport": {"imm": 443},
            "protocol": {"imm": 6}, "direction": {"imm": 1},
        }),
        asm.zero_event_field("r6", ev, "padding"),
        asm.zero_event_field("r6", ev, "comm"),
        asm.st("w", "r6", comm_off, int.from_bytes(b"bash", "little")),
        asm.mov("r1", "r6"),
        asm.mov("r2", 0),
        asm.call(lib.BPF_FUNC_ringbuf_submit),
        asm.mov("r0", 0),
        asm.exit_(),
    ]


@pytest.mark.parametrize("layout", ["packed", "c"])
def test_assembled_program_stores_an_event_that_parses_back(ring_obj: BPFObject, layout: str) -> None:
    ev = defevent("ConnectionEvent", *FIELDS, layout=layout)
    got = []
    with asm.load_program(emit_program(ring_obj.maps["rb"].fd, ev), "syscall", name="dsl_emit") as prog, \
            RingBuffer(ring_obj.maps["rb"], lambda d: got.append(ev.parse(d))) as rb:
        assert prog.test_run().retval == 0
        assert rb.consume() == 1
    rec = got[0]
    assert (rec.timestamp, rec.pid, rec.saddr, rec.daddr) == (0x1122334455667788, 4242, 0x0100007F, 0x0200007F)
    assert (rec.sport, rec.dport, rec.protocol, rec.direction) == (40000, 443, 6, 1)
    assert rec.padding == (0, 0) and rec.comm == "bash"


def test_rejected_assembly_carries_the_verifier_log() -> None:
    with pytest.raises(LoadError, match="R0 !read_ok"):
        asm.load_program([asm.exit_()], "syscall")
    with pytest.raises(ValueError, match="unknown program type 'no_such_type'"):
        asm.load_program([asm.mov("r0", 0), asm.exit_()], "no_such_type")
