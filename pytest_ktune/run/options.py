"""From the options a user gave (pytest's ``--ktune-*`` or the ``ktune`` command's) to one ``Settings``:
parsed and checked in one place, so that both skins mean the same by the same option."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pytest_ktune.agent import AgentSettings, ModelSettings
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.names import AUTO, DEFAULT_SAMPLER, DEFAULT_WRITE
from pytest_ktune.core.paths import params_path
from pytest_ktune.gate.decision import Threshold
from pytest_ktune.measure.tools import TOOL_MODES, ToolPlan
from pytest_ktune.run.config import OptionError, Resolved
from pytest_ktune.run.extensions import HookRelay, resolve
from pytest_ktune.run.settings import Settings
from pytest_ktune.tuner.settings import TuneSettings
from pytest_ktune.writeback.deliver import builtin_write_back, preflight


@dataclass(frozen=True)
class RunOptions:
    """The options of one run, as given (pytest's option names, without ``--ktune-``)."""

    root: Path
    params: str | None = None  # an explicit params file (core.paths says where it is otherwise)
    backend: str = AUTO
    threshold: str = "median:5%"
    update_baseline: bool = False
    base: str | None = None
    strict: bool = False
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
    item_timeout: float = 600.0
    skip_unavailable: bool = False
    params_configured: Path | None = None  # the params file the project's files name (below KTUNE_PARAMS)
    origins: Mapping[str, str] = field(default_factory=dict)  # where each option came from (run.config)

    def named(self, name: str, flag: str) -> str:
        """How a message names the option: its flag, or where it was set when that was not the
        command line."""
        origin = self.origins.get(name, "default")
        return flag if origin in ("default", "command line") else f"{name} (set in {origin})"


def run_options(resolved: Resolved, *, root: Path, command: str) -> RunOptions:
    """The options ``run.config.resolve`` merged from the command line, the environment and the files."""
    v = resolved.values
    return RunOptions(
        root=root, params=v["params"], params_configured=resolved.params_configured, backend=v["backend"],
        threshold=v["threshold"], update_baseline=v["update_baseline"], base=v["base"], strict=v["strict"],
        seed=v["seed"], tune=v["tune"],
        autotune=v["autotune"], trials=v["trials"], tune_timeout=v["tune_timeout"], sampler=v["sampler"],
        storage=v["storage"], write=v["write"], trial_timeout=v["trial_timeout"], agent=v["agent"],
        model=v["model"], agent_iterations=v["agent_iterations"], command=command,
        item_timeout=v["item_timeout"], skip_unavailable=v["skip_unavailable"], agent_wall=v["agent_wall"],
        agent_memory=v["agent_memory"], agent_tools=v["agent_tools"], origins=dict(resolved.origins))


def build(opts: RunOptions, hook: HookRelay) -> Settings:
    """The run's settings; an OptionError names the option that is wrong and what to give instead."""

    if opts.item_timeout <= 0:
        raise OptionError(f"{opts.named('item_timeout', '--ktune-item-timeout')} {opts.item_timeout:g} leaves no "
                          "time to run a kernel",
                          hint="give a positive number of seconds, e.g. 600")
    try:
        threshold = Threshold.parse(opts.threshold)
    except KtuneError as exc:
        raise OptionError(f"{opts.named('threshold', '--ktune-threshold')}: {exc.message}", hint=exc.hint) from None
    tuning = opts.tune or opts.autotune
    tune = None
    if tuning:
        tune = TuneSettings(trials=opts.trials, timeout_s=opts.tune_timeout, sampler=opts.sampler,
                            storage=opts.storage, seed=opts.seed, trial_timeout_s=opts.trial_timeout)
        tune.check(samplers=(opts.sampler,))  # the name itself is asked of the hooks below
    if opts.agent and not tuning:
        raise OptionError("--ktune-agent runs around the tuner: add --ktune-tune (or --ktune-autotune)")
    if opts.agent_tools not in TOOL_MODES:
        raise OptionError(f"{opts.named('agent_tools', '--ktune-agent-tools')} {opts.agent_tools!r} is not a mode",
                          hint=f"give one of {', '.join(TOOL_MODES)}")
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
    # Re-recorded baselines go through the git modes too (run.session._deliver_baselines).
    if (tuning and extensions.write_back is builtin_write_back(opts.write)) or opts.update_baseline:
        try:
            preflight(opts.write, opts.root)  # a write-back that could not deliver fails now, not after the tune
        except KtuneError as exc:
            raise OptionError(exc.message, hint=exc.hint) from None
    seed = opts.seed if opts.seed is not None else random.SystemRandom().randrange(1, 2**31)
    return Settings(
        root=opts.root, params_path=params_path(opts.root, explicit=opts.params, root=opts.root,
                                                  configured=opts.params_configured),
        backend=opts.backend, threshold=threshold, update_baseline=opts.update_baseline, base=opts.base or None,
        strict=opts.strict, seed=seed,
        tune=tune, autotune=opts.autotune and not opts.tune, write_mode=opts.write, command=opts.command,
        agent=agent, extensions=extensions, item_timeout_s=opts.item_timeout,
        skip_unavailable=opts.skip_unavailable)
