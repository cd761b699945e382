"""``ktune bench-search``: how few trials each search strategy needs on recorded landscapes.

Every strategy gets the same budget and the same seeds, and every strategy's trials are counted the
same way: **a trial is a distinct configuration sent to the device** (compiled there, then verified
and timed). A configuration that fails to compile or breaks a device limit counts, since it cost a
compile; one that breaks a Space constraint never reaches the device and does not count; a
configuration proposed again is answered from memory and does not count.

Strategies: ``ktune`` (the live tuner's default path: ``tune_key`` with its warm starts and device
priors, then the ``bo`` sampler), two of its parts for comparison (``ktune:tpe``: the same warm
starts and priors, then the tuner's TPE; ``bo``: the sampler alone, from the default), Optuna's
``random``, ``tpe`` (plain, Optuna's defaults), ``gp`` and ``cmaes`` (through the tuner's own loop,
without warm starts), and Kernel Tuner's strategies (``kt:<name>``) through its own simulation mode,
from a cache file written from the landscape. The summary sets ``ktune`` against the best of the
strategies that are not its own.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ._errors import KtuneError
from ._landscape import Landscape, LandscapeError
from ._space import Space, Value
from ._target import Target

TOLERANCES = (0.03, 0.05)
KT_STRATEGIES = ("random_sample", "simulated_annealing", "pso", "genetic_algorithm", "bayes_opt",
                 "firefly_algorithm", "diff_evo", "greedy_ils", "mls", "dual_annealing", "basinhopping")
OPTUNA_STRATEGIES = ("random", "tpe", "gp", "cmaes")
# The default strategy and two of its parts alone: what each contributes. Not rivals in the summary.
OWN_STRATEGIES = ("ktune", "ktune:tpe", "bo")
DEFAULT_STRATEGIES = (*OWN_STRATEGIES, *OPTUNA_STRATEGIES, *(f"kt:{s}" for s in KT_STRATEGIES))
DEFAULT_BUDGET_CAP = 100

Trace = list[float]  # the true objective (µs) of each trial, in order; inf for a failed or infeasible one


class SkipStrategy(Exception):
    """A strategy that cannot run here (a missing optional package), with the reason."""


# -- running one strategy on one landscape -------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One landscape to search, with its target and the landscapes of the target's other keys."""

    land: Landscape
    target: Target
    root: Path
    others: tuple[Landscape, ...] = ()


def run_optuna(problem: Problem, sampler: str, budget: int, seed: int, noise: bool) -> Trace:
    """A sampler through the tuner's loop, from the target's default, without priors or warm starts
    from other keys. ``tpe`` is Optuna's TPE with its own defaults (not the tuner's tuned TPE); ``bo``
    is the default strategy's sampler alone."""
    from ._replay import replay_tune

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


def run_ktune(problem: Problem, budget: int, seed: int, noise: bool, sampler: str | None = None) -> Trace:
    """The default strategy, as ``ktune tune`` runs it: the params file holds what earlier tunes of the
    target's other keys found (here: a replay of ``ktune`` on each other landscape with the same seed
    and budget, without warm starts of its own), and tune_key adds the default and the device priors.
    ``sampler``: another sampler after the warm starts (``ktune:tpe``), for all those replays."""
    from ._replay import record_of, replay_tune
    from ._samplers import DEFAULT_SAMPLER

    sampler = sampler or DEFAULT_SAMPLER
    records = []
    for other in problem.others:
        first = replay_tune(problem.root, problem.target, other, sampler=sampler,
                            trials=min(budget, len(other.timed)), seed=seed, noise=noise)
        records.append(record_of(other, first.best_params))
    r = replay_tune(problem.root, problem.target, problem.land, sampler=sampler, trials=budget, seed=seed,
                    noise=noise, records=records)
    return [v for _, v in r.trace][:budget]


def kt_cache(land: Landscape) -> dict[str, Any]:
    """Kernel Tuner's cache file for the landscape: every recorded point, times in ms; failures as
    Kernel Tuner names them."""
    names = list(land.space["params"])
    cache: dict[str, Any] = {}
    for p in land.points:
        entry: dict[str, Any] = dict(p.params)
        if p.state == "ok":
            ms = p.value_us / 1000
            entry.update(time=ms, times=[ms], compile_time=p.compile_s * 1000, verification_time=0,
                         benchmark_time=ms)
        else:
            failed = "CompilationFailedConfig" if p.reason.startswith("compile error") else "RuntimeFailedConfig"
            entry.update(time=failed, compile_time=p.compile_s * 1000, verification_time=0, benchmark_time=0)
        cache[",".join(str(p.params[n]) for n in names)] = entry
    return {"device_name": land.device_id, "kernel_name": land.name, "problem_size": [1],
            "tune_params_keys": names, "tune_params": land.space_params(), "objective": "time", "cache": cache}


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
        part = path.with_suffix(f".{os.getpid()}.part")
        part.write_text(json.dumps(kt_cache(land)))
        part.replace(path)
    names = list(land.space["params"])
    space = Space(constraints=list(land.space["constraints"]), **land.space_params())
    key = dict(land.key)

    def allowed(p: Mapping[str, Any]) -> bool:
        return space.valid(dict(p), key)

    np.random.seed(seed)
    random.seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            results, _ = kernel_tuner.tune_kernel(
                land.name, "__global__ void replayed() {}", [1], [], land.space_params(), lang="CUDA",
                restrictions=allowed, cache=str(path), simulation_mode=True, strategy=strategy,
                strategy_options={"max_fevals": budget}, quiet=True, verbose=False)
        except Exception as exc:  # a strategy's own failure is reported, not raised
            raise SkipStrategy(f"Kernel Tuner's {strategy} failed: {type(exc).__name__}: {exc}") from None
    values = {",".join(str(p.params[n]) for n in names): p.value_us for p in land.points}
    trace: list[float] = []
    seen: set[str] = set()
    for r in results:
        k = ",".join(str(r[n]) for n in names)
        if k in seen or k not in values:
            continue  # a repeat is served from Kernel Tuner's cache, not timed again
        seen.add(k)
        trace.append(values[k])
    return trace[:budget]


# -- metrics -----------------------------------------------------------------------------------------


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


@dataclass
class StrategyResult:
    """One strategy on one landscape, over all seeds."""

    strategy: str
    traces: list[Trace] = field(default_factory=list)
    skipped: str = ""
    wall_s: float = 0.0

    def reached(self, optimum: float, tol: float) -> list[int | None]:
        return [trials_to(t, optimum * (1 + tol) * (1 + 1e-9)) for t in self.traces]

    def median_trials(self, optimum: float, tol: float) -> float:
        """The median over seeds of the trials to come within ``tol``; inf when more than half never did."""
        return statistics.median([math.inf if n is None else n for n in self.reached(optimum, tol)])

    def hit_rate(self, optimum: float, tol: float) -> float:
        hits = self.reached(optimum, tol)
        return sum(n is not None for n in hits) / len(hits)

    def final_over_optimum(self, optimum: float, budget: int) -> float:
        return statistics.median(best_so_far(t, budget)[-1] / optimum for t in self.traces)

    def curve(self, budget: int) -> list[float]:
        """The median over seeds of the best so far after each trial."""
        curves = [best_so_far(t, budget) for t in self.traces]
        return [statistics.median(c[i] for c in curves) for i in range(budget)]


@dataclass
class LandscapeResult:
    land: Landscape
    budget: int
    results: list[StrategyResult]

    @property
    def optimum_us(self) -> float:
        return self.land.optimum.value_us


@dataclass(frozen=True)
class BenchSettings:
    """What ``ktune bench-search`` runs."""

    budget: int | None = None  # None: min(100, the landscape's distinct configurations)
    seeds: int = 11
    strategies: tuple[str, ...] = DEFAULT_STRATEGIES
    noise: bool = False
    jobs: int = 1  # processes running seeds side by side


def budget_for(land: Landscape, asked: int | None) -> int:
    size = len(land.points)
    if asked is None:
        return min(DEFAULT_BUDGET_CAP, size)
    if asked < 1:
        raise KtuneError(f"a budget of {asked} trials searches nothing", hint="give --budget 1 or more")
    if asked > size:
        raise LandscapeError(f"a budget of {asked} trials is larger than the space of {land.label}: it has "
                             f"{size} configurations that reach the device", where=land.where,
                             hint=f"give --budget {size} or less (or leave it out: min({DEFAULT_BUDGET_CAP}, "
                                  "the space))")
    return asked


def check_strategies(names: Sequence[str]) -> None:
    for n in names:
        if n in (*OWN_STRATEGIES, *OPTUNA_STRATEGIES):
            continue
        if n.startswith("kt:") and n[3:] in KT_STRATEGIES:
            continue
        raise KtuneError(f"unknown strategy {n!r}",
                         hint=f"use some of: {', '.join(DEFAULT_STRATEGIES)}")


def bench(problems: Sequence[Problem], settings: BenchSettings, *,
          progress: bool = True) -> list[LandscapeResult]:
    """Every strategy on every landscape, for every seed; ``settings.jobs`` processes at a time."""
    check_strategies(settings.strategies)
    budgets = [budget_for(p.land, settings.budget) for p in problems]
    tasks = [(i, name, budgets[i], settings.noise, seed) for i in range(len(problems))
             for name in settings.strategies for seed in range(settings.seeds)]
    with tempfile.TemporaryDirectory(prefix="ktune-bench-search-") as tmp:
        _STATE[:] = [list(problems), Path(tmp)]
        try:
            if settings.jobs > 1:
                import multiprocessing as mp
                from concurrent.futures import ProcessPoolExecutor

                # One thread each: the GP sampler's torch would otherwise start a thread per core in
                # every worker, and on a small machine the oversubscribed workers crawl.
                os.environ.setdefault("OMP_NUM_THREADS", "1")
                # fork: the workers inherit the loaded targets and landscapes instead of pickling them
                with ProcessPoolExecutor(settings.jobs, mp_context=mp.get_context("fork")) as pool:
                    answers = _counted(pool.map(_task, tasks, chunksize=max(1, settings.seeds // 2)), len(tasks),
                                       progress)
            else:
                answers = _counted(map(_task, tasks), len(tasks), progress)
        finally:
            _STATE[:] = []
    out = []
    for i, problem in enumerate(problems):
        results = []
        for name in settings.strategies:
            res = StrategyResult(name)
            mine = [a for t, a in zip(tasks, answers, strict=True) if t[0] == i and t[1] == name]
            skipped = next((a for a in mine if isinstance(a, str)), None)
            if skipped is not None:
                res.skipped = skipped
            else:
                res.traces = [a[0] for a in mine if not isinstance(a, str)]
            res.wall_s = sum(a[1] for a in mine if not isinstance(a, str))
            if progress:
                print(f"ktune bench-search: {problem.land.label}: {name}: "
                      f"{res.skipped or f'{res.wall_s:.1f} s'}", file=sys.stderr, flush=True)
            results.append(res)
        out.append(LandscapeResult(problem.land, budgets[i], results))
    return out


def _counted(answers: Iterator[Any], total: int, progress: bool) -> list[Any]:
    """The answers as a list, saying on stderr how far along they are."""
    out, t0, step = [], time.monotonic(), max(1, total // 10)
    for a in answers:
        out.append(a)
        if progress and (len(out) % step == 0 or len(out) == total):
            print(f"ktune bench-search: {len(out)}/{total} replays  [{time.monotonic() - t0:.0f} s]",
                  file=sys.stderr, flush=True)
    return out


_STATE: list[Any] = []  # [problems, scratch folder] while bench() runs: what its worker processes read


def _task(task: tuple[int, str, int, bool, int]) -> tuple[Trace, float] | str:
    """One strategy, one landscape, one seed: its trace and seconds, or why it cannot run."""
    i, name, budget, noise, seed = task
    problems, folder = _STATE
    t0 = time.monotonic()
    try:
        trace = _runner(name, problems[i], budget, noise, folder)(seed)
    except SkipStrategy as exc:
        return str(exc)
    return trace, time.monotonic() - t0


def _runner(name: str, problem: Problem, budget: int, noise: bool, folder: Path) -> Callable[[int], Trace]:
    if name == "ktune":
        return lambda seed: run_ktune(problem, budget, seed, noise)
    if name == "ktune:tpe":
        return lambda seed: run_ktune(problem, budget, seed, noise, sampler="tpe")
    if name in (*OPTUNA_STRATEGIES, "bo"):
        return lambda seed: run_optuna(problem, name, budget, seed, noise)
    if noise:
        def noisy(seed: int) -> Trace:
            raise SkipStrategy("Kernel Tuner's simulation mode replays the recorded medians; it has no noise")
        return noisy
    return lambda seed: run_kernel_tuner(problem, name[3:], budget, seed, folder)


# -- output --------------------------------------------------------------------------------------------


def _trials_text(v: float, budget: int) -> str:
    return f"> {budget}" if math.isinf(v) else f"{v:g}"


def markdown(results: Sequence[LandscapeResult], settings: BenchSettings) -> str:
    lines = ["# Search efficiency on recorded landscapes", "",
             f"Median over {settings.seeds} seeds; a trial is a distinct configuration sent to the device "
             "(failures included, constraint violations and repeats not). "
             f"Noise: {'re-sampled from the recorded spread' if settings.noise else 'none (recorded medians)'}.", ""]
    for lr in results:
        opt = lr.land.optimum
        lines += [f"## {lr.land.label} on {lr.land.device_id}", "",
                  f"{len(lr.land.points)} configurations, {len(lr.land.timed)} timed; optimum "
                  f"{opt.value_us:.3f} µs at {_params(opt.params)}; budget {lr.budget}.", "",
                  "| strategy | trials to 3 % | trials to 5 % | hit rate 3 % | hit rate 5 % | final ÷ optimum |",
                  "|---|---:|---:|---:|---:|---:|"]
        for r in lr.results:
            if r.skipped:
                lines.append(f"| {r.strategy} | skipped: {r.skipped} | | | | |")
                continue
            o = lr.optimum_us
            lines.append(f"| {r.strategy} | {_trials_text(r.median_trials(o, 0.03), lr.budget)} | "
                         f"{_trials_text(r.median_trials(o, 0.05), lr.budget)} | {r.hit_rate(o, 0.03):.0%} | "
                         f"{r.hit_rate(o, 0.05):.0%} | {r.final_over_optimum(o, lr.budget):.3f} |")
        lines.append("")
    return "\n".join(lines)


def _params(p: Mapping[str, Value]) -> str:
    return ", ".join(f"{k}={v}" for k, v in p.items())


def to_json(results: Sequence[LandscapeResult], settings: BenchSettings) -> dict[str, Any]:
    from . import __version__

    out: dict[str, Any] = {"format": "pytest-ktune-bench-search/1", "ktune_version": __version__,
                           "seeds": settings.seeds, "noise": settings.noise, "landscapes": []}
    for lr in results:
        o = lr.optimum_us
        strategies = []
        for r in lr.results:
            row: dict[str, Any] = {"strategy": r.strategy, "skipped": r.skipped or None, "wall_s": round(r.wall_s, 3)}
            if not r.skipped:
                row.update({
                    "median_trials_to_3pct": _num(r.median_trials(o, 0.03)),
                    "median_trials_to_5pct": _num(r.median_trials(o, 0.05)),
                    "trials_to_3pct": r.reached(o, 0.03), "trials_to_5pct": r.reached(o, 0.05),
                    "hit_rate_3pct": r.hit_rate(o, 0.03), "hit_rate_5pct": r.hit_rate(o, 0.05),
                    "final_over_optimum": r.final_over_optimum(o, lr.budget),
                    "median_best_so_far_us": r.curve(lr.budget)})
            strategies.append(row)
        out["landscapes"].append({"file": str(lr.land.path) if lr.land.path else None, "target": lr.land.target,
                                  "key": dict(lr.land.key), "device": lr.land.device_id, "budget": lr.budget,
                                  "configurations": len(lr.land.points), "optimum_us": o,
                                  "optimum": dict(lr.land.optimum.params), "strategies": strategies})
    out["overall"] = [dataclasses.asdict(r) for r in overall(results)]
    return out


def _num(v: float) -> float | None:
    return None if math.isinf(v) else v


# -- the plot ------------------------------------------------------------------------------------------

_COLOURS = ("#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
            "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd")
_PANEL_W, _PANEL_H, _MARGIN = 420, 240, 46
_CAP = 1.5  # best ÷ optimum above this is drawn at the top edge


def svg(results: Sequence[LandscapeResult]) -> str:
    """Median (over seeds) best-so-far ÷ optimum against trials, one panel per landscape, one line per
    strategy."""
    from ._tune_report import _svg_open, _text

    names = sorted({r.strategy for lr in results for r in lr.results if not r.skipped},
                   key=lambda n: (n != "ktune", n))
    colour = {n: _COLOURS[i % len(_COLOURS)] for i, n in enumerate(names)}
    cols = 2 if len(results) > 1 else 1
    rows = math.ceil(len(results) / cols)
    legend_h = 18 * math.ceil(len(names) / 3) + 10
    width, height = cols * _PANEL_W, rows * _PANEL_H + legend_h
    out = _svg_open(width, height)
    for i, lr in enumerate(results):
        x0, y0 = (i % cols) * _PANEL_W + _MARGIN, (i // cols) * _PANEL_H + 24
        w, h = _PANEL_W - _MARGIN - 24, _PANEL_H - 24 - 34
        out.append(_text(x0, y0 - 8, f"{lr.land.label} ({len(lr.land.points)} configurations)", weight="bold"))
        out.append(f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#999"/>')

        def px(t: int, lr: LandscapeResult = lr, x0: int = x0, w: int = w) -> float:
            return x0 + w * (t - 1) / max(lr.budget - 1, 1)

        def py(ratio: float, y0: int = y0, h: int = h) -> float:
            # a square-root scale: the last few per cent, where strategies differ, get room
            return y0 + h * (1 - math.sqrt(max(min(ratio, _CAP) - 1, 0.0) / (_CAP - 1)))

        for tick in (1.0, 1.03, 1.1, 1.25, 1.5):
            y = py(tick)
            out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + w}" y2="{y:.1f}" stroke="#eee"/>')
            out.append(_text(x0 - 4, y + 4, f"{tick:g}", anchor="end"))
        for t in sorted({1, lr.budget, *range(10, lr.budget, max(10, lr.budget // 5 // 10 * 10 or 10))}):
            out.append(_text(px(t), y0 + h + 14, str(t), anchor="middle"))
        out.append(_text(x0 + w / 2, y0 + h + 28, "trials", anchor="middle"))
        for r in lr.results:
            if r.skipped or not r.traces:
                continue
            pts = [(px(t + 1), py(v / lr.optimum_us)) for t, v in enumerate(r.curve(lr.budget))
                   if math.isfinite(v)]
            if pts:
                path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
                stroke = 2.5 if r.strategy == "ktune" else 1.2
                out.append(f'<polyline points="{path}" fill="none" stroke="{colour[r.strategy]}" '
                           f'stroke-width="{stroke}"/>')
    y = rows * _PANEL_H + 8
    for j, n in enumerate(names):
        x, yy = 12 + (j % 3) * (width - 24) / 3, y + 18 * (j // 3)
        out.append(f'<rect x="{x:.1f}" y="{yy:.1f}" width="12" height="4" fill="{colour[n]}"/>')
        out.append(_text(x + 16, yy + 6, n))
    out.append("</svg>")
    return "\n".join(out) + "\n"


# -- the command ---------------------------------------------------------------------------------------


def problems_for(root: Path, paths: Sequence[Path]) -> list[Problem]:
    """Load the landscapes, find each one's target under ``root`` and check that they match; each
    problem also gets the landscapes of its target's other keys on the same device."""
    from ._discover import discover
    from ._landscape import load
    from ._replay import check_landscape
    from ._store import target_id

    if not paths:
        raise KtuneError("no landscape given", hint="record some with `ktune record`, then pass their files")
    lands = [load(p) for p in paths]
    targets = {target_id(t, root): t for t in discover(root)}
    out = []
    for land in lands:
        target = targets.get(land.target)
        if target is None:
            raise LandscapeError(f"the landscape is of {land.target}, which is not a target under {root}",
                                 where=land.where, hint="pass --root, the project root the landscape was "
                                                        "recorded in")
        check_landscape(target, land)
        others = tuple(o for o in lands if o is not land and o.target == land.target
                       and o.device_id == land.device_id and dict(o.key) != dict(land.key))
        out.append(Problem(land, target, root, others))
    return out


def versus(results: Sequence[LandscapeResult]) -> list[tuple[LandscapeResult, float, str, float, str]]:
    """Per landscape: the default strategy's median trials to 3 %, the best other strategy and its
    median, and the verdict (fewer, as many, MORE)."""
    out = []
    for lr in results:
        o = lr.optimum_us
        ran = [r for r in lr.results if not r.skipped]
        mine = next((r for r in ran if r.strategy == "ktune"), None)
        rivals = [r for r in ran if r.strategy not in OWN_STRATEGIES]
        if mine is None or not rivals:
            continue
        best = min(rivals, key=lambda r: r.median_trials(o, 0.03))
        m, b = mine.median_trials(o, 0.03), best.median_trials(o, 0.03)
        out.append((lr, m, best.strategy, b, "fewer" if m < b else "as many" if m == b else "MORE"))
    return out


def summary_lines(results: Sequence[LandscapeResult],
                  vs: Sequence[tuple[LandscapeResult, float, str, float, str]] | None = None) -> list[str]:
    """Per landscape: the default strategy's median trials to 3 % against the best other strategy's
    (``vs``: ``versus(results)``, when it is at hand)."""
    return [f"{lr.land.label}: ktune {_trials_text(m, lr.budget)} trials to 3 %, best other "
            f"{who} {_trials_text(b, lr.budget)}: {verdict}"
            for lr, m, who, b, verdict in (versus(results) if vs is None else vs)]


@dataclass(frozen=True)
class Overall:
    """One strategy over all the landscapes: median trials to 3 % summed, and how often it was best."""

    strategy: str
    reached: int  # landscapes where the median run came within 3 %
    ran: int  # landscapes where it ran (not skipped)
    total: float  # the medians summed; a landscape not reached or skipped counts as its budget + 1
    geomean: float  # their geometric mean, counted the same way
    fewest: int  # landscapes where no strategy (its own parts aside) needs fewer, ties counted


def overall(results: Sequence[LandscapeResult]) -> list[Overall]:
    """Each strategy over all the landscapes, fewest trials in total first. A landscape a strategy
    did not reach (or was skipped on) counts as its budget + 1, a bound below what it would need."""
    names: list[str] = []
    for lr in results:
        names.extend(r.strategy for r in lr.results if r.strategy not in names)
    counted: dict[str, list[float]] = {n: [] for n in names}
    ran = dict.fromkeys(names, 0)
    reached = dict.fromkeys(names, 0)
    fewest = dict.fromkeys(names, 0)
    for lr in results:
        o = lr.optimum_us
        by = {r.strategy: r for r in lr.results}
        med = {n: (by[n].median_trials(o, 0.03) if n in by and not by[n].skipped else math.inf) for n in names}
        for n in names:
            ran[n] += n in by and not by[n].skipped
            reached[n] += not math.isinf(med[n])
            counted[n].append(min(med[n], lr.budget + 1))
        for n in names:
            against = [med[m] for m in names if m == n or m not in OWN_STRATEGIES]
            fewest[n] += not math.isinf(med[n]) and med[n] <= min(against)
    out = [Overall(n, reached[n], ran[n], sum(counted[n]),
                   math.exp(statistics.fmean(math.log(v) for v in counted[n])) if counted[n] else math.nan,
                   fewest[n]) for n in names]
    return sorted(out, key=lambda x: (x.total, x.strategy))


def overall_markdown(results: Sequence[LandscapeResult]) -> str:
    """The table of ``overall``, with the default strategy set against the best other on each landscape."""
    rows = overall(results)
    if not rows:
        return ""
    n = len(results)
    lines = ["## Over all landscapes", "",
             f"Median trials to within 3 % of the optimum, over {n} landscapes: summed, and their geometric "
             "mean. A landscape a strategy did not reach, or was skipped on, counts as its budget + 1 (marked "
             "≥). *Fewest*: landscapes where no other strategy needs fewer (the default's own parts "
             "aside), ties counted.", "",
             "| strategy | reached | trials, summed | geometric mean | fewest |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        short = "≥ " if r.reached < n else ""
        skipped = f" (skipped on {n - r.ran})" if r.ran < n else ""
        lines.append(f"| {r.strategy}{skipped} | {r.reached}/{n} | {short}{r.total:g} | {short}{r.geomean:.2f} | "
                     f"{r.fewest} |")
    oracle = []
    for lr in results:
        rivals = [r.median_trials(lr.optimum_us, 0.03) for r in lr.results
                  if not r.skipped and r.strategy not in OWN_STRATEGIES]
        if rivals:
            oracle.append(min(*rivals, lr.budget + 1))
    if oracle and len(oracle) == n:
        mean = math.exp(statistics.fmean(map(math.log, oracle)))
        lines += ["", f"The best of the others on each landscape (a different strategy on each), summed: "
                      f"{sum(oracle):g} trials, geometric mean {mean:.2f}."]
    return "\n".join(lines) + "\n"


def run(root: Path, paths: Sequence[Path], settings: BenchSettings, out_dir: Path | None, *,
        stream: TextIO | None = None) -> list[LandscapeResult]:
    """``ktune bench-search``: the table on ``stream`` (stdout), and the files under ``out_dir``."""
    stream = stream or sys.stdout
    problems = problems_for(root, paths)
    for p in problems:
        budget_for(p.land, settings.budget)  # a bad budget fails before anything runs
    results = bench(problems, settings)
    md = markdown(results, settings)
    vs = versus(results)
    summary = summary_lines(results, vs)
    if summary:
        tally = [v for *_, v in vs]
        md += ("\n## The default strategy against the best other\n\n" + "\n".join(f"- {s}" for s in summary)
               + f"\n\nFewer on {tally.count('fewer')}, as many on {tally.count('as many')}, more on "
               f"{tally.count('MORE')}, of {len(tally)}.\n")
    if len(results) > 1:
        md += "\n" + overall_markdown(results)
    print(md, file=stream)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "bench-search.md").write_text(md)
        (out_dir / "bench-search.json").write_text(json.dumps(to_json(results, settings), indent=1) + "\n")
        (out_dir / "bench-search.svg").write_text(svg(results))
        print(f"wrote {out_dir / 'bench-search.md'}, .json and .svg", file=stream)
    return results
