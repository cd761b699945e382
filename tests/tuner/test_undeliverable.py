"""A report or a write-back asked for and not delivered fails the run: at its start where that can be
known then (a missing optional package, no GitHub token, no git repository), with a non-zero exit at
its end otherwise. Both skins: ``pytest --ktune`` and the ``ktune`` command."""

from __future__ import annotations

import subprocess

import pytest
from plugin._kit import Project, add_target, lit

from ._tk import OTHER_RECORD_FILE, Cli, repeat_target

TUNE = ("--ktune-tune", "--ktune-trials=3", "--ktune-seed=3", "-m", "ktune_tune")

# As in a suite that installed pytest-ktune without its benchmark extra: pytest-benchmark cannot be imported.
NO_PYTEST_BENCHMARK = """
import sys
for name in ("pytest_benchmark", "pytest_benchmark.plugin", "pytest_benchmark.stats", "pytest_benchmark.utils"):
    sys.modules[name] = None
"""

# A write-back mode that cannot deliver, as a plugin's may fail at the end of a run.
BROKEN_WRITE_BACK = """
from pytest_ktune.core.errors import KtuneError


def broken(request):
    raise KtuneError("the artifact store refused the upload", hint="check its credentials")


def pytest_ktune_write_back(mode):
    return broken if mode == "broken" else None
"""


def test_benchmark_json_without_pytest_benchmark_is_an_error_before_the_run(project: Project) -> None:
    project.write(add_target())
    project.pytester.makeconftest(NO_PYTEST_BENCHMARK)
    result = project.run("--ktune-benchmark-json=bench.json", "-p", "no:benchmark")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines(["ERROR: --ktune-benchmark-json: the benchmark JSON is built with pytest-benchmark, "
                                 "which is not installed",
                                 lit("next step: pip install 'pytest-ktune[benchmark]'") + "*"])
    assert not (project.path / "bench.json").exists()


def test_a_report_that_cannot_be_written_fails_the_run(project: Project) -> None:
    project.write(add_target())
    (project.path / "blocked").write_text("a file where a folder should be")
    result = project.run("--ktune-junit=blocked/ktune.xml")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["ktune: JUnit report NOT written to *blocked/ktune.xml: *"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_pull_request_mode_without_a_token_is_refused_before_tuning(project: Project,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    project.write(repeat_target())
    project.commit_all("kernels")
    result = project.run(*TUNE, "--ktune-write=pr")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines(["ERROR: --ktune-write=pr opens a pull request with GITHUB_TOKEN, which is not set",
                                 "next step: set GITHUB_TOKEN*"])
    assert not (project.path / ".ktune").exists()  # nothing was tuned


def test_a_git_mode_outside_a_repository_is_refused_before_tuning(project: Project) -> None:
    project.write(repeat_target())
    result = project.run(*TUNE, "--ktune-write=patch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines(["ERROR: --ktune-write=patch delivers through git, but * is not in a git repository",
                                 "next step: run inside a clone of the repository, or use --ktune-write=file"])


def test_a_write_back_that_fails_at_the_end_fails_the_run(project: Project) -> None:
    project.write(repeat_target())
    project.pytester.makeconftest(BROKEN_WRITE_BACK)
    result = project.run(*TUNE, "--ktune-write=broken")
    result.assert_outcomes(passed=1)  # the tune item itself passed: the winner is there, undelivered
    result.stdout.fnmatch_lines(["ktune: tuned winners NOT written (--ktune-write=broken): the artifact store "
                                 "refused the upload"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_the_command_refuses_pr_without_a_token_before_tuning(project: Project, cli: Cli,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    project.write(repeat_target())
    project.commit_all("kernels")
    done = cli.run("tune", "--write", "pr", "--trials", "2")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        "ktune: project . (--root, ini file tox.ini); params ktune-params.json (new)",
        "error: --write=pr opens a pull request with GITHUB_TOKEN, which is not set",
        "next step: set GITHUB_TOKEN (in a workflow: `env: GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}`), or use "
        "--write=commit or patch"]
    assert not (project.path / ".ktune").exists()


def test_report_on_a_damaged_params_file_is_an_error(project: Project, cli: Cli) -> None:
    project.write(repeat_target())
    project.params_path.write_text(OTHER_RECORD_FILE[: len(OTHER_RECORD_FILE) // 2])  # cut short mid-write
    done = subprocess.run(cli.argv("report")[:-2], cwd=project.path, capture_output=True, text=True, timeout=120,
                          check=False)  # report has no --backend
    assert done.returncode == 2, done.stdout + done.stderr
    assert str(project.params_path) in done.stderr and "error:" in done.stderr
    assert not (project.path / ".ktune" / "report.html").exists()


def test_the_command_exits_non_zero_when_the_write_back_cannot_deliver(project: Project, cli: Cli) -> None:
    project.write(repeat_target())
    project.commit_all("kernels")
    outside = project.path.parent / "elsewhere-params.json"
    done = cli.run("tune", "--write", "commit", "--trials", "3", "--seed", "3", "--params", str(outside))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ktune: tuned winners NOT written (--write=commit): the params file " in done.stderr
    assert "is outside the project root" in done.stderr
    assert project.git("branch", "--list", "ktune/*") == ""
