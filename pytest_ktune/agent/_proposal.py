"""Proposals: kernel templates with a declared space, checked in the isolated worker before they count.

A :class:`Proposal` comes from the rule-based templater, from an LLM agent or from a user. It is
plain data: the kernel source (tunable choices are macros, compiled with ``-D NAME=value``), the
space, the default point, constraints, and optional launch-geometry expressions. Nothing in a
proposal is ever executed in this process: the source is compiled and run only in the worker
(:mod:`pytest_ktune._worker`); constraints and launch expressions are AST-checked arithmetic.

The launch geometry: the base target's Python wrapper stays as it is. When a proposal gives
``launch={"block": expr, "grid": expr}``, every ``kernel.launch(grid, block, args)`` the wrapper
makes is re-aimed: the expression replaces the wrapper's value. An expression may use

- the proposal's parameters (``BLOCK``),
- ``block`` and ``grid``: the x-dimension the wrapper itself asked for,
- the numeric dimensions of the target's tuning key (``T``, ``H``),
- the integers the wrapper has bound when it calls ``kernel.launch`` (``tokens``, ``n``),

numbers, ``+ - * // %``, parentheses, ``min``, ``max`` and ``cdiv`` (ceiling division); a tuple
gives several dimensions. Parameters win over the other names, then ``block``/``grid``, then key
dimensions, then the wrapper's integers.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pytest_ktune.agent._messages import one_line
from pytest_ktune.core.errors import KtuneError, SpaceError
from pytest_ktune.core.expression import EvaluationError, Expression
from pytest_ktune.core.launch import cdiv
from pytest_ktune.core.names import C_BACKENDS
from pytest_ktune.core.space import Space, Value, checked_expression
from pytest_ktune.measure.tools import ToolRun

STAGES = ("schema", "sandbox", "space", "compile", "limits", "verify", "crash", "timeout", "tools", "ok")


ORIGINS = ("rules", "agent", "user")


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


_MAX_SOURCE = 200_000


_MAX_VALUES = 64


MAX_SPACE_POINTS = 100_000  # a larger space is refused: the tuner lists a space's feasible points
_MAX_CONSTRAINTS = 32
_MAX_EXPRESSION = 500  # characters of one constraint or launch expression
_MAX_NOTES = 4_000
_MAX_INT = 1 << 53
# A string value becomes -D NAME=value on the compiler's command line: no blanks, quotes or backslashes.
_STRING_VALUE = re.compile(r"^[A-Za-z0-9_.+-]{1,64}$")


class ProposalError(KtuneError):
    """A proposal that cannot be used as it is: bad JSON, a bad field, an unsafe expression."""


_LAUNCH_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Name, ast.Load, ast.Constant, ast.Add,
                 ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.USub, ast.UAdd, ast.Call, ast.Tuple)


_LAUNCH_FUNCS: dict[str, Callable[..., int]] = {"min": min, "max": max, "cdiv": cdiv}


@dataclass(frozen=True)
class LaunchExpr:
    """One launch-geometry expression, parsed and checked once (see the module docstring)."""

    text: str
    names: frozenset[str]
    _code: Expression = field(repr=False, compare=False)

    @classmethod
    def parse(cls, text: str, what: str = "launch") -> LaunchExpr:
        hint = "write integer arithmetic over parameters, key dimensions and the wrapper's names, e.g. " \
               "'min(cdiv(n, BLOCK), GRID_CAP)'"
        if not isinstance(text, str) or not text.strip():
            raise ProposalError(f"{what} expression must be a non-empty string, got {text!r}", hint=hint)
        code, names = checked_expression(text, label=f"{what} expression", nodes=_LAUNCH_NODES,
                                         functions=_LAUNCH_FUNCS, error=ProposalError, hint=hint,
                                         integers_only=True)
        return cls(text=text.strip(), names=names, _code=code)

    def evaluate(self, values: Mapping[str, int]) -> tuple[int, ...]:
        missing = sorted(self.names - set(values))
        if missing:
            raise KtuneError(f"the launch expression {self.text!r} names {', '.join(missing)}, which is "
                             f"not bound here (known: {', '.join(sorted(values))})",
                             hint="use parameters, key dimensions, block/grid, or integers the wrapper binds")
        try:
            out = self._code.evaluate(values)
        except (ZeroDivisionError, EvaluationError) as exc:
            raise KtuneError(f"the launch expression {self.text!r} failed: {type(exc).__name__}: {exc}",
                             hint="check the expression for these values: " + _kv(values)) from None
        dims = out if isinstance(out, tuple) else (out,)
        if not dims or not all(isinstance(d, int) and d > 0 for d in dims):
            raise KtuneError(f"the launch expression {self.text!r} gave {out!r}, not positive integers",
                             hint="check the expression for these values: " + _kv(values))
        return tuple(int(d) for d in dims)


@functools.lru_cache(maxsize=256)
def _parsed(text: str, what: str) -> LaunchExpr:
    """Parsed once per text: a template's function calls ``relaunch`` on every production call."""
    return LaunchExpr.parse(text, what)


def _kv(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(values.items()))


def _check_value(name: str, v: object) -> Value:
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        if abs(v) >= _MAX_INT:
            raise ProposalError(f"space.{name}: the integer {str(v)[:30]} is too large (at most 2**53)",
                                hint="give parameters values a kernel can take, e.g. [64, 128, 256]")
        return v
    if isinstance(v, str):
        if not _STRING_VALUE.match(v):
            raise ProposalError(f"space.{name}: the value {v[:40]!r} is not 1 to 64 letters, digits or _.+-",
                                hint="a value becomes -D NAME=value for the compiler: no blanks or quotes")
        return v
    if isinstance(v, float) and math.isfinite(v):
        return v
    raise ProposalError(f"space.{name}: value {repr(v)[:40]} is not an integer, a finite float, a string or a bool",
                        hint="give each parameter a list of plain values, e.g. [64, 128, 256]")


@dataclass(frozen=True)
class Proposal:
    """A template: kernel source whose tunable choices are macros (compiled with -D NAME=value), the
    space they range over, and how the launch geometry follows from them."""

    backend: str  # "cuda" or "opencl"
    source: str  # the whole kernel source text
    space: Mapping[str, tuple[Value, ...]]  # parameter -> allowed values
    default: Mapping[str, Value]  # a point of the space: the base kernel's own choices
    constraints: tuple[str, ...] = ()  # as ktune.Space constraints (AST-checked expressions)
    launch: Mapping[str, str] = field(default_factory=dict)  # {"block": expr, "grid": expr}, optional
    origin: str = "user"  # "rules", "agent" or "user"
    notes: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "space", {str(k): tuple(v) for k, v in self.space.items()})
        object.__setattr__(self, "default", dict(self.default))
        object.__setattr__(self, "constraints", tuple(self.constraints))
        object.__setattr__(self, "launch", dict(self.launch))

    @classmethod
    def from_json(cls, data: object, *, backend: str) -> Proposal:
        """Validate a model's (or a file's) JSON: a dict, or a string holding one. Raises ProposalError
        naming the bad field."""
        if isinstance(data, (str, bytes)):
            try:
                data = json.loads(data)
            except ValueError as exc:
                raise ProposalError(f"the proposal is not valid JSON: {exc}",
                                    hint="send one JSON object with the fields source, space, default") from None
        if not isinstance(data, dict):
            raise ProposalError(f"the proposal must be a JSON object, got {type(data).__name__}",
                                hint="send one JSON object with the fields source, space, default")
        known = {"backend", "source", "space", "default", "constraints", "launch", "origin", "notes"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ProposalError(f"unknown field(s) {', '.join(unknown)}",
                                hint=f"use only {', '.join(sorted(known))}")
        if "backend" in data and data["backend"] != backend:
            raise ProposalError(f"backend: {data['backend']!r}, but this proposal is for {backend!r}",
                                hint=f"write the kernel for {backend}")
        source = data.get("source")
        if not isinstance(source, str) or not source.strip():
            raise ProposalError("source: missing or empty", hint="give the whole kernel source as a string")
        space = data.get("space")
        if not isinstance(space, dict) or not space:
            raise ProposalError("space: missing, empty or not an object",
                                hint='give {"NAME": [values, ...]} with at least one parameter')
        clean_space: dict[str, tuple[Value, ...]] = {}
        for name, values in space.items():
            if not isinstance(values, list) or not values:
                raise ProposalError(f"space.{name}: must be a non-empty list, got {values!r}",
                                    hint=f'write "{name}": [v1, v2, ...]')
            clean_space[name] = tuple(_check_value(name, v) for v in values)
        default = data.get("default")
        if not isinstance(default, dict):
            raise ProposalError("default: missing or not an object",
                                hint="give one value for each parameter of the space")
        clean_default = {str(k): _check_value(str(k), v) for k, v in default.items()}
        constraints = data.get("constraints", [])
        if not isinstance(constraints, list) or not all(isinstance(c, str) for c in constraints):
            raise ProposalError("constraints: must be a list of strings",
                                hint='e.g. ["H % VEC == 0"]')
        launch = data.get("launch", {})
        if not isinstance(launch, dict) or not all(isinstance(v, str) for v in launch.values()):
            raise ProposalError("launch: must be an object of strings",
                                hint='e.g. {"block": "BLOCK", "grid": "min(cdiv(n, BLOCK), GRID_CAP)"}')
        origin = data.get("origin", "agent")
        notes = data.get("notes", "")
        if origin not in ORIGINS or not isinstance(notes, str):
            raise ProposalError("origin or notes: origin must be rules, agent or user; notes a string",
                                hint="leave both out if unsure")
        p = cls(backend=backend, source=source, space=clean_space, default=clean_default,
                constraints=tuple(constraints), launch=launch, origin=origin, notes=notes)
        p.validate()
        return p

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "source": self.source,
                "space": {k: list(v) for k, v in self.space.items()}, "default": dict(self.default),
                "constraints": list(self.constraints), "launch": dict(self.launch), "origin": self.origin,
                "notes": self.notes}

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()[:12]

    def validate(self) -> None:
        """Raise ProposalError for a field that cannot be used (schema and space, not yet the key)."""
        if self.backend not in C_BACKENDS:
            raise ProposalError(f"backend: {self.backend!r} is not one of {', '.join(C_BACKENDS)}",
                                hint="use cuda or opencl")
        if not self.source.strip():
            raise ProposalError("source: empty", hint="give the whole kernel source")
        if len(self.source) > _MAX_SOURCE:
            raise ProposalError(f"source: {len(self.source)} characters, more than {_MAX_SOURCE}",
                                hint="send the kernel only, not a whole library")
        for name, values in self.space.items():
            if not _IDENT.match(name) or len(name) > 64:
                raise ProposalError(f"space: {name[:70]!r} is not a valid C identifier (of at most 64 characters)",
                                    hint="parameters become -D macros; use names like BLOCK")
            if len(values) > _MAX_VALUES:
                raise ProposalError(f"space.{name}: {len(values)} values, more than {_MAX_VALUES}",
                                    hint="keep a space the tuner can search")
            for v in values:
                _check_value(name, v)
        points = math.prod(len(v) for v in self.space.values())
        if points > MAX_SPACE_POINTS:
            raise ProposalError(f"space: {points:,} points, more than {MAX_SPACE_POINTS:,}",
                                hint="give fewer parameters or fewer values; constraints do not shrink the "
                                     "count, since the search lists every point")
        if len(self.constraints) > _MAX_CONSTRAINTS or any(len(c) > _MAX_EXPRESSION for c in self.constraints):
            raise ProposalError(f"constraints: at most {_MAX_CONSTRAINTS}, each of at most {_MAX_EXPRESSION} "
                                "characters", hint="write short boolean expressions, e.g. 'I % VEC == 0'")
        if any(len(e) > _MAX_EXPRESSION for e in self.launch.values()):
            raise ProposalError(f"launch: an expression of more than {_MAX_EXPRESSION} characters",
                                hint="e.g. 'min(cdiv(n, BLOCK), GRID_CAP)'")
        if len(self.notes) > _MAX_NOTES:
            raise ProposalError(f"notes: {len(self.notes)} characters, more than {_MAX_NOTES}",
                                hint="say briefly what the template changes and why")
        missing = sorted(set(self.space) - set(self.default))
        extra = sorted(set(self.default) - set(self.space))
        if missing or extra:
            raise ProposalError("default: must give one value for each parameter of the space"
                                + (f"; missing {missing}" if missing else "")
                                + (f"; not in the space {extra}" if extra else ""),
                                hint="make default a point of the space")
        for name, v in self.default.items():
            if v not in self.space[name]:
                raise ProposalError(f"default.{name}: {v!r} is not one of the space's values "
                                    f"{list(self.space[name])}", hint="make default a point of the space")
        for dim in self.launch:
            if dim not in ("block", "grid"):
                raise ProposalError(f"launch: unknown entry {dim!r}", hint="use block and grid")
            LaunchExpr.parse(self.launch[dim], f"launch.{dim}")
        try:
            self.as_space()
        except SpaceError as exc:
            raise ProposalError(exc.message, hint=exc.hint) from None

    def as_space(self) -> Space:
        return Space(constraints=list(self.constraints), **{k: list(v) for k, v in self.space.items()})

    def launch_exprs(self) -> dict[str, LaunchExpr]:
        return {k: LaunchExpr.parse(v, f"launch.{k}") for k, v in self.launch.items()}


@dataclass(frozen=True)
class ProposalCheck:
    """What checking a proposal found, and exactly what it verified. ``ok`` only when every configuration
    checked compiled and matched the reference on every case it is valid for, inside guard regions, and
    no checking tool that ran reported an error. Configurations that break a device limit (not the
    default) do not fail the check, since the tuner skips them too; they are listed in ``infeasible``."""

    ok: bool
    stage: str  # one of STAGES
    message: str  # the first error, naming the configuration and the case (no path of this machine)
    checked: tuple[Mapping[str, Value], ...]  # configurations compiled and verified
    failures: tuple[tuple[Mapping[str, Value], str], ...]
    infeasible: tuple[tuple[Mapping[str, Value], str], ...] = ()
    cases: tuple[tuple[str, str], ...] = ()  # every case checked: its id and what its inputs were
    skipped: tuple[str, ...] = ()  # added cases left out, since the base kernel itself fails them
    on_edges: tuple[Mapping[str, Value], ...] = ()  # the configurations checked on the edge-value cases
    coverage: str = ""  # how the configurations were chosen, and what they cover
    tools: tuple[ToolRun, ...] = ()
    seed: int = 0
    guard_bytes: int = 0

    def summary(self) -> str:
        """One line: the stage that rejected it and why, or what was verified."""
        if not self.ok:
            return f"rejected at {self.stage}: {one_line(self.message)}"
        edges = sum(1 for cid, _ in self.cases if "~" in cid and "~odd(" not in cid)
        odd = sum(1 for cid, _ in self.cases if "~odd(" in cid)
        text = (f"verified: {len(self.checked)} configurations on {len(self.cases) - edges - odd} declared case(s)"
                + (f" and {odd} odd shape(s)" if odd else "")
                + (f", {len(self.on_edges)} of them on {edges} edge-value case(s)" if edges else "")
                + (f"; {self.coverage}" if self.coverage else ""))
        if self.infeasible:
            text += f" ({len(self.infeasible)} exceed a device limit)"
        for run in self.tools:
            text += f"; {_tool_summary(run)}"
        return text

    def record(self) -> str:
        """In words, what was verified, for the module a template is written to (``VERIFIED`` there has it all)."""
        lines = [f"Verified against the base target's reference before it was written: {len(self.checked)} "
                 f"configurations ({self.coverage or 'as listed in VERIFIED'}), each on the cases below that "
                 "its constraints allow (the edge-value cases on the configurations named there):"]
        lines += [f"- {cid}: {what}" for cid, what in self.cases]
        if self.skipped:
            lines.append(f"Not checked, since the base kernel itself disagrees with the reference on them: "
                         f"{', '.join(self.skipped)}.")
        if self.guard_bytes:
            lines.append(f"Every buffer lay inside guard regions of {self.guard_bytes} bytes, checked after each run.")
        for run in self.tools:
            lines.append(f"{run.describe}: {_tool_summary(run)}.")
        if not self.tools:
            lines.append("No checking tool (Oclgrind, compute-sanitizer) ran.")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"configurations": [dict(c) for c in self.checked], "coverage": self.coverage,
                "cases": dict(self.cases), "configurations_on_edge_values": [dict(c) for c in self.on_edges],
                "not_checked": list(self.skipped), "seed": self.seed,
                "guard_bytes": self.guard_bytes,
                "over_device_limits": [dict(c) for c, _ in self.infeasible],
                "tools": {r.tool: {"status": r.status, "note": r.note,
                                   "ran": [{"configuration": dict(c), "cases": list(cases)} for c, cases in r.ran]}
                          for r in self.tools}}


def _tool_summary(run: ToolRun) -> str:
    if run.status == "unavailable":
        return f"{run.describe.split(' (')[0]} not run ({run.note or 'not installed'})"
    ran = f"{len(run.configs)} configurations on {', '.join(run.cases) or 'no case'}"
    if run.status == "clean":
        return f"{run.describe.split(' (')[0]} found no error in {ran}"
    if run.status == "errors":
        return f"{run.describe.split(' (')[0]} reported errors in {ran}"
    return f"{run.describe.split(' (')[0]} ran {ran}; {run.note}"


class Proposer(Protocol):
    """Something that proposes templates: engineer A's agent loop, or a scripted sequence.

    ``templatize`` calls it first with the rule-based proposal and its check (either may be None),
    then, while it returns proposals, with its own last proposal and that proposal's check, so a
    failed check goes back to it with the error. ``context`` holds plain data: ``target`` (name),
    ``backend``, ``kernel_file`` (str), ``base_source`` (text), ``key_dims`` (list of names),
    ``cases`` (case ids), ``device`` (a dict of limits: max_threads_per_block, shared_mem_per_block),
    ``round`` (0, 1, ...) and ``max_rounds``. Return None to stop: templatize then keeps the best
    verified proposal so far (the rule-based one, if it verified). A proposer that refuses proposals
    itself before any check (the agent's, at the schema) lists them in a ``refusals`` list, one line
    each ("rejected at schema: ..."), which templatize prints and clears after each call.
    """

    def __call__(self, previous: Proposal | None, check: ProposalCheck | None,
                 context: Mapping[str, Any]) -> Proposal | None: ...
