"""A kernel that compiles with warnings prints nothing to the user's stderr on PoCL (its clang writes
"N warnings generated." straight to the process's stderr), unless KTUNE_COMPILER_OUTPUT=1 asks for it."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from pytest_ktune.backends import create

# Three things clang warns about: an assignment as a condition, and an out-of-bounds index twice.
WARNS = "__kernel void f(__global float* o) {{ if (o[0] = 1.0f) {{}} int a[2]; a[3] = 1; o[1] = a[3]; }} // {}"


def _compile(tmp_path: Path) -> None:
    backend = create("opencl")
    backend.cache_dir = None
    backend.compile(WARNS.format(uuid.uuid4().hex), {}, filename=str(tmp_path / "warns.cl"))


def test_compiler_chatter_stays_out_of_stderr(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KTUNE_COMPILER_OUTPUT", raising=False)
    _compile(tmp_path)
    out, err = capfd.readouterr()
    assert "warning" not in (out + err).lower()


def test_compiler_chatter_is_shown_when_asked_for(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KTUNE_COMPILER_OUTPUT", "1")
    with pytest.warns(Warning, match="compiler output"):
        _compile(tmp_path)
    _, err = capfd.readouterr()
    assert "warnings generated" in err
