"""From the options a user gave (pytest's ``--ktune-*`` or the ``ktune`` command's, merged by
``run.config.resolve`` into a ``RunOptions``) to one ``Settings``: parsed and checked in one place, so
that both skins, the reports, ``templatize`` and ``record`` mean the same by the same option."""

from __future__ import annotations

import random
from pathlib import Path

from pytest_ktune.agent import AgentSettings, ModelSettings
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.options import OptionError
from pytest_ktune.core.paths import params_path
from pytest_ktune.gate.decision import Threshold
from pytest_ktune.measure.tools import TOOL_MODES, ToolPlan
from pytest_ktune.run.config import RunOptions
from pytest_ktune.run.extensions import HookRelay, resolve
from pytest_ktune.run.settings import Reports, Settings
from pytest_ktune.tuner.settings import TuneSettings
from pytest_ktune.writeback.deliver import builtin_write_back, preflight


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
        root=opts.root, params_path=run_params_path(opts),
        backend=opts.backend, threshold=threshold, update_baseline=opts.update_baseline, base=opts.base or None,
        strict=opts.strict, seed=seed,
        tune=tune, autotune=opts.autotune and not opts.tune, write_mode=opts.write, command=opts.command,
        agent=agent, extensions=extensions, item_timeout_s=opts.item_timeout,
        skip_unavailable=opts.skip_unavailable, devices=parse_devices(opts), reports=Reports.of(opts),
        origins=dict(opts.origins))


def parse_devices(opts: RunOptions) -> tuple[int, ...] | str | None:
    """``--ktune-devices``: None (the backend's one device), ``all``, or the distinct indices given."""
    text = (opts.devices or "").strip().lower()
    if not text:
        return None
    if text == "all":
        return "all"
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() for p in parts) or len(set(parts)) != len(parts):
        raise OptionError(f"{opts.named('devices', '--ktune-devices')} {opts.devices!r} is not a list of devices",
                          hint="give all, or distinct device indices separated by commas, e.g. 0,1,3")
    return tuple(int(p) for p in parts)


def run_params_path(opts: RunOptions) -> Path:
    """The run's params file, by ``core.paths``' rule: ``--ktune-params``, ``KTUNE_PARAMS``, the one the
    project's files name, the nearest at or above the rootdir."""
    return params_path(opts.root, explicit=opts.params, root=opts.root, configured=opts.params_configured)
