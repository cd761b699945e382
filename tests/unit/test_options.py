"""One configuration chain (core.options, run.config, run.options): every row of the option table is a
pytest flag, an ini key, a [tool.ktune] key, a KTUNE_* variable where a CI job sets it, and a flag of
the ``ktune`` command, each reaching the same field of RunOptions, with the one default the table gives."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from pytest_ktune import plugin
from pytest_ktune.agent import AgentSettings
from pytest_ktune.cli import _options as cli_options
from pytest_ktune.cli import _parser
from pytest_ktune.core.options import BY_NAME, DEFAULTS, OPTIONS, Option, Options, _option, _rows
from pytest_ktune.lab.record import RecordSettings
from pytest_ktune.measure.tools import ToolPlan
from pytest_ktune.run.config import ConfigFiles, RunOptions, resolve
from pytest_ktune.tuner.settings import TuneSettings


def _sample(o: Option) -> Any:
    """A value of the option's type other than its default."""
    return {bool: True, int: 7, float: 2.5, str: "given-" + o.name}[o.kind]


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _value(opts: RunOptions, o: Option) -> Any:
    value = getattr(opts, o.name)
    if o.name == "params" and value is None:  # a params file named by a file ranks below KTUNE_PARAMS
        value = opts.params_configured
    return Path(value).name if o.path and value is not None else value


def _expected(o: Option) -> Any:
    return Path(_sample(o)).name if o.path else _sample(o)


def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for o in OPTIONS:
        monkeypatch.delenv(o.env_name, raising=False)
    monkeypatch.delenv("KTUNE_PARAMS", raising=False)


@pytest.mark.parametrize("o", OPTIONS, ids=[o.name for o in OPTIONS])
def test_every_row_reaches_run_options_from_every_source(o: Option, tmp_path: Path) -> None:
    files = ConfigFiles(ini_path=tmp_path / "pytest.ini", table_path=tmp_path / "pyproject.toml")
    nothing = resolve({}, files, root=tmp_path, env={})
    assert getattr(nothing, o.name) == o.default == getattr(DEFAULTS, o.name)
    assert nothing.origin(o.name) == "default"
    given = resolve({o.name: _sample(o)}, files, root=tmp_path, env={}, cwd=tmp_path)
    assert (_value(given, o), given.origin(o.name)) == (_expected(o), "command line")
    ini = resolve({}, dataclasses.replace(files, ini={o.ini: _text(_sample(o))}), root=tmp_path, env={})
    assert (_value(ini, o), ini.origin(o.name)) == (_expected(o), str(tmp_path / "pytest.ini"))
    if o.name != "ktune":  # [tool.ktune] cannot switch ktune itself on: that is pytest's business
        table = resolve({}, dataclasses.replace(files, table={o.name.replace("_", "-"): _sample(o)}), root=tmp_path,
                        env={})
        assert _value(table, o) == _expected(o)
    from_env = resolve({}, files, root=tmp_path, env={o.env_name: _text(_sample(o))}, cwd=tmp_path)
    if o.env:
        assert (_value(from_env, o), from_env.origin(o.name)) == (_expected(o), o.env_name)
    else:
        assert from_env.origin(o.name) == "default"  # only the options a CI job sets are read from it


class _Group:
    def __init__(self, seen: dict[str, Any]) -> None:
        self.seen = seen

    def addoption(self, flag: str, **kwargs: Any) -> None:
        self.seen[flag] = kwargs


class _Parser:
    """What pytest_addoption registers: flags and ini keys."""

    def __init__(self) -> None:
        self.flags: dict[str, Any] = {}
        self.ini: list[str] = []

    def getgroup(self, name: str, description: str = "") -> _Group:
        return _Group(self.flags)

    def addini(self, name: str, help: str, default: Any = None) -> None:
        self.ini.append(name)


def test_every_row_is_a_pytest_flag_and_an_ini_key_that_leave_the_default_to_the_table() -> None:
    parser = _Parser()
    plugin.pytest_addoption(parser)  # type: ignore[arg-type]
    assert set(parser.flags) == {o.flag for o in OPTIONS}
    assert all(kwargs["default"] is None for kwargs in parser.flags.values())  # None: not given
    assert parser.ini == [o.ini for o in OPTIONS]


@pytest.mark.parametrize("o", [o for o in OPTIONS if o.cli], ids=[o.name for o in OPTIONS if o.cli])
def test_every_row_of_the_ktune_command_is_a_flag_of_ktune_tune(o: Option, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _clean_env(monkeypatch)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    argv = ["tune", "--root", str(tmp_path), o.cli_flag] + ([] if o.kind is bool else [_text(_sample(o))])
    monkeypatch.chdir(tmp_path)
    opts = cli_options(_parser().parse_args(argv), tune=True)
    assert (_value(opts, o), opts.origin(o.name)) == (_expected(o), "command line")
    default = cli_options(_parser().parse_args(["tune", "--root", str(tmp_path)]), tune=True)
    if o.name != "autotune":
        assert getattr(default, o.name) == o.default


def test_the_layers_below_the_run_start_from_the_tables_defaults() -> None:
    tune, agent, record = TuneSettings(), AgentSettings(model=None), RecordSettings()
    assert (tune.trials, tune.timeout_s, tune.sampler, tune.storage, tune.seed, tune.trial_timeout_s) == (
        DEFAULTS.trials, DEFAULTS.tune_timeout, DEFAULTS.sampler, DEFAULTS.storage, DEFAULTS.seed,
        DEFAULTS.trial_timeout)
    assert (agent.iterations, agent.wall_s, agent.memory_mb) == (
        DEFAULTS.agent_iterations, DEFAULTS.agent_wall, DEFAULTS.agent_memory)
    assert (ToolPlan().mode, record.trial_timeout_s) == (DEFAULTS.agent_tools, DEFAULTS.trial_timeout)


def test_an_option_is_one_row() -> None:
    # A new field of the table is an option everywhere the table reaches: its flag, ini key, variable.
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Wider(Options):
        warmup_runs: int = _option(3, "launches before timing starts", env=True, metavar="N")

    (row,) = [r for r in _rows(Wider) if r.name not in BY_NAME]
    assert (row.kind, row.default, row.flag, row.ini, row.env_name, row.cli_flag) == (
        int, 3, "--ktune-warmup-runs", "ktune_warmup_runs", "KTUNE_WARMUP_RUNS", "--warmup-runs")
    assert row.parse("5", "KTUNE_WARMUP_RUNS") == 5
    assert [r.name for r in _rows(Wider)][:-1] == [o.name for o in OPTIONS]  # in the table's order


def _project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: str) -> Path:
    _clean_env(monkeypatch)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "pyproject.toml").write_text(f"[tool.ktune]\n{table}")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_templatize_reads_the_runs_options_as_a_tune_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_ktune import cli
    from pytest_ktune.agent import _templatize

    root = _project(tmp_path, monkeypatch, "agent-wall = 5\nagent-memory = 512\n")
    (root / "k.cl").write_text("__kernel void k() {}\n")
    monkeypatch.setenv("KTUNE_TRIALS", "9")
    seen: dict[str, Any] = {}

    def fake(kernel: Path, target: str, **kwargs: Any) -> Any:
        seen.update(kwargs)
        return dataclasses.make_dataclass("R", [("written", tuple)])(written=())

    monkeypatch.setattr(_templatize, "templatize", fake)
    monkeypatch.setattr(_templatize, "_agent_proposer", lambda model, root: seen.update(model=model))
    assert cli.main(["templatize", "k.cl", "--target", "k", "--memory", "256", "--model", "m1"]) == 1
    s = seen["settings"]
    assert (s.trials, s.wall_s, s.memory_mb, s.trial_timeout_s, seen["model"]) == (9, 5.0, 256, DEFAULTS.trial_timeout,
                                                                                  "m1")
    assert seen["root"] == root.resolve()


def test_record_reads_the_runs_backend_and_trial_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_ktune import cli
    from pytest_ktune.lab import record

    _project(tmp_path, monkeypatch, "trial-timeout = 7\n")
    monkeypatch.setenv("KTUNE_BACKEND", "opencl")
    seen: dict[str, Any] = {}

    def fake(root: Path, names: Any, backend: str, key: Any, **kwargs: Any) -> None:
        seen.update(backend=backend, settings=kwargs["settings"])

    monkeypatch.setattr(record, "run_record", fake)
    assert cli.main(["record", "--key", "N=1"]) == 0
    assert (seen["backend"], seen["settings"].trial_timeout_s) == ("opencl", 7.0)
