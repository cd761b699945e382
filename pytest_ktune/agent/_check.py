"""Checking a proposal before it counts: sandboxed, then verified in the isolated worker, then under the tools.

1. The sandbox (``_includes``): every file the source would include is checked before it is read.
2. The configurations: a covering design over the whole feasible space, solved (``_covering``: every
   value and every pair of values that a feasible configuration holds, per key), plus ``sample`` more
   drawn at random, the default first. A space whose design needs more configurations than a check
   verifies is refused, never called verified in part.
3. The inputs: every case of the base target on the backend (random inputs, drawn from the seed),
   and the added cases of ``_variants`` (edge values, a shape that does not divide) that the base
   kernel itself passes. Each configuration runs on every case whose key its constraints allow, every
   buffer inside guard regions (``measure.guards``), in the worker, compiled and verified only.
4. The tools (``measure.tools``): configurations that hold every value, each on the odd shape (else
   the smallest declared case of its key), under Oclgrind with its race and uninitialised-value checks
   (OpenCL), or on it and on the edge-value cases under compute-sanitizer memcheck, racecheck, initcheck
   and synccheck (CUDA), where installed.

``check_proposal`` never raises for a bad proposal: the result says what went wrong, in words that
name no path of this machine, and, when it passed, exactly what was verified.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pytest_ktune.agent._budget import Budget
from pytest_ktune.agent._checkrun import Batch, out_of_time, run_design
from pytest_ktune.agent._covering import MAX_CONFIGS, covering_design, describe, value_cover
from pytest_ktune.agent._messages import compile_log, for_model
from pytest_ktune.agent._proposal import Proposal, ProposalCheck, _kv
from pytest_ktune.agent._sandbox import _headers, _source_name, proposal_target
from pytest_ktune.agent._variants import Variant, candidate_variants, digest
from pytest_ktune.core.errors import KtuneError, SpaceError
from pytest_ktune.core.space import Value
from pytest_ktune.core.target import Target
from pytest_ktune.measure.guards import guard_bytes
from pytest_ktune.measure.tools import INSTALL, SANITIZER_TOOLS, ToolPlan, ToolRun, available, run_tool
from pytest_ktune.measure.worker import Outcome, TargetRef, WorkerPool, WorkerSpec

_SCREENED: dict[str, tuple[Variant, ...]] = {}  # per base kernel, backend and seed: the added cases it passes


def _fail(stage: str, message: str, checked: Sequence[Mapping[str, Value]] = ()) -> ProposalCheck:
    return ProposalCheck(ok=False, stage=stage, message=message, checked=tuple(checked), failures=())


def _spec(target: Target, backend: str, cases: Sequence[int], root: Path) -> WorkerSpec:
    return WorkerSpec(target=TargetRef.of(target), backend=backend, cases=tuple(cases),
                      cache_dir=str(root / ".ktune" / "cache" / backend), verify_only=True)


def screened_variants(base: Target, backend: str, *, root: Path, seed: int, timeout_s: float) -> tuple[Variant, ...]:
    """The added cases (``_variants``) on which the base kernel, with its default, agrees with the reference."""
    candidates = candidate_variants(base, backend)
    if not candidates:
        return ()
    memo = f"{base.where}|{backend}|{base.source_hash(backend)}|{digest(candidates)}|{seed}"
    if memo in _SCREENED:
        return _SCREENED[memo]
    target = proposal_target(None, base, workdir=root / ".ktune" / "agent" / "proposals", backend=backend,
                             variants=candidates)
    first = len(base.cases)
    kept: list[Variant] = []
    # A shape the base kernel's own constraints rule out for its default is one it never ran.
    runnable = [i for i in range(len(candidates))
                if base.space.valid(dict(base.default), target.case_key(target.cases[first + i]))]
    groups = [runnable] if runnable else []
    while groups:
        group = groups.pop()
        with WorkerPool(_spec(target, backend, [first + i for i in group], root), trial_timeout_s=timeout_s) as pool:
            (out,) = pool.evaluate([dict(base.default)], seed)
        if out.status == "ok":
            kept.extend(candidates[i] for i in group)
        elif out.failed_cases or len(group) == 1:
            bad = {cid for cid, _ in out.failed_cases}
            kept.extend(candidates[i] for i in group if out.failed_cases and target.case_id(target.cases[first + i])
                        not in bad)
        else:  # a crash or a hang on one of them: screen them one by one
            groups.extend([i] for i in group)
    order = {v: i for i, v in enumerate(candidates)}
    result = tuple(sorted(kept, key=order.__getitem__))
    _SCREENED[memo] = result
    return result


def check_proposal(proposal: Proposal, base: Target, *, root: Path, backend: str, sample: int = 8,
                   seed: int = 0, trial_timeout_s: float = 60.0, tools: ToolPlan | None = None,
                   budget: Budget | None = None) -> ProposalCheck:
    """Check ``proposal`` as the module docstring says; the result, never an exception."""
    try:
        return _check(proposal, base, root=root, backend=backend, sample=sample, seed=seed,
                      trial_timeout_s=trial_timeout_s, tools=tools or ToolPlan(), budget=budget)
    except KtuneError as exc:
        stage = "space" if isinstance(exc, SpaceError) else "schema"
        return _fail(stage, for_model(_render(exc), root))
    except Exception as exc:  # a proposal must never end the run: say what happened instead
        return _fail("schema", for_model(f"the proposal could not be checked: {type(exc).__name__}: {exc}", root))


def _check(proposal: Proposal, base: Target, *, root: Path, backend: str, sample: int, seed: int,
           trial_timeout_s: float, tools: ToolPlan, budget: Budget | None) -> ProposalCheck:
    if proposal.backend != backend:
        return _fail("schema", f"the proposal is for {proposal.backend}, the check runs on {backend}")
    try:
        proposal.validate()
    except KtuneError as exc:
        return _fail("schema" if not isinstance(exc, SpaceError) else "space", _render(exc))
    try:
        headers = _headers(proposal.source, base, backend)
    except KtuneError as exc:
        return _fail("sandbox", _render(exc))
    indices = [i for i, c in enumerate(base.cases) if c.runs_on(backend)]
    if not indices:
        return _fail("space", f"target {base.name}: no case runs on {backend}")
    base_keys = [base.case_key(base.cases[i]) for i in indices]
    space = proposal.as_space()
    try:
        space.check_names(list(base_keys[0]))
    except SpaceError as exc:
        return _fail("space", _render(exc))
    key_names = set().union(*(set(k) for k in base_keys))
    for dim, expr in proposal.launch_exprs().items():
        # Names the wrapper binds are only known when it runs; parameters and key dims are checked there too.
        shadowed = sorted(expr.names & key_names & set(proposal.space))
        if shadowed:
            return _fail("space", f"launch.{dim} names {', '.join(shadowed)}, both a parameter and a key "
                                  "dimension; rename the parameter")
    for k in base_keys:
        broken = space.violated(proposal.default, k)
        if broken:
            return _fail("space", f"the default {dict(proposal.default)} breaks {'; '.join(broken)} for key {_kv(k)}")
    if budget is not None and budget.spent():
        return _fail("timeout", budget.spent())
    timeout = budget.cap(trial_timeout_s) if budget else trial_timeout_s
    variants = screened_variants(base, backend, root=root, seed=seed, timeout_s=timeout)
    target = proposal_target(proposal, base, workdir=root / ".ktune" / "agent" / "proposals", variants=variants)
    every = indices + [len(base.cases) + j for j in range(len(variants))]
    labels = [json.dumps(target.case_key(target.cases[i]), sort_keys=True, default=str) for i in every]
    keys_text = list(dict.fromkeys(labels))
    keys = [json.loads(k) for k in keys_text]
    design = covering_design(space, keys, proposal.default, seed=seed, extra=sample)
    if not design.complete:
        left = sum(design.needed) - sum(design.covered)
        return _fail("space", f"the space is too large to verify: holding every value and pair of values that a "
                              f"feasible configuration holds takes more than {MAX_CONFIGS} configurations (after "
                              f"{len(design.configs)}, {left} pairs are not covered yet), and a check verifies at "
                              f"most {MAX_CONFIGS}; give fewer values, or constraints that rule out what the "
                              "kernel need not run")
    case_key = {i: keys_text.index(label) for i, label in zip(every, labels, strict=True)}
    described = _described(target, base, variants, every, seed)
    source_name = _source_name(base, backend, "_proposal")
    header_names = {p.name for p in headers}
    if budget is not None and budget.spent():
        return _fail("timeout", f"{budget.spent()} before the check")
    # The default first, alone and on every case: a source that does not compile, or is wrong everywhere,
    # fails at once. Then the rest of the design on the declared cases and the odd shapes, and the
    # configurations that hold every value on the edge-value cases.
    first_added = len(base.cases)
    edge = [p for p, i in enumerate(every) if i >= first_added and variants[i - first_added].inputs]
    plain = [p for p in range(len(every)) if p not in edge]
    edge_keys = {case_key[every[p]] for p in edge}
    on_edges = [n for n in value_cover(list(design.configs)) if n and design.valid[n] & edge_keys]
    batches: list[Batch] = [([0], None), (list(range(1, len(design.configs))), plain), (on_edges, edge)]

    def explain(out: Outcome, stage: str) -> str:
        return _explain(out, stage, source=proposal.source, source_name=source_name, headers=header_names,
                        described=described)

    try:
        with WorkerPool(_spec(target, backend, every, root), trial_timeout_s=timeout) as pool:
            got = run_design(pool, design.configs, batches, seed=seed, trial_timeout_s=trial_timeout_s,
                             budget=budget, explain=explain)
    except KtuneError as exc:
        return _fail("crash", for_model(f"the worker could not run the proposal: {exc.message}", root))
    checked, failures, infeasible = got.checked, got.failures, got.infeasible
    edge_text = f"on the default and the {len(on_edges)} configurations that hold every value"
    described = {i: (cid, what + (f", {edge_text}" if every.index(i) in edge else ""))
                 for i, (cid, what) in described.items()}
    skipped = tuple(v.case_id(base.case_id(base.cases[v.base])) for v in candidate_variants(base, backend)
                    if v not in variants)
    common: dict[str, Any] = {"cases": tuple(described.values()), "coverage": describe(design), "seed": seed,
              "guard_bytes": guard_bytes(), "skipped": skipped,
              "on_edges": tuple(c for c in (dict(design.configs[n]) for n in [0, *on_edges]) if c in checked)
              if edge else ()}
    if failures:
        return ProposalCheck(ok=False, stage=got.stage, message=for_model(got.first, root), checked=tuple(checked),
                             failures=tuple(failures), infeasible=tuple(infeasible), **common)
    if got.out_of_time:
        return ProposalCheck(ok=False, stage="timeout", message=out_of_time(got, design.configs, batches),
                             checked=tuple(checked), failures=(), infeasible=tuple(infeasible), **common)
    runs = _run_tools(tools, target, base, backend=backend, case_key=case_key, every=every, variants=variants,
                      seed=seed, budget=budget, checked=checked)
    bad = [r for r in runs if r.status == "errors" or r.failures
           or (tools.mode == "require" and r.status == "unavailable")]
    if bad:
        return ProposalCheck(ok=False, stage="tools", message=for_model(_tool_message(bad[0], proposal.source), root),
                             checked=tuple(checked), failures=tuple(bad[0].findings or bad[0].failures),
                             infeasible=tuple(infeasible), tools=tuple(runs), **common)
    return ProposalCheck(ok=True, stage="ok", message=f"{len(checked)} configurations verified on "
                                                      f"{len(every)} cases",
                         checked=tuple(checked), failures=(), infeasible=tuple(infeasible), tools=tuple(runs), **common)


def _described(target: Target, base: Target, variants: Sequence[Variant], every: Sequence[int],
               seed: int) -> dict[int, tuple[str, str]]:
    out: dict[int, tuple[str, str]] = {}
    for i in every:
        cid = target.case_id(target.cases[i])
        if i < len(base.cases):
            out[i] = (cid, f"declared case, random inputs drawn from seed {seed}")
        else:
            v = variants[i - len(base.cases)]
            out[i] = (cid, f"added: {v.describe()} (the base kernel passes it)")
    return out


def _explain(out: Outcome, stage: str, *, source: str, source_name: str, headers: set[str],
             described: Mapping[int, tuple[str, str]]) -> str:
    if stage == "compile":
        return "the compiler says:\n" + compile_log(out.detail or out.reason, source, source_name, headers)
    text = out.reason
    if stage == "timeout":
        text += "; that was this configuration's own compile and check, the others' not counted"
    names = dict(described.values())
    for cid, _ in out.failed_cases[:1]:
        if "~" in cid:
            text += f" (case {cid}: {names.get(cid, '')})"
    if len(out.failed_cases) > 1:
        text += f"; {len(out.failed_cases) - 1} more case(s) failed: " + ", ".join(c for c, _ in out.failed_cases[1:6])
    return text


def _run_tools(plan: ToolPlan, target: Target, base: Target, *, backend: str, case_key: Mapping[int, int],
               every: Sequence[int], variants: Sequence[Variant], seed: int, budget: Budget | None,
               checked: Sequence[Mapping[str, Value]]) -> list[ToolRun]:
    """Each tool of the plan on a few checked configurations that hold every value, each on a few cases: of
    the cases its constraints allow, an odd shape (its tails are where accesses go out of bounds), else the
    smallest declared case of its key; and, under compute-sanitizer (which runs at the device's speed),
    every edge-value case (zeros, tiny and large magnitudes, a sweep: where branches differ) its
    constraints allow. Oclgrind simulates work-item by work-item: one case is what a check can afford."""
    names = plan.for_backend(backend)
    if not names or not checked:
        return []
    first = len(base.cases)
    plain = [i for i in every if not (i >= first and variants[i - first].inputs)]
    edges = [i for i in every if i >= first and variants[i - first].inputs]
    smallest: dict[int, int] = {}
    for i in plain:
        k = case_key[i]
        if k not in smallest or target.cases[i].input_bytes < target.cases[smallest[k]].input_bytes:
            smallest[k] = i
    odd = [i for i in plain if i >= first]
    head = odd + [i for i in sorted(smallest.values()) if i not in odd]
    picked = value_cover(checked)

    def one(tool: str) -> ToolRun:
        if not available(tool):
            return ToolRun(tool, "unavailable", note=f"not installed ({INSTALL[tool]})")
        cases = head + (edges if tool in SANITIZER_TOOLS else [])
        groups = [list(range(len(head))), *([p] for p in range(len(head), len(cases)))]
        keys = [target.case_key(target.cases[i]) for i in cases]
        configs = [checked[i] for i in picked if any(target.space.valid(dict(checked[i]), k) for k in keys)]
        timeout = budget.cap(plan.timeout_s) if budget else plan.timeout_s
        log = plan.log_dir / f"{base.name}-{target.module}-{tool}.log" if plan.log_dir is not None else None
        return run_tool(tool, TargetRef.of(target), backend=backend, cases=cases, configs=configs, seed=seed,
                        timeout_s=timeout, groups=groups, log=log)

    # Each tool runs in a process of its own and they share nothing: compute-sanitizer's four run side by
    # side (one GPU takes several processes at once), so the stage lasts as long as its slowest tool.
    with ThreadPoolExecutor(max_workers=max(1, len(names)), thread_name_prefix="ktune-tool") as pool:
        runs = list(pool.map(one, names))
    return runs


def _tool_message(run: ToolRun, source: str) -> str:
    if run.status == "unavailable":
        return f"{run.describe} is required but {run.note}"
    lines = source.splitlines()
    parts = []
    for cfg, finding in run.findings[:3]:
        shown = finding
        if "at line " in finding and ": " not in finding.split("at line ", 1)[1]:
            n = int(finding.split("at line ", 1)[1].split()[0])
            if 1 <= n <= len(lines):
                shown += f": {lines[n - 1].strip()[:160]}"
        parts.append(f"{_kv(cfg)}: {shown}")
    for cfg, text in run.failures[:2]:
        parts.append(f"{_kv(cfg)}: under the tool, {text}")
    return f"{run.describe} on {', '.join(run.cases)}: " + " | ".join(parts)


def _render(exc: KtuneError) -> str:
    return exc.message + (f" (next step: {exc.hint})" if exc.hint else "")
