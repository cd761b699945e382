"""Where a run's options come from: the command line, the environment, and the project's files.

One table (``core.options``: a field of ``Options`` per option) names every option once; pytest's
``--ktune-*`` options and ini keys and the ``ktune`` command's options are made from it, and
``resolve`` merges what was given into a ``RunOptions``, the table's values for one run. For each
option the first of these that gives it wins:

1. the command line: ``--ktune-NAME`` under pytest, ``--NAME`` for the ``ktune`` command;
2. the environment, for the options a CI job sets: ``KTUNE_NAME`` (``KTUNE_THRESHOLD``, ...);
3. pytest's ini file (``pytest.ini``, ``[tool.pytest.ini_options]`` of ``pyproject.toml``,
   ``tox.ini``, ``setup.cfg``): ``ktune_NAME``;
4. the ``[tool.ktune]`` table of the nearest ``pyproject.toml`` that has one: ``NAME``;
5. the default.

A path given in a file is relative to that file's folder; one given on the command line or in
the environment, to the folder the command runs in. The params file keeps its own rule
(``core.paths``): a path from a file ranks below ``KTUNE_PARAMS`` there too.

Nothing here imports more than the standard library (and ``iniconfig``, pytest's own ini reader,
when the ``ktune`` command reads an ini file), so pytest can register the options for free.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.options import BY_NAME, OPTIONS, Option, OptionError, Options
from pytest_ktune.core.project import Located, locate, read_toml

TABLE = "tool.ktune"


def default_text(o: Option) -> str:
    """The default as the help shows it."""
    if o.kind is bool:
        return "off"
    return "none" if o.default is None else str(o.default)


def help_text(o: Option, where: str, words: Callable[[str], str] | None = None) -> str:
    """The option's line in ``--help``: what it does (``words`` rewrites it for the ``ktune`` command),
    its default (where its text does not say it already), and ``[where]`` else it can be given;
    escaped for argparse."""
    text = o.help if o.kind is bool or "default" in o.help else f"{o.help} (default: {default_text(o)})"
    return f"{words(text) if words else text} [{where}]".replace("%", "%%")


_FLAG = re.compile(r"--ktune-([a-z][a-z0-9-]*)")


def cli_text(text: str, flags: Mapping[str, str] | None = None) -> str:
    """A message written with pytest's flags (``--ktune-write``), as the ``ktune`` command says it:
    each flag the command has becomes its own (``--write``; ``flags`` maps an option's name to a
    subcommand's own flag where it differs), and pytest's only flags stay as they are."""

    def swap(m: re.Match[str]) -> str:
        name = m.group(1).replace("-", "_")
        if flags and name in flags:
            return flags[name]
        o = BY_NAME.get(name)
        return o.cli_flag if o is not None and o.cli else m.group(0)

    return _FLAG.sub(swap, text)


@dataclass(frozen=True)
class ConfigFiles:
    """What the project's files say: pytest's ini keys (as text) and the ``[tool.ktune]`` table."""

    ini: Mapping[str, Any] = field(default_factory=dict)  # by ini key (``ktune_threshold``)
    ini_path: Path | None = None
    table: Mapping[str, Any] = field(default_factory=dict)  # by option name (``threshold``)
    table_path: Path | None = None


@dataclass(frozen=True, kw_only=True)
class RunOptions(Options):
    """The options of one run as given, every one merged from where it was given (``resolve``), and the
    project they were given for. Paths are absolute."""

    root: Path
    command: str = ""  # the command line that ran, for what a write-back says
    params_configured: Path | None = None  # the params file the project's files name (below KTUNE_PARAMS)
    origins: Mapping[str, str] = field(default_factory=dict)  # ``command line``, ``KTUNE_TRIALS``, a file

    def origin(self, name: str) -> str:
        """Where the option ``name`` came from (``default`` where it was not given)."""
        return self.origins.get(name, "default")

    def named(self, name: str, flag: str) -> str:
        """How a message names the option: its flag, or where it was set when that was not the
        command line."""
        origin = self.origin(name)
        return flag if origin in ("default", "command line") else f"{name} (set in {origin})"


def resolve(given: Mapping[str, Any], files: ConfigFiles, *, root: Path, command: str = "",
            env: Mapping[str, str] | None = None, cwd: Path | None = None) -> RunOptions:
    """Each option's value by the order of the module docstring, for the project at ``root``.
    ``given``: the command line's values, None (or absent) where an option was not given."""
    environ = os.environ if env is None else env
    here = (cwd or Path.cwd()).resolve()
    unknown = sorted(k for k in files.table if k.replace("-", "_") not in BY_NAME or k == "ktune")
    if unknown:
        names = ", ".join(o.name for o in OPTIONS if o.name != "ktune")
        raise OptionError(f"[{TABLE}] in {files.table_path} has unknown keys: {', '.join(unknown)}",
                          hint=f"the keys it takes: {names}")
    table = {k.replace("-", "_"): v for k, v in files.table.items()}
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    configured: Path | None = None
    for o in OPTIONS:
        value, origin, base = None, "default", here
        if given.get(o.name) is not None:
            value, origin = given[o.name], "command line"
        elif o.env and environ.get(o.env_name, "").strip():
            value, origin = o.parse(environ[o.env_name], o.env_name), o.env_name
        elif files.ini.get(o.ini) not in (None, ""):
            where = f"{o.ini} in {files.ini_path}"
            value, origin = o.parse(files.ini[o.ini], where), str(files.ini_path)
            base = files.ini_path.parent if files.ini_path else here
        elif o.name in table:
            where = f"{o.name} in [{TABLE}] of {files.table_path}"
            value, origin = o.parse(table[o.name], where), f"[{TABLE}] of {files.table_path}"
            base = files.table_path.parent if files.table_path else here
        if value is None:
            value = o.default
        elif o.path and origin != "default":
            path = (base / Path(str(value)).expanduser()).resolve()
            if o.name == "params" and origin != "command line":
                configured, value = path, None  # below KTUNE_PARAMS: core.paths decides
            else:
                value = str(path)
        values[o.name] = value
        origins[o.name] = origin
    return RunOptions(**values, root=root, command=command, params_configured=configured, origins=origins)


# -- the files, for the ``ktune`` command (pytest reads its own ini file) ------------------------


def _dig(doc: Mapping[str, Any], dotted: str) -> Any:
    node: Any = doc
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def ktune_table(start: Path) -> tuple[dict[str, Any], Path | None]:
    """The ``[tool.ktune]`` table of the nearest ``pyproject.toml`` at or above ``start`` that has one."""
    for folder in [start, *start.parents]:
        path = folder / "pyproject.toml"
        if path.is_file():
            try:
                table = _dig(read_toml(path), TABLE)
            except KtuneError as exc:
                raise OptionError(exc.message, hint=exc.hint) from None
            if table is not None:
                if not isinstance(table, Mapping):
                    raise OptionError(f"{TABLE} in {path} is not a table", hint=f"write [{TABLE}] and keys under it")
                return dict(table), path
    return {}, None


def project_files(start: Path, located: Located | None = None) -> ConfigFiles:
    """The project's configuration files as the ``ktune`` command finds them: pytest's ini file of
    the project ``located`` (``core.project``; by default the one whose rootdir is ``start``), and
    the nearest ``[tool.ktune]`` at or above its rootdir."""
    found = located or locate([], start, rootdir=start)
    table, table_path = ktune_table(found.rootdir)
    return ConfigFiles(ini=found.ini, ini_path=found.inifile, table=table, table_path=table_path)
