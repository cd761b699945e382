"""The terminal summary: a table of every timed case, one of every tuned key, and the agent stage."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pytest_ktune.core.keys import key_label
from pytest_ktune.core.text import us as _us
from pytest_ktune.gate.verdict import PerfResult
from pytest_ktune.report.results import RunResults

if TYPE_CHECKING:
    from pytest_ktune.tuner.outcome import TuneOutcome


class StageResult(Protocol):
    """What the summary shows of an agent stage's result (``agent.AgentResult``)."""

    @property
    def message(self) -> str: ...

    @property
    def transcript(self) -> Path | None: ...

    @property
    def usage(self) -> str: ...


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


def tune_table(tunes: Sequence[TuneOutcome]) -> list[str]:
    """One row per tuned key: trials, default / current / best times, and what was decided."""
    header = ["target", "key", "trials", "default µs", "current µs", "best µs", "best params", "outcome"]
    rows = []
    for t in tunes:
        key = key_label(t.key)
        params = _fit(" ".join(f"{k}={v}" for k, v in t.best_params.items()), 40)
        trials = t.trials_cell() + (f" (+{t.infeasible} infeasible, {t.failed} failed)" if t.infeasible or t.failed
                                 else "")
        outcome = ("written" if t.written else "accepted, not written") if t.accepted else "kept"
        rows.append([t.target, key, trials, _us(t.default_us), _us(t.current_us), _us(t.best_us), params,
                     outcome])
    lines = _table(header, rows, {3, 4, 5})
    lines.append("")
    for t in tunes:
        lines.extend(_wrap(f"{t.target}[{key_label(t.key)}]: {t.decision}; report {t.report}"))
    return lines


WIDTH = 120  # notes wrap at this width
# Target and case names longer than these are cut short with "…"; the numbers never are (the baseline
# column is in µs, as the time's). The caps do not depend on the other columns, so a name is shown
# whole or cut the same way on every host, and a table without the GFLOP/s columns fits WIDTH columns
# whatever its numbers (up to a million µs and 10,000 GB/s).
TARGET_WIDTH = 24
CASE_WIDTH = 36


def _wrap(text: str) -> list[str]:
    """A note as lines of at most ``WIDTH`` columns (a word longer than that, a path, stays whole)."""
    return textwrap.wrap(text, WIDTH, subsequent_indent="    ", break_long_words=False,
                         break_on_hyphens=False) or [""]


def _fit(cell: str, width: int) -> str:
    return cell if len(cell) <= width else cell[: width - 1] + "…"


def summary_table(results: Sequence[PerfResult]) -> list[str]:
    """One row per timed case: time, baseline, ratio, GB/s, fraction of copy bandwidth, verdict; and
    where a target declares ``flops=``, GFLOP/s, the fraction of the multiply-add peak and the side
    of the roofline (``rate_cells``).

    Where every result ran on one device (the usual run), the device is said once, above the table;
    otherwise each row names its backend and device. Target and case names longer than
    ``TARGET_WIDTH`` and ``CASE_WIDTH`` are cut, so that a one-device table fits ``WIDTH`` columns; the
    GFLOP/s columns, where a target declares ``flops=``, make it wider."""
    devices = {(r.backend, r.device) for r in results}
    one = len(devices) == 1
    header = ["target", "case", *([] if one else ["backend / device"]), "time µs", "baseline", "ratio", "GB/s",
              "% copy BW", "verdict"]
    rows = [[r.target, r.case, *([] if one else [_fit(f"{r.backend} / {r.device}", 40)]), _us(r.time_us),
             _us(r.baseline_us), f"{r.ratio:.3f}" if r.ratio is not None else "-",
             f"{r.gbps:.1f}" if r.gbps is not None else "-",
             f"{100 * r.copy_fraction:.0f}%" if r.copy_fraction is not None else "-",
             r.verdict] for r in results]
    right = {i for i, h in enumerate(header) if h in ("time µs", "baseline", "ratio", "GB/s", "% copy BW")}
    if any(r.rate is not None for r in results):
        at = header.index("verdict")
        header[at:at] = RATE_HEADER
        for r, row in zip(results, rows, strict=True):
            row[at:at] = rate_cells(r)
        right |= {at, at + 1}
    for row in rows:
        row[0], row[1] = _fit(row[0], TARGET_WIDTH), _fit(row[1], CASE_WIDTH)
    lines = [f"on {b} / {d}" if d else f"on {b}" for b, d in devices] if one else []
    return lines + _table(header, rows, right)


RATE_HEADER = ["GFLOP/s", "% FMA peak", "bound"]


def rate_cells(r: PerfResult) -> list[str]:
    """The GFLOP/s columns of one row: '-' where the target declares no flops=."""
    if r.rate is None:
        return ["-", "-", "-"]
    peak = f"{100 * r.rate.peak_fraction:.0f}%" if r.rate.peak_fraction is not None else "-"
    return [f"{r.rate.gflops:.1f}", peak, r.rate.bound or "-"]


def summary_sections(run: RunResults, agents: Sequence[StageResult] = ()) -> list[tuple[str, list[str]]]:
    """The sections of the terminal summary, each a title and its lines: the timed cases with their
    notes, the tuned keys, the agent stage."""
    out: list[tuple[str, list[str]]] = []
    if run.results:
        lines = summary_table(run.results)
        missing = [r for r in run.results if r.verdict == "no baseline"]
        notes = [r for r in run.results if r.note and r.verdict != "no baseline"]
        if notes or missing:
            lines.append("")
        for r in notes:
            lines.extend(_wrap(f"{r.target}[{r.case}]: {r.note}"))
        if missing:
            lines.extend(_wrap(f"{len(missing)} case(s) have no baseline for this device: run with "
                               "--ktune-update-baseline to record them in the params file"))
        out.append(("ktune summary", lines))
    if run.tunes:
        out.append(("ktune tuning", tune_table(run.tunes)))
    if agents:
        lines = []
        for result in agents:
            lines.append(result.message)
            if result.transcript is not None:
                lines.append(f"  transcript: {result.transcript} ({result.usage})")
        out.append(("ktune agent", lines))
    return out


def compiler_section(output: Mapping[str, Sequence[str]]) -> tuple[str, list[str]]:
    """The compiler's messages of the run (``KTUNE_COMPILER_OUTPUT=1``), each once, by target."""
    lines: list[str] = []
    for where, messages in output.items():
        lines.append(f"{where}:")
        lines.extend(f"  {m}" for m in messages)
    return "ktune compiler output", lines or ["the compiler printed nothing for this run's builds"]
