"""The verdict of one performance item: a changed case timed side by side with its reference in the
same run, an unchanged one screened against the time recorded on this machine.

``Gate.check`` verifies a case's configurations and ``Gate.time`` measures it with the parameters in
use, both in the measurement process (``measure.service``). ``Gate.judge`` finds the case's
reference (``gate.reference``: the baseline's program, or REF's under ``--ktune-base``); where what
runs differs from it, the verdict is the A/B's (``Gate._ab``), else the recorded time screens it
(``Gate._screen``), and it returns a ``PerfResult``. A confirmed regression is a result whose verdict
is ``REGRESSION`` and whose ``failure`` carries the message the item fails with.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.space import Value
from pytest_ktune.core.store import Baseline, Record, source_changed
from pytest_ktune.core.target import Target
from pytest_ktune.core.text import seconds
from pytest_ktune.gate.decision import Threshold, confirm, faster, screen, stop_rule
from pytest_ktune.gate.reference import (
    BaseRef,
    Reference,
    Unavailable,
    at_ref,
    baseline_label,
    of_baseline,
    of_whole_target,
)
from pytest_ktune.gate.snapshot import Snapshot, WholeTarget
from pytest_ktune.measure.ab import FASTER, SLOWER, ABResult
from pytest_ktune.measure.bench import Measurement
from pytest_ktune.measure.service import CaseRef, Measurer
from pytest_ktune.measure.verify import case_seed
from pytest_ktune.measure.worker import TargetRef

REGRESSION = "REGRESSION"  # a confirmed (or unconfirmable) slowdown: the item fails
DRIFT = "drift"  # an unchanged case slower than recorded on this machine: the machine, not the change
NO_BASELINE = "no baseline"  # nothing to compare an unchanged case with on this machine
UNJUDGED = "unjudged"  # a changed case with no A/B possible and no baseline here (fails under --ktune-strict)
MISSING = "missing"  # a record or baseline that the reference has is missing here (--ktune-base/--ktune-strict)


@dataclass(frozen=True)
class PerfResult:
    """One row of the summary table."""

    target: str
    case: str
    backend: str
    device: str
    time_us: float | None
    baseline_us: float | None
    ratio: float | None
    gbps: float | None
    copy_fraction: float | None
    verdict: str
    note: str = ""
    # For the JUnit and benchmark-JSON reports; empty where a result was made without them.
    target_id: str = ""
    params: Mapping[str, Value] = field(default_factory=dict)
    measurement: Measurement | None = None
    failure: str = ""  # a confirmed (or unconfirmable) regression: the message the item fails with
    rate: Rate | None = None  # GFLOP/s and the roofline, where the target declares flops=
    # What baseline_us is: "ab" (the baseline side of a same-run A/B), "recorded" (the time recorded on
    # this machine), "" (none). The ratio is always time_us / baseline_us.
    compared: str = ""


@dataclass(frozen=True)
class Rate:
    """A case's arithmetic rate, from ``flops=``: GFLOP/s, the fraction of the device's float32
    multiply-add peak (measured in the same run), and where it sits on the roofline."""

    gflops: float
    peak_fraction: float | None  # None where the backend cannot measure its peak
    intensity: float | None  # FLOP per byte moved; None without bytes_moved=
    bound: str | None  # "memory" or "compute": which side of the ridge (peak / copy bandwidth) it is on

    @classmethod
    def of(cls, flops: int, seconds: float, bytes_moved: int | None, peak: float | None,
           bandwidth: float | None) -> Rate:
        intensity = flops / bytes_moved if bytes_moved else None
        bound = None
        if intensity is not None and peak and bandwidth:
            bound = "compute" if intensity >= peak / bandwidth else "memory"
        return cls(gflops=flops / seconds / 1e9, peak_fraction=flops / seconds / peak if peak else None,
                   intensity=intensity, bound=bound)


@dataclass(frozen=True)
class Row:
    """A summary row being filled in; ``result`` completes it."""

    target: str
    case: str
    backend: str
    device: str
    time_us: float | None
    gbps: float | None
    copy_fraction: float | None
    baseline_us: float | None = None
    ratio: float | None = None
    target_id: str = ""
    params: Mapping[str, Value] = field(default_factory=dict)
    measurement: Measurement | None = None
    rate: Rate | None = None

    def result(self, *, verdict: str, note: str = "", baseline_us: float | None = None,
               ratio: float | None = None, failure: str = "", compared: str = "") -> PerfResult:
        return PerfResult(target=self.target, case=self.case, backend=self.backend, device=self.device,
                          time_us=self.time_us, gbps=self.gbps, copy_fraction=self.copy_fraction,
                          baseline_us=self.baseline_us if baseline_us is None else baseline_us,
                          ratio=self.ratio if ratio is None else ratio, verdict=verdict, note=note,
                          target_id=self.target_id, params=self.params, measurement=self.measurement,
                          failure=failure, rate=self.rate, compared=compared)


class Regression(Exception):
    """A confirmed regression; the message carries the numbers."""


@dataclass(frozen=True)
class GateSettings:
    """What the gate needs to know: the project root (for git), the threshold, the run's seed, and
    the ref to compare changed targets with (``--ktune-base``; None: their baselines)."""

    root: Path
    threshold: Threshold
    seed: int
    base: BaseRef | None = None


@dataclass(frozen=True)
class Item:
    """One case of one target, as the gate's items name it: where its kernels run, and its id."""

    target: Target
    case_index: int
    case_id: str
    key: Mapping[str, Any]
    target_id: str  # the target as the params file names it


class Gate:
    """Checks, times and judges cases against their baselines, through the measurement process."""

    def __init__(self, settings: GateSettings, measurer: Measurer, *, like: Gate | None = None) -> None:
        """``like``: another device's gate of the same run, whose unpacked commits this one shares."""
        self.settings = settings
        self.measurer = measurer
        # The baselines' commits, each unpacked at most once a run, by whichever device's thread asks first.
        self._snapshots: dict[str, Snapshot] = like._snapshots if like is not None else {}
        self._unpacking: threading.Lock = like._unpacking if like is not None else threading.Lock()

    def repro(self, seed: int) -> str:
        return f"rerun with --ktune-seed {self.settings.seed} to draw the same inputs (case seed {seed})"

    def case_ref(self, item: Item) -> CaseRef:
        """The case for the measurement process: the correctness item, the performance item and an A/B
        of one case draw their inputs from one seed, so that one draw and one reference serve all."""
        seed = case_seed(self.settings.seed, item.target, item.case_id, "inputs")
        return CaseRef(TargetRef.of(item.target), item.case_index, item.case_id, seed, self.repro(seed))

    def check(self, item: Item, configs: list[tuple[str, Mapping[str, Value]]]) -> list[str]:
        """Verify each configuration on the case's inputs; raises MismatchError (or another KtuneError)."""
        return self.measurer.check(self.case_ref(item), configs)

    def time(self, item: Item, params: Mapping[str, Value]) -> Row:
        """Verify and time the case with ``params``: a summary row without a verdict yet."""
        return self._row(item, params, self.measurer.time(self.case_ref(item), params))

    def _row(self, item: Item, params: Mapping[str, Value], m: Measurement) -> Row:
        args = item.target.case_args(item.target.cases[item.case_index])
        bytes_moved = item.target.bytes_for(args)
        gbps = bytes_moved / m.median / 1e9 if bytes_moved else None
        bandwidth = self.measurer.copy_bandwidth() if bytes_moved else None
        frac = gbps * 1e9 / bandwidth if gbps and bandwidth else None
        flops = item.target.flops_for(args)
        rate = Rate.of(flops, m.median, bytes_moved, self.measurer.peak_flops(), bandwidth) if flops else None
        device = self.measurer.device()
        return Row(target=item.target.name, case=item.case_id, backend=device.backend, device=device.name,
                   time_us=m.median * 1e6, gbps=gbps, copy_fraction=frac, target_id=item.target_id,
                   params=dict(params), measurement=m, rate=rate)

    def threshold_for(self, item: Item) -> Threshold:
        """The target's own threshold where it declares one, else the run's."""
        return item.target.threshold or self.settings.threshold

    def judge(self, item: Item, params: Mapping[str, Value], record: Record | None) -> PerfResult:
        """The verdict on one case. Where what runs differs from its reference (the baseline's program,
        or REF's under ``--ktune-base``), a same-run A/B against that reference decides, whatever the
        recorded time says; an unchanged case is only screened against the time recorded on this
        machine, so it is ok, faster, drift, or has no baseline here."""
        base = record.baseline if record else None
        backend = self.measurer.device().backend
        with tempfile.TemporaryDirectory(prefix="ktune-reference-") as scratch:
            try:
                ref = self._reference(item, params, base, backend, Path(scratch))
            except Unavailable as exc:
                return self._unavailable(item, params, base, exc)
            if ref is not None and ref.changed:
                return self._ab(item, params, ref)
        new = self.settings.base is not None and ref is None
        return self._screen(item, params, base, self.time(item, params), new=new)

    def _reference(self, item: Item, params: Mapping[str, Value], base: Baseline | None, backend: str,
                   scratch: Path) -> Reference | None:
        """The case's reference. Where the module that declares the target changed since the reference's
        commit (REF's, or the baseline's), the reference is that commit's whole target (``gate.snapshot``);
        else the current launcher with the reference's source and parameters."""
        ref = self.settings.base
        target = item.target
        if ref is not None:
            whole = self._whole(ref.snapshot, item, backend, always=target.in_memory(backend))
            key = item.key if whole is None else self._key_at(whole, item, ref.label)
            rec = ref.record(item.target_id, self.measurer.device().id, key)
            if whole is not None:
                old = rec.params if rec is not None else whole.target.default
                return of_whole_target(target, backend, whole, label=ref.label, params=params, old_params=old,
                                       scratch=scratch)
            return at_ref(target, backend, ref, ref_params=rec.params if rec else None, params=params,
                          scratch=scratch)
        if base is None:
            return None
        if base.commit:
            with self._unpacking:
                snap = self._snapshots.get(base.commit)
                if snap is None:
                    snap = self._snapshots[base.commit] = Snapshot(self.settings.root, base.commit,
                                                                   f"commit {base.commit[:12]}")
            text_changed = target.in_memory(backend) and base.source_hash != target.source_hash(backend)
            whole = self._whole(snap, item, backend, always=text_changed)
            if whole is not None:
                return of_whole_target(target, backend, whole, label=baseline_label(base), params=params,
                                       old_params=base.params, scratch=scratch, recorded=base)
        return of_baseline(target, backend, base, params=params, root=self.settings.root, scratch=scratch)

    @staticmethod
    def _whole(snap: Snapshot, item: Item, backend: str, *, always: bool) -> WholeTarget | None:
        """The commit's whole target where the target's module changed since it (or ``always``)."""
        if not (always or snap.launcher_changed(item.target)):
            return None
        return snap.whole_target(item.target, backend, item.target.cases[item.case_index])

    @staticmethod
    def _key_at(whole: WholeTarget, item: Item, label: str) -> Mapping[str, Any]:
        """The case's key as the commit's ``key`` function makes it (its params file records that key)."""
        try:
            return whole.target.case_key(item.target.cases[item.case_index])
        except KtuneError as exc:
            raise Unavailable(f"{label}'s key function fails on this case",
                              f"{label}'s {item.target.name} ({whole.module}) cannot key this case: "
                              f"{exc.message}") from None

    def _ab(self, item: Item, params: Mapping[str, Value], ref: Reference) -> PerfResult:
        """The changed case timed side by side with its reference: its verdict, the row's time the A
        side's and its reference the B side's."""
        threshold = self.threshold_for(item)
        r = self.measurer.ab(self.case_ref(item), params, ref.params, ref.source, stop_rule(threshold),
                             target_b=ref.target)
        a, b = r.a, r.b
        c = confirm(a, b, threshold)
        row = replace(self._row(item, params, a), baseline_us=b.median * 1e6, ratio=c.ratio)
        ab_text = (f"same-run A/B against {ref.label}: {seconds(a.median)} vs {seconds(b.median)}, "
                   f"x{c.ratio:.3f}, p={c.p_value:.2g} ({ab_stop_note(r)})")
        changed = "; ".join(ref.changes)
        if not c.confirmed:
            verdict = "faster" if faster(a, b, threshold) else "ok"
            return row.result(verdict=verdict, note=f"changed ({changed}); {ab_text}", compared="ab")
        accept = ("a slowdown the change means to make needs a looser threshold= on the target"
                  if self.settings.base is not None else
                  "accept the new time with --ktune-update-baseline")
        return row.result(verdict=REGRESSION, note=ab_text, compared="ab", failure=(
            f"{item.target.name}[{item.case_id}] on {row.device} regressed: {ab_text}, beyond the threshold "
            f"{threshold}. Changed since {ref.label}: {changed}. Fix the kernel or tune it; {accept}."))

    def _screen(self, item: Item, params: Mapping[str, Value], base: Baseline | None, row: Row, *,
                new: bool = False) -> PerfResult:
        """An unchanged case against the time recorded on this machine: ok, faster, drift (slower
        than recorded beyond noise: the machine, not the change), or no baseline here."""
        if base is None:
            note = (f"new since {self.settings.base.label}: nothing to compare with" if new and self.settings.base
                    else "no baseline recorded: run with --ktune-update-baseline to record one")
            return row.result(verdict=NO_BASELINE, note=note)
        device = self.measurer.device()
        timing = base.timings_on(device.machine).get(item.case_id)
        if timing is None:
            others = {m for m, case, _ in base.all_timings() if case == item.case_id}
            note = ("no baseline on this machine" + (f" (timings of {len(others)} other machine(s) are history "
                                                    "here)" if others else "")
                    + ": run with --ktune-update-baseline to record one")
            return row.result(verdict=NO_BASELINE, note=note)
        stale = source_changed(base, item.target, device.backend) or item.target.complete(base.params) != dict(params)
        if stale:  # unchanged since REF, but the baseline is of another version: its time says nothing
            return row.result(verdict=NO_BASELINE, note=(
                "the baseline was recorded on another version of the source or parameters: re-record it "
                "with --ktune-update-baseline"))
        m = row.measurement
        assert m is not None
        threshold = self.threshold_for(item)
        s = screen(m, timing.median_us * 1e-6, timing.ci_high_us * 1e-6, threshold)
        row = replace(row, baseline_us=timing.median_us, ratio=s.ratio)
        if s.suspect:
            return row.result(verdict=DRIFT, compared="recorded", note=(
                f"{seconds(m.median)} against {seconds(timing.median_us * 1e-6)} recorded on this machine "
                f"(x{s.ratio:.3f}), with the source and parameters of the baseline: the machine's state, not a "
                "change"))
        was_faster = s.ratio < 1 - threshold.fraction and m.ci[1] < timing.ci_low_us * 1e-6
        return row.result(verdict="faster" if was_faster else "ok", compared="recorded")

    def _unavailable(self, item: Item, params: Mapping[str, Value], base: Baseline | None,
                     exc: Unavailable) -> PerfResult:
        """A changed case whose reference git cannot give: screened against this machine's recorded
        time where there is one; a suspect slowdown then fails unconfirmed."""
        row = self.time(item, params)
        device = self.measurer.device()
        timing = base.timings_on(device.machine).get(item.case_id) if base else None
        m = row.measurement
        assert m is not None
        if timing is None:
            return row.result(verdict=UNJUDGED, note=f"changed, but {exc.note}: no A/B and no baseline here",
                              failure="")
        threshold = self.threshold_for(item)
        s = screen(m, timing.median_us * 1e-6, timing.ci_high_us * 1e-6, threshold)
        row = replace(row, baseline_us=timing.median_us, ratio=s.ratio)
        numbers = (f"{seconds(m.median)} against a baseline of {seconds(timing.median_us * 1e-6)} "
                   f"(x{s.ratio:.3f}, threshold {threshold})")
        if not s.suspect:
            return row.result(verdict="ok", note=f"changed, but {exc.note}: no A/B; screened only: {numbers}",
                              compared="recorded")
        return row.result(verdict=REGRESSION, note=f"unconfirmed: {exc.note}", compared="recorded", failure=(
            f"{item.target.name}[{item.case_id}] on {device.name}: {numbers}. {exc.why}, so the slowdown could not "
            "be confirmed A/B. Record baselines from committed sources, or run with --ktune-update-baseline if "
            "the slowdown is accepted."))


def ab_stop_note(r: ABResult) -> str:
    """How the A/B's sample ended, in the gate's words: ``stopped early after 6 pairs, certainly slower
    than the threshold allows``, or ``40 pairs, both medians precise``."""
    if r.stopped == SLOWER:
        return f"stopped early after {r.pairs} pairs, certainly slower than the threshold allows"
    if r.stopped == FASTER:
        return f"stopped early after {r.pairs} pairs, certainly within the threshold"
    return r.reason
