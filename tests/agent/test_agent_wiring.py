"""``--ktune-agent`` through pytest: with no model the rule-based templater runs, and says so plainly; with
one, its template is delivered by the run's write-back mode, as tuned records are."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_ktune.testing.openai_stub import StubServer

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


# A mode that takes the name ``file`` and writes nothing: what it is given is every write the run would make.
STOP_FILE = '''
import json
from pathlib import Path


def stop(request):
    Path(request.root, "stopped.json").write_text(json.dumps({
        "templates": [sorted(t.files) for t in request.templates],
        "records": [r.target for r in request.records(all_tuned=True)]}))
    return "stopped every write of the run"


def pytest_ktune_write_back(mode):
    return stop if mode == "file" else None
'''


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=ktune tests", "-c", "user.email=tests@example.invalid",
                           "-c", "commit.gpgsign=false", *args], cwd=root, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("mode", ["patch", "plugin file"])
def test_the_agents_template_goes_through_the_write_back(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                         mode: str) -> None:
    """The scripted model of benchmarks/naive turns the naive SiLU-and-mul into a faster template; the run's
    write-back mode, not the agent, delivers it: as a patch, or (a plugin's mode named ``file``) not at all."""
    from .test_agent_loop import REPO, _scripted_agent

    pytester.makeini("[pytest]\n")
    for name in ("silu_and_mul.py", "silu_and_mul.cl", "naive.clh"):
        shutil.copy(REPO / "benchmarks" / "naive" / name, pytester.path / name)
    pytester.path.joinpath("ktune-params.json").write_text(PARAMS)
    if mode != "patch":
        pytester.makeconftest(STOP_FILE)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(pytester.path.parent))
    _git(pytester.path, "init", "-q", "-b", "main")
    _git(pytester.path, "add", "-A")
    _git(pytester.path, "commit", "-q", "-m", "the naive kernel")
    head = _git(pytester.path, "rev-parse", "HEAD")
    write = "patch" if mode == "patch" else "file"
    script = _scripted_agent().good_conversation("opencl", with_mistake=False, steer=False)
    with StubServer({"scripted-good": script}) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "scripted")
        result = pytester.runpytest_subprocess(
            "--ktune", "--ktune-tune", "--ktune-agent", "--ktune-model", "scripted-good", "--ktune-trials", "3",
            "--ktune-backend", "opencl", f"--ktune-write={write}", "-k", "tune", "-p", "no:randomly",
            "-p", "no:cacheprovider", timeout=600)
        assert not server.problems, server.problems
    out = result.stdout.str()
    assert result.ret == 0, out
    assert "The template (silu_and_mul_tpl.cl, silu_and_mul_tpl.py) and its tuned parameters go to the write-back" \
        in out
    # The agent wrote nothing of the project's: the checkout is the commit, byte for byte.
    assert _git(pytester.path, "diff", "HEAD") == "" and _git(pytester.path, "rev-parse", "HEAD") == head
    assert not [p for p in pytester.path.rglob("*_tpl*") if ".ktune" not in p.parts]
    if mode == "patch":
        (patch,) = pytester.path.joinpath(".ktune", "patches").iterdir()
        result.stdout.fnmatch_lines([f"ktune: patch written to {patch}; apply it with: git apply*"])
        text = patch.read_text()
        assert "diff --git a/silu_and_mul_tpl.cl b/silu_and_mul_tpl.cl\nnew file mode" in text
        assert "silu_and_mul_tpl.py::silu_and_mul_naive_tpl" in text  # its tuned record in the params file
        _git(pytester.path, "apply", "--check", str(patch))
    else:
        result.stdout.fnmatch_lines(["ktune: stopped every write of the run"])
        stopped = json.loads(pytester.path.joinpath("stopped.json").read_text())
        assert stopped["templates"] == [["silu_and_mul_tpl.cl", "silu_and_mul_tpl.py"]]
        assert "silu_and_mul_tpl.py::silu_and_mul_naive_tpl" in stopped["records"]
