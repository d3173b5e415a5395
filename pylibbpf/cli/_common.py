"""What every ``pylibbpf`` subcommand shares: the one-line error, the bundled objects, loading
and detaching with errors a person can act on, SIGTERM as Ctrl-C, the terminal status line and
the closed-pipe check. Each tool's module imports from here; nothing here imports a tool.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import math
import os
import select
import signal
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import NoReturn, TextIO, TypeVar

from ..errors import BPFError, LoadError
from ..link import Link
from ..object import BPFObject
from ..skel import Skeleton

SkelT = TypeVar("SkelT", bound=Skeleton)

#: Where the bundled objects are installed (package data).
BUNDLED_DIR = Path(__file__).resolve().parent.parent / "bpf"
#: The kernel's own BTF: CO-RE relocations are resolved against it.
VMLINUX_BTF = Path("/sys/kernel/btf/vmlinux")
#: What tracing needs, in the same words in every message and in the docs.
PRIVILEGES = ("root or CAP_BPF+CAP_PERFMON (a user other than root also needs CAP_DAC_READ_SEARCH: "
              "tracefs is readable by root only)")


class CommandError(Exception):
    """A failure the person running the command can act on: printed as one line, exit status 1."""


class StatusLine:
    """A one-line progress display on stderr (only when stderr is a terminal)."""

    def __init__(self, stream: TextIO, lock: threading.Lock) -> None:
        self._stream = stream
        self._lock = lock
        self.enabled = stream.isatty()
        self._shown = False

    def show(self, text: str) -> None:
        if self.enabled:
            with self._lock:
                self._stream.write(f"\r\x1b[K{text}")
                self._stream.flush()
                self._shown = True

    def final(self, line: str) -> None:
        """Replace the status line by a last line that stays (the summary)."""
        with self._lock:
            self.clear()
            self._stream.write(line + "\n")
            self._stream.flush()

    def clear(self) -> None:
        """Erase the line (the caller holds the lock): before a table row or the summary."""
        if self._shown:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._shown = False


def pipe_broken(stream: TextIO) -> bool:
    """True when ``stream`` is a pipe whose reading end was closed (poll reports POLLERR)."""
    try:
        fd = stream.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False
    except (OSError, ValueError):
        return False
    poller = select.poll()
    poller.register(fd, 0)  # POLLERR and POLLHUP are always reported
    return any(ev & select.POLLERR for _, ev in poller.poll(0))


def point_at_devnull(stream: TextIO) -> None:
    """After stdout's reader went away: as the Python documentation recommends for SIGPIPE, point the
    stream's fd at /dev/null so that the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def output_error(e: OSError, where: str = "stdout") -> CommandError:
    """The one line for an output that cannot be written (a full disk, /dev/full; not a closed pipe)."""
    reason = e.strerror
    cause: BaseException | None = e
    while reason is None and cause is not None:  # pyarrow wraps the file's own OSError
        cause = cause.__context__
        reason = cause.strerror if isinstance(cause, OSError) else None
    return CommandError(f"cannot write to {where}: {reason or e}")


def write_output(stream: TextIO, text: str, where: str = "stdout") -> bool:
    """Write and flush ``text``: False when the reader went away (a closed pipe, not an error: the
    stream then points at /dev/null); CommandError when the write failed otherwise."""
    try:
        stream.write(text)
        stream.flush()
    except BrokenPipeError:
        point_at_devnull(stream)
        return False
    except OSError as e:
        point_at_devnull(stream)  # what stays buffered must not fail again at exit
        raise output_error(e, where) from e
    return True


def check_btf() -> None:
    if not VMLINUX_BTF.exists():
        raise CommandError(f"this kernel has no BTF ({VMLINUX_BTF} is missing): the bundled CO-RE programs "
                           "need a kernel built with CONFIG_DEBUG_INFO_BTF=y")


def privilege_error(e: BPFError) -> CommandError:
    return CommandError(f"loading BPF programs needs {PRIVILEGES} ({e.strerror}: {e.what})")


def open_skeleton(skel: type[SkelT]) -> SkelT:
    """Open a bundled program through its typed skeleton (``pylibbpf.bpf.NAME_skel``; not loaded)."""
    source = skel.default_object()
    path = source if isinstance(source, Path) else Path(f"{skel.OBJECT_NAME}.bpf.o")
    if isinstance(source, Path) and not source.exists():
        raise CommandError(f"the bundled program {path.name} is missing from {path.parent}: "
                           "build the package (`make build`, or `pip install .`)")
    try:
        return skel.open()
    except BPFError as e:
        raise CommandError(f"cannot open the bundled program {path}: {e.strerror}") from e


def load_object(obj: BPFObject, verbose: bool) -> None:
    try:
        obj.load()
    except LoadError as e:
        if e.errno in (errno.EPERM, errno.EACCES):
            raise privilege_error(e) from e
        if verbose and e.log:
            sys.stderr.write(e.log + "\n")
        part = f" ({e.stage} {e.name!r})" if e.name else ""
        log = "verifier log" if e.stage == "program" else "libbpf log"
        raise CommandError(f"the kernel refused {obj.name}{part}: {e.strerror} ({e.what})"
                           + ("" if verbose else f"; --verbose shows the {log}")) from e
    except BPFError as e:
        if e.errno in (errno.EPERM, errno.EACCES):
            raise privilege_error(e) from e
        raise CommandError(f"cannot load {obj.name}: {e.strerror} ({e.what})") from e


def detach(links: list[Link]) -> None:
    """Destroy every link, concurrently.

    When the last perf user of a tracepoint leaves, the kernel waits for RCU
    grace periods before the close returns (tracepoint_synchronize_unregister):
    up to seconds on a busy machine, once per tracepoint. Those waits overlap.
    """
    helpers = [threading.Thread(target=link.destroy, name=f"detach {link.name}") for link in links[1:]]
    for t in helpers:
        t.start()
    if links:
        links[0].destroy()
    for t in helpers:
        t.join()


class Terminate(Exception):
    """SIGTERM: stop tracing as on Ctrl-C."""


def on_sigterm(signum: int, frame: FrameType | None) -> NoReturn:
    raise Terminate


def attach_all(obj: BPFObject) -> list[Link]:
    """Attach every program of a loaded object that has an attach point; errors as one line."""
    try:
        return obj.attach_all()
    except BPFError as e:
        if e.errno in (errno.EPERM, errno.EACCES):
            raise privilege_error(e) from e
        raise CommandError(f"cannot attach {obj.name}: {e.strerror} ({e.what})") from e


# argparse types: a usage error names the option's value and the range it must be in

#: The kernel's ceiling on pid numbers (PID_MAX_LIMIT, include/linux/threads.h, on 64-bit machines):
#: a larger --pid can name no process.
PID_MAX_LIMIT = 4 * 1024 * 1024
#: The largest C int: queue sizes and CPU numbers the library takes.
INT_MAX = 2**31 - 1


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def int_range(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: an integer in ``lo..hi`` (a usage error names the value otherwise)."""
    def parse(text: str) -> int:
        value = _integer(text)
        if value < lo:
            raise argparse.ArgumentTypeError(f"must be > {lo - 1}, got {text}" if lo == 1
                                             else f"must be >= {lo}, got {text}")
        if value > hi:
            raise argparse.ArgumentTypeError(f"must be <= {hi}, got {text}")
        return value
    parse.__name__ = "integer"
    return parse


def positive_float(text: str) -> float:
    """A finite number of seconds > 0 (``inf`` and ``nan`` are usage errors)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


#: An integer > 0 that fits a C int (counts, sizes, frequencies).
positive_int = int_range(1, INT_MAX)
#: A process id the kernel can have.
pid_number = int_range(1, PID_MAX_LIMIT)
#: A CPU number (whether it is online is checked when it is used).
cpu_number = int_range(0, INT_MAX)


HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait until the block ends, then act as usual: their exception surfaces
    between two steps, never inside one (a half-written Arrow message would leave the stream
    unreadable; records drained but not yet printed would be lost). Only the main thread can set
    handlers: elsewhere, nothing held."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        caught.append(signum)

    previous = {s: signal.signal(s, hold) for s in HELD_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for signum in dict.fromkeys(caught):
            signal.raise_signal(signum)
