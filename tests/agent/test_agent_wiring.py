"""``--ktune-agent`` through pytest: with no model the rule-based templater runs, and says so plainly."""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_agent_loop import BASE_CL, BASE_PY, PARAMS

pytest.importorskip("pyopencl")


def _project(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    pytester.path.joinpath("scale_add.cl").write_text(BASE_CL)
    # one case, so one key to search and compare
    text = BASE_PY.replace(',\n           ktune.Case(x=ktune.Tensor((1001,)), y=ktune.Tensor((1001,)), id="n1001")', "")
    assert "n1001" not in text
    pytester.path.joinpath("kernels.py").write_text(text)
    pytester.path.joinpath("ktune-params.json").write_text(PARAMS)


def test_no_model_falls_back_to_the_rules_and_says_the_agent_is_off(pytester: pytest.Pytester,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("KTUNE_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    _project(pytester)
    result = pytester.runpytest_subprocess("--ktune", "--ktune-tune", "--ktune-agent", "--ktune-trials", "2",
                                           "--ktune-backend", "opencl", "-k", "tune", "-p", "no:randomly")
    result.stdout.fnmatch_lines(["ktune: agent: off (no model configured*rule-based templater runs instead",
                                 "*ktune agent*",
                                 "scale_add: agent: off (no model configured*Revision 1 (verified: *"])
    assert result.ret == 0
    # --ktune-write none (the default): the template may be faster, but nothing is written
    assert pytester.path.joinpath("ktune-params.json").read_text() == PARAMS
    assert not list(pytester.path.glob("*_tpl*"))


def test_a_model_without_an_endpoint_is_a_usage_error(pytester: pytest.Pytester,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    _project(pytester)
    result = pytester.runpytest_subprocess("--ktune", "--ktune-tune", "--ktune-agent", "--ktune-model", "gpt-x")
    result.stderr.fnmatch_lines(["*--ktune-agent: model 'gpt-x' is named but neither OPENAI_API_KEY nor "
                                 "OPENAI_BASE_URL is set*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    alone = pytester.runpytest_subprocess("--ktune", "--ktune-agent")
    alone.stderr.fnmatch_lines(["*--ktune-agent runs around the tuner: add --ktune-tune*"])
    assert alone.ret == pytest.ExitCode.USAGE_ERROR


def test_ktune_tune_agent_needs_an_endpoint_for_its_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_ktune.cli import main

    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KTUNE_MODEL", "gpt-x")
    assert main(["tune", "--agent", "--root", str(tmp_path), "--backend", "opencl"]) == 2
    assert "model 'gpt-x' is named but neither OPENAI_API_KEY nor OPENAI_BASE_URL is set" in capsys.readouterr().err
