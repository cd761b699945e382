"""The regression gate: thresholds, the screen against the baseline, and the A/B confirmation."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.measure.bench import Measurement, mann_whitney_greater

_THRESHOLD = re.compile(r"^\s*(?:(median)\s*:\s*)?([0-9]*\.?[0-9]+)\s*(%?)\s*$")


@dataclass(frozen=True)
class Threshold:
    """How much slower than its baseline a kernel may get, e.g. ``median:5%``."""

    stat: str
    fraction: float

    @classmethod
    def parse(cls, text: str) -> Threshold:
        m = _THRESHOLD.match(text)
        if not m:
            raise KtuneError(f"cannot read the threshold {text!r}",
                             hint="write it as median:5% (or median:0.05)")
        value = float(m.group(2))
        if not m.group(3) and value >= 1:
            raise KtuneError(f"the threshold {text!r} has no % sign and is not a fraction below 1",
                             hint=f"write median:{m.group(2)}% for {m.group(2)} percent")
        fraction = value / 100 if m.group(3) else value
        if not 0 < fraction < 10:
            raise KtuneError(f"the threshold {text!r} is out of range",
                             hint="use a positive percentage, e.g. median:5%")
        return cls(stat=m.group(1) or "median", fraction=fraction)

    def __str__(self) -> str:
        return f"{self.stat}:{self.fraction * 100:g}%"


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


ALPHA = 0.01


def confirm(a: Measurement, b: Measurement, threshold: Threshold) -> Confirmation:
    ratio = a.median / b.median
    p = mann_whitney_greater(a.samples, b.samples)
    return Confirmation(ratio=ratio, p_value=p, confirmed=ratio > 1 + threshold.fraction and p < ALPHA)
