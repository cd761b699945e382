"""One configuration of one case: verified on fresh inputs, then prepared for timing.

Shared by the gate's items and the tuner's worker processes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

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


def _tree_bytes(value: Any) -> int:
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, Mapping):
        return sum(_tree_bytes(v) for v in value.values())
    if isinstance(value, (tuple, list)):
        return sum(_tree_bytes(v) for v in value)
    return 0


class InputCache:
    """Host inputs and the reference's answer, kept per (case, seed) by a process that checks many
    configurations on the same inputs (a tuner's worker). On a large case, drawing the inputs and a
    float64 reference costs seconds: more than compiling and timing a candidate. The least recently
    used entries go once ``max_bytes`` is exceeded (the newest always stays)."""

    def __init__(self, max_bytes: int = 4 << 30) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, int], tuple[dict[str, Any], Any, int]] = OrderedDict()
        self.hits = 0

    def get(self, job: Job, seed: int) -> tuple[dict[str, Any], Any]:
        k = (job.case_id, seed)
        if k in self._entries:
            self._entries.move_to_end(k)
            self.hits += 1
            host, expected, _ = self._entries[k]
            return host, expected
        host = draw_inputs(job.case, seed)
        expected = call_reference(job.target, host)
        self._entries[k] = (host, expected, _tree_bytes(host) + _tree_bytes(expected))
        while len(self._entries) > 1 and sum(e[2] for e in self._entries.values()) > self.max_bytes:
            self._entries.popitem(last=False)
        return host, expected


def verify_once(job: Job, params: Mapping[str, Value], seed: int, *, repro: str = "",
                source: str | None = None, cache: InputCache | None = None) -> list[Launch]:
    """Run ``params`` on inputs drawn from ``seed`` with poisoned outputs; raise unless they match the
    reference. Returns the launches of the run. With ``cache``, inputs and reference drawn before for
    the same case and seed are reused (the outputs are still fresh and poisoned)."""
    if cache is not None:
        host, expected = cache.get(job, seed)
    else:
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
                source: str | None = None, cache: InputCache | None = None) -> tuple[list[list[Launch]], bool]:
    """Launch sets for timing: the first verified, the rest on fresh inputs so that back-to-back
    calls rotate through more memory than the L2 holds. Returns the sets and whether to flush the
    cache between samples."""
    sets = [verify_once(job, params, seed, repro=repro, source=source, cache=cache)]
    work = job.target.bytes_for(job.target.case_args(job.case)) or 2 * job.case.input_bytes
    l2 = job.backend.device.l2_bytes
    for j in range(1, rotation_for(work, l2, job.case.warm_cache)):
        host = draw_inputs(job.case, seed + j)
        _, launches = run(job.backend, job.target, params, upload(job.backend, host), source=source)
        sets.append(launches)
    job.backend.synchronize()
    return sets, should_flush(work, l2, job.case.warm_cache)
