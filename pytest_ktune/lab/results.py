"""bench-search's results: per landscape and strategy, the traces of every seed, and what they add up to."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.lab.landscape import Landscape, LandscapeError
from pytest_ktune.lab.strategies import DEFAULT_STRATEGIES, OWN_STRATEGIES, Trace, best_so_far, trials_to

TOLERANCES = (0.03, 0.05)


DEFAULT_BUDGET_CAP = 100


AFTER = (10, 20)  # the trials after which the fraction of the optimum reached is reported


def after_marks(budget: int) -> list[int]:
    """The trials of ``AFTER`` that fit in ``budget`` (the whole budget where none does): a column "after
    20" under a budget of 10 would repeat "after 10" under another name."""
    return [m for m in AFTER if m <= budget] or [budget]


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

    def reached_after(self, optimum: float, trials: int) -> float:
        """The median over seeds of the fraction of the optimum reached after ``trials`` trials
        (optimum ÷ best so far: 1 at the optimum, 0.5 at twice its time; 0 with nothing timed)."""
        return statistics.median(optimum / b if math.isfinite(b) else 0.0
                                 for b in (best_so_far(t, trials)[-1] for t in self.traces))

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
    return [f"{lr.land.label}: ktune {trials_text(m, lr.budget)} trials to 3 %, best other "
            f"{who} {trials_text(b, lr.budget)}: {verdict}"
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


def trials_text(v: float, budget: int) -> str:
    return f"> {budget}" if math.isinf(v) else f"{v:g}"
