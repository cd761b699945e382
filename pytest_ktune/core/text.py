"""How times, parameters and messages are written for people: one formatter of each."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

# Characters XML 1.0 forbids even when escaped (compiler logs can carry them): spaces in one-line text.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


def us(value: float | None) -> str:
    """A time in microseconds, as a table cell: two decimals below 1,000, whole numbers above; '-' for none."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    return f"{value:.2f}" if abs(value) < 1000 else f"{value:,.0f}"


def rate(value: float | None) -> str:
    """A rate (GB/s, GFLOP/s) as a table cell: three significant figures below 100 (``0.0312``,
    ``3.12``, ``31.2``), whole numbers from 100 up (no thousands separator), so a tiny rate never
    reads as zero; '-' for none."""
    if value is None:
        return "-"
    if not math.isfinite(value) or value == 0:
        return str(value) if not math.isfinite(value) else "0"
    digits = max(0, 2 - math.floor(math.log10(abs(value))))
    text = f"{value:.{digits}f}"
    return text if abs(float(text)) < 100 else f"{value:.0f}"


def seconds(value: float) -> str:
    """A time in seconds in a sentence, with its unit: ``2.81 µs`` below a millisecond, else ``1.234 ms``."""
    return f"{value * 1e6:.2f} µs" if value < 1e-3 else f"{value * 1e3:.3f} ms"


def duration(value: float) -> str:
    """A wall time: ``12.3 s``, ``4 min 05 s`` or ``1 h 02 min``."""
    s = max(value, 0.0)
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"


def params(values: Mapping[str, object]) -> str:
    """A configuration as ``BLOCK=256, VEC=4``."""
    return ", ".join(f"{k}={v}" for k, v in values.items())


def one_line(text: str, limit: int = 400) -> str:
    """``text`` on one line: control characters and whitespace runs made single spaces, cut to ``limit``
    characters with '…'."""
    flat = " ".join(_CONTROL.sub(" ", str(text)).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def first_line(text: str) -> str:
    """The first non-blank line of ``text``, stripped; '' when there is none."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")
