"""The gate's choice of reference: a changed case is judged by a same-run A/B against its baseline's
program (or REF's, under --ktune-base) whatever the recorded time says; an unchanged one is only
screened against a time recorded on this machine. Run against a fake measurement process."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

import ktune
from pytest_ktune.backends.base import DeviceInfo
from pytest_ktune.core.space import Value
from pytest_ktune.core.store import Baseline, Record, Store, Timing, merge_baselines
from pytest_ktune.core.target import Target
from pytest_ktune.gate.decision import Threshold
from pytest_ktune.gate.reference import BaseRef, missing_at_head
from pytest_ktune.gate.verdict import DRIFT, NO_BASELINE, REGRESSION, Gate, GateSettings, Item
from pytest_ktune.measure.ab import MAX_SAMPLES, ABResult, Stop
from pytest_ktune.measure.bench import Measurement
from pytest_ktune.measure.service import CaseRef
from pytest_ktune.measure.worker import TargetRef

from ._fakes import FAKE_DEVICE

DEVICE = replace(FAKE_DEVICE, backend="opencl", identity="Fake Device 9000 [opencl] | 4 CUs | this host")
OTHER = "Fake Device 9000 [opencl] | 4 CUs | another host"
SOURCE = "__kernel void k(__global float *x) { x[get_global_id(0)] *= SCALE; }\n"
CASE = "n100"


def _m(center: float, n: int = 20, spread: float = 0.005) -> Measurement:
    return Measurement(samples=tuple(center * (1 - spread + 2 * spread * i / (n - 1)) for i in range(n)),
                       repeats=10, flushed=True, rotation=1)


@dataclass
class FakeMeasurer:
    """The measurement process: scripted times per source text and parameters; records each A/B."""

    times: Mapping[str, float]  # by the SCALE parameter's value: what the kernel costs with it
    slower_sources: Mapping[str, float] = field(default_factory=dict)  # a source text's extra factor
    abs_run: list[tuple[dict[str, Value], dict[str, Value], str | None]] = field(default_factory=list)
    current_source: str = SOURCE
    targets_b: list[TargetRef | None] = field(default_factory=list)  # B's whole target, per A/B (None: A's launcher)
    slower_launchers: Mapping[str, float] = field(default_factory=dict)  # B's factor, by its module's file

    def _cost(self, params: Mapping[str, Value], source: str | None) -> float:
        factor = self.slower_sources.get(source if source is not None else self.current_source, 1.0)
        return self.times[str(params["SCALE"])] * factor

    def device(self) -> DeviceInfo:
        return DEVICE

    def copy_bandwidth(self) -> float:
        return 1e11

    def peak_flops(self) -> float | None:
        return None

    def check(self, case: CaseRef, configs: Sequence[tuple[str, Mapping[str, Value]]]) -> list[str]:
        return []

    def time(self, case: CaseRef, params: Mapping[str, Value]) -> Measurement:
        return _m(self._cost(params, None))

    def ab(self, case: CaseRef, a: Mapping[str, Value], b: Mapping[str, Value],
           source_b: str | None, stop: Stop | None = None, *, target_b: TargetRef | None = None) -> ABResult:
        self.abs_run.append((dict(a), dict(b), source_b))
        self.targets_b.append(target_b)
        factor = self.slower_launchers.get(target_b.file, 1.0) if target_b is not None else 1.0
        return ABResult(a=_m(self._cost(a, None)), b=_m(self._cost(b, source_b) * factor), stopped=MAX_SAMPLES)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.com")
    _git(tmp_path, "config", "user.name", "t")
    (tmp_path / "k.cl").write_text(SOURCE)
    _git(tmp_path, "add", "k.cl")
    _git(tmp_path, "commit", "-qm", "kernel")
    return tmp_path


def _target(repo: Path) -> Target:
    return ktune.target(sources={"opencl": str(repo / "k.cl")}, space=ktune.Space(SCALE=[1, 2, 3]),
                        default={"SCALE": 1}, key=lambda x: {"N": x.shape[0]},
                        cases=[ktune.Case(x=ktune.Tensor((100,), "float32"))],
                        reference=lambda x: x)(lambda kernel, x: x)


def _item(target: Target) -> Item:
    return Item(target=target.for_backend("opencl"), case_index=0, case_id=CASE, key={"N": 100},
                target_id="k.py::k")


def _timing(us: float) -> Timing:
    return Timing(median_us=us, iqr_us=0.01 * us, ci_low_us=0.995 * us, ci_high_us=1.005 * us, samples=20)


def _baseline(repo: Path, target: Target, params: Mapping[str, Value], machines: Mapping[str, float]) -> Baseline:
    commit = _git(repo, "rev-parse", "HEAD").strip()
    t = target.for_backend("opencl")
    return Baseline(params=dict(params), source_hash=t.source_hash("opencl"), source_path="k.cl", commit=commit,
                    date="2026-12-01T00:00:00Z", ktune_version="0", deps_hash=t.deps_hash("opencl"),
                    machines={m: {CASE: _timing(us)} for m, us in machines.items()})


def _record(params: Mapping[str, Value], baseline: Baseline | None) -> Record:
    return Record(target="k.py::k", device=DEVICE.id, key={"N": 100}, params=dict(params), baseline=baseline)


def _gate(repo: Path, measurer: FakeMeasurer, base: BaseRef | None = None) -> Gate:
    return Gate(GateSettings(root=repo, threshold=Threshold.parse("median:5%"), seed=1, base=base), measurer)


def test_a_changed_source_is_judged_by_ab_even_when_the_recorded_time_says_it_is_fine(repo: Path) -> None:
    target = _target(repo)
    # The baseline was recorded on a slower day: 2.0 µs. Today the old kernel runs 1.77 µs and the new
    # one 2.05 µs, x1.16 the old, yet within 5 % of the recorded time: the screen alone would pass it.
    baseline = _baseline(repo, target, {"SCALE": 1}, {DEVICE.machine: 2.0e0})
    slow = SOURCE.replace("*= SCALE", "*= SCALE * 1")
    (repo / "k.cl").write_text(slow)
    measurer = FakeMeasurer(times={"1": 1.77e-6}, slower_sources={slow: 2.05 / 1.77}, current_source=slow)
    result = _gate(repo, measurer).judge(_item(_target(repo)), {"SCALE": 1}, _record({"SCALE": 1}, baseline))
    assert len(measurer.abs_run) == 1
    _, b_params, b_source = measurer.abs_run[0]
    assert b_params == {"SCALE": 1} and b_source == SOURCE  # the baseline's source, read from git
    assert result.verdict == REGRESSION and result.compared == "ab"
    assert result.ratio == pytest.approx(2.05 / 1.77, rel=1e-3)  # time ÷ the A/B's baseline side
    assert result.baseline_us == pytest.approx(1.77, rel=1e-3)
    assert "Changed since the baseline" in result.failure and "source " in result.failure


def test_changed_parameters_are_ab_d_against_the_baseline_s_parameters(repo: Path) -> None:
    target = _target(repo)
    baseline = _baseline(repo, target, {"SCALE": 1}, {DEVICE.machine: 1.0})
    measurer = FakeMeasurer(times={"1": 1.0e-6, "2": 1.02e-6})
    result = _gate(repo, measurer).judge(_item(target), {"SCALE": 2}, _record({"SCALE": 2}, baseline))
    assert measurer.abs_run == [({"SCALE": 2}, {"SCALE": 1}, None)]  # same source: compiled as it is
    assert result.verdict == "ok" and result.compared == "ab"
    assert "parameters {'SCALE': 1} -> {'SCALE': 2}" in result.note


def test_an_unchanged_case_slower_than_recorded_is_drift_never_a_regression(repo: Path) -> None:
    target = _target(repo)
    baseline = _baseline(repo, target, {"SCALE": 1}, {DEVICE.machine: 1.0})
    measurer = FakeMeasurer(times={"1": 1.5e-6})  # 50 % slower than recorded, same program
    result = _gate(repo, measurer).judge(_item(target), {"SCALE": 1}, _record({"SCALE": 1}, baseline))
    assert measurer.abs_run == []  # an unchanged target pays for no A/B
    assert result.verdict == DRIFT and not result.failure and result.compared == "recorded"
    assert result.ratio == pytest.approx(1.5, rel=1e-3)


def test_a_baseline_of_another_machine_does_not_apply(repo: Path) -> None:
    target = _target(repo)
    baseline = _baseline(repo, target, {"SCALE": 1}, {OTHER: 0.5})
    measurer = FakeMeasurer(times={"1": 1.0e-6})  # twice the other machine's time
    result = _gate(repo, measurer).judge(_item(target), {"SCALE": 1}, _record({"SCALE": 1}, baseline))
    assert result.verdict == NO_BASELINE and result.ratio is None and result.baseline_us is None
    assert "other machine" in result.note
    # Timings written before machines were named are history too.
    legacy = replace(baseline, machines={}, timings={CASE: _timing(0.5)})
    result = _gate(repo, measurer).judge(_item(target), {"SCALE": 1}, _record({"SCALE": 1}, legacy))
    assert result.verdict == NO_BASELINE


def test_a_changed_include_is_ab_d_against_the_baseline_s_header(repo: Path) -> None:
    (repo / "k.cl").write_text('#include "work.h"\n' + SOURCE)
    (repo / "work.h").write_text("#define WORK 1\n")
    _git(repo, "add", "k.cl", "work.h")
    _git(repo, "commit", "-qm", "header")
    target = _target(repo)
    baseline = _baseline(repo, target, {"SCALE": 1}, {DEVICE.machine: 1.0})
    (repo / "work.h").write_text("#define WORK 16\n")
    measurer = FakeMeasurer(times={"1": 1.0e-6})
    result = _gate(repo, measurer).judge(_item(_target(repo)), {"SCALE": 1}, _record({"SCALE": 1}, baseline))
    (_, _, b_source), = measurer.abs_run
    assert b_source is not None and "work.h" in b_source and b_source != (repo / "k.cl").read_text()
    assert "included files (work.h)" in result.note


def test_base_ref_ab_s_a_changed_target_without_any_baseline(repo: Path) -> None:
    commit = _git(repo, "rev-parse", "HEAD").strip()
    ref = BaseRef.load(repo, "HEAD", repo / "ktune-params.json")
    assert ref.commit == commit and ref.store is None  # REF has no params file
    slow = SOURCE.replace("*= SCALE", "*= SCALE * 2")
    (repo / "k.cl").write_text(slow)
    measurer = FakeMeasurer(times={"1": 1.0e-6}, slower_sources={slow: 3.0}, current_source=slow)
    result = _gate(repo, measurer, ref).judge(_item(_target(repo)), {"SCALE": 1}, None)
    assert measurer.abs_run == [({"SCALE": 1}, {"SCALE": 1}, SOURCE)]  # REF's source, the default's parameters
    assert result.verdict == REGRESSION and "HEAD (" in result.failure
    # Unchanged since REF: no A/B, and with no baseline nothing to screen against.
    (repo / "k.cl").write_text(SOURCE)
    measurer = FakeMeasurer(times={"1": 1.0e-6})
    result = _gate(repo, measurer, ref).judge(_item(_target(repo)), {"SCALE": 1}, None)
    assert measurer.abs_run == [] and result.verdict == NO_BASELINE


def test_base_ref_that_git_does_not_know_is_an_error_naming_what_to_fetch(repo: Path) -> None:
    with pytest.raises(ktune.KtuneError, match="origin/nowhere") as err:
        BaseRef.load(repo, "origin/nowhere", repo / "ktune-params.json")
    assert "git fetch" in (err.value.hint or "")


def test_records_ref_has_and_head_lacks_are_listed(repo: Path) -> None:
    target = _target(repo)
    baseline = _baseline(repo, target, {"SCALE": 1}, {DEVICE.machine: 1.0})
    ref_store = Store(repo / "ktune-params.json", [_record({"SCALE": 1}, baseline),
                                                    replace(_record({"SCALE": 1}, None), device="Other [opencl]")])
    ref = BaseRef(name="main", commit="0" * 40, root=repo, store=ref_store)
    args: dict[str, Any] = {"target": "k.py::k", "key": {"N": 100}, "machine": DEVICE.machine, "case_id": CASE}
    assert missing_at_head(ref, Store(ref_store.path, ref_store.records.values()), **args) == []
    assert missing_at_head(ref, None, **args) == ["the record for Fake Device 9000 [opencl]",
                                                  "the record for Other [opencl]"]
    without_timing = Store(ref_store.path, [_record({"SCALE": 1}, replace(baseline, machines={})),
                                            replace(_record({"SCALE": 1}, None), device="Other [opencl]")])
    assert missing_at_head(ref, without_timing, **args) == ["the baseline timing of this case on this machine"]


def test_baselines_keep_timings_per_machine_and_round_trip(repo: Path) -> None:
    target = _target(repo)
    a = _baseline(repo, target, {"SCALE": 1}, {DEVICE.machine: 1.0})
    b = _baseline(repo, target, {"SCALE": 1}, {OTHER: 2.0})
    merged = merge_baselines(a, b)
    assert set(merged.machines) == {DEVICE.machine, OTHER}  # re-recorded on one machine, the other's kept
    assert merge_baselines(a, replace(b, params={"SCALE": 2})).machines.keys() == {OTHER}  # another program
    store = Store(repo / "ktune-params.json", [_record({"SCALE": 1}, merged)])
    again = Store.from_text(store.render(), store.path)
    rec = again.find("k.py::k", DEVICE.id, {"N": 100})
    assert rec is not None and rec.baseline is not None
    assert rec.baseline.timings_on(OTHER)[CASE].median_us == 2.0
    assert "timings" not in store.render().split('"machines"')[0].split('"baseline"')[1]
