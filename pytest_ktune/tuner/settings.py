"""How to tune, and where: the settings a tune of one key runs under."""

from __future__ import annotations

import sys
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.names import SAMPLERS
from pytest_ktune.core.options import DEFAULTS

if TYPE_CHECKING:
    from pytest_ktune.backends.base import BackendFactory
    from pytest_ktune.measure.worker import PoolFactory
    from pytest_ktune.tuner.samplers import SamplerFactory


@dataclass(frozen=True)
class TuneSettings:
    """How to tune: the budget, the sampler and where the study lives."""

    trials: int = DEFAULTS.trials
    timeout_s: float | None = DEFAULTS.tune_timeout
    sampler: str = DEFAULTS.sampler
    storage: str | None = DEFAULTS.storage  # None: a journal file under .ktune/
    seed: int | None = DEFAULTS.seed
    trial_timeout_s: float = DEFAULTS.trial_timeout
    batch: int = 4
    priors: bool = True  # time the device priors (_priors) among the warm starts (tune_key says where)

    def check(self, samplers: Collection[str] = SAMPLERS) -> None:
        """Raise a KtuneError naming what cannot tune; ``samplers``: the sampler names this run knows
        (the built-in ones, and a plugin's)."""
        if self.trials < 1:
            raise KtuneError(f"a budget of {self.trials} trials tunes nothing",
                             hint="give --ktune-trials 1 or more")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise KtuneError(f"a time budget of {self.timeout_s:g} s tunes nothing",
                             hint="give a positive number of seconds, or none")
        if self.sampler not in samplers:
            raise KtuneError(f"unknown sampler {self.sampler!r}", hint=f"use one of {', '.join(samplers)}")
        if self.trial_timeout_s <= 0:
            raise KtuneError("the per-trial timeout must be positive", hint="e.g. 60 (seconds)")


@dataclass(frozen=True)
class TuneContext:
    """Where a tune runs and writes."""

    root: Path
    params_path: Path
    backend: str
    settings: TuneSettings
    progress: TextIO | None = None
    # Replays (``lab.replay``) answer from a recorded landscape instead of a worker process, and need
    # nothing for a report; the live tuner leaves both as they are.
    pool_factory: PoolFactory | None = None
    reports: bool = True
    # Keep each key's decision under .ktune/winners/ until the write-back delivers it, so that a rerun
    # after an interruption resumes it (``tuner.kept``): the run's tunes do (``run.tuning``); the agent's
    # searches and replays, which deliver nothing, do not.
    keep: bool = False
    # The sampler (None: the built-in one ``settings.sampler`` names) and the backend's factory (None:
    # the built-in backend of that name), as the extension hooks resolved them.
    sampler_factory: SamplerFactory | None = None
    backend_factory: BackendFactory | None = None
    # --ktune-devices: the device indices whose workers tune one study together (``tuner.devices``); None:
    # one worker on the device the backend picks.
    devices: tuple[int, ...] | None = None

    def say(self, line: str) -> None:
        """One line on the console, where the progress line goes (stderr where it goes nowhere)."""
        stream = self.progress or sys.stderr
        stream.write(f"ktune: {line}\n")
        stream.flush()

    @property
    def scratch(self) -> Path:
        return self.root / ".ktune"
