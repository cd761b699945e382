"""Options from pytest's ini file, [tool.ktune] and the environment, as a user sets them: no warning,
the command line over the environment over the files, and ``ktune = true`` collecting without --ktune."""

from __future__ import annotations

import pytest

from ._kit import Project, add_target


def _header(result: pytest.RunResult) -> str:
    line = next((ln for ln in result.stdout.lines if ln.startswith("ktune: seed ")), None)
    assert line is not None, result.stdout.str() + result.stderr.str()
    return line


def test_the_threshold_from_pytest_ini_then_the_environment_then_the_command_line(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    project.write(add_target())
    project.pytester.makeini("[pytest]\nktune_threshold = median:3%\nktune_seed = 17\n")
    monkeypatch.delenv("KTUNE_THRESHOLD", raising=False)
    result = project.run("--co")
    assert "PytestConfigWarning" not in result.stdout.str() + result.stderr.str()
    assert "seed 17 " in _header(result) and "threshold median:3% (from " in _header(result)
    monkeypatch.setenv("KTUNE_THRESHOLD", "median:4%")
    assert "threshold median:4% (from KTUNE_THRESHOLD)" in _header(project.run("--co"))
    assert "threshold median:6%, " in _header(project.run("--co", "--ktune-threshold=median:6%"))


def test_the_tool_ktune_table_of_pyproject(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    project.write(add_target())
    monkeypatch.delenv("KTUNE_THRESHOLD", raising=False)
    (project.path / "pyproject.toml").write_text('[tool.ktune]\nthreshold = "median:7%"\nparams = "conf/p.json"\n')
    header = _header(project.run("--co"))
    assert "threshold median:7% (from [tool.ktune] of " in header
    assert header.endswith(", params conf/p.json")  # relative to the rootdir, which pytest names below
    project.pytester.makeini("[pytest]\nktune_threshold = median:8%\n")  # pytest's ini key is read first
    assert "threshold median:8%" in _header(project.run("--co"))


def test_a_mistake_in_the_configuration_is_a_usage_error_naming_the_file(project: Project) -> None:
    project.write(add_target())
    (project.path / "pyproject.toml").write_text('[tool.ktune]\ntreshold = "median:7%"\n')
    result = project.run("--co")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*[[]tool.ktune[]] in *pyproject.toml has unknown keys: treshold*"])
    (project.path / "pyproject.toml").write_text('[tool.ktune]\nthreshold = "fast"\n')
    result = project.run("--co")
    result.stderr.fnmatch_lines(["*threshold (set in [[]tool.ktune[]] of *pyproject.toml): cannot read the "
                                 "threshold 'fast'*"])


def test_ktune_true_in_the_ini_file_collects_without_the_flag(project: Project) -> None:
    project.write(add_target())
    project.pytester.makeini("[pytest]\nktune = true\nktune_backend = opencl\n")
    result = project.pytester.runpytest_subprocess("--co", "-q", "-p", "no:cacheprovider", timeout=300)
    result.stdout.fnmatch_lines(["kernels.py::add::correct[[]n4096[]]", "kernels.py::add::perf[[]n4096[]]"])
