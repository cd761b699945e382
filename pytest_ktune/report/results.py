"""What a run produced, frozen for the reports: every item's outcome, the timings, the tunes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_ktune.gate.verdict import PerfResult
    from pytest_ktune.tuner.outcome import TuneOutcome


@dataclass(frozen=True)
class ItemOutcome:
    """How one pytest-ktune item ended, for the JUnit report: one per correctness, performance or tune item."""

    nodeid: str
    check: str  # "correct", "perf", "tune", or "broken" for a case that could not be collected
    target: str  # the target's id in the params file: its file relative to the root, and its name
    name: str  # the target's name
    label: str  # the case id, the tuning key's label, or the broken item's name
    outcome: str  # "passed", "failed", "skipped" or "error" (a failure outside the test itself)
    duration_s: float = 0.0
    message: str = ""
    key: Mapping[str, Any] | None = None  # tune items: the key


@dataclass(frozen=True)
class RunResults:
    """Everything the JUnit, benchmark-JSON and terminal reports of one run read."""

    root: Path
    backend: str
    device: str
    outcomes: tuple[ItemOutcome, ...] = ()
    results: tuple[PerfResult, ...] = ()
    tunes: tuple[TuneOutcome, ...] = ()
    notices: tuple[str, ...] = ()  # what the run says once, above the notes: a missing params file, REF
