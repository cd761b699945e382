"""Where a run's options come from: the command line, the environment, and the project's files.

One table (``OPTIONS``) names every option once; pytest's ``--ktune-*`` options and ini keys and
the ``ktune`` command's options are made from it, and ``resolve`` merges what was given into the
``RunOptions`` of ``run.options``. For each option the first of these that gives it wins:

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
from pytest_ktune.core.names import AUTO, BACKENDS, DEFAULT_SAMPLER, DEFAULT_WRITE, SAMPLERS, WRITE_MODES
from pytest_ktune.core.project import Located, locate, read_toml

TABLE = "tool.ktune"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


@dataclass(frozen=True)
class Option:
    """One option of a run, by the field of ``RunOptions`` it fills."""

    name: str
    kind: type  # bool, int, float or str
    default: Any
    help: str
    env: bool = False  # read from KTUNE_<NAME> too (the options a CI job sets)
    metavar: str | None = None
    path: bool = False  # a path: relative to where it was given
    cli: bool = True  # the ``ktune`` command has it too (as --NAME)

    @property
    def flag(self) -> str:
        """pytest's option."""
        return "--ktune" if self.name == "ktune" else "--ktune-" + self.name.replace("_", "-")

    @property
    def cli_flag(self) -> str:
        """The ``ktune`` command's option."""
        return "--" + self.name.replace("_", "-")

    @property
    def ini(self) -> str:
        """The key in pytest's ini file."""
        return "ktune" if self.name == "ktune" else "ktune_" + self.name

    @property
    def env_name(self) -> str:
        return "KTUNE_" + self.name.upper()

    def parse(self, raw: Any, where: str) -> Any:
        """``raw`` (text from the environment or an ini file, or a TOML value) as this option's type;
        an OptionError naming ``where`` when it is not one."""
        if raw is None:
            return None
        if self.kind is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in _TRUE or text in _FALSE:
                return text in _TRUE
            raise OptionError(f"{where}: {raw!r} is not true or false", hint="write true or false")
        if isinstance(raw, bool):
            raise OptionError(f"{where}: {raw!r} is not a {_kind_name(self.kind)}",
                              hint=f"give {self.metavar or 'a value'}, e.g. {self.default!r}")
        if self.kind in (int, float):
            try:
                return self.kind(str(raw).strip()) if self.kind is int else float(raw)
            except ValueError:
                raise OptionError(f"{where}: {raw!r} is not a {_kind_name(self.kind)}",
                                  hint=f"e.g. {self.name} = {self.default or 1}") from None
        return str(raw)


def _kind_name(kind: type) -> str:
    return {int: "whole number", float: "number", str: "string", bool: "boolean"}[kind]


class OptionError(KtuneError):
    """An option that cannot be used as given; the message names it and where it was given."""


_WRITE_HELP = ("what to do with tuned winners: " + ", ".join(WRITE_MODES) + " or a plugin's mode. none "
               "(report only, the default), file (update the params file in place), patch (a "
               "git-apply-able patch under .ktune/patches), commit (a new branch ktune/..., your "
               "checkout untouched), pr (commit, push, open or update a pull request; needs GITHUB_TOKEN)")

OPTIONS: tuple[Option, ...] = (
    Option("ktune", bool, False, "collect @ktune.target kernels: a correctness and a performance item per case",
           cli=False),
    Option("backend", str, AUTO, f"where kernels run: {' or '.join(BACKENDS)} (CuPy, PyOpenCL), a plugin's "
           f"backend, or {AUTO}: cuda when a GPU is visible, else opencl", env=True, metavar="NAME"),
    Option("threshold", str, "median:5%", "how much slower than its baseline a kernel may get before its "
           "performance item fails, once confirmed by A/B (a target's own threshold= wins)", env=True,
           metavar="STAT:PCT", cli=False),
    Option("update_baseline", bool, False, "record the measured timings as the new baselines in the params "
           "file", cli=False),
    Option("base", str, None, "a git ref (origin/main, the merge base): every target whose source, included "
           "files or parameters differ from REF's is timed A/B against REF's in this run, baseline or not; a "
           "record or baseline REF has that is missing here is an error", env=True, metavar="REF", cli=False),
    Option("strict", bool, False, "fail closed: a params file that does not exist, a case with no baseline on "
           "a machine that has baselines, or a changed case that cannot be A/B'd is an error, not a note "
           "(for merge gates)", env=True, cli=False),
    Option("seed", int, None, "base seed for the random inputs and the sampler (default: a new one each "
           "run, which pytest's header shows)", env=True, metavar="N"),
    Option("params", str, None, "the params file (default: $KTUNE_PARAMS, else the nearest "
           "ktune-params.json at or above the rootdir, else one at the rootdir)", metavar="PATH", path=True),
    Option("tune", bool, False, "tune every selected target for every key of its cases (Optuna), and keep "
           "a winner that beats the current parameters in same-run A/B", cli=False),
    Option("autotune", bool, False, "tune only keys that regressed at the gate in this run, were never tuned "
           "on this device, or were tuned on another version of their source", env=True),
    Option("trials", int, 40, "timed trials per key", env=True, metavar="N"),
    Option("tune_timeout", float, None, "wall-time budget per key, in seconds (default: none)", env=True,
           metavar="SECONDS"),
    Option("sampler", str, DEFAULT_SAMPLER, f"the search after the warm starts: {', '.join(SAMPLERS)} or a "
           f"plugin's ({DEFAULT_SAMPLER}: a Gaussian process over the feasible configurations; grid times "
           "every feasible point)", env=True, metavar="NAME"),
    Option("storage", str, None, "an Optuna storage URL (postgresql://...) so several workers share the "
           "studies (default: a journal file under .ktune/)", env=True, metavar="URL"),
    Option("write", str, DEFAULT_WRITE, _WRITE_HELP, env=True, metavar="MODE"),
    Option("trial_timeout", float, 60.0, "seconds one candidate may take, compile included, before its "
           "worker is killed", env=True, metavar="SECONDS"),
    Option("item_timeout", float, 600.0, "seconds one correctness or performance item's kernels may run "
           "before they count as hung: the item fails and a fresh measurement process runs the rest", env=True,
           metavar="SECONDS", cli=False),
    Option("skip_unavailable", bool, False, "where the backend cannot run (no GPU, no OpenCL), skip the ktune "
           "items instead of failing the run (for a laptop without a device; never for a merge gate)", cli=False),
    Option("agent", bool, False, "before searching each target, let an LLM agent (OpenAI-compatible, "
           "OPENAI_BASE_URL / OPENAI_API_KEY) template, test, analyse and plan; a verified, faster template "
           "is written only with write mode file. No model: the rule-based templater"),
    Option("model", str, None, "the agent's model (default: none, the rule-based templater)", env=True,
           metavar="NAME"),
    Option("agent_iterations", int, 12, "model turns per target before the agent stops", metavar="N"),
    Option("agent_wall", float, 1800.0, "seconds of one target's agent run, model calls, checks and searches "
           "included", metavar="SECONDS"),
    Option("agent_memory", int, 8192, "MiB of resident memory of the agent's run and its worker processes",
           metavar="MIB"),
    Option("agent_tools", str, "auto", "run accepted templates under Oclgrind (OpenCL) or compute-sanitizer "
           "(CUDA): auto (where installed), require (a missing tool rejects the template), off", metavar="MODE"),
    Option("junit", str, None, "write a JUnit XML report of the ktune items (correct, perf, tune) with their "
           "times, baselines, ratios and parameters", env=True, metavar="PATH", path=True),
    Option("markdown", str, None, "append the summary as markdown to PATH (in GitHub Actions: "
           "$GITHUB_STEP_SUMMARY, the job's page)", env=True, metavar="PATH", path=True, cli=False),
    Option("benchmark_json", str, None, "write the timings in pytest-benchmark's --benchmark-json format, for "
           "tools that chart it (needs pytest-benchmark: the benchmark extra)", env=True, metavar="PATH", path=True,
           cli=False),
)
BY_NAME = {o.name: o for o in OPTIONS}


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


@dataclass(frozen=True)
class Resolved:
    """Every option's value, and where it came from (``command line``, ``KTUNE_TRIALS``, a file, or
    ``default``). Paths are absolute."""

    values: Mapping[str, Any]
    origins: Mapping[str, str]
    params_configured: Path | None = None  # the params file a file names (below KTUNE_PARAMS)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def origin(self, name: str) -> str:
        return self.origins.get(name, "default")


def resolve(given: Mapping[str, Any], files: ConfigFiles, *, env: Mapping[str, str] | None = None,
            cwd: Path | None = None) -> Resolved:
    """Each option's value by the order of the module docstring. ``given``: the command line's values,
    None (or absent) where an option was not given."""
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
    return Resolved(values=values, origins=origins, params_configured=configured)


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
