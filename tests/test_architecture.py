"""The package's structure as docs/architecture.md draws it: no import cycle at module or function
level, no module past a few screens, and every layer saying what it may import. (lint-imports checks
the layers themselves, in CI.)"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path
from typing import Any

import pytest

from pytest_ktune.core.project import read_toml

grimp = pytest.importorskip("grimp", reason="grimp (a dev dependency, with import-linter) reads the import graph")

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_ktune"
MAX_LINES = 500


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_between_modules() -> None:
    # grimp reads every import statement, at module level and inside functions alike.
    graph = grimp.build_graph("pytest_ktune", cache_dir=None)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert _cycles(edges) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_module_fits_on_a_few_screens() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_every_layer_says_what_it_may_import() -> None:
    for init in PACKAGE.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert doc, f"{init.parent.name} has no docstring"
        if init.parent.name != "testing":
            assert "May import" in doc, f"{init.parent.name}'s docstring does not say what it may import"


def _contracts() -> list[dict[str, Any]]:
    contracts: list[dict[str, Any]] = read_toml(PACKAGE.parent / "pyproject.toml")["tool"]["importlinter"]["contracts"]
    return contracts


def _rows() -> list[list[str]]:
    """The layer contract's rows, top first, each the names of its packages (``run``, ``gate``)."""
    (layers,) = [c["layers"] for c in _contracts() if c["type"] == "layers"]
    rows = []
    for row in layers:
        assert ":" not in row, f"{row}: siblings that import each other are one package's business, not the map's"
        rows.append([name.strip().removeprefix("pytest_ktune.") for name in row.split("|")])
    return rows


def _package_edges() -> dict[str, set[str]]:
    """Which of the package's top-level modules and subpackages import which (directly)."""
    graph = grimp.build_graph("pytest_ktune", cache_dir=None)
    edges: dict[str, set[str]] = {}
    for module in graph.modules:
        parts = module.split(".")
        if len(parts) < 2:
            continue
        for imported in graph.find_modules_directly_imported_by(module):
            other = imported.split(".")
            if len(other) >= 2 and other[1] != parts[1]:
                edges.setdefault(parts[1], set()).add(other[1])
    return edges


def test_every_layer_is_on_the_map() -> None:
    on_map = [name for row in _rows() for name in row]
    layers = sorted(p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
                    if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file())
    assert sorted(on_map) == layers  # each subpackage and top-level module in one row, once


def test_layers_import_only_the_rows_below_and_siblings_not_each_other() -> None:
    # What lint-imports checks, said again from the import graph itself, so this suite fails too.
    row_of = {name: i for i, row in enumerate(_rows()) for name in row}
    upward = sorted(f"{a} -> {b}" for a, imported in _package_edges().items() for b in imported
                    if row_of[a] >= row_of[b])
    assert upward == []


def _unrelated(rows: list[list[str]], edges: dict[str, set[str]]) -> list[str]:
    """The rows drawn over the next although nothing of the one imports anything of the other."""
    return [f"{' | '.join(upper)} over {' | '.join(lower)}" for upper, lower in itertools.pairwise(rows)
            if not any(b in edges.get(a, set()) for a in upper for b in lower)]


def test_a_row_stands_on_the_row_below_it() -> None:
    # Two rows are drawn one above the other only where something of the upper imports something of
    # the lower: rows that never meet are siblings and belong in one row (a | b).
    assert _unrelated(_rows(), _package_edges()) == []


def test_independent_packages_import_nothing_of_each_other() -> None:
    edges = _package_edges()
    for contract in _contracts():
        if contract["type"] != "independence":
            continue
        names = [m.removeprefix("pytest_ktune.") for m in contract["modules"]]
        assert [f"{a} -> {b}" for a in names for b in names if b in edges.get(a, set())] == [], contract["name"]


def test_the_map_tells_a_stack_from_siblings() -> None:
    # The check above fails on a contract that stacks two siblings (the gate over the tuner, say).
    edges = {"report": {"gate", "tuner"}, "gate": {"measure"}, "tuner": {"measure"}}
    assert _unrelated([["report"], ["tuner"], ["gate"], ["measure"]], edges) == ["tuner over gate"]
    assert _unrelated([["report"], ["gate", "tuner"], ["measure"]], edges) == []


def _imported_names(node: ast.AST) -> set[tuple[str, str]]:
    """The (module, name) pairs that the ``from ... import`` statements directly in ``node`` bind."""
    return {(n.module or "", a.name) for n in ast.iter_child_nodes(node)
            if isinstance(n, ast.ImportFrom) for a in n.names}


def _dead_imports(tree: ast.Module) -> list[str]:
    """Imports that cannot be needed: a name imported again inside a function that the module imports
    already, an ``except ImportError`` around an import of the package's own modules (it can only
    hide a broken install), and an ``if TYPE_CHECKING:`` that holds nothing but ``pass``."""
    found = []
    top = _imported_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += [f"line {n.lineno}: {n.module}.{a.name} again" for n in ast.walk(node)
                      if isinstance(n, ast.ImportFrom) for a in n.names if (n.module or "", a.name) in top]
        if isinstance(node, ast.Try) and any(isinstance(h.type, ast.Name) and h.type.id == "ImportError"
                                             for h in node.handlers):
            own = [n for n in node.body
                   if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("pytest_ktune")]
            found += [f"line {n.lineno}: except ImportError around {n.module}" for n in own]
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING" \
                and all(isinstance(n, ast.Pass) for n in node.body):
            found.append(f"line {node.lineno}: an empty if TYPE_CHECKING")
    return found


def test_no_import_is_dead() -> None:
    dead = {str(p.relative_to(PACKAGE)): found for p in sorted(PACKAGE.rglob("*.py"))
            if (found := _dead_imports(ast.parse(p.read_text())))}
    assert dead == {}


def test_dead_imports_are_found() -> None:
    text = ("from typing import TYPE_CHECKING\nfrom a import b\nif TYPE_CHECKING:\n    pass\n"
            "def f():\n    from a import b\n    try:\n        from pytest_ktune.x import y\n"
            "    except ImportError:\n        pass\n")
    assert sorted(_dead_imports(ast.parse(text))) == ["line 3: an empty if TYPE_CHECKING", "line 6: a.b again",
                                                      "line 8: except ImportError around pytest_ktune.x"]
