"""--ktune-write: none reports only; patch and commit deliver the winner through git without touching
the user's checkout."""

from __future__ import annotations

import json
import re
import subprocess

from plugin._kit import Project

from ._tk import repeat_target

REPEATS = (1, 4, 64)
TUNE = ("--ktune-tune", "--ktune-trials=4", "--ktune-seed=3", "-m", "ktune_tune")


def _commit_all(project: Project) -> str:
    (project.path / ".gitignore").write_text(".ktune/\n.cache/\n__pycache__/\nrunpytest-*\nstdout\nstderr\n")
    return project.commit_all("kernels")


def test_the_default_writes_nothing_and_says_how_to_keep_the_winner(project: Project) -> None:
    project.write(repeat_target(repeats=REPEATS))
    params = project.path / "ktune-params.json"
    result = project.run(*TUNE)
    assert result.ret == 0, result.stdout.str()
    assert not params.exists()
    result.stdout.fnmatch_lines(["*1 tuned winner(s) NOT written (--ktune-write=none, the default)*"])


def test_commit_mode_makes_a_branch_and_leaves_the_checkout_alone(project: Project) -> None:
    project.write(repeat_target(repeats=REPEATS))
    head = _commit_all(project)
    status = project.git("status", "--porcelain")
    result = project.run(*TUNE, "--ktune-write=commit")
    assert result.ret == 0, result.stdout.str()
    m = re.search(r"committed ([0-9a-f]{12}) on the new branch (ktune/\S+);", result.stdout.str())
    assert m, result.stdout.str()
    branch = m.group(2)
    # The checkout: same HEAD, same branch, nothing staged, no params file written in place.
    assert project.git("rev-parse", "HEAD").strip() == head
    assert project.git("symbolic-ref", "--short", "HEAD").strip() in ("main", "master")
    assert project.git("status", "--porcelain") == status
    assert not (project.path / "ktune-params.json").exists()
    # The branch: one commit on HEAD holding the params file with the tuned record.
    assert project.git("rev-parse", f"{branch}~1").strip() == head
    assert project.git("diff", "--name-only", head, branch).split() == ["ktune-params.json"]
    committed = json.loads(project.git("show", f"{branch}:ktune-params.json"))
    (record,) = committed["records"]
    assert record["params"]["REPEAT"] < 64 and record["tuned"]["sampler"] == "bo"
    message = project.git("log", "-1", "--format=%B", branch)
    assert "| case | before µs | after µs | ratio |" in message


def test_patch_mode_writes_a_patch_that_git_applies(project: Project) -> None:
    project.write(repeat_target(repeats=REPEATS))
    _commit_all(project)
    result = project.run(*TUNE, "--ktune-write=patch")
    assert result.ret == 0, result.stdout.str()
    m = re.search(r"patch written to (\S+); apply it with: git apply", result.stdout.str())
    assert m, result.stdout.str()
    assert not (project.path / "ktune-params.json").exists()
    check = subprocess.run(["git", "apply", "--check", m.group(1)], cwd=project.path, capture_output=True,
                           text=True, check=False)
    assert check.returncode == 0, check.stderr
