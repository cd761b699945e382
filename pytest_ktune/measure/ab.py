"""The same-run A/B: two kernels timed interleaved (ABBA) in one process, sequentially.

At planned looks (each side holding ``first``, 2 ``first``, 4 ``first``, … samples, and ``max_samples``)
the caller's stopping rule (``Stop``) asks two one-sided rank tests whether A is already certainly
slower than ``above`` times B, or certainly faster than ``below`` times B; each look tests at the rule's
alpha over the number of looks (Bonferroni), so over the whole sample each of those two claims is false
with probability at most alpha. A look tests A against B's samples scaled by the factor
(``mann_whitney_greater``, exact for few samples). Where no look stops it, the sample ends as a plain
measurement does: both medians precise, ``max_samples``, or the time budget. Either way the caller
judges the measurements with its own rule; the stop only says when the sample held enough.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_ktune.backends.base import Backend, Launch, Timer
from pytest_ktune.measure.bench import BenchConfig, Measurement, calibrate, mann_whitney_greater

SLOWER = "slower"  # a look found A certainly slower than ``above`` times B
FASTER = "faster"  # a look found A certainly faster than ``below`` times B
PRECISE = "precise"  # both medians within ``ci_target``
MAX_SAMPLES = "max samples"
TIME_BUDGET = "time budget"

# The significance level of every A/B claim, the gate's and the tuner's alike: "slower" and "faster"
# each hold at ALPHA (over all the looks of a sequential A/B).
ALPHA = 0.01


@dataclass(frozen=True)
class Stop:
    """A caller's hypothesis about the ratio of A to B: stop as soon as A is certainly slower than
    ``above`` times B, or certainly faster than ``below`` times B (None: never on that side), each claim
    wrong with probability at most ``alpha`` over all the looks."""

    above: float | None
    below: float | None
    alpha: float

    @classmethod
    def threshold(cls, fraction: float, alpha: float) -> Stop:
        """The gate's: A slower than B by more than ``fraction`` (a certain regression), or certainly
        not (a certain pass)."""
        return cls(above=1 + fraction, below=1 + fraction, alpha=alpha)

    def check(self, a: Sequence[float], b: Sequence[float], alpha: float) -> tuple[str, float] | None:
        """(SLOWER or FASTER, the p-value) where a test at ``alpha`` (one look's share) says so, else None."""
        if self.above is not None:
            p = mann_whitney_greater(a, [self.above * v for v in b], exact=True)
            if p <= alpha:
                return SLOWER, p
        if self.below is not None:
            p = mann_whitney_greater([self.below * v for v in b], a, exact=True)
            if p <= alpha:
                return FASTER, p
        return None


def planned_looks(max_samples: int, alpha: float) -> tuple[int, ...]:
    """The samples per side at which a stopping rule at ``alpha`` looks: ``first`` and its doublings
    below ``max_samples`` (one within a quarter of it left out), then ``max_samples``. ``first`` is
    the fewest samples whose smallest p-value (every A above every B) reaches alpha over the number
    of looks: fewer could never stop. Empty where even ``max_samples`` cannot."""
    for first in range(2, max_samples + 1):
        looks = []
        n = first
        while n < max_samples:
            looks.append(n)
            n *= 2
        if looks and looks[-1] > 0.75 * max_samples:
            looks.pop()
        looks.append(max_samples)
        if min_p(first) <= alpha / len(looks):
            return tuple(looks)
    return ()


def min_p(n: int) -> float:
    """The smallest p-value a look's test gives with ``n`` samples a side."""
    return mann_whitney_greater([float(n + i) for i in range(n)], [float(i) for i in range(n)], exact=True)


@dataclass(frozen=True)
class ABResult:
    """An interleaved A/B: both measurements, and why the sampling stopped (``stopped``: SLOWER or
    FASTER at ``look`` of ``looks`` with that look's ``p_value``, else PRECISE, MAX_SAMPLES or
    TIME_BUDGET)."""

    a: Measurement
    b: Measurement
    stopped: str
    look: int = 0  # 1-based; 0 where no look stopped it
    looks: int = 0  # how many were planned (0: no stopping rule)
    p_value: float = 1.0

    @property
    def pairs(self) -> int:
        return len(self.a.samples)

    @property
    def early(self) -> bool:
        """Whether a look of the stopping rule ended the sample."""
        return self.stopped in (SLOWER, FASTER)

    @property
    def reason(self) -> str:
        """Why it stopped, in words: ``stopped early after 6 pairs: A certainly slower (look 1 of 6,
        p=0.0011)``, ``40 pairs, both medians precise``."""
        if self.early:
            return (f"stopped early after {self.pairs} pairs: A certainly {self.stopped} "
                    f"(look {self.look} of {self.looks}, p={self.p_value:.2g})")
        why = {PRECISE: "both medians precise", MAX_SAMPLES: "the most a sample takes",
               TIME_BUDGET: "stopped by the time budget"}
        return f"{self.pairs} pairs, {why[self.stopped]}"


def measure_ab(backend: Backend, sets_a: Sequence[Sequence[Launch]], sets_b: Sequence[Sequence[Launch]],
               cfg: BenchConfig, *, flush: bool, stop: Stop | None = None) -> ABResult:
    """Time A and B interleaved (ABBA order) in one process, so drift hits both alike, with equal
    repeats per sample (the fewer of the two calibrations: B's first, and A's only where B's leaves
    room, so a slow A runs no calibration of its own beside a slow B). ``stop``: the caller's rule to
    end the sample early at the planned looks; without one only the end-of-sample stops apply. The time
    budget (twice ``cfg.max_time_s``) is checked after each pair once each side holds
    ``cfg.min_samples``."""
    looks = planned_looks(cfg.max_samples, stop.alpha) if stop is not None else ()
    repeats = calibrate(backend, sets_a, cfg, flush, most=calibrate(backend, sets_b, cfg, flush))
    ta, tb = backend.timer(sets_a, repeats), backend.timer(sets_b, repeats)
    a: list[float] = []
    b: list[float] = []
    timers: tuple[tuple[Timer, list[float], int], ...] = ((ta, a, len(sets_a)), (tb, b, len(sets_b)))

    def result(stopped: str, look: int = 0, p: float = 1.0) -> ABResult:
        return ABResult(Measurement(tuple(a), repeats, flush, len(sets_a), ta.mode),
                        Measurement(tuple(b), repeats, flush, len(sets_b), tb.mode),
                        stopped, look, len(looks), p)

    start = time.perf_counter()
    try:
        ta.sample(flush)  # the first replay of a new graph pays for its upload
        tb.sample(flush)
        while True:
            for timer, out, nsets in (timers if len(a) % 2 == 0 else timers[::-1]):
                out.append(timer.sample(flush) / nsets)
            n = len(a)
            if stop is not None and n in looks:
                found = stop.check(a, b, stop.alpha / len(looks))
                if found is not None:
                    return result(found[0], looks.index(n) + 1, found[1])
            if n >= cfg.min_samples:
                r = result(PRECISE)
                if max(r.a.rel_ci, r.b.rel_ci) <= cfg.ci_target:
                    return r
                if n >= cfg.max_samples:
                    return result(MAX_SAMPLES)
                if time.perf_counter() - start > 2 * cfg.max_time_s:
                    return result(TIME_BUDGET)
    finally:
        ta.close()
        tb.close()
