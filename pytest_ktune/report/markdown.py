"""The run's summary as markdown (``--ktune-markdown PATH``), for a CI job's page.

GitHub shows what a step appends to the file in ``$GITHUB_STEP_SUMMARY`` on the run's page, so the
report is appended, never written over: several steps (or a gate and a tune) share the file. It
holds what the terminal summary holds: the device, one row per timed case with regressions in bold,
the failed checks, and the tuned keys.
"""

from __future__ import annotations

import re
from pathlib import Path

from pytest_ktune.core.keys import key_label
from pytest_ktune.core.text import one_line, rate
from pytest_ktune.core.text import params as params_text
from pytest_ktune.core.text import us as _us
from pytest_ktune.report.results import RunResults

REGRESSION = "REGRESSION"


def _cell(text: str) -> str:
    """Text made safe in a markdown table cell."""
    return re.sub(r"([\\|*_`<>\[\]])", r"\\\1", one_line(text, 300))


def build(run: RunResults) -> str:
    """The markdown of the run: a heading, the tables, and a closing blank line."""
    failed = [o for o in run.outcomes if o.outcome in ("failed", "error")]
    regressions = [r for r in run.results if r.verdict == REGRESSION]
    where = f"{run.backend} on {run.device}" if run.device else run.backend
    verdict = "all checks passed" if not failed else f"{len(failed)} check(s) failed"
    if regressions:
        verdict += f", {len(regressions)} confirmed regression(s)"
    out = [f"### pytest-ktune: {_cell(where)}", "", f"**{verdict}** ({len(run.outcomes)} checks)", ""]
    if run.results:
        out += ["| target | case | time µs | baseline µs | ratio | GB/s | % copy BW | verdict |",
                "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        for r in run.results:
            ratio = r.time_us / r.baseline_us if r.time_us is not None and r.baseline_us else None
            mark = "**" if r.verdict == REGRESSION else ""
            cells = [_cell(r.target), _cell(r.case), _us(r.time_us), _us(r.baseline_us),
                     f"{ratio:.3f}" if ratio is not None else "-", rate(r.gbps),
                     f"{100 * r.copy_fraction:.0f}%" if r.copy_fraction is not None else "-",
                     f"{mark}{_cell(r.verdict)}{mark}"]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    if failed:
        out += ["| failed check | message |", "| --- | --- |"]
        out += [f"| {_cell(o.nodeid)} | {_cell(o.message.strip().splitlines()[0] if o.message.strip() else '')} |"
                for o in failed]
        out.append("")
    if run.tunes:
        out += ["| tuned | key | trials | current µs | best µs | best params | outcome |",
                "| --- | --- | ---: | ---: | ---: | --- | --- |"]
        for t in run.tunes:
            outcome = ("written" if t.written else "accepted, not written") if t.accepted else "kept"
            out.append("| " + " | ".join([_cell(t.target), _cell(key_label(t.key)), t.trials_cell(), _us(t.current_us),
                                          _us(t.best_us), _cell(params_text(t.best_params)), outcome]) + " |")
        out.append("")
    return "\n".join(out) + "\n"


def write(path: Path, run: RunResults) -> Path:
    """Append the run's markdown to ``path`` (made where it is not there yet); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(build(run))
    return path
