"""The regression gate: thresholds, the screen against the baseline, and the A/B confirmation."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_ktune.core.threshold import Threshold
from pytest_ktune.measure.ab import ALPHA, Stop
from pytest_ktune.measure.bench import Measurement, mann_whitney_greater

__all__ = ["ALPHA", "Confirmation", "Screen", "Threshold", "confirm", "faster", "screen", "stop_rule"]


@dataclass(frozen=True)
class Screen:
    """The first look: current median against the recorded baseline's."""

    ratio: float
    beyond_noise: bool
    suspect: bool


def screen(current: Measurement, base_median: float, base_ci_high: float, threshold: Threshold) -> Screen:
    ratio = current.median / base_median
    beyond = current.ci[0] > base_ci_high
    return Screen(ratio=ratio, beyond_noise=beyond, suspect=beyond and ratio > 1 + threshold.fraction)


@dataclass(frozen=True)
class Confirmation:
    """Interleaved A/B timing in this process: the current kernel (A) against the baseline's (B)."""

    ratio: float
    p_value: float
    confirmed: bool


def stop_rule(threshold: Threshold) -> Stop:
    """When the A/B may end before its sample is complete: once A is certainly slower than the
    threshold allows, or certainly within it, at ALPHA over the planned looks. ``confirm`` judges
    the samples either way."""
    return Stop.threshold(threshold.fraction, ALPHA)


def confirm(a: Measurement, b: Measurement, threshold: Threshold) -> Confirmation:
    ratio = a.median / b.median
    p = mann_whitney_greater(a.samples, b.samples)
    return Confirmation(ratio=ratio, p_value=p, confirmed=ratio > 1 + threshold.fraction and p < ALPHA)


def faster(a: Measurement, b: Measurement, threshold: Threshold) -> bool:
    """Whether A ran faster than B beyond the threshold and the noise of both (the A/B's "faster")."""
    return a.median < b.median * (1 - threshold.fraction) and mann_whitney_greater(b.samples, a.samples) < ALPHA
