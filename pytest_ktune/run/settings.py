"""The settings of one run, parsed once from the command line (pytest's or the ``ktune`` command's)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from pytest_ktune.gate.decision import Threshold
from pytest_ktune.measure.bench import BenchConfig
from pytest_ktune.run.extensions import Extensions

if TYPE_CHECKING:
    from pytest_ktune.agent import AgentSettings
    from pytest_ktune.run.config import RunOptions
    from pytest_ktune.tuner.settings import TuneSettings


@dataclass(frozen=True)
class Reports:
    """Where the run's reports go (None: not asked for): absolute paths."""

    junit: Path | None = None
    markdown: Path | None = None
    benchmark_json: Path | None = None

    @classmethod
    def of(cls, opts: RunOptions) -> Reports:
        def path(value: str | None) -> Path | None:
            return Path(value) if value else None

        return cls(junit=path(opts.junit), markdown=path(opts.markdown), benchmark_json=path(opts.benchmark_json))


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything a run needs to know, parsed once (``run.options.build``); the options' defaults are
    ``core.options``', not written here."""

    root: Path
    params_path: Path
    backend: str
    threshold: Threshold
    update_baseline: bool
    base: str | None  # --ktune-base: the git ref changed targets are A/B'd against
    strict: bool  # --ktune-strict: missing records and baselines are errors
    seed: int
    tune: TuneSettings | None  # None: this run does not tune
    autotune: bool  # tune only what the autotune rule picks (run.tuning.Tuning.skip_reason)
    write_mode: str
    command: str
    agent: AgentSettings | None  # the agent stage (its model None: the rule-based templater)
    item_timeout_s: float  # how long one item's kernels may run before they count as hung
    skip_unavailable: bool  # a backend that cannot run skips its items instead of failing the run
    # --ktune-devices: None, the one device of the backend's choice; "all"; or the indices to measure on
    devices: tuple[int, ...] | str | None = None
    reports: Reports = field(default_factory=Reports)
    origins: Mapping[str, str] = field(default_factory=dict)  # where each option came from (run.config)
    extensions: Extensions = field(default_factory=Extensions)
    bench: BenchConfig | None = None
    progress: TextIO | None = None  # where a tune's live progress line goes (None: nowhere)

    def origin(self, name: str) -> str:
        """Where the option ``name`` came from: ``default``, ``command line``, a variable or a file."""
        return self.origins.get(name, "default")

    @property
    def scratch(self) -> Path:
        return self.root / ".ktune"
