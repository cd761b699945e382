"""Timing methodology, on a fake backend whose timers report scripted times."""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from typing import Any

import numpy as np
import pytest

from pytest_ktune.measure import bench as _bench
from pytest_ktune.measure.bench import (
    EXACT_MAX,
    BenchConfig,
    Measurement,
    calibrate,
    mann_whitney_greater,
    measure,
    median_ci,
    rotation_for,
    should_flush,
)

from ._fakes import FakeBackend, FakeClock, FakeFunction, FakeTimer, launch_sets, per_launch

CFG = BenchConfig(min_sample_s=1e-3, min_samples=5, max_samples=50, max_time_s=100.0, ci_target=0.01,
                  max_repeats=500, warmup=2)


def _cfg(**changes: Any) -> BenchConfig:
    return dataclasses.replace(CFG, **changes)


# -- median_ci -----------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 5, 10, 11, 50, 201])
def test_median_ci_contains_the_median(n: int) -> None:
    samples = np.random.default_rng(n).lognormal(0.0, 0.5, n).tolist()
    lo, hi = median_ci(samples)
    assert lo <= statistics.median(samples) <= hi
    assert lo in samples and hi in samples


def test_median_ci_of_one_sample() -> None:
    assert median_ci([3.5]) == (3.5, 3.5)


def test_median_ci_narrows_with_more_samples() -> None:
    normal = statistics.NormalDist(mu=10.0, sigma=1.0)
    widths = []
    for n in (10, 40, 160, 640):
        samples = [normal.inv_cdf((i + 0.5) / n) for i in range(n)]
        lo, hi = median_ci(samples)
        widths.append(hi - lo)
    assert widths == sorted(widths, reverse=True) and len(set(widths)) == 4
    assert widths[-1] < widths[0] / 4


def test_measurement_statistics() -> None:
    m = Measurement(samples=(4.0, 1.0, 3.0, 2.0, 5.0), repeats=3, flushed=False, rotation=1)
    assert m.median == 3.0
    assert m.iqr == 2.0
    assert Measurement((1.0, 3.0, 2.0), 1, False, 1).iqr == 2.0  # few samples: the range
    lo, hi = m.ci
    assert m.rel_ci == pytest.approx((hi - lo) / 2 / 3.0)
    assert Measurement((0.0, 0.0, 0.0), 1, False, 1).rel_ci == math.inf


# -- cache flushing and rotation ---------------------------------------------------
L2 = 48 << 20


@pytest.mark.parametrize(("working_set", "warm", "expected"), [
    (L2 // 4, False, 8),       # twice the L2 over a quarter of it
    (L2 // 3, False, 6),
    (2 * L2 - 1, False, 2),
    (2 * L2, False, 1),        # big enough to evict the cache on its own
    (10 * L2, False, 1),
    (4096, False, 64),         # tiny: capped
    (0, False, 1),
    (L2 // 4, True, 1),        # warm_cache: no rotation
])
def test_rotation_for(working_set: int, warm: bool, expected: int) -> None:
    assert rotation_for(working_set, L2, warm) == expected


def test_rotation_cap_can_be_changed() -> None:
    assert rotation_for(4096, L2, False, cap=16) == 16


@pytest.mark.parametrize(("working_set", "warm", "expected"), [
    (L2 // 4, False, True), (2 * L2, False, True), (2 * L2 + 1, False, False), (L2 // 4, True, False),
])
def test_should_flush(working_set: int, warm: bool, expected: bool) -> None:
    assert should_flush(working_set, L2, warm) is expected


# -- measure -------------------------------------------------------------------------
def _main_timer(backend: FakeBackend) -> FakeTimer:
    return backend.timers[-1]


def test_steady_times_stop_at_the_minimum_sample_count() -> None:
    backend = FakeBackend(per_launch(1e-5))
    sets = launch_sets(FakeFunction(), 4)
    m = measure(backend, sets, CFG, flush=True)
    assert m.repeats == 25  # 1 ms per sample over 40 µs per pass
    assert len(m.samples) == CFG.min_samples
    assert m.samples == pytest.approx([1e-5] * CFG.min_samples), "a sample is per launch set"
    assert (m.rotation, m.flushed) == (4, True)
    main = _main_timer(backend)
    assert main.repeats == 25
    assert main.taken == CFG.min_samples + 1, "one unrecorded sample first"
    assert all(t.closed for t in backend.timers)
    assert all(all(t.flushes) for t in backend.timers)


def test_flush_false_reaches_every_sample() -> None:
    backend = FakeBackend(per_launch(1e-5))
    m = measure(backend, launch_sets(FakeFunction(), 1), CFG, flush=False)
    assert not m.flushed
    assert not any(any(t.flushes) for t in backend.timers)


@pytest.mark.parametrize(("seconds", "repeats"), [(1e-9, 500), (0.0, 500), (1.0, 1), (3e-4, 4)])
def test_repeats_make_a_sample_last_min_sample_s(seconds: float, repeats: int) -> None:
    m = measure(FakeBackend(per_launch(seconds)), launch_sets(FakeFunction(), 1), CFG, flush=True)
    assert m.repeats == repeats


def _noisy_then_steady(settle_after: int | None) -> Any:
    def script(timer: FakeTimer, i: int) -> float:
        if timer.repeats == 1 or (settle_after is not None and i > settle_after):
            return 1e-4
        return 1e-4 if i % 2 else 1.6e-4
    return script


def test_measuring_stops_once_the_median_is_precise() -> None:
    backend = FakeBackend(_noisy_then_steady(settle_after=12))
    m = measure(backend, launch_sets(FakeFunction(), 1), _cfg(max_samples=200), flush=True)
    n = len(m.samples)
    assert CFG.min_samples < n < 200
    assert m.rel_ci <= CFG.ci_target
    before = Measurement(m.samples[:-1], m.repeats, m.flushed, m.rotation)
    assert before.rel_ci > CFG.ci_target, "it took more samples than it needed"


def test_measuring_stops_at_max_samples_when_never_precise() -> None:
    m = measure(FakeBackend(_noisy_then_steady(None)), launch_sets(FakeFunction(), 1),
                _cfg(max_samples=30), flush=True)
    assert len(m.samples) == 30
    assert m.rel_ci > CFG.ci_target


def test_measuring_stops_at_max_time_when_never_precise(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(_bench, "time", clock)
    backend = FakeBackend(_noisy_then_steady(None), clock=clock, seconds_per_sample=0.1)
    m = measure(backend, launch_sets(FakeFunction(), 1), _cfg(max_samples=10_000, max_time_s=1.0),
                flush=True)
    assert CFG.min_samples <= len(m.samples) <= 12


def test_calibration_with_a_known_answer_runs_nothing() -> None:
    backend = FakeBackend(per_launch(1e-5))
    assert calibrate(backend, launch_sets(FakeFunction(), 1), CFG, True, most=1) == 1
    assert not backend.timers
    assert calibrate(backend, launch_sets(FakeFunction(), 1), CFG, True, most=7) == 7, "capped at most"
    assert calibrate(backend, launch_sets(FakeFunction(), 1), CFG, True) == 100


def test_cpu_backends_get_a_cheaper_configuration() -> None:
    cpu = BenchConfig.for_backend(FakeBackend(per_launch(1e-5)))
    assert cpu.max_time_s < BenchConfig().max_time_s
    assert cpu.max_samples < BenchConfig().max_samples


# -- the rank test's exact tail ------------------------------------------------------------------
@pytest.mark.parametrize(("n1", "n2"), [(1, 1), (2, 3), (3, 4), (4, 4), (5, 2)])
def test_the_exact_tail_counts_every_order(n1: int, n2: int) -> None:
    pooled = range(n1 + n2)
    for chosen in itertools.combinations(pooled, n1):
        rest = [v for v in pooled if v not in chosen]
        u = sum(x > y for x in chosen for y in rest)
        orders = sum(sum(x > y for x in c for y in [v for v in pooled if v not in c]) >= u
                     for c in itertools.combinations(pooled, n1))
        p = mann_whitney_greater([float(x) for x in chosen], [float(y) for y in rest], exact=True)
        assert p == pytest.approx(orders / math.comb(n1 + n2, n1))


def test_exact_p_reaches_what_the_normal_approximation_cannot() -> None:
    apart = ([float(6 + i) for i in range(6)], [float(i) for i in range(6)])
    assert mann_whitney_greater(*apart, exact=True) == pytest.approx(1 / 924)
    assert mann_whitney_greater(*apart) > 0.01 / 6, "the approximation could not stop at 6 against 6"


def test_exact_p_counts_ties_against_the_claim() -> None:
    a, b = [1.0, 2.0, 3.0, 3.0], [0.5, 3.0, 3.0, 3.0]
    assert mann_whitney_greater(a, b, exact=True) >= mann_whitney_greater(a, [v - 1e-9 for v in b], exact=True)
    assert mann_whitney_greater([2.0] * 6, [2.0] * 6, exact=True) == 1.0


def test_large_samples_use_the_normal_approximation() -> None:
    n = EXACT_MAX // 2 + 1
    a, b = [float(n + i) for i in range(n)], [float(i) for i in range(n)]
    assert mann_whitney_greater(a, b, exact=True) == mann_whitney_greater(a, b)
