"""From the options a user gave (pytest's ``--ktune-*`` or the ``ktune`` command's) to one ``Settings``:
parsed and checked in one place, so that both skins mean the same by the same option."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from pytest_ktune.agent import AgentSettings, ModelSettings
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.names import AUTO, DEFAULT_SAMPLER, DEFAULT_WRITE
from pytest_ktune.core.paths import params_path
from pytest_ktune.gate.decision import Threshold
from pytest_ktune.measure.tools import ToolPlan
from pytest_ktune.run.extensions import HookRelay, resolve
from pytest_ktune.run.settings import Settings
from pytest_ktune.tuner.settings import TuneSettings


@dataclass(frozen=True)
class RunOptions:
    """The options of one run, as given (pytest's option names, without ``--ktune-``)."""

    root: Path
    params: str | None = None  # an explicit params file (core.paths says where it is otherwise)
    backend: str = AUTO
    threshold: str = "median:5%"
    update_baseline: bool = False
    seed: int | None = None
    tune: bool = False
    autotune: bool = False
    trials: int = 40
    tune_timeout: float | None = None
    sampler: str = DEFAULT_SAMPLER
    storage: str | None = None
    write: str = DEFAULT_WRITE
    trial_timeout: float = 60.0
    agent: bool = False
    model: str | None = None
    agent_iterations: int = 12
    agent_wall: float = 1800.0
    agent_memory: int = 8192
    agent_tools: str = "auto"
    command: str = ""


class OptionError(KtuneError):
    """An option that cannot be used as given; the message names it."""


def build(opts: RunOptions, hook: HookRelay) -> Settings:
    """The run's settings; an OptionError names the option that is wrong and what to give instead."""

    try:
        threshold = Threshold.parse(opts.threshold)
    except KtuneError as exc:
        raise OptionError(f"--ktune-threshold: {exc.message}", hint=exc.hint) from None
    tuning = opts.tune or opts.autotune
    tune = None
    if tuning:
        tune = TuneSettings(trials=opts.trials, timeout_s=opts.tune_timeout, sampler=opts.sampler,
                            storage=opts.storage, seed=opts.seed, trial_timeout_s=opts.trial_timeout,
                            write=opts.write == "file")
        tune.check(samplers=(opts.sampler,))  # the name itself is asked of the hooks below
    if opts.agent and not tuning:
        raise OptionError("--ktune-agent runs around the tuner: add --ktune-tune (or --ktune-autotune)")
    agent = None
    if opts.agent:

        try:
            agent = AgentSettings(model=ModelSettings.from_env(opts.model), iterations=opts.agent_iterations,
                                  wall_s=opts.agent_wall, memory_mb=opts.agent_memory,
                                  tools=ToolPlan(mode=opts.agent_tools))
            agent.check()
        except KtuneError as exc:
            raise OptionError(f"--ktune-agent: {exc.message}", hint=exc.hint) from None
    extensions = resolve(hook, backend=opts.backend, sampler=opts.sampler if tuning else None,
                         write=opts.write if tuning else None)
    seed = opts.seed if opts.seed is not None else random.SystemRandom().randrange(1, 2**31)
    return Settings(
        root=opts.root, params_path=params_path(opts.root, explicit=opts.params, root=opts.root),
        backend=opts.backend, threshold=threshold, update_baseline=opts.update_baseline, seed=seed,
        tune=tune, autotune=opts.autotune and not opts.tune, write_mode=opts.write, command=opts.command,
        agent=agent, extensions=extensions)
