"""The four tools the model calls, and the workbench that carries them out.

``propose_template`` checks a template in the isolated worker and, once verified, searches its space
with the Optuna tuner; ``test_template`` only checks; ``analyze`` reports what was measured (times,
GB/s against copy bandwidth, registers and shared memory, failures); ``plan`` narrows or widens the
space, enqueues configurations for the next search, asks for a new template revision, or finishes.
Tool results go back to the model as JSON. Nothing here writes outside ``.ktune/``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from pytest_ktune import backends
from pytest_ktune.agent._budget import Budget
from pytest_ktune.agent._check import check_proposal
from pytest_ktune.agent._client import Tool, ToolCall
from pytest_ktune.agent._messages import for_model, for_model_json, one_line
from pytest_ktune.agent._proposal import Proposal, ProposalCheck, ProposalError
from pytest_ktune.agent._sandbox import proposal_target
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.keys import cases_by_key, key_label
from pytest_ktune.core.space import Value
from pytest_ktune.core.store import target_id
from pytest_ktune.core.target import Target
from pytest_ktune.measure.tools import ToolPlan
from pytest_ktune.tuner.encoding import Encoding, label_study, stored_mode
from pytest_ktune.tuner.loop import enqueue
from pytest_ktune.tuner.settings import TuneContext, TuneSettings
from pytest_ktune.tuner.storage import open_storage, resolve_study_name
from pytest_ktune.tuner.tune import tune_key

_SCALAR = {"type": ["integer", "number", "string", "boolean"]}
TEMPLATE_PROPERTIES: dict[str, Any] = {
    "source": {"type": "string", "description": "the whole kernel source; tunable choices are macros "
                                                "(compiled with -D NAME=value), not hard-coded"},
    "space": {"type": "object", "description": "parameter -> list of allowed values",
              "additionalProperties": {"type": "array", "minItems": 1, "maxItems": 64, "items": _SCALAR}},
    "default": {"type": "object", "description": "one value per parameter: the base kernel's own choices",
                "additionalProperties": _SCALAR},
    "constraints": {"type": "array", "items": {"type": "string"},
                    "description": "boolean expressions over parameters and key dimensions, e.g. 'I % VEC == 0'"},
    "launch": {"type": "object", "additionalProperties": False,
               "properties": {"block": {"type": "string"}, "grid": {"type": "string"}},
               "description": "launch geometry over parameters, key dimensions, the wrapper's integers, "
                              "block/grid (the wrapper's own), + - * // %, min, max, cdiv"},
    "notes": {"type": "string", "description": "what the template changes and why"},
}
TEMPLATE_SCHEMA: dict[str, Any] = {"type": "object", "required": ["source", "space", "default"],
                                   "properties": TEMPLATE_PROPERTIES, "additionalProperties": False}
PLAN_ACTIONS = ("narrow", "widen", "enqueue", "revise", "finish")

TOOLS: tuple[Tool, ...] = (
    Tool("propose_template",
         "Commit a template revision. It is compiled and verified against the reference in an isolated worker: "
         "every value and every pair of values of its space, on every case, on edge values (zeros, tiny, "
         "large, a sweep) and on a shape no vector width divides, with guards around every buffer, then under "
         "checkers of races, out-of-bounds accesses, uninitialised values and barriers; once verified, its "
         "space is searched with Optuna and the best time is returned. A failed check returns the error to fix.",
         TEMPLATE_SCHEMA),
    Tool("test_template",
         "Check a template as propose_template does, without searching it or committing it; `sample` adds "
         "that many configurations drawn at random.",
         {**TEMPLATE_SCHEMA, "properties": {**TEMPLATE_PROPERTIES,
                                            "sample": {"type": "integer", "minimum": 0, "maximum": 32}}}),
    Tool("analyze",
         "Measured times so far: the base kernel, each revision's search (best and top trials), GB/s and % "
         "of the device's copy bandwidth, registers / shared memory per configuration where the backend "
         "reports them, and every failure so far.",
         {"type": "object", "properties": {"top": {"type": "integer", "minimum": 1, "maximum": 50}},
          "additionalProperties": False}),
    Tool("plan",
         "Steer the search. narrow/widen: replace the values of some parameters of the current revision "
         "(`space`, and `default` if the default leaves the space): re-verified, then searched. enqueue: "
         "time these configurations of the current revision next (`configs`). revise: you will propose a "
         "new template. finish: stop; the best verified revision is compared with the base kernel.",
         {"type": "object", "required": ["action"], "additionalProperties": False,
          "properties": {"action": {"type": "string", "enum": list(PLAN_ACTIONS)},
                         "space": TEMPLATE_PROPERTIES["space"], "default": TEMPLATE_PROPERTIES["default"],
                         "configs": {"type": "array", "maxItems": 32,
                                     "items": {"type": "object", "additionalProperties": _SCALAR}},
                         "reason": {"type": "string"}}}),
)


@dataclass(frozen=True)
class KeySearch:
    """One search of one key of a revision."""

    key: Mapping[str, Any]
    label: str
    study: str
    best: Mapping[str, Value]
    best_us: float
    default_us: float | None
    timed: int
    failed: int
    infeasible: int
    trials: tuple[Mapping[str, Any], ...]  # timed trials, fastest first: params, us, resources
    problems: tuple[str, ...]  # failed / infeasible configurations, with the reason


@dataclass
class Revision:
    """A verified template and what searching it found."""

    number: int
    proposal: Proposal
    check: ProposalCheck
    target: Target
    searches: dict[str, KeySearch] = field(default_factory=dict)

    @property
    def total_us(self) -> float:
        return sum(s.best_us for s in self.searches.values()) if self.searches else float("inf")


@dataclass(frozen=True)
class BaseTime:
    """The base kernel's time for one key, with the parameters it runs with now."""

    key: Mapping[str, Any]
    label: str
    indices: tuple[int, ...]
    params: Mapping[str, Value]
    us: float
    bytes_moved: int | None
    resources: Mapping[str, int]


@dataclass(frozen=True)
class Bench:
    """Where the agent works: the project, the backend, the base target, and how to search."""

    root: Path
    params_path: Path
    backend: str
    base: Target
    tune: TuneSettings
    sample: int = 8
    progress: TextIO | None = None
    tools: ToolPlan = field(default_factory=ToolPlan)  # the checking tools each accepted template runs under

    @property
    def scratch(self) -> Path:
        return self.root / ".ktune"


class ToolFailure(Exception):
    """A tool call that could not be carried out, with the text for the model."""


class Workbench:
    """Carries out tool calls against the base target, and keeps what they found."""

    def __init__(self, bench: Bench, device: Any, measure_base: Callable[[Bench], Sequence[BaseTime]], *,
                 budget: Budget | None = None) -> None:
        self.bench = bench
        self.budget = budget
        self.device = device
        self._measure_base = measure_base
        self._base_times: list[BaseTime] | None = None
        self._origin = "agent"
        self.revisions: list[Revision] = []
        self.failures: list[str] = []
        self.checks: dict[str, ProposalCheck] = {}
        self.queued: list[dict[str, Value]] = []
        self.finished = ""
        self.failed_proposals = 0
        self._copy_bw: float | None = None

    @property
    def base_times(self) -> list[BaseTime]:
        """The base kernel's times, measured when first needed (a run that verifies nothing never times it)."""
        if self._base_times is None:
            self._base_times = list(self._measure_base(self.bench))
        return self._base_times

    # -- dispatch ----------------------------------------------------------------------
    def run(self, call: ToolCall) -> dict[str, Any]:
        assert call.arguments is not None
        args = dict(call.arguments)
        try:
            if call.name == "propose_template":
                return self.propose(args)
            if call.name == "test_template":
                return self.test(args)
            if call.name == "analyze":
                return self.analyze(int(args.get("top", 8)))
            if call.name == "plan":
                return self.plan(args)
        except ToolFailure as exc:
            return {"ok": False, "error": str(exc)}
        except KtuneError as exc:  # e.g. the base kernel could not be timed: the model hears of it, the run goes on
            self.failures.append(f"{call.name}: {exc.message}")
            return {"ok": False, "error": exc.render()}
        except Exception as exc:  # nothing the model sends may end the run: it hears what went wrong
            self.failures.append(f"{call.name}: {type(exc).__name__}: {exc}")
            return {"ok": False, "error": f"the call could not be carried out: {type(exc).__name__}: {exc}"}
        return {"ok": False, "error": f"unknown tool {call.name}"}

    def run_tool(self, name: str, args: Mapping[str, Any], *, origin: str = "agent") -> dict[str, Any]:
        """Carry out one tool call made by us (the rule-based fallback), not by the model."""
        self._origin = origin
        try:
            return self.run(ToolCall(id="local", name=name, raw="", arguments=dict(args)))
        finally:
            self._origin = "agent"

    @property
    def current(self) -> Revision | None:
        return self.revisions[-1] if self.revisions else None

    def best(self) -> Revision | None:
        done = [r for r in self.revisions if r.searches]
        return min(done, key=lambda r: (r.total_us, r.number)) if done else None

    # -- templating and testing --------------------------------------------------------
    def _proposal(self, args: Mapping[str, Any]) -> Proposal:

        data = {k: v for k, v in args.items() if k != "sample"}
        data["origin"] = self._origin
        try:
            return Proposal.from_json(data, backend=self.bench.backend)
        except ProposalError as exc:
            self._failed("schema", exc.message, what="proposal")
            raise ToolFailure(f"the template was rejected: {exc.message}"
                              + (f" (next step: {exc.hint})" if exc.hint else "")) from None

    def _failed(self, stage: str, message: str, *, what: str = "template") -> None:
        """A refused proposal: kept for the model and the result, and one line on the console (``progress``)."""
        self.failures.append(f"{what} rejected ({stage}): {message}")
        self.failed_proposals += 1
        if self.bench.progress is not None:
            line = f"{self.bench.base.name}: {self._origin} {what} rejected at {stage}: {one_line(message)}"
            print(for_model(line, self.bench.root), file=self.bench.progress, flush=True)

    def check(self, proposal: Proposal, sample: int | None = None) -> ProposalCheck:

        digest = f"{proposal.digest()}:{sample}"
        if digest in self.checks:
            return self.checks[digest]
        b = self.bench
        result = check_proposal(proposal, b.base, root=b.root, backend=b.backend,
                                sample=b.sample if sample is None else sample, seed=b.tune.seed or 0,
                                trial_timeout_s=b.tune.trial_timeout_s, tools=b.tools, budget=self.budget)
        self.checks[digest] = result
        if not result.ok:
            self._failed(result.stage, result.message)
        return result

    def test(self, args: Mapping[str, Any]) -> dict[str, Any]:
        proposal = self._proposal(args)
        result = self.check(proposal, int(args["sample"]) if "sample" in args else None)
        return _check_json(result)

    def propose(self, args: Mapping[str, Any]) -> dict[str, Any]:
        proposal = self._proposal(args)
        same = next((r for r in self.revisions if r.proposal.digest() == proposal.digest()), None)
        if same is not None:
            return {"ok": True, "revision": same.number, "note": f"this is revision {same.number} again; it was "
                    "already verified and searched", "search": self._search_json(same)}
        return self._commit(proposal)

    def _commit(self, proposal: Proposal) -> dict[str, Any]:

        result = self.check(proposal)
        if not result.ok:
            return _check_json(result)
        target = proposal_target(proposal, self.bench.base, workdir=self.bench.scratch / "agent" / "proposals")
        rev = Revision(number=len(self.revisions) + 1, proposal=proposal, check=result, target=target)
        self.revisions.append(rev)
        self.search(rev, self.bench.tune.trials)
        return {"ok": True, "revision": rev.number, "check": result.summary(), "search": self._search_json(rev)}

    # -- searching ---------------------------------------------------------------------
    def search(self, rev: Revision, trials: int) -> None:
        """Search the revision's space for every key (Optuna; nothing is delivered), the queued configurations first."""

        b = self.bench
        settings = replace(b.tune, trials=trials)
        if self.budget is not None:
            self.budget.check()
            left = self.budget.cap(settings.timeout_s or self.budget.left_s())
            settings = replace(settings, timeout_s=left, trial_timeout_s=min(settings.trial_timeout_s, left))
        ctx = TuneContext(root=b.root, params_path=b.scratch / "agent" / "no-params.json", backend=b.backend,
                          settings=settings, progress=b.progress)
        queued, self.queued = self.queued, []
        for key, indices in cases_by_key(rev.target, b.backend).values():
            label = key_label(key)
            if queued:
                self._enqueue(rev.target, key, queued)
            try:
                out = tune_key(ctx, rev.target, key, indices)
            except KtuneError as exc:
                self.failures.append(f"revision {rev.number}, key {label}: search failed: {exc.message}")
                raise ToolFailure(f"searching revision {rev.number} failed for key {label}: {exc.message}") \
                    from None
            trials_json, problems = self._trials(out.study, rev.target)
            rev.searches[label] = KeySearch(key=dict(key), label=label, study=out.study, best=dict(out.best_params),
                                            best_us=out.best_us, default_us=out.default_us, timed=out.timed,
                                            failed=out.failed, infeasible=out.infeasible,
                                            trials=tuple(trials_json), problems=tuple(problems))
            self.failures.extend(f"revision {rev.number}, key {label}: {p}" for p in problems[:5])

    def _storage(self) -> Any:

        return open_storage(self.bench.tune.storage, self.bench.scratch)[0]

    def _enqueue(self, target: Target, key: Mapping[str, Any], configs: Sequence[Mapping[str, Value]]) -> None:
        """Queue configurations in the study the next search opens (the tuner's own warm-start path)."""
        import optuna


        optuna.logging.set_verbosity(optuna.logging.WARNING)
        storage = self._storage()
        name = resolve_study_name(storage, target_id(target, self.bench.root), self.device.id, key)
        enc = Encoding.for_sampler(target, self.bench.tune.sampler, stored_mode(storage, name))
        study = optuna.create_study(study_name=name, storage=storage, direction="minimize", load_if_exists=True)
        label_study(study, enc)
        valid = [("agent", dict(c)) for c in configs if target.space.valid(dict(c), key)]
        enqueue(study, enc, valid)

    def _trials(self, study_name: str, target: Target) -> tuple[list[dict[str, Any]], list[str]]:
        import optuna
        from optuna.trial import TrialState


        storage = self._storage()
        enc = Encoding.for_sampler(target, self.bench.tune.sampler, stored_mode(storage, study_name))
        study = optuna.load_study(study_name=study_name, storage=storage)
        timed: list[dict[str, Any]] = []
        problems: list[str] = []
        for t in study.get_trials(deepcopy=False):
            a = t.user_attrs
            if t.state == TrialState.COMPLETE and t.value is not None and "duplicate" not in a:
                timed.append({"params": enc.decode(t.params), "us": round(float(t.value), 3),
                              "resources": a.get("resources", {}), "source": a.get("source", "sampler")})
            elif "failed" in a or "infeasible" in a:
                kind = "failed" if "failed" in a else "infeasible"
                problems.append(f"{kind} {enc.decode(t.params)}: {a[kind]}")
        timed.sort(key=lambda r: r["us"])
        return timed, problems

    # -- analysis ----------------------------------------------------------------------
    def copy_bandwidth(self) -> float | None:
        if self._copy_bw is None:

            try:
                self._copy_bw = backends.create(self.bench.backend).copy_bandwidth()
            except KtuneError:
                return None
        return self._copy_bw

    def _rate(self, bytes_moved: int | None, us: float | None) -> dict[str, float]:
        if not bytes_moved or not us:
            return {}
        gbps = bytes_moved / (us * 1e-6) / 1e9
        out = {"gbps": round(gbps, 2)}
        bw = self.copy_bandwidth()
        if bw:
            out["pct_of_copy"] = round(100 * gbps * 1e9 / bw, 1)
        return out

    def _occupancy(self, resources: Mapping[str, int]) -> dict[str, Any]:
        out: dict[str, Any] = dict(resources)
        regs, threads, shared = resources.get("registers", 0), resources.get("threads", 0), \
            resources.get("shared_bytes", 0)
        dev = self.device
        if regs and threads and getattr(dev, "regs_per_block", 0):
            out["blocks_per_sm_by_registers"] = dev.regs_per_block // (regs * threads)
        if shared and getattr(dev, "shared_mem_per_block", 0):
            out["blocks_per_sm_by_shared"] = dev.shared_mem_per_block // shared
        return out

    def _search_json(self, rev: Revision, top: int = 5) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for label, s in rev.searches.items():
            base = next((b for b in self.base_times if b.label == label), None)
            out[label] = {
                "best_params": dict(s.best), "best_us": round(s.best_us, 3),
                "template_default_us": round(s.default_us, 3) if s.default_us is not None else None,
                "base_us": round(base.us, 3) if base else None,
                "speedup_vs_base": round(base.us / s.best_us, 3) if base and s.best_us else None,
                **self._rate(base.bytes_moved if base else None, s.best_us),
                "timed": s.timed, "failed": s.failed, "infeasible": s.infeasible,
                "top": [{**t, "resources": self._occupancy(t["resources"])} for t in s.trials[:top]],
            }
        return out

    def analyze(self, top: int = 8) -> dict[str, Any]:
        bw = self.copy_bandwidth()
        return {
            "ok": True,
            "device": {"name": self.device.name, "backend": self.bench.backend,
                       "max_threads_per_block": self.device.max_threads_per_block,
                       "shared_mem_per_block": self.device.shared_mem_per_block,
                       "regs_per_block": self.device.regs_per_block, "warp_size": self.device.warp_size,
                       "copy_gbps": round(bw / 1e9, 2) if bw else None},
            "base": {b.label: {"params": dict(b.params), "us": round(b.us, 3), **self._rate(b.bytes_moved, b.us),
                               "resources": self._occupancy(b.resources)} for b in self.base_times},
            "revisions": [{"revision": r.number, "space": {k: list(v) for k, v in r.proposal.space.items()},
                           "check": r.check.summary(), "search": self._search_json(r, top)}
                          for r in self.revisions],
            "failures": self.failures[-20:],
        }

    # -- planning ----------------------------------------------------------------------
    def plan(self, args: Mapping[str, Any]) -> dict[str, Any]:
        action = str(args["action"])
        reason = str(args.get("reason", ""))
        if action == "finish":
            self.finished = reason or "the model finished"
            best = self.best()
            return {"ok": True, "note": "finishing" + (f"; best is revision {best.number}" if best else
                                                       "; no template was verified")}
        if action == "revise":
            return {"ok": True, "note": "call propose_template with the new revision"}
        rev = self.current
        if rev is None:
            raise ToolFailure(f"plan {action} needs a verified template first: call propose_template")
        if action == "enqueue":
            configs = [dict(c) for c in args.get("configs", [])]
            if not configs:
                raise ToolFailure("plan enqueue needs `configs`: a list of configurations of the current revision")
            bad = [f"{c}: {'; '.join(_invalid(rev, c))}" for c in configs if _invalid(rev, c)]
            if bad:
                raise ToolFailure("not configurations of revision "
                                  f"{rev.number}'s space: {' | '.join(bad[:4])}")
            self.queued.extend(configs)
            timed = max((s.timed for s in rev.searches.values()), default=0)
            self.search(rev, timed + len(configs) + max(1, self.bench.tune.trials // 4))
            return {"ok": True, "revision": rev.number, "search": self._search_json(rev)}
        # narrow / widen: a new revision with some parameters' values replaced
        space = {k: list(v) for k, v in rev.proposal.space.items()}
        changes = args.get("space") or {}
        if not changes:
            raise ToolFailure(f"plan {action} needs `space`: the new values of the parameters to change")
        unknown = sorted(set(changes) - set(space))
        if unknown:
            raise ToolFailure(f"plan {action}: {', '.join(unknown)} not in the current space "
                              f"({', '.join(space)}); to add parameters, propose a new template")
        space.update({k: list(v) for k, v in changes.items()})
        default = {**rev.proposal.default, **dict(args.get("default") or {})}
        data = {**rev.proposal.to_json(), "space": space, "default": default}
        data.pop("backend", None)
        proposal = self._proposal(data)
        return self._commit(proposal)


def _invalid(rev: Revision, cfg: Mapping[str, Value]) -> list[str]:
    space = rev.target.space
    problems = [f"{k} is not a parameter" for k in cfg if k not in space.params]
    problems += [f"{k} is missing" for k in space.params if k not in cfg]
    problems += [f"{k}={v!r} is not one of {list(space.params[k])}" for k, v in cfg.items()
                 if k in space.params and v not in space.params[k]]
    return problems


def _check_json(result: ProposalCheck) -> dict[str, Any]:
    out: dict[str, Any] = {"ok": result.ok, "stage": result.stage, "message": result.message,
                           "verified_configs": len(result.checked)}
    if result.infeasible:
        out["over_device_limits"] = [f"{dict(c)}: {why}" for c, why in result.infeasible[:5]]
    if not result.ok:
        out["next"] = "fix the template and propose it again (or test it first with test_template)"
    return out


def tool_result(call: ToolCall, content: Mapping[str, Any], root: Path | None = None) -> dict[str, Any]:
    """The message that answers a tool call: no path of this machine in it (``_messages.for_model``)."""
    text = json.dumps(for_model_json(json.loads(json.dumps(content, default=str)), root))
    return {"role": "tool", "tool_call_id": call.id, "content": text[:20000]}
