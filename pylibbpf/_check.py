"""Argument validation shared by every public call.

Each helper checks one kind of argument and raises at the call, naming the
parameter and the value it was given:

- ``TypeError`` when the value is of the wrong type (``None`` where a number is
  needed, a ``bool`` where an ``int`` is needed: ``True`` is an ``int`` to
  Python but never what a caller meant for a size or a count);
- ``ValueError`` when the type is right but the value is out of range, NaN, or
  not one of the accepted choices.

The bounds are the ones the C call underneath accepts, so a value that passes
here never turns into an ``OverflowError`` or a wrapped-around integer inside
CFFI. This module imports nothing from the package: every other module may use it.
"""

from __future__ import annotations

import math
import os
import re
import time
import warnings
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any, TypeVar

INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1
UINT64_MAX = 2**64 - 1

# The longest wait a millisecond timeout can express as a C int (about 24.8 days).
# A longer timeout in seconds means "wait that long", which no caller can tell
# apart from "wait forever": it becomes -1 (forever) instead of overflowing.
MAX_TIMEOUT_MS = INT32_MAX

T = TypeVar("T")


def _shown(value: object) -> str:
    """The value as an error message shows it (short, with its type when that helps)."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return text


def integer(value: object, name: str, *, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` as an int in ``lo..hi`` (either bound optional).

    Raises TypeError for anything that is not an ``int`` (``bool`` and ``None``
    included), ValueError outside the bounds.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {_shown(value)} ({type(value).__name__})")
    if lo is not None and value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise ValueError(f"{name} must be <= {hi}, got {value}")
    return value


def optional_integer(value: object, name: str, *, lo: int | None = None, hi: int | None = None) -> int | None:
    """``None``, or ``value`` checked by :func:`integer`."""
    if value is None:
        return None
    return integer(value, name, lo=lo, hi=hi)


def number(value: object, name: str, *, lo: float | None = None, hi: float | None = None,
           lo_open: bool = False) -> float:
    """``value`` (an int or a float) as a finite float in ``lo..hi``.

    ``lo_open`` makes the lower bound exclusive (``> lo``). Raises TypeError for
    non-numbers (``bool`` and ``None`` included), ValueError for NaN, infinities
    and values outside the bounds.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {_shown(value)} ({type(value).__name__})")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if lo is not None and (result <= lo if lo_open else result < lo):
        raise ValueError(f"{name} must be {'>' if lo_open else '>='} {lo}, got {value!r}")
    if hi is not None and result > hi:
        raise ValueError(f"{name} must be <= {hi}, got {value!r}")
    return result


def timeout_seconds(value: object, name: str = "timeout") -> float | None:
    """A timeout in seconds: ``None`` (wait forever) or a finite number >= 0."""
    if value is None:
        return None
    return number(value, name, lo=0.0)


def timeout_ms(value: object, name: str = "timeout_ms") -> int:
    """A timeout in milliseconds as libbpf takes it: -1 (forever) or 0..INT32_MAX."""
    return integer(value, name, lo=-1, hi=MAX_TIMEOUT_MS)


def poll_timeout_ms(timeout: object, legacy_ms: object, what: str) -> int:
    """``poll(timeout)``'s wait in libbpf's milliseconds (-1: forever), from seconds or the deprecated ms.

    ``timeout``: seconds (None: forever). ``legacy_ms``: the ``timeout_ms=``
    keyword the method took before 0.2 (a DeprecationWarning naming the new
    spelling). A negative ``timeout`` (the old ``-1``: forever) is a ValueError
    saying so, rather than a silent wait.
    """
    if legacy_ms is not None:
        if timeout is not None:
            raise TypeError(f"{what}: give timeout= (seconds) or the deprecated timeout_ms=, not both")
        ms = timeout_ms(legacy_ms)  # a bad value is an error first, deprecated or not
        warnings.warn(f"{what}(timeout_ms=...) is deprecated: pass timeout= in seconds "
                      "(None waits forever, 0 does not wait)", DeprecationWarning, stacklevel=3)
        return ms
    if timeout is None:
        return -1
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout < 0:
        raise ValueError(f"timeout must be >= 0 seconds, or None to wait forever, got {timeout!r} "
                         f"({what} takes seconds since 0.2; -1 was the milliseconds' 'forever')")
    return seconds_to_ms(timeout, "timeout")


def deadline(timeout: object, name: str = "timeout") -> float | None:
    """The monotonic deadline of a timeout in seconds (``None``: no deadline)."""
    # Every read_into computes one: a plain finite number in range skips the full check (NaN
    # fails both comparisons); anything else gets it, and its messages.
    if (type(timeout) is float or type(timeout) is int) and 0 <= timeout and timeout * 1000 < MAX_TIMEOUT_MS:
        return time.monotonic() + timeout
    seconds = timeout_seconds(timeout, name)
    if seconds is None or seconds * 1000 >= MAX_TIMEOUT_MS:
        return None
    return time.monotonic() + seconds


def remaining_ms(until: float | None) -> int:
    """Milliseconds left until ``until`` (monotonic seconds), rounded up; -1 for no deadline."""
    if until is None:
        return -1
    left = (until - time.monotonic()) * 1000
    if left >= MAX_TIMEOUT_MS:
        return -1
    return max(0, math.ceil(left))


def seconds_to_ms(value: object, name: str = "timeout") -> int:
    """A timeout in seconds (``None`` = forever) as libbpf's milliseconds (-1 = forever), rounded up."""
    if value is None:
        return -1
    # Every read_batch converts its timeout: a plain finite number in range without a clock read
    # (NaN fails both comparisons); anything else gets the full check and its messages.
    if (type(value) is float or type(value) is int) and 0 <= value and value * 1000 < MAX_TIMEOUT_MS:
        return math.ceil(value * 1000)
    return remaining_ms(deadline(value, name))


def callable_(value: object, name: str) -> None:
    """TypeError naming the argument unless ``value`` is callable."""
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {_shown(value)} ({type(value).__name__})")


def optional_callable(value: object, name: str) -> None:
    """As :func:`callable_`, but ``None`` is accepted."""
    if value is not None:
        callable_(value, name)


def flags(value: object, name: str = "flags", *, bits: int = 64) -> int:
    """A flags word: an int in ``0 .. 2**bits - 1``."""
    return integer(value, name, lo=0, hi=(1 << bits) - 1)


def choice(value: object, name: str, choices: Collection[T]) -> T:
    """``value`` if it is one of ``choices``; ValueError listing them otherwise."""
    try:
        known = value in choices
    except TypeError:  # unhashable (a list for a dict's keys): not one of them either
        known = False
    if not known:
        listed = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {listed}; got {_shown(value)}")
    return value  # type: ignore[return-value]


def string(value: object, name: str) -> str:
    """A ``str``: TypeError naming the parameter otherwise, ValueError for an embedded NUL."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {_shown(value)} ({type(value).__name__})")
    if "\0" in value:
        raise ValueError(f"{name} must not contain a NUL character, got {_shown(value)}")
    return value


def path(value: object, name: str) -> str:
    """A filesystem path (``str`` or ``os.PathLike[str]``) as a ``str``."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a path (str or os.PathLike), got {_shown(value)} ({type(value).__name__})")
    return string(value, name)


def buffer(value: object, name: str) -> memoryview:
    """A bytes-like object as a read-only byte view; TypeError naming the parameter otherwise."""
    if isinstance(value, str):
        raise TypeError(f"{name} must be bytes-like, got a str {_shown(value)} (encode it first)")
    try:
        view = memoryview(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be bytes-like, got {_shown(value)} ({type(value).__name__})") from None
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def _mount_point(text: str) -> str:
    r"""A mount point as /proc/self/mountinfo writes it, unescaped (``\040`` is a space)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def bpffs_path(value: object, name: str) -> str:
    """A path whose directory is on a BPF file system (bpffs); ValueError naming the parameter otherwise.

    What every unpin checks first, so that it never removes a file outside
    bpffs. The directory is resolved (symlinks followed) and found in
    /proc/self/mountinfo: the last mount at the longest mount point that
    holds it says the file system type.
    """
    p = path(value, name)
    directory = os.path.realpath(os.path.dirname(os.path.abspath(p)))
    best, fstype = "", ""
    with open("/proc/self/mountinfo") as mounts:
        for line in mounts:
            left, _, right = line.partition(" - ")
            fields = left.split()
            if len(fields) < 5 or not right:
                continue
            point = _mount_point(fields[4])
            inside = directory == point or directory.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best):
                best, fstype = point, right.split()[0]
    if fstype != "bpf":
        raise ValueError(f"{name} {p!r} is not on a BPF file system (bpffs; {directory} is on "
                         f"{fstype or 'no known mount'}): only pins on bpffs are removed")
    return p


def key_value_pairs(mapping: Any, extra: Mapping[str, Any]) -> Iterator[tuple[Any, Any]]:
    """(key, value) pairs of a mapping or of an iterable of pairs, then ``extra``'s; TypeError naming a bad item."""
    if isinstance(mapping, Mapping):
        yield from mapping.items()
    elif isinstance(mapping, Iterable) and not isinstance(mapping, (str, bytes)):
        for i, pair in enumerate(mapping):
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise TypeError(f"item #{i} must be a (key, value) pair, got {pair!r}")
            yield pair[0], pair[1]
    else:
        raise TypeError(f"expected a mapping or (key, value) pairs, got {type(mapping).__name__}")
    yield from extra.items()
