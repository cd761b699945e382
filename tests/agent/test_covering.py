"""The configurations a proposal is checked on cover every value and every pair of values, per key, drawn
from the whole feasible space (not its first points), the same for a seed, and without listing a large
space."""

from __future__ import annotations

import itertools
import time
import tracemalloc
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
    assert d.exact and d.configs[0] == {"BLOCK": 128, "VEC": 1, "ITEMS": 1}
    for k, key in enumerate(keys):
        mine = [c for c, m in zip(d.configs, d.valid, strict=True) if k in m]
        assert all(space.valid(c, key) for c in mine)
        assert _pairs(space, mine) == _pairs(space, list(space.feasible(key)))
    assert d.needed == d.covered == (48, 24)  # I=1023 allows VEC=1 only
    assert covering_design(space, keys, d.configs[0], seed=0) == d  # the same for a seed
    assert covering_design(space, keys, d.configs[0], seed=1).configs != d.configs


def test_a_value_the_first_points_never_reach_is_checked_in_a_space_too_large_to_list() -> None:
    # 62,500 points; in enumeration order VEC=8 comes after the first 46,875, and the space is not listed.
    params: dict[str, Any] = {"VEC": [1, 2, 4, 8], **{f"P{i}": list(range(5)) for i in range(6)}}
    space = Space(**params)
    default = {"VEC": 1, **{f"P{i}": 0 for i in range(6)}}
    tracemalloc.start()
    started = time.monotonic()
    d = covering_design(space, [{}], default, seed=0, enum_limit=20_000)
    took = time.monotonic() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert not d.exact and took < 5 and peak < 20 << 20
    assert {c["VEC"] for c in d.configs} == {1, 2, 4, 8}
    assert _pairs(space, d.configs) == {(a, x, b, y) for a, b in itertools.combinations(space.names, 2)
                                        for x in space.params[a] for y in space.params[b]}
    assert d.unconfirmed == (0,) and len(d.configs) < 60


def test_pairs_no_configuration_allows_are_counted_not_covered() -> None:
    space = Space(A=list(range(10)), B=list(range(10)), C=list(range(60)), constraints=["A + B < 15"])
    d = covering_design(space, [{}], {"A": 0, "B": 0, "C": 0}, seed=2, enum_limit=1000)  # 6,000 points: drawn
    assert d.unconfirmed == (10,)  # the pairs with A + B >= 15
    assert all(int(c["A"]) + int(c["B"]) < 15 for c in d.configs)


def test_a_constraint_that_cannot_be_evaluated_is_a_space_error() -> None:
    space = Space(BLOCK=[64, 128], constraints=["BLOCK + 'x' > 0"])
    with pytest.raises(SpaceError, match="cannot be evaluated"):
        covering_design(space, [{}], {"BLOCK": 64}, seed=0)


def test_the_value_cover_holds_every_value_with_the_first_configuration_first() -> None:
    configs = [{"A": a, "B": b} for a in range(3) for b in range(5)]
    chosen = value_cover(configs)
    assert chosen[0] == 0 and len(chosen) == 5
    assert {configs[i]["A"] for i in chosen} == {0, 1, 2} and {configs[i]["B"] for i in chosen} == set(range(5))
