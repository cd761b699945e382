"""Where an item runs: a lane is one measurement process with its device, its name in the reports and
its gate; and a run's second backend on the same GPU.

A gate run has one backend, but Triton kernels run on the GPU a CUDA run measures: in a ``cuda`` run, a
target whose only source is Triton's runs on the ``triton`` backend, in a second measurement process on the
same device (``Companion``), so one gate judges both kinds and pays pytest's start-up once. The second
process starts in the background as soon as the collection holds such a target, so it is ready when the
first of them runs; a second backend that cannot start is that item's error (skipped under
``--ktune-skip-unavailable``), as the first backend's is the run's.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, wait
from dataclasses import dataclass, replace

from pytest_ktune.backends.base import DeviceInfo, device_labels
from pytest_ktune.core.errors import BackendUnavailable, KtuneError
from pytest_ktune.core.target import TRITON, Target
from pytest_ktune.gate.verdict import Gate
from pytest_ktune.measure.service import MeasureService, ServiceSpec

#: A run on the key's backend also runs, on the same device, the targets that only the value's has a source for.
SECOND_BACKEND = {"cuda": TRITON}


@dataclass(frozen=True)
class Lane:
    """One measurement process: its service, its device's facts, its name in the reports, its gate."""

    index: int
    service: MeasureService
    device: DeviceInfo
    label: str
    gate: Gate


def start_lanes(first: MeasureService, device: DeviceInfo, indices: tuple[int, ...], gate: Gate, *,
                item_timeout_s: float) -> list[Lane]:
    """--ktune-devices: one measurement process per device, each pinned to its device (``first``, started,
    is the first's, and ``gate`` its gate); a device named that cannot start is a usage error, as the
    backend's is."""
    found: list[tuple[int, MeasureService, DeviceInfo]] = [(indices[0], first, device)]
    for i in indices[1:]:
        service = MeasureService(replace(first.spec, device_index=i), item_timeout_s=item_timeout_s)
        try:
            found.append((i, service, service.device()))
        except BackendUnavailable as exc:
            for _, started, _ in found[1:]:
                started.close()
            raise BackendUnavailable(f"--ktune-devices: device {i}: {exc.message}", hint=exc.hint) from None
    names = device_labels([(i, d) for i, _, d in found])
    return [Lane(i, service, dev, label, gate if i == indices[0] else Gate(gate.settings, service, like=gate))
            for (i, service, dev), label in zip(found, names, strict=True)]


def second_backend(run_backend: str, target: Target) -> str | None:
    """The backend ``target`` runs on in a run on ``run_backend``, where that is not the run's own: the
    run's second backend, where the target has a source for it and none for the run's."""
    other = SECOND_BACKEND.get(run_backend)
    if other is None or run_backend in target.sources or other not in target.sources:
        return None
    return other


class Companion:
    """The run's second measurement process (``SECOND_BACKEND``), on the first lane's device, started once:
    at the collection, where it holds a target that runs there."""

    def __init__(self, spec: ServiceSpec, gate: Gate, *, item_timeout_s: float) -> None:
        """``spec``: the run's first process's; ``gate``: the run's first gate, whose unpacked commits this
        one shares. Nothing starts until ``start``."""
        self.backend = TRITON
        self.service = MeasureService(replace(spec, backend=TRITON, factory=None), item_timeout_s=item_timeout_s)
        self.gate = Gate(gate.settings, self.service, like=gate)
        self._started: Future[DeviceInfo] | None = None
        self._lock = threading.Lock()
        self.ran = 0  # the performance items it ran

    def start(self) -> None:
        """Start the process in the background (once); ``lane`` waits for it."""
        with self._lock:
            if self._started is not None:
                return
            self._started = Future()
        started = self._started
        threading.Thread(target=self._run, args=(started,), name="ktune-second-backend", daemon=True).start()

    def _run(self, started: Future[DeviceInfo]) -> None:
        try:
            started.set_result(self.service.device())
        except BaseException as exc:  # BackendUnavailable, or the process's own failure: the item's error
            started.set_exception(exc)

    def lane(self, *, update_baseline: bool) -> Lane:
        """The second backend's lane, once its process runs; BackendUnavailable (naming the backend) when
        it cannot start; KtuneError where baselines are to be recorded from an interpreter. A process that
        crashed since is started again by its service, as the first's is."""
        self.start()
        assert self._started is not None
        try:
            self._started.result()
        except BackendUnavailable as exc:
            raise BackendUnavailable(f"the {self.backend} backend (this run's second, for its {self.backend} "
                                     f"targets) cannot run: {exc.message}", hint=exc.hint) from None
        device = self.service.device()
        if device.interpreted and update_baseline:
            raise KtuneError(f"--ktune-update-baseline: {device.name} runs the kernels in an interpreter on the CPU "
                             "(TRITON_INTERPRET=1), so its timings are never recorded as baselines",
                             hint="unset TRITON_INTERPRET to record them on the GPU")
        return Lane(0, self.service, device, f"{device.name} ({self.backend})", self.gate)

    def notice(self) -> str | None:
        """The summary's line on what ran here, where anything was timed."""
        if not self.ran or not self.service.started:
            return None
        device = self.service.device()
        return (f"{self.ran} case(s) of targets with only a {self.backend} source timed on the {self.backend} "
                f"backend ({device.name}), in this run's second measurement process"
                + (", in Triton's interpreter: not GPU timings" if device.interpreted else ""))

    def compiler_output(self) -> dict[str, list[str]]:
        if not self.service.started:
            return {}
        try:
            return self.service.compiler_output()
        except KtuneError:
            return {}

    def close(self) -> None:
        """Stop the process (once it has started, where it is starting)."""
        if self._started is not None:
            wait([self._started], timeout=self.service.start_timeout_s)
            self.service.close()
