"""One pytest run of checks, timings and tunes over targets: what the plugin's items call.

The session owns the measurement process (``measure.service``: every kernel of a correctness or
performance item runs there, so a crash fails one item), the params file as it was at the start,
the results of the items so far, and the baselines queued for writing. The gate's verdicts come
from ``gate.verdict``; tuning goes through the one orchestration of ``run.tuning``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from pytest_ktune import backends
from pytest_ktune.backends.base import DeviceInfo
from pytest_ktune.core.errors import BackendUnavailable, KtuneError, StoreError
from pytest_ktune.core.space import Value
from pytest_ktune.core.store import Record, Store, Timing, merge_baselines, new_baseline, target_id
from pytest_ktune.core.target import TRITON, Target
from pytest_ktune.gate.reference import BaseRef, missing_at_head
from pytest_ktune.gate.verdict import (
    MISSING,
    NO_BASELINE,
    REGRESSION,
    UNJUDGED,
    Gate,
    GateSettings,
    Item,
    PerfResult,
    Regression,
)
from pytest_ktune.measure.bench import Measurement
from pytest_ktune.measure.service import MeasureService, ServiceSpec
from pytest_ktune.report.results import ItemOutcome, RunResults
from pytest_ktune.run.devices import Dispatcher, Planned, expected_times
from pytest_ktune.run.lanes import Companion, Lane, second_backend, start_lanes
from pytest_ktune.run.settings import Settings
from pytest_ktune.run.tuning import Tuning
from pytest_ktune.tuner.outcome import TuneOutcome
from pytest_ktune.writeback.change import Change
from pytest_ktune.writeback.deliver import deliver_change, git_mode


class Skip(Exception):
    """The item cannot run here; the message says why and how to fix that."""


class Session:
    """Checks and times targets on one backend (on one device, or on each of --ktune-devices), tunes
    them, and collects baseline updates."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        devices = settings.devices
        self._spec = ServiceSpec(backend=settings.backend, factory=backends.factory_ref(settings.extensions.backend),
                                 cache_root=str(settings.scratch / "cache"), bench=settings.bench,
                                 device_index=devices[0] if isinstance(devices, tuple) else
                                 0 if devices == "all" else None)
        self.service = MeasureService(self._spec, item_timeout_s=settings.item_timeout_s)
        self.lanes: list[Lane] = []  # --ktune-devices: every device's lane, the first one's service the above
        self.dispatch: Dispatcher[Lane] | None = None
        # The run's performance and correctness items, planned at the first of them (--ktune-devices).
        self._perf_cases: list[tuple[Target, int]] = []
        self._check_cases: list[tuple[Target, int]] = []
        self._lock = threading.Lock()  # the lanes' threads queue baselines and results through it
        # --ktune-base: REF resolved once, before any item runs (a ref git does not know is a usage error)
        self.base = BaseRef.load(settings.root, settings.base, settings.params_path) if settings.base else None
        self.gate = Gate(GateSettings(root=settings.root, threshold=settings.threshold, seed=settings.seed,
                                      base=self.base), self.service)
        self.results: list[PerfResult] = []
        self.outcomes: dict[str, ItemOutcome] = {}  # by node id, in the order the items ran
        self.updates: dict[tuple[str, str, str], Record] = {}
        self._tuned: set[tuple[str, str, str]] = set()
        self._recorded_on: dict[str, bool] = {}  # by machine identity: the params file holds its baselines
        self._device: DeviceInfo | None = None
        self._backend_error: BackendUnavailable | None = None
        self.tuning: Tuning | None = None  # made with the device, by the first tune item
        self.companion: Companion | None = None  # the second backend's process (``run.lanes``), where one runs
        try:
            self.store: Store | None = Store.load(settings.params_path)
            self.store_error: StoreError | None = None
        except StoreError as exc:
            self.store = None
            self.store_error = exc
        self.params_missing = not settings.params_path.exists()
        self._closed_check()

    def _closed_check(self) -> None:
        """Fail closed before any item runs: under --ktune-strict, or --ktune-base where REF has a params
        file, the params file named must exist (a pull request that deletes it must not pass)."""
        s = self.settings
        if not self.params_missing or s.update_baseline or s.tune is not None:
            return
        if self.base is not None and self.base.store is not None:
            raise KtuneError(f"the params file {s.params_path} does not exist, but {self.base.label} has one",
                             hint=f"restore it (`git checkout {self.base.name} -- {s.params_path.name}`), or point "
                                  "--ktune-params at the file this project uses")
        if s.strict:
            raise KtuneError(f"--ktune-strict: the params file {s.params_path} does not exist",
                             hint="record baselines with `pytest --ktune --ktune-update-baseline` and commit the "
                                  "file, point --ktune-params at it, or drop --ktune-strict")

    # -- the device ------------------------------------------------------
    def start(self) -> DeviceInfo:
        """Start the measurement process: the device it found; BackendUnavailable, saying why and what
        to install, when it cannot start."""
        if self._device is None and self._backend_error is None:
            try:
                self._device = self.service.device()
            except BackendUnavailable as exc:
                self._backend_error = exc
        if self._backend_error is not None:
            raise self._backend_error
        assert self._device is not None
        if self._device.interpreted and self.settings.update_baseline:
            raise KtuneError(f"--ktune-update-baseline: {self._device.name} runs the kernels in an interpreter on the "
                             "CPU (TRITON_INTERPRET=1), so its timings are not a GPU's, and they are never recorded "
                             "as baselines", hint="record baselines on a GPU (unset TRITON_INTERPRET), or run "
                                                  "without --ktune-update-baseline")
        if self.settings.devices is not None and not self.lanes:
            self._start_lanes(self._device)
        return self._device

    def _start_lanes(self, first: DeviceInfo) -> None:
        devices = self.settings.devices
        indices = tuple(range(self.service.device_count())) if devices == "all" else devices
        assert isinstance(indices, tuple)
        self.lanes = start_lanes(self.service, first, indices, self.gate, item_timeout_s=self.settings.item_timeout_s)
        self.dispatch = Dispatcher(self.lanes)

    def expect(self, perf: Sequence[tuple[Target, int]], checks: Sequence[tuple[Target, int]] = ()) -> None:
        """The run's performance and correctness items (after collection): over several devices, the first
        of them to run plans them all (``_plan``), so that every device works while pytest waits on one."""
        self._perf_cases = [(t, i) for t, i in perf if self._second_of(t) is None]
        self._check_cases = [(t, i) for t, i in checks if self._second_of(t) is None]
        if len(self._perf_cases) + len(self._check_cases) < len(perf) + len(checks):  # some run on the second
            self._companion().start()  # in the background: ready by the time the first of them runs

    def _second_of(self, target: Target) -> str | None:
        """The run's second backend, where ``target`` runs there (``run.lanes.second_backend``)."""
        return second_backend(self._device.backend, target) if self._device is not None else None

    def _companion(self) -> Companion:
        if self.companion is None:
            self.companion = Companion(self._spec, self.gate, item_timeout_s=self.settings.item_timeout_s)
        return self.companion

    def _second_lane(self, target: Target, *, timing: bool = True) -> Lane | None:
        """The second backend's lane where ``target`` runs there; Skip with why where that cannot start and
        the run skips what cannot run (else the item's error: a gate fails closed)."""
        if self._second_of(target) is None:
            return None
        try:
            return self._companion().lane(update_baseline=timing and self.settings.update_baseline)
        except BackendUnavailable as err:
            if self.settings.skip_unavailable:
                raise Skip(err.render()) from None
            raise

    def backend_for(self, target: Target) -> str:
        """The backend ``target``'s items run on in this run: the run's, or its second's."""
        return self._second_of(target) or self.backend_name

    def device(self) -> DeviceInfo:
        """The device, or Skip with how to get it (where skipping was allowed at the start)."""
        try:
            return self.start()
        except BackendUnavailable as err:
            raise Skip(f"{err.message}; next step: {err.hint}" if err.hint else err.message) from None

    @property
    def backend_name(self) -> str:
        """The backend's name (the language of the sources it compiles: ``cuda``, ``opencl``); where it
        cannot start, the name it was asked for (``auto`` resolved)."""
        try:
            return self.device().backend
        except Skip:
            return backends.resolve(self.settings.backend)

    @property
    def device_name(self) -> str:
        """The device's name once the measurement process has started; '' before, or where it could not."""
        if len(self.lanes) > 1:
            return ", ".join(lane.label for lane in self.lanes)
        return self._device.name if self._device is not None else ""

    # -- lookups ---------------------------------------------------------
    def target_id(self, target: Target) -> str:
        return target_id(target, self.settings.root)

    def record(self, target: Target, device: DeviceInfo, key: Mapping[str, Any]) -> Record | None:
        if self.store is None:
            return None
        return self.store.find(self.target_id(target), device.id, key)

    def params(self, target: Target, device: DeviceInfo, key: Mapping[str, Any]) -> dict[str, Value]:
        rec = self.record(target, device, key)
        return target.complete(rec.params) if rec else dict(target.default)

    def _prepare(self, target: Target, case_index: int, device: DeviceInfo) -> Item:
        """The item of one case, with the target as it runs on the device's backend."""
        case = target.cases[case_index]
        if not case.runs_on(device.backend):
            raise Skip(f"case declared for {', '.join(case.backends or ())} only, not {device.backend}")
        if device.backend not in target.sources:
            if set(target.sources) == {TRITON}:
                raise Skip(f"{target.name} is a Triton target (no {device.backend} source): it runs with "
                           "--ktune-backend triton, or in a cuda run")
            raise Skip(f"{target.name} has no {device.backend} source; add one to sources= to run it here")
        target = target.for_backend(device.backend)
        return Item(target=target, case_index=case_index, case_id=target.case_id(case), key=target.case_key(case),
                    target_id=self.target_id(target))

    def _lane(self) -> Lane:
        """The one device's lane, where the run has one device."""
        device = self.device()
        return self.lanes[0] if self.lanes else Lane(0, self.service, device, device.name, self.gate)

    # -- correctness -----------------------------------------------------
    def check(self, target: Target, case_index: int) -> list[str]:
        """Verify the configurations in use (recorded, and the default) on the case's inputs.

        Returns notes for the report; raises MismatchError, CompileError, LaunchError, SpaceError,
        or ItemCrash (the kernel crashed or hung the measurement process) on failure.
        """
        second = self._second_lane(target, timing=False)
        if second is not None:
            return self._check_on(second, target, case_index)
        lane = self._lane()
        if self.dispatch is None:
            return self._check_on(lane, target, case_index)
        self._plan_expected()
        key = self._case_key(target, case_index, "check")
        notes: list[str] = self.dispatch.result(key) if self.dispatch.planned(key) else \
            self.dispatch.now(lambda free: self._check_on(free, target, case_index))
        return notes

    def _check_on(self, lane: Lane, target: Target, case_index: int) -> list[str]:
        device = lane.device
        item = self._prepare(target, case_index, device)
        target = item.target
        params = self.params(target, device, item.key)
        default = dict(target.default)
        configs: list[tuple[str, Mapping[str, Value]]] = [("default", default)]
        if params != default:
            configs.insert(0, ("recorded", params))
        notes = lane.gate.check(item, configs)
        if self.store_error is not None:
            notes.append(f"params file unreadable, checked the default: {self.store_error.message}")
        return notes

    # -- performance -----------------------------------------------------
    def perf(self, target: Target, case_index: int) -> PerfResult:
        """Time the case, compare with its baseline, and confirm a regression by A/B before failing."""
        second = self._second_lane(target)
        lane = second or self._lane()
        if self.dispatch is None or second is not None:
            result = self._perf_on(lane, target, case_index)
            if second is not None and self.companion is not None:
                self.companion.ran += 1
        else:
            self._plan_expected()
            if not self.dispatch.planned(self._case_key(target, case_index)):
                self._plan([(target, case_index)], [])
            result = self.dispatch.result(self._case_key(target, case_index))
        with self._lock:
            self.results.append(result)
        if result.failure:
            raise Regression(result.failure)
        return result

    def _case_key(self, target: Target, case_index: int, kind: str = "perf") -> tuple[str, int, str]:
        return (self.target_id(target), case_index, kind)

    def _plan_expected(self) -> None:
        """At the first item to run, plan every item the collection expects."""
        if self._perf_cases or self._check_cases:
            self._plan(self._perf_cases, self._check_cases)

    def _plan(self, cases: Sequence[tuple[Target, int]], checks: Sequence[tuple[Target, int]]) -> None:
        """Spread the performance items over the devices, by their expected times from this machine's
        baselines (the median times the samples; equal where none is recorded); the correctness items
        fill the gaps, each on whichever device frees first (``run.devices``)."""
        assert self.dispatch is not None
        lane = self.lanes[0]
        known: list[float | None] = []
        for target, index in cases:
            try:
                item = self._prepare(target, index, lane.device)
            except Skip:
                known.append(None)
                continue
            rec = self.record(item.target, lane.device, item.key)
            timing = rec.baseline.timings_on(lane.device.machine).get(item.case_id) if rec and rec.baseline else None
            known.append(timing.median_us * timing.samples if timing else None)
        self._perf_cases, self._check_cases = [], []
        self.dispatch.plan([Planned(self._case_key(t, i), expected, partial(self._perf_on, target=t, case_index=i))
                            for (t, i), expected in zip(cases, expected_times(known), strict=True)],
                           fill=[Planned(self._case_key(t, i, "check"), 0.0,
                                         partial(self._check_on, target=t, case_index=i)) for t, i in checks])

    def _perf_on(self, lane: Lane, target: Target, case_index: int) -> PerfResult:
        """The case's performance verdict, measured on ``lane``'s device (the row named by its label)."""
        device = lane.device
        item = self._prepare(target, case_index, device)
        target = item.target
        if self.store_error is not None:
            raise self.store_error
        params = self.params(target, device, item.key)
        target.check_config(params, item.key, "recorded configuration")
        rec = self.record(target, device, item.key)
        if self.settings.update_baseline:
            row = lane.gate.time(item, params)
            assert row.measurement is not None
            self._queue_baseline(item, device, params, row.measurement, row.gbps)
            timing = rec.baseline.timings_on(device.machine).get(item.case_id) if rec and rec.baseline else None
            note = "baseline recorded" if timing is None else f"baseline updated (was {timing.median_us:.2f} µs)"
            result = row.result(baseline_us=timing.median_us if timing else None,
                                ratio=row.time_us / timing.median_us if timing and row.time_us else None,
                                verdict="recorded", note=note)
        else:
            result = self._fail_closed(item, device, lane.gate.judge(item, params, rec))
        return replace(result, device=lane.label) if len(self.lanes) > 1 else result

    def _fail_closed(self, item: Item, device: DeviceInfo, result: PerfResult) -> PerfResult:
        """A verdict with nothing to stand on is an error where the run asks for that: under
        --ktune-base, a record or baseline REF has that is missing here; under --ktune-strict, a case
        with no baseline on a machine that has baselines, or a changed case that could not be A/B'd."""
        where = f"{item.target.name}[{item.case_id}] on {device.name}"
        if self.base is not None:
            missing = missing_at_head(self.base, self.store, target=item.target_id, key=item.key,
                                      machine=device.machine, case_id=item.case_id)
            if missing:
                return replace(result, verdict=MISSING, failure=(
                    f"{where}: {self.base.label}'s params file has {' and '.join(missing)}, which "
                    f"{self.settings.params_path.name} here lacks. Restore them (`git checkout {self.base.name} -- "
                    f"{self.settings.params_path.name}`, then re-record what changed with --ktune-update-baseline)"))
        if not self.settings.strict:
            return result
        if result.verdict == UNJUDGED:
            fix = (f"make {self.base.name}'s version of it loadable here, or name another --ktune-base"
                   if self.base is not None else
                   "commit the source the baseline was recorded from, or run with --ktune-base REF")
            return replace(result, failure=(
                f"{where}: {result.note}. --ktune-strict fails a changed case that nothing can judge: {fix}"))
        if result.verdict == NO_BASELINE and self.base is None and self._machine_recorded(device):
            return replace(result, verdict=MISSING, failure=(
                f"{where}: no baseline of this case on this machine, which has baselines of other cases. "
                "--ktune-strict fails it: record it with --ktune-update-baseline and commit the params file"))
        return result

    def _machine_recorded(self, device: DeviceInfo) -> bool:
        """Whether the params file holds any baseline timing measured on this machine (read once per
        machine and run: the params file the gate reads does not change during it)."""
        if device.machine not in self._recorded_on:
            self._recorded_on[device.machine] = self.store is not None and any(
                r.baseline is not None and r.baseline.timings_on(device.machine) for r in self.store.records.values())
        return self._recorded_on[device.machine]

    def _queue_baseline(self, item: Item, device: DeviceInfo, params: Mapping[str, Value], m: Measurement,
                        gbps: float | None) -> None:
        with self._lock:  # two devices of one identity update one record
            self._queue_locked(item, device, params, m, gbps)

    def _queue_locked(self, item: Item, device: DeviceInfo, params: Mapping[str, Value], m: Measurement,
                      gbps: float | None) -> None:
        target = item.target
        timing = Timing.of(m.median, m.iqr, m.ci, len(m.samples), gbps)
        rec = Record(target=item.target_id, device=device.id, key=dict(item.key), params=dict(params))
        prev = self.updates.get(rec.ident) or (self.store.records.get(rec.ident) if self.store else None)
        baseline = new_baseline(self.settings.root, target, device.backend, params, {item.case_id: timing},
                                machine=device.machine)
        # Timings kept from the previous baseline come under this one's claim about the source and the
        # included files, so they are kept only where that claim is theirs too (merge_baselines).
        baseline = merge_baselines(prev.baseline if prev else None, baseline)
        self.updates[rec.ident] = replace(rec, baseline=baseline, tuned=prev.tuned if prev else None)

    # -- tuning ----------------------------------------------------------
    def tune(self, target: Target, key: dict[str, Any], indices: tuple[int, ...]) -> TuneOutcome:
        """Tune one key of a target, where the run's tuning chooses it (``run.tuning.Tuning.choose``)."""
        device = self.device()
        if (other := self._second_of(target)) is not None:
            raise Skip(f"{target.name} has a {other} source only: a {device.backend} run gates it but tunes only "
                       f"{device.backend} targets; tune it with --ktune-backend {other}")
        if self.tuning is None:
            self.tuning = Tuning(self.settings, backend=device.backend, device=device,
                                 devices=tuple(lane.index for lane in self.lanes) if self.lanes else None)
        case_ids = {target.case_id(target.cases[i]) for i in indices}
        regressed = any(r.target == target.name and r.case in case_ids and r.verdict == REGRESSION
                        for r in self.results)
        choice = self.tuning.choose(target, key, regressed=regressed)
        if not choice.tune:
            raise Skip(choice.why + (" and no regression in this run" if choice.rule == "current" else ""))
        return self.tuning.tune(target, key, indices)

    # -- end -------------------------------------------------------------
    def results_for_reports(self) -> RunResults:
        """What the run produced so far, frozen for the JUnit and benchmark-JSON reports."""
        tunes = tuple(self.tuning.outcomes) if self.tuning else ()
        return RunResults(root=self.settings.root, backend=self.backend_name, device=self.device_name,
                          outcomes=tuple(self.outcomes.values()), results=tuple(self.results), tunes=tunes,
                          notices=tuple(self.notices()))

    def notices(self) -> list[str]:
        """What the summary says once about the run: what changed cases were compared with, and a params
        file that does not exist."""
        out: list[str] = []
        if self.companion is not None and (line := self.companion.notice()):
            out.append(line)
        if self._device is not None and self._device.interpreted and self.results:
            out.append(f"{self._device.name}: the kernels ran in Triton's interpreter (TRITON_INTERPRET=1), so these "
                       "timings are the interpreter's on the CPU, not GPU timings (--ktune-update-baseline refuses "
                       "to record them)")
        if self.dispatch is not None:
            out.extend(f"device {self.lanes[pos].label} (index {self.lanes[pos].index}) failed, and its remaining "
                       f"items moved to the other devices: {why.splitlines()[0]}" for pos, why in self.dispatch.retired)
        if self.params_missing and self.results and not self.settings.update_baseline:
            out.append(f"the params file {self.settings.params_path} does not exist: no case had a baseline to be "
                       "compared with (record them with --ktune-update-baseline; --ktune-strict makes this an "
                       "error)")
        if self.base is not None and self.results:
            ab = sum(1 for r in self.results if r.compared == "ab")
            out.append(f"--ktune-base {self.base.label}: {ab} case(s) of targets changed since then timed A/B "
                       f"against it in this run; {len(self.results) - ab} unchanged")
        return out

    def compiler_output(self) -> dict[str, list[str]]:
        """The compiler's messages of this run's builds, by target (kept by the measurement process)."""
        out = self.companion.compiler_output() if self.companion is not None else {}
        if self._device is None:
            return out
        try:
            return {**out, **self.service.compiler_output()}
        except KtuneError:
            return out

    def finish(self) -> str | None:
        """Write queued baselines and deliver tuned winners; returns lines for the terminal, or None."""
        tuned = None
        if self.tuning is not None:
            self._tuned = self.tuning.delivers()  # their records carry their own baselines
            tuned = self.tuning.finish(self.service.copy_bandwidth)
        lines = [line for line in (self._finish_baselines(), tuned) if line]
        return "\nktune: ".join(lines) or None

    def close(self) -> None:
        """Stop the measurement processes."""
        if self.dispatch is not None:
            self.dispatch.close()
        for lane in self.lanes[1:]:
            lane.service.close()
        if self.companion is not None:
            self.companion.close()
        self.service.close()

    def _finish_baselines(self) -> str | None:
        if not self.updates:
            return None
        if self.store is None:
            return f"baselines NOT written: {self.store_error.render() if self.store_error else ''}"
        updates = [r for ident, r in self.updates.items() if ident not in self._tuned]
        n = len(updates)
        if git_mode(self.settings.write_mode):
            return self._deliver_baselines(updates)
        try:
            self.store.save(updates)
        except KtuneError as exc:
            return f"baselines NOT written: {exc.render()}"
        self.updates = {}
        return f"wrote {n} baseline record(s) to {self.settings.params_path}"

    def _deliver_baselines(self, updates: list[Record]) -> str:
        """Re-recorded baselines as a patch, a commit or a pull request (``--ktune-write``), the
        checkout untouched: how the scheduled workflow refreshes stale baselines on main."""
        try:
            merged = Store.load(self.settings.params_path)
            rel = self.settings.params_path.resolve().relative_to(self.settings.root.resolve()).as_posix()
        except KtuneError as exc:
            return f"baselines NOT written: {exc.render()}"
        except ValueError:
            return f"baselines NOT written: the params file is outside the project root {self.settings.root}"
        for r in updates:
            merged.records[r.ident] = r
        device = self.device_name or self.backend_name
        targets = tuple(sorted({r.target for r in updates}))
        change = Change(files={rel: merged.render()}, title=f"ktune: baselines re-recorded on {device}",
                        body_markdown=(f"pytest-ktune re-recorded {len(updates)} baseline record(s) on **{device}** "
                                       f"(machine identity `{self._device.machine if self._device else device}`); "
                                       "the parameters are unchanged.\n\nReproduce with:\n\n```sh\n"
                                       f"{self.settings.command}\n```\n"),
                        targets=targets, device=device)
        self.updates = {}
        return f"baselines: {deliver_change(self.settings.write_mode, self.settings.root, change)}"

