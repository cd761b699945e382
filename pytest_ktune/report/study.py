"""The report of one tuning study: a markdown page and two hand-written SVG charts.

The tuning run (``run.tuning``) calls :func:`write_for` once a study ends. Everything here is
plain string building, so the report needs no plotting library, and every
piece of text that reaches SVG or markdown goes through one escaping helper.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from pytest_ktune.core.redact import redact
from pytest_ktune.core.text import duration as _duration
from pytest_ktune.core.text import one_line as _one_line
from pytest_ktune.core.text import params as _params
from pytest_ktune.core.text import us as _us
from pytest_ktune.report.svg import clean_importances, history_svg, importance_svg
from pytest_ktune.tuner.outcome import StudySummary, TrialRow, TuneOutcome
from pytest_ktune.tuner.storage import study_name

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


TRIAL_STATES = ("timed", "infeasible", "failed", "duplicate")


SOURCES = ("sampler", "warm-start")


MIN_TRIALS_FOR_IMPORTANCE = 4


def report_slug(target: str, device: str, key: Mapping[str, object]) -> str:
    """The file name stem of a study's report: its study's name (``tuner.storage.study_name``):
    short, readable, filesystem-safe, and the same on every run."""
    return study_name(target, device, key)


def _legacy_slug(target: str, device: str, key: Mapping[str, object]) -> str:
    """The stem reports had before 0.2 (the id, the device and the key, up to 80 characters): its
    files are removed when the study's report is written again, so that the page shows it once."""
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
    legacy = _legacy_slug(summary.target, summary.device, summary.key)
    for suffix in (".md", ".json", "-history.svg", "-importance.svg"):
        (folder / f"{legacy}{suffix}").unlink(missing_ok=True)
    ordered = sorted(rows, key=lambda r: r.number)
    best = _best_row(ordered, summary.best_params)
    history = folder / f"{slug}-history.svg"
    history.write_text(history_svg(summary, ordered), encoding="utf-8")
    importance = folder / f"{slug}-importance.svg"
    bars = clean_importances(importances)
    if bars:
        importance.write_text(importance_svg(bars), encoding="utf-8")
    else:
        importance.unlink(missing_ok=True)
    md = folder / f"{slug}.md"
    md.write_text(_markdown(summary, ordered, best, history.name, importance.name if bars else None),
                  encoding="utf-8")
    # What `ktune report` needs to place the plots: which study they are of.
    index = {"target": summary.target, "device": summary.device, "key": {str(k): v for k, v in summary.key.items()},
             "sampler": summary.sampler, "best_us": summary.best_us, "best_params": dict(summary.best_params or {}),
             "history": history.name, "importance": importance.name if bars else None, "report": md.name}
    (folder / f"{slug}.json").write_text(json.dumps(index, indent=2, sort_keys=True, default=str) + "\n",
                                         encoding="utf-8")
    return md


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

    return redact(storage)


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


def write_for(scratch: Path, outcome: TuneOutcome) -> Path | None:
    """The report of a finished tune under ``scratch/reports``; None when the tune carried no study
    summary, or the report could not be written (a report never ends a tune)."""
    if outcome.summary is None:
        return None
    try:
        return write_report(scratch / "reports", outcome.summary, outcome.trials, outcome.importances)
    except OSError:
        return None
