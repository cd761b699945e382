"""Space: parameter values, constraints (parsed safely), and the feasible points for a key."""

from __future__ import annotations

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
