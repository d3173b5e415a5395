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

    ``stage`` says which: ``"program"`` (``log`` is the tail of the verifier
    log), ``"map"`` (``log`` is the tail of libbpf's log about it) or
    ``"object"`` (neither could be told apart: relocation, BTF, ...).
    ``name`` is that program's or map's name ("" when unknown).
    """

    def __init__(self, err: int, message: str, what: str, log: str, stage: str = "program",
                 name: str = "") -> None:
        super().__init__(err, message, what)
        self.log = log
        self.stage = stage
        self.name = name

    def __str__(self) -> str:
        base = super().__str__()
        named = f" {self.name!r}" if self.name else ""
        if self.stage == "map":
            base += f": map{named} could not be created"
            title = "libbpf log (tail)"
        elif self.stage == "program":
            base += f": program{named} was refused" if named else ""
            title = "verifier log (tail)"
        else:
            title = "libbpf log (tail)"
        return f"{base}\n--- {title} ---\n{self.log}" if self.log else base


class ClosedError(BPFError):
    """The object was closed (or its owner was): nothing can be done with it any more."""

    def __init__(self, what: str) -> None:
        super().__init__(_errno.EBADF, f"{what} is closed", what)

    def __str__(self) -> str:
        return str(self.strerror)
