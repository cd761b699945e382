"""How numbers are written for people (core/text): no rate reads as zero unless it is zero."""

from __future__ import annotations

import math

from pytest_ktune.core.text import rate, us


def test_a_rate_keeps_three_significant_figures_below_a_hundred() -> None:
    assert rate(0.0312345) == "0.0312"
    assert rate(3.1234) == "3.12"
    assert rate(31.234) == "31.2"


def test_a_rate_is_whole_from_a_hundred_without_separators() -> None:
    assert rate(99.96) == "100"
    assert rate(4234.5) == "4234"
    assert float(rate(4234.5)) == 4234


def test_zero_none_and_non_finite_rates() -> None:
    assert rate(0.0) == "0"
    assert rate(None) == "-"
    assert rate(math.inf) == "inf"


def test_a_tiny_positive_rate_is_not_written_as_zero() -> None:
    assert float(rate(1.7e-5)) > 0


def test_times_in_microseconds() -> None:
    assert us(1.234) == "1.23"
    assert us(12345.6) == "12,346"
    assert us(None) == "-"
