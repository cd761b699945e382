"""Candidates evaluated in a separate process, so a crash, a hang or a poisoned GPU context
fails one trial, never the tuner or pytest.

The parent sends a batch of configurations; the worker compiles them in a thread pool, then
verifies and times them one by one, answering after each. A batch that is only verified (an agent's
check) is compiled a few configurations ahead of its checks instead, so that a deadline per answer is
about one configuration's compile and check, however long the batch. The parent waits for
each answer with a deadline; on a timeout or a dead worker it records that trial as
failed, and starts a fresh worker for the rest.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import math
import os
import sys
import time
import traceback
from collections.abc import Generator, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pytest_ktune import backends
from pytest_ktune.backends.base import DeviceInfo, pin
from pytest_ktune.core.errors import (
    CompileError,
    KtuneError,
    LaunchError,
    LimitError,
    MismatchError,
    ReferenceShapeError,
)
from pytest_ktune.core.space import Value
from pytest_ktune.core.target import Target
from pytest_ktune.core.text import one_line
from pytest_ktune.measure.ab import Stop, measure_ab
from pytest_ktune.measure.bench import BenchConfig, measure
from pytest_ktune.measure.evaluate import FixtureCache, Job, timing_sets, verify_once
from pytest_ktune.measure.process import ChildProcess, ChildStartError, ignore_interrupts
from pytest_ktune.measure.runtime import compile_target


@dataclass(frozen=True)
class TargetRef:
    """Enough to import a target again in another process."""

    module: str
    file: str
    name: str
    sys_path: tuple[str, ...]
    # ``file`` is a copy of the module (a commit's version, ``gate.snapshot``), loaded from that file under
    # the alias ``module``, beside the current module; never looked up by name.
    copy: bool = False

    @classmethod
    def of(cls, target: Target) -> TargetRef:
        return cls(module=target.module, file=str(target.file), name=target.name, sys_path=tuple(sys.path))


@dataclass(frozen=True)
class WorkerSpec:
    """How to start a worker: the target, the backend, the cases (indices into ``target.cases``)."""

    target: TargetRef
    backend: str
    cases: tuple[int, ...]
    cache_dir: str | None = None
    bench: BenchConfig | None = None  # None: the backend's default
    factory: str | None = None  # ``module:qualname`` of a plugin's backend factory (None: built in)
    # Check each configuration on every case whose key its constraints allow, without timing it (times
    # stay empty); a configuration no case allows fails.
    verify_only: bool = False
    device_index: int | None = None  # --ktune-devices: the device this worker is pinned to (None: the backend's)


@dataclass(frozen=True)
class CaseTime:
    """The timing of one case: the median and the samples, in seconds."""

    case_id: str
    median_s: float
    samples: tuple[float, ...]
    ci: tuple[float, float]
    iqr_s: float


@dataclass(frozen=True)
class Outcome:
    """What happened to one configuration."""

    params: Mapping[str, Value]
    status: str  # "ok", "infeasible" (device limits) or "failed"
    reason: str = ""
    times: tuple[CaseTime, ...] = ()
    compile_s: float = 0.0
    run_s: float = 0.0
    resources: Mapping[str, int] = field(default_factory=dict)
    detail: str = ""  # a compile failure's whole message (the reason is its first error line)
    # With ``verify_only``: every case that failed its check, with the reason (the first is ``reason``).
    failed_cases: tuple[tuple[str, str], ...] = ()

    @property
    def value_s(self) -> float:
        """The objective: the sum over the key's cases of the median time of one call."""
        return sum(t.median_s for t in self.times) if self.status == "ok" else math.inf


@dataclass(frozen=True)
class ABOutcome:
    """Per case, interleaved A/B timings of the current (A) and candidate (B) configurations, and how
    each case's sample stopped (``measure.ab.ABResult.stopped``: ``slower``, ``precise``, …; empty
    where nothing says)."""

    status: str
    reason: str = ""
    current: tuple[CaseTime, ...] = ()
    candidate: tuple[CaseTime, ...] = ()
    stopped: tuple[str, ...] = ()


class NoSuchTarget(LookupError):
    """The module imported, but declares no target of that name."""


def import_target(ref: TargetRef) -> Target:
    """The target ``ref`` names, its module imported once per process (a copy loaded from its file);
    NoSuchTarget where the module has no such target."""
    for p in reversed(ref.sys_path):
        if p not in sys.path:
            sys.path.insert(0, p)
    module = sys.modules.get(ref.module)
    if module is None and ref.copy:
        module = _load_file(ref.module, ref.file)
    elif module is None:
        try:
            module = importlib.import_module(ref.module)
        except ImportError:
            module = _load_file(ref.module, ref.file)
    for value in vars(module).values():
        if isinstance(value, Target) and value.name == ref.name:
            return value
    raise NoSuchTarget(f"no target named {ref.name} in {ref.file}")


def _load_file(name: str, file: str) -> Any:
    """The module in ``file``, executed as ``name`` (and kept in ``sys.modules`` only where it ran)."""
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"{file} is not a Python module", name=name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


class _Evaluator:
    """Lives in the worker: the backend, the target and its cases."""

    def __init__(self, spec: WorkerSpec) -> None:

        factory = backends.load_factory(spec.factory) if spec.factory else None
        self.backend = backends.create(spec.backend, factory)
        self.target = import_target(spec.target).for_backend(self.backend.name)
        if spec.cache_dir:
            self.backend.cache_dir = Path(spec.cache_dir)
        self.cfg = spec.bench or BenchConfig.for_backend(self.backend)
        self.jobs = [Job.of(self.backend, self.target, self.target.cases[i]) for i in spec.cases]
        self.inputs = FixtureCache()
        self.verify_only = spec.verify_only

    def compile_ahead(self, configs: Sequence[Mapping[str, Value]]) -> Generator[tuple[float, str], None, None]:
        """Compile every configuration for every case's defines, in a thread pool, in order; yields, per
        configuration in turn, the seconds spent and an error text ('' when it compiled). Verifying only,
        a few compile ahead of their use (one per thread) and each is yielded as soon as it is ready, so
        the first answer of a batch waits for its own compile, not for the whole batch's: a deadline per
        answer is about one configuration's work. Timing, all are compiled before the first is yielded."""

        def one(cfg: Mapping[str, Value]) -> tuple[float, str]:
            t0 = time.perf_counter()
            try:
                for job in self.jobs:
                    compile_target(self.backend, self.target, cfg,
                                   self.target.defines(self.target.case_args(job.case)))
            except KtuneError as exc:
                return time.perf_counter() - t0, exc.message
            return time.perf_counter() - t0, ""

        threads = max(1, min(len(configs), os.cpu_count() or 1, 8))
        # Timing: every compile first, so that none runs while a configuration is timed.
        ahead = threads if self.verify_only else len(configs)
        pool = ThreadPoolExecutor(max_workers=threads)
        futures = [pool.submit(one, cfg) for cfg in configs[:ahead]]
        try:
            if not self.verify_only:
                for future in futures:
                    future.result()
            for i in range(len(configs)):
                if i + ahead < len(configs):  # as many compiling as there are threads, no more ahead
                    futures.append(pool.submit(one, configs[i + ahead]))
                yield futures[i].result()
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def evaluate(self, cfg: Mapping[str, Value], compile_s: float, seed: int,
                 only: frozenset[int] | None = None) -> Outcome:

        t0 = time.perf_counter()
        times = []
        resources: dict[str, int] = {}
        failed: list[tuple[str, str]] = []
        ran = 0
        try:
            for j, job in enumerate(self.jobs):
                if self.verify_only:
                    if (only is not None and j not in only) or not self.target.space.valid(cfg, job.key):
                        continue
                    ran += 1
                    try:
                        launches = verify_once(job, cfg, seed + 7919 * j, cache=self.inputs)
                    except (LaunchError, CompileError):
                        raise
                    except KtuneError as exc:  # each case's verdict, not only the first
                        failed.append((job.case_id, one_line(exc.message)))
                        continue
                    reason = self._limits(launches, resources)
                    if reason:
                        return Outcome(cfg, "infeasible", reason, compile_s=compile_s,
                                       run_s=time.perf_counter() - t0, resources=resources)
                    continue
                sets, flush = timing_sets(job, cfg, seed + 7919 * j, cache=self.inputs, cfg=self.cfg)
                reason = self._limits(sets[0], resources)
                if reason:
                    return Outcome(cfg, "infeasible", reason, compile_s=compile_s,
                                   run_s=time.perf_counter() - t0, resources=resources)
                m = measure(self.backend, sets, self.cfg, flush=flush)
                del sets
                times.append(CaseTime(job.case_id, m.median, m.samples, m.ci, m.iqr))
        except LimitError as exc:
            return Outcome(cfg, "infeasible", exc.message, compile_s=compile_s,
                           run_s=time.perf_counter() - t0)
        except (MismatchError, ReferenceShapeError) as exc:
            return Outcome(cfg, "failed", one_line(exc.message), compile_s=compile_s,
                           run_s=time.perf_counter() - t0)
        finally:
            self.backend.release()
        if failed:
            return Outcome(cfg, "failed", failed[0][1], compile_s=compile_s, run_s=time.perf_counter() - t0,
                           resources=resources, failed_cases=tuple(failed))
        if self.verify_only and not ran and only is None:
            return Outcome(cfg, "failed", "no case's key allows this configuration (its constraints)",
                           compile_s=compile_s, run_s=time.perf_counter() - t0)
        return Outcome(cfg, "ok", times=tuple(times), compile_s=compile_s, run_s=time.perf_counter() - t0,
                       resources=resources)

    def _limits(self, launches: Sequence[Any], resources: dict[str, int]) -> str:
        """The device limit a configuration's launches break, or ''."""
        dev = self.backend.device
        for launch in launches:
            res = launch.function.resources()
            threads = math.prod(launch.block)
            resources.update(registers=res.registers, shared_bytes=res.shared_bytes,
                             local_bytes=res.local_bytes, threads=threads)
            if threads > min(dev.max_threads_per_block, res.max_threads_per_block):
                return (f"{threads} threads per block; {launch.function.name} allows "
                        f"{min(dev.max_threads_per_block, res.max_threads_per_block)}")
            if dev.regs_per_block and res.registers * threads > dev.regs_per_block:
                return (f"{res.registers} registers x {threads} threads = {res.registers * threads} "
                        f"> {dev.regs_per_block} per block")
            if res.shared_bytes + launch.shared > dev.shared_limit:
                dynamic = f" + {launch.shared} dynamic" if launch.shared else ""
                return f"{res.shared_bytes}{dynamic} bytes of shared memory > {dev.shared_limit} per block"
        return ""

    def ab(self, current: Mapping[str, Value], candidate: Mapping[str, Value], seed: int,
           stop: Stop | None = None) -> ABOutcome:

        cur: list[CaseTime] = []
        cand: list[CaseTime] = []
        stopped: list[str] = []
        try:
            for j, job in enumerate(self.jobs):
                # Both on the same fresh inputs (a fixture of their own, not the candidates'), so that
                # the winner is verified on inputs no trial saw.
                fixtures = FixtureCache(keep_one_case=True)
                sets_a, flush = timing_sets(job, current, seed + 31 * j, cache=fixtures, cfg=self.cfg)
                sets_b, _ = timing_sets(job, candidate, seed + 31 * j, cache=fixtures, cfg=self.cfg)
                r = measure_ab(self.backend, sets_a, sets_b, self.cfg, flush=flush, stop=stop)
                del sets_a, sets_b
                a, b = r.a, r.b
                cur.append(CaseTime(job.case_id, a.median, a.samples, a.ci, a.iqr))
                cand.append(CaseTime(job.case_id, b.median, b.samples, b.ci, b.iqr))
                stopped.append(r.stopped)
        except KtuneError as exc:
            return ABOutcome("failed", one_line(exc.message))
        finally:
            self.backend.release()
        return ABOutcome("ok", current=tuple(cur), candidate=tuple(cand), stopped=tuple(stopped))


_DETAIL = 20_000  # characters of a compile log an outcome carries


def _compile_reason(message: str) -> str:
    """The compiler's first error line (not the list of defines that heads the message), on one line."""
    lines = message.splitlines()
    errors = [ln for ln in lines[1:] if "error" in ln.lower()]
    return "compile error: " + one_line(errors[0] if errors else message)


# Candidates of a run are verified on this many input sets per case, in turn. Fresh inputs for every
# candidate would cost more than the candidate itself on a large case (see measure.fixture.FixtureCache);
# the winner is verified again on inputs of its own before it is accepted.
INPUT_SETS = 2


def _worker_main(conn: Any, spec: WorkerSpec) -> None:
    """The worker's loop: one request at a time; a launch failure ends the process."""
    ignore_interrupts()
    pin(spec.device_index)
    try:
        ev = _Evaluator(spec)
    except BaseException as exc:  # report why the worker could not start, then exit
        conn.send(("dead", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", ev.backend.device))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        kind = msg[0]
        if kind == "stop":
            return
        if kind == "batch":
            _, configs, seed, only = msg
            with contextlib.closing(ev.compile_ahead(configs)) as compiled:
                if not _answer_batch(conn, ev, configs, compiled, seed=seed, only=only):
                    return  # a failed launch can leave the device context unusable
        elif kind == "ab":
            _, current, candidate, seed, stop = msg
            conn.send(("ab", ev.ab(current, candidate, seed, stop)))


def _answer_batch(conn: Any, ev: _Evaluator, configs: Sequence[Mapping[str, Value]],
                  compiled: Iterator[tuple[float, str]], *, seed: int, only: frozenset[int] | None) -> bool:
    """Verify (and time) each configuration of a batch once compiled, answering after each; False after a
    failed launch."""
    for i, cfg in enumerate(configs):
        secs, error = next(compiled)
        if error:
            conn.send(("outcome", Outcome(cfg, "failed", _compile_reason(error), compile_s=secs,
                                          detail=error[:_DETAIL])))
            continue
        try:
            out = ev.evaluate(cfg, secs, seed + 104729 * (i % INPUT_SETS), only)
        except CompileError as exc:
            # Compiled ahead, a configuration's program was built; one that fails to compile at its launch (a
            # backend that compiles there, as Triton does) is a point this configuration cannot reach.
            conn.send(("outcome", Outcome(cfg, "infeasible", _compile_reason(exc.message), compile_s=secs,
                                          detail=exc.message[:_DETAIL])))
            continue
        except LaunchError as exc:
            conn.send(("outcome", Outcome(cfg, "failed", one_line(exc.message), compile_s=secs)))
            return False
        except KtuneError as exc:
            out = Outcome(cfg, "failed", one_line(exc.message), compile_s=secs)
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}: {traceback.format_exc(limit=2)}"
            out = Outcome(cfg, "failed", one_line(text), compile_s=secs)
        conn.send(("outcome", out))
    return True


class CandidatePool(Protocol):
    """What the tuner asks of the processes that evaluate its candidates: ``WorkerPool``, or the
    replay of a recorded landscape (``lab.replay.ReplayPool``)."""

    @property
    def device(self) -> DeviceInfo:
        """The device the candidates run on (known once ``ensure`` has run)."""
        ...

    def ensure(self) -> None:
        """Start the worker if none runs."""
        ...

    def evaluate(self, configs: Sequence[Mapping[str, Value]], seed: int) -> Iterator[Outcome]: ...

    def ab(self, current: Mapping[str, Value], candidate: Mapping[str, Value], seed: int,
           stop: Stop | None = None) -> ABOutcome:
        """Each case timed A/B, interleaved; ``stop``: the tuner's rule to end a case's sample early."""
        ...

    def __enter__(self) -> CandidatePool: ...

    def __exit__(self, *exc: object) -> None: ...


class PoolFactory(Protocol):
    """Makes the pool of one tune (``WorkerPool`` itself is one)."""

    def __call__(self, spec: WorkerSpec, *, trial_timeout_s: float) -> CandidatePool: ...


class WorkerPool:
    """One worker process at a time, restarted after a crash, a hang or a failed launch."""

    def __init__(self, spec: WorkerSpec, *, trial_timeout_s: float, start_timeout_s: float = 120.0) -> None:
        self.spec = spec
        self.trial_timeout_s = trial_timeout_s
        self._child = ChildProcess(_worker_main, (spec,), name="ktune-worker", start_timeout_s=start_timeout_s)
        self._device: DeviceInfo | None = None

    @property
    def restarts(self) -> int:
        return max(0, self._child.starts - 1)

    @property
    def device(self) -> DeviceInfo:
        if self._device is None:
            raise KtuneError("the tuning worker has not started", hint="call ensure() first")
        return self._device

    def ensure(self) -> None:
        if not self._child.alive:
            try:
                self._device = self._child.start()[1]
            except ChildStartError as exc:
                raise KtuneError(f"the tuning worker could not start: {exc.message}",
                                 hint="run the correctness items first (pytest --ktune) to see what fails") from None

    def evaluate(self, configs: Sequence[Mapping[str, Value]], seed: int, *,
                 only: Sequence[int] | None = None) -> Iterator[Outcome]:
        """Outcomes in order; a worker that dies or hangs fails that configuration only. With
        ``verify_only``, ``only`` (positions in ``spec.cases``) limits the cases they are checked on."""
        pending = list(configs)
        chosen = None if only is None else frozenset(only)
        while pending:
            self.ensure()
            self._child.send(("batch", [dict(c) for c in pending], seed, chosen))
            while pending:
                msg = self._child.recv(self.trial_timeout_s)
                if msg is None:
                    why = self._child.death(self.trial_timeout_s)
                    self._child.kill()
                    yield Outcome(pending.pop(0), "failed", why)
                    break
                out: Outcome = msg[1]
                pending.pop(0)
                yield out
            seed += 1

    def ab(self, current: Mapping[str, Value], candidate: Mapping[str, Value], seed: int,
           stop: Stop | None = None) -> ABOutcome:
        self.ensure()
        self._child.send(("ab", dict(current), dict(candidate), seed, stop))
        timeout = max(self.trial_timeout_s * 2 * max(1, len(self.spec.cases)), 60.0)
        msg = self._child.recv(timeout)
        if msg is None:
            why = self._child.death(timeout)
            self._child.kill()
            return ABOutcome("failed", why)
        result: ABOutcome = msg[1]
        return result

    def kill(self) -> None:
        self._child.kill()

    def close(self) -> None:
        self._child.close()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
