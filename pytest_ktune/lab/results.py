"""bench-search's results: per landscape and strategy, the traces of every seed, and what they add up to."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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
    repeatable: bool | None = None  # Kernel Tuner's strategies: whether one seed, run twice, repeated itself

    def quartiles(self, optimum: float, tol: float) -> tuple[float, float]:
        """The lower and upper quartiles over seeds of the trials to come within ``tol`` (inf: never)."""
        runs = sorted(math.inf if n is None else n for n in self.reached(optimum, tol))
        if not runs:
            return math.inf, math.inf
        # by rank (the seeds a quarter and three quarters of the way up), so a seed that never got there
        # is a rank like any other
        return runs[round((len(runs) - 1) * 0.25)], runs[round((len(runs) - 1) * 0.75)]

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
    # False (--no-priors): ``ktune`` and ``ktune:tpe`` run without device priors and without the records
    # of the target's other keys and devices, as on a target or device met for the first time
    priors: bool = True


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
class Stats:
    """What the summary over landscapes needs of one strategy on one landscape."""

    strategy: str
    skipped: bool
    median: float  # median trials to 3 %; inf: the median seed never came within 3 %
    after: Mapping[int, float]  # trials -> median fraction of the optimum reached by then
    repeatable: bool | None = None  # None: not checked (every strategy but Kernel Tuner's is seeded)
    quartiles: tuple[float, float] = (math.nan, math.nan)  # the lower and upper quartile over seeds (inf: never)


def stats_of(lr: LandscapeResult) -> tuple[int, list[Stats]]:
    """A landscape's budget and its strategies' Stats."""
    o = lr.optimum_us
    return lr.budget, [Stats(r.strategy, bool(r.skipped), math.inf if r.skipped else r.median_trials(o, 0.03),
                             {} if r.skipped else {m: r.reached_after(o, m) for m in after_marks(lr.budget)},
                             r.repeatable, (math.inf, math.inf) if r.skipped else r.quartiles(o, 0.03))
                       for r in lr.results]


def stats_of_json(landscape: Mapping[str, Any]) -> tuple[int, list[Stats]]:
    """The same, read back from one landscape of a ``bench-search.json`` (``tables.to_json``). A file
    written before the fractions after 10 and 20 trials or the quartiles were kept gets them from what
    it has: the median best-so-far curve (the fraction is a decreasing function of the best so far, so
    the median of one is the other's, for an odd number of seeds) and each seed's trials to 3 %."""
    optimum = float(landscape.get("optimum_us") or math.nan)
    budget = int(landscape["budget"])
    out = []
    for s in landscape["strategies"]:
        after = {int(k.rsplit("_", 1)[1]): float(v) for k, v in s.items() if k.startswith("of_optimum_after_")}
        curve = s.get("median_best_so_far_us") or []
        if not after and curve and math.isfinite(optimum):
            after = {m: optimum / curve[m - 1] if math.isfinite(curve[m - 1]) else 0.0
                     for m in after_marks(budget) if m <= len(curve)}
        median = s.get("median_trials_to_3pct")
        quartiles = (math.nan, math.nan)
        if s.get("quartiles_trials_to_3pct"):
            q1, q3 = s["quartiles_trials_to_3pct"]
            quartiles = (math.inf if q1 is None else float(q1), math.inf if q3 is None else float(q3))
        elif s.get("trials_to_3pct"):
            runs = sorted(math.inf if n is None else float(n) for n in s["trials_to_3pct"])
            quartiles = (runs[round((len(runs) - 1) * 0.25)], runs[round((len(runs) - 1) * 0.75)])
        out.append(Stats(str(s["strategy"]), bool(s["skipped"]), math.inf if median is None else float(median),
                         after, s.get("repeatable"), quartiles))
    return budget, out


@dataclass(frozen=True)
class Overall:
    """One strategy over all the landscapes: median trials to 3 % summed and their geometric mean, the
    fraction of the optimum reached after 10 and 20 trials, and how often it was best."""

    strategy: str
    reached: int  # landscapes where the median run came within 3 %
    ran: int  # landscapes where it ran (not skipped)
    total: float  # the medians summed; a landscape not reached or skipped counts as its budget + 1
    geomean: float  # their geometric mean, counted the same way
    fewest: int  # landscapes where no strategy (its own parts aside) needs fewer, ties counted
    after_10: float = math.nan  # the mean, over the landscapes it ran on, of the median fraction after 10
    after_20: float = math.nan  # the same after 20 (landscapes whose budget is smaller left out)
    repeatable: bool | None = None  # False: some landscape's seed, run twice, gave two traces
    # the geometric means, counted as ``geomean`` is, of the lower and of the upper quartile over seeds:
    # the spread of the seeds behind it (nan where a landscape kept no quartiles)
    spread: tuple[float, float] = (math.nan, math.nan)


def overall(results: Sequence[LandscapeResult]) -> list[Overall]:
    """Each strategy over all the landscapes (``rank``)."""
    return rank([stats_of(lr) for lr in results])


def rank(landscapes: Sequence[tuple[int, Sequence[Stats]]]) -> list[Overall]:
    """Each strategy over all the landscapes, by the geometric mean of its median trials to 3 %, then by
    the fraction of the optimum after 20 trials. A landscape a strategy did not reach (or was skipped
    on) counts as its budget + 1, a bound below what it would need."""
    names: list[str] = []
    for _, rows in landscapes:
        names.extend(r.strategy for r in rows if r.strategy not in names)
    counted: dict[str, list[float]] = {n: [] for n in names}
    after: dict[tuple[str, int], list[float]] = {}
    ran = dict.fromkeys(names, 0)
    reached = dict.fromkeys(names, 0)
    fewest = dict.fromkeys(names, 0)
    repeatable: dict[str, bool | None] = dict.fromkeys(names)
    quart: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for budget, rows in landscapes:
        by = {r.strategy: r for r in rows}
        med = {n: (by[n].median if n in by and not by[n].skipped else math.inf) for n in names}
        for n in names:
            r = by.get(n)
            ran[n] += r is not None and not r.skipped
            reached[n] += not math.isinf(med[n])
            counted[n].append(min(med[n], budget + 1))
            q = by[n].quartiles if r is not None and not r.skipped else (math.inf, math.inf)
            quart[n].append((min(q[0], budget + 1), min(q[1], budget + 1)))
            if r is not None and not r.skipped:
                for m, v in r.after.items():
                    after.setdefault((n, m), []).append(v)
                if r.repeatable is not None:
                    repeatable[n] = r.repeatable and repeatable[n] is not False
        for n in names:
            against = [med[m] for m in names if m == n or m not in OWN_STRATEGIES]
            fewest[n] += not math.isinf(med[n]) and med[n] <= min(against)

    def mean_after(n: str, m: int) -> float:
        v = after.get((n, m))
        return statistics.fmean(v) if v else math.nan

    def geo(v: Sequence[float]) -> float:
        return math.exp(statistics.fmean(math.log(x) for x in v)) if v and not any(map(math.isnan, v)) else math.nan

    def spread(n: str) -> tuple[float, float]:
        return geo([q for q, _ in quart[n]]), geo([q for _, q in quart[n]])

    out = [Overall(n, reached[n], ran[n], sum(counted[n]), geo(counted[n]), fewest[n], mean_after(n, 10),
                   mean_after(n, 20), repeatable[n], spread(n)) for n in names]
    return sorted(out, key=lambda x: (x.geomean, -(0.0 if math.isnan(x.after_20) else x.after_20), x.strategy))


def oracle(landscapes: Sequence[tuple[int, Sequence[Stats]]]) -> list[float] | None:
    """The best rival's median trials to 3 % on each landscape (a different strategy on each), a miss
    counted as the budget + 1; None where some landscape has no rival that ran."""
    out = []
    for budget, rows in landscapes:
        rivals = [r.median for r in rows if not r.skipped and r.strategy not in OWN_STRATEGIES]
        if not rivals:
            return None
        out.append(min(*rivals, budget + 1))
    return out


def trials_text(v: float, budget: int) -> str:
    return f"> {budget}" if math.isinf(v) else f"{v:g}"
