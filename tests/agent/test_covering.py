"""The configurations a proposal is checked on cover every value and every pair of values that a feasible
configuration holds, per key, over the whole feasible space, solved (not its first points, not a sample), the
same for a seed; what no feasible configuration holds is dead, and a space whose cover would be too large is
left unfinished."""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from pytest_ktune.agent._covering import covering_design, value_cover
from pytest_ktune.core.errors import SpaceError
from pytest_ktune.core.space import Space


def _pairs(space: Space, configs: Sequence[Mapping[str, Any]]) -> set[tuple[str, Any, str, Any]]:
    return {(a, c[a], b, c[b]) for c in configs for a, b in itertools.combinations(space.names, 2)}


def test_every_feasible_pair_is_covered_for_every_key_and_only_valid_configurations_run_on_it() -> None:
    space = Space(BLOCK=[32, 64, 128, 256], VEC=[1, 2, 4, 8], ITEMS=[1, 2, 4, 8], constraints=["I % VEC == 0"])
    keys = [{"I": 1024}, {"I": 1023}]
    d = covering_design(space, keys, {"BLOCK": 128, "VEC": 1, "ITEMS": 1}, seed=0)
    assert d.complete and d.configs[0] == {"BLOCK": 128, "VEC": 1, "ITEMS": 1}
    for k, key in enumerate(keys):
        mine = [c for c, m in zip(d.configs, d.valid, strict=True) if k in m]
        assert all(space.valid(c, key) for c in mine)
        assert _pairs(space, mine) == _pairs(space, list(space.feasible(key)))
    assert d.needed == d.covered == (48, 24)  # I=1023 allows VEC=1 only
    assert d.dead == (0, 24) and d.dead_values == () and d.feasible == (64, 16)
    assert covering_design(space, keys, d.configs[0], seed=0) == d  # the same for a seed
    assert covering_design(space, keys, d.configs[0], seed=1).configs != d.configs


def test_a_value_the_first_points_never_reach_is_checked_in_a_large_space() -> None:
    # 62,500 points; in enumeration order VEC=8 comes after the first 46,875.
    params: dict[str, Any] = {"VEC": [1, 2, 4, 8], **{f"P{i}": list(range(5)) for i in range(6)}}
    space = Space(**params)
    default = {"VEC": 1, **{f"P{i}": 0 for i in range(6)}}
    started = time.monotonic()
    d = covering_design(space, [{}], default, seed=0)
    assert time.monotonic() - started < 10
    assert {c["VEC"] for c in d.configs} == {1, 2, 4, 8}
    assert _pairs(space, d.configs) == {(a, x, b, y) for a, b in itertools.combinations(space.names, 2)
                                        for x in space.params[a] for y in space.params[b]}
    assert d.complete and d.dead == (0,) and len(d.configs) < 60


def test_the_one_feasible_point_behind_a_constraint_is_covered() -> None:
    # 2 x 2**15 points; BLOCK=128 only with all fifteen switches on: one point of 65,536, which drawing
    # configurations at random never meets. Solved, its pairs are feasible and covered.
    switches = {f"S{i}": [0, 1] for i in range(15)}
    space = Space(BLOCK=[64, 128], **switches,
                  constraints=["BLOCK == 64 or (" + " and ".join(f"S{i} == 1" for i in range(15)) + ")"])
    d = covering_design(space, [{}], {"BLOCK": 64, **{n: 0 for n in switches}}, seed=0)
    needle = {"BLOCK": 128, **{n: 1 for n in switches}}
    assert needle in d.configs and d.complete
    assert d.dead == (15,)  # BLOCK=128 with a switch off
    assert d.feasible == (2 ** 15 + 1,)


def test_pairs_no_configuration_allows_are_dead_not_covered() -> None:
    space = Space(A=list(range(10)), B=list(range(10)), C=list(range(20)), constraints=["A + B < 15"])
    d = covering_design(space, [{}], {"A": 0, "B": 0, "C": 0}, seed=2)
    assert d.dead == (10,)  # the pairs with A + B >= 15
    assert all(int(c["A"]) + int(c["B"]) < 15 for c in d.configs)
    assert d.complete and d.covered == d.needed


def test_values_no_configuration_allows_are_named_dead() -> None:
    space = Space(BLOCK=[64, 128, 2048], VEC=[1, 2], constraints=["BLOCK * VEC <= 1024"])
    d = covering_design(space, [{}], {"BLOCK": 64, "VEC": 1}, seed=0)
    assert d.dead_values == ("BLOCK=2048",)
    assert all(c["BLOCK"] != 2048 for c in d.configs)


def test_a_cover_larger_than_the_limit_is_left_unfinished() -> None:
    space = Space(A=list(range(40)), B=list(range(40)))  # 1,600 pairs, one configuration each
    d = covering_design(space, [{}], {"A": 0, "B": 0}, seed=0, limit=100)
    assert not d.complete and len(d.configs) == 100 and d.covered[0] < d.needed[0] == 1600


def test_a_constraint_that_cannot_be_evaluated_is_a_space_error() -> None:
    space = Space(BLOCK=[64, 128], constraints=["BLOCK + 'x' > 0"])
    with pytest.raises(SpaceError, match="cannot be evaluated"):
        covering_design(space, [{}], {"BLOCK": 64}, seed=0)


def test_the_value_cover_holds_every_value_with_the_first_configuration_first() -> None:
    configs = [{"A": a, "B": b} for a in range(3) for b in range(5)]
    chosen = value_cover(configs)
    assert chosen[0] == 0 and len(chosen) == 5
    assert {configs[i]["A"] for i in chosen} == {0, 1, 2} and {configs[i]["B"] for i in chosen} == set(range(5))
