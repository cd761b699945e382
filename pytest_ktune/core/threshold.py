"""A regression threshold (``median:5%``): parsed once, with a clear error for a bad string.

It lives in the core because a target may carry its own (``@ktune.target(threshold=...)``); the gate
(``gate.decision``) applies it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pytest_ktune.core.errors import KtuneError

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
