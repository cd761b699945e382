"""What a tune found and did: frozen values for the reports and the write-back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_ktune.core.space import Value
from pytest_ktune.core.store import Record


@dataclass(frozen=True)
class CaseChange:
    """One case of an accepted winner: the median per call before and after, from the A/B run."""

    case_id: str
    before_s: float
    after_s: float
    bytes_moved: int | None


@dataclass(frozen=True)
class TuneOutcome:
    """What one tune of one key found and did."""

    target: str
    key: Mapping[str, Any]
    device: str
    study: str
    timed: int  # trials this run timed (a resumed study's earlier trials are ``earlier``)
    infeasible: int
    failed: int
    default_us: float | None
    current_params: Mapping[str, Value]
    current_us: float | None
    best_params: Mapping[str, Value]
    best_us: float
    accepted: bool
    decision: str
    report: Path | None  # the report written for it (by ``run.tuning``), if any
    wall_s: float
    written: bool  # delivered by the run's write-back mode (``run.tuning.Tuning.finish``)
    record: Record | None = None  # what the params file gets for this key (a winner, or the kept one's ``tuned``)
    changes: tuple[CaseChange, ...] = ()
    # What the study's report shows (with ``TuneContext.reports``): its summary, every trial, and
    # the parameters' importances where they mean something.
    summary: StudySummary | None = None
    trials: tuple[TrialRow, ...] = ()
    importances: Mapping[str, float] | None = None
    earlier: int = 0  # timed trials the study held before this run (it was resumed)
    asked: int = 0  # the budget asked for (``--ktune-trials``), which counts the study's trials
    devices: tuple[str, ...] = ()  # over several devices (``tuner.devices``): those whose workers ran trials
    notes: tuple[str, ...] = ()  # what the tune said on the console: a device lost, or left out

    def resumed_text(self) -> str:
        """What a resumed study held already: ``, and 2 in earlier runs of the study (6 asked in all)``."""
        return f", and {self.earlier} in earlier runs of the study ({self.asked} asked in all)" if self.earlier else ""

    def devices_text(self) -> str:
        """Over several devices, which ran the trials: ``; trials on pthread #0 and pthread #1``."""
        return f"; trials on {' and '.join(self.devices)}" if len(self.devices) > 1 else ""

    def trials_text(self) -> str:
        """How many trials were timed, as asked: this run's, and a resumed study's earlier ones."""
        return f"{self.timed} timed trials{self.resumed_text()}"

    def trials_cell(self) -> str:
        """The same in a table's cell: ``4``, or ``0 (+8 earlier)`` for a resumed study."""
        return f"{self.timed}" + (f" (+{self.earlier} earlier)" if self.earlier else "")


@dataclass(frozen=True)
class TemplateChange:
    """A verified template the agent stage found faster than the base kernel: the new files it adds and
    its tuned records, for the write-back mode to deliver as it delivers tuned records."""

    target: str  # the base target's name
    files: Mapping[str, str]  # path relative to the project root, in posix form -> text; all new files
    records: tuple[Record, ...]
    summary: str  # one paragraph for a commit message or pull request: the side-by-side times


@dataclass(frozen=True)
class TrialRow:
    """One Optuna trial as the report shows it."""

    number: int
    params: Mapping[str, int | float | str | bool]
    state: str
    value_us: float | None
    reason: str = ""
    source: str = "sampler"
    compile_s: float = 0.0
    run_s: float = 0.0


@dataclass(frozen=True)
class StudySummary:
    """What one study was about and how it ended: the header and result paragraph of the report."""

    target: str
    device: str
    key: Mapping[str, object]
    sampler: str
    study_name: str
    storage: str
    default_params: Mapping[str, object]
    default_us: float | None
    current_params: Mapping[str, object]
    current_us: float | None
    best_params: Mapping[str, object] | None
    best_us: float | None
    accepted: bool
    decision: str
    feasible_points: int | None
    wall_s: float
