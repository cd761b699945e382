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
import importlib.util
import inspect
import json
import math
import random
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .._errors import KtuneError, SpaceError
from .._space import Space, Value, checked_expression
from .._target import BACKENDS, Target

STAGES = ("schema", "space", "compile", "limits", "verify", "crash", "timeout", "ok")
ORIGINS = ("rules", "agent", "user")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MAX_SOURCE = 200_000
_MAX_VALUES = 64
_MAX_POINTS = 50_000  # the most points of a space enumerated to draw a sample from


class ProposalError(KtuneError):
    """A proposal that cannot be used as it is: bad JSON, a bad field, an unsafe expression."""


# -- launch expressions ------------------------------------------------------------------------

_LAUNCH_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Name, ast.Load, ast.Constant, ast.Add,
                 ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.USub, ast.UAdd, ast.Call, ast.Tuple)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


_LAUNCH_FUNCS: dict[str, Callable[..., int]] = {"min": min, "max": max, "cdiv": _cdiv}


@dataclass(frozen=True)
class LaunchExpr:
    """One launch-geometry expression, parsed and checked once (see the module docstring)."""

    text: str
    names: frozenset[str]
    _code: Any = field(repr=False, compare=False)

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
        scope: dict[str, Any] = dict(_LAUNCH_FUNCS)
        scope.update(values)
        try:
            out = eval(self._code, {"__builtins__": {}}, scope)
        except (ZeroDivisionError, TypeError, ValueError) as exc:
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


# -- the proposal ------------------------------------------------------------------------------


def _check_value(name: str, v: object) -> Value:
    if isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float) and math.isfinite(v):
        return v
    raise ProposalError(f"space.{name}: value {v!r} is not an integer, a finite float, a string or a bool",
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
        if self.backend not in BACKENDS:
            raise ProposalError(f"backend: {self.backend!r} is not one of {', '.join(BACKENDS)}",
                                hint="use cuda or opencl")
        if not self.source.strip():
            raise ProposalError("source: empty", hint="give the whole kernel source")
        if len(self.source) > _MAX_SOURCE:
            raise ProposalError(f"source: {len(self.source)} characters, more than {_MAX_SOURCE}",
                                hint="send the kernel only, not a whole library")
        for name, values in self.space.items():
            if not _IDENT.match(name):
                raise ProposalError(f"space: {name!r} is not a valid C identifier",
                                    hint="parameters become -D macros; use names like BLOCK")
            if len(values) > _MAX_VALUES:
                raise ProposalError(f"space.{name}: {len(values)} values, more than {_MAX_VALUES}",
                                    hint="keep a space the tuner can search")
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


# -- the result of a check, and what an agent plugs in -------------------------------------------


@dataclass(frozen=True)
class ProposalCheck:
    """What checking a proposal found. ``ok`` only when the default and every sampled configuration
    compiled and matched the reference on every case. Sampled configurations that break a device
    limit (not the default) do not fail the check, since the tuner skips them too; they are listed
    in ``infeasible``."""

    ok: bool
    stage: str  # "schema" | "space" | "compile" | "limits" | "verify" | "crash" | "timeout" | "ok"
    message: str  # the first error, naming the configuration and the case
    checked: tuple[Mapping[str, Value], ...]  # configurations compiled and verified
    failures: tuple[tuple[Mapping[str, Value], str], ...]
    infeasible: tuple[tuple[Mapping[str, Value], str], ...] = ()

    def summary(self) -> str:
        if self.ok:
            return (f"verified: {len(self.checked)} configurations on every case"
                    + (f" ({len(self.infeasible)} sampled ones exceed a device limit)" if self.infeasible else ""))
        return f"rejected at {self.stage}: {self.message}"


class Proposer(Protocol):
    """Something that proposes templates: engineer A's agent loop, or a scripted sequence.

    ``templatize`` calls it first with the rule-based proposal and its check (either may be None),
    then, while it returns proposals, with its own last proposal and that proposal's check, so a
    failed check goes back to it with the error. ``context`` holds plain data: ``target`` (name),
    ``backend``, ``kernel_file`` (str), ``base_source`` (text), ``key_dims`` (list of names),
    ``cases`` (case ids), ``device`` (a dict of limits: max_threads_per_block, shared_mem_per_block),
    ``round`` (0, 1, ...) and ``max_rounds``. Return None to stop: templatize then keeps the best
    verified proposal so far (the rule-based one, if it verified).
    """

    def __call__(self, previous: Proposal | None, check: ProposalCheck | None,
                 context: Mapping[str, Any]) -> Proposal | None: ...


# -- running a proposal: the wrapper's launches re-aimed ----------------------------------------


class _Relaunch:
    """The kernel handle the base wrapper receives: launches go through the proposal's expressions."""

    def __init__(self, kernel: Any, launch: Mapping[str, LaunchExpr], key: Mapping[str, Any],
                 fallback: Mapping[str, Value]) -> None:
        self._kernel = kernel
        self._launch = launch
        self._key = {k: int(v) for k, v in key.items() if isinstance(v, int) and not isinstance(v, bool)}
        self.params = {**fallback, **kernel.params}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kernel, name)

    def __getitem__(self, name: str) -> Any:
        return self.params[name]

    def launch(self, grid: Any, block: Any, args: Sequence[Any], *, name: str | None = None) -> None:
        from ..backends.base import as_dim

        if self._launch:
            g, b = list(as_dim(grid)), list(as_dim(block))
            caller = sys._getframe(1).f_locals
            values: dict[str, int] = {k: int(v) for k, v in caller.items() if _is_int(v)}
            values.update(self._key)
            values.update(grid=g[0], block=b[0])
            values.update({k: int(v) for k, v in self._kernel.params.items() if _is_int(v)})
            if "grid" in self._launch:
                g = _splice(g, self._launch["grid"].evaluate(values))
            if "block" in self._launch:
                b = _splice(b, self._launch["block"].evaluate(values))
            grid, block = tuple(g), tuple(b)
        self._kernel.launch(grid, block, args, name=name)


def _is_int(v: object) -> bool:
    import numpy as np

    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _splice(old: list[int], new: tuple[int, ...]) -> list[int]:
    """New leading dimensions over the old ones (a 1-D expression changes x only)."""
    return list(new) + old[len(new):]


def relaunch(base: Target, kernel: Any, launch: Mapping[str, str], **bound: Any) -> Any:
    """Call ``base``'s wrapper with its launches re-aimed by ``launch`` (what a generated template's
    function does)."""
    exprs = {k: _parsed(v, f"launch.{k}") for k, v in launch.items()}
    key = base.key(bound)
    return base.fn(_Relaunch(kernel, exprs, key, base.default), **bound)


# -- the scratch target the worker imports ------------------------------------------------------

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

_LOADER = '''"""Generated by pytest-ktune to check or tune a proposal. Scratch: safe to delete."""

from pathlib import Path

from pytest_ktune.agent._proposal import scratch_target

TARGET = scratch_target(Path(__file__))
'''


def _module_vars_name(base: Target) -> str:
    module = sys.modules.get(base.module)
    for name, value in vars(module).items() if module else ():
        if value is base:
            return name
    return base.name


def headers_for(source: str, src_dir: Path) -> dict[str, str]:
    """The quoted ``#include`` files the source needs from ``src_dir`` (and theirs), by relative name."""
    found: dict[str, str] = {}
    todo = _INCLUDE.findall(source)
    while todo:
        rel = todo.pop()
        if rel in found:
            continue
        path = src_dir / rel
        if not path.is_file():
            continue  # left to the compiler: it reports a missing include plainly
        text = path.read_text()
        found[rel] = text
        todo.extend(_INCLUDE.findall(text))
    return found


def _source_name(base: Target, backend: str, suffix: str) -> str:
    src = base.sources.get(backend)
    ext = src.suffix if src is not None else (".cu" if backend == "cuda" else ".cl")
    stem = src.stem if src is not None else base.name
    return f"{stem}{suffix}{ext}"


def proposal_target(proposal: Proposal, base: Target, *, workdir: Path) -> Target:
    """A Target equal to ``base`` (cases, reference, key, bytes_moved, wrapper) but with the proposal's
    source, space, default and launch: what the tuner searches. Writes the source, the headers it
    includes, the proposal and a small loader under ``workdir`` (scratch, e.g. .ktune/agent/)."""
    proposal.validate()
    digest = hashlib.sha256(
        (proposal.digest() + base.module + str(base.file) + base.name).encode()).hexdigest()[:12]
    folder = workdir / f"p-{digest}"
    folder.mkdir(parents=True, exist_ok=True)
    src_dir = base.sources[proposal.backend].parent if proposal.backend in base.sources else base.file.parent
    for rel, text in headers_for(proposal.source, src_dir).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    source_name = _source_name(base, proposal.backend, "_proposal")
    (folder / source_name).write_text(proposal.source)
    meta = {"proposal": proposal.to_json(), "source": source_name, "module": f"_ktune_proposal_{digest}",
            "name": base.name, "base": {"module": base.module, "file": str(base.file), "name": base.name,
                                        "sys_path": list(sys.path)}}
    (folder / "proposal.json").write_text(json.dumps(meta, indent=1))
    loader = folder / "proposal_target.py"
    loader.write_text(_LOADER)
    module_name = meta["module"]
    assert isinstance(module_name, str)
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, loader)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    t = module.TARGET
    assert isinstance(t, Target)
    return t


def scratch_target(loader: Path) -> Target:
    """The target a generated loader defines (called in the worker and in this process)."""
    from .._worker import TargetRef, _import_target

    meta = json.loads(loader.with_name("proposal.json").read_text())
    b = meta["base"]
    base = _import_target(TargetRef(module=b["module"], file=b["file"], name=b["name"],
                                    sys_path=tuple(b["sys_path"])))
    proposal = Proposal.from_json(meta["proposal"], backend=meta["proposal"]["backend"])
    exprs = proposal.launch_exprs()

    def launcher(kernel: Any, **bound: Any) -> Any:
        return base.fn(_Relaunch(kernel, exprs, base.key(bound), base.default), **bound)

    launcher.__name__ = base.fn.__name__
    return Target(
        name=meta["name"], fn=launcher, sources={proposal.backend: loader.with_name(meta["source"])},
        space=proposal.as_space(), default=dict(proposal.default), key_fn=base.key_fn, cases=base.cases,
        reference=base.reference, file=loader.resolve(), module=meta["module"], kernel_name=base.kernel_name,
        tolerance=base.tolerance, bytes_moved=base.bytes_moved, flops=base.flops,
        defines_fn=base.defines_fn, _signature=base._signature)


# -- checking ---------------------------------------------------------------------------------


def _fail(stage: str, message: str) -> ProposalCheck:
    return ProposalCheck(ok=False, stage=stage, message=message, checked=(), failures=())


def _stage_of(status: str, reason: str) -> str:
    if status == "infeasible":
        return "limits"
    if reason.startswith("compile error"):
        return "compile"
    if reason.startswith("no answer within"):
        return "timeout"
    low = reason.lower()
    if reason.startswith("the worker process") or "illegal" in low or "out of bounds" in low \
            or "misaligned" in low:
        return "crash"
    return "verify"


def sample_configs(space: Space, keys: Sequence[Mapping[str, Any]], default: Mapping[str, Value], *,
                   sample: int, seed: int) -> list[dict[str, Value]]:
    """The default, then up to ``sample`` other points valid for every key, drawn with ``seed``."""
    pool: list[dict[str, Value]] = []
    for i, p in enumerate(space.points()):
        if i >= _MAX_POINTS:
            break
        if p != dict(default) and all(space.valid(p, k) for k in keys):
            pool.append(p)
    rng = random.Random(seed)
    picked = rng.sample(pool, min(sample, len(pool)))
    return [dict(default), *picked]


def check_proposal(proposal: Proposal, base: Target, *, root: Path, backend: str, sample: int = 8,
                   seed: int = 0, trial_timeout_s: float = 60.0) -> ProposalCheck:
    """Compile and verify the default plus ``sample`` configurations drawn (seeded) from the space, on
    every case of ``base`` that runs on ``backend``, on fresh inputs, in the isolated worker. Never
    raises for a bad proposal: the result says what went wrong."""
    from .._bench import BenchConfig
    from .._worker import TargetRef, WorkerPool, WorkerSpec

    if proposal.backend != backend:
        return _fail("schema", f"the proposal is for {proposal.backend}, the check runs on {backend}")
    try:
        proposal.validate()
    except KtuneError as exc:
        return _fail("schema" if not isinstance(exc, SpaceError) else "space", _render(exc))
    indices = [i for i, c in enumerate(base.cases) if c.runs_on(backend)]
    if not indices:
        return _fail("space", f"{base.where}: no case runs on {backend}")
    keys = [base.case_key(base.cases[i]) for i in indices]
    space = proposal.as_space()
    try:
        space.check_names(list(keys[0]))
    except SpaceError as exc:
        return _fail("space", _render(exc))
    key_names = set().union(*(set(k) for k in keys))
    for dim, expr in proposal.launch_exprs().items():
        # Names the wrapper binds are only known when it runs; parameters and key dims are checked there too.
        shadowed = sorted(expr.names & key_names & set(proposal.space))
        if shadowed:
            return _fail("space", f"launch.{dim} names {', '.join(shadowed)}, both a parameter and a key "
                                  "dimension; rename the parameter")
    for k in keys:
        broken = space.violated(proposal.default, k)
        if broken:
            return _fail("space", f"the default {dict(proposal.default)} breaks {'; '.join(broken)} for key "
                                  f"{_kv(k)}")
    configs = sample_configs(space, keys, proposal.default, sample=sample, seed=seed)
    try:
        target = proposal_target(proposal, base, workdir=root / ".ktune" / "agent" / "proposals")
    except (KtuneError, OSError) as exc:
        return _fail("schema", f"cannot prepare the proposal: {exc}")
    bench = BenchConfig(min_sample_s=0.0, min_samples=1, max_samples=1, max_time_s=0.0, ci_target=1.0,
                        max_repeats=1, warmup=0)
    spec = WorkerSpec(target=TargetRef.of(target), backend=backend, cases=tuple(indices),
                      cache_dir=str(root / ".ktune" / "cache" / backend), bench=bench)
    checked: list[Mapping[str, Value]] = []
    failures: list[tuple[Mapping[str, Value], str]] = []
    infeasible: list[tuple[Mapping[str, Value], str]] = []
    first = ""
    first_stage = "ok"
    try:
        with WorkerPool(spec, trial_timeout_s=trial_timeout_s) as pool:
            for i, out in enumerate(pool.evaluate(configs, seed)):
                cfg = dict(out.params)
                if out.status == "ok":
                    checked.append(cfg)
                    continue
                stage = _stage_of(out.status, out.reason)
                if stage == "limits" and i > 0:
                    infeasible.append((cfg, out.reason))
                    continue
                failures.append((cfg, out.reason))
                if not first:
                    which = "the default" if i == 0 else "the sampled configuration"
                    first, first_stage = f"{which} {_kv(cfg)} failed ({stage}): {out.reason}", stage
                if stage in ("crash", "timeout"):
                    break  # each costs a restarted worker; one is enough to send back
    except KtuneError as exc:
        return _fail("crash", f"the worker could not run the proposal: {exc.message}")
    if failures:
        return ProposalCheck(ok=False, stage=first_stage, message=first, checked=tuple(checked),
                             failures=tuple(failures), infeasible=tuple(infeasible))
    return ProposalCheck(ok=True, stage="ok", message=f"{len(checked)} configurations verified on "
                                                      f"{len(indices)} cases",
                         checked=tuple(checked), failures=(), infeasible=tuple(infeasible))


def _render(exc: KtuneError) -> str:
    return exc.message + (f" (next step: {exc.hint})" if exc.hint else "")


# -- writing a verified template ----------------------------------------------------------------


def _signature_text(base: Target) -> tuple[str, str]:
    """The generated function's parameter list and the keyword call passing them on."""
    params, call = ["kernel: ktune.Kernel"], []
    for p in base._signature.parameters.values():
        if p.kind not in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            raise ProposalError(f"the wrapper's parameter {p.name} is *args or **kwargs", where=base.where,
                                hint="write the template's .py by hand for this target")
        if p.default is inspect.Parameter.empty:
            params.append(f"{p.name}: Any")
        else:
            text = repr(p.default)
            try:
                ast.literal_eval(text)
            except (ValueError, SyntaxError):
                raise ProposalError(f"the default of the wrapper's parameter {p.name} ({text}) is not a "
                                    "literal", where=base.where,
                                    hint="write the template's .py by hand for this target") from None
            params.append(f"{p.name}: Any = {text}")
        call.append(f"{p.name}={p.name}")
    return ", ".join(params), ", ".join(call)


def template_files(proposal: Proposal, base: Target, *, dest: Path, suffix: str = "_tpl") -> dict[Path, str]:
    """The files ``write_template`` writes, by path: the kernel source, the headers it includes (when
    ``dest`` is not the base source's folder) and the ``.py`` with the ``@ktune.target``."""
    proposal.validate()
    src = base.sources.get(proposal.backend)
    src_dir = src.parent if src is not None else base.file.parent
    files: dict[Path, str] = {}
    source_name = _source_name(base, proposal.backend, suffix)
    files[dest / source_name] = proposal.source
    if dest.resolve() != src_dir.resolve():
        for rel, text in headers_for(proposal.source, src_dir).items():
            files[dest / rel] = text
    tname = f"{base.name}{suffix}"
    var = _module_vars_name(base)
    params, call = _signature_text(base)
    space = "".join(f"\n        {k}={list(v)!r}," for k, v in proposal.space.items())
    if proposal.constraints:
        space += f"\n        constraints={list(proposal.constraints)!r},"
    space += "\n    "
    try:
        origin_file = (src.relative_to(dest.resolve()) if src else base.file.name)
    except ValueError:
        origin_file = src.name if src else base.file.name
    notes = proposal.notes.strip().replace('"""', "'''").replace("\\", "/")
    doc = f"{base.name} as a template, generated by `ktune templatize` from {origin_file} (origin: " \
          f"{proposal.origin}).\n\nVerified against {base.name}'s reference on every case before it was written."
    if notes:
        doc += "\n\n" + notes
    py = f'''"""{doc}
"""

from __future__ import annotations

from typing import Any

import ktune
from {base.module} import {var} as _base
from pytest_ktune.agent._proposal import relaunch

# How the base wrapper's launch geometry follows from the parameters (AST-checked arithmetic).
LAUNCH = {dict(proposal.launch)!r}


@ktune.target(
    sources={{{proposal.backend!r}: {source_name!r}}},
    space=ktune.Space({space}),
    default={dict(proposal.default)!r},
    key=_base.key_fn,
    cases=_base.cases,
    reference=_base.reference,
    tolerance=_base.tolerance,
    bytes_moved=_base.bytes_moved,
    flops=_base.flops,
    defines=_base.defines_fn,
    kernel=_base.kernel_name,
    name={tname!r},
)
def {tname}({params}) -> Any:
    return relaunch(_base, kernel, LAUNCH, {call})
'''
    files[dest / f"{Path(source_name).stem}.py"] = py
    return files


def write_template(proposal: Proposal, base: Target, *, dest: Path) -> list[Path]:
    """Write the verified template as a new .cu/.cl plus a new .py @ktune.target beside it. Never
    overwrites a file: raises with a hint if one exists (a header already there with the same text is
    kept as it is)."""
    files = template_files(proposal, base, dest=dest)
    source_name = _source_name(base, proposal.backend, "_tpl")
    own = {dest / source_name, dest / f"{Path(source_name).stem}.py"}
    for path, text in files.items():
        if path.exists() and (path in own or path.read_text() != text):
            raise KtuneError(f"{path} exists; the template was not written", where=base.where,
                             hint="pass another --out folder, or move the old file away first")
    dest.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for path, text in files.items():
        if path.exists():
            continue  # a shared header with the same text
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("x") as fh:
            fh.write(text)
        written.append(path)
    return written
