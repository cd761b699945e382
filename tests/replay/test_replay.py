"""The replay backend: answers from the landscape, and the live tuner's path on top of it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pytest_ktune.core.space import config_key
from pytest_ktune.lab.landscape import LandscapeError
from pytest_ktune.lab.replay import ReplayPool, check_landscape, replay_tune
from pytest_ktune.measure.worker import TargetRef, WorkerSpec

from ._data import LANDSCAPES, RMSNORM, ROOT, SILU, SILU_ROOT, landscape, target


def _pool(noise: bool = False, seed: int = 0) -> ReplayPool:
    t = target("silu_and_mul")
    spec = WorkerSpec(target=TargetRef.of(t), backend="cuda", cases=(1,))
    return ReplayPool(spec, trial_timeout_s=1.0, landscape=landscape(SILU), noise=noise, seed=seed)


def test_the_pool_answers_with_the_recorded_medians_and_keeps_the_trace() -> None:
    pool = _pool()
    opt = landscape(SILU).optimum
    outs = list(pool.evaluate([opt.params, {"BLOCK": 256, "VEC": 1, "ITEMS": 1}], seed=0))
    assert [o.status for o in outs] == ["ok", "ok"]
    assert outs[0].value_s * 1e6 == pytest.approx(opt.value_us)
    assert outs[1].value_s * 1e6 == pytest.approx(15.5827)
    assert [config_key(c) for c, _ in pool.trace] == [config_key(opt.params), config_key(outs[1].params)]
    assert pool.device.id == "NVIDIA H200 [cuda]"


def test_noise_is_seeded_and_drawn_from_the_recorded_spread() -> None:
    opt = landscape(SILU).optimum
    lo, hi = opt.cases[0].ci_us
    a = [next(_pool(True, 7).evaluate([opt.params], 0)).value_s * 1e6 for _ in range(2)]
    b = next(_pool(True, 8).evaluate([opt.params], 0)).value_s * 1e6
    assert a[0] == a[1] != b
    assert all(abs(v - opt.value_us) < 4 * (hi - lo) for v in [*a, b])


def test_a_configuration_outside_the_landscape_is_a_clear_error() -> None:
    with pytest.raises(LandscapeError, match="not in the landscape"):
        list(_pool().evaluate([{"BLOCK": 32, "VEC": 1, "ITEMS": 1}], 0))


@pytest.mark.parametrize("sampler", ["bo", "tpe"])
def test_a_replayed_tune_goes_through_tune_key_never_retimes_and_keeps_the_budget(sampler: str) -> None:
    t = target("silu_and_mul")
    r = replay_tune(SILU_ROOT, t, landscape(SILU), sampler=sampler, trials=25, seed=3)
    keys = [config_key(c) for c, _ in r.trace]
    assert len(keys) == len(set(keys)) == 25
    # A key not tuned yet: the 16-byte-vector prior comes first, then the default.
    assert r.trace[0][0] == {"BLOCK": 256, "VEC": 8, "ITEMS": 1}
    assert r.trace[1][0] == dict(t.default)
    assert all(t.space.valid(c, landscape(SILU).key) for c, _ in r.trace)
    assert min(v for _, v in r.trace) <= landscape(SILU).optimum.value_us * 1.03
    assert "A/B" in r.decision


def test_replays_are_reproducible_for_a_seed() -> None:
    t = target("rmsnorm")
    one = replay_tune(ROOT, t, landscape(RMSNORM), sampler="tpe", trials=8, seed=5)
    two = replay_tune(ROOT, t, landscape(RMSNORM), sampler="tpe", trials=8, seed=5)
    assert one.trace == two.trace


def test_without_priors_the_sampler_follows_the_default_alone() -> None:
    t = target("silu_and_mul")
    r = replay_tune(SILU_ROOT, t, landscape(SILU), sampler="random", trials=5, seed=1, priors=False)
    assert r.trace[0][0] == dict(t.default)
    assert {"BLOCK": 256, "VEC": 8, "ITEMS": 1} not in [c for c, _ in r.trace[1:2]]


def test_a_landscape_missing_a_feasible_point_is_refused() -> None:
    land = landscape(SILU)
    short = replace(land, points=land.points[1:])
    with pytest.raises(LandscapeError, match="lacks 1 feasible point"):
        check_landscape(target("silu_and_mul"), short)


def test_every_committed_landscape_matches_its_target_in_the_example_or_as_it_was_recorded() -> None:
    paths = sorted(LANDSCAPES.glob("*.json")) + sorted(LANDSCAPES.glob("*.json.gz"))
    assert {SILU, RMSNORM} <= set(paths)
    for path in paths:
        land = landscape(path)
        check_landscape(target(land.name), land)


def test_a_record_of_a_key_alike_comes_before_the_other_priors_and_one_far_away_after_them() -> None:
    # A key twice as large (one doubling away) says much about this one; a key 16 times smaller (four
    # doublings) says little: its best is timed only after every prior computed for this key's launch.
    from pytest_ktune.lab.replay import record_of

    land = landscape(SILU)
    alike = replace(land, key={"T": 512, "I": 14336, "dtype": "float16"})
    far = replace(land, key={"T": 16, "I": 14336, "dtype": "float16"})
    seen_alike = {"BLOCK": 64, "VEC": 8, "ITEMS": 2}
    seen_far = {"BLOCK": 128, "VEC": 8, "ITEMS": 2}
    r = replay_tune(SILU_ROOT, target("silu_and_mul"), land, sampler="tpe", trials=5, seed=0,
                    records=[record_of(far, seen_far), record_of(alike, seen_alike)])
    # one 16-byte vector per thread, the default, the alike key's best, one 8-byte vector per thread,
    # the far key's best
    assert [c for c, _ in r.trace[:5]] == [{"BLOCK": 256, "VEC": 8, "ITEMS": 1}, dict(target("silu_and_mul").default),
                                           seen_alike, {"BLOCK": 256, "VEC": 4, "ITEMS": 1}, seen_far]


def test_a_key_tuned_before_times_its_parameters_first() -> None:
    # What tuning found for this very key is the best guess there is: it goes before every prior.
    from pytest_ktune.lab.replay import record_of

    land = landscape(SILU)
    mine = {"BLOCK": 128, "VEC": 4, "ITEMS": 2}
    r = replay_tune(SILU_ROOT, target("silu_and_mul"), land, sampler="bo", trials=3, seed=0,
                    records=[record_of(land, mine)])
    assert [c for c, _ in r.trace] == [mine, dict(target("silu_and_mul").default), {"BLOCK": 256, "VEC": 8, "ITEMS": 1}]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_budget_as_large_as_the_space_times_every_point(seed: int) -> None:
    # TPE re-proposes what it has seen more and more often as the space runs out; the loop then
    # picks an untried point itself, so the budget is spent on new points and the optimum is found.
    t = target("rmsnorm")
    land = landscape(RMSNORM)
    size = sum(1 for _ in t.space.feasible(land.key))
    r = replay_tune(ROOT, t, land, sampler="tpe", trials=size, seed=seed)
    keys = {config_key(c) for c, _ in r.trace}
    assert len(keys) == len(r.trace) == size
    assert config_key(land.optimum.params) in keys


def test_a_record_of_other_element_types_is_timed_after_the_priors() -> None:
    # A float32 key's best says little about a float16 key's vector width: every prior, computed for
    # this key's dtype and launch, goes first.
    from pytest_ktune.lab.replay import record_of

    land = landscape(SILU)
    seen = {"BLOCK": 64, "VEC": 2, "ITEMS": 2}
    other = replace(land, key={"T": 256, "I": 14336, "dtype": "float32"})
    r = replay_tune(SILU_ROOT, target("silu_and_mul"), land, sampler="tpe", trials=5, seed=0,
                    records=[record_of(other, seen)])
    # Its vector width is carried over in bytes: 2 floats (8 bytes) are 4 halves.
    assert [c for c, _ in r.trace[:4]] == [{"BLOCK": 256, "VEC": 8, "ITEMS": 1}, dict(target("silu_and_mul").default),
                                           {"BLOCK": 256, "VEC": 4, "ITEMS": 1}, {**seen, "VEC": 4}]


def test_a_key_never_tuned_times_the_first_prior_and_its_8_byte_twin_before_the_default() -> None:
    # rmsnorm at T16384 in float32 is over two waves with one 16-byte vector a thread: two a thread
    # (BLOCK=512, VEC=4) go first, then the same launch with four 8-byte loads (VEC=2, the recorded
    # optimum), then the default.
    from ._data import LANDSCAPES

    land = landscape(LANDSCAPES / "rmsnorm-T16384-H4096-float32-NVIDIA_H200.json.gz")
    t = target("rmsnorm")
    r = replay_tune(ROOT, t, land, sampler="bo", trials=3, seed=0)
    assert [c for c, _ in r.trace] == [{"BLOCK": 512, "VEC": 4}, {"BLOCK": 512, "VEC": 2}, dict(t.default)]
    assert land.optimum.params == {"BLOCK": 512, "VEC": 2}
