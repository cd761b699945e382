"""The ``ktune`` command finds its project as pytest finds its rootdir: from the paths given, else the
current folder. A clone whose own pyproject.toml configures pytest, with a kernel project of its own
below it (as this repository holds example_project), is the case a new user meets first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from plugin._kit import PRELUDE, SCALE_CL, scale_target

from ._tk import OTHER_RECORD_FILE, _env, summaries


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """``clone/`` (pytest configured in its pyproject.toml) holding the project ``clone/proj/`` (its
    own pytest.ini, a target, a params file)."""
    root = tmp_path / "clone"
    proj = root / "proj"
    proj.mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    (proj / "pytest.ini").write_text("[pytest]\n")
    (proj / "kernels.py").write_text(PRELUDE + scale_target())
    (proj / "scale.cl").write_text(SCALE_CL)
    (proj / "ktune-params.json").write_text(OTHER_RECORD_FILE)
    return root


def ktune(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The ``ktune`` command in ``cwd``, with no --root: as a user types it."""
    return subprocess.run([sys.executable, "-m", "pytest_ktune.cli", *args], cwd=cwd, env=_env(cwd),
                          capture_output=True, text=True, timeout=240, check=False)


def test_a_target_of_a_project_below_is_not_tuned_against_the_clones_root(clone: Path) -> None:
    done = ktune(clone, "tune", "scale", "--trials", "2", "--write", "file", "--backend", "opencl")
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == "ktune: project . (rootdir of pyproject.toml); params ktune-params.json (new)"
    assert lines[1] == f"error: no target named 'scale' under {clone}"
    assert lines[2].startswith("next step: proj is a project of its own (pytest.ini), with a target scale: give "
                               "its folder, as to pytest: ktune tune proj scale (or --root proj)")
    assert not (clone / "ktune-params.json").exists() and not (clone / ".ktune").exists()


def test_the_path_given_picks_the_project_and_its_params_file(clone: Path) -> None:
    proj = clone / "proj"
    done = ktune(clone, "tune", "proj", "scale", "--trials", "2", "--seed", "1", "--write", "file",
                 "--backend", "opencl")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.splitlines()[0] == ("ktune: project proj (rootdir of proj/pytest.ini); params "
                                           "proj/ktune-params.json")
    (line,) = summaries(done.stdout)
    assert line["target"] == "scale" and line["written"] == "to be delivered (--write file)"
    assert Path(line["report"]).parent == proj / ".ktune" / "reports"
    records = json.loads((proj / "ktune-params.json").read_text())["records"]
    assert sorted(r["target"] for r in records) == ["elsewhere.py::other", "kernels.py::scale"]
    assert not (clone / "ktune-params.json").exists() and not (clone / ".ktune").exists()
    # A file of the project, as pytest takes one, and file::name, find the same project.
    header = ktune(clone, "export", "proj/kernels.py::scale")
    assert header.returncode == 0, header.stderr
    assert header.stderr.splitlines()[0].startswith("ktune: project proj (rootdir of proj/pytest.ini)")
    assert "scale" in header.stdout and "other" not in header.stdout


def test_export_from_the_clones_root_names_the_project_that_has_a_params_file(clone: Path) -> None:
    done = ktune(clone, "export")
    assert done.returncode == 2
    assert f"error: {clone / 'ktune-params.json'}: there is no params file to export" in done.stderr
    assert "proj is a project of its own with a params file: give its folder, as to pytest (ktune export proj), " \
           "or --root" in done.stderr
    inside = ktune(clone / "proj", "export", "--format", "json")
    assert inside.returncode == 0, inside.stderr
    assert inside.stderr.splitlines()[0] == "ktune: project . (rootdir of pytest.ini); params ktune-params.json"


def test_outside_any_project_a_tune_creates_no_params_file(tmp_path: Path) -> None:
    bare = tmp_path / "scratch"
    bare.mkdir()
    (bare / "kernels.py").write_text(PRELUDE + scale_target())
    (bare / "scale.cl").write_text(SCALE_CL)
    done = ktune(bare, "tune", "--trials", "2", "--write", "file", "--backend", "opencl")
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert lines[0] == ("ktune: project . (not a project: no pytest.ini, pyproject.toml, tox.ini or setup.cfg here "
                        "or above); params ktune-params.json (new)")
    assert lines[1].startswith(f"error: no project at {bare}: no pytest.ini, pyproject.toml, tox.ini or setup.cfg")
    assert "--root DIR" in lines[2]
    assert not (bare / "ktune-params.json").exists() and not (bare / ".ktune").exists()
    # --root says that this folder is the project: the refusal is gone (the target name is then checked).
    named = ktune(bare, "tune", "nosuch", "--root", ".", "--write", "file", "--backend", "opencl")
    assert named.returncode == 2 and "no target named 'nosuch'" in named.stderr
