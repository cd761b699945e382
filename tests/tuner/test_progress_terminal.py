"""A tune's progress under plain pytest: on a terminal it shows (through pytest's terminal reporter,
which capture leaves alone) without -s; in a log (a pipe) nothing of it appears."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

from plugin._kit import KTUNE_ARGS, Project

from ._tk import repeat_target


def _run_on_a_terminal(project: Project, *args: str, timeout: float = 240) -> str:
    """pytest in a fresh process whose stdout and stderr are a pseudo-terminal; what it showed."""
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env.update(COLUMNS="200", LINES="50", TERM="xterm", GIT_CEILING_DIRECTORIES=str(project.path.parent))
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *KTUNE_ARGS, *args], cwd=project.path,
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks: list[bytes] = []
    end = time.monotonic() + timeout
    try:
        while time.monotonic() < end:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
    finally:
        proc.kill() if proc.poll() is None else None
        proc.wait()
        os.close(master)
    return b"".join(chunks).decode(errors="replace")


def test_progress_shows_on_a_terminal_without_s(project: Project) -> None:
    project.write(repeat_target())
    shown = _run_on_a_terminal(project, "--ktune-tune", "--ktune-trials=3", "--ktune-seed=5")
    assert "1 passed" in shown or "3 passed" in shown, shown
    assert "\rscale N4096  trial 3/3  best " in shown, shown


def test_no_progress_in_a_log(project: Project) -> None:
    project.write(repeat_target())
    result = project.run("--ktune-tune", "--ktune-trials=3", "--ktune-seed=5")
    result.assert_outcomes(passed=3)
    assert "trial 3/3" not in result.stdout.str() + result.stderr.str()
    assert "\r" not in result.stdout.str()
