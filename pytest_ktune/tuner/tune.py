"""The tuner: an Optuna study per target, device and key, over the template's parameters.

Candidates that break a constraint or a device limit are recorded as infeasible
with their reason and never timed; a configuration already timed in the study is
never timed again; every candidate runs in a worker process (``_worker``). The
study's best is re-verified on every case of the key and timed A/B against the
parameters in use; it replaces them only when it is faster beyond noise.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_ktune.backends import factory_ref
from pytest_ktune.core.errors import KtuneError, SpaceError
from pytest_ktune.core.keys import key_label, key_string
from pytest_ktune.core.names import SAMPLERS
from pytest_ktune.core.space import Value, config_key
from pytest_ktune.core.store import Store, Tuned, now_utc, target_id
from pytest_ktune.core.target import Target
from pytest_ktune.core.text import first_line as _first_line
from pytest_ktune.measure.runtime import refuse_redefinitions
from pytest_ktune.measure.worker import TargetRef, WorkerPool, WorkerSpec
from pytest_ktune.tuner.decide import AB_STOP, Finished, baseline_is_stale, decide, new_record
from pytest_ktune.tuner.encoding import Encoding, check_space, label_study, stored_mode
from pytest_ktune.tuner.equivalence import classes, representatives
from pytest_ktune.tuner.loop import StudyLoop, best_trial, enqueue, fail_running, importances_of, trial_rows, value_of
from pytest_ktune.tuner.outcome import StudySummary, TuneOutcome
from pytest_ktune.tuner.priors import device_priors, in_bytes, leading
from pytest_ktune.tuner.progress import Progress
from pytest_ktune.tuner.samplers import SamplerRequest, builtin_factory
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
    (tune_key), its vector widths carried over so that each load moves as many bytes
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


def tune_key(ctx: TuneContext, target: Target, key: Mapping[str, Any],
             case_indices: Sequence[int]) -> TuneOutcome:
    """Tune one target for one key; write the winner to the params file when it wins A/B.

    Timed first, in this order: the parameters in use and the default when this key was tuned
    before (what tuning found is the best guess), then the leading device priors; for a key not
    tuned yet, the leading device priors (``_priors``: the strongest guess computed for this key's
    own launch, with its 8-byte twin when it has one: ``_priors.leading``) before the default. Then
    the best recorded for other keys and devices near this one (``transfer``: alike in the key's
    dimensions, element sizes and device), nearest first; the other device priors; the best
    recorded for keys farther away, their vector widths carried over in bytes
    (``_priors.in_bytes``), which transfer less well. The sampler (by default ``bo``, ``_bo``: a
    model of all the timings so far) proposes the rest."""
    import optuna
    from optuna.trial import TrialState

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
    points = representatives(feasible, cls)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tid = target_id(target, ctx.root)
    spec = WorkerSpec(target=TargetRef.of(target), backend=ctx.backend, cases=tuple(case_indices),
                      cache_dir=str(ctx.scratch / "cache" / ctx.backend),
                      factory=factory_ref(ctx.backend_factory))
    try:
        store: Store | None = Store.load(ctx.params_path)
    except KtuneError:
        if settings.write:
            raise
        store = None
    storage, storage_name = open_storage(settings.storage, ctx.scratch)
    with (ctx.pool_factory or WorkerPool)(spec, trial_timeout_s=settings.trial_timeout_s) as pool:
        pool.ensure()
        device = pool.device
        name = resolve_study_name(storage, tid, device.id, key)
        lock = study_lock(ctx.scratch, name) if settings.storage is None else contextlib.nullcontext()
        with lock:
            try:
                enc = Encoding.for_sampler(target, settings.sampler, stored_mode(storage, name))
                check_space(storage, name, enc, target, storage_name)
                sampler = make(SamplerRequest(settings.sampler, settings.seed, enc, tuple(points)))
                study = optuna.create_study(study_name=name, storage=storage, sampler=sampler,
                                            direction="minimize", load_if_exists=True)
                label_study(study, enc)
            except KtuneError:
                raise
            except Exception as exc:
                raise KtuneError(f"cannot open the study {name!r} in {storage_name}: "
                                 f"{type(exc).__name__}: {_first_line(str(exc))}",
                                 hint="check the storage URL and the server") from None
            study.set_user_attr("ktune", {"target": tid, "file": str(target.file), "name": target.name,
                                          "module": target.module, "key": dict(key), "backend": ctx.backend,
                                          "device": device.id, "trials": settings.trials,
                                          "cases": list(case_indices)})
            if settings.storage is None:
                for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING)):
                    if t.state == TrialState.RUNNING:
                        study.tell(t.number, state=TrialState.FAIL)  # left by an interrupted run
            rec = store.find(tid, device.id, key) if store else None
            current = dict(rec.params) if rec else dict(target.default)
            warm = warm_starts(target, store, tid=tid, device=device.id, key=key, current=current)
            priors: list[tuple[str, dict[str, Value]]] = []
            lead = 0
            if settings.priors and settings.sampler != "grid":

                priors = device_priors(target, key, case_indices, device)
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
                enqueue(study, enc, [("grid", p) for p in points])
            loop = StudyLoop(study, enc, target, key=key, pool=pool, settings=settings, classes=cls)
            earlier = loop.timed()  # a resumed study's: the budget counts them, this run's count does not
            label = f"{target.name} {key_label(key)}"
            total = min(settings.trials, len(points))
            with Progress(label, total, stream=ctx.progress) as bar:
                def tick() -> None:
                    best = best_trial(study)
                    bar.update(min(loop.timed(), total), best.value if best else None,
                               enc.decode(best.params) if best else None)

                deadline = started + settings.timeout_s if settings.timeout_s else None
                try:
                    loop.run(deadline, tick)
                    if settings.storage is not None:
                        loop.settle()  # trials that processes sharing the study still run
                except KeyboardInterrupt:
                    # The user's Ctrl-C must still stop pytest or the command: say how to resume, re-raise.
                    fail_running(study)
                    print(f"\nktune: {target.where}: interrupted after {loop.timed()} timed trials; nothing "
                          f"was written. The study {name!r} is saved in {storage_name}: rerun the same "
                          "command to resume it.", file=sys.stderr, flush=True)
                    raise
            best = best_trial(study)
            if best is None:
                reasons = Counter(str(r.reason) for r in loop.rows if r.state in ("infeasible", "failed"))
                why = "; ".join(f"{n}x {r}" for r, n in reasons.most_common(3)) or "no trial ran"
                raise KtuneError(f"no configuration could be timed for key {key_label(key)}: {why}",
                                 where=target.where,
                                 hint="fix the failures shown, or constrain the space to what this device "
                                      "can run (its limits are listed in the reasons)")
            best_cfg = enc.decode(best.params)
            assert best.value is not None  # best_trial takes only trials with a value
            best_us = float(best.value)
            cur_us = value_of(study, enc, current)
            default_us = value_of(study, enc, dict(target.default))
            seed = settings.seed if settings.seed is not None else int.from_bytes(os.urandom(3), "little")
            if config_key(best_cfg) == config_key(current):
                accepted, decision = False, "the parameters in use are the best the study found"
                # A baseline measured on another version of the source is measured again, on this one.
                ab = pool.ab(current, current, seed + 99991) if baseline_is_stale(rec, target, ctx.backend) else None
            else:
                # A baseline measured again from this A/B (a stale one) wants the whole sample.
                stop = None if baseline_is_stale(rec, target, ctx.backend) else AB_STOP
                ab = pool.ab(current, best_cfg, seed + 99991, stop)
                accepted, decision = decide(ab)
            tuned = Tuned(date=now_utc(), sampler=settings.sampler, trials=loop.timed(), study=name,
                          result=decision)
            record, changes = new_record(ctx, target, Finished(
                tid=tid, device=device.id, key=dict(key), cases=tuple(case_indices), record=rec, current=current,
                best=best_cfg, accepted=accepted, ab=ab, tuned=tuned, machine=device.machine))
            written = False
            if settings.write:
                Store(ctx.params_path).save([record])
                written = True
    wall = time.monotonic() - started
    summary = StudySummary(
        target=tid, device=device.id, key=dict(key), sampler=settings.sampler, study_name=name,
        storage=storage_name, default_params=dict(target.default), default_us=default_us,
        current_params=current, current_us=cur_us, best_params=best_cfg, best_us=best_us,
        accepted=accepted, decision=decision, feasible_points=len(feasible), wall_s=wall)
    return TuneOutcome(target=target.name, key=dict(key), device=device.id, study=name,
                       timed=loop.timed() - earlier, earlier=earlier, asked=settings.trials,
                       infeasible=loop.infeasible, failed=loop.failed, default_us=default_us,
                       current_params=current, current_us=cur_us, best_params=best_cfg, best_us=best_us,
                       accepted=accepted, decision=decision, report=None, wall_s=wall, written=written,
                       record=record, changes=changes, summary=summary if ctx.reports else None,
                       trials=tuple(trial_rows(study, enc)) if ctx.reports else (),
                       importances=importances_of(study) if ctx.reports else None)
