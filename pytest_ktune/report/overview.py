"""What changed since the last run, for the top of ``ktune report``'s page: per case, device and
source (the params file's baselines, stored benchmark JSON), the latest timing against the one
before it. Slower by more than the threshold is a regression, faster by more an improvement; steps
each within the threshold that add up to more than it, since the series' last larger step (or its
first timing), are drift: a slow creep that no single run flagged. Everything else is unchanged."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_ktune.core.options import DEFAULTS
from pytest_ktune.core.threshold import Threshold
from pytest_ktune.report.history import Point

DEFAULT_THRESHOLD = Threshold.parse(DEFAULTS.threshold).fraction  # the gate's default


@dataclass(frozen=True)
class Change:
    """One series' latest timing against the timing before it (and, for drift, the first)."""

    kind: str  # "regression", "improvement", "drift" or "unchanged"
    target: str
    case: str
    device: str
    source: str
    before: Point  # the previous timing (for drift: where the creep started)
    latest: Point

    @property
    def ratio(self) -> float:
        """latest / before: above 1 is slower."""
        return self.latest.time_us / self.before.time_us


@dataclass(frozen=True)
class Overview:
    """The changes, each kind worst first, and how many series had a single timing."""

    regressions: tuple[Change, ...]
    improvements: tuple[Change, ...]
    drift: tuple[Change, ...]
    unchanged: int
    single: int
    threshold: float


def _beyond(ratio: float, threshold: float) -> bool:
    return ratio > 1 + threshold or ratio < 1 - threshold


def _kind(ordered: Sequence[Point], threshold: float) -> tuple[str, Point]:
    """What the series' last step is, and the timing it is measured from."""
    previous, latest = ordered[-2], ordered[-1]
    step = latest.time_us / previous.time_us
    if step > 1 + threshold:
        return "regression", previous
    if step < 1 - threshold:
        return "improvement", previous
    # Drift is measured from the timing after the series' last step beyond the threshold (a change that
    # was seen), or from its first timing: small steps since then that add up to more than the threshold.
    base = ordered[0]
    for a, b in itertools.pairwise(ordered):
        if _beyond(b.time_us / a.time_us, threshold):
            base = b
    if base is not previous and _beyond(latest.time_us / base.time_us, threshold):
        return "drift", base
    return "unchanged", previous


def overview(points: Sequence[Point], commits: Sequence[str], threshold: float = DEFAULT_THRESHOLD) -> Overview:
    """The overview of ``points`` whose commits are ``commits`` (oldest first)."""
    at = {c: i for i, c in enumerate(commits)}
    series: dict[tuple[str, str, str, str], list[Point]] = {}
    for p in points:
        if p.time_us > 0:
            series.setdefault((p.target, p.case, p.device, p.source), []).append(p)
    found: dict[str, list[Change]] = {"regression": [], "improvement": [], "drift": [], "unchanged": []}
    single = 0
    for (target, case, device, source), pts in sorted(series.items()):
        ordered = sorted(pts, key=lambda p: at.get(p.commit, -1))
        if len(ordered) < 2:
            single += 1
            continue
        kind, before = _kind(ordered, threshold)
        found[kind].append(Change(kind, target, case, device, source, before, ordered[-1]))
    return Overview(regressions=tuple(sorted(found["regression"], key=lambda c: -c.ratio)),
                    improvements=tuple(sorted(found["improvement"], key=lambda c: c.ratio)),
                    drift=tuple(sorted(found["drift"], key=lambda c: -abs(c.ratio - 1))),
                    unchanged=len(found["unchanged"]), single=single, threshold=threshold)


def anchor(target: str, case: str) -> str:
    """The id of a case's figure on the page, for the overview's links."""
    import hashlib

    return "case-" + hashlib.sha256(f"{target}\0{case}".encode()).hexdigest()[:12]


_TITLES = {"regression": ("Regressions", "slower than the run before by more than {pct}"),
           "improvement": ("Improvements", "faster than the run before by more than {pct}"),
           "drift": ("Drift", "whose steps were each within {pct}, but add up to more than {pct} since the last "
                              "larger one (or the first timing)")}


def _pct(ratio: float) -> str:
    return f"{100 * (ratio - 1):+.1f}%"


def _table(changes: Sequence[Change]) -> str:
    from html import escape

    from pytest_ktune.core.text import us

    head = "".join(f"<th>{h}</th>" for h in ("target", "case", "device · source", "before µs", "latest µs", "change"))
    rows = []
    for c in changes:
        name = c.target.rpartition("::")[2] or c.target
        cells = [f'<a href="#{anchor(c.target, c.case)}">{escape(name)}</a>', escape(c.case),
                 f"{escape(c.device)} · {escape(c.source)}",
                 f"{us(c.before.time_us)} <span class=\"muted\">{escape(c.before.commit[:8] or '?')}</span>",
                 f"{us(c.latest.time_us)} <span class=\"muted\">{escape(c.latest.commit[:8] or '?')}</span>",
                 _pct(c.ratio)]
        rows.append("<tr>" + "".join(f'<td class="num">{x}</td>' if i >= 3 else f"<td>{x}</td>"
                                     for i, x in enumerate(cells)) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def section(ov: Overview) -> str:
    """The overview as the page's first section: each kind with its table, or a line saying there is none."""
    pct = f"{100 * ov.threshold:g}%"
    out = ['<section id="overview"><h2>Since the last run</h2>']
    for kind, changes in (("regression", ov.regressions), ("improvement", ov.improvements), ("drift", ov.drift)):
        title, what = _TITLES[kind]
        out.append(f'<h3 class="{kind}">{title}: {len(changes)}</h3>')
        if changes:
            out.append(f'<p class="muted">Cases {what.format(pct=pct)}; the largest change first.</p>'
                       + _table(changes))
    out.append(f'<p class="muted">{ov.unchanged} unchanged (within {pct} of the run before, and no creep beyond '
               f"it); {ov.single} with a single timing so far. The charts of every case follow.</p></section>")
    return "\n".join(out)
