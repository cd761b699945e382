"""bench-search's output: the markdown table, the JSON and the SVG of the curves."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_ktune.core.space import Value
from pytest_ktune.core.version import __version__
from pytest_ktune.lab.ktcache import device_note
from pytest_ktune.lab.results import (
    BenchSettings,
    LandscapeResult,
    Stats,
    after_marks,
    oracle,
    overall,
    rank,
    stats_of,
    trials_text,
)
from pytest_ktune.report.svg import _text, svg_open


def markdown(results: Sequence[LandscapeResult], settings: BenchSettings) -> str:
    lines = ["# Search efficiency on recorded landscapes", "",
             f"Median over {settings.seeds} seeds (the same seeds, 0 to {settings.seeds - 1}, for every strategy), "
             "and the quartiles over them; a trial is a distinct configuration sent to the device "
             "(failures included, constraint violations and repeats not). "
             f"Noise: {'re-sampled from the recorded spread' if settings.noise else 'none (recorded medians)'}."
             + ("" if settings.priors else " Priors: off (--no-priors): `ktune` and `ktune:tpe` start without "
                "device priors and without the records of the target's other keys and devices."), ""]
    for lr in results:
        opt = lr.land.optimum
        lines += [f"## {lr.land.label} on {lr.land.device_id}", "",
                  f"{len(lr.land.points)} configurations, {len(lr.land.timed)} timed; optimum "
                  f"{opt.value_us:.3f} µs at {_params(opt.params)}; budget {lr.budget}.", "",
                  *_imported(lr)]
        marks = after_marks(lr.budget)
        after = " | ".join(f"of the optimum after {m} trials" if j == 0 else f"after {m}" for j, m in enumerate(marks))
        lines += [f"| strategy | trials to 3 % | its quartiles | trials to 5 % | hit rate 3 % | hit rate 5 % | "
                  f"{after} | final ÷ optimum |", "|---|---:|---:|---:|---:|---:|" + "---:|" * (len(marks) + 1)]
        for r in lr.results:
            if r.skipped:
                lines.append(f"| {r.strategy} | skipped: {r.skipped} |" + " |" * (len(marks) + 5))
                continue
            o = lr.optimum_us
            fractions = " | ".join(f"{r.reached_after(o, m):.3f}" for m in marks)
            q1, q3 = r.quartiles(o, 0.03)
            mark = " (not repeatable)" if r.repeatable is False else ""
            lines.append(f"| {r.strategy}{mark} | {trials_text(r.median_trials(o, 0.03), lr.budget)} | "
                         f"{trials_text(q1, lr.budget)}–{trials_text(q3, lr.budget)} | "
                         f"{trials_text(r.median_trials(o, 0.05), lr.budget)} | {r.hit_rate(o, 0.03):.0%} | "
                         f"{r.hit_rate(o, 0.05):.0%} | {fractions} | {r.final_over_optimum(o, lr.budget):.3f} |")
        lines.append("")
    return "\n".join(lines)


def _imported(lr: LandscapeResult) -> list[str]:
    """The note a landscape recorded elsewhere gets: what the default strategy runs without there."""
    if not lr.land.imported:
        return []
    origin = lr.land.origin or {}
    note = device_note(lr.land)
    return [f"Recorded elsewhere ({origin.get('format', 'imported')}: {origin.get('file', '?')}): no ktune target "
            "stands behind it, so the device priors, which need the target's launch, are off, and there is "
            "no default; `ktune` starts from what it found on the other keys and devices given with it, and "
            "without those from its search of a space it knows nothing of (`tuner.portfolio`)."
            + (f" Note: {note}." if note else ""), ""]


def _params(p: Mapping[str, Value]) -> str:
    return ", ".join(f"{k}={v}" for k, v in p.items())


def to_json(results: Sequence[LandscapeResult], settings: BenchSettings) -> dict[str, Any]:

    out: dict[str, Any] = {"format": "pytest-ktune-bench-search/1", "ktune_version": __version__,
                           "seeds": settings.seeds, "noise": settings.noise, "priors": settings.priors,
                           "landscapes": []}
    for lr in results:
        o = lr.optimum_us
        strategies = []
        for r in lr.results:
            row: dict[str, Any] = {"strategy": r.strategy, "skipped": r.skipped or None, "wall_s": round(r.wall_s, 3),
                                   "repeatable": r.repeatable}
            if not r.skipped:
                row.update({
                    "median_trials_to_3pct": _num(r.median_trials(o, 0.03)),
                    "median_trials_to_5pct": _num(r.median_trials(o, 0.05)),
                    "quartiles_trials_to_3pct": [_num(q) for q in r.quartiles(o, 0.03)],
                    "trials_to_3pct": r.reached(o, 0.03), "trials_to_5pct": r.reached(o, 0.05),
                    "hit_rate_3pct": r.hit_rate(o, 0.03), "hit_rate_5pct": r.hit_rate(o, 0.05),
                    "final_over_optimum": r.final_over_optimum(o, lr.budget),
                    **{f"of_optimum_after_{m}": r.reached_after(o, m) for m in after_marks(lr.budget)},
                    "median_best_so_far_us": r.curve(lr.budget)})
            strategies.append(row)
        out["landscapes"].append({"file": str(lr.land.path) if lr.land.path else None, "target": lr.land.target,
                                  "key": dict(lr.land.key), "device": lr.land.device_id, "budget": lr.budget,
                                  "configurations": len(lr.land.points), "optimum_us": o,
                                  "optimum": dict(lr.land.optimum.params), "strategies": strategies})
    out["overall"] = [dataclasses.asdict(r) for r in overall(results)]
    return out


def _num(v: float) -> float | None:
    return None if math.isinf(v) else v


_COLOURS = ("#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
            "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd")


_PANEL_W, _PANEL_H, _MARGIN = 420, 240, 46


_CAP = 1.5  # best ÷ optimum above this is drawn at the top edge


def svg(results: Sequence[LandscapeResult]) -> str:
    """Median (over seeds) best-so-far ÷ optimum against trials, one panel per landscape, one line per
    strategy."""

    names = sorted({r.strategy for lr in results for r in lr.results if not r.skipped},
                   key=lambda n: (n != "ktune", n))
    colour = {n: _COLOURS[i % len(_COLOURS)] for i, n in enumerate(names)}
    cols = 2 if len(results) > 1 else 1
    rows = math.ceil(len(results) / cols)
    legend_h = 18 * math.ceil(len(names) / 3) + 10
    width, height = cols * _PANEL_W, rows * _PANEL_H + legend_h
    out = svg_open(width, height)
    for i, lr in enumerate(results):
        x0, y0 = (i % cols) * _PANEL_W + _MARGIN, (i // cols) * _PANEL_H + 24
        w, h = _PANEL_W - _MARGIN - 24, _PANEL_H - 24 - 34
        out.append(_text(x0, y0 - 8, f"{lr.land.label} ({len(lr.land.points)} configurations)", weight="bold"))
        out.append(f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#999"/>')

        def px(t: int, lr: LandscapeResult = lr, x0: int = x0, w: int = w) -> float:
            return x0 + w * (t - 1) / max(lr.budget - 1, 1)

        def py(ratio: float, y0: int = y0, h: int = h) -> float:
            # a square-root scale: the last few per cent, where strategies differ, get room
            return y0 + h * (1 - math.sqrt(max(min(ratio, _CAP) - 1, 0.0) / (_CAP - 1)))

        for tick in (1.0, 1.03, 1.1, 1.25, 1.5):
            y = py(tick)
            out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + w}" y2="{y:.1f}" stroke="#eee"/>')
            out.append(_text(x0 - 4, y + 4, f"{tick:g}", anchor="end"))
        for t in sorted({1, lr.budget, *range(10, lr.budget, max(10, lr.budget // 5 // 10 * 10 or 10))}):
            out.append(_text(px(t), y0 + h + 14, str(t), anchor="middle"))
        out.append(_text(x0 + w / 2, y0 + h + 28, "trials", anchor="middle"))
        for r in lr.results:
            if r.skipped or not r.traces:
                continue
            pts = [(px(t + 1), py(v / lr.optimum_us)) for t, v in enumerate(r.curve(lr.budget))
                   if math.isfinite(v)]
            if pts:
                path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
                stroke = 2.5 if r.strategy == "ktune" else 1.2
                out.append(f'<polyline points="{path}" fill="none" stroke="{colour[r.strategy]}" '
                           f'stroke-width="{stroke}"/>')
    y = rows * _PANEL_H + 8
    for j, n in enumerate(names):
        x, yy = 12 + (j % 3) * (width - 24) / 3, y + 18 * (j // 3)
        out.append(f'<rect x="{x:.1f}" y="{yy:.1f}" width="12" height="4" fill="{colour[n]}"/>')
        out.append(_text(x + 16, yy + 6, n))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def overall_markdown(results: Sequence[LandscapeResult]) -> str:
    """The table of ``overall``, with the best of the others on each landscape beneath it."""
    return overall_table([stats_of(lr) for lr in results])


def overall_table(landscapes: Sequence[tuple[int, Sequence[Stats]]]) -> str:
    """Every strategy ranked over the landscapes (``results.rank``), as markdown."""
    rows = rank(landscapes)
    if not rows:
        return ""
    n = len(landscapes)
    lines = ["## Over all landscapes", "",
             f"Ranked by the geometric mean, over {n} landscapes, of the median trials to within 3 % of the "
             "optimum; a landscape a strategy did not reach, or was skipped on, counts as its budget + 1 "
             "(marked ≥). *After 10* and *after 20*: the mean over the landscapes it ran on of the median "
             "fraction of the optimum (optimum ÷ best so far) after that many trials. *Fewest*: landscapes "
             "where no other strategy needs fewer (the default's own parts aside), ties counted. "
             "*Spread*: the geometric means, counted the same way, of the lower and the upper quartile over "
             "the seeds. *Not repeatable*: a Kernel Tuner strategy whose seed, run twice, gave two different "
             "traces (it draws from generators its seed does not reach; read its spread, not only its median).",
             "",
             "| rank | strategy | geometric mean | spread | reached | trials, summed | after 10 | after 20 | fewest |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for i, r in enumerate(rows, 1):
        short = "≥ " if r.reached < n else ""
        notes = [f"skipped on {n - r.ran}"] if r.ran < n else []
        notes += ["not repeatable"] if r.repeatable is False else []
        label = r.strategy + (f" ({', '.join(notes)})" if notes else "")
        spread = "–" if math.isnan(r.spread[0]) else f"{r.spread[0]:.1f}–{r.spread[1]:.1f}"
        lines.append(f"| {i} | {label} | {short}{r.geomean:.2f} | {spread} | {r.reached}/{n} | {short}{r.total:g} | "
                     f"{_fraction(r.after_10)} | {_fraction(r.after_20)} | {r.fewest} |")
    best = oracle(landscapes)
    if best:
        mean = math.exp(statistics.fmean(map(math.log, best)))
        lines += ["", f"The best of the others on each landscape (a different strategy on each), summed: "
                      f"{sum(best):g} trials, geometric mean {mean:.2f}."]
    return "\n".join(lines) + "\n"


def _fraction(v: float) -> str:
    return "–" if math.isnan(v) else f"{v:.3f}"
