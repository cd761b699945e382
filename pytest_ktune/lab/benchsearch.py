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

import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from pytest_ktune.core.discover import discover
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.keys import key_string
from pytest_ktune.core.store import target_id
from pytest_ktune.lab import one_thread_env
from pytest_ktune.lab.ktcache import load_any
from pytest_ktune.lab.landscape import LandscapeError
from pytest_ktune.lab.replay import check_landscape
from pytest_ktune.lab.results import BenchSettings, LandscapeResult, StrategyResult, budget_for, summary_lines, versus
from pytest_ktune.lab.standin import stand_in
from pytest_ktune.lab.strategies import (
    OPTUNA_STRATEGIES,
    Problem,
    SkipStrategy,
    Trace,
    check_strategies,
    run_kernel_tuner,
    run_ktune,
    run_optuna,
)
from pytest_ktune.lab.tables import markdown, overall_markdown, svg, to_json


def bench(problems: Sequence[Problem], settings: BenchSettings, *,
          progress: bool = True) -> list[LandscapeResult]:
    """Every strategy on every landscape, for every seed; ``settings.jobs`` processes at a time."""
    check_strategies(settings.strategies)
    budgets = [budget_for(p.land, settings.budget) for p in problems]
    tasks = [(i, name, budgets[i], settings.noise, seed) for i in range(len(problems))
             for name in settings.strategies for seed in range(settings.seeds)]
    # Kernel Tuner's strategies are seeded through numpy's and Python's global generators, which some
    # of them do not draw from alone: their first seed runs twice, to say whether it repeats itself.
    again = [(i, name, budgets[i], settings.noise, 0) for i in range(len(problems))
             for name in settings.strategies if name.startswith("kt:") and not settings.noise]
    if progress:
        print(f"ktune bench-search: {len(tasks)} replays ({len(problems)} landscape(s) x "
              f"{len(settings.strategies)} strategies x {settings.seeds} seeds) and {len(again)} repeated, "
              f"{settings.jobs} at a time",
              file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="ktune-bench-search-") as tmp, one_thread():
        _STATE[:] = [list(problems), Path(tmp), settings.priors]
        try:
            answers = _answers([*tasks, *again], settings.jobs, progress)
            repeats = {t[:2]: a for t, a in zip(again, answers[len(tasks):], strict=True)}
            answers = answers[:len(tasks)]
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
                twice = repeats.get((i, name))
                if twice is not None and res.traces:
                    res.repeatable = not isinstance(twice, str) and list(twice[0]) == list(res.traces[0])
            res.wall_s = sum(a[1] for a in mine if not isinstance(a, str))
            if progress:
                print(f"ktune bench-search: {problem.land.label}: {name}: "
                      f"{res.skipped or f'{res.wall_s:.1f} s'}", file=sys.stderr, flush=True)
            results.append(res)
        out.append(LandscapeResult(problem.land, budgets[i], results))
    return out


def one_thread() -> contextlib.AbstractContextManager[Any]:
    """Linear algebra on one thread while replays run: the models' matrices are a hundred rows, and a
    BLAS that starts a thread per core for each, on a machine whose cores are busy, runs them several
    times slower (the bo sampler's solves took four times as long on two shared cores). The
    variables reach libraries loaded later (``ktune bench-search`` sets them before numpy loads);
    threadpoolctl, where it is installed, limits those loaded already."""
    one_thread_env()
    try:
        from threadpoolctl import threadpool_limits  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(1)  # type: ignore[no-any-return, unused-ignore]


PROGRESS_EVERY_S = 5.0  # the longest stderr stays silent while replays run


def _answers(tasks: Sequence[tuple[int, str, int, bool, int]], jobs: int, progress: bool) -> list[Any]:
    """Every task's answer, in the tasks' order, saying on stderr how far along they are at least every
    ``PROGRESS_EVERY_S`` seconds while any runs."""
    t0, last = time.monotonic(), [time.monotonic()]

    def say(done: int) -> None:
        if progress:
            print(f"ktune bench-search: {done}/{len(tasks)} replays  [{time.monotonic() - t0:.0f} s]",
                  file=sys.stderr, flush=True)
        last[0] = time.monotonic()

    if jobs <= 1:
        out = []
        for task in tasks:
            out.append(_task(task))
            if time.monotonic() - last[0] >= PROGRESS_EVERY_S or len(out) == len(tasks):
                say(len(out))
        return out
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    # fork: the workers inherit the loaded targets and landscapes instead of pickling them
    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("fork")) as pool:
        futures = [pool.submit(_task, t) for t in tasks]
        pending = set(futures)
        while pending:
            _, pending = wait(pending, timeout=PROGRESS_EVERY_S, return_when=FIRST_COMPLETED)
            if time.monotonic() - last[0] >= PROGRESS_EVERY_S or not pending:
                say(len(futures) - len(pending))
        return [f.result() for f in futures]


_STATE: list[Any] = []  # [problems, scratch folder, priors] while bench() runs: what its worker processes read


def _task(task: tuple[int, str, int, bool, int]) -> tuple[Trace, float] | str:
    """One strategy, one landscape, one seed: its trace and seconds, or why it cannot run."""
    i, name, budget, noise, seed = task
    problems, folder, priors = _STATE
    t0 = time.monotonic()
    try:
        trace = _runner(name, problems[i], budget, noise, folder, priors=priors)(seed)
    except SkipStrategy as exc:
        return str(exc)
    return trace, time.monotonic() - t0


def _runner(name: str, problem: Problem, budget: int, noise: bool, folder: Path, *,
            priors: bool = True) -> Callable[[int], Trace]:
    if name == "ktune":
        return lambda seed: run_ktune(problem, budget, seed, noise, priors=priors)
    if name == "ktune:tpe":
        return lambda seed: run_ktune(problem, budget, seed, noise, sampler="tpe", priors=priors)
    if name in (*OPTUNA_STRATEGIES, "bo"):
        return lambda seed: run_optuna(problem, name, budget, seed, noise)
    if noise:
        def noisy(seed: int) -> Trace:
            raise SkipStrategy("Kernel Tuner's simulation mode replays the recorded medians; it has no noise")
        return noisy
    return lambda seed: run_kernel_tuner(problem, name[3:], budget, seed, folder)


def problems_for(root: Path, paths: Sequence[Path]) -> list[Problem]:
    """Load the landscapes (ktune's, or Kernel Tuner's cache files), find each one's target under
    ``root`` and check that they match (an imported one gets a stand-in, ``lab.standin``); each
    problem also gets the landscapes of its target's other keys and devices (warm starts, weighed
    by the tuner by how alike the keys and devices are)."""

    if not paths:
        raise KtuneError("no landscape given", hint="record some with `ktune record`, then pass their files")
    lands = [load_any(p) for p in paths]
    # Imported landscapes (Kernel Tuner's cache files) replay on a stand-in: no project is needed for them.
    targets = {target_id(t, root): t for t in discover(root)} if any(not x.imported for x in lands) else {}
    out = []
    for land in lands:
        if land.imported:
            target = stand_in(land, root)
        else:
            found = targets.get(land.target)
            if found is None:
                raise LandscapeError(f"the landscape is of {land.target}, which is not a target under {root}",
                                     where=land.where, hint="pass --root, the project root the landscape was "
                                                            "recorded in")
            target = found
            check_landscape(target, land)
        others = tuple(o for o in lands if o is not land and o.target == land.target and o.imported == land.imported
                       and (o.device_id, key_string(o.key)) != (land.device_id, key_string(land.key)))
        out.append(Problem(land, target, root, others))
    return out


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
