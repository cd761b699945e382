"""Finding ``@ktune.target`` kernels outside pytest: for the ``ktune`` command line."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.store import target_id
from pytest_ktune.core.target import Target

_SKIP_DIRS = {".git", ".hg", ".ktune", ".venv", "venv", "node_modules", "__pycache__", "build", "dist",
              ".tox", ".nox", ".mypy_cache", ".ruff_cache", ".pytest_cache", "site-packages"}


def candidate_files(root: Path) -> Iterator[Path]:
    """Python files under ``root`` that look like they define a target."""
    for path in sorted(root.rglob("*.py")):
        rel_parts = path.relative_to(root).parts
        if any(p in _SKIP_DIRS or (p.startswith(".") and p != ".") for p in rel_parts[:-1]):
            continue
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if "ktune" in text and ".target(" in text:
            yield path


def import_file(path: Path) -> object:
    """Import ``path`` as pytest's default (prepend) mode would: the package chain above it decides
    the module's name, and the folder above that goes on ``sys.path``."""
    path = path.resolve()
    parts = [path.stem]
    base = path.parent
    while (base / "__init__.py").exists():
        parts.insert(0, base.name)
        base = base.parent
    if str(base) not in sys.path:
        sys.path.insert(0, str(base))
    name = ".".join(parts)
    try:
        return importlib.import_module(name)
    except Exception as exc:
        raise KtuneError(f"importing {path} failed: {type(exc).__name__}: {exc}", where=str(path),
                         hint="fix the error, or run `python -c 'import ...'` on it to see the traceback") from exc


def discover(root: Path) -> list[Target]:
    """Every target defined in a Python file under ``root``, in file order."""
    found: list[Target] = []
    for path in candidate_files(root):
        module = import_file(path)
        mod_name = getattr(module, "__name__", "")
        found.extend(v for _, v in sorted(vars(module).items())
                     if isinstance(v, Target) and v.module == mod_name)
    return found


def select(targets: Sequence[Target], names: Sequence[str], root: Path) -> list[Target]:
    """The targets named (by name, or by ``file::name`` as the params file writes them)."""

    if not names:
        return list(targets)
    chosen: list[Target] = []
    for n in names:
        match = [t for t in targets if n in (t.name, target_id(t, root))]
        if not match:
            known = ", ".join(sorted({t.name for t in targets})) or "none"
            raise KtuneError(f"no target named {n!r} under {root}", hint=f"known targets: {known}")
        chosen.extend(t for t in match if t not in chosen)
    return chosen
