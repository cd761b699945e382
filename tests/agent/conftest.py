"""The hostile tests' project (``_hostile``), as a fixture."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ._hostile import API_KEY, Project, make_project


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)  # in the environment, as a user's would be
    p = make_project(tmp_path)
    yield p
    # Each test's project is a module of the same name: the next test must import its own. A copy of
    # sys.modules is read: a thread a timed-out check left behind may still be importing.
    for name in [n for n, m in list(sys.modules.items())
                 if str(getattr(m, "__file__", "") or "").startswith(str(tmp_path))]:
        sys.modules.pop(name, None)
    while str(p.kernels) in sys.path:
        sys.path.remove(str(p.kernels))
