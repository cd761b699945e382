"""``ktune templatize``: a kernel with hard-coded launch choices turned into a verified template.

The base kernel is a ``@ktune.target`` of the project whose source for the backend is the given
file: it supplies the cases, the reference, the key and the wrapper. The rule-based templater
proposes first; a proposer (the agent, when one is configured) may then revise. Every proposal is
checked in the isolated worker; only a verified one is written, beside the kernel by default, as
``<kernel>_tpl.<ext>`` and ``<kernel>_tpl.py``, and never over an existing file.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from pytest_ktune import backends
from pytest_ktune.agent._budget import Budget
from pytest_ktune.agent._check import check_proposal
from pytest_ktune.agent._proposal import Proposal, ProposalCheck, ProposalError, Proposer
from pytest_ktune.agent._rules import rule_proposal
from pytest_ktune.agent._sandbox import proposal_target, write_template
from pytest_ktune.core.discover import discover
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.keys import cases_by_key, key_label
from pytest_ktune.core.names import AUTO, C_BACKENDS
from pytest_ktune.core.options import DEFAULTS, Options
from pytest_ktune.core.project import describe, locate
from pytest_ktune.core.redact import Redactor
from pytest_ktune.core.target import Target
from pytest_ktune.measure.tools import TOOL_MODES, ToolPlan
from pytest_ktune.tuner.settings import TuneContext, TuneSettings
from pytest_ktune.tuner.tune import tune_key

AGENT_OFF = "agent: off (no --model, no KTUNE_MODEL): the rule-based templater alone"


@dataclass(frozen=True)
class TemplatizeSettings:
    """How to templatize: the sample checked per proposal, tuning, the proposer's bound."""

    backend: str
    sample: int = 8
    seed: int = 0
    out: Path | None = None  # default: beside the kernel
    tune: bool = False
    trials: int = DEFAULTS.trials
    trial_timeout_s: float = DEFAULTS.trial_timeout
    max_rounds: int = 4
    wall_s: float = DEFAULTS.agent_wall  # the whole command: model calls, checks and tuning
    memory_mb: int = DEFAULTS.agent_memory
    tools: ToolPlan = field(default_factory=ToolPlan)


@dataclass(frozen=True)
class TemplatizeResult:
    """What templatize did: every proposal with its check, the one kept, tuning, the files written."""

    base: Target
    attempts: tuple[tuple[Proposal, ProposalCheck], ...]
    chosen: Proposal | None
    tuned: tuple[Any, ...] = ()  # TuneOutcome per key, when tuned
    written: tuple[Path, ...] = ()
    messages: tuple[str, ...] = field(default_factory=tuple)


_SNIPPET = '''import ktune

@ktune.target(
    sources={{"{backend}": "{file}"}},
    space=ktune.Space(NAIVE=[1]), default={{"NAIVE": 1}},   # nothing to tune yet
    key=lambda x: {{"N": x.shape[-1]}},
    cases=[ktune.Case(x=ktune.Tensor((64, 1024), "float32"))],
    reference=my_reference,
)
def {name}(kernel, x):
    out = kernel.empty(x.shape, x.dtype)
    kernel.launch(grid=ktune.cdiv(x.size, 128), block=128, args=[out, x])
    return out'''


def find_base(kernel_file: Path, name: str, *, root: Path, backend: str) -> Target:
    """The project's target ``name`` whose ``backend`` source is ``kernel_file``; a clear error if none."""

    path = kernel_file.resolve()
    if not path.is_file():
        raise KtuneError(f"no kernel file {kernel_file}", hint="give the path of a .cu or .cl file")
    targets = discover(root)
    named = [t for t in targets if t.name == name]
    wrapping = [t for t in targets if any(p == path for p in t.sources.values())]
    for t in named:
        if t.sources.get(backend) == path:
            return t.for_backend(backend)
    snippet = _SNIPPET.format(backend=backend, file=path.name, name=name)
    if named:
        have = ", ".join(f"{b}: {p}" for b, p in named[0].sources.items())
        raise KtuneError(f"target {name} does not use {path} as its {backend} source (its sources: {have})",
                         where=named[0].where,
                         hint="pass the target's own kernel file, or the right --backend")
    others = f" (it is the source of {', '.join(t.name for t in wrapping)})" if wrapping else ""
    raise KtuneError(f"no @ktune.target named {name!r} under {root} wraps {path}{others}",
                     hint="templatize needs the cases, the reference and the launch of a target; write one "
                          f"beside the kernel, for example:\n{snippet}")


def _context(base: Target, settings: TemplatizeSettings, kernel_file: Path, device: Mapping[str, int],
             round_: int) -> dict[str, Any]:
    runs = [c for c in base.cases if c.runs_on(settings.backend)]
    return {"target": base.name, "backend": settings.backend, "kernel_file": str(kernel_file),
            "base_source": base.source_text(settings.backend),
            "key_dims": list(base.case_key(runs[0])) if runs else [],
            "cases": [base.case_id(c) for c in runs], "device": dict(device), "round": round_,
            "max_rounds": settings.max_rounds}


def templatize(kernel_file: Path, target: str, *, root: Path, settings: TemplatizeSettings,
               proposer: Proposer | None = None, stream: TextIO | None = None,
               words: Callable[[str], str] | None = None) -> TemplatizeResult:
    """Template the kernel: rules first, then ``proposer`` rounds; check each; optionally tune the
    kept one; write it when verified. See :class:`~pytest_ktune.agent._proposal.Proposer`.
    ``words`` rewrites each line said (the ``ktune`` command: its own flags for pytest's)."""

    out = stream if stream is not None else sys.stdout
    say: list[str] = []
    redactor: Redactor = getattr(proposer, "redactor", None) or Redactor()
    budget = Budget(settings.wall_s, settings.memory_mb)
    bind = getattr(proposer, "use_budget", None)
    if callable(bind):
        bind(budget)

    def emit(line: str) -> None:
        line = redactor.text(line)  # what the model sent is redacted already; the rest, for the environment's
        line = words(line) if words is not None else line
        say.append(line)
        print(line, file=out, flush=True)

    base = find_base(kernel_file, target, root=root, backend=settings.backend)
    emit(AGENT_OFF if proposer is None else "agent: on: the rule-based proposal first, then the model's")
    device = _device_limits(settings.backend)
    attempts: list[tuple[Proposal, ProposalCheck]] = []

    def check(p: Proposal) -> ProposalCheck:
        c = check_proposal(p, base, root=root, backend=settings.backend, sample=settings.sample,
                           seed=settings.seed, trial_timeout_s=settings.trial_timeout_s, tools=settings.tools,
                           budget=budget)
        attempts.append((p, c))
        params = ", ".join(f"{k}={list(v)}" for k, v in p.space.items())
        emit(f"{p.origin} proposal ({params}): {c.summary()}")
        return c

    rules: Proposal | None = None
    rules_check: ProposalCheck | None = None
    try:
        rules = rule_proposal(base, settings.backend, max_threads=device.get("max_threads_per_block", 1024))
    except ProposalError as exc:
        emit(f"rules: {exc.message}")
    if rules is not None:
        emit(rules.notes)
        rules_check = check(rules)
    chosen = rules if rules_check is not None and rules_check.ok else None
    if proposer is not None:
        previous, previous_check = rules, rules_check
        for round_ in range(settings.max_rounds):
            if budget.spent():
                emit(f"the agent was stopped: {budget.spent()}")
                break
            try:
                nxt = proposer(previous, previous_check, _context(base, settings, kernel_file, device, round_))
            except Exception as exc:  # a proposer that fails ends the rounds; what verified is kept
                emit(f"the agent stopped proposing: {type(exc).__name__}: {exc}")
                break
            finally:
                refused: list[str] = getattr(proposer, "refusals", None) or []
                for line in refused:  # refused before a check (the schema): one line each
                    emit(f"agent proposal {line}")
                refused.clear()
            if nxt is None:
                stop = getattr(proposer, "stop", "")
                emit(f"the agent stopped proposing{': ' + stop if stop else ''}")
                break
            previous, previous_check = nxt, check(nxt)
            if previous_check.ok:
                chosen = nxt
        else:
            emit(f"the proposer was stopped after {settings.max_rounds} rounds (the bound)")
    if chosen is None:
        emit("no proposal verified; nothing was written")
        return TemplatizeResult(base, tuple(attempts), None, messages=tuple(say))
    tuned: tuple[Any, ...] = ()
    if settings.tune:
        try:
            tuned = _tune(chosen, base, root=root, settings=settings, emit=emit, budget=budget)
        except KtuneError as exc:  # the verified template is still written
            emit(f"tuning the verified template failed: {exc.message}")
    verified = next(c for p, c in reversed(attempts) if p is chosen)
    dest = settings.out if settings.out is not None else kernel_file.resolve().parent
    written = write_template(chosen, base, dest=dest, verified=verified)
    for p in written:
        emit(f"wrote {p}")
    if not dest.resolve().is_relative_to(root.resolve()):
        emit(f"note: {dest} is outside the project root {root}; the template imports its base from "
             f"{base.module}, so run pytest from the project root or put it on PYTHONPATH")
    return TemplatizeResult(base, tuple(attempts), chosen, tuned, tuple(written), tuple(say))


def _device_limits(backend: str) -> dict[str, int]:

    try:
        d = backends.create(backend).device
    except KtuneError:
        return {}
    return {"max_threads_per_block": int(d.max_threads_per_block),
            "shared_mem_per_block": int(d.shared_mem_per_block)}


def _tune(chosen: Proposal, base: Target, *, root: Path, settings: TemplatizeSettings, emit: Any,
          budget: Budget) -> tuple[Any, ...]:
    """Search the verified template's space with the tuner, per key; nothing goes to the params file."""

    target = proposal_target(chosen, base, workdir=root / ".ktune" / "agent" / "targets")
    budget.check()
    tsettings = TuneSettings(trials=settings.trials, seed=settings.seed, timeout_s=budget.cap(budget.left_s()),
                             trial_timeout_s=budget.cap(settings.trial_timeout_s))
    ctx = TuneContext(root=root, params_path=root / "ktune-params.json", backend=settings.backend,
                      settings=tsettings, progress=None)
    outcomes = []
    for key, cases in cases_by_key(target, settings.backend).values():
        o = tune_key(ctx, target, key, cases)
        outcomes.append(o)
        default = f"{o.default_us:.2f} µs" if o.default_us is not None else "n/a"
        emit(f"tuned {key_label(key)}: default {default}, best {o.best_us:.2f} µs {dict(o.best_params)} "
             f"after {o.trials_text()}")
    return tuple(outcomes)


# -- the command line -----------------------------------------------------------------------------


def add_parser(sub: Any, options: Callable[..., None]) -> None:
    """``ktune templatize KERNEL --target NAME ...`` on the ``ktune`` command's subparsers; ``options(parser,
    *names)`` adds the run's options of those names (``core.options``), with templatize's own flags."""
    p = sub.add_parser("templatize", help="turn a kernel with hard-coded launch choices into a verified template",
                       description="Turn a kernel with hard-coded launch choices into a verified template. Without "
                                   "--model the rule-based templater runs alone (no model, no network); with "
                                   "--model (or KTUNE_MODEL), an OpenAI-compatible model revises its proposal: "
                                   "it reads OPENAI_API_KEY, and OPENAI_BASE_URL for an endpoint other than "
                                   "OpenAI's.")
    p.add_argument("kernel", type=Path, help="the kernel source (.cu or .cl) that a @ktune.target wraps")
    p.add_argument("--target", required=True, help="the @ktune.target whose source that file is")
    p.add_argument("--root", type=Path, default=None, metavar="DIR",
                   help="the project's folder (default: found as pytest finds its rootdir from the kernel file: "
                        "the nearest pytest.ini, pyproject.toml, tox.ini or setup.cfg with pytest settings)")
    p.add_argument("--backend", default=AUTO, choices=(AUTO, *C_BACKENDS),
                   help="auto: from the file's suffix (.cu: cuda, .cl: opencl)")
    p.add_argument("--sample", type=int, default=8,
                   help="configurations checked per proposal besides the default (default 8)")
    # Its own --backend (auto: from the file's suffix) and --seed (0: the same sample each time); the
    # budgets, the model and the checking tools are the run's options, read as a tune reads them.
    p.add_argument("--seed", type=int, default=0, help="seed of the sample, the inputs and the search (default 0)")
    p.add_argument("--out", type=Path, default=None, help="folder for the template (default: beside the kernel)")
    p.add_argument("--tune", action="store_true", help="search the verified template's space with the tuner")
    p.add_argument("--max-rounds", type=int, default=4, help="proposals the model may make (default 4)")
    options(p, "trials", "trial_timeout", "model", "agent_wall", "agent_memory", "agent_tools")


def _agent_proposer(model: str | None, root: Path) -> Proposer | None:
    """The agent as a proposer, when a model is configured (``--model``, ``KTUNE_MODEL``, the project's
    files, or the environment the agent reads: OPENAI_BASE_URL and the model); None turns it off."""
    from pytest_ktune.agent._proposer import make_proposer

    proposer: Proposer | None = make_proposer(model=model, root=root.resolve())
    return proposer


def run_cli(args: Any, options: Options, words: Callable[[str], str] | None = None) -> int:
    """``ktune templatize``: 0 when a verified template was written, 1 when none verified; ``options``:
    the run's options as the ``ktune`` command merged them (``run.config``)."""
    backend = args.backend
    if backend == "auto":
        suffix = args.kernel.suffix.lower()
        if suffix not in (".cu", ".cl"):
            raise KtuneError(f"cannot tell the backend of {args.kernel} from its suffix",
                             hint="pass --backend cuda or --backend opencl")
        backend = "cuda" if suffix == ".cu" else "opencl"
    o = options
    if args.sample < 0 or o.trials < 1 or args.max_rounds < 0 or o.agent_wall <= 0 or o.agent_memory <= 0 \
            or o.trial_timeout <= 0:
        raise KtuneError("--sample must be 0 or more, --trials 1 or more, --max-rounds 0 or more, --wall, "
                         "--memory and --trial-timeout positive", hint="e.g. --sample 8 --trials 20")
    if o.agent_tools not in TOOL_MODES:
        raise KtuneError(f"--tools {o.agent_tools!r} is not a mode", hint=f"give one of {', '.join(TOOL_MODES)}")
    settings = TemplatizeSettings(backend=backend, sample=args.sample, seed=args.seed, out=args.out,
                                  tune=args.tune, trials=o.trials, trial_timeout_s=o.trial_timeout,
                                  max_rounds=args.max_rounds, wall_s=o.agent_wall, memory_mb=o.agent_memory,
                                  tools=ToolPlan(mode=o.agent_tools))
    print(f"ktune: {describe(locate([], Path.cwd(), rootdir=args.root), None, Path.cwd())}", file=sys.stderr,
          flush=True)
    result = templatize(args.kernel, args.target, root=args.root.resolve(), settings=settings,
                        proposer=_agent_proposer(o.model, args.root), words=words)
    return 0 if result.written else 1
