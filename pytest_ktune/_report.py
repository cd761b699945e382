"""The terminal summary: one table of every timed case."""

from __future__ import annotations

from collections.abc import Sequence

from ._session import PerfResult


def _us(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if v < 1000 else f"{v:,.0f}"


def summary_table(results: Sequence[PerfResult]) -> list[str]:
    header = ["target", "case", "backend / device", "time µs", "baseline µs", "ratio", "GB/s",
              "% copy BW", "verdict"]
    rows = [header]
    for r in results:
        rows.append([
            r.target, r.case, f"{r.backend} / {r.device}", _us(r.time_us), _us(r.baseline_us),
            f"{r.ratio:.3f}" if r.ratio is not None else "-",
            f"{r.gbps:.1f}" if r.gbps is not None else "-",
            f"{100 * r.copy_fraction:.0f}%" if r.copy_fraction is not None else "-",
            r.verdict,
        ])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    right = {3, 4, 5, 6, 7}
    lines = []
    for j, row in enumerate(rows):
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths,
                                                                                           strict=True))]
        lines.append("  ".join(cells).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines
