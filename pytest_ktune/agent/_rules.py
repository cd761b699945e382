"""The rule-based templater: a kernel's hard-coded launch constants exposed as parameters.

Used when no model is configured (and as the agent's first proposal). It only parameterises what
exists; it makes no structural rewrite (no vectorisation, no new loops), because it cannot verify
that one preserves the kernel's meaning. What it finds, in the kernel source for the backend:

- ``#define NAME <int>``: becomes a parameter, guarded by ``#ifndef NAME`` so ``-D NAME=v`` wins;
- ``constexpr int NAME = <int>;`` alone on its line: replaced by the same guarded macro;
- a literal ``__launch_bounds__(<int>)`` (CUDA) or ``reqd_work_group_size(<int>, 1, 1)`` (OpenCL);

and in the Python wrapper's ``kernel.launch(grid=..., block=...)``:

- a literal block size: becomes the block parameter (a source macro or constexpr of a block-like
  name with the same value, else ``BLOCK``), and the launch bounds literal of the same value with it;
- literal integers in the grid expression: one equal to the block size follows the block parameter;
  the bound of a top-level ``min(...)`` (a grid cap), or a literal grid, becomes ``GRID_CAP``.

Which names become parameters, and their space (the original value is always included, and is
the default), by whole words of the name (``BLOCK_SIZE`` is block-like, ``ARROWS`` is no ``ROWS``):

- block-like (BLOCK, THREADS, WG, WORK_GROUP, LOCAL_SIZE, TPB): powers of two from 32 up to
  ``min(1024, the device's threads per block)``;
- vector-like (VEC, VECTOR or PACK as a word of the name, or WIDTH alone): 1, 2, 4, 8, with
  ``D % NAME == 0`` for the row dimension ``D`` of the key (named H, I, D, N, K, hidden, inter, dim,
  cols, width, C; else the last integer key dimension);
- items-like (ITEMS, PER_THREAD, UNROLL, ILP, ELEMS, ROWS): 1, 2, 4, 8;
- grid caps (CAP, MAX_BLOCKS, MAX_GRID, GRID, NUM_BLOCKS): powers of two from 128 to 2**20 (2**20
  is in effect no cap).

Other constants (a warp size, a magic number) are left fixed and listed in the proposal's notes.
The base target's own parameters are kept (with their space and constraints) when the source uses
them or they have more than one value.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass

from pytest_ktune import backends
from pytest_ktune.agent._proposal import LaunchExpr, Proposal, ProposalError
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.space import Value
from pytest_ktune.core.target import Target
from pytest_ktune.core.words import VECTOR_NAME, NamePattern

# By whole words of the name (``core.words``): BLOCK_SIZE is block-like, ARROWS is not rows.
_KINDS: tuple[tuple[str, NamePattern], ...] = (
    ("vector", VECTOR_NAME),
    ("items", NamePattern("ITEMS", "PER_THREAD", "UNROLL", "ILP", "ELEMS", "ROWS")),
    ("cap", NamePattern("CAP", "MAX_BLOCKS", "MAX_GRID", "NUM_BLOCKS", "GRID")),
    ("block", NamePattern("BLOCK", "THREADS", "WG", "WORK_GROUP", "WORKGROUP", "LOCAL_SIZE", "TPB")),
)
_ROW_DIMS = ("H", "I", "D", "N", "K", "C", "hidden", "hidden_size", "inter", "intermediate", "dim", "head_dim",
             "cols", "width")
_DEFINE = re.compile(r"^([ \t]*)#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+\(?(\d+)\)?[ \t]*(//[^\n]*)?$", re.M)
_CONSTEXPR = re.compile(
    r"^([ \t]*)(?:static[ \t]+)?constexpr[ \t]+(?:unsigned[ \t]+)?(?:int|long long|long|size_t|unsigned)"
    r"[ \t]+([A-Za-z_]\w*)[ \t]*=[ \t]*(\d+)[ \t]*;[ \t]*(//[^\n]*)?$", re.M)
_BOUNDS = re.compile(r"__launch_bounds__\(\s*(\d+)\s*\)")
_REQD = re.compile(r"reqd_work_group_size\(\s*(\d+)\s*,\s*1\s*,\s*1\s*\)")


def kind_of(name: str) -> str | None:
    """block, vector, items or cap for a name the rules know; None for one they leave fixed."""
    for kind, pattern in _KINDS:
        if pattern.search(name):
            return kind
    return None


def values_for(kind: str, original: int, *, max_threads: int = 1024) -> tuple[int, ...]:
    """The space the rules give a parameter of this kind, around its original value."""
    if kind == "block":
        top = min(1024, max_threads)
        vals = {1 << k for k in range(5, 11) if (1 << k) <= top}
    elif kind in ("vector", "items"):
        vals = {1, 2, 4, 8}
    elif kind == "cap":
        vals = {1 << k for k in range(7, 21)}
    else:
        vals = set()
    vals.add(original)
    return tuple(sorted(vals))


def row_dim(key: Mapping[str, object]) -> str | None:
    """The key dimension a vector width must divide: a row-length name, else the last integer one."""
    ints = [k for k, v in key.items() if isinstance(v, int) and not isinstance(v, bool)]
    for k in ints:
        if k in _ROW_DIMS:
            return k
    return ints[-1] if ints else None


@dataclass(frozen=True)
class WrapperLaunch:
    """What the wrapper's ``kernel.launch`` call says about geometry: literals and the grid expression."""

    block: int | None
    grid_literal: int | None
    grid_expr: ast.expr | None


def wrapper_launch(base: Target) -> WrapperLaunch | None:
    """The first ``<kernel>.launch(...)`` in the wrapper's source, or None when it cannot be read."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(base.fn)))
    except (OSError, TypeError, SyntaxError):
        return None
    fn = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if fn is None or not fn.args.args:
        return None
    handle = fn.args.args[0].arg
    for node in ast.walk(fn):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "launch"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == handle):
            args = {"grid": node.args[0] if node.args else None,
                    "block": node.args[1] if len(node.args) > 1 else None}
            for kw in node.keywords:
                if kw.arg in args:
                    args[kw.arg] = kw.value
            block, grid = args["block"], args["grid"]
            return WrapperLaunch(block=_int_literal(block), grid_literal=_int_literal(grid),
                                 grid_expr=grid if grid is not None and _int_literal(grid) is None else None)
    return None


def _int_literal(node: ast.expr | None) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


class _GridRewrite(ast.NodeTransformer):
    """``ktune.cdiv`` -> ``cdiv``; the block literal -> the block parameter; a min() bound -> GRID_CAP."""

    def __init__(self, block: int | None, block_name: str, cap_name: str) -> None:
        self.block, self.block_name, self.cap_name = block, block_name, cap_name
        self.cap: int | None = None
        self.used_block = False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("cdiv", "min", "max"):
            node.func = ast.Name(id=node.func.attr, ctx=ast.Load())
        top_min = isinstance(node.func, ast.Name) and node.func.id == "min"
        new_args: list[ast.expr] = []
        for a in node.args:
            lit = _int_literal(a)
            if top_min and lit is not None and lit != self.block and self.cap is None:
                self.cap = lit
                new_args.append(ast.Name(id=self.cap_name, ctx=ast.Load()))
            else:
                new_args.append(self.visit(a))
        node.args = new_args
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if self.block is not None and type(node.value) is int and node.value == self.block:
            self.used_block = True
            return ast.Name(id=self.block_name, ctx=ast.Load())
        return node


def rule_proposal(base: Target, backend: str, *, max_threads: int = 1024) -> Proposal:
    """The rule-based template of ``base``'s kernel for ``backend`` (see the module docstring).

    Raises ProposalError when the rules find nothing to parameterise."""
    base = base.for_backend(backend)  # the base's own space on this backend (per_backend=)
    source = base.source_text(backend)
    keys = [base.case_key(c) for c in base.cases if c.runs_on(backend)]
    key = keys[0] if keys else {}
    space: dict[str, tuple[Value, ...]] = {}
    default: dict[str, Value] = {}
    constraints: list[str] = []
    fixed: list[str] = []
    found: list[str] = []

    for name, values in base.space.params.items():
        if len(values) > 1 or re.search(rf"\b{re.escape(name)}\b", source):
            space[name], default[name] = tuple(values), base.default[name]
    constraints.extend(c.text for c in base.space.constraints
                       if c.names <= set(space) | set(key))

    def add(name: str, value: int, kind: str) -> None:
        if name in space:
            return
        space[name] = values_for(kind, value, max_threads=max_threads)
        default[name] = value
        if kind == "vector":
            dim = row_dim(key)
            if dim is not None:
                constraints.append(f"{dim} % {name} == 0")

    # Source constants, guarded so that -D wins.
    def guard(m: re.Match[str]) -> str:
        indent, name, value = m.group(1), m.group(2), int(m.group(3))
        kind = kind_of(name)
        if kind is None or name in base.space.params:
            fixed.append(f"{name}={value}")
            return m.group(0)
        add(name, value, kind)
        found.append(f"{name}={value} ({kind})")
        comment = f" {m.group(4)}" if m.group(4) else ""
        return f"{indent}#ifndef {name}\n{indent}#define {name} {value}{comment}\n{indent}#endif"

    guarded = set(re.findall(r"#\s*ifndef\s+([A-Za-z_]\w*)", source))
    source = _DEFINE.sub(lambda m: m.group(0) if m.group(2) in guarded else guard(m), source)
    source = _CONSTEXPR.sub(guard, source)

    # The wrapper's literal geometry, tied to a block-like source constant of the same value.
    wl = wrapper_launch(base)
    launch: dict[str, str] = {}
    block_name: str | None = None
    if wl is not None and wl.block is not None:
        same = [n for n in space if kind_of(n) == "block" and default.get(n) == wl.block]
        block_name = same[0] if same else _free_name("BLOCK", space, source)
        add(block_name, wl.block, "block")
        launch["block"] = block_name
        found.append(f"block={wl.block} in the wrapper's launch -> {block_name}")
    bounds = _BOUNDS if backend == "cuda" else _REQD
    for m in list(bounds.finditer(source)):
        lit = int(m.group(1))
        if block_name is None or default.get(block_name) != lit:
            fixed.append(f"{m.group(0)} (no launch of {lit} threads to tie it to)")
            continue
        found.append(f"{m.group(0)} -> {block_name}")
    if block_name is not None:
        bname, bvalue = block_name, default[block_name]
        source = bounds.sub(lambda m: m.group(0).replace(m.group(1), bname)
                            if int(m.group(1)) == bvalue else m.group(0), source)
    if wl is not None:
        cap_name = _free_name("GRID_CAP", space, source)
        if wl.grid_literal is not None:
            add(cap_name, wl.grid_literal, "cap")
            launch["grid"] = cap_name
            found.append(f"grid={wl.grid_literal} -> {cap_name}")
        elif wl.grid_expr is not None:
            rw = _GridRewrite(wl.block, block_name or "", cap_name)
            expr = rw.visit(_copy(wl.grid_expr))
            text = ast.unparse(expr)
            try:
                LaunchExpr.parse(text, "launch.grid")
            except ProposalError:
                fixed.append(f"the grid expression {ast.unparse(wl.grid_expr)} (not plain arithmetic)")
            else:
                if rw.cap is not None or rw.used_block:
                    if rw.cap is not None:
                        add(cap_name, rw.cap, "cap")
                        found.append(f"grid cap {rw.cap} -> {cap_name}")
                    launch["grid"] = text

    new = [n for n in space if n not in base.space.params]
    if not new:
        raise ProposalError(f"the rules found no launch constant to parameterise in "
                            f"{base.source_path(backend)}" + (f" (left fixed: {', '.join(fixed)})" if fixed else ""),
                            where=base.where,
                            hint="use #define NAME <int>, constexpr int NAME = <int>, or literal block and grid "
                                 "sizes in kernel.launch(...), or write the template by hand")
    source = _guard_new(source, [n for n in new if re.search(rf"\b{n}\b", source) and
                                 not re.search(rf"#\s*ifndef\s+{n}\b", source)], default)
    notes = ("Rule-based template: parameters for " + "; ".join(found) + "."
             + (f" Left fixed: {', '.join(fixed)}." if fixed else "")
             + " No structural rewrite was made.")
    return Proposal(backend=backend, source=source, space=space, default=default,
                    constraints=tuple(dict.fromkeys(constraints)), launch=launch, origin="rules", notes=notes)


def _copy(node: ast.expr) -> ast.expr:
    copied = ast.parse(ast.unparse(node), mode="eval").body
    return copied


def _free_name(want: str, space: Mapping[str, object], source: str) -> str:
    name, n = want, 2
    while name in space or re.search(rf"\b{name}\b", source):
        name, n = f"{want}{n}", n + 1
    return name


def _guard_new(source: str, names: list[str], default: Mapping[str, Value]) -> str:
    """Guarded defaults for new parameters the source now uses, after its leading comment."""
    if not names:
        return source
    lines = source.splitlines(keepends=True)
    at = 0
    while at < len(lines) and lines[at].lstrip().startswith("//"):
        at += 1
    block = "".join(f"#ifndef {n}\n#define {n} {default[n]}\n#endif\n" for n in names)
    return "".join(lines[:at]) + block + "".join(lines[at:])


def device_max_threads(backend: str) -> int:
    """The device's threads per block, for the block-size space (1024 when it cannot be asked)."""

    try:
        return int(backends.create(backend).device.max_threads_per_block)
    except KtuneError:
        return 1024
