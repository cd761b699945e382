"""Whether a tune's best replaces the parameters in use, and the record it leaves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pytest_ktune.core.case import Case
from pytest_ktune.core.space import Value
from pytest_ktune.core.store import Record, Timing, Tuned, new_baseline, source_changed
from pytest_ktune.core.target import Target
from pytest_ktune.core.verified import how_verified, verified_cover
from pytest_ktune.measure.ab import ALPHA, FASTER, SLOWER, Stop
from pytest_ktune.measure.bench import mann_whitney_greater
from pytest_ktune.measure.worker import ABOutcome, CaseTime
from pytest_ktune.tuner.outcome import CaseChange
from pytest_ktune.tuner.settings import TuneContext

MIN_GAIN = 0.01  # a winner must be at least 1 % faster in total, and significantly so

# The A/B of a case may end as soon as the candidate (B) is certainly more than MIN_GAIN slower than the
# parameters in use (A): a certain loser. Never on a gain: a winner's A/B timings become its baseline,
# which wants the whole sample.
AB_STOP = Stop(above=None, below=1 / (1 + MIN_GAIN), alpha=ALPHA)


def case_timing(target: Target, case: Case, t: CaseTime) -> Timing:
    moved = target.bytes_for(target.case_args(case))
    return Timing.of(t.median_s, t.iqr_s, t.ci, len(t.samples), moved / t.median_s / 1e9 if moved else None)


@dataclass(frozen=True)
class SideBySide:
    """One case of an A/B: the samples and the median of the parameters in use (A) and of the candidate (B)."""

    case_id: str
    a_samples: Sequence[float]
    a_median: float
    b_samples: Sequence[float]
    b_median: float


@dataclass(frozen=True)
class Weighed:
    """What the acceptance rule says of a candidate (B) timed side by side with the parameters in use (A)."""

    slower: tuple[str, ...]  # the cases where B is certainly slower, by more than MIN_GAIN
    faster: tuple[str, ...]  # the cases where B is certainly faster
    ratio: float  # B's total time over A's

    @property
    def accepted(self) -> bool:
        """B replaces A: slower on no case, certainly faster on one at least, and MIN_GAIN faster in total."""
        return not self.slower and bool(self.faster) and self.ratio <= 1 - MIN_GAIN


def weigh(cases: Sequence[SideBySide], a_total: float, b_total: float) -> Weighed:
    """The one acceptance rule of an A/B, for the tuner's winner and the agent's template alike: each case
    tested both ways at ALPHA, and the totals (``b_total / a_total``) against MIN_GAIN."""
    slower = tuple(c.case_id for c in cases if mann_whitney_greater(c.b_samples, c.a_samples) < ALPHA
                   and c.b_median > c.a_median * (1 + MIN_GAIN))
    faster = tuple(c.case_id for c in cases if mann_whitney_greater(c.a_samples, c.b_samples) < ALPHA)
    return Weighed(slower=slower, faster=faster, ratio=b_total / a_total)


def decide(ab: ABOutcome) -> tuple[bool, str]:
    """Whether the candidate (B) beats the current parameters (A) beyond noise, and why."""
    if ab.status != "ok":
        return False, f"the A/B check failed ({ab.reason}); the current parameters stay"
    cur = sum(t.median_s for t in ab.current)
    cand = sum(t.median_s for t in ab.candidate)
    w = weigh([SideBySide(a.case_id, a.samples, a.median_s, b.samples, b.median_s)
               for a, b in zip(ab.current, ab.candidate, strict=True)], cur, cand)
    if w.slower:
        early = sum(1 for how in ab.stopped if how in (SLOWER, FASTER))
        how = f" (stopped early on {early} of {len(ab.stopped)} cases)" if early else ""
        return False, f"the best found is slower on {', '.join(w.slower)} in same-run A/B{how}; kept the current"
    if not w.accepted:
        return False, (f"the best found is not faster beyond noise in same-run A/B (x{cur / cand:.3f}); "
                       "kept the current")
    return True, f"x{cur / cand:.3f} faster than the current parameters in same-run A/B"


@dataclass(frozen=True)
class Finished:
    """What a finished tune records in the params file."""

    tid: str
    device: str
    key: dict[str, Any]
    cases: tuple[int, ...]
    record: Record | None
    current: Mapping[str, Value]
    best: Mapping[str, Value]
    accepted: bool
    ab: ABOutcome | None
    tuned: Tuned
    machine: str = ""  # the device's identity, for the timings of a new baseline (DeviceInfo.machine)
    interpreted: bool = False  # timed in an interpreter (Triton's): its timings never become a baseline


def baseline_is_stale(record: Record | None, target: Target, backend: str) -> bool:
    """Whether the record's baseline was measured on another version of the target's source."""
    return (record is not None and record.baseline is not None
            and source_changed(record.baseline, target, backend))


def new_record(ctx: TuneContext, target: Target, w: Finished) -> tuple[Record, tuple[CaseChange, ...]]:
    """The params-file record a finished tune leaves, and the per-case before/after of an accepted one.

    An accepted winner gets a baseline measured in the A/B run; a kept result only updates ``tuned``,
    unless its baseline was measured on another version of the source: then the A/B run's timings of
    the kept parameters, on the source as it is now, become the baseline. An interpreter's timings
    (``DeviceInfo.interpreted``) become no baseline: its record holds the parameters and ``tuned`` only.
    """
    if w.accepted and w.ab is not None:
        cases = [target.cases[i] for i in w.cases]
        timings = {t.case_id: case_timing(target, c, t) for c, t in zip(cases, w.ab.candidate, strict=True)}
        baseline = new_baseline(ctx.root, target, ctx.backend, w.best, timings, machine=w.machine or w.device)
        changes = tuple(CaseChange(case_id=a.case_id, before_s=a.median_s, after_s=b.median_s,
                                   bytes_moved=target.bytes_for(target.case_args(c)))
                        for c, a, b in zip(cases, w.ab.current, w.ab.candidate, strict=True))
        return Record(target=w.tid, device=w.device, key=w.key, params=dict(w.best),
                      baseline=None if w.interpreted else baseline,
                      tuned=_with_verified(w.tuned, target, w.best, w.cases)), changes
    # w.current is the record's parameters completed (Target.complete): a kept record is written whole.
    base = (replace(w.record, params=dict(w.current)) if w.record is not None
            else Record(target=w.tid, device=w.device, key=w.key, params=dict(w.current)))
    if baseline_is_stale(base, target, ctx.backend) and w.ab is not None and w.ab.status == "ok" \
            and not w.interpreted:
        cases = [target.cases[i] for i in w.cases]
        timings = {t.case_id: case_timing(target, c, t) for c, t in zip(cases, w.ab.current, strict=True)}
        fresh = new_baseline(ctx.root, target, ctx.backend, base.params, timings, machine=w.machine or w.device)
        base = replace(base, baseline=fresh)
    return replace(base, tuned=_with_verified(w.tuned, target, base.params, w.cases)), ()


def _with_verified(tuned: Tuned, target: Target, params: Mapping[str, Value], cases: Sequence[int]) -> Tuned:
    """``tuned``, saying how ``params`` were verified where the target is a generated template."""
    ids = [target.case_id(target.cases[i]) for i in cases]
    return replace(tuned, verified=how_verified(verified_cover(target), params, ids))
