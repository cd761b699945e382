"""One configuration of one case: verified on a fixture's inputs, then prepared for timing.

Shared by the gate's measurement process and the tuner's worker processes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pytest_ktune.backends.base import Launch, compare_on_device, has_device_comparison
from pytest_ktune.core.case import tolerance_for
from pytest_ktune.core.compare import device_close
from pytest_ktune.core.includes import source_hash
from pytest_ktune.core.space import Value, config_key
from pytest_ktune.measure.bench import BenchConfig, calls_per_sample, rotation_for, should_flush
from pytest_ktune.measure.fixture import Fixture, FixtureCache, Job, device_outputs, fixture_for
from pytest_ktune.measure.guards import Guards
from pytest_ktune.measure.runtime import postprocess, run, to_host_tree
from pytest_ktune.measure.verify import as_outputs, check_outputs, check_structure, run_check

__all__ = ["Fixture", "FixtureCache", "Job", "passes_on_device", "timing_sets", "verify_once"]


def passes_on_device(job: Job, result: Any, fixture: Fixture) -> bool:
    """Whether the outputs in ``result`` were checked on the device and all agree with the fixture's
    reference.

    False means "check them on the host": the backend has no ``compare_on_device``, the outputs are
    not all plain device arrays, the comparison raised or declined, or an output disagrees (the
    host path then reports it in full). A wrong number, shape or dtype family of outputs raises
    ReferenceShapeError, as on the host.
    """
    backend = job.backend
    if not has_device_comparison(backend):
        return False
    outs = device_outputs(backend, result)
    if outs is None:
        return False
    check_structure(job.target, job.case_id, outs, fixture.expected)
    spec = job.tolerance
    try:
        refs = fixture.reference_on_device(backend)
        for o, r in zip(outs, refs, strict=True):
            tol = tolerance_for(np.dtype(o.dtype), spec)
            if compare_on_device(backend, o, r, tol) is not True:
                return False
    except Exception:  # any trouble on the device: the host path decides, and reports
        return False
    return True


def _host_expected(job: Job, fixture: Fixture) -> list[np.ndarray]:
    if not fixture.on_device:
        return list(fixture.expected)
    return [job.backend.to_host(r) for r in fixture.expected]


def verify_once(job: Job, params: Mapping[str, Value], seed: int, *, repro: str = "",
                source: str | None = None, cache: FixtureCache | None = None) -> list[Launch]:
    """Run ``params`` on the fixture of ``seed`` (fresh copies of its inputs, poisoned outputs, every
    buffer inside guards: ``measure.guards``, where a write outside a buffer raises GuardError); raise
    unless the outputs match the reference. Returns the launches of the run. With ``cache``, a
    fixture made before for the same case and seed is reused.

    Outputs are compared on the device where the backend can (``passes_on_device``) and are then
    never copied to the host; outputs that fail there are compared again on the host, which raises
    the same MismatchError, with the worst element and counts, as if they had gone there directly."""
    fixture = fixture_for(job, seed, cache)
    return _verify(job, params, fixture, repro=repro, source=source)


def _verify(job: Job, params: Mapping[str, Value], fixture: Fixture, *, repro: str,
            source: str | None, again: bool = True) -> list[Launch]:
    """One checked run, inside guards; without ``again``, a configuration this fixture has verified
    already is run without a second check (and without guards)."""
    done = (config_key(params), None if source is None else source_hash(source))
    if not again and done in fixture.verified:
        _, launches = run(job.backend, job.target, params, fixture.fresh(job.backend), source=source)
        return launches
    guards = Guards.for_backend(job.backend)
    inputs = fixture.fresh(job.backend) if guards is None else fixture.guarded(job.backend, guards)
    result, launches = run(job.backend, job.target, params, inputs, poison=True, source=source,
                           alloc=guards.output if guards is not None else None)
    if job.target.postprocess_fn is not None:
        result = postprocess(job.backend, job.target, params, inputs, result, source=source)
    job.backend.synchronize()
    if guards is not None:
        guards.check(job.case_id, job.target.where)
    repro = repro or f"the inputs were drawn from seed {fixture.seed}"
    if job.target.check_fn is not None:  # check= judges the outputs, on the host
        run_check(job.target, job.case_id, to_host_tree(job.backend, result), _host_expected(job, fixture),
                  seed=fixture.seed, backend=job.backend.name, repro=repro)
    elif not passes_on_device(job, result, fixture):
        got = to_host_tree(job.backend, result)
        expected = _host_expected(job, fixture)
        if not _close_on_host(job, got, expected):
            check_outputs(job.target, job.case_id, got, expected, seed=fixture.seed, backend=job.backend.name,
                          repro=repro, tolerance=job.tolerance)
    fixture.verified.add(done)
    return launches


def _close_on_host(job: Job, got: Any, expected: list[np.ndarray]) -> bool:
    """Whether host outputs all pass (the verdict ``check_outputs`` would give, without the worst
    element and counts a failure's message needs, and so in fewer passes over the arrays)."""
    outs = as_outputs(got)
    check_structure(job.target, job.case_id, outs, expected)
    spec = job.tolerance
    return all(device_close(np, o, r, tolerance_for(o.dtype, spec)) for o, r in zip(outs, expected, strict=True))


def timing_sets(job: Job, params: Mapping[str, Value], seed: int, *, repro: str = "",
                source: str | None = None, cache: FixtureCache | None = None,
                cfg: BenchConfig | None = None) -> tuple[list[list[Launch]], bool]:
    """Launch sets for timing: the first verified on the fixture of ``seed``, the rest on device
    copies of its inputs, so that back-to-back calls rotate through more memory than the L2 holds
    without drawing or uploading anything more; no more sets than one sample of ``cfg`` holds calls
    (``calls_per_sample``). Returns the sets and whether to flush the cache between samples."""
    fixture = fixture_for(job, seed, cache)
    sets = [_verify(job, params, fixture, repro=repro, source=source, again=False)]
    work = job.target.bytes_for(job.target.case_args(job.case)) or 2 * job.case.input_bytes
    l2 = job.backend.device.timing_cache_bytes
    flush = should_flush(work, l2, job.case.warm_cache)
    rotation = rotation_for(work, l2, job.case.warm_cache)
    if rotation > 1:
        rotation = min(rotation, calls_per_sample(job.backend, sets[0], cfg or BenchConfig.for_backend(job.backend),
                                                  flush))
    for _ in range(1, rotation):
        _, launches = run(job.backend, job.target, params, fixture.fresh(job.backend), source=source)
        sets.append(launches)
    job.backend.synchronize()
    return sets, flush
