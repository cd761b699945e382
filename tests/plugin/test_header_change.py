"""The gate and the files a kernel includes: a slowdown that comes from an edited header is not waved
through as drift; it is confirmed A/B against the baseline's header, read from git, or fails unconfirmed
naming the header git does not hold."""

from __future__ import annotations

import json

import pytest

from ._kit import SCALE_CL, Project, case, failure_section, lit, scale_target, summary_rows

# The scale kernel of _kit, with its busy work (REPEAT rounds of sin() per element, which never change
# the output) set in a header it includes, ahead of the kernel's own fallback.
SCALE_WITH_HEADER_CL = '#include "work.h"\n' + SCALE_CL
FAST_HEADER = "#define REPEAT 4\n"
SLOW_HEADER = "#define REPEAT 64\n"  # 16x the busy work

SCALE = scale_target(source="scaleh.cl", cases=case(16384, case_id="n16k"))
GITIGNORE = ".ktune/\n.cache/\n__pycache__/\nrunpytest-*\nstdout\nstderr\n"


def _committed(project: Project, *, header_in_git: bool) -> Project:
    """The project committed (the header too, or not), and a baseline recorded from it and committed."""
    project.write(SCALE, sources={"scaleh": SCALE_WITH_HEADER_CL})
    (project.path / "work.h").write_text(FAST_HEADER)
    (project.path / ".gitignore").write_text(GITIGNORE + ("" if header_in_git else "work.h\n"))
    head = project.commit_all("kernels")

    recorded = project.run("--ktune-update-baseline")
    recorded.assert_outcomes(passed=2)
    (record,) = project.records()
    assert record["baseline"]["commit"] == head  # the source file is committed; the header is checked apart
    assert isinstance(record["baseline"]["deps_hash"], str)
    project.git("add", "ktune-params.json")
    project.git("commit", "-q", "-m", "baseline")
    return project


@pytest.fixture
def committed(project: Project) -> Project:
    return _committed(project, header_in_git=True)


def _slow_header_run(project: Project) -> pytest.RunResult:
    (project.path / "work.h").write_text(SLOW_HEADER)
    return project.run("-v")


def test_a_slower_header_is_a_regression_confirmed_against_the_old_header(committed: Project) -> None:
    old_deps = committed.records()[0]["baseline"]["deps_hash"]
    main = (committed.path / "scaleh.cl").read_text()
    result = _slow_header_run(committed)

    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([lit("kernels.py::scale::perf[n16k]") + " FAILED*"])
    assert summary_rows(result)["scale", "n16k"][-1] == "REGRESSION"
    message = failure_section(result, "scale::perf[n16k]")
    assert "drift" not in message
    # The A/B's baseline side was built with the committed header: 16x less work, so much faster.
    assert "same-run A/B against the baseline" in message
    ab = float(message.split("same-run A/B against the baseline")[1].split(", x")[1].split(",")[0])
    assert ab > 2, message
    commit = committed.git("rev-parse", "HEAD~1").strip()
    assert f"Changed since the baseline (commit {commit[:12]}): included files (work.h) {old_deps} -> " in message
    assert "source " not in message.split("Changed since the baseline")[1]  # the source file is the same
    # Nothing of the baseline's copy is left behind, and the working tree is untouched.
    assert (committed.path / "work.h").read_text() == SLOW_HEADER
    assert (committed.path / "scaleh.cl").read_text() == main
    assert committed.git("status", "--porcelain").splitlines() == [" M work.h"]


def test_a_header_git_does_not_hold_fails_unconfirmed_naming_it(project: Project) -> None:
    _committed(project, header_in_git=False)
    result = _slow_header_run(project)

    result.assert_outcomes(passed=1, failed=1)
    assert summary_rows(result)["scale", "n16k"][-1] == "REGRESSION"
    message = failure_section(result, "scale::perf[n16k]")
    commit = project.git("rev-parse", "HEAD~1").strip()
    assert (f"The files the source includes changed since the baseline, and git holds no copy of the "
            f"baseline's header work.h at commit {commit}, so the slowdown could not be confirmed A/B"
            in " ".join(message.split())), message
    assert "Traceback" not in message


def test_a_baseline_recorded_before_deps_hash_makes_no_claim_about_headers(committed: Project) -> None:
    data = json.loads(committed.params_path.read_text())
    del data["records"][0]["baseline"]["deps_hash"]
    committed.params_path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    result = _slow_header_run(committed)

    # As before headers were hashed: the same source file and parameters, so any slowdown is drift.
    result.assert_outcomes(passed=2)
    assert summary_rows(result)["scale", "n16k"][-1] == "drift"
