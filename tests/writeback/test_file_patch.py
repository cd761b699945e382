"""Modes ``file`` and ``patch``: texts written in place, or a patch that ``git apply`` takes; names and URLs."""

from __future__ import annotations

import datetime as dt
import stat
from pathlib import Path

import pytest

from pytest_ktune.writeback.change import Change, NothingToWrite, WritebackError, branch_name, redact
from pytest_ktune.writeback.github import parse_repository
from pytest_ktune.writeback.modes import write_file, write_patch

from ._kit import KERNEL, NEW_KERNEL, NEW_PARAMS, OLD_PARAMS, State, assert_untouched, change, git, make_repo

DAY = dt.date(2026, 11, 30)


# -- file ----------------------------------------------------------------------------------------------


def test_file_mode_writes_in_place_and_keeps_the_mode(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / "kernels").mkdir(parents=True)
    (root / "ktune-params.json").write_text(OLD_PARAMS)
    (root / "kernels" / "scale.cl").write_text(KERNEL)
    (root / "kernels" / "scale.cl").chmod(0o640)

    line = write_file(root, change(**{"kernels/scale.cl": NEW_KERNEL}))

    assert line == "wrote kernels/scale.cl, ktune-params.json"
    assert (root / "ktune-params.json").read_text() == NEW_PARAMS
    assert (root / "kernels" / "scale.cl").read_text() == NEW_KERNEL
    assert stat.S_IMODE((root / "kernels" / "scale.cl").stat().st_mode) == 0o640
    assert sorted(p.name for p in root.rglob("*")) == ["kernels", "ktune-params.json", "scale.cl"]  # no temp left
    assert write_file(root, change(**{"kernels/scale.cl": NEW_KERNEL})).startswith("nothing written")


def test_file_mode_creates_a_missing_file(tmp_path: Path) -> None:
    assert write_file(tmp_path, change()) == "wrote ktune-params.json"
    assert (tmp_path / "ktune-params.json").read_text() == NEW_PARAMS


@pytest.mark.parametrize("path", ["../outside.json", "/etc/ktune.json", ".git/config", "a//b", "a/./b", "",
                                  "a\\b"])
def test_paths_outside_the_project_are_refused(tmp_path: Path, path: str) -> None:
    bad = Change(files={path: "x"}, title="t", body_markdown="", targets=("t",), device="d")
    with pytest.raises(WritebackError, match="not a plain relative path"):
        write_file(tmp_path / "proj", bad)
    assert not (tmp_path / "outside.json").exists()


def test_an_empty_change_is_refused(tmp_path: Path) -> None:
    with pytest.raises(WritebackError, match="no files"):
        write_file(tmp_path, Change(files={}, title="t", body_markdown="", targets=(), device="d"))


# -- patch ---------------------------------------------------------------------------------------------


def test_patch_applies_with_git_apply_and_touches_nothing(repo: Path, tmp_path: Path) -> None:
    before = State.of(repo)
    out = tmp_path / "out" / ".ktune" / "patches"
    c = change(**{"kernels/scale.cl": NEW_KERNEL})

    path = write_patch(repo, c, out, date=DAY)

    assert path == out / "ktune-rmsnorm-nvidia-h200-cuda-20261130.patch"
    assert_untouched(before, State.of(repo))
    text = path.read_text()
    assert text.startswith("diff --git a/kernels/scale.cl b/kernels/scale.cl\n")
    assert "diff --git a/ktune-params.json b/ktune-params.json\n" in text
    assert write_patch(repo, c, tmp_path / "again", date=DAY).read_text() == text  # deterministic

    git(repo, "apply", "--check", str(path))
    git(repo, "apply", str(path))
    assert (repo / "ktune-params.json").read_text() == NEW_PARAMS
    assert (repo / "kernels" / "scale.cl").read_text() == NEW_KERNEL


def test_patch_of_a_project_in_a_subfolder_applies_at_the_top_level(tmp_path: Path) -> None:
    top = make_repo(tmp_path / "mono", files={"proj/ktune-params.json": OLD_PARAMS, "README": "x\n"})
    path = write_patch(top / "proj", change(), tmp_path / "patches", date=DAY)
    assert "a/proj/ktune-params.json" in path.read_text()
    git(top, "apply", str(path))
    assert (top / "proj" / "ktune-params.json").read_text() == NEW_PARAMS


def test_patch_adds_a_file_that_head_lacks(tmp_path: Path) -> None:
    top = make_repo(tmp_path / "r", files={"README": "x\n"})
    path = write_patch(top, change(), tmp_path / "p", date=DAY)
    assert "new file mode 100644" in path.read_text()
    git(top, "apply", str(path))
    assert (top / "ktune-params.json").read_text() == NEW_PARAMS


def test_patch_works_on_a_detached_head(repo: Path, tmp_path: Path) -> None:
    git(repo, "checkout", "-q", "--detach")
    assert write_patch(repo, change(), tmp_path / "p", date=DAY).exists()


def test_patch_of_unchanged_texts_is_nothing_to_write(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(NothingToWrite, match="HEAD already holds"):
        write_patch(repo, change(OLD_PARAMS), tmp_path / "p")
    assert not (tmp_path / "p").exists()


def test_patch_outside_git_says_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    with pytest.raises(WritebackError, match="not a git repository") as info:
        write_patch(tmp_path / "plain", change(), tmp_path / "p")
    assert "--ktune-write=file" in str(info.value)
    assert str(tmp_path / "plain") in str(info.value)


# -- names and URLs ------------------------------------------------------------------------------------


def test_branch_names_follow_git_rules(tmp_path: Path) -> None:
    assert branch_name(change(), DAY) == "ktune/rmsnorm-nvidia-h200-cuda-20261130"
    many = Change(files={"a": ""}, title="", body_markdown="", device="Tesla V100..@{x}.lock",
                  targets=("k.py::Alpha Beta", "k.py::gamma", "x.py::delta", "y.py::eps"))
    name = branch_name(many, DAY)
    assert name == "ktune/alpha-beta+gamma+2-more-tesla-v100.-x-.lock-20261130"
    odd = Change(files={"a": ""}, title="", body_markdown="", device="...", targets=("::", "a.py::x.lock"))
    repo = make_repo(tmp_path / "r")
    for n in (name, branch_name(odd, DAY)):
        assert git(repo, "check-ref-format", f"refs/heads/{n}", check=False) == "", n


@pytest.mark.parametrize(("url", "expected"), [
    ("https://github.com/acme/kernels.git", "acme/kernels"),
    ("https://github.com/acme/kernels", "acme/kernels"),
    ("https://x-access-token:ghp_abc@github.com/acme/kernels.git", "acme/kernels"),
    ("https://ghe.example.com:8443/acme/kernels.git/", "acme/kernels"),
    ("git@github.com:acme/kernels.git", "acme/kernels"),
    ("github.com:acme/kernels", "acme/kernels"),
    ("ssh://git@github.com/acme/kernels.git", "acme/kernels"),
    ("ssh://git@github.com:22/acme/kernels", "acme/kernels"),
    ("/srv/git/kernels.git", None),
    ("file:///srv/git/kernels.git", None),
    ("https://github.com/kernels", None),
])
def test_repository_from_remote_urls(url: str, expected: str | None) -> None:
    assert parse_repository(url) == expected


def test_redact_hides_tokens_and_url_credentials() -> None:
    text = "fatal: https://user:s3cret@github.com/a/b.git and ghp_XYZ and ssh://git@host/x"
    out = redact(text, ["ghp_XYZ"])
    assert "s3cret" not in out and "ghp_XYZ" not in out
    assert "https://***@github.com/a/b.git" in out
