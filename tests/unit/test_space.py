"""Space: parameter values, constraints (parsed safely), and the feasible points for a key."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from pytest_ktune import Space, SpaceError
from pytest_ktune.core.space import Constraint


def test_values_keep_their_order_and_points_walk_the_product() -> None:
    s = Space(BLOCK=[256, 64, 128], VEC=[1, 2])
    assert s.names == ("BLOCK", "VEC")
    assert s.params["BLOCK"] == (256, 64, 128)
    assert s.size == 6
    assert list(s.points()) == [
        {"BLOCK": 256, "VEC": 1}, {"BLOCK": 256, "VEC": 2},
        {"BLOCK": 64, "VEC": 1}, {"BLOCK": 64, "VEC": 2},
        {"BLOCK": 128, "VEC": 1}, {"BLOCK": 128, "VEC": 2},
    ]


def test_values_may_be_strings_floats_and_booleans() -> None:
    s = Space(LAYOUT=["row", "col"], FAST_MATH=[True, False], ALPHA=[0.5])
    assert s.size == 4
    assert {"LAYOUT": "col", "FAST_MATH": False, "ALPHA": 0.5} in list(s.points())


@pytest.mark.parametrize("values", [[64, 128, 64], ["a", "b", "a"]])
def test_a_value_listed_twice_is_rejected(values: list[Any]) -> None:
    with pytest.raises(SpaceError, match="TILE lists a value twice"):
        Space(TILE=values)


def test_a_parameter_without_values_is_rejected() -> None:
    with pytest.raises(SpaceError, match="parameter BLOCK has no values"):
        Space(BLOCK=[], VEC=[1])


def test_a_space_without_parameters_is_rejected() -> None:
    with pytest.raises(SpaceError, match="at least one parameter"):
        Space()


def test_a_bare_value_instead_of_a_list_is_rejected() -> None:
    with pytest.raises(SpaceError, match="BLOCK must be given a list"):
        Space(BLOCK=64)  # type: ignore[arg-type]
    with pytest.raises(SpaceError, match="MODE must be given a list"):
        Space(MODE="fast")


def test_constraint_names_and_evaluation() -> None:
    c = Constraint.parse("H % VEC == 0 and min(BLOCK, 512) * VEC >= 128 and abs(-VEC) < 16")
    assert c.names == frozenset({"H", "VEC", "BLOCK"})
    assert c.holds({"H": 4096, "VEC": 4, "BLOCK": 64})
    assert not c.holds({"H": 4098, "VEC": 4, "BLOCK": 64})
    assert not c.holds({"H": 4096, "VEC": 1, "BLOCK": 64})


def test_a_division_by_zero_makes_the_point_invalid_not_an_error() -> None:
    c = Constraint.parse("H % VEC == 0")
    assert not c.holds({"H": 8, "VEC": 0})


@pytest.mark.parametrize("text", [
    "__import__('os').system('echo hacked')",
    "__import__('os')",
    "open('/etc/passwd') is None",
    "BLOCK.bit_length() > 3",
    "VEC.real == 1",
    "min.__self__",
    "[v for v in (1, 2)] == [1, 2]",
    "(lambda: 1)() == 1",
    "BLOCK[0] == 1",
    "max(BLOCK, key=abs) > 0",
    "(X := 3) > 1",
    "f'{BLOCK}' == '64'",
])
def test_forbidden_syntax_is_rejected_when_the_space_is_made(text: str) -> None:
    with pytest.raises(SpaceError, match="constraint"):
        Space(BLOCK=[64], constraints=[text])


def test_a_constraint_that_does_not_parse_is_rejected() -> None:
    with pytest.raises(SpaceError, match="not a valid expression"):
        Space(BLOCK=[64], constraints=["BLOCK >"])


def test_constraints_see_no_builtins() -> None:
    # A name that is not a parameter is never looked up among Python's builtins.
    s = Space(BLOCK=[64], constraints=["len == 0"])
    with pytest.raises(SpaceError, match="names len"):
        s.check_names([])


def test_an_unknown_name_is_named() -> None:
    s = Space(BLOCK=[64, 128], VEC=[1, 2], constraints=["BLOK * VEC <= H"])
    with pytest.raises(SpaceError) as info:
        s.check_names(["H"])
    message = str(info.value)
    assert "names BLOK," in message
    assert "BLOCK, VEC" in message and "(H)" in message
    with pytest.raises(SpaceError, match="BLOK"):
        list(s.feasible({"H": 4096}))


def test_key_dimensions_are_known_names() -> None:
    s = Space(VEC=[1, 2], constraints=["H % VEC == 0"])
    s.check_names(["H"])
    with pytest.raises(SpaceError, match="names H"):
        s.check_names([])


def test_feasible_points_satisfy_every_constraint() -> None:
    s = Space(BLOCK=[64, 128, 256], VEC=[1, 2, 4, 8],
              constraints=["H % VEC == 0", "BLOCK * VEC <= 512"])
    got = list(s.feasible({"H": 12}))
    assert got == [
        {"BLOCK": 64, "VEC": 1}, {"BLOCK": 64, "VEC": 2}, {"BLOCK": 64, "VEC": 4},
        {"BLOCK": 128, "VEC": 1}, {"BLOCK": 128, "VEC": 2}, {"BLOCK": 128, "VEC": 4},
        {"BLOCK": 256, "VEC": 1}, {"BLOCK": 256, "VEC": 2},
    ]


def test_violated_names_the_broken_constraints_and_bad_parameters() -> None:
    s = Space(BLOCK=[64, 128], VEC=[1, 8], constraints=["H % VEC == 0", "BLOCK >= 64"])
    assert s.violated({"BLOCK": 64, "VEC": 8}, {"H": 12}) == ["H % VEC == 0"]
    assert s.valid({"BLOCK": 64, "VEC": 8}, {"H": 16})
    assert s.violated({"BLOCK": 64, "VEC": 1, "TILE": 2}, {"H": 12}) == ["unknown parameter TILE"]
    assert s.violated({"BLOCK": 64}, {"H": 12}) == ["missing parameter VEC"]


def test_a_space_with_no_valid_point_for_a_key() -> None:
    s = Space(VEC=[16, 32], constraints=["H % VEC == 0"])
    assert list(s.feasible({"H": 8})) == []
    assert len(list(s.feasible({"H": 64}))) == 2


def test_a_value_outside_the_space_is_a_violation() -> None:
    space = Space(BLOCK=[64, 128], VEC=[1, 2])
    broken = space.violated({"BLOCK": 96, "VEC": 1}, {})
    assert broken and "BLOCK=96" in broken[0] and "[64, 128]" in broken[0]
    assert space.valid({"BLOCK": 128, "VEC": 2}, {})


def _random_constraint(rng: random.Random, depth: int = 0) -> str:
    names = ["A", "B", "C", "D", "H"]
    r = rng.random()
    if depth > 2 or r < 0.3:
        a, b = rng.choice(names), rng.choice([*names, "2", "0"])
        return rng.choice([f"{a} < {b}", f"{a} == {b}", f"{a} % 2 == {rng.randint(0, 1)}",
                           f"({a} * {b}) >= {rng.randint(0, 9)}", f"{a} // {b} == 1", f"{a} <= {b} < 3"])
    if r < 0.5:
        return f"({_random_constraint(rng, depth + 1)} and {_random_constraint(rng, depth + 1)})"
    if r < 0.7:
        return f"({_random_constraint(rng, depth + 1)} or {_random_constraint(rng, depth + 1)})"
    if r < 0.8:
        return f"not ({_random_constraint(rng, depth + 1)})"
    return (f"({_random_constraint(rng, depth + 1)} if {_random_constraint(rng, depth + 1)} "
            f"else {_random_constraint(rng, depth + 1)})")


def test_the_search_finds_exactly_the_points_that_testing_every_point_finds() -> None:
    rng = random.Random(7)
    compared = 0
    for _ in range(200):
        space = Space(constraints=[_random_constraint(rng) for _ in range(rng.randint(1, 3))],
                      A=[0, 1, 2, 3], B=[0, 1, 2], C=[1, 2, 4], D=[0, 5])
        key = {"H": rng.randint(0, 5)}
        try:
            every = [p for p in space.points() if space.valid(p, key)]
        except SpaceError:
            continue  # a division by zero is "does not hold"; only text compared with numbers raises
        assert list(space.feasible(key)) == every, (space.constraints, key)
        compared += 1
    assert compared > 150


def test_constraints_are_propagated_so_a_large_space_with_few_feasible_points_is_solved_at_once() -> None:
    # 2**21 points; testing each would take a minute. Each constraint rules a partial point out as soon as
    # it is bound, and the second needs no more than its first part: B=1 and S0=0 is false already.
    switches = {f"S{i}": [0, 1] for i in range(20)}
    space = Space(B=[0, 1], **switches, constraints=[
        *(f"S{i} == S{i + 1}" for i in range(19)),
        "B == 0 or (" + " and ".join(f"S{i} == 1" for i in range(20)) + ")"])
    started = time.monotonic()
    got = list(space.feasible({}))
    assert time.monotonic() - started < 1.0
    assert got == [{"B": 0, **{f"S{i}": 0 for i in range(20)}}, {"B": 0, **{f"S{i}": 1 for i in range(20)}},
                   {"B": 1, **{f"S{i}": 1 for i in range(20)}}]


def test_a_constraint_decided_before_all_its_names_are_bound() -> None:
    c = Constraint.parse("B == 64 or (S0 and S1)")
    assert c.decide({"B": 128, "S0": 0}) is False
    assert c.decide({"B": 64}) is True
    assert c.decide({"B": 128, "S0": 1}) is None
    assert Constraint.parse("not (X < 3 < Y)").decide({"X": 5}) is True
    assert Constraint.parse("(A if C else B) > 2").decide({"C": 1, "A": 1}) is False
    assert Constraint.parse("H % VEC == 0 or B > 1").decide({"H": 8, "VEC": 0}) is None  # fails: not known
