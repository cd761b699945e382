"""Small SVG plots of a study: its history and its parameter importances."""

from __future__ import annotations

import html
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_ktune.core.text import one_line as _one_line
from pytest_ktune.core.text import params as _params
from pytest_ktune.core.text import us as _us
from pytest_ktune.tuner.outcome import StudySummary, TrialRow

_BLUE, _PURPLE, _GREEN, _ORANGE, _RED, _GREY = (
    "#1f77b4", "#9467bd", "#2ca02c", "#ff7f0e", "#d62728", "#8c8c8c")


_MARK_COLOURS = {"infeasible": _ORANGE, "failed": _RED, "duplicate": _GREY}


_FONT = 'font-family="sans-serif" font-size="12"'


_CHAR_W = 7.0  # rough width of one character at font-size 12, for layout only


# Characters XML 1.0 forbids even when escaped; compiler logs in a ``reason`` can carry them.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")



_W, _H = 760, 380


_LEFT, _RIGHT, _TOP, _BOTTOM = 76, 24, 56, 52


_MARK_BAND = 16


def history_svg(summary: StudySummary, rows: Sequence[TrialRow]) -> str:
    """The trial-history chart: timed values, the best so far, and the trials that gave no time."""
    ordered = sorted(rows, key=lambda r: r.number)
    timed = [r for r in ordered if r.state == "timed" and r.value_us is not None
             and math.isfinite(r.value_us) and r.value_us >= 0]
    marked = [r for r in ordered if r.state in _MARK_COLOURS]
    x0, x1 = _LEFT, _W - _RIGHT
    y0, y1 = _H - _BOTTOM, _TOP  # screen y grows downwards: y0 is the bottom of the plot area
    parts = svg_open(_W, _H)
    parts.append(_text(12, 20, history_title(summary), weight="bold"))

    # x: trial numbers, padded so that the first and last points clear the axes.
    numbers = [r.number for r in ordered] or [0]
    lo_n, hi_n = min(numbers), max(numbers)
    pad = max(0.5, (hi_n - lo_n) * 0.03) if hi_n > lo_n else 1.0
    dom_x = (lo_n - pad, hi_n + pad)

    def sx(n: float) -> float:
        return x0 + (n - dom_x[0]) / (dom_x[1] - dom_x[0]) * (x1 - x0)

    values = [r.value_us for r in timed if r.value_us is not None]
    scale = _YScale.fit(values)
    data_y0 = y0 - _MARK_BAND  # the band along the bottom holds the trials that gave no time

    def sy(v: float) -> float:
        return data_y0 - scale.frac(v) * (data_y0 - y1)

    # Grid and axes first, so data draws over them.
    for t in scale.ticks:
        y = sy(t)
        parts.append(f'<line x1="{x0}" y1="{coord(y)}" x2="{x1}" y2="{coord(y)}" stroke="#e6e6e6"/>')
        parts.append(_text(x0 - 6, y + 4, scale.label(t), anchor="end"))
    for n in _int_ticks(lo_n, hi_n):
        x = sx(n)
        parts.append(f'<line x1="{coord(x)}" y1="{y0}" x2="{coord(x)}" y2="{y0 + 5}" stroke="#333"/>')
        parts.append(_text(x, y0 + 18, str(n), anchor="middle"))
    parts.append(f'<path d="M{x0},{y1} V{y0} H{x1}" fill="none" stroke="#333"/>')
    parts.append(_text((x0 + x1) / 2, _H - 10, "trial number", anchor="middle"))
    y_label = "median µs (log scale)" if scale.log else "median µs"
    parts.append(_text(16, (y0 + y1) / 2, y_label, anchor="middle",
                       transform=f"rotate(-90 16 {coord((y0 + y1) / 2)})"))

    if not timed:
        message = "no trial was timed" if ordered else "no trials"
        parts.append(_text((x0 + x1) / 2, (data_y0 + y1) / 2, message, anchor="middle", fill=_GREY))

    # The best so far: a step line that drops at each improvement and runs on to the last trial.
    if timed:
        first = timed[0]
        best_v = first.value_us or 0.0
        path = [f"M{coord(sx(first.number))},{coord(sy(best_v))}"]
        for r in timed[1:]:
            v = r.value_us or 0.0
            if v < best_v:
                best_v = v
                path.append(f"H{coord(sx(r.number))} V{coord(sy(v))}")
        path.append(f"H{coord(sx(hi_n))}")
        parts.append(f'<path class="best-so-far" d="{" ".join(path)}" fill="none" stroke="{_GREEN}" '
                     'stroke-width="2"/>')

    for r in timed:
        v = r.value_us or 0.0
        colour = _PURPLE if r.source == "warm-start" else _BLUE
        tip = f"trial {r.number} ({r.source}): {_us(v)} µs, {_params(r.params)}"
        parts.append(f'<circle class="point" cx="{coord(sx(r.number))}" cy="{coord(sy(v))}" r="3.5" '
                     f'fill="{colour}" fill-opacity="0.8"><title>{_esc(tip)}</title></circle>')

    # Trials without a time sit on the bottom edge, as short ticks coloured by state.
    for r in marked:
        x = sx(r.number)
        tip = f"trial {r.number}: {r.state}" + (f", {_one_line(r.reason, 200)}" if r.reason else "")
        parts.append(f'<line class="mark {r.state}" x1="{coord(x)}" y1="{y0 - 2}" x2="{coord(x)}" '
                     f'y2="{y0 - 12}" stroke="{_MARK_COLOURS[r.state]}" stroke-width="2">'
                     f"<title>{_esc(tip)}</title></line>")

    parts += _legend(timed, marked, y=38)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


TITLE_CHARS = int((_W - 24) / _CHAR_W)  # what the chart's width holds at the title's font size


def history_title(summary: StudySummary) -> str:
    """``Trial history: TARGET [KEY] on DEVICE``, cut to the chart's width: the target's folders and the
    device's name give way first, never the key that tells one study of a target from another."""
    key = ", ".join(f"{k}={v}" for k, v in summary.key.items())
    target, device = _one_line(summary.target, 200), _one_line(summary.device, 200)
    fixed = len("Trial history:  [] on ") + len(key)
    room = max(TITLE_CHARS - fixed, 20)
    if len(target) + len(device) > room:
        device = _one_line(device, max(room - min(len(target), room // 2), 8))
        if len(target) + len(device) > room:
            name = target.rpartition("::")[2]
            target = name if len(name) + len(device) <= room else _one_line(name, max(room - len(device), 8))
    return f"Trial history: {target} [{key}] on {device}"


def _legend(timed: Sequence[TrialRow], marked: Sequence[TrialRow], y: float) -> list[str]:
    entries: list[tuple[str, str, str]] = []  # (shape, colour, label)
    if any(r.source != "warm-start" for r in timed):
        entries.append(("dot", _BLUE, "timed"))
    if any(r.source == "warm-start" for r in timed):
        entries.append(("dot", _PURPLE, "timed (warm start)"))
    if timed:
        entries.append(("line", _GREEN, "best so far"))
    present = {r.state for r in marked}
    entries += [("tick", colour, state) for state, colour in _MARK_COLOURS.items() if state in present]
    out: list[str] = []
    x = float(_LEFT)
    for shape, colour, label in entries:
        if shape == "dot":
            out.append(f'<circle class="legend" cx="{coord(x + 5)}" cy="{coord(y - 4)}" r="3.5" fill="{colour}"/>')
        elif shape == "line":
            out.append(f'<line class="legend" x1="{coord(x)}" y1="{coord(y - 4)}" x2="{coord(x + 12)}" '
                       f'y2="{coord(y - 4)}" stroke="{colour}" stroke-width="2"/>')
        else:
            out.append(f'<line class="legend" x1="{coord(x + 5)}" y1="{coord(y + 1)}" x2="{coord(x + 5)}" '
                       f'y2="{coord(y - 9)}" stroke="{colour}" stroke-width="2"/>')
        out.append(_text(x + 16, y, label))
        x += 16 + _CHAR_W * len(label) + 18
    return out


@dataclass(frozen=True)
class _YScale:
    """A y axis fitted to the timed values: linear, or logarithmic when they span more than 10×."""

    lo: float
    hi: float
    log: bool
    ticks: tuple[float, ...]
    step: float

    @classmethod
    def fit(cls, values: Sequence[float]) -> _YScale:
        if not values:
            return cls(0.0, 1.0, False, (), 1.0)
        lo, hi = min(values), max(values)
        if lo > 0 and hi / lo > 10:
            lo_l, hi_l = math.log10(lo) - 0.05, math.log10(hi) + 0.05
            ticks = tuple(m * 10.0**d for d in range(math.floor(lo_l), math.ceil(hi_l) + 1)
                          for m in (1, 2, 5) if lo_l <= math.log10(m * 10.0**d) <= hi_l)
            return cls(lo_l, hi_l, True, ticks, 0.0)
        # Identical values get a band around them, so the points sit mid-plot.
        pad = (hi - lo) * 0.08 if hi > lo else max(abs(lo) * 0.05, 0.01)
        lo_p, hi_p = max(lo - pad, 0.0) if lo >= 0 else lo - pad, hi + pad
        step = _nice_step(hi_p - lo_p, 5)
        first = math.ceil(lo_p / step - 1e-9)
        ticks = tuple(k * step for k in range(first, math.floor(hi_p / step + 1e-9) + 1))
        return cls(lo_p, hi_p, False, ticks, step)

    def frac(self, v: float) -> float:
        """Where ``v`` sits between the bottom (0) and the top (1) of the plot."""
        if self.log:
            return (math.log10(max(v, 1e-300)) - self.lo) / (self.hi - self.lo)
        return (v - self.lo) / (self.hi - self.lo)

    def label(self, v: float) -> str:
        if self.log:
            return f"{v:g}"
        return f"{v:.{_decimals(self.step)}f}"


def _nice_step(span: float, count: int, *, integer: bool = False) -> float:
    """A step of 1, 2, 2.5 or 5 times a power of ten giving about ``count`` intervals over ``span``."""
    raw = span / max(count, 1)
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    mag = 10.0 ** math.floor(math.log10(raw))
    mantissas = (1.0, 2.0, 5.0, 10.0) if integer else (1.0, 2.0, 2.5, 5.0, 10.0)
    step = next(m * mag for m in mantissas if raw <= m * mag * (1 + 1e-9))
    return max(step, 1.0) if integer else step


def _int_ticks(lo: int, hi: int) -> list[int]:
    step = int(_nice_step(hi - lo, 8, integer=True)) if hi > lo else 1
    return list(range(math.ceil(lo / step) * step, hi + 1, step))


def _decimals(step: float) -> int:
    for d in range(7):
        scaled = step * 10**d
        if abs(scaled - round(scaled)) < 1e-6 * max(1.0, scaled):
            return d
    return 6


def importance_svg(importances: Mapping[str, float]) -> str:
    """Horizontal bars of parameter importances, largest first."""
    bars = sorted(clean_importances(importances).items(), key=lambda kv: (-kv[1], kv[0]))
    names = [_one_line(k, 28) for k, _ in bars]
    # Parameter names are mostly capitals, wider than the average character.
    label_w = min(max((len(n) for n in names), default=4) * 8.5 + 20, 260)
    row_h, top, width = 26, 40, 640
    height = top + row_h * len(bars) + 16
    x0, x1 = label_w, width - 70
    peak = max((v for _, v in bars), default=0.0) or 1.0
    parts = svg_open(width, height)
    parts.append(_text(12, 22, "Parameter importance", weight="bold"))
    for i, ((name, value), shown) in enumerate(zip(bars, names, strict=True)):
        y = top + i * row_h
        length = max(value, 0.0) / peak * (x1 - x0)
        parts.append(_text(x0 - 8, y + 15, shown, anchor="end"))
        parts.append(f'<rect class="bar" x="{coord(x0)}" y="{y + 3}" width="{coord(length)}" height="{row_h - 8}" '
                     f'fill="{_BLUE}"><title>{_esc(f"{name}: {value:.4f}")}</title></rect>')
        parts.append(_text(x0 + length + 6, y + 15, f"{value:.3f}"))
    bottom = top + row_h * len(bars)
    parts.append(f'<line x1="{coord(x0)}" y1="{top}" x2="{coord(x0)}" y2="{bottom}" stroke="#333"/>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def clean_importances(importances: Mapping[str, float] | None) -> dict[str, float]:
    if not importances:
        return {}
    return {str(k): float(v) for k, v in importances.items() if math.isfinite(float(v))}


def svg_open(width: int, height: int) -> list[str]:
    return ['<?xml version="1.0" encoding="UTF-8"?>',
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">',
            f'<rect width="{width}" height="{height}" fill="white"/>']


def _text(x: float, y: float, content: str, *, anchor: str = "start", weight: str = "normal",
          fill: str = "#222", transform: str = "") -> str:
    extra = f' transform="{_esc(transform)}"' if transform else ""
    return (f'<text x="{coord(x)}" y="{coord(y)}" {_FONT} text-anchor="{anchor}" font-weight="{weight}" '
            f'fill="{fill}"{extra}>{_esc(content)}</text>')


def _esc(text: str) -> str:
    """Text made safe for XML content and attribute values."""
    return html.escape(_XML_ILLEGAL.sub("\ufffd", text), quote=True)


def coord(v: float) -> str:
    """A coordinate with one decimal, without a trailing ``.0``."""
    text = f"{v:.1f}"
    return text[:-2] if text.endswith(".0") else text
