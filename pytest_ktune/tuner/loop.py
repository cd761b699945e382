"""The ask / evaluate / tell loop of one study, and the study's trials read back."""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import random
import threading
import time
import warnings
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytest_ktune.core.space import Value, config_key
from pytest_ktune.core.target import Target
from pytest_ktune.measure.worker import CandidatePool, Outcome
from pytest_ktune.tuner.encoding import Encoding
from pytest_ktune.tuner.outcome import TrialRow
from pytest_ktune.tuner.settings import TuneSettings

STUCK_AFTER = 2  # proposals in a row that bring nothing new before the loop picks an untried configuration
ASK_WAIT_S = 5.0  # how long a proposal waits for another process's earlier trial to have all its parameters

if TYPE_CHECKING:
    import optuna


class StudyLoop:
    """The ask / evaluate / tell loop of one study; shared by the tuner and `ktune worker`."""

    def __init__(self, study: optuna.Study, encoding: Encoding, target: Target, *, key: Mapping[str, Any],
                 pool: CandidatePool, settings: TuneSettings, classes: Mapping[str, str] | None = None,
                 device: str | None = None) -> None:
        """``device``: the label of the device ``pool`` runs on where several tune one study
        (``tuner.devices``), kept on each of its trials as the user attribute ``device``."""
        self.study = study
        # Equivalent configurations (``equivalence``): one of a class timed, the others are answered from it.
        self.classes = dict(classes or {})
        # The budget, at most one trial a class: once every class is timed there is nothing new to time.
        self.budget = min(settings.trials, len(set(self.classes.values()))) if self.classes else settings.trials
        self.enc = encoding
        self.target = target
        self.key = dict(key)
        self.pool = pool
        self.settings = settings
        self.infeasible = 0
        self.failed = 0
        self.rows: list[Any] = []
        self._feasible: list[tuple[str, dict[str, Value]]] | None = None  # (class, configuration), once listed
        self._classes_by_number: dict[int, str] = {}  # trial number -> its configuration's class
        self.device = device
        self.stop = threading.Event()  # set: the loop ends before its next batch (another device's loop ended it)
        # held from the budget's check to the ask: the loops of several devices in one process share one, so
        # that two never both see the last trial of the budget free (``tuner.devices``)
        self.asking: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        self._untold: dict[int, tuple[Any, dict[str, Value]]] = {}  # the batch's trials not told yet, by number

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

        They count against the budget while they run, so that several processes (or the loops of
        several devices, ``tuner.devices``) do not each take the whole remainder of it. Always 0 for a
        local tune on one device, which holds the study alone."""
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
        while self.timed() < self.budget and not self.stop.is_set():
            if deadline is not None and time.monotonic() > deadline:
                return True
            batch: list[tuple[Any, dict[str, Value]]] = []
            in_batch: set[str] = set()
            busy = 0
            while len(batch) < settings.batch:
                with self.asking:
                    busy = self.in_flight({t.number for t, _ in batch})
                    if self.timed() + busy + len(batch) >= self.budget or fruitless > limit:
                        break
                    if stuck >= STUCK_AFTER:
                        # The sampler keeps proposing what was seen: time a configuration it has not tried
                        # instead, so that a budget as large as the space covers the space.
                        self._explore(in_batch, seed)
                        stuck = 0
                    trial = self.study.ask(self.enc.distributions)
                cfg = self.enc.decode(trial.params)
                ck = self._class(cfg)
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
                    same = config_key(self.enc.decode(twin.params)) == config_key(cfg)
                    if not same:
                        trial.set_user_attr("equivalent", "the same program and launches")
                    self.study.tell(trial, twin.value)
                    fruitless += 1
                    self._row(trial.number, cfg, "duplicate", twin.value, attrs=trial.user_attrs,
                              reason=f"same as trial {twin.number}" if same else
                              f"equivalent to trial {twin.number}: the same program and launches")
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
            self._untold = {t.number: (t, c) for t, c in batch}
            if self.device is not None:
                for trial, _ in batch:
                    trial.set_user_attr("device", self.device)
            for (trial, cfg), out in zip(batch, self.pool.evaluate([c for _, c in batch], seed),
                                         strict=True):
                self._tell(trial, cfg, out)
                if on_trial is not None:
                    on_trial()
        return True

    def hand_back(self, why: str) -> list[int]:
        """Fail the trials of the batch that were not told (this loop's device was lost: ``why``) and
        queue their configurations again, for the loops of the devices still running; their numbers."""
        from optuna.trial import TrialState

        numbers = []
        for number, (trial, cfg) in sorted(self._untold.items()):
            with contextlib.suppress(Exception):  # a trial the storage holds as finished already
                trial.set_user_attr("lost", why)
                # Queued before the trial ends, so that no other loop finds the budget free in between
                # and asks its sampler instead.
                self.study.enqueue_trial(self.enc.encode(cfg), user_attrs={"source": "retry", "retry_of": number})
                self.study.tell(trial, state=TrialState.FAIL)
                numbers.append(number)
        self._untold = {}
        return numbers

    def _explore(self, in_batch: Collection[str], seed: int) -> None:
        """Queue one feasible configuration the study has neither tried nor queued, drawn at random
        (seeded by the run's seed and the study's size, so a replay repeats itself)."""
        known = {self._class(self.enc.decode(t.params)) for t in self._trials() if t.params} | set(in_batch)
        if self._feasible is None:  # listed once: a space of thousands of points is explored many times
            self._feasible = [(self._class(c), c) for c in self.target.space.feasible(self.key)]
        untried = [c for ck, c in self._feasible if ck not in known]
        if untried:
            pick = random.Random(f"{seed}:{len(known)}").choice(untried)
            enqueue(self.study, self.enc, [("explore", pick)])

    def _class(self, cfg: Mapping[str, Value]) -> str:
        """The configuration's class: the configuration itself, unless equivalent ones were found."""
        ck = config_key(cfg)
        return self.classes.get(ck, ck)

    def _asked(self, trial: Any) -> bool:
        """Whether every parameter of ``trial`` is in the storage: an ask writes them one at a time, so a
        process sharing the study may read another's trial with only some of them."""
        return len(trial.params) >= len(self.enc.distributions)

    def _class_of(self, trial: Any) -> str:
        """The class of a trial's configuration (remembered by trial number: a trial's parameters are
        set once, and every proposal looks through all the trials of the study). Only for a trial whose
        parameters are all written (``_asked``)."""
        ck = self._classes_by_number.get(trial.number)
        if ck is None:
            ck = self._classes_by_number[trial.number] = self._class(self.enc.decode(trial.params))
        return ck

    def _twin(self, number: int, ck: str) -> Any:
        """The lowest-numbered other trial of the same class (``ck``) that is running or complete.

        The lower number times the configuration, a higher one is answered from it; so this waits for the
        lower-numbered trials that other processes are still asking (their parameters half written) to be
        complete, or else two processes could each miss the other's trial and time one configuration twice
        (bounded: a process that died while asking leaves a trial without parameters)."""
        from optuna.trial import TrialState

        end = time.monotonic() + ASK_WAIT_S
        while True:
            trials = sorted(self._trials(TrialState.COMPLETE, TrialState.RUNNING), key=lambda t: t.number)
            recent = datetime.datetime.now() - datetime.timedelta(seconds=ASK_WAIT_S)
            if time.monotonic() > end or all(self._asked(t) for t in trials if t.number < number
                                             and (t.datetime_start is None or t.datetime_start > recent)):
                break
            time.sleep(0.02)
        for t in trials:
            if t.number != number and self._asked(t) and self._class_of(t) == ck and "duplicate" not in t.user_attrs:
                return t if t.number < number or t.state == TrialState.COMPLETE else None
        return None

    def _broken_before(self, number: int, ck: str) -> Any:
        """A trial of the study in which this configuration failed or proved infeasible, or None
        (trials failed only because a run was interrupted carry no reason, and do not count)."""
        from optuna.trial import TrialState

        for t in self._trials(TrialState.FAIL):
            if t.number != number and self._asked(t) and ("failed" in t.user_attrs or "infeasible" in t.user_attrs) \
                    and self._class_of(t) == ck:
                return t
        return None

    def _tell(self, trial: Any, cfg: dict[str, Value], out: Outcome) -> None:
        from optuna.trial import TrialState

        self._untold.pop(trial.number, None)
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

        self.rows.append(TrialRow(number=number, params=dict(cfg), state=state, value_us=value,
                                  reason=reason, source=str(attrs.get("source", "sampler")),
                                  compile_s=out.compile_s if out else 0.0, run_s=out.run_s if out else 0.0))


def trial_rows(study: optuna.Study, enc: Encoding) -> list[Any]:
    """A report row for every trial of the study, this run's and earlier ones'."""
    from optuna.trial import TrialState


    rows = []
    for t in study.get_trials(deepcopy=False):
        if not t.params:
            continue
        a = t.user_attrs
        if t.state == TrialState.COMPLETE:
            state = "duplicate" if a.get("duplicate") is not None else "timed"
            reason = "" if state != "duplicate" else f"equivalent to trial {a['duplicate']}: {a['equivalent']}" \
                if "equivalent" in a else f"same as trial {a['duplicate']}"
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


def enqueue(study: optuna.Study, enc: Encoding, configs: Sequence[tuple[str, Mapping[str, Value]]]) -> None:
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


def best_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    from optuna.trial import TrialState

    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.value is not None]
    return min(done, key=lambda t: (t.value, t.number)) if done else None


def value_of(study: optuna.Study, enc: Encoding, cfg: Mapping[str, Value]) -> float | None:
    from optuna.trial import TrialState

    ck = config_key(cfg)
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.value is not None and config_key(enc.decode(t.params)) == ck:
            return float(t.value)
    return None


def fail_running(study: optuna.Study) -> None:
    from optuna.trial import TrialState

    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        with contextlib.suppress(Exception):
            study.tell(t.number, state=TrialState.FAIL)


MIN_TRIALS_FOR_IMPORTANCE = 4


def importances_of(study: optuna.Study) -> dict[str, float] | None:
    """PED-ANOVA importances of a finished single-objective study, or None when they would mean nothing.

    None when fewer than ``MIN_TRIALS_FOR_IMPORTANCE`` trials completed with a
    finite value, when the evaluator itself says the importances come out all
    equal, or when Optuna raises anything: a report must never end a tune.
    """
    try:
        import optuna
        from optuna.trial import TrialState

        if len(study.directions) != 1:
            return None
        completed = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        finite = [t.value for t in completed if t.value is not None and math.isfinite(t.value)]
        if len(finite) < MIN_TRIALS_FOR_IMPORTANCE:
            return None
        # PED-ANOVA ranks trials lowest-first; a maximised study is negated, and an
        # infeasible trial stored as inf or NaN ranks behind every finite one.
        sign = -1.0 if study.direction == optuna.study.StudyDirection.MAXIMIZE else 1.0
        worst = max(sign * v for v in finite)
        worse = worst + abs(worst) + 1.0

        def target(trial: Any) -> float:
            v = trial.value
            return float(sign * v) if v is not None and math.isfinite(v) else worse

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = optuna.importance.get_param_importances(
                study, evaluator=optuna.importance.PedAnovaImportanceEvaluator(), target=target)
        if any("will be equal" in str(w.message) for w in caught):
            return None
        cleaned = {str(k): float(v) for k, v in result.items() if math.isfinite(float(v))}
        return cleaned or None
    except Exception:
        return None
