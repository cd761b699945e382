"""The ``project`` fixture: an empty pytester folder set up as a ktune project root."""

from __future__ import annotations

import pytest

from ._kit import Project


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Project:
    # The folder is the rootdir, and git never looks above it: outside the tests
    # that make their own repository there, no commit can be recorded.
    pytester.makeini("[pytest]\n")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(pytester.path.parent))
    monkeypatch.delenv("KTUNE_PARAMS", raising=False)
    return Project(pytester)
