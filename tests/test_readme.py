"""The README's quick start is exactly two commands, and CI runs the second as written."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    return [line for block in blocks for line in block.strip().splitlines() if line.strip()]


def test_quick_start_has_two_commands() -> None:
    commands = _quick_start_commands()
    assert len(commands) == 2, commands
    assert "pytest --ktune example_project" in commands[0]
    assert commands[1].endswith("pytest")


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert _quick_start_commands()[1] in [line.strip() for line in ci]
