"""The tuner over several devices (``tuner.devices``) with fake devices: replayed pools, one per device
index, on the key's one study. Both devices time trials at once and each trial names its device; the
budget is the study's, not each device's; a device lost mid-tune hands its untimed trials to the
other and the tune goes on, said; a device that cannot start or has another identity is left out; the
A/B runs on one device."""

from __future__ import annotations

import io
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import pytest

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.keys import cases_by_key, key_string
from pytest_ktune.core.space import Value
from pytest_ktune.lab.replay import ReplayPool
from pytest_ktune.measure.ab import Stop
from pytest_ktune.measure.worker import ABOutcome, Outcome, WorkerSpec
from pytest_ktune.tuner.outcome import TuneOutcome
from pytest_ktune.tuner.settings import TuneContext, TuneSettings
from pytest_ktune.tuner.storage import open_storage

from ._data import SILU, landscape, target

TRIAL_S = 0.03  # a fake trial's time on its device, long enough for the two devices' trials to overlap


class Bench:
    """The fake devices of one test: what each ran, how many ran at once, and how each fails."""

    def __init__(self, *, lose_after: Mapping[int, int] | None = None, dead: Sequence[int] = (),
                 other_identity: Sequence[int] = ()) -> None:
        self.land = landscape(SILU)
        self.lose_after = dict(lose_after or {})  # device index -> outcomes it answers before it is lost
        self.dead = set(dead)  # devices whose worker never starts
        self.other_identity = set(other_identity)
        self.ran: Counter[int | None] = Counter()
        self.ab_on: list[int | None] = []
        self.running = 0
        self.peak = 0
        self.lock = threading.Lock()

    def pool(self, spec: WorkerSpec, *, trial_timeout_s: float) -> FakeDevice:
        return FakeDevice(self, spec, trial_timeout_s=trial_timeout_s)


class FakeDevice(ReplayPool):
    """One device: a replayed pool that takes ``TRIAL_S`` a trial, and is lost as its bench says."""

    def __init__(self, bench: Bench, spec: WorkerSpec, *, trial_timeout_s: float) -> None:
        super().__init__(spec, trial_timeout_s=trial_timeout_s, landscape=bench.land, seed=1)
        self.bench = bench
        self.index = spec.device_index
        if self.index in bench.other_identity:
            self.device = replace(self.device, name=self.device.name + " (another model)")

    def ensure(self) -> None:
        if self.index in self.bench.dead:
            raise KtuneError("the tuning worker could not start: no such device (a test's fake)")

    def evaluate(self, configs: Sequence[Mapping[str, Value]], seed: int) -> Iterator[Outcome]:
        for out in super().evaluate(configs, seed):
            b = self.bench
            if self.index in b.lose_after and b.ran[self.index] >= b.lose_after[self.index]:
                raise KtuneError(f"the tuning worker could not start: device {self.index} lost (a test's fake)")
            with b.lock:
                b.running += 1
                b.peak = max(b.peak, b.running)
            time.sleep(TRIAL_S)
            with b.lock:
                b.running -= 1
                b.ran[self.index] += 1
            yield out

    def ab(self, current: Mapping[str, Value], candidate: Mapping[str, Value], seed: int,
           stop: Stop | None = None) -> ABOutcome:
        self.bench.ab_on.append(self.index)
        return super().ab(current, candidate, seed, stop)


def _tune(tmp_path: Path, bench: Bench, devices: tuple[int, ...] | None, *, trials: int = 12,
          said: list[str] | None = None) -> TuneOutcome:
    from pytest_ktune.tuner.tune import tune_key

    t = target("silu_and_mul")
    console = io.StringIO()
    settings = TuneSettings(trials=trials, sampler="bo", seed=1)
    ctx = TuneContext(root=tmp_path, params_path=tmp_path / "ktune-params.json", backend=bench.land.backend,
                      settings=settings, pool_factory=bench.pool, reports=False, devices=devices, progress=console)
    try:
        return tune_key(ctx, t, bench.land.key, cases_by_key(t, bench.land.backend)[key_string(bench.land.key)][1])
    finally:
        if said is not None:
            said.extend(line.removeprefix("ktune: ") for line in console.getvalue().splitlines()
                        if line.startswith("ktune: "))


def _trials(tmp_path: Path, out: TuneOutcome) -> list[Any]:
    storage = open_storage(None, tmp_path / ".ktune")[0]
    return list(optuna.load_study(study_name=out.study, storage=storage).trials)


def _timed_on(trials: Sequence[Any]) -> Counter[str]:
    return Counter(str(t.user_attrs.get("device")) for t in trials
                   if t.state == optuna.trial.TrialState.COMPLETE and "duplicate" not in t.user_attrs)


def test_two_devices_time_trials_at_once_on_one_study_within_its_budget(tmp_path: Path) -> None:
    bench = Bench()
    out = _tune(tmp_path, bench, (0, 1), trials=12)
    assert bench.peak == 2  # both devices timed at once
    assert bench.ran[0] > 0 and bench.ran[1] > 0
    assert out.timed == 12  # the study's budget, not each device's
    name = bench.land.device["name"]
    assert out.devices == (f"{name} #0", f"{name} #1")  # one name: told apart by index
    on = _timed_on(_trials(tmp_path, out))
    assert set(on) == {f"{name} #0", f"{name} #1"} and sum(on.values()) == 12
    assert bench.ab_on == [0]  # the decision's A/B on one device
    assert out.notes == ()


def test_the_proposals_of_two_devices_spread_out(tmp_path: Path) -> None:
    out = _tune(tmp_path, Bench(), (0, 1), trials=10)
    timed = [t for t in _trials(tmp_path, out) if t.state == optuna.trial.TrialState.COMPLETE
             and "duplicate" not in t.user_attrs]
    assert len({tuple(sorted(t.params.items())) for t in timed}) == len(timed)  # no configuration timed twice


def test_one_device_is_the_tune_of_today(tmp_path: Path) -> None:
    bench = Bench()
    out = _tune(tmp_path, bench, None, trials=6)
    assert out.timed == 6 and out.devices == () and set(bench.ran) == {None}
    assert all("device" not in t.user_attrs for t in _trials(tmp_path, out))


def test_a_device_lost_mid_tune_hands_its_trials_to_the_other(tmp_path: Path) -> None:
    said: list[str] = []
    bench = Bench(lose_after={0: 2})
    out = _tune(tmp_path, bench, (0, 1), trials=12, said=said)
    assert out.timed == 12  # the tune went on with device 1
    assert bench.ran[0] == 2 and bench.ran[1] == 10
    assert bench.ab_on == [1]  # the first device still running
    assert any("(index 0) failed: the tuning worker could not start: device 0 lost" in s for s in said), said
    assert any("queued again for" in s for s in said), said
    assert out.notes == tuple(said)
    trials = _trials(tmp_path, out)
    lost = [t for t in trials if "lost" in t.user_attrs]
    retried = [t for t in trials if t.user_attrs.get("source") == "retry"]
    assert lost and {t.user_attrs["retry_of"] for t in retried} == {t.number for t in lost}
    name = bench.land.device["name"]
    for t in retried:  # each untimed trial of the lost device was timed on the other
        assert t.state == optuna.trial.TrialState.COMPLETE and t.user_attrs["device"] == f"{name} #1"


def test_when_every_device_is_lost_the_tune_fails_with_why(tmp_path: Path) -> None:
    # The error is the last lost device's; which of the two threads loses its device last is the scheduler's.
    said: list[str] = []
    with pytest.raises(KtuneError, match=r"device [01] lost"):
        _tune(tmp_path, Bench(lose_after={0: 1, 1: 2}), (0, 1), said=said)
    failed = [line for line in said if " failed: " in line]
    assert len(failed) == 2 and all(any(f"(index {i}) failed: " in line for line in failed) for i in (0, 1))


def test_a_device_that_cannot_start_is_left_out_and_said(tmp_path: Path) -> None:
    said: list[str] = []
    bench = Bench(dead=[1])
    out = _tune(tmp_path, bench, (0, 1), trials=6, said=said)
    assert out.timed == 6 and set(bench.ran) == {0}
    assert said == ["device 1 failed: the tuning worker could not start: no such device (a test's fake)"]


def test_a_device_of_another_identity_is_left_out_of_the_study(tmp_path: Path) -> None:
    said: list[str] = []
    bench = Bench(other_identity=[1])
    out = _tune(tmp_path, bench, (0, 1), trials=6, said=said)
    assert set(bench.ran) == {0} and out.timed == 6
    assert len(said) == 1 and "is left out of this tune: a study is of one device identity" in said[0]
    assert "--ktune-devices 1" in said[0]
