"""The compiled extension: ``ffi`` and ``lib``, plus libbpf's log routed to :mod:`logging`.

``lib`` is libbpf's public C API (libbpf.h, bpf.h, btf.h) and pylibbpf's C shim
(``plb_*``), callable as in C. libbpf's messages go to the ``pylibbpf.libbpf``
logger: warnings at WARNING, info at INFO, debug at DEBUG (debug messages are
only formatted when that logger is enabled for DEBUG when an object is opened).
Each message arrives whole, however long: a refused program's verifier log is
one message of up to libbpf's 16 MiB log buffer.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

from ._pylibbpf_cffi import ffi, lib
from ._version import __version__

__all__ = ["capture_log", "ffi", "lib", "logger", "sync_log_level"]

logger = logging.getLogger("pylibbpf.libbpf")

_built_for = ffi.string(lib.plb_package_version()).decode()
if _built_for != __version__:
    raise ImportError(
        f"pylibbpf {__version__} found a compiled extension built for {_built_for}: "
        "rebuild it (`make build` or `pip install -e .`)"
    )

_LEVELS = {lib.LIBBPF_WARN: logging.WARNING, lib.LIBBPF_INFO: logging.INFO, lib.LIBBPF_DEBUG: logging.DEBUG}


@ffi.def_extern()  # type: ignore[misc, untyped-decorator]
def plb_py_log(level: int, msg: object) -> None:
    """Called from C with one formatted libbpf message (the GIL is taken by CFFI)."""
    text = ffi.string(msg).decode("utf-8", "replace").rstrip("\n")
    captured = getattr(_capture, "lines", None)
    if captured is not None:
        captured.append(text)
    logger.log(_LEVELS.get(level, logging.DEBUG), "%s", text)


_capture = threading.local()


@contextlib.contextmanager
def capture_log() -> Iterator[list[str]]:
    """Collect the libbpf messages this thread causes inside the block (they are still logged).

    Used to attach the verifier log to a failed load's exception.
    """
    previous = getattr(_capture, "lines", None)
    lines: list[str] = []
    _capture.lines = lines
    try:
        yield lines
    finally:
        _capture.lines = previous


def sync_log_level() -> None:
    """Forward libbpf's debug messages only while the logger wants them (formatting costs)."""
    lib.plb_log_install(lib.LIBBPF_DEBUG if logger.isEnabledFor(logging.DEBUG) else lib.LIBBPF_INFO)


sync_log_level()
