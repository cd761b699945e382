"""The sequential same-run A/B (measure.ab), on a fake backend whose timers report scripted times."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from pytest_ktune.gate.decision import ALPHA, Threshold, confirm, stop_rule
from pytest_ktune.gate.verdict import ab_stop_note
from pytest_ktune.measure import ab as _ab
from pytest_ktune.measure.ab import (
    FASTER,
    MAX_SAMPLES,
    PRECISE,
    SLOWER,
    TIME_BUDGET,
    ABResult,
    Stop,
    measure_ab,
    min_p,
    planned_looks,
)
from pytest_ktune.measure.bench import BenchConfig
from pytest_ktune.tuner.decide import AB_STOP

from ._fakes import FakeBackend, FakeClock, FakeFunction, FakeTimer, TimeScript, launch_sets

FIVE = Threshold.parse("median:5%")
# Never precise (ci_target 0), so only a look, max_samples or the budget ends a sample.
CFG = BenchConfig(min_sample_s=1e-3, min_samples=7, max_samples=48, max_time_s=100.0, ci_target=0.0,
                  max_repeats=500, warmup=1)


def _cfg(**changes: Any) -> BenchConfig:
    return dataclasses.replace(CFG, **changes)


def _noisy(medians: dict[str, float], sigma: float, seed: int, clock: FakeClock | None = None) -> TimeScript:
    """Seconds per pass: the label's median per launch set, times lognormal noise; with ``clock``, time
    passes as long as the sample lasts (its repeats)."""
    rng = np.random.default_rng(seed)

    def script(timer: FakeTimer, _i: int) -> float:
        seconds = medians[timer.label] * len(timer.sets) * math.exp(rng.normal(0.0, sigma))
        if clock is not None:
            clock.now += seconds * timer.repeats
        return seconds
    return script


def _ab_run(script: TimeScript, cfg: BenchConfig = CFG, stop: Stop | None = None,
            clock: FakeClock | None = None) -> tuple[ABResult, FakeBackend]:
    backend = FakeBackend(script, clock=clock, seconds_per_sample=0.0 if clock else 0.01)
    r = measure_ab(backend, launch_sets(FakeFunction("A"), 1), launch_sets(FakeFunction("B"), 1), cfg,
                   flush=True, stop=stop)
    assert all(t.closed for t in backend.timers)
    return r, backend


# -- the planned looks -------------------------------------------------------------------------------
@pytest.mark.parametrize(("max_samples", "looks"), [
    (200, (6, 12, 24, 48, 96, 200)),  # a GPU's BenchConfig
    (30, (6, 12, 30)),  # a CPU's: 24 is within a quarter of 30
    (10, (5, 10)),
    (10_000, (7, 14, 28, 56, 112, 224, 448, 896, 1792, 3584, 7168, 10_000)),  # 12 looks: 6 cannot reach
])
def test_the_first_look_is_the_first_that_can_stop(max_samples: int, looks: tuple[int, ...]) -> None:
    assert planned_looks(max_samples, ALPHA) == looks
    assert min_p(looks[0]) <= ALPHA / len(looks) < min_p(looks[0] - 1)


def test_no_look_where_none_could_stop() -> None:
    assert planned_looks(3, ALPHA) == ()
    r, _ = _ab_run(_noisy({"A": 5e-5, "B": 1e-5}, 0.01, 0), _cfg(min_samples=3, max_samples=3), stop_rule(FIVE))
    assert (r.stopped, r.looks, r.pairs) == (MAX_SAMPLES, 0, 3)


# -- measure_ab ------------------------------------------------------------------------------------
def test_a_and_b_are_interleaved_abba_with_equal_repeats() -> None:
    def script(timer: FakeTimer, _i: int) -> float:
        return (2e-5 if timer.label == "A" else 1e-5) * len(timer.sets)

    backend = FakeBackend(script)
    r = measure_ab(backend, launch_sets(FakeFunction("A"), 2), launch_sets(FakeFunction("B"), 2),
                   dataclasses.replace(CFG, min_samples=4, ci_target=0.01), flush=True)
    ma, mb = r.a, r.b
    assert ma.repeats == mb.repeats == 25  # the smaller of A's 25 and B's 50
    assert ma.median == pytest.approx(2e-5) and mb.median == pytest.approx(1e-5)
    assert len(ma.samples) == len(mb.samples) == 4
    assert (r.stopped, r.looks, r.reason) == (PRECISE, 0, "4 pairs, both medians precise")
    timed = [label for label, repeats in backend.log if repeats == 25]
    assert timed == ["A", "B", "A", "B", "B", "A", "A", "B", "B", "A"]
    assert all(t.closed for t in backend.timers)


def test_a_gross_regression_fails_at_the_first_look(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(_ab, "time", clock)
    # B lasts a whole sample (1 ms) on its own: repeats are 1, and A, 50 times slower, needs no calibration.
    r, backend = _ab_run(_noisy({"A": 50e-3, "B": 1e-3}, 0.02, 1, clock), _cfg(max_samples=200),
                         stop_rule(FIVE), clock)
    assert (r.stopped, r.look, r.looks, r.pairs) == (SLOWER, 1, 6, 6)
    assert r.reason.startswith("stopped early after 6 pairs: A certainly slower (look 1 of 6, p=0.0011")
    assert confirm(r.a, r.b, FIVE).confirmed
    assert [t.label for t in backend.timers].count("A") == 1, "A ran no calibration of its own"
    assert backend.timers[-2].taken == 7, "one upload sample, then six"
    assert clock.now < 7.5 * 50e-3, "about seven of A's samples, not a whole sample's worth"


def test_a_slow_a_is_calibrated_only_where_b_leaves_room() -> None:
    r, backend = _ab_run(_noisy({"A": 50e-5, "B": 1e-5}, 0.02, 2), stop=stop_rule(FIVE))
    assert [t.label for t in backend.timers] == ["B", "A", "A", "B"], "B's calibration, A's, then the sample"
    assert r.a.repeats == 2 and r.stopped == SLOWER and r.pairs == 6


def test_without_a_rule_the_same_regression_takes_the_whole_sample() -> None:
    r, _ = _ab_run(_noisy({"A": 50e-5, "B": 1e-5}, 0.02, 1))
    assert (r.stopped, r.pairs, r.looks) == (MAX_SAMPLES, CFG.max_samples, 0)
    assert confirm(r.a, r.b, FIVE).confirmed


@pytest.mark.parametrize("seed", range(5))
def test_identical_kernels_stop_early_as_a_pass(seed: int) -> None:
    r, _ = _ab_run(_noisy({"A": 1e-5, "B": 1e-5}, 0.01, seed), stop=stop_rule(FIVE))
    assert r.stopped == FASTER and r.look <= 2, r.reason
    assert not confirm(r.a, r.b, FIVE).confirmed


def test_a_small_regression_beyond_the_threshold_is_still_confirmed() -> None:
    """x1.08 under a 5 % threshold: too close for the first look, certain at a later one."""
    r, _ = _ab_run(_noisy({"A": 1.08e-5, "B": 1e-5}, 0.01, 3), _cfg(max_samples=200), stop_rule(FIVE))
    assert r.stopped == SLOWER and r.look > 1, r.reason
    assert confirm(r.a, r.b, FIVE).confirmed
    end, _ = _ab_run(_noisy({"A": 1.08e-5, "B": 1e-5}, 0.01, 3), _cfg(max_samples=200))
    assert end.stopped == MAX_SAMPLES and confirm(end.a, end.b, FIVE).confirmed, "as without the rule"


def test_a_regression_within_the_threshold_is_never_stopped_as_one() -> None:
    for seed in range(20):
        r, _ = _ab_run(_noisy({"A": 1.03e-5, "B": 1e-5}, 0.01, seed), stop=stop_rule(FIVE))
        assert r.stopped in (FASTER, MAX_SAMPLES) and not confirm(r.a, r.b, FIVE).confirmed, r.reason


def test_the_time_budget_stops_a_sample_that_no_look_can_end(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(_ab, "time", clock)
    # A slower by the threshold itself, in heavy noise: neither claim becomes certain.
    r, _ = _ab_run(_noisy({"A": 10.5e-3, "B": 10e-3}, 0.5, 4, clock), _cfg(max_samples=10_000, max_time_s=0.5),
                   stop_rule(FIVE), clock)
    assert r.stopped == TIME_BUDGET and r.reason.endswith("pairs, stopped by the time budget")
    assert CFG.min_samples <= r.pairs <= 1.0 / (2 * 10e-3) + 8
    assert clock.now < 1.3


def test_the_budget_waits_for_min_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(_ab, "time", clock)
    r, _ = _ab_run(_noisy({"A": 1.0, "B": 1.0}, 0.5, 5, clock), _cfg(max_time_s=0.1), stop_rule(FIVE), clock)
    assert r.stopped == TIME_BUDGET and r.pairs == CFG.min_samples


def _false_alarms(runs: int, medians: dict[str, float]) -> tuple[int, int]:
    """Over seeded runs: how many a look stopped as SLOWER, and how many the gate confirmed."""
    slower = confirmed = 0
    for seed in range(runs):
        r, _ = _ab_run(_noisy(medians, 0.03, 1000 + seed), stop=stop_rule(FIVE))
        slower += r.stopped == SLOWER
        confirmed += confirm(r.a, r.b, FIVE).confirmed
    return slower, confirmed


RUNS = 500
BOUND = RUNS * ALPHA  # 5 of 500


def test_the_looks_share_alpha_at_the_edge_of_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    """A exactly 5 % slower than B in distribution: the worst case for the claim "A is slower than the
    threshold allows". Split over its four looks, the rule claims it wrongly at most ALPHA of the time;
    each look at the whole of ALPHA would claim it more often than that."""
    edge = {"A": 1.05e-5, "B": 1e-5}
    assert planned_looks(CFG.max_samples, ALPHA) == (6, 12, 24, 48)
    slower, _ = _false_alarms(RUNS, edge)
    assert slower <= BOUND

    check = Stop.check

    def unsplit(self: Stop, a: Sequence[float], b: Sequence[float], alpha: float) -> tuple[str, float] | None:
        return check(self, a, b, self.alpha)

    monkeypatch.setattr(Stop, "check", unsplit)
    naive, _ = _false_alarms(RUNS, edge)
    assert naive > BOUND, "this test could not tell a split alpha from none"


def test_noise_alone_is_never_a_regression() -> None:
    slower, confirmed = _false_alarms(RUNS, {"A": 1e-5, "B": 1e-5})
    assert slower == 0 and confirmed <= BOUND


# -- the callers' rules -------------------------------------------------------------------------------
def test_the_gate_says_how_its_ab_stopped() -> None:
    slow, _ = _ab_run(_noisy({"A": 50e-5, "B": 1e-5}, 0.02, 1), stop=stop_rule(FIVE))
    assert ab_stop_note(slow) == "stopped early after 6 pairs, certainly slower than the threshold allows"
    same, _ = _ab_run(_noisy({"A": 1e-5, "B": 1e-5}, 0.01, 1), stop=stop_rule(FIVE))
    assert ab_stop_note(same) == "stopped early after 6 pairs, certainly within the threshold"
    full, _ = _ab_run(_noisy({"A": 50e-5, "B": 1e-5}, 0.02, 1))
    assert ab_stop_note(full) == "48 pairs, the most a sample takes"


def test_the_tuner_stops_early_only_on_a_certain_loser() -> None:
    """The tuner's A is the parameters in use, B the candidate: a candidate 3 % slower is rejected early;
    one 3 % faster takes the whole sample, since a winner's timings become its baseline."""
    loser, _ = _ab_run(_noisy({"A": 1e-5, "B": 1.03e-5}, 0.005, 6), stop=AB_STOP)
    assert loser.stopped == FASTER and loser.pairs < CFG.max_samples, loser.reason
    winner, _ = _ab_run(_noisy({"A": 1.03e-5, "B": 1e-5}, 0.005, 6), stop=AB_STOP)
    assert winner.stopped == MAX_SAMPLES, winner.reason
