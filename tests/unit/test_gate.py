"""The regression gate: thresholds, the screen against a baseline, and the A/B confirmation."""

from __future__ import annotations

import pytest

from pytest_ktune import KtuneError
from pytest_ktune.gate.decision import ALPHA, Threshold, confirm, screen
from pytest_ktune.measure.bench import Measurement, mann_whitney_greater


def _m(*samples: float) -> Measurement:
    return Measurement(samples=tuple(samples), repeats=10, flushed=True, rotation=1)


def _around(center: float, n: int = 20, spread: float = 0.01) -> Measurement:
    """``n`` samples spread evenly over ``center`` +- ``spread`` (relative)."""
    return _m(*(center * (1 - spread + 2 * spread * i / (n - 1)) for i in range(n)))


@pytest.mark.parametrize(("text", "fraction"), [
    ("median:5%", 0.05), ("5%", 0.05), ("median:0.05", 0.05), ("0.05", 0.05),
    (" median : 12.5 % ", 0.125), ("median:.5%", 0.005), ("150%", 1.5),
])
def test_threshold_parse(text: str, fraction: float) -> None:
    t = Threshold.parse(text)
    assert t.stat == "median"
    assert t.fraction == pytest.approx(fraction)


def test_threshold_prints_as_it_is_written() -> None:
    assert str(Threshold.parse("median:0.05")) == "median:5%"
    assert str(Threshold.parse("12.5%")) == "median:12.5%"


@pytest.mark.parametrize("text", [
    "", "median", "median:", "mean:5%", "p99:5%", "5%%", "-5%", "five percent", "median:5%:3", "0x10",
])
def test_unreadable_thresholds_are_errors(text: str) -> None:
    with pytest.raises(KtuneError, match="cannot read the threshold"):
        Threshold.parse(text)


@pytest.mark.parametrize("text", ["0%", "median:0", "1000%"])
def test_thresholds_out_of_range_are_errors(text: str) -> None:
    with pytest.raises(KtuneError, match="out of range"):
        Threshold.parse(text)


@pytest.mark.parametrize("text", ["median:5", "5", "median:10"])
def test_a_bare_number_of_one_or_more_asks_for_a_percent_sign(text: str) -> None:
    with pytest.raises(KtuneError, match="no % sign") as info:
        Threshold.parse(text)
    assert "%" in info.value.hint


# -- screen ------------------------------------------------------------------
FIVE = Threshold.parse("median:5%")


def test_screen_flags_a_clear_slowdown() -> None:
    s = screen(_around(1.20), base_median=1.0, base_ci_high=1.01, threshold=FIVE)
    assert s.ratio == pytest.approx(1.20)
    assert s.beyond_noise and s.suspect


def test_screen_lets_a_slowdown_within_the_threshold_pass() -> None:
    s = screen(_around(1.03, spread=0.002), base_median=1.0, base_ci_high=1.01, threshold=FIVE)
    assert s.beyond_noise, "3 % slower, measured precisely, is beyond the noise"
    assert not s.suspect, "but within the 5 % threshold"


def test_screen_does_not_suspect_a_slowdown_within_the_noise() -> None:
    noisy = _m(0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7)
    s = screen(noisy, base_median=1.0, base_ci_high=1.05, threshold=FIVE)
    assert s.ratio > 1.05
    assert not s.beyond_noise and not s.suspect


def test_screen_does_not_suspect_a_speedup() -> None:
    s = screen(_around(0.7), base_median=1.0, base_ci_high=1.01, threshold=FIVE)
    assert s.ratio < 1 and not s.beyond_noise and not s.suspect


# -- confirm -----------------------------------------------------------------
def test_confirm_a_clear_regression() -> None:
    c = confirm(_around(1.25), _around(1.0), FIVE)
    assert c.ratio == pytest.approx(1.25)
    assert c.p_value < ALPHA
    assert c.confirmed


def test_confirm_rejects_a_significant_but_small_slowdown() -> None:
    c = confirm(_around(1.02, spread=0.001), _around(1.0, spread=0.001), FIVE)
    assert c.p_value < ALPHA and not c.confirmed


def test_confirm_rejects_a_large_but_insignificant_slowdown() -> None:
    # The medians differ by 70 %, but five samples each, overlapping, prove nothing at 1 %.
    c = confirm(_m(0.9, 1.6, 1.7, 1.8, 1.9), _m(0.95, 1.0, 1.05, 1.1, 1.0), FIVE)
    assert c.ratio == pytest.approx(1.7)
    assert c.p_value >= ALPHA and not c.confirmed


def test_confirm_rejects_identical_timings() -> None:
    c = confirm(_around(1.0), _around(1.0), FIVE)
    assert c.ratio == pytest.approx(1.0) and not c.confirmed and c.p_value > 0.3


# -- Mann-Whitney --------------------------------------------------------------
def test_mann_whitney_clearly_shifted_samples() -> None:
    slow = [2.0 + 0.01 * i for i in range(15)]
    fast = [1.0 + 0.01 * i for i in range(15)]
    assert mann_whitney_greater(slow, fast) < 1e-4
    assert mann_whitney_greater(fast, slow) > 0.999


def test_mann_whitney_identical_samples() -> None:
    a = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7]
    p = mann_whitney_greater(a, list(a))
    assert 0.4 < p < 0.65
    assert mann_whitney_greater([3.0] * 10, [3.0] * 10) == 1.0  # all tied: no evidence at all


def test_mann_whitney_overlapping_samples_are_not_significant() -> None:
    a = [1.0, 1.2, 1.4, 1.6, 1.8, 2.0]
    b = [1.1, 1.3, 1.5, 1.7, 1.9, 2.1]
    assert mann_whitney_greater(a, b) > 0.3
    assert mann_whitney_greater(b, a) > 0.3


def test_mann_whitney_grows_more_certain_with_more_samples() -> None:
    def shifted(n: int) -> tuple[list[float], list[float]]:
        base = [1.0 + 0.1 * (i % 10) for i in range(n)]
        return [v + 0.15 for v in base], base

    p_small = mann_whitney_greater(*shifted(10))
    p_large = mann_whitney_greater(*shifted(100))
    assert p_large < p_small
    assert p_large < ALPHA
