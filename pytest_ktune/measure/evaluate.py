"""One configuration of one case: verified on fresh inputs, then prepared for timing.

Shared by the gate's items and the tuner's worker processes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytest_ktune.backends.base import Backend, Launch, compare_on_device, has_device_comparison
from pytest_ktune.core.case import Case, tolerance_for
from pytest_ktune.core.compare import DEVICE_KINDS
from pytest_ktune.core.space import Value
from pytest_ktune.core.target import Target
from pytest_ktune.measure.bench import rotation_for, should_flush
from pytest_ktune.measure.guards import Guards
from pytest_ktune.measure.runtime import run, to_host_tree
from pytest_ktune.measure.verify import as_outputs, call_reference, check_outputs, check_structure, draw_inputs, upload

#: Outputs of at least this many bytes in all are compared on the device, where the backend offers
#: ``compare_on_device``. Below it, copying them to the host and comparing them in numpy takes tens of
#: milliseconds at most, and the device path's fixed costs (a dozen small kernels and a few
#: synchronisations per output, a reference upload when no InputCache keeps it) would eat much of
#: the gain. Above it the host path grows with the size, to seconds per candidate at 256 MB to 1 GB
#: of outputs (the copy, then float64 temporaries in numpy): more than compiling and timing one.
DEVICE_COMPARE_MIN_BYTES = 8 << 20


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


@dataclass
class _Entry:
    host: dict[str, Any]
    expected: Any
    nbytes: int
    # The reference's outputs uploaded to ``backend``, for comparing on the device; and their bytes.
    backend: Backend | None = None
    device: list[Any] = field(default_factory=list)
    device_nbytes: int = 0

    def drop_device(self) -> None:
        self.backend, self.device, self.device_nbytes = None, [], 0


class InputCache:
    """Host inputs and the reference's answer, kept per (case, seed) by a process that checks many
    configurations on the same inputs (a tuner's worker). On a large case, drawing the inputs and a
    float64 reference costs seconds: more than compiling and timing a candidate. The least recently
    used entries go once ``max_bytes`` is exceeded (the newest always stays).

    Where outputs are compared on the device, the reference's outputs are uploaded once per entry
    too (``device_reference``), in their own dtype; the least recently used of those device copies
    go once they exceed ``max_device_bytes`` (the newest entry's always stays), and with their
    entry."""

    def __init__(self, max_bytes: int = 4 << 30, max_device_bytes: int = 4 << 30) -> None:
        self.max_bytes = max_bytes
        self.max_device_bytes = max_device_bytes
        self._entries: OrderedDict[tuple[str, int], _Entry] = OrderedDict()
        self.hits = 0
        self.uploads = 0

    def get(self, job: Job, seed: int) -> tuple[dict[str, Any], Any]:
        k = (job.case_id, seed)
        if k in self._entries:
            self._entries.move_to_end(k)
            self.hits += 1
            entry = self._entries[k]
            return entry.host, entry.expected
        host = draw_inputs(job.case, seed)
        expected = call_reference(job.target, host)
        self._entries[k] = _Entry(host, expected, _tree_bytes(host) + _tree_bytes(expected))
        while len(self._entries) > 1 and sum(e.nbytes for e in self._entries.values()) > self.max_bytes:
            _, gone = self._entries.popitem(last=False)
            gone.drop_device()
        return host, expected

    def device_reference(self, job: Job, seed: int, refs: Sequence[np.ndarray]) -> list[Any]:
        """``refs`` (the reference's outputs for this case and seed, as ``get`` returned them) on
        ``job.backend``: uploaded on the first call for this entry and backend, then reused."""
        entry = self._entries.get((job.case_id, seed))
        if entry is None:  # not cached (get was not called): upload, keep nothing
            return _upload_refs(job.backend, refs)
        if entry.backend is not job.backend or len(entry.device) != len(refs):
            entry.drop_device()
            device = _upload_refs(job.backend, refs)
            self.uploads += 1
            entry.backend, entry.device = job.backend, device
            entry.device_nbytes = sum(int(r.nbytes) for r in refs)
            self._entries.move_to_end((job.case_id, seed))
            self._trim_device()
        return entry.device

    @property
    def device_bytes(self) -> int:
        """Bytes of the reference copies now held on devices."""
        return sum(e.device_nbytes for e in self._entries.values())

    def _trim_device(self) -> None:
        held = [e for e in self._entries.values() if e.device]
        for entry in held[:-1]:  # least recently used first; the newest stays
            if self.device_bytes <= self.max_device_bytes:
                break
            entry.drop_device()


def _upload_refs(backend: Backend, refs: Sequence[np.ndarray]) -> list[Any]:
    return [backend.to_device(np.ascontiguousarray(r)) for r in refs]


def _device_outputs(backend: Backend, result: Any) -> list[Any] | None:
    """The kernel function's outputs as a list of ``backend``'s arrays, in the order ``check_outputs``
    takes them; None if any of them is something else (a host value, a nested structure)."""
    outs = list(result) if isinstance(result, (tuple, list)) else [result]
    return outs if outs and all(backend.owns(o) for o in outs) else None


def passes_on_device(job: Job, result: Any, expected: Any, seed: int, cache: InputCache | None) -> bool:
    """Whether the outputs in ``result`` were checked on the device and all agree with ``expected``.

    False means "check them on the host": the backend has no ``compare_on_device``, the outputs are
    smaller than DEVICE_COMPARE_MIN_BYTES or not all plain numeric device arrays, the comparison
    raised or declined, or an output disagrees (the host path then reports it in full). A wrong
    number, shape or dtype family of outputs raises ReferenceShapeError, as on the host.
    """
    backend = job.backend
    if not has_device_comparison(backend):
        return False
    outs = _device_outputs(backend, result)
    if outs is None or sum(int(o.nbytes) for o in outs) < DEVICE_COMPARE_MIN_BYTES:
        return False
    refs = as_outputs(expected)
    check_structure(job.target, job.case_id, outs, refs)
    if any(np.dtype(a.dtype).kind not in DEVICE_KINDS for a in [*outs, *refs]):
        return False
    try:
        device_refs = (cache.device_reference(job, seed, refs) if cache is not None
                       else _upload_refs(backend, refs))
        for o, r in zip(outs, device_refs, strict=True):
            tol = tolerance_for(np.dtype(o.dtype), job.target.tolerance)
            if compare_on_device(backend, o, r, tol) is not True:
                return False
    except Exception:  # any trouble on the device: the host path decides, and reports
        return False
    return True


def verify_once(job: Job, params: Mapping[str, Value], seed: int, *, repro: str = "",
                source: str | None = None, cache: InputCache | None = None) -> list[Launch]:
    """Run ``params`` on inputs drawn from ``seed`` with poisoned outputs, every buffer inside guards
    (``measure.guards``: a write outside a buffer raises GuardError); raise unless they match the
    reference. Returns the launches of the run. With ``cache``, inputs and reference drawn before for
    the same case and seed are reused (the outputs are still fresh and poisoned), and so is the
    reference's copy on the device.

    Large outputs are compared on the device where the backend can (``passes_on_device``) and are
    then never copied to the host; outputs that fail there are compared again on the host, which
    raises the same MismatchError, with the worst element and counts, as if they had gone there
    directly."""
    if cache is not None:
        host, expected = cache.get(job, seed)
    else:
        host = draw_inputs(job.case, seed)
        expected = call_reference(job.target, host)
    guards = Guards.for_backend(job.backend)
    result, launches = run(job.backend, job.target, params, upload(job.backend, host, guards), poison=True,
                           source=source, alloc=guards.output if guards is not None else None)
    job.backend.synchronize()
    if guards is not None:
        guards.check(job.case_id, job.target.where)
    if passes_on_device(job, result, expected, seed, cache):
        return launches
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
    l2 = job.backend.device.timing_cache_bytes
    for j in range(1, rotation_for(work, l2, job.case.warm_cache)):
        host = draw_inputs(job.case, seed + j)
        _, launches = run(job.backend, job.target, params, upload(job.backend, host), source=source)
        sets.append(launches)
    job.backend.synchronize()
    return sets, should_flush(work, l2, job.case.warm_cache)
