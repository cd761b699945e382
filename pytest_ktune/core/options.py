"""Every option of a run, once: its name, type, default and help, as one field of ``Options``.

The table is the dataclass. A field's annotation is the option's type, its default is the option's
default (the only place it is written: ``DEFAULTS`` hands it to the layers whose settings start from
it, ``tuner.settings``, the agent, the lab), and the rest of its row (help, whether a CI job sets it
from the environment, ...) is in the field's metadata, read back as an ``Option``. pytest's
``--ktune-*`` options and ini keys, the ``KTUNE_*`` variables, ``[tool.ktune]``'s keys and the
``ktune`` command's options are all made from ``OPTIONS``; ``run.config`` merges what was given
into ``run.config.RunOptions``, which is an ``Options`` too. Adding an option is one field here
and its use.

Only the standard library (and ``core.names``): pytest imports this while it parses its options.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.names import AUTO, BACKENDS, DEFAULT_SAMPLER, DEFAULT_WRITE, SAMPLERS, WRITE_MODES

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


class OptionError(KtuneError):
    """An option that cannot be used as given; the message names it and where it was given."""


@dataclass(frozen=True)
class _Row:
    help: str
    env: bool  # read from KTUNE_<NAME> too (the options a CI job sets)
    metavar: str | None
    path: bool  # a path: relative to where it was given
    cli: bool  # the ``ktune`` command has it too (as --NAME)


def _option(default: Any, help: str, *, env: bool = False, metavar: str | None = None, path: bool = False,
            cli: bool = True) -> Any:
    """A field of ``Options``: the option's default and the rest of its row."""
    return dataclasses.field(default=default, metadata={"option": _Row(help, env, metavar, path, cli)})


_WRITE_HELP = ("what to do with tuned winners: " + ", ".join(WRITE_MODES) + " or a plugin's mode. none "
               "(report only, the default), file (update the params file in place), patch (a "
               "git-apply-able patch under .ktune/patches), commit (a new branch ktune/..., your "
               "checkout untouched), pr (commit, push, open or update a pull request; needs GITHUB_TOKEN)")


@dataclass(frozen=True, kw_only=True)
class Options:
    """The options of one run, as given (pytest's option names, without ``--ktune-``); a field each."""

    ktune: bool = _option(False, "collect @ktune.target kernels: a correctness and a performance item per case",
                          cli=False)
    backend: str = _option(AUTO, f"where kernels run: {', '.join(BACKENDS)} (CuPy, PyOpenCL, Triton on torch), a "
                           f"plugin's backend, or {AUTO}: cuda when a GPU is visible, else opencl", env=True,
                           metavar="NAME")
    threshold: str = _option("median:5%", "how much slower than its baseline a kernel may get before its "
                             "performance item fails, once confirmed by A/B (a target's own threshold= wins)",
                             env=True, metavar="STAT:PCT", cli=False)
    update_baseline: bool = _option(False, "record the measured timings as the new baselines in the params file",
                                    cli=False)
    base: str | None = _option(None, "a git ref (origin/main, the merge base): every target whose source, included "
                               "files or parameters differ from REF's is timed A/B against REF's in this run, "
                               "baseline or not; a record or baseline REF has that is missing here is an error",
                               env=True, metavar="REF", cli=False)
    strict: bool = _option(False, "fail closed: a params file that does not exist, a case with no baseline on a "
                           "machine that has baselines, or a changed case that cannot be A/B'd is an error, not a "
                           "note (for merge gates)", env=True, cli=False)
    seed: int | None = _option(None, "base seed for the random inputs and the sampler (default: a new one each "
                               "run, which pytest's header shows)", env=True, metavar="N")
    params: str | None = _option(None, "the params file (default: $KTUNE_PARAMS, else the nearest "
                                 "ktune-params.json at or above the rootdir, else one at the rootdir)",
                                 metavar="PATH", path=True)
    tune: bool = _option(False, "tune every selected target for every key of its cases (Optuna), and keep a "
                         "winner that beats the current parameters in same-run A/B", cli=False)
    autotune: bool = _option(False, "tune only keys that regressed at the gate in this run, were never tuned on "
                             "this device, or were tuned on another version of their source", env=True)
    trials: int = _option(40, "timed trials per key", env=True, metavar="N")
    tune_timeout: float | None = _option(None, "wall-time budget per key, in seconds (default: none)", env=True,
                                         metavar="SECONDS")
    sampler: str = _option(DEFAULT_SAMPLER, f"the search after the warm starts: {', '.join(SAMPLERS)} or a "
                           f"plugin's ({DEFAULT_SAMPLER}: a Gaussian process over the feasible configurations; "
                           "grid times every feasible point)", env=True, metavar="NAME")
    storage: str | None = _option(None, "an Optuna storage URL (postgresql://...) so several workers share the "
                                  "studies (default: a journal file under .ktune/)", env=True, metavar="URL")
    write: str = _option(DEFAULT_WRITE, _WRITE_HELP, env=True, metavar="MODE")
    trial_timeout: float = _option(60.0, "seconds one candidate may take, compile included, before its worker is "
                                   "killed", env=True, metavar="SECONDS")
    item_timeout: float = _option(600.0, "seconds one correctness or performance item's kernels may run before "
                                  "they count as hung: the item fails and a fresh measurement process runs the "
                                  "rest", env=True, metavar="SECONDS", cli=False)
    devices: str | None = _option(None, "the devices to measure and tune on: all, or indices like 0,1,3 (the "
                                  "backend's own order; default: the one device it picks); the gate runs one "
                                  "measurement process per device, a tune one worker per device on one study",
                                  env=True, metavar="all|0,1,...")
    skip_unavailable: bool = _option(False, "where the backend cannot run (no GPU, no OpenCL), skip the ktune "
                                     "items instead of failing the run (for a laptop without a device; never for a "
                                     "merge gate)", cli=False)
    agent: bool = _option(False, "before searching each target, let an LLM agent (OpenAI-compatible, "
                          "OPENAI_BASE_URL / OPENAI_API_KEY) template, test, analyse and plan; a verified, faster "
                          "template is written only with write mode file. No model: the rule-based templater")
    model: str | None = _option(None, "the agent's model (default: none, the rule-based templater)", env=True,
                                metavar="NAME")
    agent_iterations: int = _option(12, "model turns per target before the agent stops", metavar="N")
    agent_wall: float = _option(1800.0, "seconds of one target's agent run, model calls, checks and searches "
                                "included", metavar="SECONDS")
    agent_memory: int = _option(8192, "MiB of resident memory of the agent's run and its worker processes",
                                metavar="MIB")
    agent_tools: str = _option("auto", "run accepted templates under Oclgrind (OpenCL) or compute-sanitizer "
                               "(CUDA): auto (where installed), require (a missing tool rejects the template), off",
                               metavar="MODE")
    junit: str | None = _option(None, "write a JUnit XML report of the ktune items (correct, perf, tune) with "
                                "their times, baselines, ratios and parameters", env=True, metavar="PATH", path=True)
    markdown: str | None = _option(None, "append the summary as markdown to PATH (in GitHub Actions: "
                                   "$GITHUB_STEP_SUMMARY, the job's page)", env=True, metavar="PATH", path=True,
                                   cli=False)
    benchmark_json: str | None = _option(None, "write the timings in pytest-benchmark's --benchmark-json format, "
                                         "for tools that chart it (needs pytest-benchmark: the benchmark extra)",
                                         env=True, metavar="PATH", path=True, cli=False)


DEFAULTS = Options()  # every option's default, for the settings of the layers below the run


@dataclass(frozen=True)
class Option:
    """One option of a run, by the field of ``Options`` it fills: its row of the table."""

    name: str
    kind: type  # bool, int, float or str
    default: Any
    help: str
    env: bool = False
    metavar: str | None = None
    path: bool = False
    cli: bool = True

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


def _kind(annotation: Any) -> type:
    """``int`` of ``int`` and of ``int | None``."""
    if isinstance(annotation, types.UnionType):
        (kind,) = [a for a in typing.get_args(annotation) if a is not type(None)]
        return typing.cast(type, kind)
    return typing.cast(type, annotation)


def _rows(table: type) -> tuple[Option, ...]:
    hints = typing.get_type_hints(table)
    rows = []
    for f in dataclasses.fields(table):
        row: _Row | None = f.metadata.get("option")
        if row is not None:
            rows.append(Option(f.name, _kind(hints[f.name]), f.default, row.help, env=row.env, metavar=row.metavar,
                               path=row.path, cli=row.cli))
    return tuple(rows)


OPTIONS: tuple[Option, ...] = _rows(Options)
BY_NAME = {o.name: o for o in OPTIONS}
