"""One wall-time and memory budget over a whole agent run: model calls, checks, searches and their processes.

Every part of a run asks the same ``Budget``: a model request gets at most the time left as its deadline
(and its retries stop when the time is spent), a check's worker and tool processes get at most the time
left as their timeouts, a search's time budget is cut to it, and the loop stops between steps once either
bound is spent. Memory counts the resident memory of this process and of the processes it started (the
worker and tool processes), read from ``/proc``; where that is not available, this process's peak.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from pytest_ktune.agent._client import BudgetError

MIN_SLICE_S = 0.5  # the least time a step is given, so that a step begun just before the end can answer


def _statm_rss(pid: str) -> int:
    try:
        pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def _children(pid: str) -> list[str]:
    out: list[str] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out.extend((task / "children").read_text().split())
        except OSError:
            continue
    return out


def resident_bytes() -> int:
    """Resident memory of this process and every process below it (its peak where /proc is missing)."""
    if not Path("/proc/self/statm").exists():
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak) * (1 if sys.platform == "darwin" else 1024)
    total, todo, seen = 0, [str(os.getpid())], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += _statm_rss(pid)
        todo.extend(_children(pid))
    return total


@dataclass
class Budget:
    """The run's bounds: ``wall_s`` seconds from its start, and ``memory_mb`` of resident memory."""

    wall_s: float
    memory_mb: int | None = None
    started: float = field(default_factory=time.monotonic)

    def left_s(self) -> float:
        return self.wall_s - (time.monotonic() - self.started)

    def spent(self) -> str:
        """Why the run must stop now ('' while both bounds hold)."""
        if self.left_s() <= 0:
            return f"the wall-time budget of {self.wall_s:g} s is spent"
        if self.memory_mb is not None:
            used = resident_bytes()
            if used > self.memory_mb << 20:
                return (f"the memory budget of {self.memory_mb} MiB is spent ({used >> 20} MiB resident, "
                        "the worker processes included)")
        return ""

    def check(self) -> None:
        """Raise BudgetError once a bound is spent."""
        why = self.spent()
        if why:
            raise BudgetError(why, hint="raise --ktune-agent-wall or --ktune-agent-memory, or give the model fewer "
                                        "iterations")

    def cap(self, seconds: float) -> float:
        """``seconds``, or the time left if that is shorter (never less than ``MIN_SLICE_S``)."""
        return max(MIN_SLICE_S, min(seconds, self.left_s()))
