"""One run of checks and timings over targets: what the pytest items and the CLI call."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from . import _git
from ._bench import BenchConfig, Measurement, measure, measure_ab
from ._errors import BackendUnavailable, KtuneError, StoreError
from ._evaluate import Job, timing_sets, verify_once
from ._gate import Confirmation, Threshold, confirm, screen
from ._runtime import CACHE
from ._space import Value
from ._store import Baseline, Record, Store, Timing, new_baseline, target_id
from ._target import Case, Target, deps_hash, include_closure, include_name, pin_includes, source_hash
from ._verify import case_seed

if TYPE_CHECKING:
    from ._tuner import TuneOutcome, TuneSettings
from .backends import Backend, Launch, create, resolve


@dataclass(frozen=True)
class Settings:
    """Everything a run needs to know, parsed once from the command line or the CLI."""

    root: Path
    params_path: Path
    backend: str = "auto"
    threshold: Threshold = field(default_factory=lambda: Threshold.parse("median:5%"))
    update_baseline: bool = False
    seed: int = 0
    bench: BenchConfig | None = None
    tune: TuneSettings | None = None
    autotune: bool = False
    write_mode: str = "none"
    command: str = "pytest --ktune --ktune-tune"
    agent: Any = None  # an agent.AgentSettings under --ktune-agent (its model None: the rule-based templater)

    @property
    def scratch(self) -> Path:
        return self.root / ".ktune"


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


@dataclass(frozen=True)
class ItemOutcome:
    """How one pytest-ktune item ended, for the JUnit report: one per correctness, performance or tune item."""

    nodeid: str
    check: str  # "correct", "perf", "tune", or "broken" for a case that could not be collected
    target: str  # the target's id in the params file: its file relative to the root, and its name
    name: str  # the target's name
    label: str  # the case id, the tuning key's label, or the broken item's name
    outcome: str  # "passed", "failed", "skipped" or "error" (a failure outside the test itself)
    duration_s: float = 0.0
    message: str = ""
    key: Mapping[str, Any] | None = None  # tune items: the key


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

    def result(self, *, verdict: str, note: str = "", baseline_us: float | None = None,
               ratio: float | None = None) -> PerfResult:
        return PerfResult(target=self.target, case=self.case, backend=self.backend, device=self.device,
                          time_us=self.time_us, gbps=self.gbps, copy_fraction=self.copy_fraction,
                          baseline_us=self.baseline_us if baseline_us is None else baseline_us,
                          ratio=self.ratio if ratio is None else ratio, verdict=verdict, note=note,
                          target_id=self.target_id, params=self.params, measurement=self.measurement)


class Skip(Exception):
    """The item cannot run here; the message says why and how to fix that."""


class Regression(Exception):
    """A confirmed regression; the message carries the numbers."""


def _fmt_us(s: float) -> str:
    return f"{s * 1e6:.2f} µs" if s < 1e-3 else f"{s * 1e3:.3f} ms"


class Session:
    """Checks and times targets on one backend, and collects baseline updates."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.results: list[PerfResult] = []
        self.tunes: list[TuneOutcome] = []
        self.agents: dict[str, Any] = {}  # target id -> the agent's AgentResult (--ktune-agent)
        self.outcomes: dict[str, ItemOutcome] = {}  # by node id, in the order the items ran
        self.updates: dict[tuple[str, str, str], Record] = {}
        self._tuned: set[tuple[str, str, str]] = set()
        self._backend: Backend | None = None
        self._backend_error: BackendUnavailable | None = None
        try:
            self.store: Store | None = Store.load(settings.params_path)
            self.store_error: StoreError | None = None
        except StoreError as exc:
            self.store = None
            self.store_error = exc

    # -- backend ---------------------------------------------------------
    @property
    def backend_name(self) -> str:
        try:
            return resolve(self.settings.backend)
        except BackendUnavailable:
            return self.settings.backend

    @property
    def device_name(self) -> str:
        """The device's name once the backend has started; '' before, or where it could not."""
        return self._backend.device.name if self._backend is not None else ""

    def backend(self) -> Backend:
        """The backend, or Skip with how to get it."""
        if self._backend is None and self._backend_error is None:
            try:
                b = create(resolve(self.settings.backend))
                b.cache_dir = self.settings.scratch / "cache" / b.name  # type: ignore[attr-defined]
                self._backend = b
            except BackendUnavailable as exc:
                self._backend_error = exc
        if self._backend_error is not None:
            err = self._backend_error
            raise Skip(f"{err.message}; next step: {err.hint}" if err.hint else err.message)
        assert self._backend is not None
        return self._backend

    def bench_config(self, backend: Backend) -> BenchConfig:
        return self.settings.bench or BenchConfig.for_backend(backend)

    # -- lookups ---------------------------------------------------------
    def target_id(self, target: Target) -> str:
        return target_id(target, self.settings.root)

    def record(self, target: Target, backend: Backend, key: Mapping[str, Any]) -> Record | None:
        if self.store is None:
            return None
        return self.store.find(self.target_id(target), backend.device.id, key)

    def params(self, target: Target, backend: Backend, key: Mapping[str, Any]) -> dict[str, Value]:
        rec = self.record(target, backend, key)
        return dict(rec.params) if rec else dict(target.default)

    def _prepare(self, target: Target, case: Case) -> Job:
        backend = self.backend()
        if not case.runs_on(backend.name):
            raise Skip(f"case declared for {', '.join(case.backends or ())} only, not {backend.name}")
        if backend.name not in target.sources:
            raise Skip(f"{target.name} has no {backend.name} source; add one to sources= to run it here")
        return Job.of(backend, target, case)

    # -- correctness -----------------------------------------------------
    def check(self, target: Target, case: Case) -> list[str]:
        """Verify the configurations in use (recorded, and the default) on fresh inputs.

        Returns notes for the report; raises MismatchError, CompileError,
        LaunchError or SpaceError on failure.
        """
        job = self._prepare(target, case)
        params = self.params(target, job.backend, job.key)
        default = dict(target.default)
        configs = [("default", default)]
        if params != default:
            configs.insert(0, ("recorded", params))
        notes = []
        try:
            for label, cfg in configs:
                target.check_config(cfg, job.key, f"{label} configuration")
                seed = case_seed(self.settings.seed, target, job.case_id, f"check-{label}")
                self._verify_once(job, cfg, seed)
                notes.append(f"{label} {cfg}: ok")
        finally:
            job.backend.release()
        if self.store_error is not None:
            notes.append(f"params file unreadable, checked the default: {self.store_error.message}")
        return notes

    def _repro(self, seed: int) -> str:
        return f"rerun with --ktune-seed {self.settings.seed} to draw the same inputs (case seed {seed})"

    def _verify_once(self, job: Job, params: Mapping[str, Value], seed: int) -> list[Launch]:
        return verify_once(job, params, seed, repro=self._repro(seed))

    def _launch_sets(self, job: Job, params: Mapping[str, Value], label: str,
                     source: str | None = None) -> tuple[list[list[Launch]], bool]:
        seed = case_seed(self.settings.seed, job.target, job.case_id, f"perf-{label}")
        return timing_sets(job, params, seed, repro=self._repro(seed), source=source)

    def perf(self, target: Target, case: Case) -> PerfResult:
        """Time the case, compare with its baseline, and confirm a regression by A/B before failing."""
        job = self._prepare(target, case)
        if self.store_error is not None:
            raise self.store_error
        backend = job.backend
        params = self.params(target, backend, job.key)
        target.check_config(params, job.key, "recorded configuration")
        try:
            sets, flush = self._launch_sets(job, params, "current")
            m = measure(backend, sets, self.bench_config(backend), flush=flush)
            del sets
        finally:
            backend.release()
        bytes_moved = target.bytes_for(target.case_args(case))
        gbps = bytes_moved / m.median / 1e9 if bytes_moved else None
        frac = gbps * 1e9 / backend.copy_bandwidth() if gbps else None
        rec = self.record(target, backend, job.key)
        base = rec.baseline if rec else None
        timing = base.timings.get(job.case_id) if base else None
        row = Row(target=target.name, case=job.case_id, backend=backend.name, device=backend.device.name,
                  time_us=m.median * 1e6, gbps=gbps, copy_fraction=frac, target_id=self.target_id(target),
                  params=dict(params), measurement=m)

        if self.settings.update_baseline:
            self._queue_baseline(job, params, m, gbps)
            note = "baseline recorded" if timing is None else (
                f"baseline updated (was {timing.median_us:.2f} µs)")
            return self._add(row.result(baseline_us=timing.median_us if timing else None,
                                        ratio=m.median * 1e6 / timing.median_us if timing else None,
                                        verdict="recorded", note=note))
        if base is None or timing is None:
            return self._add(row.result(verdict="no baseline",
                                        note="no baseline recorded: run with --ktune-update-baseline "
                                             "to record one"))
        s = screen(m, timing.median_us * 1e-6, timing.ci_high_us * 1e-6, self.settings.threshold)
        row = replace(row, baseline_us=timing.median_us, ratio=s.ratio)
        if not s.suspect:
            faster = s.ratio < 1 - self.settings.threshold.fraction and m.ci[1] < timing.ci_low_us * 1e-6
            return self._add(row.result(verdict="faster" if faster else "ok"))
        return self._confirm(job, params, base, m, row)

    def _confirm(self, job: Job, params: Mapping[str, Value], base: Baseline, m: Measurement,
                 row: Row) -> PerfResult:
        threshold = self.settings.threshold
        target, backend = job.target, job.backend
        current_hash = target.source_hash(backend.name)
        current_deps = target.deps_hash(backend.name)
        same_file = current_hash == base.source_hash
        same_includes = base.deps_hash in (None, current_deps)  # None: the baseline makes no claim
        same_source = same_file and same_includes
        numbers = (f"{_fmt_us(m.median)} against a baseline of "
                   f"{_fmt_us(base.timings[job.case_id].median_us * 1e-6)} "
                   f"(x{row.ratio:.3f}, threshold {threshold})")
        if same_source and dict(base.params) == dict(params):
            return self._add(row.result(verdict="drift", note=(
                f"{numbers}, but the source and parameters are those of the baseline: "
                "the machine differs from the one that recorded it, or is noisy")))
        with tempfile.TemporaryDirectory(prefix="ktune-baseline-") as scratch:
            old_source = None if same_source else self._baseline_source(
                job, base, Path(scratch), row, numbers, same_file=same_file, same_includes=same_includes)
            try:
                sets_a, flush = self._launch_sets(job, params, "ab-current")
                sets_b, _ = self._launch_sets(job, base.params, "ab-baseline", source=old_source)
                a, b = measure_ab(backend, sets_a, sets_b, self.bench_config(backend), flush=flush)
                del sets_a, sets_b
            finally:
                backend.release()
        c: Confirmation = confirm(a, b, threshold)
        ab_text = (f"same-run A/B: current {_fmt_us(a.median)} vs the baseline's "
                   f"{'source and ' if not same_source else ''}parameters {_fmt_us(b.median)}: "
                   f"x{c.ratio:.3f}, p={c.p_value:.2g}")
        if not c.confirmed:
            return self._add(row.result(verdict="ok", note=f"screen flagged {numbers}; {ab_text}: "
                                                           "not a regression"))
        self._add(replace(row, ratio=c.ratio).result(verdict="REGRESSION", note=ab_text))
        changed = []
        if not same_file:
            changed.append(f"source {base.source_hash} -> {current_hash}")
        if not same_includes:
            path = target.source_path(backend.name)
            names = ", ".join(include_name(path, p) for p in target.includes(backend.name))
            changed.append(f"included files{f' ({names})' if names else ''} {base.deps_hash} -> "
                           f"{current_deps or 'none'}")
        if dict(base.params) != dict(params):
            changed.append(f"parameters {dict(base.params)} -> {dict(params)}")
        raise Regression(
            f"{target.name}[{job.case_id}] on {backend.device.name} regressed: {numbers}; confirmed by "
            f"{ab_text}. Changed since the baseline (commit {(base.commit or 'none')[:12]}): "
            f"{'; '.join(changed)}. Fix the kernel, tune it, or accept the new time with "
            "--ktune-update-baseline.")

    def _baseline_source(self, job: Job, base: Baseline, scratch: Path, row: Row, numbers: str, *,
                         same_file: bool, same_includes: bool) -> str:
        """The baseline's source, to compile for the A/B: the source file, from git at the baseline's
        commit where it changed (not ``same_file``), and where the files it includes changed too (not
        ``same_includes``), the baseline's copies of them, from git, written under ``scratch`` with the
        includes pointed at them. Where git cannot give them, the slowdown cannot be confirmed: raises
        Regression."""
        target, backend = job.target, job.backend
        root, commit = self.settings.root, base.commit
        path = target.source_path(backend.name)
        text = target.source_text(backend.name)
        if not same_file:
            old = _git.file_at(root, commit, path) if commit else None
            if old is None or source_hash(old) != base.source_hash:
                self._unconfirmed(job, row, numbers, "old source not in git",
                                  "The source changed since the baseline, and git holds no copy of the "
                                  f"baseline's source at commit {commit or '(none recorded)'}")
            text = old
        if same_includes:
            return text
        not_in_git: list[Path] = []

        def read_old(p: Path) -> str | None:
            old = _git.file_at(root, commit, p) if commit else None
            if old is None and p.is_file():
                not_in_git.append(p)
            return old

        headers = include_closure(path, text, read_old)
        if deps_hash(path, headers) != base.deps_hash:
            names = ", ".join(include_name(path, p) for p in not_in_git)
            what = f"header{'s' if len(not_in_git) > 1 else ''} {names}" if names else "headers"
            self._unconfirmed(job, row, numbers, f"old {what} not in git",
                              "The files the source includes changed since the baseline, and git holds "
                              f"no copy of the baseline's {what} at commit {commit or '(none recorded)'}")
        return pin_includes(path, text, headers, scratch)

    def _unconfirmed(self, job: Job, row: Row, numbers: str, note: str, why: str) -> NoReturn:
        self._add(row.result(verdict="REGRESSION", note=f"unconfirmed: {note}"))
        raise Regression(
            f"{job.target.name}[{job.case_id}] on {job.backend.device.name}: {numbers}. {why}, so the "
            "slowdown could not be confirmed A/B. Record baselines from committed sources, or run with "
            "--ktune-update-baseline if the slowdown is accepted.")

    def _queue_baseline(self, job: Job, params: Mapping[str, Value], m: Measurement,
                        gbps: float | None) -> None:
        target, backend = job.target, job.backend
        timing = Timing(median_us=round(m.median * 1e6, 4), iqr_us=round(m.iqr * 1e6, 4),
                        ci_low_us=round(m.ci[0] * 1e6, 4), ci_high_us=round(m.ci[1] * 1e6, 4),
                        samples=len(m.samples), gbps=round(gbps, 3) if gbps else None)
        rec = Record(target=self.target_id(target), device=backend.device.id, key=dict(job.key),
                     params=dict(params))
        prev = self.updates.get(rec.ident) or (self.store.records.get(rec.ident) if self.store else None)
        baseline = new_baseline(self.settings.root, target, backend.name, params, {job.case_id: timing})
        # Timings kept from the previous baseline come under this one's claim about the included files,
        # so that claim must be theirs too.
        if prev and prev.baseline and dict(prev.baseline.params) == dict(params) \
                and prev.baseline.source_hash == baseline.source_hash \
                and prev.baseline.deps_hash == baseline.deps_hash:
            baseline = replace(baseline, timings={**prev.baseline.timings, job.case_id: timing})
        self.updates[rec.ident] = replace(rec, baseline=baseline, tuned=prev.tuned if prev else None)

    # -- tuning ----------------------------------------------------------
    def tune(self, target: Target, key: dict[str, Any], indices: tuple[int, ...]) -> TuneOutcome:
        """Tune one key of a target (under --ktune-autotune, only if it regressed or was never tuned)."""
        import sys

        from ._store import key_string
        from ._tuner import TuneContext, tune_key

        settings = self.settings.tune
        assert settings is not None
        backend = self.backend()
        if backend.name not in target.sources:
            raise Skip(f"{target.name} has no {backend.name} source")
        if self.settings.autotune:
            case_ids = {target.case_id(target.cases[i]) for i in indices}
            regressed = [r for r in self.results if r.target == target.name and r.case in case_ids
                         and r.verdict == "REGRESSION"]
            rec = self.record(target, backend, key)
            if not regressed and rec is not None and rec.tuned is not None:
                raise Skip(f"tuned on {rec.tuned.date} and no regression in this run")
        stream = sys.__stderr__ if sys.__stderr__ is not None and sys.__stderr__.isatty() else None
        ctx = TuneContext(root=self.settings.root, params_path=self.settings.params_path, backend=backend.name,
                          settings=settings, progress=stream)
        if self.settings.agent is not None and self.target_id(target) not in self.agents:
            self.agents[self.target_id(target)] = self._agent(target, backend.name, settings, stream)
        out = tune_key(ctx, target, key, indices)
        self.tunes.append(out)
        if out.written:
            self._tuned.add((self.target_id(target), out.device, key_string(key)))
            try:
                self.store = Store.load(self.settings.params_path)
            except StoreError as exc:
                self.store, self.store_error = None, exc
        return out

    def _agent(self, target: Target, backend: str, settings: TuneSettings, stream: Any) -> Any:
        """The agent loop (or, with no model, the rule-based templater) on ``target``, once per target."""
        from .agent._loop import rules_fallback, run_agent
        from .agent._tools import Bench

        bench = Bench(root=self.settings.root, params_path=self.settings.params_path, backend=backend, base=target,
                      tune=settings, progress=stream)
        try:
            if self.settings.agent.model is None:
                return rules_fallback(bench, write=settings.write)
            return run_agent(bench, self.settings.agent, write=settings.write)
        except KtuneError as exc:  # the search of the target itself still runs
            from .agent._loop import AgentResult

            return AgentResult(target=target.name, status="error", stop=exc.message,
                               message=f"{target.name}: the agent stage failed: {exc.render()}")

    def _add(self, r: PerfResult) -> PerfResult:
        self.results.append(r)
        return r

    # -- end -------------------------------------------------------------
    def finish(self) -> str | None:
        """Write queued baselines and deliver tuned winners; returns lines for the terminal, or None."""
        lines = [line for line in (self._finish_baselines(), self._finish_tunes()) if line]
        return "\nktune: ".join(lines) or None

    def _finish_tunes(self) -> str | None:
        if not self.tunes:
            return None
        from ._deliver import deliver

        copy_bw = None
        if self.settings.write_mode in ("patch", "commit", "pr") and self._backend is not None:
            copy_bw = self._backend.copy_bandwidth()
        return deliver(self.settings.write_mode, root=self.settings.root, params_path=self.settings.params_path,
                       outcomes=self.tunes, device=self.tunes[0].device, copy_bandwidth=copy_bw,
                       command=self.settings.command)

    def _finish_baselines(self) -> str | None:
        if not self.updates:
            return None
        if self.store is None:
            return f"baselines NOT written: {self.store_error.render() if self.store_error else ''}"
        updates = [r for ident, r in self.updates.items() if ident not in self._tuned]
        try:
            self.store.save(updates)
        except KtuneError as exc:
            return f"baselines NOT written: {exc.render()}"
        n = len(self.updates)
        self.updates = {}
        CACHE.clear()
        return f"wrote {n} baseline record(s) to {self.settings.params_path}"
