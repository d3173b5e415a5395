"""Histograms as BPF tools count them, printed the way bcc and libbpf-tools print them.

A BPF program counts values into slots (an array map, or a hash map keyed by
``(key, slot)``); user space turns the counts into a :class:`Histogram`:

- **log2** (libbpf-tools' layout, ``slot = log2(value)`` with ``log2(0) == 0``):
  slot 0 holds the values 0 and 1, slot ``i >= 1`` the values ``2**i`` to
  ``2**(i+1) - 1``. Printed as ``print_log2_hist`` does: one row per slot from
  0 up to the last non-empty one, ``low -> high : count |stars|``, the stars
  scaled so that the fullest slot has 40 (20 when the last slot is above 32,
  where the columns widen).
- **linear**: slot ``i`` holds the values ``base + i*step`` to
  ``base + (i+1)*step - 1``. Printed as ``print_linear_hist`` does: one row per
  non-empty slot, labelled with the slot's lowest value.

Nothing prints for a histogram without counts (as in bcc). ``Histogram.per_key``
splits counts keyed by ``(key, slot)`` (per-process, per-disk histograms) into
one histogram per key; :meth:`Histogram.format_per_key` prints them one after
the other, each under a ``key = value`` line, as bcc's ``print_log2_hist`` does
with a ``section_header``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any, Literal, TypeVar

from . import _check

K = TypeVar("K", bound=Hashable)

#: The widest bar (libbpf-tools' and bcc's ``stars_max``).
STARS_MAX = 40
#: A log2 slot covers at most a 64-bit value: slots 0..63.
LOG2_SLOTS = 64
#: The largest linear slot index accepted from a mapping (a guard against a
#: corrupt slot turning into a list of a billion zeros).
LINEAR_SLOTS_MAX = 1 << 20

Counts = Sequence[int] | Mapping[int, int]


def _dense(counts: object, kind: str, limit: int) -> list[int]:
    """``counts`` (a sequence, or a mapping slot -> count) as a list indexed by slot, trailing zeros kept out."""
    if isinstance(counts, Mapping):
        pairs: Iterable[tuple[Any, Any]] = counts.items()
    elif isinstance(counts, (str, bytes, bytearray)) or not isinstance(counts, Iterable):
        raise TypeError(f"counts must be a sequence of counts or a mapping slot -> count, "
                        f"got {type(counts).__name__}")
    else:
        pairs = enumerate(counts)
    dense: list[int] = []
    for slot_value, count_value in pairs:
        slot = _index(slot_value, "slot")
        count = _index(count_value, f"count of slot {slot}")
        if not 0 <= slot < limit:
            raise ValueError(f"{kind} slot {slot} is out of range: slots are 0..{limit - 1}")
        if count < 0:
            raise ValueError(f"count of slot {slot} must be >= 0, got {count}")
        if count:
            if slot >= len(dense):
                dense.extend([0] * (slot + 1 - len(dense)))
            dense[slot] += count
    return dense


def _index(value: object, name: str) -> int:
    """An integer from an int or a numpy integer (bool refused)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {value!r}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})") from None


def _stars(count: int, most: int, width: int) -> str:
    """The bar: ``count`` scaled to ``width`` characters (integer division, as in C), padded."""
    n = min(count, most) * width // most
    return "*" * n + " " * (width - n) + ("+" if count > most else "")


class Histogram:
    """Counts per slot of a log2 or linear histogram; immutable.

    Build with :meth:`log2`, :meth:`linear` or :meth:`per_key`. Two histograms
    are equal when their kind, slots and counts are.
    """

    __slots__ = ("_base", "_counts", "_kind", "_step")

    def __init__(self, kind: Literal["log2", "linear"], counts: Sequence[int], base: int = 0, step: int = 1) -> None:
        """Prefer the constructors; ``counts`` must already be validated, dense, by slot."""
        self._kind = kind
        self._counts = tuple(counts)
        self._base = base
        self._step = step

    @classmethod
    def log2(cls, counts: Counts) -> Histogram:
        """A log2 histogram from libbpf-tools' slots (slot 0: values 0-1, slot i: 2**i .. 2**(i+1)-1).

        ``counts``: a sequence (index = slot) or a mapping slot -> count (a map's
        items with int keys). TypeError for non-integer slots or counts,
        ValueError for a negative count or a slot outside 0..63.
        """
        return cls("log2", _dense(counts, "log2", LOG2_SLOTS))

    @classmethod
    def linear(cls, counts: Counts, base: int = 0, step: int = 1) -> Histogram:
        """A linear histogram: slot i holds the values ``base + i*step`` .. ``base + (i+1)*step - 1``.

        ``counts`` as for :meth:`log2`; slots 0..2**20-1. ValueError for a
        step below 1.
        """
        base = _check.integer(base, "base")
        step = _check.integer(step, "step", lo=1)
        return cls("linear", _dense(counts, "linear", LINEAR_SLOTS_MAX), base, step)

    @classmethod
    def per_key(cls, counts: Mapping[tuple[K, int], int] | Iterable[tuple[tuple[K, int], int]],
                kind: Literal["log2", "linear"] = "log2", base: int = 0, step: int = 1) -> dict[K, Histogram]:
        """One histogram per key from counts keyed by ``(key, slot)``, ordered by key.

        ``counts``: a mapping ``{(key, slot): count}`` or an iterable of
        ``((key, slot), count)`` pairs (a hash map's items after decoding its
        keys). Counts of the same ``(key, slot)`` are added. Keys that cannot
        be sorted keep their first-seen order.
        """
        kind = _check.choice(kind, "kind", ("log2", "linear"))
        pairs = counts.items() if isinstance(counts, Mapping) else counts
        grouped: dict[K, dict[int, int]] = {}
        for item in pairs:
            try:
                (key, slot), count = item
            except (TypeError, ValueError):
                raise TypeError(f"per_key takes ((key, slot), count) pairs, got {item!r}") from None
            slot = _index(slot, "slot")
            slots = grouped.setdefault(key, {})
            slots[slot] = slots.get(slot, 0) + _index(count, f"count of slot {slot}")
        try:
            order = sorted(grouped)  # type: ignore[type-var]
        except TypeError:
            order = list(grouped)
        if kind == "log2":
            return {key: cls.log2(grouped[key]) for key in order}
        return {key: cls.linear(grouped[key], base, step) for key in order}

    @property
    def kind(self) -> str:
        """``"log2"`` or ``"linear"``."""
        return self._kind

    @property
    def counts(self) -> tuple[int, ...]:
        """The count of each slot, from slot 0 to the last non-empty one."""
        return self._counts

    def slot_range(self, slot: int) -> tuple[int, int]:
        """The lowest and highest value (both included) that ``slot`` holds."""
        slot = _check.integer(slot, "slot", lo=0)
        if self._kind == "log2":
            if slot >= LOG2_SLOTS:
                raise ValueError(f"log2 slot {slot} is out of range: slots are 0..{LOG2_SLOTS - 1}")
            return (0 if slot == 0 else 1 << slot), (1 << (slot + 1)) - 1
        low = self._base + slot * self._step
        return low, low + self._step - 1

    @property
    def buckets(self) -> list[tuple[int, int, int]]:
        """``(low, high, count)`` for every slot from 0 to the last non-empty one (bounds included)."""
        return [(*self.slot_range(slot), count) for slot, count in enumerate(self._counts)]

    @property
    def total(self) -> int:
        """The number of values counted."""
        return sum(self._counts)

    def percentile(self, p: float) -> int:
        """The upper bound of the slot that holds the ``p``-th percentile (0 <= p <= 100).

        The value at that rank is at most the returned value and at least that
        slot's lowest value: a histogram cannot say more. The rank is computed
        in exact arithmetic, so counts past 2**53 (beyond a float's precision)
        give the same answer as small ones. ValueError when the histogram is
        empty or p is outside 0..100.
        """
        p = _check.number(p, "p", lo=0, hi=100)
        total = self.total
        if not total:
            raise ValueError("percentile of an empty histogram")
        # Fraction(p) is the float's exact value: p * total / 100 in floats rounds once the total
        # passes 2**53, and a rank above the total would match no slot.
        rank = max(1, math.ceil(Fraction(p) * total / 100))
        seen = 0
        for slot, count in enumerate(self._counts):
            seen += count
            if seen >= rank:
                return self.slot_range(slot)[1]
        raise AssertionError("unreachable: the rank is at most the total")  # pragma: no cover

    def to_numpy(self, dtype: Any = None) -> Any:
        """The buckets as a numpy array of shape ``(n, 3)``: low, high, count (numpy required).

        ``dtype=None`` picks ``uint64``, or ``int64`` when a bound is negative (a
        linear histogram with a negative base); OverflowError, naming the slot
        and the value, when a count or bound does not fit it (counts summed
        past 2**64, a linear histogram far from 0). ``dtype=object`` gives
        Python ints, exact at any size. Any other dtype is passed to numpy.
        """
        import numpy as np

        rows = self.buckets
        if dtype is None:
            signed = self._kind == "linear" and self._base < 0
            dtype = np.int64 if signed else np.uint64
            info = np.iinfo(dtype)
            flat = [value for row in rows for value in row]
            if flat and not info.min <= min(flat) <= max(flat) <= info.max:
                at = next(i for i, value in enumerate(flat) if not info.min <= value <= info.max)
                slot, what = divmod(at, 3)
                raise OverflowError(
                    f"to_numpy: the {('low', 'high', 'count')[what]} of slot {slot} is {flat[at]}, outside "
                    f"{np.dtype(dtype).name} ({info.min}..{info.max}); to_numpy(dtype=object) keeps exact "
                    "Python ints")
        return np.array(rows, dtype=dtype).reshape(-1, 3)

    def format(self, label: str = "value") -> str:
        """The text bcc's ``print_log2_hist`` / ``print_linear_hist`` print, without the last newline.

        ``label`` names the unit in the header (``usecs``, ``msecs``, ``kbytes``).
        An empty histogram formats as ``""``.
        """
        label = _check.string(label, "label")
        if not self._counts:
            return ""
        most = max(self._counts)
        if self._kind == "linear":
            lines = [f"     {label:<13} : count     distribution"]
            lines += [f"        {self._base + slot * self._step:<10} : {count:<8} |{_stars(count, most, STARS_MAX)}|"
                      for slot, count in enumerate(self._counts) if count]
            return "\n".join(lines)
        wide = len(self._counts) - 1 > 32
        width, stars = (20, STARS_MAX // 2) if wide else (10, STARS_MAX)
        lines = [f"{'':{15 if wide else 5}}{label:<{29 if wide else 19}} : count    distribution"]
        for slot, count in enumerate(self._counts):
            low, high = self.slot_range(slot)
            lines.append(f"{low:>{width}} -> {high:<{width}} : {count:<8} |{_stars(count, most, stars)}|")
        return "\n".join(lines)

    @staticmethod
    def format_per_key(histograms: Mapping[K, Histogram], label: str = "value", section: str = "key",
                       key_text: Callable[[K], str] = str) -> str:
        """Each histogram under a ``\\n{section} = {key_text(key)}`` line, as bcc's ``section_header`` prints.

        Empty histograms are skipped. An empty result is ``""``.
        """
        parts = []
        for key, hist in histograms.items():
            body = hist.format(label)
            if body:
                parts.append(f"\n{section} = {key_text(key)}\n{body}")
        return "\n".join(parts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Histogram):
            return NotImplemented
        return (self._kind, self._counts, self._base, self._step) == (other._kind, other._counts, other._base,
                                                                      other._step)

    def __hash__(self) -> int:
        return hash((self._kind, self._counts, self._base, self._step))

    def __repr__(self) -> str:
        extra = f", base={self._base}, step={self._step}" if self._kind == "linear" else ""
        return f"Histogram.{self._kind}({list(self._counts)!r}{extra})"
