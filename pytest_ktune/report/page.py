"""``ktune report``: one self-contained HTML page per project (no network, no CDN: the styles, the
script and every plot are in the file).

First, what changed since the last run (``report.overview``): regressions, improvements and drift,
each case linked to its chart.

Per target: per case, the time across commits (one line per device and source: the baselines of the
params file's history, and the runs of stored benchmark JSON), and a table of the latest time with
its GB/s, % of copy bandwidth and % of peak (that column only where a result carries a measured
peak); then the plots of its tuning studies (history and parameter importance).
"""

from __future__ import annotations

import datetime as _dt
import html
import math
from collections.abc import Sequence
from pathlib import Path

from pytest_ktune.core.files import write_atomic
from pytest_ktune.core.keys import key_label
from pytest_ktune.core.text import params as params_text
from pytest_ktune.core.text import rate
from pytest_ktune.core.text import us as _us
from pytest_ktune.report.history import BENCHMARK, Point, StudyPlots, ordered_commits
from pytest_ktune.report.overview import DEFAULT_THRESHOLD, anchor, overview, section
from pytest_ktune.report.svg import _YScale, coord

_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
_W, _H, _LEFT, _RIGHT, _TOP, _BOTTOM = 720, 260, 70, 20, 16, 62

_STYLE = """
body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1100px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ccc; }
h3 { font-size: 15px; margin-bottom: 4px; }
table { border-collapse: collapse; margin: 6px 0 14px; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; } td.num { text-align: right; }
.muted { color: #777; font-size: 13px; } .studies svg { max-width: 100%; height: auto; }
h3.regression { color: #b00; } h3.improvement { color: #070; }
#filter { font-size: 14px; padding: 4px; width: 320px; }
"""

# Filters the targets by name, and marks the page as ready (the browser test reads it).
_SCRIPT = """
(function () {
  var input = document.getElementById("filter");
  var sections = document.querySelectorAll("section.target");
  input.addEventListener("input", function () {
    var q = input.value.toLowerCase();
    sections.forEach(function (s) { s.hidden = q && s.dataset.target.toLowerCase().indexOf(q) < 0; });
  });
  document.body.dataset.ready = String(sections.length);
})();
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def timeline_svg(points: Sequence[Point], commits: Sequence[str]) -> str:
    """A line per device and source of one case's time across ``commits`` (oldest first)."""
    series: dict[tuple[str, str], list[Point]] = {}
    for p in points:
        series.setdefault((p.device, p.source), []).append(p)
    height = _H + 16 * len(series)  # the legend goes below the commits
    x0, x1, y0, y1 = _LEFT, _W - _RIGHT, _H - _BOTTOM, _TOP
    scale = _YScale.fit([p.time_us for p in points])
    at = {c: i for i, c in enumerate(commits)}
    span = max(len(commits) - 1, 1)

    def sx(c: str) -> float:
        return x0 + (at[c] / span if len(commits) > 1 else 0.5) * (x1 - x0)

    def sy(v: float) -> float:
        return y0 - scale.frac(v) * (y0 - y1)

    parts = [f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{height}" '
             f'viewBox="0 0 {_W} {height}" role="img">', f'<rect width="{_W}" height="{height}" fill="white"/>']
    for t in scale.ticks:
        parts.append(f'<line x1="{x0}" y1="{coord(sy(t))}" x2="{x1}" y2="{coord(sy(t))}" stroke="#eee"/>')
        parts.append(f'<text x="{x0 - 6}" y="{coord(sy(t) + 4)}" font-size="11" text-anchor="end">'
                     f"{_e(scale.label(t))}</text>")
    for c in commits:
        label = c[:8] or "?"
        parts.append(f'<text x="{coord(sx(c))}" y="{y0 + 14}" font-size="10" text-anchor="end" '
                     f'transform="rotate(-35 {coord(sx(c))} {y0 + 14})">{_e(label)}</text>')
    parts.append(f'<path d="M{x0},{y1} V{y0} H{x1}" fill="none" stroke="#333"/>')
    parts.append(f'<text x="14" y="{(y0 + y1) / 2}" font-size="11" text-anchor="middle" '
                 f'transform="rotate(-90 14 {(y0 + y1) / 2})">µs per call{" (log)" if scale.log else ""}</text>')
    for i, ((device, source), unordered) in enumerate(sorted(series.items())):
        colour = _COLOURS[i % len(_COLOURS)]
        pts = sorted(unordered, key=lambda p: at[p.commit])
        dash = ' stroke-dasharray="5 3"' if source == BENCHMARK else ""
        coords = " ".join(f"{coord(sx(p.commit))},{coord(sy(p.time_us))}" for p in pts)
        parts.append(f'<polyline class="series" data-device="{_e(device)}" data-source="{_e(source)}" '
                     f'points="{coords}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        for p in pts:
            tip = f"{device}, {source}, {p.commit[:12] or '?'} ({p.date[:10]}): {_us(p.time_us)} µs"
            parts.append(f'<circle class="point" cx="{coord(sx(p.commit))}" cy="{coord(sy(p.time_us))}" r="3.5" '
                         f'fill="{colour}"><title>{_e(tip)}</title></circle>')
        y = _H + 16 * i + 4
        parts.append(f'<line x1="{x0}" y1="{y - 4}" x2="{x0 + 18}" y2="{y - 4}" stroke="{colour}" '
                     f'stroke-width="2"{dash}/>')
        parts.append(f'<text x="{x0 + 24}" y="{y}" font-size="11" fill="#222">{_e(device)} · {_e(source)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def _latest_table(points: Sequence[Point], commits: Sequence[str]) -> str:
    at = {c: i for i, c in enumerate(commits)}
    latest: dict[tuple[str, str], Point] = {}
    for p in points:
        k = (p.device, p.source)
        if k not in latest or at[p.commit] >= at[latest[k].commit]:
            latest[k] = p
    peak = any(p.peak_fraction is not None for p in points)  # shown only where a result carries a measured peak
    head = ["device", "source", "commit", "µs", "GB/s", "% copy BW", *(["% of peak"] if peak else [])]
    rows = []
    for (device, source), p in sorted(latest.items()):
        cells = [_e(device), _e(source), _e(p.commit[:12] or "?"), _us(p.time_us),
                 rate(p.gbps), _pct(p.copy_fraction),
                 *([_pct(p.peak_fraction)] if peak else [])]
        rows.append("<tr>" + "".join(f'<td class="num">{c}</td>' if i >= 3 else f"<td>{c}</td>"
                                     for i, c in enumerate(cells)) + "</tr>")
    return ('<table class="latest"><tr>' + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"
            + "".join(rows) + "</table>")


def build(project: str, points: Sequence[Point], studies: Sequence[StudyPlots], *, generated: str | None = None,
          threshold: float = DEFAULT_THRESHOLD) -> str:
    """The whole page: the overview of what changed since the last run, then each target's charts."""
    stamp = generated or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    targets = sorted({p.target for p in points} | {s.target for s in studies})
    commits = ordered_commits(points)
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>pytest-ktune report: {_e(project)}</title>", f"<style>{_STYLE}</style></head><body>",
           f"<h1>pytest-ktune report: {_e(project)}</h1>",
           f'<p class="muted">{len(targets)} targets, {len(commits)} commits, {len(points)} timings, '
           f"{len(studies)} tuning studies; generated {_e(stamp)}. Solid lines: baselines in the params file's "
           "history; dashed: runs kept as benchmark JSON.</p>",
           '<p><input id="filter" type="search" placeholder="filter targets" aria-label="filter targets"></p>']
    if points:
        out.append(section(overview(points, commits, threshold)))
    if not targets:
        out.append("<p>Nothing to show yet: record baselines (pytest --ktune --ktune-update-baseline), keep "
                   "benchmark JSON (--ktune-benchmark-json), or tune (ktune tune).</p>")
    for target in targets:
        mine = [p for p in points if p.target == target]
        out.append(f'<section class="target" data-target="{_e(target)}"><h2>{_e(target)}</h2>')
        for case in sorted({p.case for p in mine}):
            pts = [p for p in mine if p.case == case]
            seen = [c for c in commits if any(p.commit == c for p in pts)]
            out.append(f'<figure class="case" id="{anchor(target, case)}" data-case="{_e(case)}"><h3>{_e(case)}</h3>')
            out.append(timeline_svg(pts, seen))
            out.append(_latest_table(pts, seen) + "</figure>")
        plots = [s for s in studies if s.target == target]
        if plots:
            out.append('<div class="studies"><h3>Tuning studies</h3>')
            for s in plots:
                best = f"best {_us(s.best_us)} µs ({_e(params_text(s.best_params))})" if s.best_us is not None else ""
                out.append(f"<p><b>{_e(key_label(s.key))}</b> on {_e(s.device)}: {best}</p>")
                out.append(s.history_svg.replace("<svg ", '<svg class="history" ', 1))
                if s.importance_svg:
                    out.append(s.importance_svg.replace("<svg ", '<svg class="importance" ', 1))
            out.append("</div>")
        out.append("</section>")
    out.append(f"<script>{_SCRIPT}</script></body></html>")
    return "\n".join(out) + "\n"


def write(path: Path, project: str, points: Sequence[Point], studies: Sequence[StudyPlots], *,
          threshold: float = DEFAULT_THRESHOLD) -> Path:
    """Write the page to ``path``, atomically; returns the path. ``threshold``: the fraction beyond
    which the overview calls a change a regression or an improvement (the gate's)."""
    if any(not math.isfinite(p.time_us) for p in points):
        points = [p for p in points if math.isfinite(p.time_us)]
    write_atomic(Path(path), build(project, points, studies, threshold=threshold))
    return Path(path)
