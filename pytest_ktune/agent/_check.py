"""Checking a proposal in the isolated worker: compiled, verified on every case for a sample of its space, timed."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_ktune.agent._proposal import _MAX_POINTS, Proposal, ProposalCheck, _kv
from pytest_ktune.agent._sandbox import proposal_target
from pytest_ktune.core.errors import KtuneError, SpaceError
from pytest_ktune.core.space import Space, Value
from pytest_ktune.core.target import Target
from pytest_ktune.measure.bench import BenchConfig
from pytest_ktune.measure.worker import TargetRef, WorkerPool, WorkerSpec


def _fail(stage: str, message: str) -> ProposalCheck:
    return ProposalCheck(ok=False, stage=stage, message=message, checked=(), failures=())


def _stage_of(status: str, reason: str) -> str:
    if status == "infeasible":
        return "limits"
    if reason.startswith("compile error"):
        return "compile"
    if reason.startswith("no answer within"):
        return "timeout"
    low = reason.lower()
    if reason.startswith("the worker process") or "illegal" in low or "out of bounds" in low \
            or "misaligned" in low:
        return "crash"
    return "verify"


def sample_configs(space: Space, keys: Sequence[Mapping[str, Any]], default: Mapping[str, Value], *,
                   sample: int, seed: int) -> list[dict[str, Value]]:
    """The default, then up to ``sample`` other points valid for every key, drawn with ``seed``."""
    pool: list[dict[str, Value]] = []
    for i, p in enumerate(space.points()):
        if i >= _MAX_POINTS:
            break
        if p != dict(default) and all(space.valid(p, k) for k in keys):
            pool.append(p)
    rng = random.Random(seed)
    picked = rng.sample(pool, min(sample, len(pool)))
    return [dict(default), *picked]


def check_proposal(proposal: Proposal, base: Target, *, root: Path, backend: str, sample: int = 8,
                   seed: int = 0, trial_timeout_s: float = 60.0) -> ProposalCheck:
    """Compile and verify the default plus ``sample`` configurations drawn (seeded) from the space, on
    every case of ``base`` that runs on ``backend``, on fresh inputs, in the isolated worker. Never
    raises for a bad proposal: the result says what went wrong."""

    if proposal.backend != backend:
        return _fail("schema", f"the proposal is for {proposal.backend}, the check runs on {backend}")
    try:
        proposal.validate()
    except KtuneError as exc:
        return _fail("schema" if not isinstance(exc, SpaceError) else "space", _render(exc))
    indices = [i for i, c in enumerate(base.cases) if c.runs_on(backend)]
    if not indices:
        return _fail("space", f"{base.where}: no case runs on {backend}")
    keys = [base.case_key(base.cases[i]) for i in indices]
    space = proposal.as_space()
    try:
        space.check_names(list(keys[0]))
    except SpaceError as exc:
        return _fail("space", _render(exc))
    key_names = set().union(*(set(k) for k in keys))
    for dim, expr in proposal.launch_exprs().items():
        # Names the wrapper binds are only known when it runs; parameters and key dims are checked there too.
        shadowed = sorted(expr.names & key_names & set(proposal.space))
        if shadowed:
            return _fail("space", f"launch.{dim} names {', '.join(shadowed)}, both a parameter and a key "
                                  "dimension; rename the parameter")
    for k in keys:
        broken = space.violated(proposal.default, k)
        if broken:
            return _fail("space", f"the default {dict(proposal.default)} breaks {'; '.join(broken)} for key "
                                  f"{_kv(k)}")
    configs = sample_configs(space, keys, proposal.default, sample=sample, seed=seed)
    try:
        target = proposal_target(proposal, base, workdir=root / ".ktune" / "agent" / "proposals")
    except (KtuneError, OSError) as exc:
        return _fail("schema", f"cannot prepare the proposal: {exc}")
    bench = BenchConfig(min_sample_s=0.0, min_samples=1, max_samples=1, max_time_s=0.0, ci_target=1.0,
                        max_repeats=1, warmup=0)
    spec = WorkerSpec(target=TargetRef.of(target), backend=backend, cases=tuple(indices),
                      cache_dir=str(root / ".ktune" / "cache" / backend), bench=bench)
    checked: list[Mapping[str, Value]] = []
    failures: list[tuple[Mapping[str, Value], str]] = []
    infeasible: list[tuple[Mapping[str, Value], str]] = []
    first = ""
    first_stage = "ok"
    try:
        with WorkerPool(spec, trial_timeout_s=trial_timeout_s) as pool:
            for i, out in enumerate(pool.evaluate(configs, seed)):
                cfg = dict(out.params)
                if out.status == "ok":
                    checked.append(cfg)
                    continue
                stage = _stage_of(out.status, out.reason)
                if stage == "limits" and i > 0:
                    infeasible.append((cfg, out.reason))
                    continue
                failures.append((cfg, out.reason))
                if not first:
                    which = "the default" if i == 0 else "the sampled configuration"
                    first, first_stage = f"{which} {_kv(cfg)} failed ({stage}): {out.reason}", stage
                if stage in ("crash", "timeout"):
                    break  # each costs a restarted worker; one is enough to send back
    except KtuneError as exc:
        return _fail("crash", f"the worker could not run the proposal: {exc.message}")
    if failures:
        return ProposalCheck(ok=False, stage=first_stage, message=first, checked=tuple(checked),
                             failures=tuple(failures), infeasible=tuple(infeasible))
    return ProposalCheck(ok=True, stage="ok", message=f"{len(checked)} configurations verified on "
                                                      f"{len(indices)} cases",
                         checked=tuple(checked), failures=(), infeasible=tuple(infeasible))


def _render(exc: KtuneError) -> str:
    return exc.message + (f" (next step: {exc.hint})" if exc.hint else "")
