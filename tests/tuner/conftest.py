"""Fixtures of the tuner's tests: ``project``, an empty pytester folder set up as a ktune project root
(as in tests/plugin), and ``cli``, which runs the ``ktune`` command on that project."""

from __future__ import annotations

import pytest
from plugin._kit import Project

from ._tk import Cli


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Project:
    # The folder is the rootdir, and git never looks above it, so no commit is ever recorded.
    pytester.makeini("[pytest]\n")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(pytester.path.parent))
    monkeypatch.delenv("KTUNE_PARAMS", raising=False)
    return Project(pytester)


@pytest.fixture
def cli(project: Project) -> Cli:
    return Cli(project.path)
