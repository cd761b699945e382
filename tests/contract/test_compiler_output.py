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


def test_compiler_chatter_is_shown_when_asked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Asked for, the build log comes as a warning and fd 2 is left alone during the build, so what the
    compiler writes there reaches the user. (Whether PoCL's clang writes its "N warnings generated." line to
    fd 2 at all depends on what the process built before, through pyopencl: not a thing to assert.)"""
    from pytest_ktune.backends import compile_log

    entered: list[bool] = []
    real = compile_log._REDIRECT.enter

    def enter() -> bool:
        entered.append(True)
        return real()

    monkeypatch.setattr(compile_log._REDIRECT, "enter", enter)
    monkeypatch.delenv("KTUNE_COMPILER_OUTPUT", raising=False)
    _compile(tmp_path)
    assert entered  # not asked for: the build's stderr is redirected
    entered.clear()
    monkeypatch.setenv("KTUNE_COMPILER_OUTPUT", "1")
    with pytest.warns(Warning, match="compiler output"):
        _compile(tmp_path)
    assert not entered


def test_threads_quieting_stderr_at_once_leave_it_as_it_was(capfd: pytest.CaptureFixture[str]) -> None:
    """Two threads inside at once, the first leaving before the second: each saving and restoring fd 2 on
    its own left it pointing at the first one's closed file, and every later message went nowhere."""
    import os
    import threading

    from pytest_ktune.backends.compile_log import quiet_stderr

    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with quiet_stderr():
            first_in.set()
            second_in.wait(5)
            os.write(2, b"chatter of the first\n")
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with quiet_stderr():
            second_in.set()
            first_out.wait(5)
            os.write(2, b"chatter of the second\n")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    os.write(2, b"a message after them\n")
    _, err = capfd.readouterr()
    assert "a message after them" in err and "chatter" not in err
