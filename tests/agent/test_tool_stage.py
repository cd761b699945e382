"""The agent check's tool stage runs its tools side by side: each is a process of its own, so on CUDA the four
compute-sanitizer tools take as long as the slowest of them, not their sum."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from pytest_ktune.agent import _check
from pytest_ktune.agent._check import check_proposal
from pytest_ktune.agent._proposal import Proposal
from pytest_ktune.core.discover import import_file
from pytest_ktune.core.target import Target
from pytest_ktune.measure.tools import ToolPlan, ToolRun

from ._hostile import SCALE_ADD_CL, Project

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")


def test_the_tools_of_one_check_run_at_once(hostile: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    base = vars(import_file(hostile.kernels / "hostile_targets.py"))["scale_one"]
    assert isinstance(base, Target)
    # Every tool waits for all the others to have started: run one after another, the first would wait alone.
    together = threading.Barrier(len(TOOLS), timeout=20)
    seen: list[tuple[str, int]] = []

    def fake_run(tool: str, target: Any, **kw: Any) -> ToolRun:
        together.wait()
        seen.append((tool, len(kw["configs"])))
        return ToolRun(tool, "clean", tuple((dict(c), ("case",)) for c in kw["configs"]))

    monkeypatch.setattr(_check, "run_tool", fake_run)
    monkeypatch.setattr(_check, "available", lambda tool: True)
    proposal = Proposal.from_json({"source": SCALE_ADD_CL, "space": {"A": [0, 1]}, "default": {"A": 0}},
                                  backend="opencl")
    check = check_proposal(proposal, base, root=hostile.root, backend="opencl", sample=0, trial_timeout_s=60.0,
                           tools=ToolPlan(mode="require", tools=TOOLS))
    assert check.ok, check.message
    assert [r.tool for r in check.tools] == list(TOOLS)  # the report keeps the plan's order
    assert sorted(t for t, _ in seen) == sorted(TOOLS) and all(n >= 1 for _, n in seen)
