"""Where options come from (run.config): the command line over the environment over pytest's ini file over
[tool.ktune], each value parsed with an error that says where it was given, paths relative to where."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_ktune.cli import _options as cli_options
from pytest_ktune.cli import _parser
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.options import OptionError
from pytest_ktune.core.paths import params_path
from pytest_ktune.run.config import ConfigFiles, RunOptions, project_files, resolve


def _files(tmp_path: Path, ini: dict[str, str] | None = None, table: dict[str, object] | None = None) -> ConfigFiles:
    return ConfigFiles(ini=ini or {}, ini_path=tmp_path / "pytest.ini", table=table or {},
                       table_path=tmp_path / "pyproject.toml")


def _resolve(tmp_path: Path, given: dict[str, Any], files: ConfigFiles, **kwargs: Any) -> RunOptions:
    return resolve(given, files, root=tmp_path, **kwargs)


def test_each_layer_wins_over_the_ones_below_it(tmp_path: Path) -> None:
    files = _files(tmp_path, ini={"ktune_trials": "20"}, table={"trials": 10, "sampler": "tpe"})
    assert _resolve(tmp_path, {}, _files(tmp_path), env={}).trials == 40  # the default
    assert _resolve(tmp_path, {}, _files(tmp_path, table={"trials": 10}), env={}).trials == 10
    r = _resolve(tmp_path, {}, files, env={})
    assert (r.trials, r.origin("trials")) == (20, str(tmp_path / "pytest.ini"))
    assert (r.sampler, r.origin("sampler")) == ("tpe", f"[tool.ktune] of {tmp_path / 'pyproject.toml'}")
    r = _resolve(tmp_path, {}, files, env={"KTUNE_TRIALS": "30"})
    assert (r.trials, r.origin("trials")) == (30, "KTUNE_TRIALS")
    r = _resolve(tmp_path, {"trials": 50}, files, env={"KTUNE_TRIALS": "30"})
    assert (r.trials, r.origin("trials")) == (50, "command line")


def test_a_bad_value_names_where_it_was_given(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match=r"KTUNE_TRIALS: 'many' is not a whole number"):
        _resolve(tmp_path, {}, _files(tmp_path), env={"KTUNE_TRIALS": "many"})
    with pytest.raises(OptionError, match=r"ktune_autotune in .*pytest.ini: 'sometimes' is not true or false"):
        _resolve(tmp_path, {}, _files(tmp_path, ini={"ktune_autotune": "sometimes"}), env={})
    with pytest.raises(OptionError, match=r"unknown keys: treshold") as info:
        _resolve(tmp_path, {}, _files(tmp_path, table={"treshold": "median:3%"}), env={})
    assert "threshold" in info.value.hint and str(tmp_path / "pyproject.toml") in info.value.message


def test_paths_are_relative_to_where_they_were_given(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    files = ConfigFiles(ini={"ktune_junit": "out/ktune.xml"}, ini_path=conf / "pytest.ini",
                        table={"params": "p/params.json"}, table_path=conf / "pyproject.toml")
    r = _resolve(tmp_path, {}, files, env={}, cwd=tmp_path / "elsewhere")
    assert r.junit == str(conf / "out" / "ktune.xml")
    # The params file a file names ranks below KTUNE_PARAMS (core.paths), so it is passed on as such.
    assert r.params is None and r.params_configured == conf / "p" / "params.json"
    assert params_path(tmp_path, configured=r.params_configured, env={}) == conf / "p" / "params.json"
    assert params_path(tmp_path, configured=r.params_configured, env={"KTUNE_PARAMS": str(tmp_path / "e.json")}) \
        == tmp_path / "e.json"
    r = _resolve(tmp_path, {"junit": "j.xml"}, files, env={}, cwd=tmp_path / "elsewhere")
    assert r.junit == str(tmp_path / "elsewhere" / "j.xml")


def test_the_ktune_command_reads_pytest_ini_and_tool_ktune(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KTUNE_TRIALS", "KTUNE_SAMPLER", "KTUNE_TUNE_TIMEOUT", "KTUNE_PARAMS"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "pyproject.toml").write_text('[tool.ktune]\ntrials = 7\nsampler = "tpe"\ntune-timeout = 12.5\n')
    (tmp_path / "pytest.ini").write_text("[pytest]\nktune_sampler = random\n")
    project = tmp_path / "sub"
    project.mkdir()
    opts = cli_options(_parser().parse_args(["tune", "--root", str(project)]), tune=True)
    assert (opts.trials, opts.sampler, opts.tune_timeout) == (7, "random", 12.5)
    assert opts.tune and not opts.autotune
    monkeypatch.setenv("KTUNE_TRIALS", "9")
    opts = cli_options(_parser().parse_args(["tune", "--root", str(project), "--sampler", "grid"]), tune=True)
    assert (opts.trials, opts.sampler) == (9, "grid")
    opts = cli_options(_parser().parse_args(["tune", "--root", str(project), "--trials", "3", "--timeout", "4"]),
                       tune=True)
    assert (opts.trials, opts.tune_timeout) == (3, 4.0)  # --timeout: the old name of --tune-timeout


def test_project_files_find_the_nearest_config(tmp_path: Path) -> None:
    (tmp_path / "tox.ini").write_text("[pytest]\nktune_trials = 5\n")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "pyproject.toml").write_text("[project]\nname = 'x'\n")  # no pytest table: not pytest's
    files = project_files(tmp_path / "a")
    assert files.ini == {"ktune_trials": "5"} and files.ini_path == tmp_path / "tox.ini"
    assert files.table == {} and files.table_path is None
    (tmp_path / "a" / "pyproject.toml").write_text("[tool.ktune\n")
    with pytest.raises(KtuneError, match=r"cannot read .*pyproject\.toml"):
        project_files(tmp_path / "a")
