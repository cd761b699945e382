"""The gate over several devices (``--ktune-devices``): one lane per device, each a thread that drives
its device's measurement process, so the devices measure at once while pytest runs its items one
after another.

A performance item's whole work (its timing and any A/B) is one ``Job`` and runs on one lane. The
performance jobs are spread over the lanes before they run (``spread``: longest expected first, onto
the lane with the least expected work), and a lane takes the jobs queued for it in order. The
correctness items fill the gaps: planned with them, they wait in one queue of their own that a lane
takes from once its own queue is empty, so each goes to whichever device frees first and the devices
finish together. An urgent job (an item that was not planned) goes to the first lane that is free,
before the queued ones. Each item waits for its own job's answer.

A lane whose device fails (its process crashed, hung or could not start again: ``LOST``) fails the job
it was running and hands its queue to the lanes still running (the shared queue needs no handing); the
last lane is never retired, and its service starts a fresh process as the one-device gate does.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pytest_ktune.core.errors import BackendUnavailable
from pytest_ktune.measure.service import ItemCrash

L = TypeVar("L")  # what a lane hands its jobs: the device's gate and facts (``run.session``), or a fake

LOST: tuple[type[BaseException], ...] = (ItemCrash, BackendUnavailable)  # a device's failure, not a kernel's answer


@dataclass(frozen=True)
class Planned:
    """A job to spread: its key (a case), how long it is expected to take (any unit), and what it runs."""

    key: Hashable
    expected: float
    run: Callable[[Any], Any]


def spread(jobs: Sequence[Planned], lanes: int, loads: Sequence[float] | None = None) -> list[list[Planned]]:
    """The jobs in ``lanes`` queues of balanced expected work: the longest first, each onto the lane
    with the least work so far (``loads``: what each lane holds already), ties to the lower index."""
    load = list(loads) if loads is not None else [0.0] * lanes
    queues: list[list[Planned]] = [[] for _ in range(lanes)]
    for job in sorted(jobs, key=lambda j: -j.expected):
        i = min(range(lanes), key=lambda k: (load[k], k))
        queues[i].append(job)
        load[i] += job.expected
    return queues


def expected_times(known: Sequence[float | None]) -> list[float]:
    """Each job's expected time: its own where a baseline gives one, else the mean of the known ones
    (1 where none is known, so that unknown jobs are spread evenly)."""
    seen = [k for k in known if k is not None and k > 0]
    mean = sum(seen) / len(seen) if seen else 1.0
    return [k if k is not None and k > 0 else mean for k in known]


@dataclass
class _Lane(Generic[L]):
    index: int
    context: L
    queue: deque[tuple[Planned, Future[Any]]] = field(default_factory=deque)
    alive: bool = True
    load: float = 0.0  # the expected work still queued


class Dispatcher(Generic[L]):
    """Runs jobs on the lanes' threads; ``plan`` queues the performance jobs, ``result`` waits for one."""

    def __init__(self, contexts: Sequence[L]) -> None:
        self._lanes = [_Lane(i, c) for i, c in enumerate(contexts)]
        self._urgent: deque[tuple[Planned, Future[Any]]] = deque()
        self._fill: deque[tuple[Planned, Future[Any]]] = deque()  # for any lane whose own queue is empty
        self._futures: dict[Hashable, Future[Any]] = {}
        self._cond = threading.Condition()
        self._stopped = False
        self.retired: list[tuple[int, str]] = []  # (lane, why), in the order the devices failed
        self._threads = [threading.Thread(target=self._loop, args=(lane,), name=f"ktune-device-{lane.index}",
                                          daemon=True) for lane in self._lanes]
        for t in self._threads:
            t.start()

    def plan(self, jobs: Sequence[Planned], fill: Sequence[Planned] = ()) -> None:
        """Queue the jobs over the running lanes, balanced by their expected times, and the ``fill`` jobs,
        in order, for whichever lane runs out of its own first."""
        with self._cond:
            live = [lane for lane in self._lanes if lane.alive]
            for lane, queue in zip(live, spread(self._fresh(jobs), len(live), [lane.load for lane in live]),
                                   strict=True):
                for job in queue:
                    lane.queue.append((job, self._future(job)))
                    lane.load += job.expected
            self._fill.extend((job, self._future(job)) for job in self._fresh(fill))
            self._cond.notify_all()

    def _fresh(self, jobs: Sequence[Planned]) -> list[Planned]:
        """The jobs not planned yet, each key once."""
        return list({j.key: j for j in jobs if j.key not in self._futures}.values())

    def _future(self, job: Planned) -> Future[Any]:
        fut: Future[Any] = Future()
        self._futures[job.key] = fut
        return fut

    def planned(self, key: Hashable) -> bool:
        return key in self._futures

    def result(self, key: Hashable) -> Any:
        """The answer of the planned job ``key`` (waiting for it); its exception where it raised one."""
        return self._futures.pop(key).result()

    def now(self, run: Callable[[L], Any]) -> Any:
        """Run ``run`` on the first free lane, before any lane's queued jobs, and wait for its answer."""
        fut: Future[Any] = Future()
        with self._cond:
            self._urgent.append((Planned(None, 0.0, run), fut))
            self._cond.notify_all()
        return fut.result()

    def alive(self) -> list[L]:
        return [lane.context for lane in self._lanes if lane.alive]

    def close(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=5)

    def _next(self, lane: _Lane[L]) -> tuple[Planned, Future[Any]] | None:
        with self._cond:
            while not self._stopped and lane.alive and not self._urgent and not lane.queue and not self._fill:
                self._cond.wait()
            if self._stopped or not lane.alive:
                return None
            if self._urgent:
                return self._urgent.popleft()
            if not lane.queue:
                return self._fill.popleft()
            job = lane.queue.popleft()
            lane.load -= job[0].expected
            return job

    def _loop(self, lane: _Lane[L]) -> None:
        while (got := self._next(lane)) is not None:
            job, fut = got
            try:
                answer = job.run(lane.context)
            except LOST as exc:
                fut.set_exception(exc)
                self._retire(lane, str(exc))
            except BaseException as exc:  # the item's own failure (a mismatch, a regression, a skip)
                fut.set_exception(exc)
            else:
                fut.set_result(answer)

    def _retire(self, lane: _Lane[L], why: str) -> None:
        """Take a failed lane out, where another runs, and spread its queued jobs over the others."""
        with self._cond:
            others = [other for other in self._lanes if other.alive and other is not lane]
            if not others:
                return  # the last device: its service starts a fresh process for the next job
            lane.alive = False
            self.retired.append((lane.index, why))
            moved = list(lane.queue)
            lane.queue.clear()
            lane.load = 0.0
            queues = spread([job for job, _ in moved], len(others), [o.load for o in others])
            futures = {id(job): fut for job, fut in moved}
            for other, queue in zip(others, queues, strict=True):
                for job in queue:
                    other.queue.append((job, futures[id(job)]))
                    other.load += job.expected
            self._cond.notify_all()
