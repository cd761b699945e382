"""One configuration of one case: verified on fresh inputs, then prepared for timing.

Shared by the gate's items and the tuner's worker processes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._bench import rotation_for, should_flush
from ._runtime import run, to_host_tree
from ._space import Value
from ._target import Case, Target
from ._verify import call_reference, check_outputs, draw_inputs, upload
from .backends.base import Backend, Launch


@dataclass(frozen=True)
class Job:
    """One case of one target on one backend, with its id and tuning key."""

    backend: Backend
    target: Target
    case: Case
    case_id: str
    key: dict[str, Any]

    @classmethod
    def of(cls, backend: Backend, target: Target, case: Case) -> Job:
        return cls(backend, target, case, target.case_id(case), target.case_key(case))


def verify_once(job: Job, params: Mapping[str, Value], seed: int, *, repro: str = "",
                source: str | None = None) -> list[Launch]:
    """Run ``params`` on inputs drawn from ``seed`` with poisoned outputs; raise unless they match the
    reference. Returns the launches of the run."""
    host = draw_inputs(job.case, seed)
    expected = call_reference(job.target, host)
    result, launches = run(job.backend, job.target, params, upload(job.backend, host), poison=True,
                           source=source)
    job.backend.synchronize()
    got = to_host_tree(job.backend, result)
    check_outputs(job.target, job.case_id, got, expected, seed=seed, backend=job.backend.name,
                  repro=repro or f"the inputs were drawn from seed {seed}")
    return launches


def timing_sets(job: Job, params: Mapping[str, Value], seed: int, *, repro: str = "",
                source: str | None = None) -> tuple[list[list[Launch]], bool]:
    """Launch sets for timing: the first verified, the rest on fresh inputs so that back-to-back
    calls rotate through more memory than the L2 holds. Returns the sets and whether to flush the
    cache between samples."""
    sets = [verify_once(job, params, seed, repro=repro, source=source)]
    work = job.target.bytes_for(job.target.case_args(job.case)) or 2 * job.case.input_bytes
    l2 = job.backend.device.l2_bytes
    for j in range(1, rotation_for(work, l2, job.case.warm_cache)):
        host = draw_inputs(job.case, seed + j)
        _, launches = run(job.backend, job.target, params, upload(job.backend, host), source=source)
        sets.append(launches)
    job.backend.synchronize()
    return sets, should_flush(work, l2, job.case.warm_cache)
