"""The gate's measurement process: every correctness and performance item of a run checks and times
its kernels in one child process (``measure.process``), so that a kernel that crashes (an illegal
address, a segfault in the driver) or hangs fails its own item with a message that names it, and
the run goes on with a fresh child; the pytest process itself never loads CuPy or PyOpenCL.

The child keeps the backend, its compile cache and the current case's fixture (inputs and reference,
``measure.fixture``), so that the correctness item, the performance item and an A/B of one case
share one draw of the inputs and one reference, and nothing is held from one case to the next.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pytest_ktune import backends
from pytest_ktune.backends.base import DeviceInfo, peak_flops, pin
from pytest_ktune.core import errors
from pytest_ktune.core.errors import BackendUnavailable, CompileError, KtuneError, LaunchError, LimitError
from pytest_ktune.core.options import DEFAULTS
from pytest_ktune.core.space import Value
from pytest_ktune.core.target import Target
from pytest_ktune.measure import compiler_output
from pytest_ktune.measure.ab import ABResult, Stop, measure_ab
from pytest_ktune.measure.bench import BenchConfig, Measurement, measure
from pytest_ktune.measure.evaluate import FixtureCache, Job, timing_sets, verify_once
from pytest_ktune.measure.process import ChildProcess, ChildStartError, ignore_interrupts
from pytest_ktune.measure.worker import TargetRef, import_target


@dataclass(frozen=True)
class ServiceSpec:
    """How to start the measurement process: the backend, and where its compiler caches programs."""

    backend: str  # a name the hooks resolved, or ``auto`` (resolved in the process, not in pytest's)
    factory: str | None = None  # ``module:qualname`` of a plugin's backend factory (None: built in)
    cache_root: str | None = None  # the backend's compiler caches in <cache_root>/<backend name>
    bench: BenchConfig | None = None  # None: the backend's default
    device_index: int | None = None  # --ktune-devices: the device this process is pinned to (None: the backend's)


@dataclass(frozen=True)
class CaseRef:
    """One case of one target, as the measurement process finds it again."""

    target: TargetRef
    case: int  # the index into ``target.cases``
    case_id: str
    seed: int  # the case's inputs are drawn from this seed
    repro: str  # how to draw them again, for a failure's message


class Measurer(Protocol):
    """What the gate asks of the measurement process (``MeasureService``)."""

    def device(self) -> DeviceInfo: ...

    def copy_bandwidth(self) -> float: ...

    def peak_flops(self) -> float | None: ...

    def check(self, case: CaseRef, configs: Sequence[tuple[str, Mapping[str, Value]]]) -> list[str]: ...

    def time(self, case: CaseRef, params: Mapping[str, Value]) -> Measurement: ...

    def ab(self, case: CaseRef, a: Mapping[str, Value], b: Mapping[str, Value],
           source_b: str | None, stop: Stop | None = None, *, target_b: TargetRef | None = None) -> ABResult: ...


class ItemCrash(KtuneError):
    """The measurement process crashed or hung while it ran one item's kernels."""


class MeasureService:
    """The parent's side: one measurement process, started on first use, restarted after a crash."""

    def __init__(self, spec: ServiceSpec, *, item_timeout_s: float = DEFAULTS.item_timeout,
                 start_timeout_s: float = 180.0) -> None:
        self.spec = spec
        self.item_timeout_s = item_timeout_s
        self.start_timeout_s = start_timeout_s
        self._child = ChildProcess(_service_main, (spec,), name="ktune-measure", start_timeout_s=start_timeout_s)
        self._device: DeviceInfo | None = None
        self._bandwidth: float | None = None
        self._peak: tuple[float | None] | None = None
        self.crashes = 0

    def device(self) -> DeviceInfo:
        """The device, starting the process if none runs; BackendUnavailable when it cannot start."""
        self._ensure()
        assert self._device is not None
        return self._device

    @property
    def started(self) -> bool:
        """Whether the process has started and found its device (it may have ended since)."""
        return self._device is not None

    def _ensure(self) -> None:
        if self._child.alive:
            return
        try:
            self._device = self._child.start()[1]
        except ChildStartError as exc:
            raise BackendUnavailable(exc.message) from None

    def _ask(self, what: str, request: tuple[Any, ...]) -> Any:
        self._ensure()
        self._child.send(request)
        msg = self._child.recv(self.item_timeout_s)
        if msg is None:
            why = self._child.death(self.item_timeout_s, "the measurement process")
            self._child.kill()
            self.crashes += 1
            raise ItemCrash(f"{what}: {why}",
                            hint="run this item alone (pytest -k) to see it fail again; a fresh measurement "
                                 "process runs the rest of the session")
        if msg[0] == "error":
            _, name, message, where, hint, fatal = msg
            if fatal:  # the process ends after a failed launch: the next item gets a fresh one
                self._child.kill()
            cls = getattr(errors, name, KtuneError)
            raise cls(message, where=where, hint=hint)
        return msg[1]

    def device_count(self) -> int:
        """How many devices this backend can be pinned to (``--ktune-devices all``)."""
        return int(self._ask("counting the devices", ("devices",)))

    def copy_bandwidth(self) -> float:
        if self._bandwidth is None:
            self._bandwidth = float(self._ask("measuring the copy bandwidth", ("bandwidth",)))
        return self._bandwidth

    def peak_flops(self) -> float | None:
        """The device's float32 multiply-add throughput (FLOP/s), measured once; None where the backend
        cannot measure it."""
        if self._peak is None:
            value = self._ask("measuring the multiply-add throughput", ("peak",))
            self._peak = (None if value is None else float(value),)
        return self._peak[0]

    def compiler_output(self) -> dict[str, list[str]]:
        """The compiler's messages so far, by target (those of a process that crashed are lost); none
        where no measurement process runs."""
        if not self._child.alive:
            return {}
        out: dict[str, list[str]] = self._ask("reading the compiler's output", ("compiler_output",))
        return out

    def check(self, case: CaseRef, configs: Sequence[tuple[str, Mapping[str, Value]]]) -> list[str]:
        notes: list[str] = self._ask(_what("checking", case), ("check", case, [(lbl, dict(c)) for lbl, c in configs]))
        return notes

    def time(self, case: CaseRef, params: Mapping[str, Value]) -> Measurement:
        m: Measurement = self._ask(_what("timing", case), ("time", case, dict(params)))
        return m

    def ab(self, case: CaseRef, a: Mapping[str, Value], b: Mapping[str, Value],
           source_b: str | None, stop: Stop | None = None, *, target_b: TargetRef | None = None) -> ABResult:
        """A (``a``) against B (``b``, on ``source_b`` where given) interleaved; ``stop``: the caller's rule
        to end the sample early (``measure.ab``). ``target_b``: B's launches come from that target (a
        commit's copy of the module, ``gate.snapshot``) on this case's inputs; None: from the case's own."""
        result: ABResult = self._ask(_what("timing A/B", case),
                                     ("ab", case, dict(a), dict(b), source_b, stop, target_b))
        return result

    def close(self) -> None:
        self._child.close()


def _what(doing: str, case: CaseRef) -> str:
    return f"target {case.target.name} ({case.target.file}), case {case.case_id}: {doing} its kernels"


# -- the child's side -------------------------------------------------------------------------------


class _Service:
    """Lives in the measurement process: the backend, the targets imported so far, one fixture."""

    def __init__(self, spec: ServiceSpec) -> None:
        factory = backends.load_factory(spec.factory) if spec.factory else None
        self.backend = backends.create(backends.resolve(spec.backend), factory)
        if spec.cache_root:
            self.backend.cache_dir = Path(spec.cache_root) / self.backend.name
        self.cfg = spec.bench or BenchConfig.for_backend(self.backend)
        self.targets: dict[TargetRef, Target] = {}
        self.fixtures = FixtureCache(keep_one_case=True)

    def job(self, case: CaseRef) -> Job:
        if case.target not in self.targets:
            self.targets[case.target] = import_target(case.target)
        target = self.targets[case.target]
        return Job.of(self.backend, target, target.cases[case.case])

    def _other_launcher(self, job: Job, ref: TargetRef) -> Job:
        """``job``'s case (its inputs, its id, its reference's answer) run by the target ``ref`` names."""
        if ref not in self.targets:
            try:
                self.targets[ref] = import_target(ref)
            except Exception as exc:
                raise KtuneError(f"the reference's copy of {ref.name}'s module does not load in the measurement "
                                 f"process: {type(exc).__name__}: {exc}", where=ref.file,
                                 hint="make that version of the module importable beside the current one") from None
        other = self.targets[ref].for_backend(self.backend.name)
        return Job(self.backend, other, job.case, job.case_id, job.key)

    def check(self, case: CaseRef, configs: Sequence[tuple[str, Mapping[str, Value]]]) -> list[str]:
        job = self.job(case)
        notes = []
        try:
            for label, cfg in configs:
                job.target.check_config(cfg, job.key, f"{label} configuration")
                verify_once(job, cfg, case.seed, repro=case.repro, cache=self.fixtures)
                notes.append(f"{label} {cfg}: ok")
        finally:
            self.backend.release()
        return notes

    def time(self, case: CaseRef, params: Mapping[str, Value]) -> Measurement:
        job = self.job(case)
        try:
            sets, flush = timing_sets(job, params, case.seed, repro=case.repro, cache=self.fixtures, cfg=self.cfg)
            return measure(self.backend, sets, self.cfg, flush=flush)
        finally:
            self.backend.release()

    def ab(self, case: CaseRef, a: Mapping[str, Value], b: Mapping[str, Value],
           source_b: str | None, stop: Stop | None, *, target_b: TargetRef | None = None) -> ABResult:
        job = job_b = self.job(case)
        if target_b is not None:
            job_b = self._other_launcher(job, target_b)
            # Its own source text, named: the fixture then counts B's check apart from A's own.
            source_b = job_b.target.source_text(self.backend.name) if source_b is None else source_b
        try:
            sets_a, flush = timing_sets(job, a, case.seed, repro=case.repro, cache=self.fixtures, cfg=self.cfg)
            sets_b, _ = timing_sets(job_b, b, case.seed, repro=case.repro, source=source_b, cache=self.fixtures,
                                     cfg=self.cfg)
            return measure_ab(self.backend, sets_a, sets_b, self.cfg, flush=flush, stop=stop)
        finally:
            self.backend.release()


def _service_main(conn: Any, spec: ServiceSpec) -> None:
    """The measurement process's loop: one request at a time; a failed launch ends the process, since
    it can leave the device's context unusable (the parent starts a fresh one for the next item)."""
    ignore_interrupts()
    pin(spec.device_index)  # a spawned process: its own environment, read by the backend it makes
    compiler_output.OUTPUT.echo = None  # the session shows them (in its summary, or with a failure)
    try:
        service = _Service(spec)
    except KtuneError as exc:
        conn.send(("dead", exc.render()))
        return
    except BaseException as exc:  # report why the process could not start, then exit
        conn.send(("dead", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", service.backend.device))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        kind, args = msg[0], msg[1:]
        if kind == "stop":
            return
        where = f"target {args[0].target.name} ({args[0].target.file})" if args else ""
        try:
            if kind == "bandwidth":
                answer: Any = service.backend.copy_bandwidth()
            elif kind == "devices":
                answer = backends.device_count(service.backend.name)
            elif kind == "peak":
                answer = peak_flops(service.backend)
            elif kind == "compiler_output":
                answer = compiler_output.OUTPUT.all()
            elif kind == "check":
                answer = service.check(*args)
            elif kind == "time":
                answer = service.time(*args)
            else:
                case, a, b, source_b, stop, target_b = args
                answer = service.ab(case, a, b, source_b, stop, target_b=target_b)
        except KtuneError as exc:
            # A failed launch can leave the device's context unusable; a device limit is checked before.
            fatal = isinstance(exc, LaunchError) and not isinstance(exc, LimitError)
            # A compile error carries the compiler's log already; any other failure gets its warnings.
            message = exc.message if isinstance(exc, CompileError) or not where else \
                compiler_output.with_warnings(exc.message, where)
            conn.send(("error", type(exc).__name__, message, exc.where or where, exc.hint, fatal))
            if fatal:
                return
            continue
        except Exception as exc:  # a bug or a library's own error: the item fails, saying which
            text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            conn.send(("error", "KtuneError", f"{text}\n{traceback.format_exc(limit=4)}", where,
                       "report this with the traceback, if the kernel's code is not at fault", False))
            continue
        conn.send(("ok", answer))
