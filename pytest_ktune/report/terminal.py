"""The terminal summary: a table of every timed case, one of every tuned key, and the agent stage."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pytest_ktune.core.keys import key_label
from pytest_ktune.core.text import rate as _rate
from pytest_ktune.core.text import us as _us
from pytest_ktune.gate.verdict import DRIFT, NO_BASELINE, PerfResult
from pytest_ktune.report.results import RunResults

if TYPE_CHECKING:
    from pytest_ktune.backends.base import DeviceInfo
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
        lines.extend(_wrap(f"{t.target}[{key_label(t.key)}]: {t.decision}{t.devices_text()}; report {t.report}"))
        lines.extend(line for note in t.notes for line in _wrap(f"{t.target}[{key_label(t.key)}]: {note}"))
    return lines


WIDTH = 120  # notes wrap at this width
# Target and case names longer than these are cut short with "…"; the numbers never are (the baseline
# column is in µs, as the time's). The caps do not depend on the other columns, so a name is shown
# whole or cut the same way on every host, and the table fits WIDTH columns whatever its numbers (up to a
# million µs and 10,000 GB/s).
TARGET_WIDTH = 24
CASE_WIDTH = 36


def _wrap(text: str) -> list[str]:
    """A note as lines of at most ``WIDTH`` columns (a word longer than that, a path, stays whole)."""
    return textwrap.wrap(text, WIDTH, subsequent_indent="    ", break_long_words=False,
                         break_on_hyphens=False) or [""]


def _fit(cell: str, width: int) -> str:
    return cell if len(cell) <= width else cell[: width - 1] + "…"


def _fit_device(cell: str, width: int) -> str:
    """A row's backend and device cut to ``width``, keeping the ``#index`` that tells two devices of one
    name apart (``run.devices.labels``)."""
    head, sep, index = cell.rpartition(" #")
    if not sep or not index.isdigit() or len(cell) <= width:
        return _fit(cell, width)
    return _fit(head, width - len(sep) - len(index)) + sep + index


def _heads(field: str) -> list[tuple[str, bool]]:
    """The ``;``-separated parts of a device's arch or compiler string, each cut to its head (the text
    before build details, after the first ``:`` or ``,``), spaces squeezed; and whether it is whole."""
    out = []
    for part in field.split(";"):
        text = " ".join(part.split())
        head = re.split(r"[:,]\s", text, maxsplit=1)[0]
        if head:
            out.append((head, head == text))
    return out


MORE = "more with -v"


def device_header(d: DeviceInfo, *, verbose: bool = False) -> list[str]:
    """The header's device line: the backend, the device's name (without trademark signs) and the
    heads of its arch and compiler strings, in at most ``WIDTH`` columns. Where not all of them fit,
    the driver's part is kept first, then the compiler's, then the arch's (each where it was), and
    "more with -v" stands for the rest. With ``verbose``: the whole strings and the machine's
    identity (what tells its timings apart from another machine's), however long."""
    if verbose:
        return [f"ktune: backend {d.backend} on {d.name} ({d.arch}; {d.compiler})",
                f"ktune: machine identity {d.machine}"]
    name = " ".join(re.sub(r"\((R|TM)\)", "", d.name, flags=re.IGNORECASE).split())
    head = _fit(f"ktune: backend {d.backend} on {name}", WIDTH)
    arch, compiler = _heads(d.arch), _heads(d.compiler)
    parts = list(dict.fromkeys(h for h, _ in arch + compiler))
    shortened = not all(whole for _, whole in arch + compiler)
    if not parts:
        return [head]
    of_compiler = {h for h, _ in compiler}
    order = sorted(range(len(parts)),
                   key=lambda i: (not parts[i].startswith("driver "), parts[i] not in of_compiler, i))

    def line(kept: set[int]) -> str:
        more = shortened or len(kept) < len(parts)
        return head + " (" + "; ".join([*(parts[i] for i in sorted(kept)), *([MORE] if more else [])]) + ")"

    kept: set[int] = set()
    for i in order:
        if len(line(kept | {i})) <= WIDTH:
            kept.add(i)
    out = line(kept)
    return [out if len(out) <= WIDTH else head]


def summary_table(results: Sequence[PerfResult]) -> list[str]:
    """One row per timed case: time, its reference, their ratio, GB/s, fraction of copy bandwidth,
    verdict. The reference (the ``baseline`` column) is the A/B's baseline side where an A/B ran, else
    the time recorded on this machine; the ratio is always time ÷ reference.

    Where every result ran on one device (the usual run), the device is said once, above the table;
    otherwise each row names its backend and device. Target and case names longer than
    ``TARGET_WIDTH`` and ``CASE_WIDTH`` are cut, so that a one-device table fits ``WIDTH`` columns.
    Where targets declare ``flops=``, their GFLOP/s, the fraction of the multiply-add peak and the side
    of the roofline follow in a table of their own (``rate_table``), so neither table is wider."""
    devices = {(r.backend, r.device) for r in results}
    one = len(devices) == 1
    header = ["target", "case", *([] if one else ["backend / device"]), "time µs", "baseline", "ratio", "GB/s",
              "% copy BW", "verdict"]
    rows = [[_fit(r.target, TARGET_WIDTH), _fit(r.case, CASE_WIDTH),
             *([] if one else [_fit_device(f"{r.backend} / {r.device}", 40)]), _us(r.time_us),
             _us(r.baseline_us), f"{r.ratio:.3f}" if r.ratio is not None else "-",
             _rate(r.gbps),
             f"{100 * r.copy_fraction:.0f}%" if r.copy_fraction is not None else "-",
             r.verdict] for r in results]
    right = {i for i, h in enumerate(header) if h in ("time µs", "baseline", "ratio", "GB/s", "% copy BW")}
    lines = [f"on {b} / {d}" if d else f"on {b}" for b, d in devices] if one else []
    return lines + _table(header, rows, right)


RATE_HEADER = ["target", "case", "GFLOP/s", "% FMA peak", "bound"]


def rate_table(results: Sequence[PerfResult]) -> list[str]:
    """The arithmetic rate of the cases whose targets declare ``flops=``: GFLOP/s, the fraction of
    the device's multiply-add peak (measured in the same run) and the side of the roofline; empty
    where none does."""
    rows = []
    for r in results:
        if r.rate is None:
            continue
        peak = f"{100 * r.rate.peak_fraction:.0f}%" if r.rate.peak_fraction is not None else "-"
        rows.append([_fit(r.target, TARGET_WIDTH), _fit(r.case, CASE_WIDTH), _rate(r.rate.gflops), peak,
                     r.rate.bound or "-"])
    return _table(RATE_HEADER, rows, {2, 3}) if rows else []


#: Above this many screened cases, and this share of them drifting one way, the baselines of the
#: machine look stale: the summary says so once, with the command that re-records them.
STALE_MIN_CASES = 4
STALE_SHARE = 0.75


def drift_lines(results: Sequence[PerfResult]) -> list[str]:
    """One line for every unchanged case slower than recorded on this machine (drift passes), and one
    where most unchanged cases moved the same way: the baselines, not the kernels, are what changed."""
    screened = [r for r in results if r.compared == "recorded" and r.ratio is not None]
    slower = [r for r in screened if r.verdict == DRIFT]
    quicker = [r for r in screened if r.verdict == "faster"]
    lines: list[str] = []
    for moved, way in ((slower, "slower"), (quicker, "faster")):
        if len(screened) >= STALE_MIN_CASES and len(moved) >= STALE_SHARE * len(screened):
            lo, hi = min(r.ratio or 1 for r in moved), max(r.ratio or 1 for r in moved)
            lines.extend(_wrap(
                f"the baselines look stale on this machine: {len(moved)} of {len(screened)} unchanged cases ran "
                f"{way} than recorded (x{lo:.2f}–x{hi:.2f}). Re-record them with `pytest --ktune "
                "--ktune-update-baseline` and commit the params file (the scheduled workflow's baselines job "
                "does it on main by pull request)"))
            return lines
    if slower:
        lo, hi = min(r.ratio or 1 for r in slower), max(r.ratio or 1 for r in slower)
        names = ", ".join(f"{r.target}[{r.case}]" for r in slower[:3]) + (", …" if len(slower) > 3 else "")
        lines.extend(_wrap(
            f"{len(slower)} unchanged case(s) drifted x{lo:.2f}–x{hi:.2f} against the times recorded on this "
            f"machine ({names}); the source and parameters are the baseline's, so they pass. Re-record with "
            "--ktune-update-baseline if the machine itself changed"))
    return lines


def summary_sections(run: RunResults, agents: Sequence[StageResult] = ()) -> list[tuple[str, list[str]]]:
    """The sections of the terminal summary, each a title and its lines: the timed cases with their
    notes, the tuned keys, the agent stage."""
    out: list[tuple[str, list[str]]] = []
    if run.results:
        lines = summary_table(run.results)
        rates = rate_table(run.results)
        if rates:
            lines += ["", *rates]
        missing = [r for r in run.results if r.verdict == NO_BASELINE and not r.failure]
        notes = [r for r in run.results if (r.note or r.failure) and r.verdict not in (NO_BASELINE, DRIFT)]
        tail = [*run.notices]
        for r in notes:
            tail.extend(_wrap(f"{r.target}[{r.case}]: {r.note or r.failure}"))
        tail.extend(drift_lines(run.results))
        if missing:
            elsewhere = sum(1 for r in missing if "other machine" in r.note)
            tail.extend(_wrap(
                f"{len(missing)} case(s) have no baseline on this machine"
                + (f" ({elsewhere} have timings of other machines only, history here)" if elsewhere else "")
                + ": run with --ktune-update-baseline to record them in the params file"))
        if tail:
            lines += ["", *tail]
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
