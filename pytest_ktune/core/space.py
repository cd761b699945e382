"""The tunable parameter space of a kernel template and its constraints."""

from __future__ import annotations

import ast
import itertools
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_ktune.core.errors import KtuneError, SpaceError
from pytest_ktune.core.expression import EvaluationError, Expression, ExpressionTooLarge, check_tree

Value = int | float | str | bool


def is_number(v: Any) -> bool:
    """A finite int or float, not a bool (JSON lets NaN and Infinity through; a timing or a key's
    dimension must not be either)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


Config = Mapping[str, Value]


_ALLOWED_NODES = (
    ast.Expression, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Name,
    ast.Load, ast.Constant, ast.And, ast.Or, ast.Not, ast.Add, ast.Sub, ast.Mult,
    ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd, ast.Eq, ast.NotEq,
    ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn, ast.Call, ast.Tuple,
    ast.List, ast.IfExp, ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift, ast.RShift,
)


_FUNCTIONS: dict[str, Any] = {"min": min, "max": max, "abs": abs}


def checked_expression(text: str, *, label: str, nodes: tuple[type, ...], functions: Mapping[str, Any],
                       error: type[KtuneError], hint: str, node_hint: str | None = None,
                       call_hint: str | None = None, integers_only: bool = False) -> tuple[Expression, frozenset[str]]:
    """Compile ``text`` as one expression made only of ``nodes``, calling only ``functions`` by name
    (and, with ``integers_only``, holding no other constant than integers), so that evaluating it can
    never run arbitrary code; it is evaluated within the bounds of ``core.expression`` (its size, the
    size of its integers). Returns the compiled expression and the names it reads; raises ``error``
    (a KtuneError taking ``hint``) saying what is not allowed."""
    if not isinstance(text, str):
        raise error(f"{label} {text!r} is not a string", hint=hint)
    try:
        tree = check_tree(text)
    except SyntaxError as exc:
        raise error(f"{label} {_clip(text)!r} is not a valid expression ({exc.msg})", hint=hint) from None
    except ExpressionTooLarge as exc:
        raise error(f"{label} {_clip(text)!r} is too large: {exc}", hint=hint) from None
    names: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, nodes):
            raise error(f"{label} {_clip(text)!r} uses {type(node).__name__}, which is not allowed",
                        hint=node_hint or hint)
        if integers_only and isinstance(node, ast.Constant) and type(node.value) is not int:
            raise error(f"{label} {_clip(text)!r} has the constant {node.value!r}; only integers are allowed",
                        hint=hint)
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in functions) or node.keywords:
                raise error(f"{label} {_clip(text)!r} calls something other than {_listed(functions)}",
                            hint=call_hint or hint)
        elif isinstance(node, ast.Name) and node.id not in functions:
            names.add(node.id)
    return Expression(tree, text.strip(), functions), frozenset(names)


def _clip(text: str, limit: int = 120) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _listed(functions: Mapping[str, Any]) -> str:
    names = list(functions)
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]


@dataclass(frozen=True)
class Constraint:
    """One boolean expression over parameters and key dimensions, e.g. ``H % VEC == 0``.

    Parsed once; only arithmetic, comparisons, boolean logic and ``min``,
    ``max``, ``abs`` are allowed, so a constraint can never run arbitrary code.
    """

    text: str
    names: frozenset[str]
    _code: Expression = field(repr=False, compare=False)

    @classmethod
    def parse(cls, text: str) -> Constraint:
        code, names = checked_expression(
            text, label="constraint", nodes=_ALLOWED_NODES, functions=_FUNCTIONS, error=SpaceError,
            hint="write it as a Python boolean expression, e.g. 'H % VEC == 0'",
            node_hint="use only arithmetic, comparisons, and/or/not, min, max and abs",
            call_hint="use only min(), max() and abs() in constraints")
        return cls(text=text, names=names, _code=code)

    def holds(self, values: Mapping[str, Any]) -> bool:
        """Whether the constraint holds for these values (a division by zero: it does not). Raises
        SpaceError where it cannot be evaluated (a name not bound, text compared with a number, an
        integer past the bound of ``core.expression``)."""
        try:
            return bool(self._code.evaluate(values))
        except ZeroDivisionError:
            return False
        except EvaluationError as exc:
            shown = ", ".join(f"{k}={v!r}" for k, v in sorted(values.items()) if k in self.names)
            raise SpaceError(f"constraint {_clip(self.text)!r} cannot be evaluated for {shown or 'these values'}: "
                             f"{exc}", hint="write arithmetic on the parameters and the key's numbers, with "
                                            "small integers") from None

    def decide(self, values: Mapping[str, Any]) -> bool | None:
        """Whether the constraint holds whatever the names not in ``values`` are (None: that depends on
        them); see ``core.expression.Expression.decide``."""
        return self._code.decide(values)


@dataclass(frozen=True)
class Space:
    """Categorical values for each tunable parameter, plus constraints.

    ``Space(BLOCK=[64, 128, 256], VEC=[1, 2, 4], constraints=["H % VEC == 0"])``.
    A constraint may name parameters and the dimensions of the target's
    tuning key (``H`` above); those are checked when the key is known.
    """

    params: Mapping[str, tuple[Value, ...]]
    constraints: tuple[Constraint, ...] = ()

    def __init__(self, constraints: Sequence[str] = (), **params: Sequence[Value]) -> None:
        if not params:
            raise SpaceError("a Space needs at least one parameter",
                             hint="e.g. ktune.Space(BLOCK=[128, 256])")
        clean: dict[str, tuple[Value, ...]] = {}
        for name, values in params.items():
            if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
                raise SpaceError(f"parameter {name} must be given a list of values, got {values!r}",
                                 hint=f"write {name}=[...]")
            if len(values) == 0:
                raise SpaceError(f"parameter {name} has no values",
                                 hint=f"give {name} at least one value")
            if len(set(values)) != len(values):
                raise SpaceError(f"parameter {name} lists a value twice: {list(values)}",
                                 hint="list each value once")
            clean[name] = tuple(values)
        object.__setattr__(self, "params", clean)
        object.__setattr__(self, "constraints", tuple(Constraint.parse(c) for c in constraints))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.params)

    @property
    def size(self) -> int:
        n = 1
        for values in self.params.values():
            n *= len(values)
        return n

    def check_names(self, key_dims: Sequence[str]) -> None:
        """Fail if a constraint names something that is neither a parameter nor a key dimension."""
        known = set(self.params) | set(key_dims)
        for c in self.constraints:
            unknown = sorted(c.names - known)
            if unknown:
                raise SpaceError(
                    f"constraint {c.text!r} names {', '.join(unknown)}, which is neither a "
                    f"parameter ({', '.join(self.params)}) nor a key dimension "
                    f"({', '.join(key_dims) or 'none'})",
                    hint="fix the spelling, or add the name to the Space or to the key",
                )

    def violated(self, config: Config, key: Mapping[str, Any]) -> list[str]:
        """The constraints that ``config`` breaks for this key (empty when it is valid)."""
        bad = [name for name in config if name not in self.params]
        if bad:
            return [f"unknown parameter {n}" for n in bad]
        missing = [name for name in self.params if name not in config]
        if missing:
            return [f"missing parameter {n}" for n in missing]
        foreign = [f"{n}={config[n]!r} is not one of the Space's values {list(self.params[n])}"
                   for n in self.params if config[n] not in self.params[n]]
        if foreign:
            return foreign
        values = {**key, **config}
        return [c.text for c in self.constraints if not c.holds(values)]

    def valid(self, config: Config, key: Mapping[str, Any]) -> bool:
        return not self.violated(config, key)

    def points(self) -> Iterator[dict[str, Value]]:
        """Every point of the space, constraints not applied, in a stable order."""
        names = list(self.params)
        for combo in itertools.product(*(self.params[n] for n in names)):
            yield dict(zip(names, combo, strict=True))

    def feasible(self, key: Mapping[str, Any]) -> Iterator[dict[str, Value]]:
        """Every point that satisfies all constraints for this key, in the order of ``points``.

        Found by a search, not by testing every point: the parameters are bound one at a time, each
        constraint is evaluated once its last parameter is bound, and a partial point is dropped as soon as
        a constraint still open is false whatever the parameters not bound yet (``Constraint.decide``).
        So a space of 2 x 2**15 points whose second block size needs all fifteen switches on is solved
        in a few dozen steps for that block size. A constraint that cannot be evaluated raises SpaceError
        at the first point that reaches it."""
        self.check_names(list(key))
        names = list(self.params)
        values = [self.params[n] for n in names]
        depth = {n: d for d, n in enumerate(names)}
        scope: dict[str, Any] = {k: v for k, v in key.items() if k not in depth}
        closed: list[list[Constraint]] = [[] for _ in names]  # evaluated where their last parameter is bound
        opened: list[list[tuple[int, Constraint]]] = [[] for _ in names]  # decided early where they can be
        for i, c in enumerate(self.constraints):
            where = sorted({depth[n] for n in c.names if n in depth})
            if not where:
                if not c.holds(scope):
                    return
                continue
            closed[where[-1]].append(c)
            for d in where[:-1]:
                opened[d].append((i, c))
        last = len(names) - 1
        chosen = [-1] * len(names)
        holding = [0] * len(names)  # per depth: the open constraints known to hold already (a bit each)
        d = 0
        while d >= 0:
            chosen[d] += 1
            if chosen[d] == len(values[d]):
                chosen[d] = -1
                scope.pop(names[d], None)
                d -= 1
                continue
            scope[names[d]] = values[d][chosen[d]]
            if closed[d] and not all(c.holds(scope) for c in closed[d]):
                continue
            known = holding[d]
            for i, c in opened[d]:
                if known >> i & 1:
                    continue
                verdict = c.decide(scope)
                if verdict is False:
                    break
                if verdict:
                    known |= 1 << i
            else:
                if d == last:
                    yield {n: scope[n] for n in names}
                else:
                    d += 1
                    holding[d] = known


_KEY_ENCODER = json.JSONEncoder(sort_keys=True)  # json.dumps(..., sort_keys=True), without a new encoder a call


def config_key(config: Mapping[str, Value]) -> str:
    """A configuration as one string, the same whatever the order of its parameters."""
    return _KEY_ENCODER.encode(config if type(config) is dict else dict(config))


def steps(a: Mapping[str, Value], b: Mapping[str, Value], params: Mapping[str, Sequence[Value]]) -> int:
    """How many steps apart two configurations are: per parameter, how far apart their values are
    among its values in order (numeric), or whether they differ (categorical)."""
    out = 0
    for name, values in params.items():
        if a[name] == b[name]:
            continue
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            ordered = sorted(values, key=float)
            out += abs(ordered.index(a[name]) - ordered.index(b[name]))
        else:
            out += 1
    return out
