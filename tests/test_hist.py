"""Histogram: slots to buckets, totals, percentiles, and bcc's printed layout, character for character.

The expected text is written out by hand from the layout bcc and libbpf-tools
print (``print_log2_hist``: ``%10lld -> %-10lld : %-8d |stars|`` under
``     %-19s : count    distribution``; 40-character bars scaled to the fullest
slot; the wide variant past slot 32), not produced by the code under test.
"""

from __future__ import annotations

import numpy as np
import pytest

from pylibbpf import Histogram

# slot 0: 0-1, slot 1: 2-3, slot 2: 4-7, slot 3: 8-15, slot 4: 16-31
COUNTS = {0: 2, 2: 5, 3: 20, 4: 10}


def test_log2_buckets_and_total() -> None:
    h = Histogram.log2(COUNTS)
    assert h.buckets == [(0, 1, 2), (2, 3, 0), (4, 7, 5), (8, 15, 20), (16, 31, 10)]
    assert h.total == 37
    # a sequence is the same histogram as the mapping; trailing zeros do not add rows
    assert Histogram.log2([2, 0, 5, 20, 10, 0, 0]) == h


def test_log2_format_exact_text() -> None:
    text = Histogram.log2(COUNTS).format("usecs")
    assert text.splitlines() == [
        "     usecs               : count    distribution",
        "         0 -> 1          : 2        |****                                    |",
        "         2 -> 3          : 0        |                                        |",
        "         4 -> 7          : 5        |**********                              |",
        "         8 -> 15         : 20       |****************************************|",
        "        16 -> 31         : 10       |********************                    |",
    ]


def test_log2_wide_layout_past_slot_32() -> None:
    # A last slot above 32 widens the columns to 20 and halves the bars to 20 stars.
    h = Histogram.log2({0: 4, 33: 2})
    lines = h.format("nsecs").splitlines()
    assert lines[0] == "               nsecs                         : count    distribution"
    assert lines[1] == "                   0 -> 1                    : 4        |********************|"
    assert lines[-1] == "          8589934592 -> 17179869183          : 2        |**********          |"
    assert len(lines) == 1 + 34


def test_empty_prints_nothing() -> None:
    h = Histogram.log2([0, 0, 0])
    assert h.format("usecs") == ""
    assert h.buckets == [] and h.total == 0
    with pytest.raises(ValueError, match="empty"):
        h.percentile(50)


def test_percentiles() -> None:
    h = Histogram.log2(COUNTS)  # 2 values in 0-1, 5 in 4-7, 20 in 8-15, 10 in 16-31
    assert h.percentile(0) == 1
    assert h.percentile(5) == 1  # rank 2 of 37
    assert h.percentile(6) == 7  # rank 3
    assert h.percentile(50) == 15  # rank 19: within 8..27
    assert h.percentile(72) == 15  # rank 27 (26.64 rounded up): the last value at most 15
    assert h.percentile(73) == 31  # rank 28 (27.01 rounded up): the first above
    assert h.percentile(100) == 31
    with pytest.raises(ValueError, match="p must be <= 100"):
        h.percentile(101)


def test_linear_buckets_and_format() -> None:
    h = Histogram.linear([0, 3, 0, 6, 1], base=10, step=5)
    assert h.buckets == [(10, 14, 0), (15, 19, 3), (20, 24, 0), (25, 29, 6), (30, 34, 1)]
    assert h.total == 10
    assert h.percentile(30) == 19 and h.percentile(90) == 29 and h.percentile(100) == 34
    # print_linear_hist: one row per non-empty slot, labelled with its lowest value
    assert h.format("msecs").splitlines() == [
        "     msecs         : count     distribution",
        "        15         : 3        |********************                    |",
        "        25         : 6        |****************************************|",
        "        30         : 1        |******                                  |",
    ]


def test_to_numpy() -> None:
    arr = Histogram.log2(COUNTS).to_numpy()
    assert arr.dtype == np.uint64 and arr.shape == (5, 3)
    assert arr[:, 2].sum() == 37
    assert arr[3].tolist() == [8, 15, 20]


def test_per_key_and_sections() -> None:
    counts = {(200, 1): 4, (100, 0): 1, (100, 2): 2, (200, 0): 0}
    hists = Histogram.per_key(counts)
    assert list(hists) == [100, 200]
    assert hists[100].buckets == [(0, 1, 1), (2, 3, 0), (4, 7, 2)]
    assert hists[200].total == 4
    text = Histogram.format_per_key(hists, "usecs", section="pid")
    assert text.splitlines() == [
        "",
        "pid = 100",
        "     usecs               : count    distribution",
        "         0 -> 1          : 1        |********************                    |",
        "         2 -> 3          : 0        |                                        |",
        "         4 -> 7          : 2        |****************************************|",
        "",
        "pid = 200",
        "     usecs               : count    distribution",
        "         0 -> 1          : 0        |                                        |",
        "         2 -> 3          : 4        |****************************************|",
    ]
    # pairs work as well as a mapping, and repeated (key, slot) pairs add up
    pairs = [(("a", 3), 1), (("a", 3), 2)]
    assert Histogram.per_key(pairs, kind="linear")["a"].buckets[-1] == (3, 3, 3)


def test_numpy_counts_accepted() -> None:
    assert Histogram.log2(np.array([1, 2], dtype=np.uint64)).total == 3


@pytest.mark.parametrize(("counts", "error", "match"), [
    ({64: 1}, ValueError, "log2 slot 64 is out of range"),
    ({-1: 1}, ValueError, "slot -1 is out of range"),
    ([1, -2], ValueError, "count of slot 1 must be >= 0"),
    ([1.5], TypeError, "count of slot 0 must be an int"),
    ({"x": 1}, TypeError, "slot must be an int"),
    ("abc", TypeError, "counts must be a sequence"),
    (None, TypeError, "counts must be a sequence"),
    ([True], TypeError, "count of slot 0 must be an int"),
])
def test_bad_counts(counts: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        Histogram.log2(counts)  # type: ignore[arg-type]


def test_bad_linear_arguments() -> None:
    with pytest.raises(ValueError, match="step must be >= 1"):
        Histogram.linear([1], step=0)
    with pytest.raises(TypeError, match="base must be an int"):
        Histogram.linear([1], base=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kind must be one of"):
        Histogram.per_key({}, kind="log10")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"\(\(key, slot\), count\) pairs"):
        Histogram.per_key([(1, 2)])  # type: ignore[list-item]


def test_percentile_is_exact_past_two_to_the_53() -> None:
    # A float holds 2**53 + 3 as 2**53 + 4 and 2**64 - 1 as 2**64: p * total / 100 in floats
    # gave a rank above the total, which no slot reached.
    for huge in (2**53 + 3, 2**64 - 1):
        h = Histogram.log2([0, huge])
        assert h.percentile(100) == 3
        assert h.percentile(0) == 3
    big = Histogram.log2([2**60, 1, 2**70])
    assert big.percentile(100) == 7
    # 2**60 / (2**70 + 2**60 + 1) of the values sit in slot 0: just over 0.0975%.
    assert big.percentile(0.0975) == 1
    assert big.percentile(0.0976) == 7


def test_to_numpy_past_64_bits_is_exact_or_a_clear_error() -> None:
    h = Histogram.log2({0: 1, 3: 2**64})
    with pytest.raises(OverflowError, match=r"the count of slot 3 is 18446744073709551616, outside uint64.*"
                                            r"dtype=object"):
        h.to_numpy()
    exact = h.to_numpy(dtype=object)
    assert exact.shape == (4, 3) and exact[3].tolist() == [8, 15, 2**64]
    assert Histogram.log2({0: 1, 3: 2**64 - 1}).to_numpy()[3].tolist() == [8, 15, 2**64 - 1]
    low = Histogram.linear([1, 2], base=-(2**63) - 1)
    with pytest.raises(OverflowError, match=r"the low of slot 0 is -9223372036854775809, outside int64"):
        low.to_numpy()
    assert low.to_numpy(dtype=object)[1].tolist() == [-(2**63), -(2**63), 2]
