"""Constraints and launch expressions run within bounds: an expression made to hang, to fill memory or to
raise ends in a SpaceError (or KtuneError) naming it, at once."""

from __future__ import annotations

import time

import pytest

from pytest_ktune.agent._proposal import LaunchExpr, ProposalError
from pytest_ktune.core.errors import KtuneError, SpaceError
from pytest_ktune.core.expression import MAX_BITS
from pytest_ktune.core.space import Constraint, Space


@pytest.mark.parametrize(("text", "why"), [
    ("9 ** 9 ** 9 > BLOCK", "more than 1024 bits"),
    ("1 << 10 ** 9 > BLOCK", "more than 1024 bits"),
    ("BLOCK * 2 ** 1000 * 2 ** 1000 > 0", "more than 1024 bits"),
    ("BLOCK + 'x' > 0", "needs numbers, got str"),
    ("10.0 ** 400 > BLOCK", "out of range"),
    ("(-8.0) ** 0.5 > BLOCK", "complex"),
    ("'a' < BLOCK", "cannot order"),
    ("BLOCK in 3", "needs a list"),
    ("min('a', BLOCK) > 0", "needs numbers"),
])
def test_an_expression_past_its_bounds_fails_at_once_naming_itself(text: str, why: str) -> None:
    c = Constraint.parse(text)
    started = time.monotonic()
    with pytest.raises(SpaceError, match=why) as info:
        c.holds({"BLOCK": 64})
    assert time.monotonic() - started < 0.1
    assert "cannot be evaluated for BLOCK=64" in info.value.message


@pytest.mark.parametrize(("text", "why"), [
    ("BLOCK > " + "1" * 400, "integer constant of"),
    ("-" * 3000 + "BLOCK > 0", "characters, more than"),
    ("(BLOCK + " * 60 + "1" + ")" * 60 + " > 0", "nested more than 40 levels deep"),
    ("BLOCK in [" + "1, " * 450 + "2]", "more than 400 nodes"),
    ("BLOCK == None", "not a number, a string or a bool"),
])
def test_a_text_too_large_to_evaluate_is_refused_when_parsed(text: str, why: str) -> None:
    with pytest.raises(SpaceError, match=why):
        Space(BLOCK=[64], constraints=[text])


def test_ordinary_constraints_keep_their_meaning() -> None:
    c = Constraint.parse("H % VEC == 0 and BLOCK * VEC <= 4096 and LAYOUT in ['row', 'col']")
    assert c.holds({"H": 4096, "VEC": 4, "BLOCK": 64, "LAYOUT": "row"})
    assert not c.holds({"H": 4098, "VEC": 4, "BLOCK": 64, "LAYOUT": "row"})
    assert not c.holds({"H": 4096, "VEC": 4, "BLOCK": 2048, "LAYOUT": "row"})
    assert Constraint.parse("2 ** 40 > BLOCK").holds({"BLOCK": 1})
    assert Constraint.parse(f"2 ** {MAX_BITS - 1} > BLOCK").holds({"BLOCK": 1})
    assert not Constraint.parse("H % VEC == 0").holds({"H": 8, "VEC": 0})  # a division by zero does not hold
    assert Constraint.parse("abs(-3) == 3 if H else False").holds({"H": 1})


def test_a_huge_bound_value_is_refused_not_computed() -> None:
    with pytest.raises(SpaceError, match="an integer of 2001 bits"):
        Constraint.parse("H * 2 > 0").holds({"H": 1 << 2000})


def test_launch_expressions_share_the_bounds() -> None:
    with pytest.raises(KtuneError, match="more than 1024 bits"):
        LaunchExpr.parse("n * n * n * n * n * n").evaluate({"n": 1 << 200})
    with pytest.raises(ProposalError, match="too large"):
        LaunchExpr.parse("n" + " + n" * 500)
    assert LaunchExpr.parse("(cdiv(n, BLOCK), 2)").evaluate({"n": 1000, "BLOCK": 128}) == (8, 2)
