"""The tuner over several devices (``--ktune-devices``) on two PoCL CPU devices of one name: ``ktune
tune`` and ``pytest --ktune-tune`` run one worker per device on the key's one study, each trial naming
its device (by index, since the names are the same), and a device lost mid-tune hands its untimed
trials to the other while the tune goes on, said on the console."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from plugin._kit import Project

from ._tk import Cli, only_study, open_journal, repeat_target, summaries, timed

TWO = "pthread pthread"  # PoCL exposes two CPU devices, both with the same name

# Device 0's worker is lost after its second trial: a fake of a GPU that falls off the bus mid-tune (the
# pool's parent side lives in pytest's process, where a conftest can patch it).
LOSE_DEVICE_0 = '''
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.measure import worker

_evaluate = worker.WorkerPool.evaluate
_answered = {}


def _losing(self, configs, seed, **kw):
    for out in _evaluate(self, configs, seed, **kw):
        if self.spec.device_index == 0 and _answered.get(0, 0) >= 2:
            raise KtuneError("the tuning worker could not start: device 0 lost (a test's fake)")
        _answered[self.spec.device_index] = _answered.get(self.spec.device_index, 0) + 1
        yield out


worker.WorkerPool.evaluate = _losing
'''


@pytest.fixture
def two_devices(project: Project, monkeypatch: pytest.MonkeyPatch) -> Project:
    monkeypatch.setenv("POCL_DEVICES", TWO)
    monkeypatch.delenv("KTUNE_OPENCL_DEVICE", raising=False)
    project.write(repeat_target(repeats=(1, 2, 4, 64), blocks=(32, 64, 128)))
    return project


def _devices(trials: list[Any]) -> Counter[str]:
    return Counter(str(t.user_attrs.get("device")) for t in timed(trials))


def test_ktune_tune_runs_a_worker_per_device_on_one_study(two_devices: Project, cli: Cli) -> None:
    done = cli.run("tune", "--devices", "all", "--trials", "8", "--seed", "3", "--write", "file")
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = summaries(done.stdout)
    assert line["timed"] == "8"  # the study's budget, shared by the devices
    names = line["devices"].split(" and ")
    assert len(names) == 2 and [n.rsplit(" ", 1)[1] for n in names] == ["#0", "#1"], line
    _, trials = only_study(open_journal(two_devices.path))
    on = _devices(trials)
    assert set(on) == set(names) and sum(on.values()) == 8, on
    (record,) = two_devices.records()  # one record: the devices share one identity
    assert record["tuned"]["trials"] == 8


def test_a_device_lost_mid_tune_hands_its_trials_to_the_other(two_devices: Project) -> None:
    two_devices.pytester.makeconftest(LOSE_DEVICE_0)
    result = two_devices.run("-v", "--ktune-tune", "--ktune-devices=0,1", "--ktune-trials=8", "--ktune-seed=3",
                             "-m", "ktune_tune")
    out = result.stdout.str()
    result.assert_outcomes(passed=1, deselected=2)
    assert "(index 0) failed: the tuning worker could not start: device 0 lost (a test's fake)" in out, out
    assert "not yet timed are queued again for" in out, out
    _, trials = only_study(open_journal(two_devices.path))
    on = _devices(trials)
    assert sum(on.values()) == 8, on
    lost = [t for t in trials if "lost" in t.user_attrs]
    retried = [t for t in trials if t.user_attrs.get("source") == "retry"]
    assert lost and {t.user_attrs["retry_of"] for t in retried} == {t.number for t in lost}
    assert all(str(t.user_attrs["device"]).endswith(" #1") for t in retried)
    assert sum(n for d, n in on.items() if d.endswith(" #0")) == 2  # device 0 timed two, then was lost


def test_a_device_index_past_the_last_is_refused_before_anything_starts(two_devices: Project, cli: Cli) -> None:
    done = cli.run("tune", "--devices", "0,5", "--trials", "2")
    assert done.returncode != 0
    assert "error: --devices names opencl device 5, but there are 2" in done.stderr, done.stderr
    assert not (two_devices.path / ".ktune" / "studies.journal").exists()
