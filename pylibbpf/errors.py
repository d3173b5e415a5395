"""pylibbpf's exceptions: one error path for every libbpf failure.

``BPFError`` is an :class:`OSError`, so ``except OSError`` and ``e.errno`` work
as for any system call; ``e.strerror`` is libbpf's own message
(``libbpf_strerror``, which also knows libbpf's private codes 4000-4014).
"""

from __future__ import annotations

import errno as _errno


class BPFError(OSError):
    """A libbpf call failed: ``errno`` is the error code, ``strerror`` libbpf's message.

    ``what`` names the operation (``"bpf_object__load"``, ...); ``str(e)`` reads
    ``[Errno 22] Invalid argument: bpf_object__load(obj.bpf.o)``.
    """

    def __init__(self, err: int, message: str, what: str = "") -> None:
        super().__init__(err, message, what) if what else super().__init__(err, message)
        self.what = what


class LoadError(BPFError):
    """The kernel refused part of a load: a program (the verifier said no) or a map (creation failed).

    ``stage`` says which: ``"program"``, ``"map"`` or ``"object"`` (neither
    could be told apart: relocation, BTF, ...). ``name`` is that program's or
    map's name ("" when unknown).

    ``verifier_log`` is the verifier's whole log for the refused program, as
    the kernel wrote it (``bpftool prog load`` prints the same text; "" when
    no program was refused). ``log`` is what ``str(e)`` shows after its first
    line: for a program, the verifier log's last lines, which hold the failing
    instruction and the reason ("R0 invalid mem access 'map_value_or_null'");
    otherwise the last lines of libbpf's messages about the load.
    """

    def __init__(self, err: int, message: str, what: str, log: str, stage: str = "program",
                 name: str = "", verifier_log: str = "") -> None:
        super().__init__(err, message, what)
        self.log = log
        self.stage = stage
        self.name = name
        self.verifier_log = verifier_log

    def __str__(self) -> str:
        base = super().__str__()
        named = f" {self.name!r}" if self.name else ""
        if self.stage == "map":
            base += f": map{named} could not be created"
        elif self.stage == "program" and named:
            base += f": program{named} was refused"
        title = "verifier log (tail)" if self.verifier_log else "libbpf log (tail)"
        return f"{base}\n--- {title} ---\n{self.log}" if self.log else base


class ClosedError(BPFError):
    """The object was closed (or its owner was): nothing can be done with it any more."""

    def __init__(self, what: str) -> None:
        super().__init__(_errno.EBADF, f"{what} is closed", what)

    def __str__(self) -> str:
        return str(self.strerror)
