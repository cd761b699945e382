"""A backend with no device: timers return times from a script, so timing logic can be tested."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pytest_ktune.backends.base import DeviceInfo, KernelFunction, Launch, Resources

FAKE_DEVICE = DeviceInfo(
    backend="fake", name="Fake Device 9000", arch="fake_1", compiler="none", compute_units=4,
    max_threads_per_block=1024, shared_mem_per_block=49152, regs_per_block=65536,
    l2_bytes=1 << 20, global_mem_bytes=1 << 30, warp_size=32,
)


@dataclass
class FakeFunction:
    """A kernel entry point that does nothing; its name tells timers apart."""

    name: str = "fake"
    launches: int = 0

    def launch(self, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any]) -> None:
        self.launches += 1

    def resources(self) -> Resources:
        return Resources(registers=16, shared_bytes=0, local_bytes=0, max_threads_per_block=1024)


def launch_sets(function: KernelFunction, count: int) -> list[list[Launch]]:
    """``count`` launch sets of one launch each."""
    return [[Launch(function, (1,), (32,), ())] for _ in range(count)]


class FakeClock:
    """Stands in for the ``time`` module inside ``_bench``: time moves only when a timer samples."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


# Seconds per pass over the launch sets, from the timer (its label, sets and repeats) and
# how many samples that timer has already given.
TimeScript = Callable[["FakeTimer", int], float]


@dataclass
class FakeTimer:
    backend: FakeBackend
    sets: Sequence[Sequence[Launch]]
    repeats: int
    mode: str = "fake"
    taken: int = 0
    flushes: list[bool] = field(default_factory=list)
    closed: bool = False

    @property
    def label(self) -> str:
        return self.sets[0][0].function.name

    def sample(self, flush: bool) -> float:
        assert not self.closed, "sampled a closed timer"
        seconds = self.backend.script(self, self.taken)
        self.taken += 1
        self.flushes.append(flush)
        self.backend.log.append((self.label, self.repeats))
        if self.backend.clock is not None:
            self.backend.clock.now += self.backend.seconds_per_sample
        return seconds

    def close(self) -> None:
        self.closed = True


class FakeBackend:
    """Implements the Backend protocol on host memory; ``script`` decides what timers report."""

    name = "fake"
    cache_dir: Path | None = None

    def __init__(self, script: TimeScript, clock: FakeClock | None = None,
                 seconds_per_sample: float = 0.01) -> None:
        self.device = FAKE_DEVICE
        self.script = script
        self.clock = clock
        self.seconds_per_sample = seconds_per_sample
        self.timers: list[FakeTimer] = []
        self.log: list[tuple[str, int]] = []

    def compile(self, source: str, defines: Mapping[str, Any], *, filename: str) -> Any:
        raise NotImplementedError("the fake backend compiles nothing")

    def to_device(self, a: np.ndarray) -> Any:
        return np.array(a)

    def to_host(self, a: Any) -> np.ndarray:
        return np.array(a)

    def empty(self, shape: Sequence[int], dtype: Any, *, poison: bool = False) -> Any:
        return np.empty(tuple(shape), dtype)

    def owns(self, obj: Any) -> bool:
        return isinstance(obj, np.ndarray)

    def synchronize(self) -> None:
        pass

    def timer(self, launch_sets: Sequence[Sequence[Launch]], repeats: int) -> FakeTimer:
        t = FakeTimer(self, launch_sets, repeats)
        self.timers.append(t)
        return t

    def copy_bandwidth(self) -> float:
        return 1e12

    def release(self) -> None:
        pass


def per_launch(seconds: float) -> TimeScript:
    """Every launch takes ``seconds``, so one pass takes ``seconds`` times the number of sets."""
    return lambda timer, _i: seconds * len(timer.sets)
