"""The search strategies bench-search compares, each run on one landscape for one seed: the live
tuner's own (``ktune``, ``ktune:tpe``, ``bo``), Optuna's samplers, and Kernel Tuner's strategies in
its simulation mode."""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.names import DEFAULT_SAMPLER
from pytest_ktune.core.space import config_key
from pytest_ktune.core.target import Target
from pytest_ktune.lab.ktcache import problem_size, write_cache
from pytest_ktune.lab.landscape import Landscape
from pytest_ktune.lab.replay import classes_of, record_of, replay_tune

KT_STRATEGIES = ("random_sample", "simulated_annealing", "pso", "genetic_algorithm", "bayes_opt",
                 "firefly_algorithm", "diff_evo", "greedy_ils", "mls", "dual_annealing", "basinhopping")


OPTUNA_STRATEGIES = ("random", "tpe", "gp", "cmaes")


# The default strategy and two of its parts alone: what each contributes. Not rivals in the summary.
OWN_STRATEGIES = ("ktune", "ktune:tpe", "bo")


DEFAULT_STRATEGIES = (*OWN_STRATEGIES, *OPTUNA_STRATEGIES, *(f"kt:{s}" for s in KT_STRATEGIES))


Trace = list[float]  # the true objective (µs) of each trial, in order; inf for a failed or infeasible one


class SkipStrategy(Exception):
    """A strategy that cannot run here (a missing optional package), with the reason."""


@dataclass(frozen=True)
class Problem:
    """One landscape to search, with its target (an imported landscape's stand-in) and the landscapes
    of the target's other keys and devices."""

    land: Landscape
    target: Target
    root: Path
    others: tuple[Landscape, ...] = ()


def run_optuna(problem: Problem, sampler: str, budget: int, seed: int, noise: bool) -> Trace:
    """A sampler through the tuner's loop, from the target's default, without priors or warm starts
    from other keys. ``tpe`` is Optuna's TPE with its own defaults (not the tuner's tuned TPE); ``bo``
    is the default strategy's sampler alone."""

    factory = None
    if sampler == "tpe":
        import optuna

        def factory(enc: Any) -> Any:
            return optuna.samplers.TPESampler(seed=seed)
    try:
        r = replay_tune(problem.root, problem.target, problem.land, sampler=sampler, trials=budget, seed=seed,
                        noise=noise, priors=False, sampler_factory=factory)
    except KtuneError as exc:
        if " needs " in exc.message:
            raise SkipStrategy(exc.message) from None
        raise
    return [v for _, v in r.trace][:budget]


_FIRST: dict[tuple[int, str, int, int, bool], Any] = {}  # the records of other landscapes, per process


def run_ktune(problem: Problem, budget: int, seed: int, noise: bool, sampler: str | None = None, *,
              priors: bool = True) -> Trace:
    """The default strategy, as ``ktune tune`` runs it: the params file holds what earlier tunes of the
    target's other keys found (here: a replay of ``ktune`` on each other landscape with the same seed
    and budget, without warm starts of its own), and tune_key adds the default and the device priors.
    ``sampler``: another sampler after the warm starts (``ktune:tpe``), for all those replays.
    ``priors=False``: neither device priors nor records, as ``ktune tune`` runs a target's first key on
    a device it has never seen (the default configuration is still timed first)."""

    sampler = sampler or DEFAULT_SAMPLER
    if not priors:
        r = replay_tune(problem.root, problem.target, problem.land, sampler=sampler, trials=budget, seed=seed,
                        noise=noise, priors=False)
        return [v for _, v in r.trace][:budget]
    records = []
    for other in problem.others:
        memo = (id(other), sampler, budget, seed, noise)  # the same for every landscape it warms
        if memo not in _FIRST:
            first = replay_tune(problem.root, problem.target, other, sampler=sampler,
                                trials=min(budget, len(other.timed)), seed=seed, noise=noise)
            _FIRST[memo] = record_of(other, first.best_params)
        records.append(_FIRST[memo])
    r = replay_tune(problem.root, problem.target, problem.land, sampler=sampler, trials=budget, seed=seed,
                    noise=noise, records=records)
    return [v for _, v in r.trace][:budget]


def run_kernel_tuner(problem: Problem, strategy: str, budget: int, seed: int, folder: Path) -> Trace:
    """One of Kernel Tuner's strategies in its simulation mode, on a cache written from the landscape."""
    try:
        import kernel_tuner  # type: ignore[import-untyped, import-not-found, unused-ignore]
        import numpy as np
    except ImportError:
        raise SkipStrategy("Kernel Tuner is not installed (pip install kernel_tuner==1.5.0)") from None
    land = problem.land
    tag = hashlib.sha256(json.dumps([land.target, land.device_id, dict(land.key)], sort_keys=True).encode())
    path = folder / f"{land.name}-{tag.hexdigest()[:12]}.json"
    if not path.exists():  # seeds may run side by side: write whole, then rename
        write_cache(land, path.with_suffix(f".{os.getpid()}.part")).replace(path)
    names = list(land.space["params"])
    space = problem.target.space  # an imported landscape's stand-in lists its feasible points
    key = dict(land.key)

    def allowed(p: Mapping[str, Any] | Any) -> bool:
        # Kernel Tuner hands a restriction a dict of the parameters, except in a space of one parameter,
        # where it hands over the value alone
        return space.valid(dict(p) if isinstance(p, Mapping) else {names[0]: p}, key)

    np.random.seed(seed)
    random.seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            results, _ = kernel_tuner.tune_kernel(
                land.name, "__global__ void replayed() {}", problem_size(land), [], land.space_params(), lang="CUDA",
                restrictions=allowed, cache=str(path), simulation_mode=True, strategy=strategy,
                strategy_options={"max_fevals": budget}, quiet=True, verbose=False)
        except Exception as exc:  # a strategy's own failure is reported, not raised
            raise SkipStrategy(f"Kernel Tuner's {strategy} failed: {type(exc).__name__}: {exc}") from None
    values = {",".join(str(p.params[n]) for n in names): p for p in land.points}
    cls = classes_of(problem.target, land)
    trace: list[float] = []
    seen: set[str] = set()
    for r in results:
        p = values.get(",".join(str(r[n]) for n in names))
        if p is None:
            continue
        c = cls.get(config_key(p.params), config_key(p.params))
        if c in seen:
            continue  # a repeat is served from Kernel Tuner's cache, an equivalent one from ours: not timed again
        seen.add(c)
        trace.append(p.value_us)
    return trace[:budget]


def best_so_far(trace: Sequence[float], budget: int) -> list[float]:
    out, best = [], math.inf
    for i in range(budget):
        if i < len(trace):
            best = min(best, trace[i])
        out.append(best)
    return out


def trials_to(trace: Sequence[float], target_us: float) -> int | None:
    """The 1-based trial at which the best so far first comes within ``target_us``; None: never."""
    return next((i + 1 for i, v in enumerate(trace) if v <= target_us), None)


def check_strategies(names: Sequence[str]) -> None:
    for n in names:
        if n in (*OWN_STRATEGIES, *OPTUNA_STRATEGIES):
            continue
        if n.startswith("kt:") and n[3:] in KT_STRATEGIES:
            continue
        raise KtuneError(f"unknown strategy {n!r}",
                         hint=f"use some of: {', '.join(DEFAULT_STRATEGIES)}")
