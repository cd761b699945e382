"""Fixtures of the write-back tests: a hermetic git environment, a repository with a remote, a fake GitHub."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ._kit import FakeGitHub, make_remote, make_repo


@pytest.fixture(autouse=True)
def _hermetic_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No user or system git config, no repository above the test's folder, no GitHub variables, no proxy."""
    (tmp_path / "gitconfig").write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    for var in ("GITHUB_TOKEN", "GITHUB_REPOSITORY", "GITHUB_API_URL", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL",
                "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE",
                "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "work")


@pytest.fixture
def remote(tmp_path: Path, repo: Path) -> Path:
    return make_remote(tmp_path / "remote.git", repo)


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    fake = FakeGitHub().start()
    try:
        yield fake
    finally:
        fake.stop()
