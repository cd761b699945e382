"""The tuner: an Optuna study per target, device and key, over the template's parameters.

Candidates that break a constraint or a device limit are recorded as infeasible
with their reason and never timed; a configuration already timed in the study is
never timed again; every candidate runs in a worker process (``_worker``). The
study's best is re-verified on every case of the key and timed A/B against the
parameters in use; it replaces them only when it is faster beyond noise.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from ._bench import mann_whitney_greater
from ._errors import KtuneError, SpaceError
from ._samplers import DEFAULT_SAMPLER, SAMPLERS
from ._space import Value, config_key
from ._store import Record, Store, Timing, Tuned, key_string, new_baseline, now_utc, source_changed, target_id
from ._target import Case, Target
from ._worker import ABOutcome, CaseTime, Outcome, TargetRef, WorkerPool, WorkerSpec

MEMORY = ":memory:"  # an in-memory study storage, for replays (nothing is saved)
STUCK_AFTER = 2  # proposals in a row that bring nothing new before the loop picks an untried configuration
MIN_GAIN = 0.01  # a winner must be at least 1 % faster in total, and significantly so
ALPHA = 0.01


@dataclass(frozen=True)
class TuneSettings:
    """How to tune: the budget, the sampler and where the study lives."""

    trials: int = 40
    timeout_s: float | None = None
    sampler: str = DEFAULT_SAMPLER
    storage: str | None = None  # None: a journal file under .ktune/
    seed: int | None = None
    trial_timeout_s: float = 60.0
    batch: int = 4
    write: bool = True
    priors: bool = True  # time the device priors (_priors) among the warm starts (tune_key says where)

    def check(self) -> None:
        if self.trials < 1:
            raise KtuneError(f"a budget of {self.trials} trials tunes nothing",
                             hint="give --ktune-trials (or --trials) 1 or more")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise KtuneError(f"a time budget of {self.timeout_s:g} s tunes nothing",
                             hint="give a positive number of seconds, or none")
        if self.sampler not in SAMPLERS:
            raise KtuneError(f"unknown sampler {self.sampler!r}", hint=f"use one of {', '.join(SAMPLERS)}")
        if self.trial_timeout_s <= 0:
            raise KtuneError("the per-trial timeout must be positive", hint="e.g. 60 (seconds)")


@dataclass(frozen=True)
class CaseChange:
    """One case of an accepted winner: the median per call before and after, from the A/B run."""

    case_id: str
    before_s: float
    after_s: float
    bytes_moved: int | None


@dataclass(frozen=True)
class TuneOutcome:
    """What one tune of one key found and did."""

    target: str
    key: Mapping[str, Any]
    device: str
    study: str
    timed: int
    infeasible: int
    failed: int
    default_us: float | None
    current_params: Mapping[str, Value]
    current_us: float | None
    best_params: Mapping[str, Value]
    best_us: float
    accepted: bool
    decision: str
    report: Path | None
    wall_s: float
    written: bool
    record: Record | None = None
    changes: tuple[CaseChange, ...] = ()


# -- the parameter encoding -------------------------------------------------------


def _numeric(values: Sequence[Value]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


class Encoding:
    """Space values <-> Optuna parameters: numeric parameters as ordered indices (so samplers can
    use their order), others as categories."""

    def __init__(self, target: Target) -> None:
        import optuna

        self.values: dict[str, tuple[Value, ...]] = {}
        self.distributions: dict[str, Any] = {}
        for name, values in target.space.params.items():
            if _numeric(values):
                ordered = tuple(sorted(values, key=float))
                self.values[name] = ordered
                self.distributions[name] = optuna.distributions.IntDistribution(0, len(ordered) - 1)
            else:
                self.values[name] = tuple(values)
                self.distributions[name] = optuna.distributions.CategoricalDistribution(list(values))
        self.numeric = all(_numeric(v) for v in target.space.params.values())

        self._indexed = {n for n, v in self.values.items() if _numeric(v)}

    def decode(self, params: Mapping[str, Any]) -> dict[str, Value]:
        return {n: self.values[n][int(raw)] if n in self._indexed else raw for n, raw in params.items()}

    def encode(self, config: Mapping[str, Value]) -> dict[str, Any]:
        return {n: self.values[n].index(v) if n in self._indexed else v for n, v in config.items()}


# -- samplers and storage ---------------------------------------------------------


def make_sampler(name: str, seed: int | None, encoding: Encoding,
                 feasible: Sequence[Mapping[str, Value]] = ()) -> Any:
    """The named sampler; ``bo`` proposes among ``feasible``, the key's configurations."""
    import optuna

    if name == "bo":
        from ._bo import BoSampler

        return BoSampler(encoding, feasible, seed)
    if name == "tpe":
        # Four random points (the warm starts among them) before the model takes over: kernel spaces
        # are small, and on landscapes recorded on an H200 this reached 3 % of the optimum in fewer
        # trials than Optuna's default of ten, or than random search (benchmarks/bench_tuner.py).
        return optuna.samplers.TPESampler(seed=seed, constant_liar=True, n_startup_trials=4,
                                          multivariate=True)
    if name in ("random", "grid"):
        # grid: every feasible point is enqueued in order; the sampler only fills in after that.
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "cmaes":
        if not encoding.numeric:
            raise KtuneError("CMA-ES needs a numeric space, and this one has non-numeric parameters",
                             hint="use --ktune-sampler tpe, or make every parameter's values numbers")
        try:
            import cmaes  # noqa: F401
        except ImportError:
            raise KtuneError("the CMA-ES sampler needs the cmaes package",
                             hint="pip install cmaes") from None
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    if name == "gp":
        try:
            import scipy  # noqa: F401
            import torch  # noqa: F401
        except ImportError:
            raise KtuneError("the GP sampler needs torch and scipy",
                             hint="pip install torch scipy, or use --ktune-sampler tpe") from None
        return optuna.samplers.GPSampler(seed=seed)
    raise KtuneError(f"unknown sampler {name!r}", hint=f"use one of {', '.join(SAMPLERS)}")


def redact(url: str) -> str:
    """A storage URL without its password.

    The credentials end at the last '@' before the first '/', '?' or '#' that follows the first '@':
    an '@' further on (in the query, say) is not taken for their end, and an '@' left unencoded in
    a password does not show the rest of it."""
    if "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    first = rest.find("@")
    if first < 0:
        return url
    ends = [i for i in (rest.find(c, first) for c in "/?#") if i >= 0]
    at = rest.rfind("@", 0, min(ends, default=len(rest)))
    creds, host = rest[:at], rest[at + 1:]
    return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}" if ":" in creds else url


def open_storage(url: str | None, scratch: Path) -> tuple[Any, str]:
    """The Optuna storage and how to name it in messages."""
    import optuna

    if url == MEMORY:
        return optuna.storages.InMemoryStorage(), "memory"
    if url is None:
        scratch.mkdir(parents=True, exist_ok=True)
        path = scratch / "studies.journal"
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        return JournalStorage(JournalFileBackend(str(path))), str(path)
    for attempt in range(1, SCHEMA_ATTEMPTS + 1):
        try:
            storage = optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
            break
        except Exception as exc:
            if attempt < SCHEMA_ATTEMPTS and _schema_race(exc):
                time.sleep(0.2 * attempt)
                continue
            raise KtuneError(f"cannot reach the study storage {redact(url)}: {type(exc).__name__}: "
                             f"{_first_line(str(exc))}",
                             hint="check the URL, that the database server runs and accepts this user, and "
                                  "that its driver is installed (pip install 'pytest-ktune[postgres]')") from None
    return storage, redact(url)


SCHEMA_ATTEMPTS = 5


def _schema_race(exc: Exception) -> bool:
    """Whether ``exc`` is another process creating Optuna's tables at the same moment (a coordinator
    and its workers started together on an empty database): the next attempt finds them made."""
    try:
        from sqlalchemy.exc import IntegrityError, ProgrammingError
    except ImportError:
        return False
    return isinstance(exc, (IntegrityError, ProgrammingError))


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


@contextlib.contextmanager
def study_lock(scratch: Path, study: str) -> Iterator[None]:
    """Only one local tune of a study at a time (workers that join on purpose use a database)."""
    import fcntl

    folder = scratch / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (hashlib.sha256(study.encode()).hexdigest()[:16] + ".lock")
    with path.open("a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            raise KtuneError(f"another tune of the study {study!r} is running ({holder})",
                             hint="wait for it to finish, or join it on purpose with a shared "
                                  "--ktune-storage and `ktune worker`") from None
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()}, since {now_utc()}")
        f.flush()
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# -- one key ----------------------------------------------------------------------


@dataclass(frozen=True)
class TuneContext:
    """Where a tune runs and writes."""

    root: Path
    params_path: Path
    backend: str
    settings: TuneSettings
    progress: TextIO | None = None
    # Replays (``_replay``) answer from a recorded landscape instead of a worker process, and write
    # no report; the live tuner leaves both as they are.
    pool_factory: Callable[..., Any] | None = None
    reports: bool = True
    sampler_factory: Callable[[Encoding], Any] | None = None  # a sampler not in SAMPLERS (bench-search)

    @property
    def scratch(self) -> Path:
        return self.root / ".ktune"


def study_name(tid: str, device: str, key: Mapping[str, Any]) -> str:
    return f"{tid}|{device}|{key_string(key)}"


def key_label(key: Mapping[str, Any]) -> str:
    return "-".join(f"{k}{v}" if isinstance(v, (int, float)) else str(v) for k, v in key.items())


def cases_by_key(target: Target, backend: str) -> dict[str, tuple[dict[str, Any], list[int]]]:
    """The target's keys on this backend, each with the indices of its cases."""
    out: dict[str, tuple[dict[str, Any], list[int]]] = {}
    for i, case in enumerate(target.cases):
        if not case.runs_on(backend):
            continue
        key = target.case_key(case)
        out.setdefault(key_string(key), (key, []))[1].append(i)
    return out


class _Loop:
    """The ask / evaluate / tell loop of one study; shared by the tuner and `ktune worker`."""

    def __init__(self, study: Any, encoding: Encoding, target: Target, *, key: Mapping[str, Any],
                 pool: WorkerPool, settings: TuneSettings) -> None:
        self.study = study
        self.enc = encoding
        self.target = target
        self.key = dict(key)
        self.pool = pool
        self.settings = settings
        self.infeasible = 0
        self.failed = 0
        self.rows: list[Any] = []

    def _trials(self, *states: Any) -> list[Any]:
        return list(self.study.get_trials(deepcopy=False, states=states or None))

    def timed(self) -> int:
        from optuna.trial import TrialState

        # "duplicate" holds the twin's number, which may be 0: test for the key, not its value.
        return sum(1 for t in self._trials(TrialState.COMPLETE) if "duplicate" not in t.user_attrs)

    @property
    def stale_s(self) -> float:
        """How long a trial may run before it counts as left behind by a process that died."""
        return self.settings.trial_timeout_s * (self.settings.batch + 1) + 60.0

    def in_flight(self, mine: Collection[int] = ()) -> int:
        """Trials other processes sharing the study are running now (not those numbered in ``mine``).

        They count against the budget while they run, so that several processes do not each take
        the whole remainder of it. Always 0 for a local tune, which holds the study alone."""
        from optuna.trial import TrialState

        since = datetime.datetime.now() - datetime.timedelta(seconds=self.stale_s)
        return sum(1 for t in self._trials(TrialState.RUNNING) if t.number not in mine
                   and (t.datetime_start is None or t.datetime_start > since))

    def settle(self) -> None:
        """Wait for the trials other processes are still running, so that the best is chosen among
        all the trials of the study (bounded: a process that died leaves its trial running)."""
        end = time.monotonic() + self.stale_s
        while self.in_flight() and time.monotonic() < end:
            time.sleep(0.5)

    def run(self, deadline: float | None, on_trial: Any = None) -> bool:
        """Ask, filter, evaluate and tell until the budget is spent; False when the space ran out."""
        from optuna.trial import TrialState

        settings = self.settings
        fruitless = 0
        stuck = 0  # proposals in a row that timed nothing new
        limit = max(50, 3 * self.target.space.size)
        seed = settings.seed if settings.seed is not None else int.from_bytes(os.urandom(3), "little")
        while self.timed() < settings.trials:
            if deadline is not None and time.monotonic() > deadline:
                return True
            batch: list[tuple[Any, dict[str, Value]]] = []
            in_batch: set[str] = set()
            busy = 0
            while len(batch) < settings.batch:
                busy = self.in_flight({t.number for t, _ in batch})
                if self.timed() + busy + len(batch) >= settings.trials or fruitless > limit:
                    break
                if stuck >= STUCK_AFTER:
                    # The sampler keeps proposing what was seen: time a configuration it has not tried
                    # instead, so that a budget as large as the space covers the space.
                    self._explore(in_batch, seed)
                    stuck = 0
                trial = self.study.ask(self.enc.distributions)
                cfg = self.enc.decode(trial.params)
                ck = config_key(cfg)
                broken = self.target.space.violated(cfg, self.key)
                if broken:
                    trial.set_user_attr("infeasible", "; ".join(broken))
                    self.study.tell(trial, state=TrialState.FAIL)
                    self.infeasible += 1
                    fruitless += 1
                    stuck += 1
                    self._row(trial.number, cfg, "infeasible", None, reason="; ".join(broken),
                              attrs=trial.user_attrs)
                    continue
                twin = None if ck in in_batch else self._twin(trial.number, ck)
                if ck in in_batch or (twin is not None and twin.state != TrialState.COMPLETE):
                    trial.set_user_attr("skipped", "being timed by another trial")
                    self.study.tell(trial, state=TrialState.FAIL)
                    fruitless += 1
                    stuck += 1
                    continue
                if twin is not None:
                    trial.set_user_attr("duplicate", twin.number)
                    self.study.tell(trial, twin.value)
                    fruitless += 1
                    self._row(trial.number, cfg, "duplicate", twin.value,
                              reason=f"same as trial {twin.number}", attrs=trial.user_attrs)
                    stuck += 1
                    continue
                earlier = self._broken_before(trial.number, ck)
                if earlier is not None:
                    # Failed or infeasible already: running it again would fail again, and a hang
                    # would cost the whole trial timeout each time the sampler proposes it.
                    trial.set_user_attr("skipped", f"failed in trial {earlier.number}")
                    self.study.tell(trial, state=TrialState.FAIL)
                    fruitless += 1
                    stuck += 1
                    continue
                fruitless = 0
                stuck = 0
                in_batch.add(ck)
                batch.append((trial, cfg))
            if not batch:
                if busy and fruitless <= limit:
                    time.sleep(0.5)  # other processes are timing the rest of the budget
                    continue
                return fruitless <= limit
            for (trial, cfg), out in zip(batch, self.pool.evaluate([c for _, c in batch], seed),
                                         strict=True):
                self._tell(trial, cfg, out)
                if on_trial is not None:
                    on_trial()
        return True

    def _explore(self, in_batch: Collection[str], seed: int) -> None:
        """Queue one feasible configuration the study has neither tried nor queued, drawn at random
        (seeded by the run's seed and the study's size, so a replay repeats itself)."""
        known = {config_key(self.enc.decode(t.params)) for t in self._trials() if t.params} | set(in_batch)
        untried = [c for c in self.target.space.feasible(self.key) if config_key(c) not in known]
        if untried:
            pick = random.Random(f"{seed}:{len(known)}").choice(untried)
            _enqueue(self.study, self.enc, [("explore", pick)])

    def _twin(self, number: int, ck: str) -> Any:
        """The lowest-numbered other trial with the same configuration that is running or complete."""
        from optuna.trial import TrialState

        for t in sorted(self._trials(TrialState.COMPLETE, TrialState.RUNNING), key=lambda t: t.number):
            if t.number != number and t.params and config_key(self.enc.decode(t.params)) == ck and \
                    "duplicate" not in t.user_attrs:
                return t if t.number < number or t.state == TrialState.COMPLETE else None
        return None

    def _broken_before(self, number: int, ck: str) -> Any:
        """A trial of the study in which this configuration failed or proved infeasible, or None
        (trials failed only because a run was interrupted carry no reason, and do not count)."""
        from optuna.trial import TrialState

        for t in self._trials(TrialState.FAIL):
            if t.number != number and t.params and ("failed" in t.user_attrs or "infeasible" in t.user_attrs) \
                    and config_key(self.enc.decode(t.params)) == ck:
                return t
        return None

    def _tell(self, trial: Any, cfg: dict[str, Value], out: Outcome) -> None:
        from optuna.trial import TrialState

        trial.set_user_attr("compile_s", round(out.compile_s, 4))
        trial.set_user_attr("run_s", round(out.run_s, 4))
        if out.status == "ok":
            trial.set_user_attr("cases_us", {t.case_id: round(t.median_s * 1e6, 4) for t in out.times})
            if out.resources:
                trial.set_user_attr("resources", dict(out.resources))
            value = out.value_s * 1e6
            self.study.tell(trial, value)
            self._row(trial.number, cfg, "timed", value, reason="", attrs=trial.user_attrs, out=out)
            return
        attr = "infeasible" if out.status == "infeasible" else "failed"
        trial.set_user_attr(attr, out.reason)
        self.study.tell(trial, state=TrialState.FAIL)
        if attr == "infeasible":
            self.infeasible += 1
        else:
            self.failed += 1
        self._row(trial.number, cfg, attr, None, reason=out.reason, attrs=trial.user_attrs, out=out)

    def _row(self, number: int, cfg: Mapping[str, Value], state: str, value: float | None, *, reason: str,
             attrs: Mapping[str, Any], out: Outcome | None = None) -> None:
        from ._tune_report import TrialRow

        self.rows.append(TrialRow(number=number, params=dict(cfg), state=state, value_us=value,
                                  reason=reason, source=str(attrs.get("source", "sampler")),
                                  compile_s=out.compile_s if out else 0.0, run_s=out.run_s if out else 0.0))


def _all_rows(study: Any, enc: Encoding) -> list[Any]:
    """A report row for every trial of the study, this run's and earlier ones'."""
    from optuna.trial import TrialState

    from ._tune_report import TrialRow

    rows = []
    for t in study.get_trials(deepcopy=False):
        if not t.params:
            continue
        a = t.user_attrs
        if t.state == TrialState.COMPLETE:
            state = "duplicate" if a.get("duplicate") is not None else "timed"
            reason = f"same as trial {a['duplicate']}" if state == "duplicate" else ""
        elif "infeasible" in a:
            state, reason = "infeasible", str(a["infeasible"])
        elif "failed" in a:
            state, reason = "failed", str(a["failed"])
        else:
            continue
        rows.append(TrialRow(number=t.number, params=enc.decode(t.params), state=state,
                             value_us=t.value if t.state == TrialState.COMPLETE else None, reason=reason,
                             source=str(a.get("source", "sampler")),
                             compile_s=float(a.get("compile_s", 0.0)), run_s=float(a.get("run_s", 0.0))))
    return rows


def _warm_starts(target: Target, store: Store | None, *, tid: str, device: str, key: Mapping[str, Any],
                 current: Mapping[str, Value]) -> list[tuple[str, dict[str, Value], bool]]:
    """The default, the parameters in use, and the best recorded for other keys and devices, each
    with whether it is near: the default and the parameters in use are, and so is a record of a key
    with this key's element types (its dimensions that name a dtype); a record of a key with other
    element types is timed after the device priors (tune_key), its vector widths carried over so
    that each load moves as many bytes (``_priors.in_bytes``)."""
    from ._priors import element_types, in_bytes

    types = element_types(key)
    out: list[tuple[str, dict[str, Value], bool]] = [("default", dict(target.default), True),
                                                     ("current", dict(current), True)]
    if store is not None:
        mine = key_string(key)
        others = [r for r in store.for_target(tid) if key_string(r.key) != mine or r.device != device]
        others.sort(key=lambda r: (r.device != device, key_string(r.key)))
        out.extend((f"recorded for {r.device} {key_string(r.key)}", in_bytes(target, r.params, r.key, key),
                    element_types(r.key) == types) for r in others)
    seen: set[str] = set()
    unique = []
    for label, cfg, near in out:
        ck = config_key(cfg)
        if ck not in seen and target.space.valid(cfg, key):
            seen.add(ck)
            unique.append((label, cfg, near))
    return unique


def _case_timing(target: Target, case: Case, t: CaseTime) -> Timing:
    moved = target.bytes_for(target.case_args(case))
    return Timing(median_us=round(t.median_s * 1e6, 4), iqr_us=round(t.iqr_s * 1e6, 4),
                  ci_low_us=round(t.ci[0] * 1e6, 4), ci_high_us=round(t.ci[1] * 1e6, 4),
                  samples=len(t.samples), gbps=round(moved / t.median_s / 1e9, 3) if moved else None)


def decide(ab: ABOutcome) -> tuple[bool, str]:
    """Whether the candidate (B) beats the current parameters (A) beyond noise, and why."""
    if ab.status != "ok":
        return False, f"the A/B check failed ({ab.reason}); the current parameters stay"
    cur = sum(t.median_s for t in ab.current)
    cand = sum(t.median_s for t in ab.candidate)
    slower = []
    faster = 0
    for a, b in zip(ab.current, ab.candidate, strict=True):
        if mann_whitney_greater(b.samples, a.samples) < ALPHA and b.median_s > a.median_s * (1 + MIN_GAIN):
            slower.append(a.case_id)
        if mann_whitney_greater(a.samples, b.samples) < ALPHA:
            faster += 1
    ratio = cand / cur
    if slower:
        return False, f"the best found is slower on {', '.join(slower)} in same-run A/B; kept the current"
    if ratio > 1 - MIN_GAIN or not faster:
        return False, (f"the best found is not faster beyond noise in same-run A/B (x{cur / cand:.3f}); "
                       "kept the current")
    return True, f"x{cur / cand:.3f} faster than the current parameters in same-run A/B"


def tune_key(ctx: TuneContext, target: Target, key: Mapping[str, Any],
             case_indices: Sequence[int]) -> TuneOutcome:
    """Tune one target for one key; write the winner to the params file when it wins A/B.

    Timed first, in this order: the parameters in use and the default when this key was tuned
    before (what tuning found is the best guess), then the leading device priors; for a key not
    tuned yet, the leading device priors (``_priors``: the strongest guess computed for this key's
    own launch, with its 8-byte twin when it has one: ``_priors.leading``) before the default. Then
    the best recorded for other keys and devices whose keys have this key's element types (the
    dimensions that name a dtype); the other device priors; the best recorded for keys of other
    element types, their vector widths carried over in bytes (``_priors.in_bytes``), which transfer
    less well. The sampler (by default ``bo``, ``_bo``: a model of all the timings so far) proposes
    the rest."""
    import optuna
    from optuna.trial import TrialState

    from ._progress import Progress
    from ._tune_report import StudySummary, importances_of, write_report

    settings = ctx.settings
    settings.check()
    started = time.monotonic()
    feasible = list(target.space.feasible(key))
    if not feasible:
        target.check_config(dict(target.default), key, "default configuration")  # raises, naming the target
        raise SpaceError("the space has no valid point for this key", where=target.where,
                         hint="widen the Space or relax a constraint")
    enc = Encoding(target)
    sampler = ctx.sampler_factory(enc) if ctx.sampler_factory else \
        make_sampler(settings.sampler, settings.seed, enc, feasible)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tid = target_id(target, ctx.root)
    spec = WorkerSpec(target=TargetRef.of(target), backend=ctx.backend, cases=tuple(case_indices),
                      cache_dir=str(ctx.scratch / "cache" / ctx.backend))
    try:
        store: Store | None = Store.load(ctx.params_path)
    except KtuneError:
        if settings.write:
            raise
        store = None
    storage, storage_name = open_storage(settings.storage, ctx.scratch)
    with (ctx.pool_factory or WorkerPool)(spec, trial_timeout_s=settings.trial_timeout_s) as pool:
        pool.ensure()
        device = pool.device
        name = study_name(tid, device.id, key)
        lock = study_lock(ctx.scratch, name) if settings.storage is None else contextlib.nullcontext()
        with lock:
            try:
                study = optuna.create_study(study_name=name, storage=storage, sampler=sampler,
                                            direction="minimize", load_if_exists=True)
            except Exception as exc:
                raise KtuneError(f"cannot open the study {name!r} in {storage_name}: "
                                 f"{type(exc).__name__}: {_first_line(str(exc))}",
                                 hint="check the storage URL and the server") from None
            study.set_user_attr("ktune", {"target": tid, "file": str(target.file), "name": target.name,
                                          "module": target.module, "key": dict(key), "backend": ctx.backend,
                                          "device": device.id, "trials": settings.trials,
                                          "cases": list(case_indices)})
            if settings.storage is None:
                for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING)):
                    if t.state == TrialState.RUNNING:
                        study.tell(t.number, state=TrialState.FAIL)  # left by an interrupted run
            rec = store.find(tid, device.id, key) if store else None
            current = dict(rec.params) if rec else dict(target.default)
            warm = _warm_starts(target, store, tid=tid, device=device.id, key=key, current=current)
            priors: list[tuple[str, dict[str, Value]]] = []
            lead = 0
            if settings.priors and settings.sampler != "grid":
                from ._priors import device_priors, leading

                priors = device_priors(target, key, case_indices, device)
                lead = leading(priors)
            # In the order of the docstring.
            mine = sorted(((label, cfg) for label, cfg, _ in warm if label in ("default", "current")),
                          key=lambda lc: lc[0] != "current")
            near = [(label, cfg) for label, cfg, n in warm if n and label not in ("default", "current")]
            far = [(label, cfg) for label, cfg, n in warm if not n]
            groups = (mine, priors[:lead]) if rec is not None else (priors[:lead], mine)
            for group in (*groups, near, priors[lead:], far):
                _enqueue(study, enc, group)
            if settings.sampler == "grid":
                _enqueue(study, enc, [("grid", p) for p in feasible])
            loop = _Loop(study, enc, target, key=key, pool=pool, settings=settings)
            label = f"{target.name} {key_label(key)}"
            total = min(settings.trials, len(feasible))
            with Progress(label, total, stream=ctx.progress) as bar:
                def tick() -> None:
                    best = _best(study)
                    bar.update(min(loop.timed(), total), best.value if best else None,
                               enc.decode(best.params) if best else None)

                deadline = started + settings.timeout_s if settings.timeout_s else None
                try:
                    loop.run(deadline, tick)
                    if settings.storage is not None:
                        loop.settle()  # trials that processes sharing the study still run
                except KeyboardInterrupt:
                    # The user's Ctrl-C must still stop pytest or the command: say how to resume, re-raise.
                    _fail_running(study)
                    print(f"\nktune: {target.where}: interrupted after {loop.timed()} timed trials; nothing "
                          f"was written. The study {name!r} is saved in {storage_name}: rerun the same "
                          "command to resume it.", file=sys.stderr, flush=True)
                    raise
            best = _best(study)
            if best is None:
                reasons = Counter(str(r.reason) for r in loop.rows if r.state in ("infeasible", "failed"))
                why = "; ".join(f"{n}x {r}" for r, n in reasons.most_common(3)) or "no trial ran"
                raise KtuneError(f"no configuration could be timed for key {key_label(key)}: {why}",
                                 where=target.where,
                                 hint="fix the failures shown, or constrain the space to what this device "
                                      "can run (its limits are listed in the reasons)")
            best_cfg = enc.decode(best.params)
            cur_us = _value_of(study, enc, current)
            default_us = _value_of(study, enc, dict(target.default))
            seed = settings.seed if settings.seed is not None else int.from_bytes(os.urandom(3), "little")
            if config_key(best_cfg) == config_key(current):
                accepted, decision = False, "the parameters in use are the best the study found"
                # A baseline measured on another version of the source is measured again, on this one.
                ab = pool.ab(current, current, seed + 99991) if baseline_is_stale(rec, target, ctx.backend) else None
            else:
                ab = pool.ab(current, best_cfg, seed + 99991)
                accepted, decision = decide(ab)
            tuned = Tuned(date=now_utc(), sampler=settings.sampler, trials=loop.timed(), study=name,
                          result=decision)
            record, changes = _new_record(ctx, target, _Write(
                tid=tid, device=device.id, key=dict(key), cases=tuple(case_indices), record=rec, current=current,
                best=best_cfg, accepted=accepted, ab=ab, tuned=tuned))
            written = False
            if settings.write:
                Store(ctx.params_path).save([record])
                written = True
    wall = time.monotonic() - started
    summary = StudySummary(
        target=tid, device=device.id, key=dict(key), sampler=settings.sampler, study_name=name,
        storage=storage_name, default_params=dict(target.default), default_us=default_us,
        current_params=current, current_us=cur_us, best_params=best_cfg, best_us=best.value,
        accepted=accepted, decision=decision, feasible_points=len(feasible), wall_s=wall)
    report = None
    try:
        if ctx.reports:
            report = write_report(ctx.scratch / "reports", summary, _all_rows(study, enc), importances_of(study))
    except OSError:
        report = None
    return TuneOutcome(target=target.name, key=dict(key), device=device.id, study=name, timed=loop.timed(),
                       infeasible=loop.infeasible, failed=loop.failed, default_us=default_us,
                       current_params=current, current_us=cur_us, best_params=best_cfg, best_us=best.value,
                       accepted=accepted, decision=decision, report=report, wall_s=wall, written=written,
                       record=record, changes=changes)


def _enqueue(study: Any, enc: Encoding, configs: Sequence[tuple[str, Mapping[str, Value]]]) -> None:
    """Enqueue configurations the study has not seen and has not queued yet."""
    from optuna.trial import TrialState

    known = {config_key(enc.decode(t.params)) for t in study.get_trials(deepcopy=False) if t.params}
    known |= {config_key(enc.decode(t.params)) for t in study.get_trials(deepcopy=False,
                                                                       states=(TrialState.WAITING,))
              if t.params}
    for label, cfg in configs:
        ck = config_key(cfg)
        if ck in known:
            continue
        known.add(ck)
        source = label if label in ("grid", "explore") else "warm-start"
        study.enqueue_trial(enc.encode(cfg), user_attrs={"source": source, "warm_start": label})


def _best(study: Any) -> Any:
    from optuna.trial import TrialState

    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.value is not None]
    return min(done, key=lambda t: (t.value, t.number)) if done else None


def _value_of(study: Any, enc: Encoding, cfg: Mapping[str, Value]) -> float | None:
    from optuna.trial import TrialState

    ck = config_key(cfg)
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if config_key(enc.decode(t.params)) == ck:
            return float(t.value)
    return None


def _fail_running(study: Any) -> None:
    from optuna.trial import TrialState

    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        with contextlib.suppress(Exception):
            study.tell(t.number, state=TrialState.FAIL)


@dataclass(frozen=True)
class _Write:
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


def baseline_is_stale(record: Record | None, target: Target, backend: str) -> bool:
    """Whether the record's baseline was measured on another version of the target's source."""
    return (record is not None and record.baseline is not None
            and source_changed(record.baseline, target, backend))


def _new_record(ctx: TuneContext, target: Target, w: _Write) -> tuple[Record, tuple[CaseChange, ...]]:
    """The params-file record a finished tune leaves, and the per-case before/after of an accepted one.

    An accepted winner gets a baseline measured in the A/B run; a kept result only updates ``tuned``,
    unless its baseline was measured on another version of the source: then the A/B run's timings of
    the kept parameters, on the source as it is now, become the baseline.
    """
    if w.accepted and w.ab is not None:
        cases = [target.cases[i] for i in w.cases]
        timings = {t.case_id: _case_timing(target, c, t) for c, t in zip(cases, w.ab.candidate, strict=True)}
        baseline = new_baseline(ctx.root, target, ctx.backend, w.best, timings)
        changes = tuple(CaseChange(case_id=a.case_id, before_s=a.median_s, after_s=b.median_s,
                                   bytes_moved=target.bytes_for(target.case_args(c)))
                        for c, a, b in zip(cases, w.ab.current, w.ab.candidate, strict=True))
        return Record(target=w.tid, device=w.device, key=w.key, params=dict(w.best), baseline=baseline,
                      tuned=w.tuned), changes
    base = w.record or Record(target=w.tid, device=w.device, key=w.key, params=dict(w.current))
    if baseline_is_stale(base, target, ctx.backend) and w.ab is not None and w.ab.status == "ok":
        cases = [target.cases[i] for i in w.cases]
        timings = {t.case_id: _case_timing(target, c, t) for c, t in zip(cases, w.ab.current, strict=True)}
        base = replace(base, baseline=new_baseline(ctx.root, target, ctx.backend, base.params, timings))
    return replace(base, tuned=w.tuned), ()


# -- joining studies in a shared storage (ktune worker) -----------------------------


def join_studies(root: Path, settings: TuneSettings, names: Sequence[str] | None, *, backend: str,
                 wait_s: float = 30.0) -> int:
    """Run trials for the pytest-ktune studies in ``settings.storage`` until their budgets are spent.

    Each study names its target, key and budget (set by the ``ktune tune`` that created it); only
    studies for this worker's device are joined. Returns the trials this worker timed.
    """
    import optuna

    from . import backends
    from ._discover import import_file

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage, storage_name = open_storage(settings.storage, root / ".ktune")
    backend = backends.resolve(backend)
    timed = 0
    waited_since = time.monotonic()
    finished: set[str] = set()
    while True:
        try:
            summaries = optuna.get_all_study_summaries(storage, include_best_trial=False)
        except Exception as exc:
            raise KtuneError(f"cannot list the studies in {storage_name}: {type(exc).__name__}: "
                             f"{_first_line(str(exc))}", hint="check the storage URL and the server") from None
        open_studies = [s for s in summaries if "ktune" in s.user_attrs and s.study_name not in finished
                        and (not names or s.study_name in names) and s.user_attrs["ktune"]["backend"] == backend]
        if not open_studies:
            if time.monotonic() - waited_since > wait_s:
                return timed
            time.sleep(0.5)
            continue
        for summary in open_studies:
            attrs = summary.user_attrs["ktune"]
            module = import_file(Path(attrs["file"]) if Path(attrs["file"]).is_absolute()
                                 else root / attrs["file"])
            target = next((v for v in vars(module).values() if isinstance(v, Target)
                           and v.name == attrs["name"]), None)
            if target is None:
                raise KtuneError(f"the study {summary.study_name!r} names target {attrs['name']} in "
                                 f"{attrs['file']}, which this checkout does not define",
                                 hint="run the worker from the same revision of the project")
            spec = WorkerSpec(target=TargetRef.of(target), backend=backend, cases=tuple(attrs["cases"]),
                              cache_dir=str(root / ".ktune" / "cache" / backend))
            enc = Encoding(target)
            study = optuna.load_study(study_name=summary.study_name, storage=storage,
                                      sampler=make_sampler(settings.sampler, settings.seed, enc,
                                                           list(target.space.feasible(attrs["key"]))))
            budget = replace(settings, trials=int(attrs["trials"]))
            with WorkerPool(spec, trial_timeout_s=settings.trial_timeout_s) as pool:
                pool.ensure()
                if pool.device.id != attrs["device"]:
                    finished.add(summary.study_name)
                    continue
                loop = _Loop(study, enc, target, key=attrs["key"], pool=pool, settings=budget)
                before = sum(1 for r in loop.rows if r.state == "timed")
                loop.run(None)
                timed += sum(1 for r in loop.rows if r.state == "timed") - before
            finished.add(summary.study_name)
            waited_since = time.monotonic()
