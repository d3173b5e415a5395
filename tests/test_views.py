"""pylibbpf._views on synthetic offset arrays (no kernel): which batches take the cached-slice path."""

from __future__ import annotations

import array

import pytest

from pylibbpf import _views


def packed(lens: list[int], first: int = 0) -> list[int]:
    """Offsets as plb_batch_append writes them: each record at the 8-byte aligned end of the one before."""
    starts, at = [], first
    for n in lens:
        starts.append(at)
        at = (at + n + 7) & ~7
    return starts


@pytest.mark.parametrize("kind", ["list", "array"])
def test_uniform_stride(kind: str) -> None:
    def stride(lens: list[int], first: int = 0, base: int = 0) -> int:
        starts = packed(lens, base)
        if kind == "array":
            return _views.uniform_stride(array.array("I", starts), array.array("I", lens), first, len(lens))
        return _views.uniform_stride(starts, lens, first, len(lens))

    assert stride([32] * 100) == 32
    assert stride([24] * 100) == 24
    assert stride([13] * 100) == 16
    assert stride([13] * 100, base=64) == 16
    assert stride([32] * 99 + [40]) == 0              # one longer record
    assert stride([40] + [32] * 99) == 0
    assert stride([32] * 50 + [24] + [32] * 49) == 0
    assert stride([32] * 50 + [0] + [32] * 49) == 0   # a perf lost-sample notice (no bytes)
    assert stride([0] * 10) == 0
    assert stride([]) == 0
    assert stride([48] + [32] * 99, first=1) == 32    # the records from `first` on
    assert stride([32] * 10, first=10) == 0
    assert stride([32] * _views.MIN_RECORDS) == 32
    assert stride([32] * (_views.MIN_RECORDS - 1)) == 0  # too few to pay for the check


def test_a_gap_between_equal_records_is_not_uniform() -> None:
    starts = array.array("I", [0, 32, 64, 104, 136])
    lens = array.array("I", [32] * 5)
    assert _views.uniform_stride(starts, lens, 0, 5) == 0


def test_chunk_slices_cover_one_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_views, "CHUNK", 5)
    assert _views.chunk_slices(16, 13) == [slice(k * 16, k * 16 + 13) for k in range(5)]
    assert _views.chunk_slices(32, 32) == [slice(k * 32, k * 32 + 32) for k in range(5)]
    assert _views.chunk_slices(32, 32) is _views.chunk_slices(32, 32)   # made once
