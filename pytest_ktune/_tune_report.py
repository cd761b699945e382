"""The report of one tuning study: a markdown page and two hand-written SVG charts.

The tuner calls :func:`write_report` once a study ends. Everything here is
plain string building, so the report needs no plotting library, and every
piece of text that reaches SVG or markdown goes through one escaping helper.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import optuna

TRIAL_STATES = ("timed", "infeasible", "failed", "duplicate")
SOURCES = ("sampler", "warm-start")
MIN_TRIALS_FOR_IMPORTANCE = 4

_BLUE, _PURPLE, _GREEN, _ORANGE, _RED, _GREY = (
    "#1f77b4", "#9467bd", "#2ca02c", "#ff7f0e", "#d62728", "#8c8c8c")
_MARK_COLOURS = {"infeasible": _ORANGE, "failed": _RED, "duplicate": _GREY}
_FONT = 'font-family="sans-serif" font-size="12"'
_CHAR_W = 7.0  # rough width of one character at font-size 12, for layout only
# Characters XML 1.0 forbids even when escaped; compiler logs in a ``reason`` can carry them.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class TrialRow:
    """One Optuna trial as the report shows it."""

    number: int
    params: Mapping[str, int | float | str | bool]
    state: str
    value_us: float | None
    reason: str = ""
    source: str = "sampler"
    compile_s: float = 0.0
    run_s: float = 0.0


@dataclass(frozen=True)
class StudySummary:
    """What one study was about and how it ended: the header and result paragraph of the report."""

    target: str
    device: str
    key: Mapping[str, object]
    sampler: str
    study_name: str
    storage: str
    default_params: Mapping[str, object]
    default_us: float | None
    current_params: Mapping[str, object]
    current_us: float | None
    best_params: Mapping[str, object] | None
    best_us: float | None
    accepted: bool
    decision: str
    feasible_points: int | None
    wall_s: float


# -- public entry points -----------------------------------------------------
def report_slug(target: str, device: str, key: Mapping[str, object]) -> str:
    """The file name stem of a study's report: readable, filesystem-safe, and the same on every run.

    The readable part is cut short and lossy (``/`` and ``:`` become ``-``),
    so a hash of the exact target, device and key keeps distinct studies apart.
    """
    key_text = "-".join(f"{k}-{key[k]}" for k in sorted(key, key=str))
    pieces = (_UNSAFE.sub("-", piece).strip("-.") for piece in (target, device, key_text))
    readable = "--".join(p for p in pieces if p)[:80].rstrip("-.")
    canonical = json.dumps([target, device, {str(k): key[k] for k in key}], sort_keys=True, default=str)
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:10]
    return f"{readable}-{digest}" if readable else digest


def write_report(folder: Path, summary: StudySummary, rows: Sequence[TrialRow],
                 importances: Mapping[str, float] | None) -> Path:
    """Write ``<slug>.md``, ``<slug>-history.svg`` and (with importances) ``<slug>-importance.svg``.

    Returns the markdown file's path. An importance chart left from an earlier
    study of the same slug is removed when this one has none, so the folder
    never shows a stale chart. I/O errors propagate: the caller decides
    whether a missing report matters.
    """
    folder.mkdir(parents=True, exist_ok=True)
    slug = report_slug(summary.target, summary.device, summary.key)
    ordered = sorted(rows, key=lambda r: r.number)
    best = _best_row(ordered, summary.best_params)
    history = folder / f"{slug}-history.svg"
    history.write_text(history_svg(summary, ordered), encoding="utf-8")
    importance = folder / f"{slug}-importance.svg"
    bars = _clean_importances(importances)
    if bars:
        importance.write_text(importance_svg(bars), encoding="utf-8")
    else:
        importance.unlink(missing_ok=True)
    md = folder / f"{slug}.md"
    md.write_text(_markdown(summary, ordered, best, history.name, importance.name if bars else None),
                  encoding="utf-8")
    return md


def importances_of(study: optuna.Study) -> dict[str, float] | None:
    """PED-ANOVA importances of a finished single-objective study, or None when they would mean nothing.

    None when fewer than ``MIN_TRIALS_FOR_IMPORTANCE`` trials completed with a
    finite value, when the evaluator itself says the importances come out all
    equal, or when Optuna raises anything: a report must never end a tune.
    """
    try:
        import optuna
        from optuna.trial import TrialState

        if len(study.directions) != 1:
            return None
        completed = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        finite = [t.value for t in completed if t.value is not None and math.isfinite(t.value)]
        if len(finite) < MIN_TRIALS_FOR_IMPORTANCE:
            return None
        # PED-ANOVA ranks trials lowest-first; a maximised study is negated, and an
        # infeasible trial stored as inf or NaN ranks behind every finite one.
        sign = -1.0 if study.direction == optuna.study.StudyDirection.MAXIMIZE else 1.0
        worst = max(sign * v for v in finite)
        worse = worst + abs(worst) + 1.0

        def target(trial: optuna.trial.FrozenTrial) -> float:
            v = trial.value
            return sign * v if v is not None and math.isfinite(v) else worse

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = optuna.importance.get_param_importances(
                study, evaluator=optuna.importance.PedAnovaImportanceEvaluator(), target=target)
        if any("will be equal" in str(w.message) for w in caught):
            return None
        cleaned = {str(k): float(v) for k, v in result.items() if math.isfinite(float(v))}
        return cleaned or None
    except Exception:
        return None


# -- markdown ----------------------------------------------------------------
def _markdown(summary: StudySummary, rows: Sequence[TrialRow], best: TrialRow | None,
              history_name: str, importance_name: str | None) -> str:
    out = [f"# Tuning report: {_md_code(summary.target)}", ""]
    out += ["| | |", "| --- | --- |"]
    out += [f"| {name} | {value} |" for name, value in _header_fields(summary, rows)]
    out += ["", "## Result", "", _result_paragraph(summary), "",
            _result_table(summary), "", "## Trials over time", "",
            f"![trial history]({history_name})", ""]
    if importance_name is not None:
        out += ["## Parameter importance", "", f"![parameter importance]({importance_name})", ""]
    else:
        out += ["## Parameter importance", "",
                "No importance chart: too few trials were timed to estimate importances, "
                "or the estimate could not be computed.", ""]
    out += ["## All trials", ""]
    if not rows:
        out += ["No trial ran.", ""]
        return "\n".join(out)
    if best is not None:
        out += ["★ marks the best trial.", ""]
    out += ["| trial | source | state | params | µs | compile s | run s | reason |",
            "| ---: | --- | --- | --- | ---: | ---: | ---: | --- |"]
    for r in rows:
        number = f"**{r.number}** ★" if r is best else str(r.number)
        out.append("| " + " | ".join([
            number, _md_cell(r.source), _md_cell(r.state), _md_code(_params(r.params)),
            _us(r.value_us), f"{r.compile_s:.2f}", f"{r.run_s:.2f}", _md_cell(_one_line(r.reason, 200)),
        ]) + " |")
    out.append("")
    return "\n".join(out)


def _header_fields(summary: StudySummary, rows: Sequence[TrialRow]) -> list[tuple[str, str]]:
    counts = {s: sum(1 for r in rows if r.state == s) for s in TRIAL_STATES}
    others = len(rows) - sum(counts.values())
    parts = [f"{n} {s}" for s, n in counts.items() if n] + ([f"{others} other"] if others else [])
    warm = sum(1 for r in rows if r.source == "warm-start")
    trials = f"{len(rows)}" + (f" ({', '.join(parts)})" if parts else "")
    if warm:
        trials += f"; {warm} from the warm start"
    distinct = len({_params(r.params) for r in rows if r.state == "timed"})
    space = "unknown" if summary.feasible_points is None else f"{summary.feasible_points:,}"
    return [
        ("target", _md_code(summary.target)),
        ("device", _md_cell(summary.device)),
        ("key", _md_code(_params(summary.key)) if summary.key else "(none)"),
        ("sampler", _md_cell(summary.sampler)),
        ("study", _md_code(summary.study_name)),
        ("storage", _md_code(redact_storage(summary.storage))),
        ("trials", _md_cell(trials)),
        ("feasible points", f"{space}; {distinct} distinct timed"),
        ("wall time", _duration(summary.wall_s)),
    ]


def _result_paragraph(summary: StudySummary) -> str:
    verdict = "**Accepted.**" if summary.accepted else "**Not accepted.**"
    if summary.best_us is None:
        lead = "No trial was timed, so there is no best configuration."
    else:
        comparisons = [f"{_ratio_text(summary.best_us, ref)} {name}"
                       for name, ref in (("the default", summary.default_us),
                                         ("the current parameters", summary.current_us))
                       if ref is not None and ref > 0 and summary.best_us > 0]
        lead = f"The best configuration took {_us(summary.best_us)} µs"
        lead += f" ({'; '.join(comparisons)})." if comparisons else "."
    decision = _one_line(summary.decision, 1000)
    # The decision may be a clause ("the parameters in use are the best"); here it is a sentence.
    decision = decision[:1].upper() + decision[1:]
    if decision and decision[-1] not in ".!?":
        decision += "."
    return f"{lead} {verdict} {_md_cell(decision)}".rstrip()


def _result_table(summary: StudySummary) -> str:
    lines = ["| | params | µs | ÷ default | ÷ current |", "| --- | --- | ---: | ---: | ---: |"]
    entries = [("default", summary.default_params, summary.default_us),
               ("current", summary.current_params, summary.current_us),
               ("best", summary.best_params, summary.best_us)]
    for name, params, us in entries:
        shown = "-" if params is None else _md_code(_params(params))
        lines.append(f"| {name} | {shown} | {_us(us)} | {_ratio(us, summary.default_us)} | "
                     f"{_ratio(us, summary.current_us)} |")
    return "\n".join(lines)


def _ratio_text(value: float, reference: float) -> str:
    r = value / reference
    if math.isclose(r, 1.0, rel_tol=5e-4):
        return "as fast as"
    if r < 1:
        return f"{reference / value:.2f}× faster than"
    return f"{r:.2f}× slower than"


def _ratio(value: float | None, reference: float | None) -> str:
    if value is None or reference is None or reference <= 0:
        return "-"
    return f"{value / reference:.3f}"


def _best_row(rows: Sequence[TrialRow], best_params: Mapping[str, object] | None) -> TrialRow | None:
    """The row to star: a timed trial with the summary's best params, else the fastest timed one.

    The tuner may re-time its finalists, so the best params need not be the
    trial with the lowest recorded value; the summary is what was decided.
    """
    timed = [r for r in rows if r.state == "timed" and r.value_us is not None and math.isfinite(r.value_us)]
    if not timed:
        return None
    if best_params is not None:
        matching = [r for r in timed if dict(r.params) == dict(best_params)]
        if matching:
            return min(matching, key=lambda r: (r.value_us or 0.0, r.number))
    return min(timed, key=lambda r: (r.value_us or 0.0, r.number))


def redact_storage(storage: str) -> str:
    """A storage URL with any password replaced, so that a report can be shared."""
    from ._tuner import redact

    return redact(storage)


# -- SVG: trial history ------------------------------------------------------
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
    parts = _svg_open(_W, _H)
    parts.append(_text(12, 20, f"Trial history: {_one_line(summary.target, 70)} on "
                               f"{_one_line(summary.device, 40)}", weight="bold"))

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
        parts.append(f'<line x1="{x0}" y1="{_f(y)}" x2="{x1}" y2="{_f(y)}" stroke="#e6e6e6"/>')
        parts.append(_text(x0 - 6, y + 4, scale.label(t), anchor="end"))
    for n in _int_ticks(lo_n, hi_n):
        x = sx(n)
        parts.append(f'<line x1="{_f(x)}" y1="{y0}" x2="{_f(x)}" y2="{y0 + 5}" stroke="#333"/>')
        parts.append(_text(x, y0 + 18, str(n), anchor="middle"))
    parts.append(f'<path d="M{x0},{y1} V{y0} H{x1}" fill="none" stroke="#333"/>')
    parts.append(_text((x0 + x1) / 2, _H - 10, "trial number", anchor="middle"))
    y_label = "median µs (log scale)" if scale.log else "median µs"
    parts.append(_text(16, (y0 + y1) / 2, y_label, anchor="middle",
                       transform=f"rotate(-90 16 {_f((y0 + y1) / 2)})"))

    if not timed:
        message = "no trial was timed" if ordered else "no trials"
        parts.append(_text((x0 + x1) / 2, (data_y0 + y1) / 2, message, anchor="middle", fill=_GREY))

    # The best so far: a step line that drops at each improvement and runs on to the last trial.
    if timed:
        first = timed[0]
        best_v = first.value_us or 0.0
        path = [f"M{_f(sx(first.number))},{_f(sy(best_v))}"]
        for r in timed[1:]:
            v = r.value_us or 0.0
            if v < best_v:
                best_v = v
                path.append(f"H{_f(sx(r.number))} V{_f(sy(v))}")
        path.append(f"H{_f(sx(hi_n))}")
        parts.append(f'<path class="best-so-far" d="{" ".join(path)}" fill="none" stroke="{_GREEN}" '
                     'stroke-width="2"/>')

    for r in timed:
        v = r.value_us or 0.0
        colour = _PURPLE if r.source == "warm-start" else _BLUE
        tip = f"trial {r.number} ({r.source}): {_us(v)} µs, {_params(r.params)}"
        parts.append(f'<circle class="point" cx="{_f(sx(r.number))}" cy="{_f(sy(v))}" r="3.5" '
                     f'fill="{colour}" fill-opacity="0.8"><title>{_esc(tip)}</title></circle>')

    # Trials without a time sit on the bottom edge, as short ticks coloured by state.
    for r in marked:
        x = sx(r.number)
        tip = f"trial {r.number}: {r.state}" + (f", {_one_line(r.reason, 200)}" if r.reason else "")
        parts.append(f'<line class="mark {r.state}" x1="{_f(x)}" y1="{y0 - 2}" x2="{_f(x)}" '
                     f'y2="{y0 - 12}" stroke="{_MARK_COLOURS[r.state]}" stroke-width="2">'
                     f"<title>{_esc(tip)}</title></line>")

    parts += _legend(timed, marked, y=38)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


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
            out.append(f'<circle class="legend" cx="{_f(x + 5)}" cy="{_f(y - 4)}" r="3.5" fill="{colour}"/>')
        elif shape == "line":
            out.append(f'<line class="legend" x1="{_f(x)}" y1="{_f(y - 4)}" x2="{_f(x + 12)}" '
                       f'y2="{_f(y - 4)}" stroke="{colour}" stroke-width="2"/>')
        else:
            out.append(f'<line class="legend" x1="{_f(x + 5)}" y1="{_f(y + 1)}" x2="{_f(x + 5)}" '
                       f'y2="{_f(y - 9)}" stroke="{colour}" stroke-width="2"/>')
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


# -- SVG: parameter importance -----------------------------------------------
def importance_svg(importances: Mapping[str, float]) -> str:
    """Horizontal bars of parameter importances, largest first."""
    bars = sorted(_clean_importances(importances).items(), key=lambda kv: (-kv[1], kv[0]))
    names = [_one_line(k, 28) for k, _ in bars]
    # Parameter names are mostly capitals, wider than the average character.
    label_w = min(max((len(n) for n in names), default=4) * 8.5 + 20, 260)
    row_h, top, width = 26, 40, 640
    height = top + row_h * len(bars) + 16
    x0, x1 = label_w, width - 70
    peak = max((v for _, v in bars), default=0.0) or 1.0
    parts = _svg_open(width, height)
    parts.append(_text(12, 22, "Parameter importance", weight="bold"))
    for i, ((name, value), shown) in enumerate(zip(bars, names, strict=True)):
        y = top + i * row_h
        length = max(value, 0.0) / peak * (x1 - x0)
        parts.append(_text(x0 - 8, y + 15, shown, anchor="end"))
        parts.append(f'<rect class="bar" x="{_f(x0)}" y="{y + 3}" width="{_f(length)}" height="{row_h - 8}" '
                     f'fill="{_BLUE}"><title>{_esc(f"{name}: {value:.4f}")}</title></rect>')
        parts.append(_text(x0 + length + 6, y + 15, f"{value:.3f}"))
    bottom = top + row_h * len(bars)
    parts.append(f'<line x1="{_f(x0)}" y1="{top}" x2="{_f(x0)}" y2="{bottom}" stroke="#333"/>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _clean_importances(importances: Mapping[str, float] | None) -> dict[str, float]:
    if not importances:
        return {}
    return {str(k): float(v) for k, v in importances.items() if math.isfinite(float(v))}


# -- small helpers -----------------------------------------------------------
def _svg_open(width: int, height: int) -> list[str]:
    return ['<?xml version="1.0" encoding="UTF-8"?>',
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">',
            f'<rect width="{width}" height="{height}" fill="white"/>']


def _text(x: float, y: float, content: str, *, anchor: str = "start", weight: str = "normal",
          fill: str = "#222", transform: str = "") -> str:
    extra = f' transform="{_esc(transform)}"' if transform else ""
    return (f'<text x="{_f(x)}" y="{_f(y)}" {_FONT} text-anchor="{anchor}" font-weight="{weight}" '
            f'fill="{fill}"{extra}>{_esc(content)}</text>')


def _esc(text: str) -> str:
    """Text made safe for XML content and attribute values."""
    return html.escape(_XML_ILLEGAL.sub("\ufffd", text), quote=True)


def _md_cell(text: str) -> str:
    """Text made safe inside a markdown table cell: one line, pipes and markup escaped."""
    flat = _one_line(text, 100_000)
    return re.sub(r"([\\|*_`<>&\[\]])", r"\\\1", flat)


def _md_code(text: str) -> str:
    """An inline code span that survives backticks and pipes in ``text``."""
    flat = _one_line(text, 100_000).replace("|", "\\|")
    fence = "`" * (max((len(m) for m in re.findall(r"`+", flat)), default=0) + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(_XML_ILLEGAL.sub(" ", str(text)).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _params(params: Mapping[str, object]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def _us(v: float | None) -> str:
    if v is None:
        return "-"
    if not math.isfinite(v):
        return str(v)
    return f"{v:.2f}" if abs(v) < 1000 else f"{v:,.0f}"


def _duration(seconds: float) -> str:
    s = max(seconds, 0.0)
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"


def _f(v: float) -> str:
    """A coordinate with one decimal, without a trailing ``.0``."""
    text = f"{v:.1f}"
    return text[:-2] if text.endswith(".0") else text
