"""The whole loop through pytest on PoCL: tune a kernel whose default is slow, write the winner with
a baseline measured with it, pass the gate against it, and leave it alone under --ktune-autotune."""

from __future__ import annotations

import re
from typing import Any

import pytest
from plugin._kit import Project, lit, summary_rows

from ._tk import config_text, decode, only_study, open_journal, repeat_target, timed

REPEATS = (1, 4, 64)
SPACE: dict[str, tuple[int, ...]] = {"BLOCK": (64, 128), "REPEAT": REPEATS}
DEFAULT = {"BLOCK": 64, "REPEAT": 64}


def reports(project: Project) -> tuple[list[str], list[str]]:
    folder = project.path / ".ktune" / "reports"
    return sorted(p.name for p in folder.glob("*.md")), sorted(p.name for p in folder.glob("*.svg"))


def check_written(record: dict[str, Any], sampler: str, trials: int) -> None:
    """A record the tuner wrote after an accepted tune."""
    assert record["params"] != DEFAULT
    assert record["params"]["REPEAT"] < DEFAULT["REPEAT"]
    assert record["tuned"]["sampler"] == sampler
    assert record["tuned"]["trials"] == trials
    assert record["tuned"]["result"].endswith("faster than the current parameters in same-run A/B")
    assert record["tuned"]["study"].startswith("scale-N4096-")
    baseline = record["baseline"]
    assert baseline["params"] == record["params"]
    assert baseline["source_path"] == "scale.cl" and baseline["commit"] is None
    (timings,) = baseline["machines"].values()  # measured on this one machine
    assert set(timings) == {"small"}


def test_tune_writes_the_winner_then_the_gate_passes_and_autotune_skips(project: Project) -> None:
    project.write(repeat_target(repeats=REPEATS))
    result = project.run("--ktune-tune", "--ktune-write=file",
                         "--ktune-trials=5", "--ktune-seed=11", "-v")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([lit("kernels.py::scale::tune[N4096]") + " PASSED*",
                                 "*= ktune tuning =*",
                                 "scale *N4096 *5 * written"])

    (record,) = project.records()
    check_written(record, "bo", 5)
    # The baseline was measured with the new parameters: far below what the study timed for the default.
    _, trials = only_study(open_journal(project.path))
    by_config = {config_text(decode(t, SPACE)): t for t in timed(trials)}
    assert len(by_config) == 5
    default_us = by_config[config_text(DEFAULT)].value
    best = min(timed(trials), key=lambda t: t.value or 0.0)
    assert decode(best, SPACE) == record["params"]
    assert default_us is not None
    (timings,) = record["baseline"]["machines"].values()
    assert timings["small"]["median_us"] < default_us / 4

    md, svg = reports(project)
    assert len(md) == 1
    assert svg == sorted([md[0][:-3] + "-history.svg", md[0][:-3] + "-importance.svg"])

    # The gate, against the tuned record: passes, compared with the new baseline.
    written = project.params_path.read_bytes()
    gate = project.run("-v")
    assert gate.ret == 0, gate.stdout.str()
    gate.assert_outcomes(passed=2)
    row = summary_rows(gate)[("scale", "small")]
    assert row[-1] in ("ok", "faster", "drift"), row
    assert row[3] != "-"  # a baseline was there to compare with

    # --ktune-autotune: tuned already and no regression in this run, so the key is skipped.
    auto = project.run("--ktune-autotune", "--ktune-write=file", "--ktune-trials=5", "-rs")
    assert auto.ret == 0, auto.stdout.str()
    auto.assert_outcomes(passed=2, skipped=1)
    auto.stdout.re_match_lines([r"SKIPPED \[1\] .*: tuned on \d{4}-\d\d-\d\dT[\d:]+Z and no regression "
                                r"in this run"])
    assert project.params_path.read_bytes() == written
    assert len(only_study(open_journal(project.path))[1]) == len(trials)  # no new trial


@pytest.mark.parametrize("sampler", ["random", "grid"])
def test_other_samplers(project: Project, sampler: str) -> None:
    project.write(repeat_target(repeats=(1, 64)))  # four points; the budget covers them all
    result = project.run("--ktune-tune", "--ktune-write=file",
                         f"--ktune-sampler={sampler}", "--ktune-trials=4", "--ktune-seed=5",
                         "-m", "ktune_tune")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=1)
    (record,) = project.records()
    check_written(record, sampler, 4)
    assert record["params"]["REPEAT"] == 1

    space = {"BLOCK": (64, 128), "REPEAT": (1, 64)}
    _, trials = only_study(open_journal(project.path))
    done = timed(trials)
    points = {config_text({"BLOCK": b, "REPEAT": r}) for b in (64, 128) for r in (1, 64)}
    assert sorted(config_text(decode(t, space)) for t in done) == sorted(points)
    sources = [t.user_attrs.get("source", "sampler") for t in done]
    if sampler == "grid":
        # The default comes first, as a warm start, then the rest of the grid in order.
        assert sources == ["warm-start", "grid", "grid", "grid"]
    else:
        assert sources[0] == "warm-start"
    md, svg = reports(project)
    assert len(md) == 1 and len(svg) == 2
    text = (project.path / ".ktune" / "reports" / md[0]).read_text()
    assert re.search(rf"^\| sampler \| {sampler} \|$", text, flags=re.MULTILINE)
