"""The default sampler's search where nothing is known (``tuner.portfolio``): repeatable under a
seed, inside the constraints, never a configuration twice, its whole budget spent, and only where the
study holds no prior, record or parameters in use."""

from __future__ import annotations

import gzip
import itertools
import json
import math
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_ktune.core.space import Value, config_key
from pytest_ktune.lab.benchsearch import problems_for
from pytest_ktune.lab.replay import replay_tune
from pytest_ktune.tuner.bo import Positions, propose
from pytest_ktune.tuner.portfolio import ARMS, Portfolio, knows_nothing, start_size

PARAMS: dict[str, list[Value]] = {"BX": [8, 16, 32, 64, 128], "BY": [1, 2, 4, 8], "TILE": [1, 2, 3, 4],
                                  "SHMEM": ["no", "yes"]}


def allowed(c: Mapping[str, Value]) -> bool:
    """A constraint that cuts the space unevenly, as block-size limits do."""
    return int(c["BX"]) * int(c["BY"]) * int(c["TILE"]) <= 512 and not (c["SHMEM"] == "yes" and c["TILE"] == 1)


ALL = [dict(zip(PARAMS, v, strict=True)) for v in itertools.product(*PARAMS.values())]
FEASIBLE = [c for c in ALL if allowed(c)]


def bumpy(c: Mapping[str, Value]) -> float:
    """Two basins: a broad one at small blocks, and the optimum, narrow, at BX=64, BY=2, TILE=3 with shared memory."""
    bx, by, tile = math.log2(int(c["BX"])), math.log2(int(c["BY"])), int(c["TILE"])
    broad = 2.0 + 0.1 * (bx - 3) ** 2 + 0.1 * by
    narrow = 1.0 + 0.6 * abs(bx - 6) + 0.6 * abs(by - 1) + 0.6 * abs(tile - 3) + (0.0 if c["SHMEM"] == "yes" else 0.5)
    return min(broad, narrow)


def run(seed: int, budget: int) -> list[dict[str, Value]]:
    """The portfolio's proposals, one at a time, each timed before the next, from nothing."""
    at = Positions(FEASIBLE, PARAMS)
    pf = Portfolio(at, random.Random(seed))
    timed: list[tuple[Mapping[str, Value], float]] = []
    memo: dict[str, Any] = {}
    order = []
    for _ in range(budget):
        def model() -> Mapping[str, Value] | None:
            return propose(FEASIBLE, timed, failed=[], busy=[], params=PARAMS, rng=pf.rng, positions=at, memo=memo)

        def score(rows: Any) -> Any:
            import numpy as np

            # a stand-in model: the truth, to keep the test fast
            return np.asarray([-bumpy(at.feasible[r]) for r in rows])

        pick = pf.propose(timed, failed=[], busy=[], model=model, score=score)
        if pick is None:
            break
        order.append(dict(pick))
        timed.append((pick, bumpy(pick)))
    return order


def test_the_same_seed_proposes_the_same_configurations_in_the_same_order() -> None:
    assert run(3, 30) == run(3, 30)
    assert run(3, 30) != run(4, 30)


def test_every_proposal_is_feasible_and_new_until_the_space_is_used_up() -> None:
    order = run(0, len(FEASIBLE) + 5)
    assert all(allowed(c) for c in order)
    assert len({config_key(c) for c in order}) == len(order) == len(FEASIBLE)  # each once, then None


def test_the_start_is_half_of_one_more_configuration_than_there_are_parameters_at_least_two() -> None:
    assert [start_size(d) for d in (1, 2, 3, 4, 7, 8, 10)] == [2, 2, 2, 2, 4, 4, 5]
    at = Positions(FEASIBLE, PARAMS)
    pf = Portfolio(at, random.Random(0))
    assert pf.start == start_size(len(PARAMS)) == 2
    first, second = run(0, pf.start)
    rows = np.asarray([at.row_of[config_key(second)]])
    untried = at.untried({config_key(first)})
    # the second is the untried configuration farthest from the first, not one next to it
    gap = pf._distance(untried, pf.unit[at.row_of[config_key(first)]])
    assert pf._distance(rows, pf.unit[at.row_of[config_key(first)]])[0] == gap.max()


def test_the_start_takes_the_untried_point_farthest_from_those_tried() -> None:
    at = Positions(FEASIBLE, PARAMS)
    pf = Portfolio(at, random.Random(0))
    first = at.row_of[config_key({"BX": 8, "BY": 1, "TILE": 1, "SHMEM": "no"})]
    untried = at.untried({at.keys[first]})
    far = at.feasible[pf.spread(untried, np.asarray([first]))]
    # every parameter as far as the constraints let it go from the smallest corner
    assert far["SHMEM"] == "yes" and int(far["BX"]) * int(far["BY"]) * int(far["TILE"]) == 512
    gap = dict(zip(untried.tolist(), pf._distance(untried, pf.unit[first]).tolist(), strict=True))
    assert gap[at.row_of[config_key(far)]] == max(gap.values())  # none farther, among all untried


def test_each_arm_is_used_and_credited() -> None:
    at = Positions(FEASIBLE, PARAMS)
    pf = Portfolio(at, random.Random(1))
    timed: list[tuple[Mapping[str, Value], float]] = []
    import numpy as np

    for _ in range(40):
        pick = pf.propose(timed, failed=[], busy=[],
                          model=lambda: propose(FEASIBLE, timed, failed=[], busy=[], params=PARAMS, rng=pf.rng,
                                                positions=at),
                          score=lambda rows: np.asarray([-bumpy(at.feasible[r]) for r in rows]))
        assert pick is not None
        timed.append((pick, bumpy(pick)))
    pf.credit([(config_key(c), v) for c, v in timed])
    used = {arm: pf.wins[arm] - 1 + pf.losses[arm] for arm in ARMS}
    assert all(n > 0 for n in used.values()), used
    assert sum(used.values()) == 40 - pf.start


def test_only_a_study_with_nothing_known_runs_it() -> None:
    assert knows_nothing([]) and knows_nothing(["default", "explore"])
    assert not knows_nothing(["default", "current"])
    assert not knows_nothing(["recorded for H200 T=64"])


def _cache(tmp_path: Path) -> Path:
    """A Kernel Tuner cache of FEASIBLE, timed by ``bumpy`` (ms), as Kernel Tuner writes it."""
    names = list(PARAMS)
    cache = {",".join(str(c[n]) for n in names): {**c, "time": bumpy(c), "times": [bumpy(c)] * 3,
                                                  "compile_time": 1.0} for c in FEASIBLE}
    data = {"device_name": "", "kernel_name": "toy", "problem_size": [64], "tune_params_keys": names,
            "tune_params": PARAMS, "objective": "time", "cache": cache}
    path = tmp_path / "ToyGPU.json.gz"
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    return path


def test_it_runs_only_in_a_space_larger_than_the_model_scores_whole(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_ktune.tuner import bo

    made: list[int] = []
    real = Portfolio

    def counted(*args: Any) -> Portfolio:
        made.append(len(args[0].feasible))
        return real(*args)

    monkeypatch.setattr(bo, "Portfolio", counted)
    (problem,) = problems_for(tmp_path, [_cache(tmp_path)])
    replay_tune(tmp_path, problem.target, problem.land, sampler="bo", trials=8, seed=0)
    assert not made  # the toy space is smaller than SCORED: bo's own steps
    monkeypatch.setattr(bo, "SCORED", len(FEASIBLE) - 1)
    replay_tune(tmp_path, problem.target, problem.land, sampler="bo", trials=8, seed=0)
    assert made == [len(FEASIBLE)]


@pytest.mark.parametrize("budget", [12, 40])
def test_through_the_tuner_it_spends_its_whole_budget_on_distinct_feasible_configurations(
        tmp_path: Path, budget: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_ktune.tuner import bo

    monkeypatch.setattr(bo, "SCORED", 0)  # the toy space counts as a large one
    (problem,) = problems_for(tmp_path, [_cache(tmp_path)])
    first = replay_tune(tmp_path, problem.target, problem.land, sampler="bo", trials=budget, seed=5)
    again = replay_tune(tmp_path, problem.target, problem.land, sampler="bo", trials=budget, seed=5)
    trace = [c for c, _ in first.trace]
    assert len(trace) == budget and len({config_key(c) for c in trace}) == budget
    assert all(allowed(c) for c in trace)
    assert trace == [c for c, _ in again.trace]  # a seed repeats itself through the whole tuner


def test_its_model_arm_keeps_to_the_nearest_ring_where_bo_alone_takes_two(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_ktune.tuner import bo

    rings: list[int] = []
    real = bo.propose

    def counted(*args: Any, **kwargs: Any) -> Any:
        rings.append(kwargs["rings"])
        return real(*args, **kwargs)

    monkeypatch.setattr(bo, "propose", counted)
    (problem,) = problems_for(tmp_path, [_cache(tmp_path)])
    replay_tune(tmp_path, problem.target, problem.land, sampler="bo", trials=16, seed=0)
    assert rings and set(rings) == {bo.RINGS} == {2}  # a small space: bo's own search, two rings
    rings.clear()
    monkeypatch.setattr(bo, "SCORED", 0)  # the toy space counts as a large one: the portfolio's
    replay_tune(tmp_path, problem.target, problem.land, sampler="bo", trials=40, seed=0)
    assert rings and set(rings) == {bo.PORTFOLIO_RINGS} == {1}


@pytest.mark.parametrize("params", [1, 3, 7, 8, 9, 10, 16, 17, 31, 129, 200])
def test_row_sums_add_columns_as_numpy_sums_a_row_bit_for_bit(params: int) -> None:
    # the evolve arm's distances, summed a parameter at a time, must pick the nearest rows (ties and all)
    # that a sum along each row picked
    from pytest_ktune.tuner.portfolio import row_sums

    rng = np.random.default_rng(params)
    x = rng.random((500, params)) * rng.choice([1e-3, 1.0, 1e3], (500, params))
    assert np.array_equal(row_sums([x[:, j].copy() for j in range(params)], 500), x.sum(1))


def test_the_distances_to_a_point_are_those_of_each_rows_differences_summed() -> None:
    at = Positions(FEASIBLE, PARAMS)
    pf = Portfolio(at, random.Random(0))
    rows = np.arange(0, len(FEASIBLE), 2)
    to = pf.unit[3] + 0.1
    d = np.abs(pf.unit[rows] - to)
    cat = ~at.numeric
    d[:, cat] = d[:, cat] > 0
    assert np.array_equal(pf._distance(rows, to), d.sum(1))
