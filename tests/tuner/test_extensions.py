"""The extension hooks: a conftest (or, for the ``ktune`` command, an installed plugin) supplies a
backend, a sampler and a write-back mode, and the run uses them; an unknown name is an error before
anything runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from plugin._kit import Project

from ._tk import Cli, repeat_target, summaries

TUNE = ("--ktune-tune", "--ktune-trials=3", "--ktune-seed=3", "-m", "ktune_tune")

# A backend that is the OpenCL backend, and writes down every compile it makes: the file shows which
# implementation the run (and its tuning workers) used.
BACKEND_CONFTEST = '''
import json, multiprocessing, os
from pathlib import Path
from pytest_ktune.backends.opencl import OpenCLBackend

LOG = Path(__file__).parent / "backend.log"


class LoggingBackend(OpenCLBackend):
    def compile(self, source, defines, *, filename):
        with LOG.open("a") as f:
            f.write(json.dumps({"worker": multiprocessing.parent_process() is not None,
                                "defines": {k: str(v) for k, v in defines.items()}}) + "\\n")
        return super().compile(source, defines, filename=filename)


def pytest_ktune_backend(name):
    return LoggingBackend if name == "logged-opencl" else None
'''

SAMPLER_CONFTEST = '''
import optuna
from pathlib import Path

LOG = Path(__file__).parent / "sampler.log"


def make(request):
    with LOG.open("a") as f:
        f.write(f"{request.name} {len(request.feasible)} feasible\\n")
    return optuna.samplers.RandomSampler(seed=request.seed)


def pytest_ktune_sampler(name):
    return make if name == "plain-random" else None
'''

WRITE_BACK_CODE = '''
import json
from pathlib import Path


def record(request):
    out = Path(request.root) / "winners.json"
    out.write_text(json.dumps([{"target": o.target, "key": dict(o.key), "best": dict(o.best_params),
                                "winner": bool(o.changes)} for o in request.outcomes]))
    return f"recorded {len(request.outcomes)} outcome(s) in {out.name}"


def pytest_ktune_write_back(mode):
    return record if mode == "record-json" else None
'''


def plugin_site(tmp_path: Path, code: str) -> dict[str, str]:
    """An environment whose Python finds ``code`` as a plugin of the entry-point group ``ktune``."""
    site = tmp_path / "site"
    dist = site / "ktune_logged-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ktune-logged\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[ktune]\nlogged = ktune_logged\n")
    (site / "ktune_logged.py").write_text(code)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "KTUNE_PARAMS")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def test_a_conftest_backend_runs_the_items(project: Project) -> None:
    project.write(repeat_target())
    project.pytester.makeconftest(BACKEND_CONFTEST)
    result = project.pytester.runpytest_subprocess("--ktune", "--ktune-backend=logged-opencl", "-p",
                                                  "no:cacheprovider", timeout=300)
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=2)
    compiles = [json.loads(line) for line in (project.path / "backend.log").read_text().splitlines()]
    assert {c["defines"]["BLOCK"] for c in compiles} == {"64"}  # the default, checked and timed


def test_a_conftest_backend_reaches_the_tuning_workers(project: Project) -> None:
    project.write(repeat_target())
    project.pytester.makeconftest(BACKEND_CONFTEST)
    result = project.pytester.runpytest_subprocess("--ktune", "--ktune-backend=logged-opencl", "-p",
                                                  "no:cacheprovider", *TUNE, timeout=300)
    assert result.ret == 0, result.stdout.str()
    compiles = [json.loads(line) for line in (project.path / "backend.log").read_text().splitlines()]
    # The candidates were compiled in the tuner's worker processes, by the conftest's backend.
    assert compiles and all(c["worker"] for c in compiles)
    # Both REPEAT values were compiled there; BLOCK, which the source never names, shares their compiles.
    assert {c["defines"]["REPEAT"] for c in compiles} == {"1", "64"}


def test_a_conftest_sampler_proposes_the_trials(project: Project) -> None:
    project.write(repeat_target())
    project.pytester.makeconftest(SAMPLER_CONFTEST)
    result = project.run(*TUNE, "--ktune-sampler=plain-random")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=1)
    assert (project.path / "sampler.log").read_text() == "plain-random 4 feasible\n"


def test_a_conftest_write_back_mode_gets_the_outcomes(project: Project) -> None:
    project.write(repeat_target())
    project.pytester.makeconftest(WRITE_BACK_CODE)
    result = project.run(*TUNE, "--ktune-write=record-json")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["ktune: recorded 1 outcome(s) in winners.json"])
    (winner,) = json.loads((project.path / "winners.json").read_text())
    assert winner["target"] == "scale" and winner["key"] == {"N": 4096}
    assert winner["best"]["REPEAT"] == 1 and winner["winner"]  # the default's 64 rounds are far slower
    assert not project.params_path.exists()  # the mode decides what is written; this one wrote no params


@pytest.mark.parametrize(("option", "what"), [
    ("--ktune-backend=no-such", "unknown backend 'no-such'"),
    ("--ktune-sampler=no-such", "unknown sampler 'no-such'"),
    ("--ktune-write=no-such", "unknown write-back mode 'no-such'"),
])
def test_an_unknown_name_is_a_usage_error_before_anything_runs(project: Project, option: str, what: str) -> None:
    project.write(repeat_target())
    result = project.pytester.runpytest_subprocess("--ktune", option, "--ktune-tune", "-p", "no:cacheprovider",
                                                  timeout=300)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {what}", "next step: *a plugin supplies through the pytest_ktune_*"])
    assert not (project.path / ".ktune").exists()


def test_the_command_asks_the_plugins_of_its_entry_point_group(project: Project, cli: Cli,
                                                               tmp_path: Path) -> None:
    project.write(repeat_target())
    env = plugin_site(tmp_path, WRITE_BACK_CODE)
    argv = cli.argv("tune", "scale", "--trials", "3", "--seed", "3", "--write", "record-json")
    done = subprocess.run(argv, cwd=project.path, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ktune: recorded 1 outcome(s) in winners.json" in done.stdout
    assert json.loads((project.path / "winners.json").read_text())[0]["target"] == "scale"

    unknown = subprocess.run([sys.executable, "-m", "pytest_ktune.cli", "tune", "--write", "no-such", "--root",
                              str(project.path), "--backend", "opencl"], cwd=project.path, env=env,
                             capture_output=True, text=True, timeout=240, check=False)
    assert unknown.returncode == 2
    assert "error: unknown write-back mode 'no-such'" in unknown.stderr


# A mode that takes the name ``file`` and writes nothing: what it is given is every write the run would make.
STOP_FILE_CODE = '''
import json
from pathlib import Path


def stop(request):
    out = Path(request.root) / "stopped.json"
    out.write_text(json.dumps({"records": [o.record.to_json() for o in request.outcomes if o.record],
                               "winners": len(request.winners),
                               "templates": [sorted(t.files) for t in request.templates]}))
    return "stopped every write of the run"


def pytest_ktune_write_back(mode):
    return stop if mode == "file" else None
'''


def test_a_plugin_mode_named_file_sees_and_stops_every_write_of_the_tuner(project: Project) -> None:
    project.write(repeat_target())
    project.pytester.makeconftest(STOP_FILE_CODE)
    result = project.run(*TUNE, "--ktune-write=file")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["ktune: stopped every write of the run"])
    # The tuner wrote nothing itself: the one record of the run reached the mode, which kept it.
    assert not project.params_path.exists()
    stopped = json.loads((project.path / "stopped.json").read_text())
    (record,) = stopped["records"]
    assert record["target"] == "kernels.py::scale" and record["params"]["REPEAT"] == 1
    assert stopped["winners"] == 1 and stopped["templates"] == []


def test_the_command_tunes_on_a_plugin_backend(project: Project, tmp_path: Path) -> None:
    project.write(repeat_target())
    # The backend plugin of the conftest above, installed for the command; its log lies beside it.
    env = plugin_site(tmp_path, BACKEND_CONFTEST.replace('Path(__file__).parent / "backend.log"',
                                                          f"Path({str(project.path / 'backend.log')!r})"))
    argv = [sys.executable, "-m", "pytest_ktune.cli", "tune", "scale", "--trials", "3", "--seed", "3", "--write",
            "file", "--root", str(project.path), "--backend", "logged-opencl"]
    done = subprocess.run(argv, cwd=project.path, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = summaries(done.stdout)
    assert line["target"] == "scale" and line["timed"] == "3"
    # The plugin's backend compiled the candidates, in the tuner's workers, from the OpenCL source.
    compiles = [json.loads(x) for x in (project.path / "backend.log").read_text().splitlines()]
    assert any(c["worker"] for c in compiles)
    (record,) = project.records()
    assert record["target"] == "kernels.py::scale" and record["tuned"]["trials"] == 3


def test_the_command_refuses_a_backend_no_target_has_a_source_for(project: Project, cli: Cli) -> None:
    project.write(repeat_target())
    argv = [*cli.argv("tune", "--trials", "1")[:-2], "--backend", "cuda"]
    done = subprocess.run(argv, cwd=project.path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stdout + done.stderr  # never 0 having tuned nothing
    assert "scale: no cuda source, skipped" in done.stderr
    assert "error: nothing to tune on the cuda backend (--backend cuda): scale has no cuda source" in done.stderr
    assert summaries(done.stdout) == []
