"""Candidates that break — do not compile, break a device limit, crash the worker, return NaN, or
hang — fail their own trial only, with the reason recorded in the study and the report; the tune
carries on in a fresh worker and still writes the best. Real kernels, run by PoCL in the worker."""

from __future__ import annotations

import re
from pathlib import Path

from optuna.trial import FrozenTrial, TrialState
from plugin._kit import Project

from ._tk import (
    MODE_BAD_SOURCE,
    MODE_HANG,
    MODE_NAN,
    MODE_OK,
    MODE_OUT_OF_BOUNDS,
    MODE_SLOW,
    PROBE_CL,
    config_text,
    decode,
    only_study,
    open_journal,
    probe_target,
    timed,
)

BIG = 8192  # above PoCL's largest work-group (4096 on its CPU device)


def report_rows(report: Path) -> dict[str, tuple[str, str]]:
    """The report's table of all trials: params cell -> (state, reason)."""
    rows = {}
    for line in report.read_text().splitlines():
        cells = [re.sub(r"\\(.)", r"\1", c.strip()) for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) == 8 and cells[3].startswith("`"):
            rows[cells[3].strip("`")] = (cells[2], cells[7])
    return rows


def reason(trial: FrozenTrial) -> str:
    return str(trial.user_attrs.get("failed") or trial.user_attrs.get("infeasible") or "")


def test_each_broken_candidate_fails_alone_and_the_best_is_still_written(project: Project) -> None:
    # The grid comes in the Space's order: every broken point before the fast one, so each is
    # evaluated; the budget of 2 is met by the default (slow) and the fast point.
    space = {"BLOCK": [BIG, 64], "MODE": [MODE_BAD_SOURCE, MODE_NAN, MODE_OUT_OF_BOUNDS, MODE_HANG, MODE_OK,
                                        MODE_SLOW]}
    project.write(probe_target(space=f"BLOCK={space['BLOCK']}, MODE={space['MODE']}, "
                                     f"constraints=['BLOCK == 64 or MODE == {MODE_OK}']",
                               default=f"{{'BLOCK': 64, 'MODE': {MODE_SLOW}}}"),
                  sources={"probe": PROBE_CL})
    result = project.run("--ktune-tune", "--ktune-write=file",
                         "--ktune-sampler=grid", "--ktune-trials=2", "--ktune-trial-timeout=5",
                         "--ktune-seed=1")

    # pytest itself came through: the default's items and the tune item pass.
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=3)
    result.stdout.re_match_lines([r"^scale +N4096 +2 \(\+1 infeasible, 4 failed\) .* +written$"])

    _, trials = only_study(open_journal(project.path))
    by_config: dict[str, list[FrozenTrial]] = {}
    for t in trials:
        by_config.setdefault(config_text(decode(t, space)), []).append(t)

    def one(block: int, mode: int) -> FrozenTrial:
        found = by_config[config_text({"BLOCK": block, "MODE": mode})]
        assert len(found) == 1, [(t.number, t.state, t.user_attrs) for t in found]
        return found[0]

    # (b) a launch above the device limit: infeasible, with the limit, and never timed.
    big = one(BIG, MODE_OK)
    assert big.state == TrialState.FAIL and "failed" not in big.user_attrs
    assert re.search(rf"launched with {BIG} threads per block; this device allows at most \d+",
                     big.user_attrs["infeasible"])
    assert "cases_us" not in big.user_attrs
    # (a) a configuration whose source does not compile.
    assert one(64, MODE_BAD_SOURCE).user_attrs["failed"].startswith("compile error: ")
    # (d) NaN in the output: a mismatch.
    nan = one(64, MODE_NAN).user_attrs["failed"]
    assert "disagrees with the reference" in nan and "got nan" in nan
    # (c) a wild write: the worker dies (PoCL's CPU device segfaults) or the output mismatches.
    wild = one(64, MODE_OUT_OF_BOUNDS).user_attrs["failed"]
    assert re.search(r"the worker process (died from signal \d+|exited with code)|disagrees with the reference",
                     wild), wild
    # (e) an endless loop: the worker is killed at the per-trial timeout.
    hang = one(64, MODE_HANG)
    assert hang.user_attrs["failed"].startswith("no answer within 5 s")
    for broken in (big, one(64, MODE_BAD_SOURCE), one(64, MODE_NAN), one(64, MODE_OUT_OF_BOUNDS), hang):
        assert broken.state == TrialState.FAIL

    # The tune went on after all of them, in fresh workers, and timed the fast point last.
    fast, slow = one(64, MODE_OK), one(64, MODE_SLOW)
    assert {t.number for t in timed(trials)} == {fast.number, slow.number}
    assert fast.number > hang.number
    assert fast.value is not None and slow.value is not None and fast.value < slow.value / 4

    # The report lists every broken trial with its reason.
    reports = sorted((project.path / ".ktune" / "reports").glob("*.md"))
    assert len(reports) == 1
    rows = report_rows(reports[0])
    for t in (big, one(64, MODE_BAD_SOURCE), one(64, MODE_NAN), one(64, MODE_OUT_OF_BOUNDS), hang):
        cell = ", ".join(f"{k}={v}" for k, v in sorted(decode(t, space).items()))
        state, why = rows[cell]
        assert state == ("infeasible" if t is big else "failed")
        assert why[:40] == reason(t)[:40]
    assert rows[f"BLOCK=64, MODE={MODE_OK}"][0] == "timed"

    # The best was written, with a baseline measured with it.
    (record,) = project.records()
    assert record["params"] == {"BLOCK": 64, "MODE": MODE_OK}
    assert record["baseline"]["params"] == record["params"]
    assert record["tuned"]["trials"] == 2 and record["tuned"]["sampler"] == "grid"


def test_a_configuration_that_failed_is_not_tried_again(project: Project) -> None:
    """A budget larger than the points that can be timed: the sampler keeps proposing the broken
    ones, which are told apart without running them again, and the tune ends when the space is spent."""
    space = {"BLOCK": [64, BIG], "MODE": [MODE_OK, MODE_BAD_SOURCE, MODE_NAN, MODE_SLOW]}
    project.write(probe_target(space=f"BLOCK={space['BLOCK']}, MODE={space['MODE']}",
                               default=f"{{'BLOCK': 64, 'MODE': {MODE_SLOW}}}"),
                  sources={"probe": PROBE_CL})
    result = project.run("--ktune-tune", "--ktune-write=file",
                         "--ktune-sampler=random", "--ktune-trials=5", "--ktune-seed=7",
                         "-m", "ktune_tune")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=1)

    _, trials = only_study(open_journal(project.path))
    evaluated: dict[str, int] = {}
    for t in trials:
        if "failed" in t.user_attrs or "infeasible" in t.user_attrs:
            key = config_text(decode(t, space))
            evaluated[key] = evaluated.get(key, 0) + 1
    assert evaluated, "no broken configuration was proposed"
    assert all(n == 1 for n in evaluated.values()), evaluated
    # Only the two points that run were timed, once each; copies of trial 0 are not timed trials.
    done = timed(trials)
    assert sorted(config_text(decode(t, space)) for t in done) == sorted(
        config_text({"BLOCK": 64, "MODE": m}) for m in (MODE_OK, MODE_SLOW))
    (record,) = project.records()
    assert record["params"] == {"BLOCK": 64, "MODE": MODE_OK}
    assert record["tuned"]["trials"] == 2
