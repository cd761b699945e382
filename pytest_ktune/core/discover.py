"""Finding ``@ktune.target`` kernels outside pytest: for the ``ktune`` command line."""

from __future__ import annotations

import ast
import importlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.project import own_config
from pytest_ktune.core.store import target_id
from pytest_ktune.core.target import Target

_SKIP_DIRS = {".git", ".hg", ".ktune", ".venv", "venv", "node_modules", "__pycache__", "build", "dist",
              ".tox", ".nox", ".mypy_cache", ".ruff_cache", ".pytest_cache", "site-packages"}


def _skipped(name: str) -> bool:
    return name in _SKIP_DIRS or name.startswith(".")


def project_folders(root: Path) -> list[Path]:
    """The folders below ``root`` that are projects of their own: a configuration file of theirs
    would make them pytest's rootdir (``core.project``), so their targets are not ``root``'s."""
    found: list[Path] = []
    for folder, dirs, _ in os.walk(root):
        here = Path(folder)
        keep = []
        for d in sorted(dirs):
            if _skipped(d):
                continue
            if own_config(here / d) is not None:
                found.append(here / d)
            else:
                keep.append(d)
        dirs[:] = keep
    return found


_PACKAGES = ("ktune", "pytest_ktune")


def defines_targets(text: str) -> bool:
    """Whether a Python file's text may define a target: it calls ktune's ``target`` however it was
    imported (``import ktune``, ``import pytest_ktune as k``, ``from ktune import target as t``).
    Read, not imported, so pytest can ask it of every file it collects; a file that does not parse
    counts, so that importing it says what is wrong."""
    if "ktune" not in text:
        return False
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return True
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in _PACKAGES:
            if any(a.name in ("target", "*") for a in node.names):
                return True
        elif isinstance(node, ast.Import):
            modules.update(a.asname or a.name.split(".")[0] for a in node.names
                           if a.name.split(".")[0] in _PACKAGES)
    return any(isinstance(n, ast.Attribute) and n.attr == "target" and isinstance(n.value, ast.Name)
               and n.value.id in modules for n in ast.walk(tree))


def candidate_files(root: Path, within: Sequence[Path] = ()) -> Iterator[Path]:
    """Python files under ``root`` (under the files and folders ``within``, where given) that look
    like they define a target; a folder below them with a pytest configuration file of its own is
    another project (``project_folders``), and is left out."""
    files: list[Path] = []
    for start in within or (root,):
        if start.is_file():
            files.append(start)
            continue
        for folder, dirs, names in os.walk(start):
            here = Path(folder)
            dirs[:] = sorted(d for d in dirs if not _skipped(d) and own_config(here / d) is None)
            files.extend(here / n for n in names if n.endswith(".py"))
    for path in sorted(set(files)):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if defines_targets(text):
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


def discover(root: Path, within: Sequence[Path] = ()) -> list[Target]:
    """Every target defined in a Python file under ``root`` (or under ``within``), in file order."""
    found: list[Target] = []
    for path in candidate_files(root, within):
        module = import_file(path)
        mod_name = getattr(module, "__name__", "")
        found.extend(v for _, v in sorted(vars(module).items())
                     if isinstance(v, Target) and v.module == mod_name)
    return found


def _matches(t: Target, name: str, root: Path) -> bool:
    return name in (t.name, target_id(t, root), f"{t.file}::{t.name}")


def select(targets: Sequence[Target], names: Sequence[str], root: Path, *, command: str = "ktune tune") -> list[Target]:
    """The targets named (by name, by ``file::name`` as the params file writes them, or by the
    file's absolute path and name); a KtuneError for a name that none has, which says where else
    the name is: in a project of its own below ``root`` (``project_folders``)."""

    if not names:
        return list(targets)
    chosen: list[Target] = []
    for n in names:
        match = [t for t in targets if _matches(t, n, root)]
        if not match:
            known = ", ".join(sorted({t.name for t in targets})) or "none"
            there = _elsewhere(root, n, command)
            raise KtuneError(f"no target named {n!r} under {root}",
                             hint=f"{there}; the targets under {root}: {known}" if there else f"known targets: {known}")
        chosen.extend(t for t in match if t not in chosen)
    return chosen


def _elsewhere(root: Path, name: str, command: str) -> str:
    """Where else below ``root`` a target called ``name`` is: a hint naming the path to give."""
    short = name.rpartition("::")[2]
    for folder in project_folders(root):
        try:
            there = [t for t in discover(folder) if t.name == short]
        except KtuneError:
            continue
        if there:
            rel = os.path.relpath(folder)
            config = own_config(folder)
            return (f"{rel} is a project of its own ({config.name if config else 'its configuration file'}), "
                    f"with a target {short}: give its folder, as to pytest: {command} {rel} {short} "
                    f"(or --root {rel})")
    return ""
