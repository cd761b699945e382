"""The replay backend: tune against a recorded landscape instead of a device.

:class:`ReplayPool` has ``WorkerPool``'s interface and answers every configuration from the
landscape (optionally with measurement noise re-sampled from the recorded spread), so a replay runs
the live tuner's own ``tune_key``: its samplers, constraints, warm starts, budget and A/B decision,
with an in-memory study. Every configuration the tuner sends for timing is a trial on a real device
(it costs a compile there, even when it then fails), so the pool keeps that sequence: the trace.
"""

from __future__ import annotations

import functools
import io
import math
import random
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_ktune.backends.base import DeviceInfo
from pytest_ktune.core.keys import cases_by_key, key_string
from pytest_ktune.core.space import Value, config_key
from pytest_ktune.core.store import Record, Store
from pytest_ktune.core.target import Target
from pytest_ktune.lab.landscape import CaseTiming, Landscape, LandscapeError, Point, space_of
from pytest_ktune.measure.ab import Stop
from pytest_ktune.measure.worker import ABOutcome, CaseTime, Outcome, WorkerSpec
from pytest_ktune.tuner.equivalence import classes
from pytest_ktune.tuner.settings import TuneContext, TuneSettings
from pytest_ktune.tuner.storage import MEMORY
from pytest_ktune.tuner.tune import tune_key


def device_of(land: Landscape) -> Any:

    fields = {k: v for k, v in land.device.items() if k != "id"}
    try:
        return DeviceInfo(**fields)
    except TypeError as exc:
        raise LandscapeError(f"the landscape's device is incomplete: {exc}", where=land.where,
                             hint="record it again with `ktune record`") from None


class ReplayPool:
    """A worker pool that answers from a landscape; ``trace`` lists what was sent for timing."""

    def __init__(self, spec: WorkerSpec, *, trial_timeout_s: float, landscape: Landscape, noise: bool = False,
                 seed: int = 0) -> None:
        self.spec = spec
        self.trial_timeout_s = trial_timeout_s
        self.landscape = landscape
        self.points = landscape.lookup()
        self.noise = noise
        self.rng = random.Random(seed)
        self.device = device_of(landscape)
        self.restarts = 0
        self.trace: list[tuple[dict[str, Value], float]] = []  # (configuration, true objective µs)

    def ensure(self) -> None:
        return None

    def _point(self, cfg: Mapping[str, Value]) -> Point:

        p = self.points.get(config_key(cfg))
        if p is None:
            raise LandscapeError(f"{dict(cfg)} is not in the landscape", where=self.landscape.where,
                                 hint="the landscape does not cover this space; record it again")
        return p

    def _times(self, p: Point, draws: int = 1) -> tuple[CaseTime, ...]:
        return tuple(self._case(c, draws) for c in p.cases)

    def _case(self, c: CaseTiming, draws: int) -> CaseTime:
        if not self.noise:
            samples = c.samples_us or (c.median_us,)
            return CaseTime(c.case_id, c.median_us * 1e-6, tuple(s * 1e-6 for s in samples),
                            (c.ci_us[0] * 1e-6, c.ci_us[1] * 1e-6), c.iqr_us * 1e-6)
        drawn = [self._draw(c) for _ in range(max(draws, len(c.samples_us), 5))]
        median = sorted(drawn)[len(drawn) // 2]
        return CaseTime(c.case_id, median * 1e-6, tuple(s * 1e-6 for s in drawn),
                        (min(drawn) * 1e-6, max(drawn) * 1e-6), c.iqr_us * 1e-6)

    def _draw(self, c: CaseTiming) -> float:
        """One sample: a recorded one (bootstrap), else normal around the median with the recorded CI's
        width (a 95 % interval is about four standard errors wide)."""
        if len(c.samples_us) >= 3:
            return self.rng.choice(c.samples_us)
        sigma = max(c.ci_us[1] - c.ci_us[0], 0.0) / 3.92 * math.sqrt(5)
        return max(c.median_us + self.rng.gauss(0.0, sigma), c.median_us * 0.5)

    def evaluate(self, configs: Sequence[Mapping[str, Value]], seed: int) -> Iterator[Outcome]:
        for cfg in configs:
            p = self._point(cfg)
            self.trace.append((dict(cfg), p.value_us))
            if p.state != "ok":
                yield Outcome(dict(cfg), p.state, p.reason, compile_s=p.compile_s)
                continue
            yield Outcome(dict(cfg), "ok", times=self._times(p), compile_s=p.compile_s)

    def ab(self, current: Mapping[str, Value], candidate: Mapping[str, Value], seed: int,
           stop: Stop | None = None) -> ABOutcome:
        """Ten draws a side from the recorded spread (``stop`` changes nothing: a replay's samples cost no
        time)."""
        if self.landscape.imported and config_key(current) not in self.points:
            # A stand-in target has no default, so a replay of an imported landscape has nothing to set
            # its best against: the trace is what the replay is for.
            return ABOutcome("failed", "the landscape was recorded elsewhere: no configuration in use to A/B against")
        a, b = self._point(current), self._point(candidate)
        if a.state != "ok" or b.state != "ok":
            bad = a if a.state != "ok" else b
            return ABOutcome("failed", f"{dict(bad.params)}: {bad.state}: {bad.reason}")
        # Without recorded samples there is nothing to rank: A/B draws ten from the recorded spread.
        noise, self.noise = self.noise, True
        try:
            return ABOutcome("ok", current=self._times(a, 10), candidate=self._times(b, 10))
        finally:
            self.noise = noise

    def kill(self) -> None:
        return None

    def close(self) -> None:
        return None

    def __enter__(self) -> ReplayPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_landscape(target: Target, land: Landscape) -> None:
    """Fail unless ``land`` was recorded for this target's source and space, and covers every point
    its space allows for the key."""

    if land.backend not in target.sources:
        raise LandscapeError(f"{target.name} has no {land.backend} source, which the landscape was recorded with",
                             where=land.where, hint="replay it in the project it was recorded in")
    target = target.for_backend(land.backend)
    land.check_for(target.source_hash(land.backend), space_of(target), what=target.name)
    have = land.lookup()
    missing = [p for p in target.space.feasible(land.key) if config_key(p) not in have]
    if missing:
        raise LandscapeError(f"the landscape lacks {len(missing)} feasible point(s) of {target.name}, "
                             f"e.g. {missing[0]}", where=land.where,
                             hint="record it again with `ktune record`")


@dataclass(frozen=True)
class Replay:
    """One replayed tune: what it sent for timing, in order, and what it concluded."""

    trace: tuple[tuple[dict[str, Value], float], ...]
    best_params: Mapping[str, Value]
    accepted: bool
    decision: str


def replay_tune(root: Path, target: Target, land: Landscape, *, sampler: str, trials: int, seed: int,
                noise: bool = False, records: Sequence[Record] = (), priors: bool = True,
                sampler_factory: Callable[[Any], Any] | None = None) -> Replay:
    """Run ``tune_key`` on the landscape: ``trials`` timed trials, an in-memory study, no report.
    ``records`` stand in for the params file (warm starts from other keys and devices); ``priors``
    and ``sampler_factory`` are as in TuneSettings and TuneContext. An imported landscape replays
    on its stand-in target (``lab.standin``), without device priors."""

    if land.imported:
        found: tuple[dict[str, Any], list[int]] | None = (dict(land.key), [])
        priors = False  # a stand-in target has no launch to probe (lab.standin)
    else:
        found = cases_by_key(target, land.backend).get(key_string(land.key))
    if found is None:
        raise LandscapeError(f"{target.name} has no case with the landscape's key {key_string(land.key)}",
                             where=land.where, hint="replay it in the project it was recorded in")
    holder: list[ReplayPool] = []

    def factory(spec: WorkerSpec, *, trial_timeout_s: float) -> ReplayPool:
        pool = ReplayPool(spec, trial_timeout_s=trial_timeout_s, landscape=land, noise=noise, seed=seed)
        holder.append(pool)
        return pool

    settings = TuneSettings(trials=trials, sampler=sampler, storage=MEMORY, seed=seed, priors=priors)
    with tempfile.TemporaryDirectory(prefix="ktune-replay-") as tmp:
        params = Path(tmp) / "ktune-params.json"
        if records:
            Store(params).save(records)
        ctx = TuneContext(root=root, params_path=params, backend=land.backend, settings=settings,
                          progress=io.StringIO(), pool_factory=functools.partial(factory), reports=False,
                          sampler_factory=sampler_factory)
        out = tune_key(ctx, target, land.key, found[1])
    pool = holder[0]
    return Replay(trace=tuple(pool.trace), best_params=dict(out.best_params), accepted=out.accepted,
                  decision=out.decision)


def classes_of(target: Target, land: Landscape) -> dict[str, str]:
    """The landscape's equivalent configurations (``tuner.equivalence``), from the launches its target's
    function makes for the key's cases; none for an imported landscape, which has no launches."""
    if land.imported:
        return {}
    found = cases_by_key(target, land.backend).get(key_string(land.key))
    return classes(target, land.backend, found[1] if found else [], [dict(p.params) for p in land.points])


def record_of(land: Landscape, params: Mapping[str, Value], device: str | None = None) -> Record:
    """A params-file record of ``params`` for the landscape's key, as a finished tune leaves it."""
    return Record(target=land.target, device=device or land.device_id, key=dict(land.key), params=dict(params))
