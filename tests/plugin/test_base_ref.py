"""The gate fails closed: --ktune-base REF times every changed target A/B against REF with no baseline
needed, and a params file, record or baseline that REF has and the change lost is an error; so is a
missing params file under --ktune-strict."""

from __future__ import annotations

import json

import pytest

from ._kit import Project, add_target, case, failure_section, lit, scale_target, summary_rows

TARGETS = scale_target(cases=case(16384, case_id="n16k"), space="BLOCK=[64], REPEAT=[4, 64]",
                       default="{'BLOCK': 64, 'REPEAT': 4}") + add_target()
GITIGNORE = ".ktune/\n.cache/\n__pycache__/\nrunpytest-*\nstdout\nstderr\n"


@pytest.fixture
def committed(project: Project) -> Project:
    """A committed project with no params file at all: nothing recorded anywhere."""
    project.write(TARGETS)
    (project.path / ".gitignore").write_text(GITIGNORE)
    project.commit_all("kernels")
    return project


@pytest.fixture
def recorded(committed: Project) -> Project:
    """The same, with baselines recorded on this machine and committed."""
    committed.run("--ktune-update-baseline").assert_outcomes(passed=4)
    committed.git("add", "ktune-params.json")
    committed.git("commit", "-q", "-m", "baseline")
    return committed


def test_base_ref_catches_a_slower_source_with_no_baseline_recorded(committed: Project) -> None:
    source = committed.path / "scale.cl"
    source.write_text(source.read_text().replace("r < REPEAT;", "r < 8 * REPEAT;"))

    result = committed.run("-v", "--ktune-base", "HEAD")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines([lit("kernels.py::scale::perf[n16k]") + " FAILED*"])
    rows = summary_rows(result)
    assert rows["scale", "n16k"][-1] == "REGRESSION"
    assert rows["add", "n4096"][-1] == "no baseline"  # unchanged since HEAD: not A/B'd, nothing to screen with
    message = failure_section(result, "scale::perf[n16k]")
    assert "same-run A/B against HEAD (" in message and "Changed since HEAD" in message
    result.stdout.fnmatch_lines(["--ktune-base HEAD (*): 1 case(s) of targets changed since then timed A/B*"])

    # The same change without --ktune-base has nothing to compare with: it passes, saying so.
    plain = committed.run("-v")
    plain.assert_outcomes(passed=4)
    plain.stdout.fnmatch_lines(["the params file * does not exist: no case had a baseline to be compared with*"])


def test_base_ref_passes_a_change_that_is_not_slower(recorded: Project) -> None:
    kernels = recorded.path / "kernels.py"
    kernels.write_text(kernels.read_text() + "\n# a comment: the launcher changed, the kernels did not\n")
    result = recorded.run("-v", "--ktune-base", "HEAD")
    result.assert_outcomes(passed=4)
    assert "A/B" not in " ".join(summary_rows(result)["add", "n4096"])


def test_a_deleted_params_file_fails_under_base_and_strict(recorded: Project) -> None:
    recorded.params_path.unlink()
    base = recorded.run("--ktune-base", "HEAD")
    assert base.ret == pytest.ExitCode.USAGE_ERROR
    base.stderr.fnmatch_lines(["*ktune-params.json does not exist, but HEAD (*) has one*",
                               "*git checkout HEAD -- ktune-params.json*"])
    strict = recorded.run("--ktune-strict")
    assert strict.ret == pytest.ExitCode.USAGE_ERROR
    strict.stderr.fnmatch_lines(["*--ktune-strict: the params file *ktune-params.json does not exist*"])
    missing = recorded.run("--ktune-strict", "--ktune-params", str(recorded.path / "elsewhere.json"))
    assert missing.ret == pytest.ExitCode.USAGE_ERROR


def test_a_record_deleted_by_the_change_fails_its_case_under_base(recorded: Project) -> None:
    data = json.loads(recorded.params_path.read_text())
    data["records"] = [r for r in data["records"] if not r["target"].endswith("::add")]
    recorded.params_path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")

    result = recorded.run("-v", "--ktune-base", "HEAD")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines([lit("kernels.py::add::perf[n4096]") + " FAILED*"])
    assert summary_rows(result)["add", "n4096"][-1] == "missing"
    message = failure_section(result, "add::perf[n4096]")
    assert "HEAD (" in message and "has the record for" in message and "git checkout HEAD --" in message
    # Without --ktune-base the same file only lacks a baseline, and says so.
    recorded.run("-v").assert_outcomes(passed=4)


def test_strict_fails_a_case_with_no_baseline_on_a_machine_that_has_baselines(recorded: Project) -> None:
    # A new case of a recorded target: the machine has baselines, this case none.
    recorded.write(scale_target(cases=case(16384, case_id="n16k") + ", " + case(8192, case_id="n8k"),
                                space="BLOCK=[64], REPEAT=[4, 64]", default="{'BLOCK': 64, 'REPEAT': 4}"),
                   add_target())
    strict = recorded.run("-v", "--ktune-strict", "-k", "scale")
    strict.stdout.fnmatch_lines([lit("kernels.py::scale::perf[n8k]") + " FAILED*"])
    assert summary_rows(strict)["scale", "n8k"][-1] == "missing"
    assert "no baseline of this case on this machine" in failure_section(strict, "scale::perf[n8k]")
    recorded.run("-v", "-k", "scale").assert_outcomes(passed=4)


def test_re_recorded_baselines_travel_as_a_commit_and_leave_the_checkout_alone(recorded: Project) -> None:
    before = recorded.params_path.read_text()
    result = recorded.run("--ktune-update-baseline", "--ktune-write=commit")
    result.assert_outcomes(passed=4)
    line = next(x for x in result.stdout.lines if x.startswith("ktune: baselines: committed "))
    branch = line.split("on the new branch ")[1].split(";")[0]
    assert recorded.params_path.read_text() == before  # the checkout is untouched
    assert recorded.git("status", "--porcelain").strip() == ""
    committed = json.loads(recorded.git("show", f"{branch}:ktune-params.json"))
    assert committed != json.loads(before)  # new timings, under this machine's identity
    assert {r["params"]["BLOCK"] for r in committed["records"]} == {64}
