"""Check the tuner against brute force: the exhaustive optimum, a live TPE tune, and TPE against random.

For one tuning key of each example target (``rmsnorm``, ``silu_and_mul``):

1. **Landscape**: every feasible point of the target's Space for the key is timed through the
   tuner's own isolated worker (``WorkerPool.evaluate``, the same verification and timing the
   tuner uses), giving {configuration -> median µs, or why it failed}. The fastest point is the
   exhaustive optimum.
2. **Live tune**: ``tune_key`` with TPE (it writes nothing), in a temporary copy of
   ``example_project`` (fresh study, fresh compile cache, no params file), compared with the
   default and with the optimum, both read from the landscape.
3. **Replay**: TPE (exactly ``make_sampler("tpe", seed, Encoding(target))``) and random search,
   both starting from the default as the tuner does, are replayed on the measured landscape for
   several seeds: asked and told through an in-memory Optuna study with the tuner's rules (batches,
   no configuration timed twice, failures told as FAIL and not counted). Reported: trials needed to
   come within 5 % and 3 % of the optimum, and hit rates at the budget B = min(60, ceil(feasible/4)).
4. **Goals**, printed as PASS/MISS lines (the script does not fail on a MISS).

Run: ``python3 benchmarks/bench_tuner.py --backend cuda``; ``--backend opencl --quick`` is a
smoke test on a CPU (PoCL).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import importlib.metadata
import math
import os
import random
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common

common.add_repo_to_path()

from pytest_ktune.core.errors import KtuneError  # noqa: E402
from pytest_ktune.core.keys import cases_by_key  # noqa: E402
from pytest_ktune.core.space import Value, config_key  # noqa: E402
from pytest_ktune.core.target import Target  # noqa: E402
from pytest_ktune.measure.worker import CaseTime, Outcome, TargetRef, WorkerPool, WorkerSpec  # noqa: E402
from pytest_ktune.tuner.encoding import Encoding  # noqa: E402
from pytest_ktune.tuner.outcome import TuneOutcome  # noqa: E402
from pytest_ktune.tuner.samplers import make_sampler  # noqa: E402
from pytest_ktune.tuner.settings import TuneContext, TuneSettings  # noqa: E402
from pytest_ktune.tuner.tune import tune_key  # noqa: E402

TOLERANCES = (0.05, 0.03)  # "within 5 %" and "within 3 %" of the optimum
GOAL_TOL = 0.03
BUDGET_CAP = 60  # B = min(BUDGET_CAP, ceil(feasible / 4))
CHUNK = 8  # configurations per worker request in the sweep (compiled in parallel, then timed one by one)
TARGETS = ("rmsnorm", "silu_and_mul")
DEFAULT_KEYS = "rmsnorm=T64-H4096-float16,silu_and_mul=T256-I14336-float16"
QUICK_KEYS = "rmsnorm=T1-H4096-float16,silu_and_mul=T16-I14336-float16"
REACHED, EXHAUSTED = "reached", "every feasible point counted"  # how a replay ends normally


def budget_for(feasible: int) -> int:
    """The equal-budget point of the comparison: a quarter of the feasible space, at most 60 trials."""
    return max(1, min(BUDGET_CAP, math.ceil(feasible / 4)))


def params_text(p: Mapping[str, Any] | None) -> str:
    return " ".join(f"{k}={v}" for k, v in p.items()) if p else "n/a"


def fmt_v(us_value: float | None) -> str:
    return "n/a" if us_value is None else common.fmt_us(us_value * 1e-6)


def fmt_pct(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:+.1f} %"


# -- choosing the keys --------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyChoice:
    """One target and one tuning key, with the indices of the key's cases."""

    target: Target
    case_id: str  # the case the key was chosen by
    key: dict[str, Any]
    case_indices: tuple[int, ...]

    @property
    def case_ids(self) -> list[str]:
        return [self.target.case_id(self.target.cases[i]) for i in self.case_indices]

    @property
    def label(self) -> str:
        return f"{self.target.name}[{self.case_id}]"


def parse_keys(text: str) -> list[tuple[str | None, str]]:
    """``target=substring`` or a bare ``substring`` (for every target), comma-separated."""
    out: list[tuple[str | None, str]] = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        name, sep, sub = item.partition("=")
        out.append((name.strip(), sub.strip()) if sep else (None, item))
    return out


def choose_keys(targets: Sequence[Target], backend: str, spec: str) -> tuple[list[KeyChoice], list[str]]:
    """For each target, the first case (on this backend) whose id equals, else contains, a wanted text."""
    wanted = parse_keys(spec)
    unknown = sorted({n for n, _ in wanted if n is not None} - {t.name for t in targets})
    if unknown:
        raise SystemExit(f"error: --keys names unknown target(s) {unknown}; known: {[t.name for t in targets]}")
    chosen: list[KeyChoice] = []
    notes: list[str] = []
    for target in targets:
        subs = [s for n, s in wanted if n in (None, target.name)]
        if not subs:
            continue
        if backend not in target.sources:
            notes.append(f"{target.name}: no {backend} source, skipped")
            continue
        by_key = cases_by_key(target, backend)
        cases = [(i, target.case_id(c)) for i, c in enumerate(target.cases) if c.runs_on(backend)]
        hit = None
        for sub in subs:
            hit = next(((i, cid) for i, cid in cases if cid == sub), None) or \
                next(((i, cid) for i, cid in cases if sub in cid), None)
            if hit:
                break
        if hit is None:
            notes.append(f"{target.name}: no case on {backend} matches {subs}; cases: {[c for _, c in cases]}")
            continue
        i, cid = hit
        key = target.case_key(target.cases[i])
        indices = next(idx for k, idx in by_key.values() if k == key)
        chosen.append(KeyChoice(target, cid, dict(key), tuple(indices)))
    return chosen, notes


# -- a fresh project copy -----------------------------------------------------------------------


def make_project(tmp: Path) -> Path:
    """Copy example_project into ``tmp`` (no .ktune, no params file) and put the copy first on sys.path,
    so that its targets, its studies and its compile caches live in ``tmp``."""
    dest = tmp / "example_project"
    shutil.copytree(common.ROOT / "example_project", dest,
                    ignore=shutil.ignore_patterns(".ktune", "__pycache__", "ktune-params.json"))
    sys.path.insert(0, str(tmp))
    return dest


def load_targets(project: Path) -> list[Target]:
    found: list[Target] = []
    for name in TARGETS:
        module = importlib.import_module(f"example_project.kernels.{name}")
        target = getattr(module, name)
        if not isinstance(target, Target):
            raise SystemExit(f"error: example_project.kernels.{name}.{name} is not a ktune target")
        if project.resolve() not in target.file.resolve().parents:
            raise SystemExit(f"error: {name} was imported from {target.file}, not from the temporary copy")
        found.append(target)
    return found


# -- 1. the landscape ---------------------------------------------------------------------------


@dataclass
class Point:
    """One point of the space for the key: how it fared in the sweep."""

    params: dict[str, Value]
    status: str  # ok | failed | infeasible (device limit, from the worker) | constraint (never timed)
    reason: str = ""
    value_s: float | None = None  # the tuner's objective: sum over the key's cases of the median
    cases: list[dict[str, Any]] = field(default_factory=list)
    compile_s: float = 0.0
    run_s: float = 0.0
    resources: dict[str, int] = field(default_factory=dict)
    order: int | None = None  # position in the timing order

    @property
    def us(self) -> float | None:
        return None if self.value_s is None else self.value_s * 1e6

    def to_json(self) -> dict[str, Any]:
        return {"params": self.params, "status": self.status, "reason": self.reason,
                "median_us": common.us(self.value_s), "cases": self.cases,
                "compile_s": round(self.compile_s, 4), "run_s": round(self.run_s, 4),
                "resources": self.resources, "order": self.order}


@dataclass
class Landscape:
    choice: KeyChoice
    points: list[Point]
    wall_s: float = 0.0
    start_s: float = 0.0
    restarts: int = 0
    device: Any = None
    error: str = ""

    @property
    def feasible(self) -> list[Point]:
        return [p for p in self.points if p.status != "constraint"]

    @property
    def ok(self) -> list[Point]:
        return [p for p in self.points if p.status == "ok" and p.value_s is not None]

    def value_of(self, cfg: Mapping[str, Value]) -> float | None:
        """The objective (seconds) of a configuration, None when it is not a timed point."""
        ck = config_key(cfg)
        return next((p.value_s for p in self.ok if config_key(p.params) == ck), None)

    def values(self) -> dict[str, float]:
        return {config_key(p.params): p.value_s for p in self.ok if p.value_s is not None}

    @property
    def optimum(self) -> Point | None:
        ok = self.ok
        return min(ok, key=lambda p: p.value_s or math.inf) if ok else None

    @property
    def default(self) -> Point | None:
        ck = config_key(self.choice.target.default)
        return next((p for p in self.points if config_key(p.params) == ck), None)

    def within(self, tol: float) -> int:
        opt = self.optimum
        if opt is None or opt.value_s is None:
            return 0
        return sum(1 for p in self.ok if p.value_s is not None and p.value_s <= opt.value_s * (1 + tol))


def case_json(t: CaseTime) -> dict[str, Any]:
    return {"case": t.case_id, "median_us": common.us(t.median_s), "iqr_us": common.us(t.iqr_s),
            "ci_us": [common.us(t.ci[0]), common.us(t.ci[1])], "samples": len(t.samples)}


def measure_landscape(choice: KeyChoice, backend: str, cache_dir: Path, *, seed: int,
                      trial_timeout_s: float) -> Landscape:
    """Time every feasible point for the key in the tuner's worker, in a shuffled order (so that a slow
    drift of the device does not favour one corner of the space)."""
    target, key = choice.target, choice.key
    feasible = [config_key(p) for p in target.space.feasible(key)]
    points: list[Point] = []
    for p in target.space.points():
        broken = target.space.violated(p, key)
        points.append(Point(dict(p), "constraint", "; ".join(broken)) if broken else Point(dict(p), "pending"))
    by_ck = {config_key(p.params): p for p in points}
    order = [by_ck[ck] for ck in feasible]
    random.Random(seed).shuffle(order)
    land = Landscape(choice, points)
    spec = WorkerSpec(target=TargetRef.of(target), backend=backend, cases=choice.case_indices,
                      cache_dir=str(cache_dir))
    t0 = time.perf_counter()
    try:
        with WorkerPool(spec, trial_timeout_s=trial_timeout_s) as pool:
            pool.ensure()
            land.device = pool.device
            land.start_s = time.perf_counter() - t0
            for start in range(0, len(order), CHUNK):
                chunk = order[start:start + CHUNK]
                outs = pool.evaluate([p.params for p in chunk], seed + start)
                for j, (pt, out) in enumerate(zip(chunk, outs, strict=True)):
                    record(pt, out, start + j)
                done = min(start + CHUNK, len(order))
                print(f"  sweep {done}/{len(order)}  [{time.perf_counter() - t0:.0f} s]", flush=True)
            land.restarts = pool.restarts
    except KtuneError as exc:
        land.error = exc.message
    land.wall_s = time.perf_counter() - t0
    return land


def record(pt: Point, out: Outcome, order: int) -> None:
    pt.order = order
    pt.status = out.status
    pt.reason = out.reason
    pt.compile_s, pt.run_s = out.compile_s, out.run_s
    pt.resources = dict(out.resources)
    if out.status == "ok":
        pt.value_s = out.value_s
        pt.cases = [case_json(t) for t in out.times]


# -- 2. the live tune ---------------------------------------------------------------------------


def live_tune(choice: KeyChoice, backend: str, root: Path, land: Landscape, *, trials: int, seed: int,
              trial_timeout_s: float, timeout_s: float | None) -> dict[str, Any]:
    settings = TuneSettings(trials=trials, sampler="tpe", seed=seed, storage=None,
                            trial_timeout_s=trial_timeout_s, timeout_s=timeout_s)
    ctx = TuneContext(root=root, params_path=root / "ktune-params.json", backend=backend, settings=settings,
                      progress=sys.stderr)
    t0 = time.perf_counter()
    try:
        out: TuneOutcome = tune_key(ctx, choice.target, choice.key, choice.case_indices)
    except KtuneError as exc:
        return {"status": "failed", "error": exc.render(),
                "wall_s": round(time.perf_counter() - t0, 2), "budget": trials}
    wall = time.perf_counter() - t0
    trial_rows, why = study_rows(ctx, out.study, choice.target)
    distinct = sum(1 for r in trial_rows if r["state"] == "timed") if trial_rows else None
    best_land = land.value_of(out.best_params)
    default_land = land.default.value_s if land.default else None
    opt = land.optimum
    res: dict[str, Any] = {
        "status": "ok", "budget": trials, "seed": seed, "study": out.study,
        "tuner_timed": out.timed, "distinct_timed": distinct, "infeasible": out.infeasible, "failed": out.failed,
        "best_params": dict(out.best_params), "best_us_own": out.best_us,
        "best_us_landscape": common.us(best_land), "default_us_own": out.default_us,
        "default_us_landscape": common.us(default_land),
        "tuned_over_default_landscape": best_land / default_land if best_land and default_land else None,
        "tuned_over_default_own": out.best_us / out.default_us if out.default_us else None,
        "gap_to_optimum": best_land / opt.value_s - 1 if best_land and opt and opt.value_s else None,
        "accepted": out.accepted, "decision": out.decision, "tune_wall_s": round(out.wall_s, 2),
        "wall_s": round(wall, 2), "trials": trial_rows, "trials_note": why,
        "compile_s_sum": round(sum(r.get("compile_s", 0.0) for r in trial_rows), 3),
        "run_s_sum": round(sum(r.get("run_s", 0.0) for r in trial_rows), 3),
    }
    return res


def study_rows(ctx: TuneContext, study_name: str, target: Target) -> tuple[list[dict[str, Any]], str]:
    """Every trial of the live tune's study, in order, read back from its storage."""
    try:
        import optuna
        from optuna.trial import TrialState

        from pytest_ktune.tuner.storage import open_storage

        storage, _ = open_storage(ctx.settings.storage, ctx.scratch)
        study = optuna.load_study(study_name=study_name, storage=storage)
        enc = Encoding(target)
        rows = []
        for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
            a = t.user_attrs
            if t.state == TrialState.COMPLETE:
                state = "duplicate" if "duplicate" in a else "timed"
            elif "infeasible" in a:
                state = "infeasible"
            elif "failed" in a:
                state = "failed"
            elif "skipped" in a:
                state = "skipped"
            else:
                state = str(t.state.name).lower()
            rows.append({"number": t.number, "params": enc.decode(t.params) if t.params else {},
                         "state": state, "value_us": t.value if t.state == TrialState.COMPLETE else None,
                         "source": a.get("source", "sampler"), "duplicate_of": a.get("duplicate"),
                         "reason": a.get("infeasible") or a.get("failed") or "",
                         "compile_s": float(a.get("compile_s", 0.0)), "run_s": float(a.get("run_s", 0.0))})
        return rows, ""
    except Exception as exc:  # the summary still stands without the trial list
        return [], f"could not read the study back: {type(exc).__name__}: {exc}"


# -- 3. replaying samplers on the landscape -----------------------------------------------------


@dataclass
class Run:
    """One replayed search: the counted trials in order (configuration key, objective in seconds)."""

    sampler: str
    seed: int
    counted: list[tuple[str, float]] = field(default_factory=list)
    asks: int = 0
    duplicates: int = 0
    skipped: int = 0
    infeasible: int = 0
    failed_evals: int = 0
    failed_skips: int = 0
    stop: str = ""

    def trials_to(self, goal_s: float) -> int | None:
        best = math.inf
        for n, (_, v) in enumerate(self.counted, 1):
            best = min(best, v)
            if best <= goal_s:
                return n
        return None

    def best_at(self, n: int) -> float | None:
        vals = [v for _, v in self.counted[:n]]
        return min(vals) if vals else None


def new_study(target: Target, key: Mapping[str, Any], sampler: str, seed: int) -> tuple[Any, Encoding]:
    """An in-memory study with the tuner's sampler and its warm start (the default, enqueued first)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    enc = Encoding(target)
    study = optuna.create_study(direction="minimize", sampler=make_sampler(sampler, seed, enc))
    default = dict(target.default)
    if target.space.valid(default, key):
        study.enqueue_trial(enc.encode(default), user_attrs={"source": "warm-start", "warm_start": "default"})
    return study, enc


def replay(land: Landscape, sampler: str, seed: int, *, budget: int, stop_tol: float, batch: int) -> Run:
    """Ask and tell as the tuner's loop does, with the landscape as the objective. Stops once the best is
    within ``stop_tol`` of the optimum and ``budget`` trials are counted, when every feasible point has
    been counted, or when the sampler keeps proposing points it has seen (the tuner's own limit)."""
    from optuna.trial import TrialState

    target, key = land.choice.target, land.choice.key
    study, enc = new_study(target, key, sampler, seed)
    values = land.values()
    opt = land.optimum
    goal = opt.value_s * (1 + stop_tol) if opt and opt.value_s else -math.inf
    cap = len(land.feasible)
    limit = max(50, 3 * target.space.size)  # the tuner's "fruitless" limit
    ask_cap = 50 * target.space.size  # ours, a safety net; the tuner's limit above ends its loop first
    run = Run(sampler, seed)
    timed: dict[str, float] = {}
    broken: set[str] = set()  # failed or infeasible on the device: the tuner never runs these again
    fruitless = 0
    best = math.inf
    while len(run.counted) < cap:
        pending: list[tuple[Any, str]] = []
        in_batch: set[str] = set()
        while len(pending) < batch and len(run.counted) + len(pending) < cap:
            if fruitless > limit or run.asks >= ask_cap:
                break
            trial = study.ask(enc.distributions)
            run.asks += 1
            cfg = enc.decode(trial.params)
            ck = config_key(cfg)
            if target.space.violated(cfg, key):
                study.tell(trial, state=TrialState.FAIL)
                run.infeasible += 1
                fruitless += 1
            elif ck in in_batch:
                study.tell(trial, state=TrialState.FAIL)
                run.skipped += 1
                fruitless += 1
            elif ck in timed:
                study.tell(trial, timed[ck] * 1e6)
                run.duplicates += 1
                fruitless += 1
            elif ck in broken:
                study.tell(trial, state=TrialState.FAIL)
                run.failed_skips += 1
                fruitless += 1
            else:
                fruitless = 0
                in_batch.add(ck)
                pending.append((trial, ck))
        if not pending:
            run.stop = f"ask cap ({ask_cap} asks)" if run.asks >= ask_cap else \
                "the sampler kept proposing seen points (the tuner's limit)"
            return run
        for trial, ck in pending:
            v = values.get(ck)
            if v is None:  # failed or infeasible on the device: told FAIL, not counted
                study.tell(trial, state=TrialState.FAIL)
                run.failed_evals += 1
                broken.add(ck)
                continue
            study.tell(trial, v * 1e6)
            timed[ck] = v
            run.counted.append((ck, v))
            best = min(best, v)
            if best <= goal and len(run.counted) >= budget:
                run.stop = REACHED
                return run
    run.stop = EXHAUSTED
    return run


class Enough(Exception):
    """Raised by the stand-in worker to end the tuner's loop."""


class LandscapePool:
    """A stand-in for WorkerPool whose outcomes are read from the landscape (for the cross-check). It ends
    the loop (raising ``Enough``) when asked for more after ``stop_after_ok`` timed points, or after
    ``max_evals`` evaluations."""

    def __init__(self, land: Landscape, *, max_evals: int, stop_after_ok: int) -> None:
        self.by_ck = {config_key(p.params): p for p in land.points}
        self.evals = 0
        self.ok = 0
        self.failed = 0
        self.max_evals = max_evals
        self.stop_after_ok = stop_after_ok

    def evaluate(self, configs: Sequence[Mapping[str, Value]], seed: int) -> Iterator[Outcome]:
        for cfg in configs:
            if self.ok >= self.stop_after_ok:
                raise Enough(f"stopped after {self.ok} timed points")
            self.evals += 1
            if self.evals > self.max_evals:
                raise Enough(f"stopped after {self.max_evals} evaluations")
            p = self.by_ck.get(config_key(cfg))
            if p is None or p.value_s is None:
                self.failed += 1
                yield Outcome(dict(cfg), "failed" if p is None or p.status != "infeasible" else "infeasible",
                              p.reason if p else "not in the landscape")
                continue
            v = p.value_s
            self.ok += 1
            yield Outcome(dict(cfg), "ok", times=(CaseTime("landscape", v, (v,), (v, v), 0.0),))


def cross_check(land: Landscape, run: Run, batch: int) -> dict[str, Any]:
    """Run the tuner's own ask/evaluate/tell loop (``StudyLoop``) on the landscape, with the replay's budget
    (every feasible point), until it has timed as many points as ``run`` counted; compare the sequences."""
    try:
        from optuna.trial import TrialState

        from pytest_ktune.tuner.loop import StudyLoop

        target, key = land.choice.target, land.choice.key
        study, enc = new_study(target, key, run.sampler, run.seed)
        pool = LandscapePool(land, max_evals=50 * target.space.size, stop_after_ok=len(run.counted))
        settings = TuneSettings(trials=max(1, len(land.feasible)), sampler=run.sampler, seed=run.seed,
                                batch=batch)
        loop = StudyLoop(study, enc, target, key=key, pool=pool, settings=settings)  # type: ignore[arg-type]
        note = ""
        try:
            loop.run(None)
        except Enough as exc:
            note = str(exc)
        done = sorted(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), key=lambda t: t.number)
        seq = [config_key(enc.decode(t.params)) for t in done if "duplicate" not in t.user_attrs]
        mine = [ck for ck, _ in run.counted]
        same = 0
        for a, b in zip(seq, mine, strict=False):
            if a != b:
                break
            same += 1
        compared = min(len(seq), len(mine))
        return {"sampler": run.sampler, "seed": run.seed, "replay_counted": len(mine),
                "loop_distinct_timed": len(seq), "loop_timed_count": loop.timed(), "agree_prefix": same,
                "agrees": same == compared and compared > 0, "loop_evaluations": pool.evals,
                "loop_failed_evaluations": pool.failed, "note": note}
    except Exception as exc:
        return {"sampler": run.sampler, "seed": run.seed, "agrees": None,
                "error": f"{type(exc).__name__}: {exc}"}


def median_inf(values: Sequence[float]) -> float:
    """The median, with math.inf standing for "not reached"."""
    s = sorted(values)
    if not s:
        return math.nan
    mid = len(s) // 2
    if len(s) % 2:
        return s[mid]
    lo, hi = s[mid - 1], s[mid]
    return math.inf if math.isinf(lo) or math.isinf(hi) else (lo + hi) / 2


def summarize(land: Landscape, runs: Sequence[Run], budget: int) -> dict[str, Any]:
    opt = land.optimum
    assert opt is not None and opt.value_s is not None
    out: dict[str, Any] = {"budget": budget, "seeds": len(runs)}
    for tol in TOLERANCES:
        goal = opt.value_s * (1 + tol)
        to = [r.trials_to(goal) for r in runs]
        med = median_inf([math.inf if n is None else float(n) for n in to])
        tag = f"{round(100 * tol)}pct"
        out[f"trials_to_{tag}"] = to
        out[f"median_trials_to_{tag}"] = None if math.isinf(med) else med
        out[f"not_reached_{tag}"] = sum(1 for n in to if n is None)
        out[f"hits_at_budget_{tag}"] = sum(1 for r in runs if (b := r.best_at(budget)) is not None and b <= goal)
    ratios = [b / opt.value_s for r in runs if (b := r.best_at(budget)) is not None]
    out["median_best_over_optimum_at_budget"] = median_inf(ratios) if ratios else None
    out["stops"] = {s: sum(1 for r in runs if r.stop == s) for s in sorted({r.stop for r in runs})}
    out["asks"] = sum(r.asks for r in runs)
    out["counted"] = sum(len(r.counted) for r in runs)
    return out


def run_json(r: Run, land: Landscape) -> dict[str, Any]:
    text = {config_key(p.params): params_text(p.params) for p in land.points}
    return {"seed": r.seed, "stop": r.stop, "asks": r.asks, "duplicates": r.duplicates, "skipped": r.skipped,
            "infeasible": r.infeasible, "failed_evaluations": r.failed_evals, "failed_skipped": r.failed_skips,
            "trajectory": [[text.get(ck, ck), common.us(v)] for ck, v in r.counted]}


# -- report --------------------------------------------------------------------------------------


@dataclass
class KeyResult:
    choice: KeyChoice
    land: Landscape
    budget: int = 0
    tune: dict[str, Any] = field(default_factory=dict)
    runs: dict[str, list[Run]] = field(default_factory=dict)
    summary: dict[str, dict[str, Any]] = field(default_factory=dict)
    cross: list[dict[str, Any]] = field(default_factory=list)
    replay_s: float = 0.0
    goals: list[tuple[str, bool, str]] = field(default_factory=list)

    def paired(self, tol: float) -> dict[str, int]:
        """Seed by seed (the same seed for both samplers): who needed fewer trials to come within ``tol``."""
        opt = self.land.optimum
        tpe, rnd = self.runs.get("tpe", []), self.runs.get("random", [])
        out = {"tpe_fewer": 0, "equal": 0, "random_fewer": 0}
        if opt is None or opt.value_s is None:
            return out
        goal = opt.value_s * (1 + tol)
        for a, b in zip(tpe, rnd, strict=False):
            na, nb = a.trials_to(goal), b.trials_to(goal)
            x, y = math.inf if na is None else na, math.inf if nb is None else nb
            out["tpe_fewer" if x < y else "random_fewer" if y < x else "equal"] += 1
        return out

    def to_json(self) -> dict[str, Any]:
        land = self.land
        opt, dflt = land.optimum, land.default
        return {
            "target": self.choice.target.name, "case": self.choice.case_id, "cases": self.choice.case_ids,
            "case_indices": list(self.choice.case_indices), "key": self.choice.key,
            "space_size": self.choice.target.space.size, "feasible": len(land.feasible), "ok": len(land.ok),
            "budget": self.budget,
            "landscape": {
                "wall_s": round(land.wall_s, 2), "worker_start_s": round(land.start_s, 2),
                "worker_restarts": land.restarts, "error": land.error,
                "compile_s_sum": round(sum(p.compile_s for p in land.points), 3),
                "run_s_sum": round(sum(p.run_s for p in land.points), 3),
                "optimum": {"params": opt.params, "median_us": common.us(opt.value_s)} if opt else None,
                "default": {"params": dflt.params, "median_us": common.us(dflt.value_s),
                            "status": dflt.status} if dflt else None,
                "within": {f"{round(100 * t)}pct": land.within(t) for t in TOLERANCES},
                "points": [p.to_json() for p in land.points],
            },
            "live_tune": self.tune,
            "replay": {
                "wall_s": round(self.replay_s, 2),
                "samplers": {s: {"summary": self.summary.get(s, {}),
                                 "runs": [run_json(r, land) for r in rs]} for s, rs in self.runs.items()},
                "cross_check_with_tuner_loop": self.cross,
                "paired": {f"{round(100 * t)}pct": self.paired(t) for t in TOLERANCES},
            },
            "goals": [{"goal": g, "pass": ok, "detail": d} for g, ok, d in self.goals],
        }


def fmt_trials(med: float | None, missed: int, seeds: int) -> str:
    text = "not reached" if med is None else (f"{med:.0f}" if float(med).is_integer() else f"{med:.1f}")
    return f"{text} ({missed}/{seeds} not reached)" if missed else text


def set_goals(r: KeyResult) -> None:
    tpe, rnd = r.summary.get("tpe"), r.summary.get("random")
    label = r.choice.label
    b = r.budget
    n = len(r.land.feasible)
    if tpe:
        med = tpe["median_trials_to_3pct"]
        ok = med is not None and med <= b
        r.goals.append((f"{label}: TPE within 3 % of the exhaustive optimum in at most B={b} trials (replay, "
                        f"median of {tpe['seeds']} seeds)", ok,
                        f"median {fmt_trials(med, tpe['not_reached_3pct'], tpe['seeds'])} trials; "
                        f"{tpe['hits_at_budget_3pct']}/{tpe['seeds']} seeds within 3 % at B; "
                        f"B = min({BUDGET_CAP}, ceil({n}/4))"))
    t = r.tune
    if t.get("status") == "ok":
        gap = t.get("gap_to_optimum")
        used = t.get("distinct_timed") if t.get("distinct_timed") is not None else t.get("tuner_timed")
        ok = gap is not None and gap <= GOAL_TOL and used is not None and used <= b
        r.goals.append((f"{label}: live TPE tune within 3 % of the exhaustive optimum in at most B={b} trials", ok,
                        f"{params_text(t['best_params'])}: {fmt_v(t['best_us_landscape'])} µs in the sweep, "
                        f"{fmt_pct(gap)} from the optimum, {used} trials"))
    elif t:
        r.goals.append((f"{label}: live TPE tune within 3 % of the exhaustive optimum", False,
                        f"the tune failed: {str(t.get('error', '')).splitlines()[0]}"))
    if tpe and rnd:
        mt, mr = tpe["median_trials_to_5pct"], rnd["median_trials_to_5pct"]
        ok = mt is not None and (mr is None or mt < mr)
        pair = r.paired(0.05)
        r.goals.append((f"{label}: TPE ahead of random at equal budget (fewer median trials to 5 %)", ok,
                        f"median trials TPE {fmt_trials(mt, tpe['not_reached_5pct'], tpe['seeds'])} vs random "
                        f"{fmt_trials(mr, rnd['not_reached_5pct'], rnd['seeds'])}; seed by seed TPE fewer / equal / "
                        f"more: {pair['tpe_fewer']} / {pair['equal']} / {pair['random_fewer']}; within 5 % at "
                        f"B={b}: TPE {tpe['hits_at_budget_5pct']}/{tpe['seeds']}, random "
                        f"{rnd['hits_at_budget_5pct']}/{rnd['seeds']}"))


def cross_notes(r: KeyResult) -> list[str]:
    """What the cross-check with the tuner's own loop found, in a line or a few."""
    if not r.cross:
        return []
    label = r.choice.label
    broken = [c for c in r.cross if c.get("agrees") is None]
    if broken:
        return [f"{label}: cross-check with the tuner's `StudyLoop` not run ({broken[0].get('error')})"]
    agree = [c for c in r.cross if c["agrees"]]
    out = [f"{label}: the tuner's own `StudyLoop`, run on the sweep through a stand-in worker with the same seeds, "
           f"timed the same configurations in the same order as the replay in {len(agree)} of {len(r.cross)} "
           "replays."]
    for c in [c for c in r.cross if not c["agrees"]][:4]:
        out.append(f"{label} {c['sampler']} seed {c['seed']}: `StudyLoop` agrees with the replay for the first "
                   f"{c['agree_prefix']} of {c['replay_counted']} timed points.")
    over = [c for c in r.cross if c["loop_timed_count"] != c["loop_distinct_timed"]]
    if over:
        c = over[0]
        out.append(f"{label}: in {len(over)} of {len(r.cross)} replays `StudyLoop.timed()` counted more trials than "
                   f"distinct configurations timed (e.g. {c['sampler']} seed {c['seed']}: {c['loop_timed_count']} "
                   f"counted, {c['loop_distinct_timed']} timed): re-proposals of trial 0 (the default) count "
                   "against the budget.")
    return out


def markdown(results: Sequence[KeyResult], meta: Mapping[str, Any]) -> str:
    dev = meta["device"] or {}
    lines = [
        f"# bench_tuner: {dev.get('name', '?')} ({meta['backend']})",
        "",
        f"- date: {meta['date']}",
        f"- command: `{meta['command']}`",
        f"- replay: {meta['seeds']} seeds per sampler; batches of {meta['batch']} as the tuner asks them; "
        f"TPE = `make_sampler(\"tpe\", seed, Encoding(target))`; both samplers start from the default",
        f"- wall time: {meta['wall_s']:.0f} s",
        "",
        "## Exhaustive sweep (the tuner's worker, every feasible point)",
        "",
    ]
    rows = []
    for r in results:
        land, opt, d = r.land, r.land.optimum, r.land.default
        csum = sum(p.compile_s for p in land.points)
        rsum = sum(p.run_s for p in land.points)
        rows.append([
            r.choice.target.name, r.choice.case_id, f"{len(land.ok)}/{len(land.feasible)}",
            params_text(opt.params if opt else None), fmt_v(opt.us if opt else None),
            fmt_v(d.us if d else None),
            common.fmt_num(opt.value_s / d.value_s if opt and d and opt.value_s and d.value_s else None, ".2f"),
            f"{land.within(0.05)} / {land.within(0.03)}",
            f"{land.wall_s:.1f} ({land.start_s:.1f})", f"{csum:.1f} / {rsum:.1f}",
        ])
    lines += [common.md_table(["target", "case", "ok / feasible", "optimum", "optimum µs", "default µs",
                               "optimum ÷ default", "points within 5 % / 3 %", "wall s (worker start)",
                               "Σ compile s / Σ run s"], rows), ""]

    lines += ["## Live TPE tune (`tune_key`, fresh study)", ""]
    rows = []
    for r in results:
        t = r.tune
        if t.get("status") != "ok":
            rows.append([r.choice.target.name, r.choice.case_id, str(t.get("budget", "")), "failed", "", "", "", "",
                         "", f"{t.get('wall_s', 0):.1f}", ""])
            continue
        used = t["distinct_timed"] if t["distinct_timed"] is not None else "?"
        rows.append([
            r.choice.target.name, r.choice.case_id, f"{t['budget']} / {used} / {t['tuner_timed']}",
            params_text(t["best_params"]),
            f"{fmt_v(t['best_us_landscape'])} / {fmt_v(t['best_us_own'])}",
            common.fmt_num(t["tuned_over_default_landscape"], ".2f") + " / " +
            common.fmt_num(t["tuned_over_default_own"], ".2f"),
            fmt_pct(t["gap_to_optimum"]), "yes" if t["accepted"] else "no",
            f"{t['compile_s_sum']:.1f} / {t['run_s_sum']:.1f}", f"{t['wall_s']:.1f}", t["decision"],
        ])
    lines += [common.md_table(["target", "case", "trials: budget / distinct timed / tuner's count", "tuned",
                               "tuned µs: sweep / own", "tuned ÷ default: sweep / own", "gap to optimum",
                               "accepted", "Σ compile s / Σ run s", "wall s", "A/B decision"], rows), ""]

    lines += [f"## Search efficiency at equal budget (replayed on the sweep, median over {meta['seeds']} seeds)", ""]
    rows = []
    for r in results:
        for s in ("tpe", "random"):
            sm = r.summary.get(s)
            if not sm:
                continue
            n = sm["seeds"]
            rows.append([
                r.choice.target.name, r.choice.case_id, s, f"{sm['budget']} of {len(r.land.feasible)}",
                fmt_trials(sm["median_trials_to_5pct"], sm["not_reached_5pct"], n),
                fmt_trials(sm["median_trials_to_3pct"], sm["not_reached_3pct"], n),
                f"{sm['hits_at_budget_5pct']}/{n}", f"{sm['hits_at_budget_3pct']}/{n}",
                common.fmt_num(sm["median_best_over_optimum_at_budget"], ".3f"),
            ])
    lines += [common.md_table(["target", "case", "sampler", "budget B", "median trials to 5 %",
                               "median trials to 3 %", "within 5 % at B", "within 3 % at B",
                               "median best ÷ optimum at B"], rows), ""]

    lines += ["## Goals", ""]
    lines += [f"- {'PASS' if ok else 'MISS'}: {g} — {d}" for r in results for g, ok, d in r.goals]
    lines += ["", "## Notes", ""]
    notes = [
        "Times are the tuner's objective: the sum over the key's cases of the median time of one call. "
        "\"Trials\" count distinct configurations timed; points that fail or break a device limit are told "
        "FAIL and not counted; a configuration proposed again is told its earlier value and not counted.",
        "*tuned µs: own* is the tune's own measurement; *sweep* is the same configuration's time in the "
        "exhaustive sweep of this run, which is what the gap to the optimum uses.",
        "Σ compile s adds each configuration's compile time; the worker compiles a request's configurations "
        f"(up to {CHUNK} in the sweep, {meta['batch']} in a tune) in parallel threads, so the wall time is lower.",
        "Random search runs with the same seeds as TPE, and TPE's random startup phase draws from an "
        "identically seeded RandomSampler: the two samplers propose the same first points, and the comparison "
        "is paired, seed by seed, differing only where TPE's model takes over (its 9th trial, the default "
        "being the 1st).",
    ]
    for r in results:
        if 0 < r.budget <= 8:
            notes.append(f"{r.choice.label}: B = {r.budget} is within TPE's 8 startup trials (the default "
                         "included), which are random: at this budget TPE and random search differ only "
                         "by their random streams.")
        for s, sm in r.summary.items():
            early = {k: v for k, v in sm.get("stops", {}).items() if k not in (REACHED, EXHAUSTED)}
            for why, count in early.items():
                notes.append(f"{r.choice.label} {s}: {count} of {sm['seeds']} replays stopped early: {why}.")
        notes += cross_notes(r)
        for p in r.land.points:
            if p.status in ("failed", "infeasible"):
                notes.append(f"{r.choice.label} {params_text(p.params)}: {p.status}: {p.reason.splitlines()[0]}")
        if r.land.error:
            notes.append(f"{r.choice.label}: the sweep stopped: {r.land.error}")
        if r.tune.get("trials_note"):
            notes.append(f"{r.choice.label}: {r.tune['trials_note']}")
    notes += meta.get("notes", [])
    lines += [f"- {n}" for n in notes]
    return "\n".join(lines)


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--backend", default="cuda", choices=["cuda", "opencl"], help="where to run (default: cuda)")
    p.add_argument("--keys", default=None,
                   help="which key per target, by case id (exact, else substring): 'target=CASE,...' or bare "
                        f"'CASE' for every target (default: {DEFAULT_KEYS}; with --quick: {QUICK_KEYS})")
    p.add_argument("--trials", type=int, default=None,
                   help="budget of the live tune (default: B = min(60, ceil(feasible/4)) for each key)")
    p.add_argument("--seeds", type=int, default=None,
                   help="seeds per sampler in the replay (default: 11; 5 with --quick)")
    p.add_argument("--tune-seed", type=int, default=0, help="seed of the live tune (default: 0)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sweep's inputs and order (default: 0)")
    p.add_argument("--trial-timeout", type=float, default=60.0,
                   help="seconds one worker answer may take before the worker is restarted (default: 60)")
    p.add_argument("--tune-timeout", type=float, default=150.0,
                   help="wall-time cap of each live tune in seconds, a safety net (default: 150)")
    p.add_argument("--no-tune", action="store_true", help="skip the live tune")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: small cases (T1 / T16) and 5 replay seeds")
    p.add_argument("--list", action="store_true", help="show the chosen keys and budgets, then exit")
    p.add_argument("--keep-tmp", action="store_true", help="keep the temporary project copy (its path is printed)")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON output (default: benchmarks/results/bench_tuner-<backend>[-quick].json); "
                        "the markdown goes beside it with the suffix .md")
    args = p.parse_args(argv)
    if args.keys is None:
        args.keys = QUICK_KEYS if args.quick else DEFAULT_KEYS
    if args.seeds is None:
        args.seeds = 5 if args.quick else 11
    if args.seeds < 1 or (args.trials is not None and args.trials < 1):
        p.error("--seeds and --trials must be at least 1")
    return args


def lib_versions() -> dict[str, str]:
    out = common.versions()
    for dist in ("optuna", "numpy", "cupy-cuda13x", "cupy-cuda12x", "pyopencl"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[dist] = importlib.metadata.version(dist)
    return out


def run_key(choice: KeyChoice, args: argparse.Namespace, *, tmp: Path, project: Path, batch: int,
            t_start: float) -> KeyResult:
    label = choice.label
    print(f"{label}: key {choice.key}, cases {choice.case_ids}", flush=True)
    land = measure_landscape(choice, args.backend, tmp / "sweep-cache" / args.backend, seed=args.seed,
                             trial_timeout_s=args.trial_timeout)
    res = KeyResult(choice, land, budget=budget_for(len(land.feasible)))
    opt, d = land.optimum, land.default
    print(f"{label}: sweep {len(land.ok)}/{len(land.feasible)} ok in {land.wall_s:.1f} s; optimum "
          f"{params_text(opt.params if opt else None)} {fmt_v(opt.us if opt else None)} µs, default "
          f"{fmt_v(d.us if d else None)} µs  [total {time.perf_counter() - t_start:.0f} s]", flush=True)
    if land.error:
        print(f"  the sweep stopped: {land.error.splitlines()[0]}", flush=True)
    if opt is None:
        return res
    if not args.no_tune:
        trials = args.trials or res.budget
        res.tune = live_tune(choice, args.backend, project, land, trials=trials, seed=args.tune_seed,
                             trial_timeout_s=args.trial_timeout, timeout_s=args.tune_timeout)
        t = res.tune
        if t.get("status") == "ok":
            print(f"{label}: live TPE tune ({t['distinct_timed']} trials, {t['wall_s']:.1f} s): "
                  f"{params_text(t['best_params'])}, {fmt_v(t['best_us_landscape'])} µs in the sweep "
                  f"({fmt_pct(t['gap_to_optimum'])} from the optimum); {t['decision']}  "
                  f"[total {time.perf_counter() - t_start:.0f} s]", flush=True)
        else:
            print(f"{label}: live tune failed: {str(t.get('error', '')).splitlines()[0]}", flush=True)
    t0 = time.perf_counter()
    for sampler in ("tpe", "random"):
        runs = [replay(land, sampler, s, budget=res.budget, stop_tol=min(TOLERANCES), batch=batch)
                for s in range(args.seeds)]
        res.runs[sampler] = runs
        res.summary[sampler] = summarize(land, runs, res.budget)
        res.cross += [cross_check(land, r, batch) for r in runs]
    res.replay_s = time.perf_counter() - t0
    for s, sm in res.summary.items():
        print(f"{label}: {s}: median trials to 5 % {sm['median_trials_to_5pct']}, to 3 % "
              f"{sm['median_trials_to_3pct']}; within 3 % at B={res.budget}: "
              f"{sm['hits_at_budget_3pct']}/{sm['seeds']}", flush=True)
    print(f"{label}: replay {res.replay_s:.1f} s  [total {time.perf_counter() - t_start:.0f} s]", flush=True)
    set_goals(res)
    return res


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    t_start = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="ktune-bench-tuner-"))
    try:
        project = make_project(tmp)
        targets = load_targets(project)
        choices, notes = choose_keys(targets, args.backend, args.keys)
        for n in notes:
            print(f"note: {n}", flush=True)
        if args.list:
            for c in choices:
                size = len(list(c.target.space.feasible(c.key)))
                print(f"{c.label}: key {c.key}, cases {c.case_ids}, {size} feasible points, B = {budget_for(size)}")
            return 0
        if not choices:
            print("error: no key to run", file=sys.stderr)
            return 2
        batch = TuneSettings().batch
        results: list[KeyResult] = []
        for choice in choices:
            try:
                results.append(run_key(choice, args, tmp=tmp, project=project, batch=batch, t_start=t_start))
            except KtuneError as exc:
                print(f"{choice.label}: failed: {exc.message}", file=sys.stderr, flush=True)
                notes.append(f"{choice.label}: failed: {exc.message}")
        if not results or all(r.land.device is None for r in results):
            print(f"error: the {args.backend} worker could not run here"
                  + (f": {results[0].land.error}" if results and results[0].land.error else ""), file=sys.stderr)
            return 2
        dev = next(r.land.device for r in results if r.land.device is not None)
        meta: dict[str, Any] = {
            "script": "bench_tuner", "date": common.now_utc(), "command": common.command_line(),
            "backend": args.backend, "device": {**dataclasses.asdict(dev), "id": dev.id},
            "versions": lib_versions(), "seeds": args.seeds, "batch": batch,
            "options": {"quick": args.quick, "keys": args.keys, "trials": args.trials, "tune_seed": args.tune_seed,
                        "seed": args.seed, "trial_timeout_s": args.trial_timeout,
                        "tune_timeout_s": args.tune_timeout, "no_tune": args.no_tune},
            "tolerances": list(TOLERANCES), "budget_rule": f"min({BUDGET_CAP}, ceil(feasible / 4))",
            "cupy_cache_dir_set": "CUPY_CACHE_DIR" in os.environ,
            "notes": notes,
            "wall_s": round(time.perf_counter() - t_start, 1),
        }
        md = markdown(results, meta)
        goals = [{"target": r.choice.target.name, "case": r.choice.case_id, "goal": g, "pass": ok, "detail": d}
                 for r in results for g, ok, d in r.goals]
        data = {**meta, "keys": [r.to_json() for r in results], "goals": goals}
        suffix = "-quick" if args.quick else ""
        out = args.out or common.RESULTS / f"bench_tuner-{args.backend}{suffix}.json"
        md_path = common.write_results(out, data, md)
        print()
        print(md)
        print()
        for g in goals:
            print(f"{'PASS' if g['pass'] else 'MISS'}: {g['goal']} — {g['detail']}")
        print(f"\nwrote {common.shown_path(out)} and {common.shown_path(md_path)} "
              f"({time.perf_counter() - t_start:.0f} s)")
        return 0
    finally:
        if args.keep_tmp:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
