"""The terminal summary: one table of every timed case."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ._session import PerfResult

if TYPE_CHECKING:
    from ._tuner import TuneOutcome


def _us(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if v < 1000 else f"{v:,.0f}"


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    rows = [header, *rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for j, row in enumerate(rows):
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def _key(key: Mapping[str, object]) -> str:
    return "-".join(f"{k}{v}" if isinstance(v, (int, float)) else str(v) for k, v in key.items())


def tune_table(tunes: Sequence[TuneOutcome]) -> list[str]:
    """One row per tuned key: trials, default / current / best times, and what was decided."""
    header = ["target", "key", "trials", "default µs", "current µs", "best µs", "best params", "outcome"]
    rows = []
    for t in tunes:
        key = _key(t.key)
        params = " ".join(f"{k}={v}" for k, v in t.best_params.items())
        trials = f"{t.timed}" + (f" (+{t.infeasible} infeasible, {t.failed} failed)" if t.infeasible or t.failed
                                 else "")
        outcome = ("written" if t.written else "accepted, not written") if t.accepted else "kept"
        rows.append([t.target, key, trials, _us(t.default_us), _us(t.current_us), _us(t.best_us), params,
                     outcome])
    lines = _table(header, rows, {3, 4, 5})
    lines.append("")
    lines.extend(f"{t.target}[{_key(t.key)}]: {t.decision}; report {t.report}" for t in tunes)
    return lines


def summary_table(results: Sequence[PerfResult]) -> list[str]:
    """One row per timed case: time, baseline, ratio, GB/s, fraction of copy bandwidth, verdict."""
    header = ["target", "case", "backend / device", "time µs", "baseline µs", "ratio", "GB/s",
              "% copy BW", "verdict"]
    rows = [[r.target, r.case, f"{r.backend} / {r.device}", _us(r.time_us), _us(r.baseline_us),
             f"{r.ratio:.3f}" if r.ratio is not None else "-",
             f"{r.gbps:.1f}" if r.gbps is not None else "-",
             f"{100 * r.copy_fraction:.0f}%" if r.copy_fraction is not None else "-",
             r.verdict] for r in results]
    return _table(header, rows, {3, 4, 5, 6, 7})
