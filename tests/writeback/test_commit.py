"""Mode ``commit``: a ktune branch with one commit, and nothing else changed; refusals before anything is made."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from pytest_ktune.writeback.change import TRAILER, NothingToWrite, WritebackError
from pytest_ktune.writeback.modes import commit_branch

from ._kit import (
    BODY,
    KERNEL,
    NEW_KERNEL,
    NEW_PARAMS,
    OLD_PARAMS,
    State,
    assert_untouched,
    change,
    git,
    make_repo,
    refs,
)

DAY = dt.date(2026, 11, 30)
BRANCH = "ktune/rmsnorm-nvidia-h200-cuda-20261130"


def test_commit_creates_one_branch_with_one_commit(repo: Path) -> None:
    before = State.of(repo)
    head = before.head

    branch, sha = commit_branch(repo, change(**{"kernels/scale.cl": NEW_KERNEL}), date=DAY)

    assert branch == BRANCH
    after = State.of(repo)
    assert_untouched(before, after)
    assert set(after.refs) - set(before.refs) == {f"refs/heads/{BRANCH}"}
    assert after.refs[f"refs/heads/{BRANCH}"] == sha
    assert git(repo, "rev-parse", f"{sha}^@").split() == [head]
    assert git(repo, "show", f"{sha}:ktune-params.json") == NEW_PARAMS
    assert git(repo, "show", f"{sha}:kernels/scale.cl") == NEW_KERNEL
    assert git(repo, "diff", "--name-only", head, sha).split() == ["kernels/scale.cl", "ktune-params.json"]
    message = git(repo, "log", "-1", "--format=%B", sha)
    assert message.startswith(f"ktune: tune rmsnorm on NVIDIA H200\n\n{BODY}")
    assert TRAILER in message
    assert git(repo, "log", "-1", "--format=%an <%ae>", sha).strip() == "ktune tests <ktune-tests@example.invalid>"


def test_commit_with_a_given_branch_name(repo: Path) -> None:
    branch, sha = commit_branch(repo, change(), branch="perf/rmsnorm-h200")
    assert branch == "perf/rmsnorm-h200"
    assert refs(repo)["refs/heads/perf/rmsnorm-h200"] == sha


def test_commit_without_a_configured_identity_uses_ktunes(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    git(repo, "config", "--unset", "user.name")
    git(repo, "config", "--unset", "user.email")
    _, sha = commit_branch(repo, change())
    assert git(repo, "log", "-1", "--format=%an <%ae>", sha).strip() == \
        "pytest-ktune <pytest-ktune@users.noreply.github.com>"


def test_commit_of_a_project_in_a_subfolder(tmp_path: Path) -> None:
    top = make_repo(tmp_path / "mono", files={"proj/ktune-params.json": OLD_PARAMS, "README": "x\n"})
    _, sha = commit_branch(top / "proj", change())
    assert git(top, "diff", "--name-only", "HEAD", sha).split() == ["proj/ktune-params.json"]


# -- refusals: each leaves the repository as it was, with no branch ---------------------------------------


def _refused(repo: Path, match: str, **kwargs: object) -> WritebackError:
    before = State.of(repo)
    with pytest.raises(WritebackError, match=match) as info:
        commit_branch(repo, change(**{"kernels/scale.cl": NEW_KERNEL}), date=DAY, **kwargs)  # type: ignore[arg-type]
    after = State.of(repo)
    assert_untouched(before, after)
    assert after.refs == before.refs
    return info.value


def test_refuses_outside_git(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "ktune-params.json").write_text(OLD_PARAMS)
    with pytest.raises(WritebackError, match="not a git repository") as info:
        commit_branch(tmp_path / "plain", change())
    assert "next step" in str(info.value)
    assert (tmp_path / "plain" / "ktune-params.json").read_text() == OLD_PARAMS


def test_refuses_a_detached_head(repo: Path) -> None:
    git(repo, "checkout", "-q", "--detach")
    err = _refused(repo, "HEAD is detached")
    assert "git switch" in err.hint


def test_refuses_a_repository_with_no_commit(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "empty", files={})
    with pytest.raises(WritebackError, match="no commit yet"):
        commit_branch(repo, change())


def test_refuses_unstaged_changes_to_the_params_file(repo: Path) -> None:
    (repo / "ktune-params.json").write_text(OLD_PARAMS + "\n")
    err = _refused(repo, "ktune-params.json has changes that HEAD does not hold")
    assert "stash" in err.hint
    assert str(repo) in str(err)


def test_refuses_staged_changes_to_the_params_file(repo: Path) -> None:
    (repo / "ktune-params.json").write_text(OLD_PARAMS + "\n")
    git(repo, "add", "ktune-params.json")
    _refused(repo, "ktune-params.json has changes")


def test_refuses_changes_to_another_file_of_the_change(repo: Path) -> None:
    (repo / "kernels" / "scale.cl").write_text(KERNEL + "// edited\n")
    _refused(repo, "kernels/scale.cl has changes")


def test_refuses_an_untracked_params_file(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", files={"README": "x\n"})
    (repo / "ktune-params.json").write_text(OLD_PARAMS)
    _refused(repo, "ktune-params.json has changes")


def test_other_uncommitted_changes_do_not_matter(repo: Path) -> None:
    (repo / "notes.txt").write_text("wip\n")
    before = State.of(repo)
    commit_branch(repo, change(), date=DAY)
    assert_untouched(before, State.of(repo))


def test_refuses_an_existing_branch(repo: Path) -> None:
    git(repo, "branch", BRANCH)
    err = _refused(repo, f"the branch {BRANCH} already exists")
    assert f"git branch -D {BRANCH}" in err.hint


def test_refuses_an_invalid_branch_name(repo: Path) -> None:
    _refused(repo, "not a valid branch name", branch="bad..name")


def test_refuses_to_write_to_the_checked_out_branch(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", BRANCH)
    _refused(repo, "HEAD is on")


def test_unchanged_texts_are_nothing_to_commit(repo: Path) -> None:
    before = State.of(repo)
    with pytest.raises(NothingToWrite):
        commit_branch(repo, change(OLD_PARAMS))
    assert State.of(repo).refs == before.refs
