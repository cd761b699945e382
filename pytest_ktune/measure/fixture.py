"""A case's inputs drawn from one seed and the reference's answer for them: made once, on the device
where the backend can, and shared by every configuration checked on them (the correctness item's,
the performance item's, the A/B's, a tuner worker's candidates).

On a backend with ``DeviceInputs`` (CUDA), tensors are drawn on the device; an ``@ktune.array_api``
reference is called there too, with float64 copies of the inputs, and its answer stays there, so
that on a backend that compares on the device nothing but a failure's details ever crosses to the
host. A numpy reference gets host copies (drawn on the host, or copied down once) and its answer is
uploaded once for the device comparison. Every run gets fresh device copies of the pristine inputs,
since a kernel may update its inputs in place.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytest_ktune.backends.base import Backend, copy_of, device_inputs, has_device_comparison
from pytest_ktune.core.case import Case, Tensor, ToleranceSpec
from pytest_ktune.core.dtypes import dtype_family
from pytest_ktune.core.reference import is_array_api
from pytest_ktune.core.target import Target
from pytest_ktune.measure.guards import Guards
from pytest_ktune.measure.verify import as_outputs, call_reference, draw_inputs, tensor_seed


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
        """The job of ``case``, with the target as it runs on ``backend`` (its per-backend space)."""
        target = target.for_backend(backend.name)
        return cls(backend, target, case, target.case_id(case), target.case_key(case))

    @property
    def tolerance(self) -> ToleranceSpec | None:
        """The tolerance this case's outputs are checked with."""
        return self.target.tolerance_of(self.case)


@dataclass
class Fixture:
    """One case's inputs from one seed, and the reference's outputs for them."""

    seed: int
    inputs: dict[str, Any]  # the function's arguments: device arrays for tensors (pristine), values
    expected: list[Any]  # the reference's outputs: device arrays when ``on_device``, else numpy
    on_device: bool
    host: dict[str, Any] | None = None  # host copies of the inputs, where they were made
    device_expected: list[Any] = field(default_factory=list)  # ``expected`` uploaded, for comparing
    uploads: int = 0  # uploads of ``expected`` made for this fixture
    # The configurations (and sources: None for the target's own) already verified on these inputs:
    # a timing run of one of them needs no second check.
    verified: set[tuple[str, str | None]] = field(default_factory=set)

    @property
    def nbytes(self) -> int:
        """Bytes this fixture holds, on the device and on the host."""
        return _tree_bytes(self.inputs) + _tree_bytes(self.expected) + _tree_bytes(self.host) \
            + _tree_bytes(self.device_expected)

    def reference_on_device(self, backend: Backend) -> list[Any]:
        """``expected`` on the device: itself, or uploaded once (a numpy reference's answer)."""
        if self.on_device:
            return self.expected
        if not self.device_expected:
            self.device_expected = [backend.to_device(np.ascontiguousarray(r)) for r in self.expected]
            self.uploads += 1
        return self.device_expected

    def host_inputs(self, backend: Backend) -> dict[str, Any]:
        """Host copies of the inputs (copied down on first use where they were drawn on the device)."""
        if self.host is None:
            self.host = {k: backend.to_host(v) if backend.owns(v) else v for k, v in self.inputs.items()}
        return self.host

    def fresh(self, backend: Backend) -> dict[str, Any]:
        """The inputs for one run: device copies of the tensors, the other values as they are."""
        return {k: copy_of(backend, v) if backend.owns(v) else v for k, v in self.inputs.items()}

    def guarded(self, backend: Backend, guards: Guards) -> dict[str, Any]:
        """The inputs for one checked run: device copies of the tensors inside ``guards``' regions."""
        return {k: guards.copy(k, v) if backend.owns(v) else v for k, v in self.inputs.items()}


def _tree_bytes(value: Any) -> int:
    if hasattr(value, "nbytes") and hasattr(value, "dtype"):
        return int(value.nbytes)
    if isinstance(value, Mapping):
        return sum(_tree_bytes(v) for v in value.values())
    if isinstance(value, (tuple, list)):
        return sum(_tree_bytes(v) for v in value)
    return 0


def make_fixture(job: Job, seed: int) -> Fixture:
    """Draw the case's inputs from ``seed`` and call the reference on them (see the module docstring)."""
    backend, target = job.backend, job.target
    maker = device_inputs(backend)
    host: dict[str, Any] | None = None
    inputs: dict[str, Any]
    if maker is None:  # every tensor from one generator, on the host, as this path always drew them
        host = draw_inputs(job.case, seed)
        inputs = {k: backend.to_device(v) if isinstance(v, np.ndarray) else v for k, v in host.items()}
    else:  # each tensor from a seed of its own: on the device, or (a callable init) on the host
        inputs = {}
        for k, v in job.case.args.items():
            if not isinstance(v, Tensor):
                inputs[k] = v
                continue
            d = maker.draw(v, tensor_seed(seed, k))
            inputs[k] = d if d is not None else backend.to_device(v.draw(np.random.default_rng(tensor_seed(seed, k))))
    device_ref = maker is not None and is_array_api(target.reference) and has_device_comparison(backend)
    if device_ref:
        assert maker is not None
        # Float64 copies of floating tensors, plain copies of the others: the reference may write to them.
        wide = {k: (maker.float64(v) if dtype_family(v.dtype) == "f" else v.copy()) if backend.owns(v) else v
                for k, v in inputs.items()}
        expected = _outputs(call_reference(target, wide, copy=False))
        return Fixture(seed=seed, inputs=inputs, expected=expected, on_device=True, host=host)
    fixture = Fixture(seed=seed, inputs=inputs, expected=[], on_device=False, host=host)
    args = fixture.host_inputs(backend)
    if is_array_api(target.reference):
        args = {k: v.astype(np.float64) if isinstance(v, np.ndarray) and dtype_family(v.dtype) == "f" else v
                for k, v in args.items()}
    fixture.expected = as_outputs(call_reference(target, args))
    return fixture


def _outputs(value: Any) -> list[Any]:
    """The reference's outputs as a list, keeping device arrays where they are."""
    return list(value) if isinstance(value, (tuple, list)) else [value]


class FixtureCache:
    """Fixtures by (case, seed), for a process that checks many configurations on the same inputs (the
    gate's measurement process, a tuner's worker). On a large case, drawing the inputs and a float64
    reference costs more than compiling and timing a candidate. The least recently used go once
    ``max_bytes`` is exceeded (the newest always stays); ``keep_one_case`` drops the fixtures of
    other cases whenever a case is asked for, so that nothing is held from one case to the next."""

    def __init__(self, max_bytes: int = 4 << 30, *, keep_one_case: bool = False) -> None:
        self.max_bytes = max_bytes
        self.keep_one_case = keep_one_case
        self._entries: OrderedDict[tuple[str, str, int], Fixture] = OrderedDict()
        self.hits = 0
        self.made = 0

    def get(self, job: Job, seed: int) -> Fixture:
        k = (job.target.name, job.case_id, seed)
        if self.keep_one_case:
            for other in [e for e in self._entries if e[:2] != k[:2]]:
                del self._entries[other]
        if k in self._entries:
            self._entries.move_to_end(k)
            self.hits += 1
            return self._entries[k]
        fixture = make_fixture(job, seed)
        self.made += 1
        self._entries[k] = fixture
        self._trim()
        return fixture

    @property
    def uploads(self) -> int:
        """Uploads of a numpy reference's answer, over the fixtures held now."""
        return sum(f.uploads for f in self._entries.values())

    @property
    def device_bytes(self) -> int:
        """Bytes of the uploaded reference copies held now."""
        return sum(_tree_bytes(f.device_expected) for f in self._entries.values())

    def _trim(self) -> None:
        while len(self._entries) > 1 and sum(f.nbytes for f in self._entries.values()) > self.max_bytes:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()


def fixture_for(job: Job, seed: int, cache: FixtureCache | None) -> Fixture:
    return cache.get(job, seed) if cache is not None else make_fixture(job, seed)


def device_outputs(backend: Backend, result: Any) -> list[Any] | None:
    """The kernel function's outputs as a list of ``backend``'s arrays, in the order the reference
    returns them; None if any of them is something else (a host value, a nested structure)."""
    outs = list(result) if isinstance(result, (tuple, list)) else [result]
    return outs if outs and all(backend.owns(o) for o in outs) else None
