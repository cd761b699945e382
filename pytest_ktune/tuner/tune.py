"""The tuner: an Optuna study per target, device and key, over the template's parameters.

``tune_key`` takes three steps, each a function here: ``prepare`` (the target as it runs on the
backend, the key's feasible points, the params file's records), ``search`` (the study opened, the warm
starts and device priors enqueued, the ask/evaluate/tell loop) and ``decide`` (the study's best timed
A/B against the parameters in use: only a winner beyond noise becomes a new record). Candidates that
break a constraint or a device limit are recorded as infeasible with their reason and never timed; a
configuration already timed in the study is never timed again; every candidate runs in a worker
process (``measure.worker``). The tuner writes none of the user's files: the record a key leaves is in
its outcome, for the run's write-back mode to deliver (``writeback.deliver``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_ktune.backends import factory_ref
from pytest_ktune.core.errors import KtuneError, SpaceError
from pytest_ktune.core.keys import key_label, key_string
from pytest_ktune.core.names import SAMPLERS
from pytest_ktune.core.space import Value, config_key
from pytest_ktune.core.store import Record, Store, Tuned, now_utc, target_id
from pytest_ktune.core.target import Target
from pytest_ktune.core.text import first_line as _first_line
from pytest_ktune.measure.runtime import refuse_redefinitions
from pytest_ktune.measure.worker import CandidatePool, TargetRef, WorkerPool, WorkerSpec
from pytest_ktune.tuner import kept as kept_decisions
from pytest_ktune.tuner.decide import AB_STOP, Finished, baseline_is_stale, new_record
from pytest_ktune.tuner.decide import decide as ab_verdict
from pytest_ktune.tuner.devices import Devices
from pytest_ktune.tuner.encoding import Encoding, check_space, label_study, stored_mode
from pytest_ktune.tuner.equivalence import classes, representatives
from pytest_ktune.tuner.loop import StudyLoop, best_trial, enqueue, fail_running, importances_of, trial_rows, value_of
from pytest_ktune.tuner.outcome import StudySummary, TuneOutcome
from pytest_ktune.tuner.priors import device_priors, in_bytes, leading
from pytest_ktune.tuner.progress import Progress
from pytest_ktune.tuner.samplers import SamplerFactory, SamplerRequest, builtin_factory
from pytest_ktune.tuner.samplers import unknown as unknown_sampler
from pytest_ktune.tuner.settings import TuneContext
from pytest_ktune.tuner.storage import open_storage, resolve_study_name, study_lock
from pytest_ktune.tuner.transfer import is_near, record_distance


def warm_starts(target: Target, store: Store | None, *, tid: str, device: str, key: Mapping[str, Any],
                 current: Mapping[str, Value]) -> list[tuple[str, dict[str, Value], bool]]:
    """The default, the parameters in use, and the best recorded for other keys and devices, each
    with whether it is near: the default and the parameters in use are, and so is a record of a key
    and device alike enough to this one (``transfer``: the key's dimensions in doublings, the element
    sizes, the device), nearest first; a record farther than that is timed after the device priors
    (``search``), its vector widths carried over so that each load moves as many bytes
    (``priors.in_bytes``)."""

    out: list[tuple[str, dict[str, Value], bool]] = [("default", dict(target.default), True),
                                                     ("current", dict(current), True)]
    if store is not None:
        mine = key_string(key)
        others = [r for r in store.for_target(tid) if key_string(r.key) != mine or r.device != device]
        weighed = sorted((record_distance(key, device, r.key, r.device), r.device != device, key_string(r.key),
                          i, r) for i, r in enumerate(others))
        # A record of another backend's space keeps the shared parameters (``Target.carry_over``).
        out.extend((f"recorded for {r.device} {key_string(r.key)}",
                    in_bytes(target, target.carry_over(r.params), r.key, key), is_near(d)) for d, *_, r in weighed)
    seen: set[str] = set()
    unique = []
    for label, cfg, near in out:
        ck = config_key(cfg)
        if ck not in seen and target.space.valid(cfg, key):
            seen.add(ck)
            unique.append((label, cfg, near))
    return unique


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` found before any worker starts: the target as it runs on the backend, the key's
    feasible points (one of each class of equivalent configurations), the sampler's factory, the
    params file's records, the study's storage and the workers' spec."""

    target: Target
    key: Mapping[str, Any]
    cases: tuple[int, ...]
    tid: str
    feasible: int  # how many feasible configurations the key has
    points: tuple[Mapping[str, Value], ...]
    classes: Mapping[str, str]
    make: SamplerFactory
    store: Store
    storage: Any
    storage_name: str
    spec: WorkerSpec
    started: float  # time.monotonic() when the tune began: the time budget counts from here


@dataclass(frozen=True)
class Searched:
    """What ``search`` leaves: the study, the parameters in use (and their record), the timed trials a
    resumed study held before this run, and the best the study found."""

    study: Any
    enc: Encoding
    name: str
    loop: StudyLoop
    earlier: int
    record: Record | None
    current: dict[str, Value]
    best: dict[str, Value]
    best_us: float
    infeasible: int = 0  # this run's, over every device's loop
    failed: int = 0
    ran: Mapping[str, int] = field(default_factory=dict)  # device label -> trials it ran ('' on one device)


def tune_key(ctx: TuneContext, target: Target, key: Mapping[str, Any],
             case_indices: Sequence[int]) -> TuneOutcome:
    """Tune one target for one key: ``prepare``, ``search``, ``decide``. The outcome holds the record
    the params file gets (``record``, ``changes`` for a winner); the run's write-back delivers it.
    Raises KtuneError, naming the target, when the key cannot be tuned."""
    plan = prepare(ctx, target, key, case_indices)
    with Devices(ctx.pool_factory or WorkerPool, plan.spec, ctx.devices, trial_timeout_s=ctx.settings.trial_timeout_s,
                 say=ctx.say) as devices:
        devices.start()
        name = resolve_study_name(plan.storage, plan.tid, devices.device.id, key)
        lock = study_lock(ctx.scratch, name) if ctx.settings.storage is None else contextlib.nullcontext()
        with lock:
            found = search(ctx, plan, devices, name)
            out = decide(ctx, plan, devices.first, found)
        return replace(out, devices=tuple(d.label for d in devices.all if d.label and found.ran.get(d.label)),
                       notes=tuple(devices.notes))


def prepare(ctx: TuneContext, target: Target, key: Mapping[str, Any], case_indices: Sequence[int]) -> Prepared:
    """Step 1: everything that can be known, or refused, before a worker starts: the settings, the
    target on this backend, a source that would fail every trial, the feasible points and their
    classes, the sampler, the params file and the study's storage."""
    settings = ctx.settings
    settings.check(samplers=(settings.sampler,) if ctx.sampler_factory else SAMPLERS)
    started = time.monotonic()
    target = target.for_backend(ctx.backend)  # its space and default on this backend
    # A source that redefines a parameter would fail every trial the same way: say so once, now. (A
    # landscape's stand-in, ``lab.standin``, has no source: it is replayed, never compiled.)
    first = target.cases[case_indices[0]] if case_indices else None
    if ctx.backend in target.sources:
        refuse_redefinitions(target, target.source_path(ctx.backend), target.source_text(ctx.backend),
                             target.default, target.defines(target.case_args(first)) if first is not None else {})
    feasible = list(target.space.feasible(key))
    if not feasible:
        target.check_config(dict(target.default), key, "default configuration")  # raises, naming the target
        raise SpaceError("the space has no valid point for this key", where=target.where,
                         hint="widen the Space or relax a constraint")
    make = ctx.sampler_factory or builtin_factory(settings.sampler)
    if make is None:
        raise unknown_sampler(settings.sampler)
    # Configurations that build the same program and make the same launches are one point: the
    # sampler proposes one of each class, and the loop answers the others from it.
    cls = classes(target, ctx.backend, case_indices, feasible)
    optuna_quiet()
    tid = target_id(target, ctx.root)
    spec = WorkerSpec(target=TargetRef.of(target), backend=ctx.backend, cases=tuple(case_indices),
                      cache_dir=str(ctx.scratch / "cache" / ctx.backend),
                      factory=factory_ref(ctx.backend_factory))
    store = Store.load(ctx.params_path)  # a damaged params file: the parameters in use are unknown
    storage, storage_name = open_storage(settings.storage, ctx.scratch)
    return Prepared(target=target, key=key, cases=tuple(case_indices), tid=tid, feasible=len(feasible),
                    points=tuple(representatives(feasible, cls)), classes=cls, make=make, store=store,
                    storage=storage, storage_name=storage_name, spec=spec, started=started)


def optuna_quiet() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


def search(ctx: TuneContext, plan: Prepared, devices: Devices, name: str) -> Searched:
    """Step 2: open the study ``name``, enqueue the warm starts, and run the ask/evaluate/tell loop (one
    per device of ``devices``, on the one study: ``tuner.devices``).

    Timed first, in this order: the parameters in use and the default when this key was tuned
    before (what tuning found is the best guess), then the leading device priors; for a key not
    tuned yet, the leading device priors (``priors``: the strongest guess computed for this key's
    own launch, with its 8-byte twin when it has one: ``priors.leading``) before the default. Then
    the best recorded for other keys and devices near this one (``transfer``: alike in the key's
    dimensions, element sizes and device), nearest first; the other device priors; the best
    recorded for keys farther away, their vector widths carried over in bytes
    (``priors.in_bytes``), which transfer less well. The sampler (by default ``bo``: a model of all
    the timings so far) proposes the rest. A KtuneError when no configuration could be timed."""
    import optuna
    from optuna.trial import TrialState

    settings, target, key, device = ctx.settings, plan.target, plan.key, devices.device
    try:
        enc = Encoding.for_sampler(target, settings.sampler, stored_mode(plan.storage, name))
        check_space(plan.storage, name, enc, target, plan.storage_name)
        # A sampler of its own for each device's loop (a seed of its own too), each on the one study.
        studies = [optuna.create_study(
            study_name=name, storage=plan.storage, direction="minimize", load_if_exists=True,
            sampler=plan.make(SamplerRequest(settings.sampler, None if settings.seed is None else settings.seed + i,
                                             enc, plan.points)))
            for i in range(len(devices.running))]
        study = studies[0]
        label_study(study, enc)
    except KtuneError:
        raise
    except Exception as exc:
        raise KtuneError(f"cannot open the study {name!r} in {plan.storage_name}: "
                         f"{type(exc).__name__}: {_first_line(str(exc))}",
                         hint="check the storage URL and the server") from None
    study.set_user_attr("ktune", {"target": plan.tid, "file": str(target.file), "name": target.name,
                                  "module": target.module, "key": dict(key), "backend": ctx.backend,
                                  "device": device.id, "trials": settings.trials, "cases": list(plan.cases)})
    if settings.storage is None:
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING)):
            if t.state == TrialState.RUNNING:
                study.tell(t.number, state=TrialState.FAIL)  # left by an interrupted run
    rec = plan.store.find(plan.tid, device.id, key)
    current = target.complete(rec.params) if rec else dict(target.default)
    warm = warm_starts(target, plan.store, tid=plan.tid, device=device.id, key=key, current=current)
    priors: list[tuple[str, dict[str, Value]]] = []
    lead = 0
    if settings.priors and settings.sampler != "grid":
        priors = device_priors(target, key, plan.cases, device)
        lead = leading(priors)
    # In the order of the docstring.
    mine = sorted(((label, cfg) for label, cfg, _ in warm if label in ("default", "current")),
                  key=lambda lc: lc[0] != "current")
    near = [(label, cfg) for label, cfg, n in warm if n and label not in ("default", "current")]
    far = [(label, cfg) for label, cfg, n in warm if not n]
    groups = (mine, priors[:lead]) if rec is not None else (priors[:lead], mine)
    for group in (*groups, near, priors[lead:], far):
        enqueue(study, enc, group)
    if settings.sampler == "grid":
        enqueue(study, enc, [("grid", p) for p in plan.points])
    several = devices.several
    loops = [StudyLoop(st, enc, target, key=key, pool=d.pool, settings=settings, classes=plan.classes,
                       device=d.label if several else None) for st, d in zip(studies, devices.running, strict=True)]
    loop = loops[0]
    earlier = loop.timed()  # a resumed study's: the budget counts them, this run's count does not
    total = min(settings.trials, len(plan.points))
    with Progress(f"{target.name} {key_label(key)}", total, stream=ctx.progress) as bar:
        def tick() -> None:
            best = best_trial(study)
            bar.update(min(loop.timed(), total), best.value if best else None,
                       enc.decode(best.params) if best else None)

        deadline = plan.started + settings.timeout_s if settings.timeout_s else None
        try:
            devices.run(loops, deadline, tick)
            if settings.storage is not None:
                loop.settle()  # trials that processes sharing the study still run
        except KeyboardInterrupt:
            # The user's Ctrl-C must still stop pytest or the command: say how to resume, re-raise.
            fail_running(study)
            print(f"\nktune: {target.where}: interrupted after {loop.timed()} timed trials; nothing "
                  f"was written. The study {name!r} is saved in {plan.storage_name}: rerun the same "
                  "command to resume it.", file=sys.stderr, flush=True)
            raise
    best = best_trial(study)
    rows = [r for one in loops for r in one.rows]
    if best is None:
        reasons = Counter(str(r.reason) for r in rows if r.state in ("infeasible", "failed"))
        why = "; ".join(f"{n}x {r}" for r, n in reasons.most_common(3)) or "no trial ran"
        raise KtuneError(f"no configuration could be timed for key {key_label(key)}: {why}", where=target.where,
                         hint="fix the failures shown, or constrain the space to what this device can run "
                              "(its limits are listed in the reasons)")
    assert best.value is not None  # best_trial takes only trials with a value
    ran = Counter(one.device or "" for one in loops for r in one.rows if r.state in ("timed", "infeasible", "failed"))
    return Searched(study=study, enc=enc, name=name, loop=loop, earlier=earlier, record=rec, current=current,
                    best=enc.decode(best.params), best_us=float(best.value),
                    infeasible=sum(one.infeasible for one in loops), failed=sum(one.failed for one in loops),
                    ran=dict(ran))


def decide(ctx: TuneContext, plan: Prepared, pool: CandidatePool, found: Searched) -> TuneOutcome:
    """Step 3: the study's best, verified again and timed A/B against the parameters in use, replaces
    them only when it is faster beyond noise (``tuner.decide``); the record the key leaves either way.
    With ``ctx.keep`` the decision is kept under .ktune/winners/ until it is delivered, and a kept one
    that still holds (the same best against the same parameters in use: a rerun after an
    interruption) is taken instead of timing the A/B again (``tuner.kept``)."""
    settings, target, key, device = ctx.settings, plan.target, plan.key, pool.device
    study, enc, loop, current = found.study, found.enc, found.loop, found.current
    tuned = Tuned(date=now_utc(), sampler=settings.sampler, trials=loop.timed(), study=found.name, result="")
    kept = kept_decisions.resume(ctx.scratch, target, ctx.backend, tid=plan.tid, device=device.id, key=key,
                                 best=found.best, current=current) if ctx.keep else None
    if kept is not None:
        accepted, changes = kept.accepted, kept.changes
        decision = f"{kept.decision} (decided by an earlier run, kept in .ktune/{kept_decisions.FOLDER}/)"
        record = kept.record if kept.record.tuned is None else \
            replace(kept.record, tuned=replace(kept.record.tuned, trials=loop.timed()))
    else:
        seed = settings.seed if settings.seed is not None else int.from_bytes(os.urandom(3), "little")
        stale = baseline_is_stale(found.record, target, ctx.backend)
        if config_key(found.best) == config_key(current):
            accepted, decision = False, "the parameters in use are the best the study found"
            # A baseline measured on another version of the source is measured again, on this one.
            ab = pool.ab(current, current, seed + 99991) if stale else None
        else:
            # A baseline measured again from this A/B (a stale one) wants the whole sample.
            ab = pool.ab(current, found.best, seed + 99991, None if stale else AB_STOP)
            accepted, decision = ab_verdict(ab)
        record, changes = new_record(ctx, target, Finished(
            tid=plan.tid, device=device.id, key=dict(key), cases=plan.cases, record=found.record, current=current,
            best=found.best, accepted=accepted, ab=ab, tuned=replace(tuned, result=decision),
            machine=device.machine, interpreted=device.interpreted))
        if ctx.keep:
            kept_decisions.keep(ctx.scratch, kept_decisions.Kept(best=found.best, current=current, accepted=accepted,
                                                                  decision=decision, record=record, changes=changes))
    wall = time.monotonic() - plan.started
    cur_us = value_of(study, enc, current)
    default_us = value_of(study, enc, dict(target.default))
    summary = StudySummary(
        target=plan.tid, device=device.id, key=dict(key), sampler=settings.sampler, study_name=found.name,
        storage=plan.storage_name, default_params=dict(target.default), default_us=default_us,
        current_params=current, current_us=cur_us, best_params=found.best, best_us=found.best_us,
        accepted=accepted, decision=decision, feasible_points=plan.feasible, wall_s=wall)
    return TuneOutcome(target=target.name, key=dict(key), device=device.id, study=found.name,
                       timed=loop.timed() - found.earlier, earlier=found.earlier, asked=settings.trials,
                       infeasible=found.infeasible, failed=found.failed, default_us=default_us,
                       current_params=current, current_us=cur_us, best_params=found.best, best_us=found.best_us,
                       accepted=accepted, decision=decision, report=None, wall_s=wall, written=False,
                       record=record, changes=changes, summary=summary if ctx.reports else None,
                       trials=tuple(trial_rows(study, enc)) if ctx.reports else (),
                       importances=importances_of(study) if ctx.reports else None)
