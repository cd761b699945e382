"""Timing methodology: warm-up, repeats per sample, cache flushing, and the median's confidence."""

from __future__ import annotations

import bisect
import functools
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_ktune.backends.base import Backend, Launch


@dataclass(frozen=True)
class BenchConfig:
    """How long and how precisely to time.

    A sample replays the recorded launches ``repeats`` times back to back (a
    CUDA graph on CuPy, or events around queued launches on OpenCL), with
    ``repeats`` chosen so that one sample lasts at least ``min_sample_s``:
    that keeps launch overhead out of short kernels. Samples are taken until
    the median's 95 % confidence interval is within ``ci_target`` of it, or
    ``max_samples`` or ``max_time_s`` is reached.
    """

    min_sample_s: float = 100e-6
    min_samples: int = 10
    max_samples: int = 200
    max_time_s: float = 3.0
    ci_target: float = 0.01
    max_repeats: int = 2000
    warmup: int = 3

    @classmethod
    def for_backend(cls, backend: Backend) -> BenchConfig:
        if backend.name == "cuda":
            return cls()
        # A CPU device through PoCL is noisier and slower to launch, and CI has two cores: a looser
        # precision and a smaller time budget per case (its timings gate CI runs, not tuning decisions).
        return cls(min_sample_s=2e-3, min_samples=7, max_samples=30, max_time_s=0.6, ci_target=0.02,
                   max_repeats=200, warmup=1)


@dataclass(frozen=True)
class Measurement:
    """Samples of seconds per call of the target's function, and how they were taken."""

    samples: tuple[float, ...]
    repeats: int
    flushed: bool
    rotation: int
    mode: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def iqr(self) -> float:
        if len(self.samples) < 4:
            return max(self.samples) - min(self.samples)
        q = statistics.quantiles(self.samples, n=4, method="inclusive")
        return q[2] - q[0]

    @property
    def ci(self) -> tuple[float, float]:
        """95 % confidence interval of the median, from order statistics."""
        return median_ci(self.samples)

    @property
    def rel_ci(self) -> float:
        """Half-width of the median's confidence interval, relative to the median."""
        lo, hi = self.ci
        return (hi - lo) / 2 / self.median if self.median > 0 else math.inf


def median_ci(samples: Sequence[float], z: float = 1.96) -> tuple[float, float]:
    s = sorted(samples)
    n = len(s)
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half) - 1)
    hi = min(n - 1, math.ceil(n / 2 + half))
    return (s[lo], s[hi])


def rotation_for(working_set: int, l2_bytes: int, warm_cache: bool, cap: int = 64) -> int:
    """How many input sets to cycle through so that back-to-back calls do not hit a warm L2."""
    if warm_cache or working_set <= 0 or working_set >= 2 * l2_bytes:
        return 1
    return max(1, min(cap, math.ceil(2 * l2_bytes / working_set)))


def should_flush(working_set: int, l2_bytes: int, warm_cache: bool) -> bool:
    return not warm_cache and working_set <= 2 * l2_bytes


def calls_per_sample(backend: Backend, launches: Sequence[Launch], cfg: BenchConfig, flush: bool) -> int:
    """How many calls of one input set one sample of ``cfg.min_sample_s`` holds: the most input sets
    worth rotating through. A call that lasts a whole sample (1) is timed alone after each flush, so
    rotating through more sets would only make every sample longer."""
    return calibrate(backend, [launches], cfg, flush)


def calibrate(backend: Backend, sets: Sequence[Sequence[Launch]], cfg: BenchConfig, flush: bool, *,
              most: int | None = None) -> int:
    """Repeats per sample such that one sample lasts at least ``cfg.min_sample_s``, and at most ``most``
    (default ``cfg.max_repeats``); with ``most`` 1 the answer is known and nothing runs."""
    most = cfg.max_repeats if most is None else min(most, cfg.max_repeats)
    if most <= 1:
        return 1
    timer = backend.timer(sets, 1)
    try:
        for _ in range(cfg.warmup):
            timer.sample(flush)
        once = min(timer.sample(flush) for _ in range(2))
    finally:
        timer.close()
    if once <= 0:
        return most
    return max(1, min(most, math.ceil(cfg.min_sample_s / once)))


def measure(backend: Backend, sets: Sequence[Sequence[Launch]], cfg: BenchConfig, *,
            flush: bool) -> Measurement:
    """Time one call (one pass over ``sets``, divided by their number) until the median is precise."""
    repeats = calibrate(backend, sets, cfg, flush)
    timer = backend.timer(sets, repeats)
    samples: list[float] = []
    start = time.perf_counter()
    try:
        timer.sample(flush)  # the first replay of a new graph pays for its upload
        while True:
            samples.append(timer.sample(flush) / len(sets))
            n = len(samples)
            if n >= cfg.min_samples:
                m = Measurement(tuple(samples), repeats, flush, len(sets), timer.mode)
                if m.rel_ci <= cfg.ci_target or n >= cfg.max_samples:
                    return m
                if time.perf_counter() - start > cfg.max_time_s:
                    return m
    finally:
        timer.close()


EXACT_MAX = 60  # with ``exact``, samples of at most this many values in all get the exact null distribution


def mann_whitney_greater(a: Sequence[float], b: Sequence[float], *, exact: bool = False) -> float:
    """One-sided p-value that samples ``a`` tend to be larger than ``b``: the normal approximation, with
    ties at half a pair and a continuity correction.

    With ``exact``, where ``len(a) + len(b) <= EXACT_MAX``, the exact probability under the null instead:
    the approximation's tail is too heavy for few samples (6 against 6 wholly apart: 0.0026, exactly
    1/924). There a tie counts against the claim (only ``a > b`` pairs count), which keeps the p-value
    valid, if conservative, when values tie.
    """
    if exact and a and b and len(a) + len(b) <= EXACT_MAX:
        s = sorted(b)
        return _u_tail(len(a), len(b))[sum(bisect.bisect_left(s, v) for v in a)]
    pooled = sorted([(v, 0) for v in a] + [(v, 1) for v in b])
    ranks = [0.0] * len(pooled)
    i = 0
    tie_term = 0.0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        r = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[k] = r
        t = j - i + 1
        tie_term += t**3 - t
        i = j + 1
    n1, n2 = len(a), len(b)
    r1 = sum(r for r, (_, g) in zip(ranks, pooled, strict=True) if g == 0)
    u = r1 - n1 * (n1 + 1) / 2
    n = n1 + n2
    var = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        return 1.0
    z = (u - n1 * n2 / 2 - 0.5) / math.sqrt(var)
    return 0.5 * math.erfc(z / math.sqrt(2))


@functools.lru_cache(maxsize=128)
def _u_tail(n1: int, n2: int) -> tuple[float, ...]:
    """P(U >= u) for u = 0 .. n1 * n2, where U counts the pairs in which a sample of ``n1`` values beats one
    of ``n2``, every order of the pooled values being alike: how many orders give each U are the
    coefficients of the Gaussian binomial, prod over i = 1..m of (1 - q^(n+i)) / (1 - q^i), m = min(n1, n2)."""
    m, n = min(n1, n2), max(n1, n2)
    top = m * n
    counts = [1] + [0] * top  # a power series in q, exact up to q^top (the polynomial's degree)
    for i in range(1, m + 1):
        for d in range(top, n + i - 1, -1):  # times (1 - q^(n+i))
            counts[d] -= counts[d - n - i]
        for d in range(i, top + 1):  # over (1 - q^i)
            counts[d] += counts[d - i]
    total = math.comb(n1 + n2, n1)
    tail = [0.0] * (top + 1)
    above = 0
    for u in range(top, -1, -1):
        above += counts[u]
        tail[u] = above / total
    return tuple(tail)
