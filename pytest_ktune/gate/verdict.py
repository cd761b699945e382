"""The verdict of one performance item: timed, screened against its baseline, and a suspect slowdown
confirmed by timing old and new side by side in the same run before it fails.

``Gate.check`` verifies a case's configurations, ``Gate.time`` measures it with the parameters in
use, both in the measurement process (``measure.service``); ``Gate.judge`` compares the measurement
with the record's baseline and returns a ``PerfResult``. A confirmed regression is a result whose
verdict is ``REGRESSION`` and whose ``failure`` carries the message the item fails with.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_ktune.core import git
from pytest_ktune.core.includes import deps_hash, include_closure, include_name, pin_includes, source_hash
from pytest_ktune.core.space import Value
from pytest_ktune.core.store import Baseline, Record
from pytest_ktune.core.target import Target
from pytest_ktune.core.text import seconds
from pytest_ktune.gate.decision import Threshold, confirm, screen, stop_rule
from pytest_ktune.measure.ab import FASTER, SLOWER, ABResult
from pytest_ktune.measure.bench import Measurement
from pytest_ktune.measure.service import CaseRef, Measurer
from pytest_ktune.measure.verify import case_seed
from pytest_ktune.measure.worker import TargetRef

REGRESSION = "REGRESSION"


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
               ratio: float | None = None, failure: str = "") -> PerfResult:
        return PerfResult(target=self.target, case=self.case, backend=self.backend, device=self.device,
                          time_us=self.time_us, gbps=self.gbps, copy_fraction=self.copy_fraction,
                          baseline_us=self.baseline_us if baseline_us is None else baseline_us,
                          ratio=self.ratio if ratio is None else ratio, verdict=verdict, note=note,
                          target_id=self.target_id, params=self.params, measurement=self.measurement,
                          failure=failure, rate=self.rate)


class Regression(Exception):
    """A confirmed regression; the message carries the numbers."""


@dataclass(frozen=True)
class GateSettings:
    """What the gate needs to know: the project root (for git), the threshold, the run's seed."""

    root: Path
    threshold: Threshold
    seed: int


class _Unconfirmed(Exception):
    """The baseline's source cannot be had from git, so a suspect slowdown cannot be confirmed."""

    def __init__(self, note: str, why: str) -> None:
        super().__init__(why)
        self.note = note
        self.why = why


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

    def __init__(self, settings: GateSettings, measurer: Measurer) -> None:
        self.settings = settings
        self.measurer = measurer

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
        m = self.measurer.time(self.case_ref(item), params)
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

    def judge(self, item: Item, params: Mapping[str, Value], record: Record | None, row: Row) -> PerfResult:
        """The verdict on a timed row: no baseline, ok, faster, drift, or a regression confirmed A/B."""
        base = record.baseline if record else None
        timing = base.timings.get(item.case_id) if base else None
        m = row.measurement
        assert m is not None
        if base is None or timing is None:
            return row.result(verdict="no baseline",
                              note="no baseline recorded: run with --ktune-update-baseline to record one")
        threshold = self.threshold_for(item)
        s = screen(m, timing.median_us * 1e-6, timing.ci_high_us * 1e-6, threshold)
        row = replace(row, baseline_us=timing.median_us, ratio=s.ratio)
        if not s.suspect:
            faster = s.ratio < 1 - threshold.fraction and m.ci[1] < timing.ci_low_us * 1e-6
            return row.result(verdict="faster" if faster else "ok")
        return self._confirm(item, params, base, m, row)

    def _confirm(self, item: Item, params: Mapping[str, Value], base: Baseline, m: Measurement,
                 row: Row) -> PerfResult:
        threshold = self.threshold_for(item)
        target, backend = item.target, row.backend
        device = row.device
        current_hash = target.source_hash(backend)
        current_deps = target.deps_hash(backend)
        same_file = current_hash == base.source_hash
        same_includes = base.deps_hash in (None, current_deps)  # None: the baseline makes no claim
        same_source = same_file and same_includes
        numbers = (f"{seconds(m.median)} against a baseline of "
                   f"{seconds(base.timings[item.case_id].median_us * 1e-6)} "
                   f"(x{row.ratio:.3f}, threshold {threshold})")
        if same_source and dict(base.params) == dict(params):
            return row.result(verdict="drift", note=(
                f"{numbers}, but the source and parameters are those of the baseline: "
                "the machine differs from the one that recorded it, or is noisy"))
        with tempfile.TemporaryDirectory(prefix="ktune-baseline-") as scratch:
            try:
                old_source = None if same_source else self._baseline_source(
                    item, backend, base, Path(scratch), same_file=same_file, same_includes=same_includes)
            except _Unconfirmed as exc:
                return row.result(verdict=REGRESSION, note=f"unconfirmed: {exc.note}", failure=(
                    f"{target.name}[{item.case_id}] on {device}: {numbers}. {exc.why}, so the "
                    "slowdown could not be confirmed A/B. Record baselines from committed sources, or run "
                    "with --ktune-update-baseline if the slowdown is accepted."))
            r = self.measurer.ab(self.case_ref(item), params, base.params, old_source, stop_rule(threshold))
        c = confirm(r.a, r.b, threshold)
        ab_text = (f"same-run A/B: current {seconds(r.a.median)} vs the baseline's "
                   f"{'source and ' if not same_source else ''}parameters {seconds(r.b.median)}: "
                   f"x{c.ratio:.3f}, p={c.p_value:.2g} ({ab_stop_note(r)})")
        if not c.confirmed:
            return row.result(verdict="ok", note=f"screen flagged {numbers}; {ab_text}: not a regression")
        changed = []
        if not same_file:
            changed.append(f"source {base.source_hash} -> {current_hash}")
        if not same_includes:
            path = target.source_path(backend)
            names = ", ".join(include_name(path, p) for p in target.includes(backend))
            changed.append(f"included files{f' ({names})' if names else ''} {base.deps_hash} -> "
                           f"{current_deps or 'none'}")
        if dict(base.params) != dict(params):
            changed.append(f"parameters {dict(base.params)} -> {dict(params)}")
        return replace(row, ratio=c.ratio).result(verdict=REGRESSION, note=ab_text, failure=(
            f"{target.name}[{item.case_id}] on {device} regressed: {numbers}; confirmed by "
            f"{ab_text}. Changed since the baseline (commit {(base.commit or 'none')[:12]}): "
            f"{'; '.join(changed)}. Fix the kernel, tune it, or accept the new time with "
            "--ktune-update-baseline."))

    def _baseline_source(self, item: Item, backend: str, base: Baseline, scratch: Path, *, same_file: bool,
                         same_includes: bool) -> str:
        """The baseline's source, to compile for the A/B: the source file, from git at the baseline's
        commit where it changed (not ``same_file``), and where the files it includes changed too (not
        ``same_includes``), the baseline's copies of them, from git, written under ``scratch`` with the
        includes pointed at them. Raises _Unconfirmed where git cannot give them."""
        target = item.target
        root, commit = self.settings.root, base.commit
        path = target.source_path(backend)
        text = target.source_text(backend)
        if not same_file and target.in_memory(backend):
            raise _Unconfirmed("old source not in git",
                               f"The source is a ktune.Source held in Python ({target.file.name}) and changed since "
                               "the baseline; git holds files, not the texts a program makes")
        if not same_file:
            old = git.file_at(root, commit, path) if commit else None
            if old is None or source_hash(old) != base.source_hash:
                raise _Unconfirmed("old source not in git",
                                   "The source changed since the baseline, and git holds no copy of the "
                                   f"baseline's source at commit {commit or '(none recorded)'}")
            text = old
        if same_includes:
            return text
        not_in_git: list[Path] = []

        def read_old(p: Path) -> str | None:
            old = git.file_at(root, commit, p) if commit else None
            if old is None and p.is_file():
                not_in_git.append(p)
            return old

        headers = include_closure(path, text, read_old)
        if deps_hash(path, headers) != base.deps_hash:
            names = ", ".join(include_name(path, p) for p in not_in_git)
            what = f"header{'s' if len(not_in_git) > 1 else ''} {names}" if names else "headers"
            raise _Unconfirmed(f"old {what} not in git",
                               "The files the source includes changed since the baseline, and git holds "
                               f"no copy of the baseline's {what} at commit {commit or '(none recorded)'}")
        return pin_includes(path, text, headers, scratch)


def ab_stop_note(r: ABResult) -> str:
    """How the A/B's sample ended, in the gate's words: ``stopped early after 6 pairs, certainly slower
    than the threshold allows``, or ``40 pairs, both medians precise``."""
    if r.stopped == SLOWER:
        return f"stopped early after {r.pairs} pairs, certainly slower than the threshold allows"
    if r.stopped == FASTER:
        return f"stopped early after {r.pairs} pairs, certainly within the threshold"
    return r.reason
