"""Where a project is: pytest's rootdir and configuration file, by pytest's own documented rules
(https://docs.pytest.org/en/stable/reference/customize.html#finding-the-rootdir), so that the
``ktune`` command finds the project that ``pytest --ktune`` would find from the same folder and
paths; and whether a folder holds a project of its own (discovery does not walk into one).

From the paths given (the current folder when none is), their common ancestor; then, at it and
above, the first folder with a configuration file that pytest takes: ``pytest.toml``/
``.pytest.toml`` (pytest 9), ``pytest.ini``/``.pytest.ini`` (even empty), ``pyproject.toml`` with
``[tool.pytest]`` or ``[tool.pytest.ini_options]``, ``tox.ini`` with ``[pytest]``, ``setup.cfg``
with ``[tool:pytest]``. Failing that, a ``setup.py`` at or above the ancestor makes its folder the
rootdir; then the paths themselves are searched; then the first ``pyproject.toml`` seen, even
without pytest settings (pytest 8.1); else the ancestor is the rootdir, with no project around it.

Standard library only (and ``iniconfig``, pytest's own ini reader, when an ini file is read).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from pytest_ktune.core.errors import KtuneError


@lru_cache(maxsize=1)
def _pytest_version() -> tuple[int, ...]:
    try:
        text = metadata.version("pytest")
    except metadata.PackageNotFoundError:  # pragma: no cover - pytest is a dependency
        return (9,)
    return tuple(int(p) for p in text.split(".")[:2] if p.isdigit())


def config_names() -> tuple[str, ...]:
    """The configuration files pytest looks for in each folder, in its order."""
    toml = ("pytest.toml", ".pytest.toml") if _pytest_version() >= (9,) else ()
    return (*toml, "pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file as a dict; a KtuneError naming the file when it cannot be read."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - pytest depends on tomli below 3.11
        import tomli as tomllib
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise KtuneError(f"cannot read {path}: {exc}", hint="fix the TOML syntax there") from None


def config_of(path: Path) -> dict[str, Any] | None:
    """pytest's settings in the file ``path``, or None when pytest would not take it as its
    configuration file (a ``pyproject.toml`` without a pytest table, a ``tox.ini`` without
    ``[pytest]``)."""
    name = path.name
    if path.suffix == ".toml":
        doc = read_toml(path)
        if name in ("pytest.toml", ".pytest.toml"):
            section = doc.get("pytest")
            return dict(section) if isinstance(section, Mapping) else {}
        tool = doc.get("tool")
        native = tool.get("pytest") if isinstance(tool, Mapping) else None
        if not isinstance(native, Mapping):
            return None
        keys = {k: v for k, v in native.items() if k != "ini_options"}  # pytest 9's native TOML settings
        if keys and _pytest_version() >= (9,):
            return keys
        ini = native.get("ini_options")
        return dict(ini) if isinstance(ini, Mapping) else None
    import iniconfig

    try:
        parsed = iniconfig.IniConfig(str(path))
    except (OSError, iniconfig.ParseError) as exc:
        raise KtuneError(f"cannot read {path}: {exc}", hint="fix the ini syntax there") from None
    section = "tool:pytest" if path.suffix == ".cfg" else "pytest"
    if section in parsed:
        return dict(parsed[section].items())
    return {} if name in ("pytest.ini", ".pytest.ini") else None


def own_config(folder: Path) -> Path | None:
    """The configuration file in ``folder`` itself that pytest would take, or None."""
    for name in config_names():
        path = folder / name
        if path.is_file() and config_of(path) is not None:
            return path
    return None


@dataclass(frozen=True)
class Located:
    """The project found: its rootdir, the configuration file and what pytest reads in it."""

    rootdir: Path
    inifile: Path | None = None
    ini: Mapping[str, Any] = field(default_factory=dict)
    by_setup_py: bool = False  # the rootdir is where a setup.py is (no configuration file)
    explicit: bool = False  # the rootdir was given (``--root``)

    @property
    def is_project(self) -> bool:
        """Whether a configuration file, a setup.py or ``--root`` says that the rootdir is a project
        (rather than the folder the command happened to run in)."""
        return self.inifile is not None or self.by_setup_py or self.explicit


def _locate_config(starts: Iterable[Path]) -> tuple[Path | None, dict[str, Any], Path | None]:
    """The nearest configuration file at or above each start (pytest's ``locate_config``), what it
    holds, and the first ``pyproject.toml`` seen on the way (pytest's fallback)."""
    first_pyproject: Path | None = None
    for start in starts:
        for folder in (start, *start.parents):
            for name in config_names():
                path = folder / name
                if not path.is_file():
                    continue
                if name == "pyproject.toml" and first_pyproject is None:
                    first_pyproject = path
                found = config_of(path)
                if found is not None:
                    return path, found, first_pyproject
    return None, {}, first_pyproject


def _common_ancestor(paths: Sequence[Path], invocation_dir: Path) -> Path:
    existing = [p for p in paths if p.exists()]
    if not existing:
        return invocation_dir
    common = Path(os.path.commonpath([str(p) for p in existing]))
    return common.parent if common.is_file() else common


def locate(paths: Sequence[Path], invocation_dir: Path, *, rootdir: Path | None = None) -> Located:
    """The rootdir and configuration file by pytest's rules (the module's docstring) for a run in
    ``invocation_dir`` with these ``paths`` (files or folders; those that do not exist are left out,
    as pytest does). ``rootdir`` (``--root``) is the rootdir as given, with the configuration file
    found from it, as pytest's ``--rootdir`` run from that folder."""
    here = invocation_dir.resolve()
    if rootdir is not None:
        root = rootdir.resolve()
        if not root.is_dir():
            raise KtuneError(f"no folder {rootdir}", hint="give --root the project's folder")
        found = _config_or_fallback([root])
        return Located(root, found.inifile if found else None, found.ini if found else {}, explicit=True)
    given = [p if p.is_absolute() else here / p for p in paths]
    dirs = [(p if p.is_dir() else p.parent).resolve() for p in given if p.exists()]
    ancestor = _common_ancestor(dirs, here)
    found = _config_or_fallback([ancestor])
    if found is not None:
        return found
    for folder in (ancestor, *ancestor.parents):
        if (folder / "setup.py").is_file():
            return Located(folder, by_setup_py=True)
    if dirs and dirs != [ancestor]:
        found = _config_or_fallback(dirs)
        if found is not None:
            return found
    root = _common_ancestor([here, ancestor], here)
    return Located(ancestor if root == Path(root.anchor) else root)


def _config_or_fallback(starts: Sequence[Path]) -> Located | None:
    inifile, ini, fallback = _locate_config(starts)
    if inifile is not None:
        return Located(inifile.parent, inifile, ini)
    if fallback is not None and _pytest_version() >= (8, 1):
        return Located(fallback.parent, fallback, {})
    return None


def split_args(args: Sequence[str], cwd: Path) -> tuple[list[Path], list[str]]:
    """The command's positional arguments, as pytest takes its own: one that names a file or folder
    (the part before ``::``) is a path (absolute), the others target names; ``path::name`` is both,
    the name then given as ``ABSOLUTE-PATH::name``."""
    paths: list[Path] = []
    names: list[str] = []
    for arg in args:
        file, sep, name = arg.partition("::")
        path = cwd / file
        if file and path.exists():
            paths.append(path.resolve())
            if sep:
                names.append(f"{path.resolve()}::{name}")
        else:
            names.append(arg)
    return paths, names


def _shown(path: Path, cwd: Path) -> str:
    """``path`` as the user reads it: relative to ``cwd`` when under it."""
    try:
        rel = path.resolve().relative_to(cwd.resolve())
    except ValueError:
        return str(path)
    return rel.as_posix() or "."


def describe(found: Located, params: Path | None, cwd: Path) -> str:
    """One line: the project's folder, how it was found, and its params file (``new`` when a tune
    would make it)."""
    if found.explicit:
        how = "--root" + (f", ini file {_shown(found.inifile, cwd)}" if found.inifile else "")
    elif found.inifile is not None:
        how = f"rootdir of {_shown(found.inifile, cwd)}"
    elif found.by_setup_py:
        how = "rootdir of its setup.py"
    else:
        how = "not a project: no pytest.ini, pyproject.toml, tox.ini or setup.cfg here or above"
    line = f"project {_shown(found.rootdir, cwd)} ({how})"
    if params is None:
        return line
    return f"{line}; params {_shown(params, cwd)}{'' if params.is_file() else ' (new)'}"
