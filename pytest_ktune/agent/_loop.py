"""The agent loop: the model templates, tests, analyses and plans through tools, around the Optuna search.

One run works on one target. It times the base kernel as it runs now, then asks the model for tool
calls until the model finishes or a budget (iterations, tokens, cost, wall time, failed proposals,
unusable answers) ends it. Every template is verified in the isolated worker before it is searched;
the best verified revision is then timed side by side with the base kernel, and only a revision
that is faster beyond noise becomes a change (``AgentResult.template``): a new template beside the base
kernel and its tuned parameters, which the run's write-back mode delivers as it delivers tuned records
(in place, a patch, a commit or a pull request). The agent writes none of the user's files itself.
Otherwise the result says plainly why nothing improved.
"""

from __future__ import annotations

import inspect
import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_ktune import backends
from pytest_ktune.agent._budget import Budget
from pytest_ktune.agent._client import (
    AgentError,
    BudgetError,
    ModelClient,
    ModelError,
    ModelSettings,
    Reply,
    looks_like_refusal,
)
from pytest_ktune.agent._proposal import ProposalError
from pytest_ktune.agent._rules import rule_proposal
from pytest_ktune.agent._sandbox import new_template_files, template_module, template_name
from pytest_ktune.agent._tools import TOOLS, BaseTime, Bench, Revision, Workbench, tool_result
from pytest_ktune.agent._transcript import Transcript, new_run_id
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.files import write_atomic
from pytest_ktune.core.keys import cases_by_key, key_label, key_string
from pytest_ktune.core.options import DEFAULTS
from pytest_ktune.core.space import Value, config_key
from pytest_ktune.core.store import Record, Store, Tuned, now_utc, target_id
from pytest_ktune.core.verified import how_verified
from pytest_ktune.measure.tools import ToolPlan
from pytest_ktune.measure.worker import TargetRef, WorkerPool, WorkerSpec
from pytest_ktune.tuner.decide import SideBySide, weigh
from pytest_ktune.tuner.outcome import TemplateChange

SYSTEM = """You tune one GPU kernel for pytest-ktune. Work only through the tools.
Method: rewrite the kernel into an explicitly parameterised template (block size, vector width, items per
thread, rows per block, grid cap, unroll, shared-memory staging: whatever applies) whose tunable choices are
macros compiled with -D NAME=value, declare the space of each parameter and constraints that keep every
point correct, and let the Optuna search pick the values. Every template is compiled and verified against
the reference before it counts, on every value and pair of values of its space, on edge-value inputs and on
a shape that does not divide, with guards around every buffer, and under checkers of races, out-of-bounds
accesses, uninitialised values and barriers; a failed check comes back with the error. Include only
headers beside the kernel, by a relative name.
Rules: keep the kernel's name and argument list (the Python wrapper launches it); a template must be correct
for every point of its space (guard tails, respect alignment); use `launch` expressions when the launch
geometry must follow the parameters. Use analyze to see times, GB/s against the copy bandwidth, resources
and failures; use plan to narrow or widen the space, enqueue configurations, or finish. Finish (plan with
action finish) when further revisions are unlikely to help."""


@dataclass(frozen=True)
class AgentSettings:
    """The model (None: the agent is off) and the loop's bounds."""

    model: ModelSettings | None
    iterations: int = DEFAULTS.agent_iterations
    wall_s: float = DEFAULTS.agent_wall  # the whole run: model calls, checks, searches and the comparison
    memory_mb: int = DEFAULTS.agent_memory  # resident memory of this process and its workers
    max_failed_proposals: int = 4
    max_bad_replies: int = 3
    compare_rounds: int = 3
    tools: ToolPlan = field(default_factory=ToolPlan)  # the checking tools accepted templates run under

    def check(self) -> None:
        if self.iterations < 1:
            raise AgentError(f"{self.iterations} agent iterations allow no request",
                             hint="give --ktune-agent-iterations 1 or more")
        if self.wall_s <= 0:
            raise AgentError("the agent's wall-time budget must be positive", hint="e.g. 1800 (seconds)")
        if self.memory_mb <= 0:
            raise AgentError("the agent's memory budget must be positive", hint="e.g. 8192 (MiB)")
        if self.model is not None:
            self.model.check()


@dataclass(frozen=True)
class KeyComparison:
    """The base kernel and the template's best, timed side by side for one key."""

    label: str
    base_params: Mapping[str, Value]
    base_us: float
    template_params: Mapping[str, Value]
    template_us: float
    faster: bool
    note: str
    slower: bool = False


@dataclass(frozen=True)
class AgentResult:
    """How a run ended, and what it found: ``template``, the change to deliver, when it improved."""

    target: str
    status: str  # "improved", "no-improvement", "no-template", "off" or "error"
    stop: str  # why the loop ended
    message: str  # the whole story in words, for the terminal
    proposal: Any = None  # the best verified Proposal
    comparisons: tuple[KeyComparison, ...] = ()
    template: TemplateChange | None = None
    transcript: Path | None = None
    usage: str = ""
    iterations: int = 0


class _Stop(Exception):
    """The loop ends here, for the reason given."""


def run_agent(bench: Bench, settings: AgentSettings, *, dest: Path | None = None) -> AgentResult:
    """Run the agent loop on ``bench.base``; a verified template that beats it is the result's change,
    for the files under ``dest`` (default: beside the base kernel)."""

    settings.check()
    if settings.model is None:
        raise AgentError("run_agent needs a model", hint="use rules_fallback() when no model is configured")
    base = bench.base
    if bench.backend not in base.sources:
        raise AgentError(f"{base.name} has no {bench.backend} source to template", where=base.where,
                         hint=f"add a {bench.backend} source to sources=, or pick another backend")
    transcript = Transcript(bench.scratch / "agent", new_run_id(base.name))
    budget = Budget(settings.wall_s, settings.memory_mb)
    client = ModelClient(settings.model, transcript, budget=budget)
    device = backends.create(bench.backend).device
    bench_tools = Workbench(bench, device, measure_base, budget=budget)
    transcript.write("start", {"target": base.where, "backend": bench.backend, "device": device.id})
    messages: list[Mapping[str, Any]] = [{"role": "system", "content": SYSTEM},
                                         {"role": "user", "content": task_text(bench, device)}]
    stop = ""
    bad = 0
    iteration = 0
    try:
        for iteration in range(1, settings.iterations + 1):
            if budget.spent():
                raise _Stop(budget.spent())
            reply = client.ask(messages, TOOLS)
            messages.append(reply.message)
            problem = _unusable(reply)
            if problem.startswith("refused"):
                raise _Stop(f"the model {problem}")
            if problem:
                bad += 1
                transcript.write("problem", {"iteration": iteration, "problem": problem})
                if bad >= settings.max_bad_replies:
                    raise _Stop(f"{bad} unusable answers in a row (the bound); the last: {problem}")
                messages.append({"role": "user", "content": f"Your answer could not be used: {problem}. Call one "
                                                            "of the tools (propose_template, test_template, "
                                                            "analyze, plan)."})
                continue
            usable = False
            for call in reply.tool_calls:
                if call.error:
                    bad_text = call.error
                    content: Mapping[str, Any] = {"ok": False, "error": call.error}
                else:
                    content = bench_tools.run(call)
                    usable = True
                transcript.write("tool", {"iteration": iteration, "name": call.name, "result": content})
                messages.append(tool_result(call, content, bench.root))
            if usable:
                bad = 0
            else:
                bad += 1
                if bad >= settings.max_bad_replies:
                    raise _Stop(f"{bad} unusable answers in a row (the bound); the last: {bad_text}")
            if bench_tools.failed_proposals >= settings.max_failed_proposals:
                raise _Stop(f"{bench_tools.failed_proposals} proposals failed their check (the bound); the last: "
                            f"{bench_tools.failures[-1]}")
            if bench_tools.finished:
                raise _Stop(f"the model finished ({bench_tools.finished})")
        what = "proposing" if bench_tools.revisions or bench_tools.failed_proposals else "calling tools"
        stop = (f"the model was still {what} after {settings.iterations} iterations without finishing; stopped "
                "at the bound")
    except _Stop as exc:
        stop = str(exc)
    except (ModelError, BudgetError) as exc:
        stop = exc.message + (f" (next step: {exc.hint})" if exc.hint else "")
    transcript.write("stop", {"iteration": iteration, "reason": stop, "usage": client.usage.describe(settings.model)})
    result = conclude(bench, bench_tools, settings, stop=stop, dest=dest, budget=budget)
    result = _with(result, transcript=transcript.path, usage=client.usage.describe(settings.model),
                   iterations=iteration)
    transcript.write("result", {"status": result.status, "message": result.message,
                                "template": sorted(result.template.files) if result.template else []})
    return result


def _with(result: AgentResult, **changes: Any) -> AgentResult:
    from dataclasses import replace

    return replace(result, **changes)


def _unusable(reply: Reply) -> str:
    """Why an answer cannot be acted on ('refused: ...' ends the run), or ''."""
    if reply.refusal:
        return f"refused: {reply.refusal.strip()[:300]}"
    if reply.tool_calls:
        return ""
    if not reply.text.strip():
        return "an empty answer (no text and no tool call)"
    if looks_like_refusal(reply.text):
        return f"refused: {reply.text.strip()[:300]}"
    return f"a plain-text answer with no tool call ({reply.text.strip()[:120]!r})"


def measure_base(bench: Bench) -> list[BaseTime]:
    """The base kernel's time per key, with the parameters it runs with now (recorded, else default)."""

    base = bench.base
    try:
        store: Store | None = Store.load(bench.params_path)
    except KtuneError:
        store = None
    tid = target_id(base, bench.root)
    out: list[BaseTime] = []
    for key, indices in cases_by_key(base, bench.backend).values():
        spec = WorkerSpec(target=TargetRef.of(base), backend=bench.backend, cases=tuple(indices),
                          cache_dir=str(bench.scratch / "cache" / bench.backend))
        with WorkerPool(spec, trial_timeout_s=bench.tune.trial_timeout_s) as pool:
            pool.ensure()
            rec = store.find(tid, pool.device.id, key) if store else None
            params = base.complete(rec.params) if rec else dict(base.default)
            outcome = next(iter(pool.evaluate([params], bench.tune.seed or 0)))
        if outcome.status != "ok":
            raise AgentError(f"the base kernel fails with its own parameters {params} for key {key_label(key)}: "
                             f"{outcome.reason}", where=base.where,
                             hint="run pytest --ktune to see the failure; the agent starts from a working kernel")
        moved = [base.bytes_for(base.case_args(base.cases[i])) for i in indices]
        out.append(BaseTime(key=dict(key), label=key_label(key), indices=tuple(indices), params=params,
                            us=outcome.value_s * 1e6,
                            bytes_moved=sum(m for m in moved if m) if all(moved) else None,
                            resources=dict(outcome.resources)))
    if not out:
        raise AgentError(f"no case of {base.name} runs on {bench.backend}", where=base.where,
                         hint="add a case for this backend")
    return out


def compare(bench: Bench, base_time: BaseTime, rev: Revision, rounds: int,
            budget: Budget | None = None) -> KeyComparison:
    """Time the base kernel (its parameters now) and the revision's best, interleaved, on the key's cases."""

    search = rev.searches[base_time.label]
    cache = str(bench.scratch / "cache" / bench.backend)
    spec_a = WorkerSpec(target=TargetRef.of(bench.base), backend=bench.backend, cases=base_time.indices,
                        cache_dir=cache)
    spec_b = WorkerSpec(target=TargetRef.of(rev.target), backend=bench.backend, cases=base_time.indices,
                        cache_dir=cache)
    samples_a: dict[str, list[float]] = {}
    samples_b: dict[str, list[float]] = {}
    medians_a: list[float] = []
    medians_b: list[float] = []
    seed = (bench.tune.seed or 0) + 4099
    timeout = budget.cap(bench.tune.trial_timeout_s) if budget is not None else bench.tune.trial_timeout_s
    with WorkerPool(spec_a, trial_timeout_s=timeout) as pa, WorkerPool(spec_b, trial_timeout_s=timeout) as pb:
        for r in range(rounds):
            for pool, params, samples, medians in ((pa, base_time.params, samples_a, medians_a),
                                                   (pb, search.best, samples_b, medians_b)):
                out = next(iter(pool.evaluate([dict(params)], seed + r)))
                if out.status != "ok":
                    who = "the base kernel" if pool is pa else f"revision {rev.number}"
                    return KeyComparison(base_time.label, base_time.params, base_time.us, search.best,
                                         search.best_us, False, f"{who} failed in the comparison: {out.reason}",
                                         slower=True)
                medians.append(out.value_s)
                for t in out.times:
                    samples.setdefault(t.case_id, []).extend(t.samples)
    a_us = sorted(medians_a)[len(medians_a) // 2] * 1e6
    b_us = sorted(medians_b)[len(medians_b) // 2] * 1e6
    w = weigh([SideBySide(c, samples_a[c], statistics.median(samples_a[c]), samples_b[c],
                          statistics.median(samples_b[c])) for c in samples_a], a_us, b_us)
    slower, ok = w.slower, w.accepted
    if ok:
        note = f"x{a_us / b_us:.2f} faster than the base kernel, side by side"
    elif slower:
        note = f"slower than the base kernel on {', '.join(slower)}, side by side"
    else:
        note = f"not faster than the base kernel beyond noise, side by side (x{a_us / b_us:.3f})"
    return KeyComparison(base_time.label, base_time.params, a_us, search.best, b_us, ok, note, slower=bool(slower))


def conclude(bench: Bench, tools: Workbench, settings: AgentSettings, *, stop: str, dest: Path | None,
             lead: str = "", budget: Budget | None = None) -> AgentResult:
    """Compare the best verified revision with the base kernel; make it the result's change only if it
    is faster on some key and slower on none. With the run's budget spent, the best revision is saved
    under .ktune/agent/, not compared."""
    base = bench.base
    best = tools.best()
    lead = lead or f"agent stopped: {stop}"
    if best is None:
        last = f" The last failure: {tools.failures[-1]}" if tools.failures else ""
        return AgentResult(target=base.name, status="no-template", stop=stop,
                           message=f"{base.name}: {lead}. No template was verified, so nothing was "
                                   f"written.{last}")
    head = f"{base.name}: {lead}. Revision {best.number} ({best.check.summary()})"
    if budget is not None and budget.spent():
        saved = _save(bench, best, {})
        return AgentResult(target=base.name, status="no-improvement", stop=stop, proposal=best.proposal,
                           message=f"{head} was not compared with the base kernel: {budget.spent()}. Nothing was "
                                   f"written; the template is saved in {_rel(saved, bench.root)}.")
    comparisons = tuple(compare(bench, b, best, settings.compare_rounds, budget) for b in tools.base_times
                        if b.label in best.searches)
    numbers = "; ".join(f"{c.label}: base {c.base_us:.2f} µs {dict(c.base_params)} vs template {c.template_us:.2f} µs "
                        f"{dict(c.template_params)}: {c.note}" for c in comparisons)
    improved = any(c.faster for c in comparisons) and not any(c.slower for c in comparisons)
    if not improved:
        return AgentResult(target=base.name, status="no-improvement", stop=stop, proposal=best.proposal,
                           comparisons=comparisons,
                           message=f"{head} gave no improvement: {numbers}. Nothing was written.")
    saved = _save(bench, best, {c.label: dict(c.template_params) for c in comparisons})
    try:
        template = template_change(bench, best, comparisons, dest or base.file.parent, tools.device.id,
                                   summary=f"{head} is faster: {numbers}.")
    except KtuneError as exc:
        return AgentResult(target=base.name, status="improved", stop=stop, proposal=best.proposal,
                           comparisons=comparisons,
                           message=f"{head} is faster: {numbers}. It cannot be delivered: {exc.render()}. The "
                                   f"template and its parameters are saved in {_rel(saved, bench.root)}.")
    return AgentResult(target=base.name, status="improved", stop=stop, proposal=best.proposal,
                       comparisons=comparisons, template=template,
                       message=f"{head} is faster: {numbers}. The template ({', '.join(sorted(template.files))}) "
                               "and its tuned parameters go to the write-back; they are saved in "
                               f"{_rel(saved, bench.root)}.")


def _save(bench: Bench, rev: Revision, params: Mapping[str, Mapping[str, Value]]) -> Path:
    """The revision, its check's record and its tuned parameters, kept under .ktune/agent/ for review."""
    saved = bench.scratch / "agent" / f"{bench.base.name}-revision-{rev.number}-{rev.proposal.digest()}.json"
    write_atomic(saved, json.dumps({"proposal": rev.proposal.to_json(), "verified": rev.check.to_json(),
                                    "params": dict(params)}, indent=1, default=str))
    return saved


def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def template_change(bench: Bench, rev: Revision, comparisons: Sequence[KeyComparison], dest: Path, device: str,
                    *, summary: str) -> TemplateChange:
    """The template's new files under ``dest`` and its tuned parameters, per key, as records of the new
    target: the change the write-back delivers. A KtuneError where a file of it exists, or lies
    outside the project."""
    files = new_template_files(rev.proposal, bench.base, dest=dest, verified=rev.check)
    module = template_module(bench.base, rev.proposal.backend, dest)
    root = bench.root.resolve()
    rel = {}
    for path in files:
        try:
            rel[path] = path.resolve().relative_to(root).as_posix()
        except ValueError:
            raise KtuneError(f"{path} is outside the project {bench.root}", where=bench.base.where,
                             hint="keep the kernel inside the project, or write the template with ktune "
                                  "templatize --out") from None
    tid = f"{module.resolve().relative_to(root).as_posix()}::{template_name(bench.base)}"
    records = []
    cover = frozenset(config_key(c) for c in rev.check.checked)
    # The template keeps the base's cases and key, so its sandboxed target (``rev.target``) names them.
    by_key = cases_by_key(rev.target, bench.backend)
    for c in comparisons:
        search = rev.searches[c.label]
        _, indices = by_key.get(key_string(search.key), ({}, []))
        cases = [rev.target.case_id(rev.target.cases[i]) for i in indices]
        records.append(Record(target=tid, device=device, key=dict(search.key), params=dict(c.template_params),
                              tuned=Tuned(date=now_utc(), sampler=bench.tune.sampler, trials=search.timed,
                                          study=search.study, result=f"agent revision {rev.number}: {c.note}",
                                          verified=how_verified(cover, c.template_params, cases))))
    return TemplateChange(target=bench.base.name, files={rel[p]: text for p, text in files.items()},
                          records=tuple(records), summary=summary)


def task_text(bench: Bench, device: Any) -> str:

    base = bench.base
    try:
        wrapper = inspect.getsource(base.fn)
    except (OSError, TypeError):
        wrapper = "(source not available)"
    cases = [base.case_id(c) for c in base.cases if c.runs_on(bench.backend)]
    keys = list(cases_by_key(base, bench.backend))
    limits = (f"max {device.max_threads_per_block} threads per block, {device.shared_mem_per_block} bytes of "
              f"shared memory per block, warp {device.warp_size}")
    return f"""Target {base.name}, backend {bench.backend}, device {device.name} ({limits}).
Kernel function name: {base.kernel_name}. Cases: {', '.join(cases)}.
Its current space: {dict(base.space.params)}; default: {dict(base.default)}.
Keys (the search and the comparison run per key): {', '.join(keys)}. The base kernel's times, GB/s and
resources: call analyze.

The Python wrapper (it launches the kernel; `launch` expressions can re-aim its grid and block):
```python
{wrapper}```

The kernel source ({base.source_path(bench.backend).name}):
```
{base.source_text(bench.backend)}```
"""


AGENT_OFF = ("agent: off (no model configured: set --ktune-model or KTUNE_MODEL, with OPENAI_BASE_URL and/or "
             "OPENAI_API_KEY); the rule-based templater runs instead")


def rules_fallback(bench: Bench, settings: AgentSettings, *, dest: Path | None = None) -> AgentResult:
    """What ``--ktune-agent`` does with no model: the rule-based template, verified, searched, compared
    with the base kernel side by side, and the result's change only if faster; within the run's
    budgets (``settings``: wall time, memory, the checking tools), as the model's loop is."""

    base = bench.base
    settings.check()
    device = backends.create(bench.backend).device
    budget = Budget(settings.wall_s, settings.memory_mb)
    tools = Workbench(bench, device, measure_base, budget=budget)
    try:
        proposal = rule_proposal(base, bench.backend, max_threads=int(device.max_threads_per_block))
    except ProposalError as exc:
        return AgentResult(target=base.name, status="no-template", stop=AGENT_OFF,
                           message=f"{base.name}: {AGENT_OFF}. The rules found nothing to template: {exc.message}. "
                                   "Nothing was written.")
    outcome = tools.run_tool("propose_template", {k: v for k, v in proposal.to_json().items()
                                                  if k not in ("backend", "origin")}, origin="rules")
    lead = AGENT_OFF if outcome.get("ok") else f"{AGENT_OFF}; its template was rejected: " \
        f"{outcome.get('message') or outcome.get('error')}"
    return conclude(bench, tools, settings, stop=AGENT_OFF, dest=dest, lead=lead, budget=budget)


def run_stage(bench: Bench, settings: AgentSettings) -> AgentResult:
    """The agent stage of one target, before its search: the agent loop with a model, the rule-based
    templater without one. An error of the stage is its result (status "error"): the search of the
    target itself still runs."""
    try:
        if settings.model is None:
            return rules_fallback(bench, settings)
        return run_agent(bench, settings)
    except KtuneError as exc:
        return AgentResult(target=bench.base.name, status="error", stop=exc.message,
                           message=f"{bench.base.name}: the agent stage failed: {exc.render()}")
