"""The shared argument checks: every refusal names the parameter and the value."""

from __future__ import annotations

import math

import pytest

from pylibbpf import _check


@pytest.mark.parametrize("value", [None, 0.5, "1", True, b"1"])
def test_integer_refuses_non_ints_by_name(value: object) -> None:
    with pytest.raises(TypeError, match=r"page_cnt must be an int, got"):
        _check.integer(value, "page_cnt")


def test_integer_bounds_name_the_value() -> None:
    assert _check.integer(5, "n", lo=0, hi=5) == 5
    with pytest.raises(ValueError, match=r"cpu must be >= 0, got -1"):
        _check.integer(-1, "cpu", lo=0)
    with pytest.raises(ValueError, match=r"batch_size must be <= 2147483647, got 2147483648"):
        _check.integer(2**31, "batch_size", hi=_check.INT32_MAX)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_number_refuses_nan_and_infinities(value: float) -> None:
    with pytest.raises(ValueError, match="drain_timeout must be a finite number"):
        _check.number(value, "drain_timeout", lo=0)


def test_number_open_lower_bound() -> None:
    assert _check.number(0.5, "sample_rate", lo=0, lo_open=True, hi=1) == 0.5
    with pytest.raises(ValueError, match=r"sample_rate must be > 0"):
        _check.number(0, "sample_rate", lo=0, lo_open=True, hi=1)
    with pytest.raises(TypeError, match=r"sample_rate must be a number, got None"):
        _check.number(None, "sample_rate")


def test_timeouts() -> None:
    assert _check.timeout_seconds(None) is None
    assert _check.timeout_seconds(2) == 2.0
    with pytest.raises(ValueError, match=r"timeout must be >= 0"):
        _check.timeout_seconds(-1)
    assert _check.timeout_ms(-1) == -1
    with pytest.raises(ValueError, match=r"timeout_ms must be >= -1, got -2"):
        _check.timeout_ms(-2)
    with pytest.raises(TypeError, match=r"timeout_ms must be an int, got None"):
        _check.timeout_ms(None)


def test_long_timeouts_mean_forever_not_overflow() -> None:
    # 30 days in seconds does not fit libbpf's int milliseconds: it waits forever.
    assert _check.deadline(30 * 86400) is None
    assert _check.seconds_to_ms(30 * 86400) == -1
    assert _check.seconds_to_ms(None) == -1
    assert 0 <= _check.seconds_to_ms(0.25) <= 250
    assert _check.seconds_to_ms(0) == 0


def test_seconds_to_ms_rounds_up_and_checks_every_unusual_value() -> None:
    # Plain numbers take a path without a clock read; it must agree with the checked one.
    assert _check.seconds_to_ms(0.01) == 10
    assert _check.seconds_to_ms(1) == 1000
    assert _check.seconds_to_ms(0.0001) == 1   # a positive timeout waits, rounded up
    assert _check.seconds_to_ms(86400) == 86_400_000
    assert _check.seconds_to_ms(_check.MAX_TIMEOUT_MS / 1000) == -1
    with pytest.raises(TypeError, match=r"timeout must be a number, got True"):
        _check.seconds_to_ms(True)
    for bad in (float("nan"), float("inf"), -0.5, -1):
        with pytest.raises(ValueError, match=r"timeout must be"):
            _check.seconds_to_ms(bad)


def test_callable_choice_flags_paths() -> None:
    with pytest.raises(TypeError, match=r"callback must be callable, got 'x' \(str\)"):
        _check.callable_("x", "callback")
    _check.optional_callable(None, "lost_callback")
    assert _check.choice("native", "mode", ("default", "native")) == "native"
    with pytest.raises(ValueError, match=r"mode must be one of 'default', 'native'; got 'fast'"):
        _check.choice("fast", "mode", ("default", "native"))
    with pytest.raises(ValueError, match=r"flags must be >= 0, got -1"):
        _check.flags(-1)
    assert _check.path(__import__("pathlib").Path("/tmp"), "path") == "/tmp"
    with pytest.raises(TypeError, match=r"path must be a path"):
        _check.path(3, "path")
    with pytest.raises(ValueError, match=r"binary must not contain a NUL"):
        _check.path("a\0b", "binary")


def test_buffer() -> None:
    assert bytes(_check.buffer(bytearray(b"ab"), "data")) == b"ab"
    with pytest.raises(TypeError, match=r"data must be bytes-like, got a str"):
        _check.buffer("ab", "data")
    with pytest.raises(TypeError, match=r"data must be bytes-like, got 3 \(int\)"):
        _check.buffer(3, "data")
