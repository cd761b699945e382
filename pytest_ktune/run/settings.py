"""The settings of one run, parsed once from the command line (pytest's or the ``ktune`` command's)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from pytest_ktune.core.names import AUTO, DEFAULT_WRITE
from pytest_ktune.gate.decision import Threshold
from pytest_ktune.measure.bench import BenchConfig
from pytest_ktune.run.extensions import Extensions

if TYPE_CHECKING:
    from pytest_ktune.agent import AgentSettings
    from pytest_ktune.tuner.settings import TuneSettings


@dataclass(frozen=True)
class Settings:
    """Everything a run needs to know, parsed once."""

    root: Path
    params_path: Path
    backend: str = AUTO
    threshold: Threshold = field(default_factory=lambda: Threshold.parse("median:5%"))
    update_baseline: bool = False
    base: str | None = None  # --ktune-base: the git ref changed targets are A/B'd against
    strict: bool = False  # --ktune-strict: missing records and baselines are errors
    seed: int = 0
    bench: BenchConfig | None = None
    tune: TuneSettings | None = None  # None: this run does not tune
    autotune: bool = False  # tune only what the autotune rule picks (run.tuning.Tuning.skip_reason)
    write_mode: str = DEFAULT_WRITE
    command: str = "pytest --ktune --ktune-tune"
    agent: AgentSettings | None = None  # the agent stage (its model None: the rule-based templater)
    extensions: Extensions = field(default_factory=Extensions)
    item_timeout_s: float = 600.0  # how long one item's kernels may run before they count as hung
    skip_unavailable: bool = False  # a backend that cannot run skips its items instead of failing the run
    progress: TextIO | None = None  # where a tune's live progress line goes (None: nowhere)

    @property
    def scratch(self) -> Path:
        return self.root / ".ktune"
