"""Checked expressions evaluated within bounds: the interpreter behind constraints and launch expressions.

``core.space.checked_expression`` decides which nodes and functions an expression may use; this module
compiles the checked tree into nested closures and runs them with limits, so that an expression from a
model (or a careless user) can neither run code nor take unbounded time or memory:

- the text, the number of nodes and the depth of the tree are bounded (``MAX_TEXT``, ``MAX_NODES``,
  ``MAX_DEPTH``), and every node is evaluated at most once (there are no loops), so one evaluation
  costs a bounded number of operations;
- no integer, whether a constant, a bound value or a result, may exceed ``MAX_BITS`` bits, and a power
  or a shift is refused *before* it is computed when its result would: ``9 ** 9 ** 9`` fails at once
  instead of hanging;
- arithmetic is on numbers only (strings may be compared and looked up with ``in``), so ``'x' * 10**9``
  cannot allocate a gigabyte.

A failure raises ``EvaluationError`` (or ``ZeroDivisionError``, which constraints read as "does not
hold"); callers turn it into a ``KtuneError`` naming the expression and the values.

``Expression.decide`` evaluates the same tree when only some of its names are bound (a search that binds a
space's parameters one at a time): each subtree whose names are all bound runs through the same closures,
and the rest follows three-valued logic (``and``, ``or``, ``not``, comparisons, ``x if c else y``), so
that ``BLOCK == 64 or (S0 and S1)`` is known false once ``BLOCK`` is 128 and ``S0`` is 0. Its answer is
``None`` when the value is not known yet, and otherwise what ``evaluate`` would give for every binding of
the rest of the names, unless ``evaluate`` would fail there.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from typing import Any

MAX_TEXT = 2_000  # characters of one expression
MAX_NODES = 400
MAX_DEPTH = 40
MAX_BITS = 1_024  # the largest integer an expression may hold or compute
MAX_STRING = 256  # characters of a string constant

Scope = Mapping[str, Any]
_Fn = Callable[[Scope], Any]


class EvaluationError(Exception):
    """An expression that could not be evaluated within its bounds, or on these values."""


class ExpressionTooLarge(ValueError):
    """A text that breaks a bound before it is evaluated (too long, too many nodes, too deep, a huge constant)."""


def check_tree(text: str) -> ast.Expression:
    """``text`` parsed as one expression within the size bounds; raises ExpressionTooLarge or SyntaxError."""
    if len(text) > MAX_TEXT:
        raise ExpressionTooLarge(f"{len(text)} characters, more than {MAX_TEXT}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (RecursionError, MemoryError, ValueError):
        raise ExpressionTooLarge("nested too deeply for the parser") from None
    count = 0
    todo: list[tuple[ast.AST, int]] = [(tree, 0)]
    while todo:
        node, depth = todo.pop()
        count += 1
        if count > MAX_NODES:
            raise ExpressionTooLarge(f"more than {MAX_NODES} nodes")
        if depth > MAX_DEPTH:
            raise ExpressionTooLarge(f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, ast.Constant):
            v = node.value
            if type(v) not in (int, float, str, bool):
                raise ExpressionTooLarge(f"the constant {v!r} is not a number, a string or a bool")
            if type(v) is int and v.bit_length() > MAX_BITS:
                raise ExpressionTooLarge(f"an integer constant of {v.bit_length()} bits (at most {MAX_BITS})")
            if isinstance(v, str) and len(v) > MAX_STRING:
                raise ExpressionTooLarge(f"a string constant of {len(v)} characters (at most {MAX_STRING})")
        todo.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return tree


def _number(v: Any, what: str) -> Any:
    if isinstance(v, (int, float)):  # bool is an int
        return v
    raise EvaluationError(f"{what} needs numbers, got {type(v).__name__} {_short(v)}")


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _bounded(v: Any) -> Any:
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > MAX_BITS:
        raise EvaluationError(f"an integer of {v.bit_length()} bits (at most {MAX_BITS})")
    if isinstance(v, complex):
        raise EvaluationError("a complex result")
    return v


def _pow(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1 and (abs(a).bit_length() - 1) * b > MAX_BITS:
        raise EvaluationError(f"{_short(a)} ** {_short(b)} has more than {MAX_BITS} bits")
    return a ** b


def _mul(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and abs(a).bit_length() + abs(b).bit_length() > MAX_BITS + 1:
        raise EvaluationError(f"a product of more than {MAX_BITS} bits")
    return a * b


def _lshift(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and b > 0 and a and abs(a).bit_length() + b > MAX_BITS:
        raise EvaluationError(f"{_short(a)} << {_short(b)} has more than {MAX_BITS} bits")
    return a << b


_BINARY: dict[type, tuple[str, Callable[[Any, Any], Any]]] = {
    ast.Add: ("+", operator.add), ast.Sub: ("-", operator.sub), ast.Mult: ("*", _mul),
    ast.Div: ("/", operator.truediv), ast.FloorDiv: ("//", operator.floordiv), ast.Mod: ("%", operator.mod),
    ast.Pow: ("**", _pow), ast.BitAnd: ("&", operator.and_), ast.BitOr: ("|", operator.or_),
    ast.BitXor: ("^", operator.xor), ast.LShift: ("<<", _lshift), ast.RShift: (">>", operator.rshift),
}
_ORDER: dict[type, Callable[[Any, Any], bool]] = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
}


def _apply(symbol: str, fn: Callable[[Any, Any], Any], a: Any, b: Any) -> Any:
    try:
        return _bounded(fn(_number(a, symbol), _number(b, symbol)))
    except ZeroDivisionError:
        raise
    except (OverflowError, ValueError, TypeError) as exc:
        raise EvaluationError(f"{_short(a)} {symbol} {_short(b)}: {exc}") from None


def _compare(op: ast.cmpop, a: Any, b: Any) -> bool:
    if isinstance(op, ast.Eq):
        return bool(a == b)
    if isinstance(op, ast.NotEq):
        return bool(a != b)
    if isinstance(op, (ast.In, ast.NotIn)):
        if not isinstance(b, (tuple, list)) and not (isinstance(b, str) and isinstance(a, str)):
            raise EvaluationError(f"'in' needs a list on its right, got {type(b).__name__}")
        found = a in b
        return found if isinstance(op, ast.In) else not found
    fn = _ORDER[type(op)]
    numbers = isinstance(a, (int, float)) and isinstance(b, (int, float))
    if not numbers and not (isinstance(a, str) and isinstance(b, str)):
        raise EvaluationError(f"cannot order {type(a).__name__} {_short(a)} and {type(b).__name__} {_short(b)}")
    return fn(a, b)


def _compile(node: ast.AST, functions: Mapping[str, Callable[..., Any]], memo: dict[int, _Fn] | None = None) -> _Fn:
    """A closure that evaluates ``node`` (already checked) against a scope of names; with ``memo``, each
    node's closure is made once however often it is asked for (``_compile_open`` asks for every subtree)."""
    if memo is None:
        return _compile_node(node, functions, None)
    if id(node) not in memo:
        memo[id(node)] = _compile_node(node, functions, memo)
    return memo[id(node)]


def _compile_node(node: ast.AST, functions: Mapping[str, Callable[..., Any]], memo: dict[int, _Fn] | None) -> _Fn:
    if isinstance(node, ast.Expression):
        return _compile(node.body, functions, memo)
    if isinstance(node, ast.Constant):
        value = node.value
        return lambda scope: value
    if isinstance(node, ast.Name):
        name = node.id

        def load(scope: Scope) -> Any:
            if name in scope:
                return _bounded(scope[name])
            if name in functions:
                raise EvaluationError(f"{name} is a function; call it")
            raise EvaluationError(f"{name} is not bound here (known: {', '.join(sorted(scope)) or 'nothing'})")

        return load
    if isinstance(node, ast.BinOp):
        symbol, fn = _BINARY[type(node.op)]
        left, right = _compile(node.left, functions, memo), _compile(node.right, functions, memo)
        return lambda scope: _apply(symbol, fn, left(scope), right(scope))
    if isinstance(node, ast.UnaryOp):
        operand = _compile(node.operand, functions, memo)
        if isinstance(node.op, ast.Not):
            return lambda scope: not operand(scope)
        signs: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos,
                                                  ast.Invert: operator.invert}
        unary = signs[type(node.op)]
        return lambda scope: _bounded(unary(_number(operand(scope), "a sign")))
    if isinstance(node, ast.BoolOp):
        parts = [_compile(v, functions, memo) for v in node.values]
        is_and = isinstance(node.op, ast.And)

        def boolean(scope: Scope) -> Any:
            value: Any = None
            for part in parts:
                value = part(scope)
                if bool(value) != is_and:
                    return value
            return value

        return boolean
    if isinstance(node, ast.Compare):
        first = _compile(node.left, functions, memo)
        rest = [(op, _compile(c, functions, memo)) for op, c in zip(node.ops, node.comparators, strict=True)]

        def compare(scope: Scope) -> bool:
            a = first(scope)
            for op, c in rest:
                b = c(scope)
                if not _compare(op, a, b):
                    return False
                a = b
            return True

        return compare
    if isinstance(node, ast.IfExp):
        test, body, orelse = (_compile(n, functions, memo) for n in (node.test, node.body, node.orelse))
        return lambda scope: body(scope) if test(scope) else orelse(scope)
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_compile(e, functions, memo) for e in node.elts]
        return lambda scope: tuple(item(scope) for item in items)
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        fname = node.func.id
        func = functions[fname]
        args = [_compile(a, functions, memo) for a in node.args]

        def call(scope: Scope) -> Any:
            values = [a(scope) for a in args]
            for v in values:
                if isinstance(v, tuple):
                    for x in v:
                        _number(x, f"{fname}()")
                else:
                    _number(v, f"{fname}()")
            try:
                return _bounded(func(*values))
            except ZeroDivisionError:
                raise
            except (TypeError, ValueError, OverflowError) as exc:
                raise EvaluationError(f"{fname}({', '.join(_short(v) for v in values)}): {exc}") from None

        return call
    raise EvaluationError(f"{type(node).__name__} cannot be evaluated")  # the checker lets none through


class _Open:
    """The value of a subtree that names something not bound yet: at most its truth is known."""

    __slots__ = ("truth",)

    def __init__(self, truth: bool | None) -> None:
        self.truth = truth


_UNKNOWN, _TRUE, _FALSE = _Open(None), _Open(True), _Open(False)


def _truth(value: Any) -> bool | None:
    return value.truth if isinstance(value, _Open) else bool(value)


def _names(node: ast.AST, functions: Mapping[str, Callable[..., Any]]) -> frozenset[str]:
    return frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id not in functions)


def _compile_open(node: ast.AST, functions: Mapping[str, Callable[..., Any]], memo: dict[int, _Fn]) -> _Fn:
    """A closure that evaluates ``node`` with some names unbound (see ``Expression.decide``): the exact
    closure where all its names are bound (a failure there: not known), else the rule of its kind."""
    if isinstance(node, ast.Expression):
        return _compile_open(node.body, functions, memo)
    needed = _names(node, functions)
    exact = _compile(node, functions, memo)
    rule = _open_rule(node, functions, memo)

    def open_(scope: Scope) -> Any:
        if needed <= scope.keys():
            try:
                return exact(scope)
            except (EvaluationError, ZeroDivisionError, TypeError, ValueError, OverflowError, RecursionError,
                    MemoryError):
                return _UNKNOWN
        return rule(scope)

    return open_


def _open_rule(node: ast.AST, functions: Mapping[str, Callable[..., Any]], memo: dict[int, _Fn]) -> _Fn:
    """Three-valued logic for a node that names something unbound; arithmetic on it is not known."""
    if isinstance(node, ast.BoolOp):
        parts = [_compile_open(v, functions, memo) for v in node.values]
        is_and = isinstance(node.op, ast.And)

        def boolean(scope: Scope) -> _Open:
            # and: false as soon as one part is (evaluation stops at a false part, or an earlier one);
            # true when every part is. or: the other way round.
            decided = True
            for part in parts:
                t = _truth(part(scope))
                if t is None:
                    decided = False
                elif t != is_and:
                    return _FALSE if is_and else _TRUE
            if not decided:
                return _UNKNOWN
            return _TRUE if is_and else _FALSE

        return boolean
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        operand = _compile_open(node.operand, functions, memo)

        def negation(scope: Scope) -> _Open:
            t = _truth(operand(scope))
            return _UNKNOWN if t is None else _FALSE if t else _TRUE

        return negation
    if isinstance(node, ast.Compare):
        operands = [_compile_open(n, functions, memo) for n in (node.left, *node.comparators)]
        ops = list(node.ops)

        def compare(scope: Scope) -> _Open:
            values = [o(scope) for o in operands]
            decided = True
            for op, a, b in zip(ops, values, values[1:], strict=False):
                if isinstance(a, _Open) or isinstance(b, _Open):
                    decided = False
                    continue
                try:
                    if not _compare(op, a, b):
                        return _FALSE  # a chain is false as soon as one link is
                except EvaluationError:
                    decided = False
            return _TRUE if decided else _UNKNOWN

        return compare
    if isinstance(node, ast.IfExp):
        test, body, orelse = (_compile_open(n, functions, memo) for n in (node.test, node.body, node.orelse))

        def choice(scope: Scope) -> Any:
            t = _truth(test(scope))
            if t is not None:
                return body(scope) if t else orelse(scope)
            a, b = _truth(body(scope)), _truth(orelse(scope))
            return _UNKNOWN if a is None or a != b else _TRUE if a else _FALSE

        return choice
    return lambda scope: _UNKNOWN


class Expression:
    """A checked expression, compiled once; ``evaluate`` runs it within the bounds above, ``decide`` with
    some of its names unbound."""

    __slots__ = ("_fn", "_functions", "_open", "_tree", "text")

    def __init__(self, tree: ast.Expression, text: str, functions: Mapping[str, Callable[..., Any]]) -> None:
        self.text = text
        self._fn = _compile(tree, functions)
        self._tree = tree
        self._functions = functions
        self._open: _Fn | None = None  # compiled on the first ``decide``

    def evaluate(self, scope: Scope) -> Any:
        """The value for these names; raises EvaluationError, or ZeroDivisionError."""
        try:
            return self._fn(scope)
        except (EvaluationError, ZeroDivisionError):
            raise
        except (TypeError, ValueError, OverflowError, RecursionError, MemoryError) as exc:  # bound but odd values
            raise EvaluationError(f"{type(exc).__name__}: {exc}") from None

    def decide(self, scope: Scope) -> bool | None:
        """The truth of the expression when only the names in ``scope`` are bound: None while it depends
        on the others (or fails on these), else what ``evaluate`` gives for every binding of them where
        it does not fail."""
        if self._open is None:
            self._open = _compile_open(self._tree, self._functions, {})
        return _truth(self._open(scope))

    def __repr__(self) -> str:
        return f"Expression({self.text!r})"
