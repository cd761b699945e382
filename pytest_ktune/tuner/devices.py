"""The tuner over several devices (``--ktune-devices``): one worker pool per device, each pinned to its
device, and one ask/evaluate/tell loop per device on the key's one study, each in a thread of its own,
so that N devices time N trials at once.

The loops share the study through its storage, as the processes of ``ktune worker`` do: each counts the
trials the others are running against the budget (``StudyLoop.in_flight``), and the ``bo`` sampler
counts them as what its model expects of them (its kriging believer), so that the devices' proposals
spread out. Devices of one identity tune one study (the timings of one are the timings of the other);
a device of another identity is left out of the tune, and said. A device whose worker cannot start, at
the beginning or again after a crash, is lost: the trial it was running fails as it would on one
device, the rest of its batch is queued again for the others (``StudyLoop.hand_back``), and the tune
goes on without it, said on the console; a tune whose every device is lost fails with the last one's
error. The decision's A/B runs on one device: the first still running.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from pytest_ktune.backends.base import DeviceInfo, device_labels
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.text import first_line
from pytest_ktune.measure.worker import CandidatePool, PoolFactory, WorkerSpec
from pytest_ktune.tuner.loop import StudyLoop


@dataclass
class Device:
    """One device of a tune: its index (None: the backend's own choice), its pool, its name in the
    trials and on the console, and why it was lost ('' while it runs)."""

    index: int | None
    pool: CandidatePool
    label: str = ""
    lost: str = ""


class Devices:
    """The worker pools of one key's tune: one per index of ``indices`` (one unpinned pool for None),
    closed together. ``say`` prints a line on the console."""

    def __init__(self, make: PoolFactory, spec: WorkerSpec, indices: Sequence[int] | None, *,
                 trial_timeout_s: float, say: Callable[[str], None]) -> None:
        self._say = say
        self.notes: list[str] = []  # what was said, for the tune's outcome
        self.all = [Device(i, make(replace(spec, device_index=i), trial_timeout_s=trial_timeout_s))
                    for i in indices] if indices else [Device(None, make(spec, trial_timeout_s=trial_timeout_s))]
        self.lock = threading.Lock()  # the loops' threads report through it
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Devices:
        for d in self.all:
            self._stack.enter_context(d.pool)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    @property
    def several(self) -> bool:
        return len(self.all) > 1

    @property
    def running(self) -> list[Device]:
        return [d for d in self.all if not d.lost]

    @property
    def first(self) -> CandidatePool:
        """The pool of the first device still running: the study's device, and where the A/B runs."""
        return self.running[0].pool

    @property
    def device(self) -> DeviceInfo:
        return self.first.device

    def start(self) -> None:
        """Start every device's worker at once. One device raises as ever; of several, one that cannot
        start is lost (said), and a device of another identity than the first started is left out."""
        if not self.several:
            self.all[0].pool.ensure()
            return
        with ThreadPoolExecutor(max_workers=len(self.all)) as ex:
            started = [(d, ex.submit(d.pool.ensure)) for d in self.all]
        for d, fut in started:
            exc = fut.exception()
            if isinstance(exc, KtuneError):
                self._lose(d, exc)
            elif exc is not None:
                raise exc
        alive = self.running
        if not alive:
            raise KtuneError(f"no device of --ktune-devices could start: {self.all[-1].lost}",
                             hint="run the correctness items first (pytest --ktune) to see what fails")
        for d, label in zip(alive, device_labels([(d.index or 0, d.pool.device) for d in alive]), strict=True):
            d.label = label
        machine = alive[0].pool.device.machine
        for d in alive[1:]:
            if d.pool.device.machine != machine:
                d.lost = "another device identity"
                self.say(f"device {d.label} (index {d.index}) is left out of this tune: a study is of one device "
                         f"identity, {alive[0].label}'s; tune it with --ktune-devices {d.index}")

    def say(self, line: str) -> None:
        self.notes.append(line)
        self._say(line)

    def _lose(self, d: Device, exc: KtuneError) -> None:
        d.lost = first_line(exc.message)
        self.say(f"device {f'{d.label} (index {d.index})' if d.label else d.index} failed: {d.lost}")

    def run(self, loops: Sequence[StudyLoop], deadline: float | None, tick: Callable[[], None]) -> None:
        """Run each running device's loop (``loops``, in the order of ``running``) until the budget is
        spent: the first in this thread (so that Ctrl-C reaches it), the others in threads of their own.
        A loop whose device is lost hands its batch back and ends; when every one is lost, the last
        one's error is raised."""
        devices = self.running
        if len(loops) == 1:
            loops[0].run(deadline, tick)
            return
        asking = threading.Lock()  # one budget check and ask at a time over the devices' loops
        for loop in loops:
            loop.asking = asking
        errors: list[KtuneError] = []
        broken: list[BaseException] = []

        def on_trial() -> None:
            with self.lock:
                tick()

        def one(d: Device, loop: StudyLoop) -> None:
            try:
                loop.run(deadline, on_trial)
            except KtuneError as exc:
                with self.lock:
                    errors.append(exc)
                    moved = loop.hand_back(first_line(exc.message))
                    self._lose(d, exc)
                    if moved and self.running:
                        self.say(f"its trial(s) {', '.join(map(str, moved))} not yet timed are queued again for "
                                 f"{', '.join(o.label for o in self.running)}")
            except BaseException as exc:  # not the device's failure: end the tune, raised by the first loop
                with self.lock:
                    broken.append(exc)
                    loop.hand_back(f"{type(exc).__name__}: {exc}")
                for other in loops:
                    other.stop.set()

        threads = [threading.Thread(target=one, args=(d, loop), name=f"ktune-tune-{d.index}", daemon=True)
                   for d, loop in zip(devices[1:], loops[1:], strict=True)]
        for t in threads:
            t.start()
        try:
            one(devices[0], loops[0])
            for t in threads:
                t.join()
        finally:
            for loop in loops:
                loop.stop.set()  # Ctrl-C here: the other loops end after their batches
        if broken:
            raise broken[0]
        if not self.running:
            raise errors[-1]
