"""Time the example kernels three ways, side by side, in one run.

For every case of ``example_project.kernels.rmsnorm`` and ``.silu_and_mul``
that runs on the chosen backend:

* the target's default configuration;
* every feasible point of its Space for the case's key (an exhaustive sweep),
  the fastest of which is "best"; default and best are then timed again,
  interleaved (``_bench.measure_ab``), so that "best" is not just the luckiest
  of many noisy medians;
* torch eager for the same op on the same input values (CUDA only).

All of them are timed with pytest-ktune's own method: the launches of one
call are recorded with ``_runtime.run`` and replayed by ``_bench.measure``
(a CUDA graph of back-to-back calls, inputs rotated and L2 flushed between
samples where the working set fits in twice the L2). Torch's calls go through
the same ``measure`` with a timer that captures them in a
``torch.cuda.CUDAGraph`` and brackets its replay with ``torch.cuda.Event``.
Every configuration, and torch, is checked against the target's reference
before it is timed; those that fail are reported and skipped.

Run: ``python3 benchmarks/bench_kernels.py --backend cuda``;
``--backend opencl --quick`` is a smoke test on a CPU (PoCL).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common

common.add_repo_to_path()

from pytest_ktune._bench import (  # noqa: E402
    BenchConfig,
    Measurement,
    measure,
    measure_ab,
    rotation_for,
    should_flush,
)
from pytest_ktune._errors import BackendUnavailable, KtuneError, MismatchError  # noqa: E402
from pytest_ktune._runtime import run  # noqa: E402
from pytest_ktune._target import Case, Target  # noqa: E402
from pytest_ktune._verify import call_reference, case_seed, check_outputs, draw_inputs, upload  # noqa: E402
from pytest_ktune.backends import Backend, Launch, create, resolve  # noqa: E402
from pytest_ktune.backends.base import DeviceInfo, Resources, Timer  # noqa: E402

Params = dict[str, Any]

# Inputs whose first dimension indexes the output's rows: for large outputs the
# reference runs on a sample of rows only (the full float64 reference of a
# 16384 x 11008 case takes longer than timing all 60 of its configurations).
ROW_INPUTS: Mapping[str, tuple[str, ...]] = {"rmsnorm": ("x",), "silu_and_mul": ("x",)}


def load_targets() -> list[Target]:
    from example_project.kernels import rmsnorm, silu_and_mul

    return [rmsnorm.rmsnorm, silu_and_mul.silu_and_mul]


# -- torch eager ops -------------------------------------------------------------------------


def torch_ops(torch: Any) -> dict[str, Callable[..., Any]]:
    """The torch eager equivalent of each target, by target name, taking the target's arguments."""
    functional = torch.nn.functional

    def rmsnorm(x: Any, w: Any, eps: float = 1e-6) -> Any:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)

    def silu_and_mul(x: Any) -> Any:
        i = x.shape[-1] // 2
        return functional.silu(x[:, :i]) * x[:, i:]

    return {"rmsnorm": rmsnorm, "silu_and_mul": silu_and_mul}


# -- reading outputs back ----------------------------------------------------------------------


class ArrayIO(Protocol):
    """How to bring a device output (or some of its rows) to the host, and test it for NaN/inf."""

    def host(self, a: Any) -> np.ndarray: ...

    def rows(self, a: Any, rows: np.ndarray) -> np.ndarray: ...

    def all_finite(self, a: Any) -> bool: ...


class BackendIO:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.cp: Any = getattr(backend, "cp", None) if backend.name == "cuda" else None

    def host(self, a: Any) -> np.ndarray:
        return self.backend.to_host(a)

    def rows(self, a: Any, rows: np.ndarray) -> np.ndarray:
        if self.cp is not None:
            return self.backend.to_host(a[self.cp.asarray(rows)])
        out: np.ndarray = self.backend.to_host(a)[rows]
        return out

    def all_finite(self, a: Any) -> bool:
        if self.cp is not None:
            return bool(self.cp.isfinite(a).all())
        return bool(np.isfinite(self.backend.to_host(a)).all())


class TorchIO:
    def __init__(self, torch: Any) -> None:
        self.torch = torch

    def host(self, a: Any) -> np.ndarray:
        out: np.ndarray = np.asarray(a.detach().cpu().numpy())
        return out

    def rows(self, a: Any, rows: np.ndarray) -> np.ndarray:
        idx = self.torch.as_tensor(rows, device=a.device)
        return np.asarray(a.index_select(0, idx).detach().cpu().numpy())

    def all_finite(self, a: Any) -> bool:
        return bool(self.torch.isfinite(a).all().item())


# -- verification ----------------------------------------------------------------------------


def pick_rows(n_rows: int, row_elems: int, limit: int) -> np.ndarray | None:
    """Evenly spaced rows (the first and last among them) holding about ``limit`` elements;
    None when the whole output is within the limit."""
    if n_rows * row_elems <= limit or n_rows <= 2:
        return None
    m = max(2, min(n_rows, limit // max(1, row_elems)))
    return np.unique(np.linspace(0, n_rows - 1, m).round().astype(np.int64))


@dataclass
class Verifier:
    """Checks outputs of one case against the target's reference, computed once for the case.

    Outputs of up to ``limit`` elements are compared whole. Larger ones are
    compared on a sample of rows (the reference then runs on those rows only),
    and every element is tested for NaN, which catches unwritten elements since
    checked runs' outputs are poisoned with NaN.
    """

    target: Target
    case_id: str
    host: Mapping[str, Any]
    seed: int
    backend_name: str
    limit: int
    rows: np.ndarray | None = None
    expected: list[np.ndarray] | None = None
    description: str = ""

    def _prepare(self, shapes: list[tuple[int, ...]]) -> None:
        names = ROW_INPUTS.get(self.target.name)
        n_rows = shapes[0][0] if shapes[0] else 1
        same_rows = all(len(s) >= 1 and s[0] == n_rows for s in shapes)
        elems = sum(math.prod(s) for s in shapes)
        row_elems = elems // max(1, n_rows)
        rows = pick_rows(n_rows, row_elems, self.limit) if same_rows else None
        inputs = dict(self.host)
        if rows is not None and names and all(
                isinstance(inputs.get(n), np.ndarray) and inputs[n].shape[0] == n_rows for n in names):
            for n in names:
                inputs[n] = inputs[n][rows]
            sliced = True
        else:
            sliced = False
        ref = call_reference(self.target, inputs)
        refs = [np.asarray(r) for r in (ref if isinstance(ref, (tuple, list)) else [ref])]
        if rows is not None and not sliced:
            refs = [r[rows] for r in refs]
        self.rows = rows
        self.expected = refs
        self.description = "full" if rows is None else (
            f"{len(rows)} of {n_rows} rows against the reference; all elements finite")

    def verify(self, result: Any, io: ArrayIO, what: str) -> str:
        outs = list(result) if isinstance(result, (tuple, list)) else [result]
        if self.expected is None:
            self._prepare([tuple(int(d) for d in o.shape) for o in outs])
        assert self.expected is not None
        rows = self.rows
        got = [io.host(o) if rows is None else io.rows(o, rows) for o in outs]
        check_outputs(self.target, self.case_id, got, self.expected, seed=self.seed,
                      backend=self.backend_name, repro=f"{what}; inputs drawn with seed {self.seed}")
        if self.rows is not None:
            bad = [i for i, o in enumerate(outs) if not io.all_finite(o)]
            if bad:
                raise MismatchError(
                    f"case {self.case_id}: output(s) {bad} of {what} hold NaN or inf outside the rows "
                    "compared with the reference (unwritten elements stay NaN)", where=self.target.where,
                    hint="check the kernel's indexing for the rows it skips")
        return self.description


# -- torch timing through _bench.measure -------------------------------------------------------


@dataclass
class TorchCall:
    """A torch eager call dressed as a recorded launch, so that ``_bench.measure`` can replay it."""

    fn: Callable[..., Any]
    kwargs: Mapping[str, Any]
    name: str = "torch"

    def launch(self, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any]) -> None:
        self.fn(**self.kwargs)  # the output is dropped, as a caller that consumed it would

    def resources(self) -> Resources:
        return Resources(registers=0, shared_bytes=0, local_bytes=0, max_threads_per_block=0)


class TorchSide:
    """Torch on the backend's GPU: uploads, the L2 flush buffer, and graph timers."""

    def __init__(self, torch: Any, device: DeviceInfo) -> None:
        self.torch = torch
        self.dev = torch.device("cuda", torch.cuda.current_device())
        self.ops = torch_ops(torch)
        self.io = TorchIO(torch)
        self.flush_buf = torch.empty(max(2 * device.l2_bytes, 1 << 20), dtype=torch.uint8, device=self.dev)
        self.modes: list[str] = []

    def upload(self, host: Mapping[str, Any]) -> dict[str, Any]:
        return {k: (self.torch.from_numpy(np.ascontiguousarray(v)).to(self.dev)
                    if isinstance(v, np.ndarray) else v) for k, v in host.items()}

    def flush(self) -> None:
        self.flush_buf.fill_(1)

    def timer(self, launch_sets: Sequence[Sequence[Launch]], repeats: int) -> Timer:
        return TorchGraphTimer(self, launch_sets, repeats)

    def release(self) -> None:
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()


class TorchGraphTimer:
    """``repeats`` passes over the launch sets captured in one CUDA graph; its replay is timed
    between two CUDA events, after writing the flush buffer when asked. Falls back to timing
    eager calls between the events if capture fails."""

    def __init__(self, side: TorchSide, launch_sets: Sequence[Sequence[Launch]], repeats: int) -> None:
        torch = side.torch
        self.side = side
        self.sets = launch_sets
        self.repeats = repeats
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        self.graph: Any = None
        self.mode = "graph"
        try:
            warm = torch.cuda.Stream()
            warm.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(warm):
                self._pass()
            torch.cuda.current_stream().wait_stream(warm)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(repeats):
                    self._pass()
            self.graph = graph
        except Exception as exc:  # capture unsupported: time eager calls instead, and say so
            self.graph = None
            self.mode = f"events (graph capture failed: {type(exc).__name__}: {exc})"
            torch.cuda.synchronize()
        side.modes.append(self.mode)

    def _pass(self) -> None:
        for launches in self.sets:
            for launch in launches:
                launch.function.launch(launch.grid, launch.block, launch.args)

    def sample(self, flush: bool) -> float:
        torch = self.side.torch
        stream = torch.cuda.current_stream()
        if flush:
            self.side.flush()
        self.start.record(stream)
        if self.graph is not None:
            self.graph.replay()
        else:
            for _ in range(self.repeats):
                self._pass()
        self.end.record(stream)
        self.end.synchronize()
        return float(self.start.elapsed_time(self.end)) * 1e-3 / self.repeats

    def close(self) -> None:
        self.graph = None
        self.sets = ()


class TimerSwap:
    """The run's backend with its timer swapped, so that ``_bench.measure`` times torch's calls
    with exactly the calibration, warm-up and stopping rule it uses for kernels."""

    def __init__(self, inner: Backend,
                 make_timer: Callable[[Sequence[Sequence[Launch]], int], Timer]) -> None:
        self.inner = inner
        self.name = inner.name
        self.device = inner.device
        self._make_timer = make_timer

    def compile(self, source: str, defines: Mapping[str, Any], *, filename: str) -> Any:
        return self.inner.compile(source, defines, filename=filename)

    def to_device(self, a: np.ndarray) -> Any:
        return self.inner.to_device(a)

    def to_host(self, a: Any) -> np.ndarray:
        return self.inner.to_host(a)

    def empty(self, shape: Sequence[int], dtype: Any, *, poison: bool = False) -> Any:
        return self.inner.empty(shape, dtype, poison=poison)

    def owns(self, obj: Any) -> bool:
        return self.inner.owns(obj)

    def synchronize(self) -> None:
        self.inner.synchronize()

    def timer(self, launch_sets: Sequence[Sequence[Launch]], repeats: int) -> Timer:
        return self._make_timer(launch_sets, repeats)

    def copy_bandwidth(self) -> float:
        return self.inner.copy_bandwidth()

    def release(self) -> None:
        self.inner.release()


def open_torch(backend: Backend, enabled: bool) -> tuple[TorchSide | None, str]:
    """Torch on the same GPU, or None and why not."""
    if not enabled:
        return None, "disabled with --no-torch"
    if backend.name != "cuda":
        return None, "torch eager is timed on the CUDA backend only"
    try:
        import torch
    except ImportError as exc:
        return None, f"torch is not importable ({exc})"
    try:
        if not torch.cuda.is_available():
            return None, "torch sees no CUDA device"
        return TorchSide(torch, backend.device), ""
    except Exception as exc:
        return None, f"torch could not use the GPU ({type(exc).__name__}: {exc})"


# -- results ---------------------------------------------------------------------------------


def measurement_json(m: Measurement | None) -> dict[str, Any] | None:
    if m is None:
        return None
    lo, hi = m.ci
    return {"median_us": common.us(m.median), "iqr_us": common.us(m.iqr),
            "ci95_us": [common.us(lo), common.us(hi)], "rel_ci": round(m.rel_ci, 5),
            "n_samples": len(m.samples), "repeats": m.repeats, "flushed": m.flushed,
            "rotation": m.rotation, "samples_us": [common.us(s) for s in m.samples]}


@dataclass
class ConfigResult:
    params: Params
    is_default: bool
    status: str = "pending"
    error: str = ""
    verified: str = ""
    m: Measurement | None = None
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"params": self.params, "default": self.is_default, "status": self.status,
                "error": self.error or None, "verified": self.verified or None,
                "timing": measurement_json(self.m), "wall_s": round(self.seconds, 3)}


@dataclass
class CaseResult:
    target: str
    case: str
    key: dict[str, Any]
    shapes: dict[str, str]
    bytes_moved: int | None
    working_set: int
    rotation: int
    flush: bool
    configs: list[ConfigResult] = field(default_factory=list)
    final_default: Measurement | None = None
    final_best: Measurement | None = None
    final_how: str = ""
    torch_m: Measurement | None = None
    torch_status: str = ""
    torch_mode: str = ""
    torch_verified: str = ""
    note: str = ""
    seconds: float = 0.0

    @property
    def default(self) -> ConfigResult | None:
        return next((c for c in self.configs if c.is_default), None)

    @property
    def best(self) -> ConfigResult | None:
        ok = [c for c in self.configs if c.m is not None]
        return min(ok, key=lambda c: c.m.median if c.m else math.inf) if ok else None

    def final(self, which: str) -> float | None:
        """Median seconds of the final (A/B) timing of ``default``, ``best`` or ``torch``."""
        m = {"default": self.final_default, "best": self.final_best, "torch": self.torch_m}[which]
        return m.median if m is not None else None

    def gbps(self, seconds: float | None) -> float | None:
        if not seconds or not self.bytes_moved:
            return None
        return self.bytes_moved / seconds / 1e9

    def to_json(self, copy_bw: float) -> dict[str, Any]:
        t_def, t_best, t_torch = self.final("default"), self.final("best"), self.final("torch")
        best = self.best

        def frac(t: float | None) -> float | None:
            g = self.gbps(t)
            return round(g * 1e9 / copy_bw, 4) if g else None

        def rnd(v: float | None, d: int = 3) -> float | None:
            return round(v, d) if v is not None else None

        return {
            "target": self.target, "case": self.case, "key": self.key, "inputs": self.shapes,
            "bytes_moved": self.bytes_moved, "working_set_bytes": self.working_set,
            "rotation": self.rotation, "flush": self.flush, "note": self.note or None,
            "wall_s": round(self.seconds, 2),
            "summary": {
                "default_us": common.us(t_def), "best_us": common.us(t_best),
                "best_params": best.params if best else None, "torch_us": common.us(t_torch),
                "speedup_best_vs_default": rnd(t_def / t_best if t_def and t_best else None, 4),
                "speedup_best_vs_torch": rnd(t_torch / t_best if t_torch and t_best else None, 4),
                "gbps": {"default": rnd(self.gbps(t_def)), "best": rnd(self.gbps(t_best)),
                         "torch": rnd(self.gbps(t_torch))},
                "copy_bw_fraction": {"default": frac(t_def), "best": frac(t_best), "torch": frac(t_torch)},
            },
            "final": {"how": self.final_how, "default": measurement_json(self.final_default),
                      "best": measurement_json(self.final_best)},
            "torch": {"status": self.torch_status, "mode": self.torch_mode or None,
                      "verified": self.torch_verified or None, "timing": measurement_json(self.torch_m)},
            "configs": [c.to_json() for c in self.configs],
        }


# -- the sweep -------------------------------------------------------------------------------


def short_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc.message if isinstance(exc, KtuneError) else exc}"
    lines = text.strip().splitlines()
    return "\n".join(lines[:12]) + ("\n..." if len(lines) > 12 else "")


def choose_configs(target: Target, key: Mapping[str, Any], max_configs: int | None) -> list[Params]:
    """Every feasible point, the default first; at most ``max_configs`` evenly spread when given."""
    feasible = [dict(p) for p in target.space.feasible(key)]
    default = dict(target.default)
    head = [default] if default in feasible else []
    rest = [p for p in feasible if p != default]
    if max_configs is not None:
        n = max(0, max_configs - len(head))
        if n == 0:
            rest = []
        elif n == 1:
            rest = rest[:1]
        elif len(rest) > n:
            rest = [rest[i] for i in sorted({round(i * (len(rest) - 1) / (n - 1)) for i in range(n)})]
    return head + rest


def select_cases(target: Target, backend: Backend, quick: bool, pattern: str | None) -> list[Case]:
    cases = [c for c in target.cases if c.runs_on(backend.name)]
    if pattern:
        cases = [c for c in cases if pattern in target.case_id(c)]
    if quick:
        # The smallest case of each dtype.
        by_dtype: dict[str, Case] = {}
        for c in sorted(cases, key=lambda c: c.input_bytes):
            dts = ",".join(sorted({t.dtype.name for t in c.tensors.values()}))
            by_dtype.setdefault(dts, c)
        cases = [c for c in cases if c in by_dtype.values()]
    return cases


class Bench:
    def __init__(self, backend: Backend, args: argparse.Namespace, *, cfg: BenchConfig,
                 torch_cfg: BenchConfig, torch: TorchSide | None, torch_note: str) -> None:
        self.backend = backend
        self.cfg = cfg
        self.torch_cfg = torch_cfg
        self.torch = torch
        self.torch_note = torch_note
        self.args = args
        self.io = BackendIO(backend)

    def kernel_sets(self, target: Target, params: Params, dev_sets: Sequence[Mapping[str, Any]]
                    ) -> list[list[Launch]]:
        sets = []
        for d in dev_sets:
            _, launches = run(self.backend, target, params, d)
            sets.append(launches)
        self.backend.synchronize()
        return sets

    def case(self, target: Target, case: Case) -> CaseResult:
        t0 = time.perf_counter()
        backend = self.backend
        case_id = target.case_id(case)
        key = target.case_key(case)
        spec = target.case_args(case)
        bytes_moved = target.bytes_for(spec)
        work = bytes_moved or 2 * case.input_bytes
        l2 = backend.device.l2_bytes
        k = rotation_for(work, l2, case.warm_cache)
        flush = should_flush(work, l2, case.warm_cache)
        shapes = {n: f"{tuple(t.shape)} {t.dtype.name}" for n, t in case.tensors.items()}
        res = CaseResult(target.name, case_id, dict(key), shapes, bytes_moved, work, k, flush)
        configs = choose_configs(target, key, self.args.max_configs)
        if not configs:
            res.note = "the space has no feasible point for this key"
            return res
        seed = case_seed(self.args.seed, target, case_id, "bench")
        host_sets = [draw_inputs(case, seed + j) for j in range(k)]
        dev_sets = [upload(backend, h) for h in host_sets]
        verifier = Verifier(target, case_id, host_sets[0], seed, backend.name, self.args.verify_elements)
        default = dict(target.default)

        for params in configs:
            c = ConfigResult(params, params == default)
            res.configs.append(c)
            tc = time.perf_counter()
            try:
                target.check_config(params, key, "configuration")
                c.verified, c.m = self.config(target, params, dev_sets, verifier, flush)
                c.status = "ok"
            except Exception as exc:  # one bad configuration must not end the sweep
                c.status = "failed"
                c.error = short_error(exc)
            c.seconds = time.perf_counter() - tc

        self.final(res, target, dev_sets, flush)
        del dev_sets
        backend.release()
        if self.torch is not None:
            self.time_torch(res, target, host_sets, verifier, flush)
        else:
            res.torch_status = f"skipped: {self.torch_note}"
        res.seconds = time.perf_counter() - t0
        return res

    def config(self, target: Target, params: Params, dev_sets: Sequence[Mapping[str, Any]],
               verifier: Verifier, flush: bool) -> tuple[str, Measurement]:
        """Check one configuration on the first input set, then time it over all of them."""
        result, first = run(self.backend, target, params, dev_sets[0], poison=True)
        self.backend.synchronize()
        verified = verifier.verify(result, self.io, f"configuration {params_text(params)}")
        del result
        sets = [first, *self.kernel_sets(target, params, dev_sets[1:])]
        return verified, measure(self.backend, sets, self.cfg, flush=flush)

    def final(self, res: CaseResult, target: Target, dev_sets: Sequence[Mapping[str, Any]],
              flush: bool) -> None:
        """Default and best timed again, interleaved, in the same conditions."""
        d, b = res.default, res.best
        if b is None:
            res.final_how = "no configuration passed"
            return
        if d is None or d.m is None:
            res.final_best = b.m
            res.final_how = "sweep (the default failed or is not feasible)"
            return
        if d is b or self.args.no_ab:
            res.final_default, res.final_best = d.m, b.m
            res.final_how = "sweep (the default is the best)" if d is b else "sweep (--no-ab)"
            return
        try:
            sa = self.kernel_sets(target, d.params, dev_sets)
            sb = self.kernel_sets(target, b.params, dev_sets)
            res.final_default, res.final_best = measure_ab(self.backend, sa, sb, self.cfg, flush=flush)
            res.final_how = "measure_ab: default and best interleaved (ABBA)"
            del sa, sb
        except Exception as exc:
            res.final_default, res.final_best = d.m, b.m
            res.final_how = f"sweep (A/B failed: {short_error(exc)})"

    def time_torch(self, res: CaseResult, target: Target, host_sets: Sequence[Mapping[str, Any]],
                   verifier: Verifier, flush: bool) -> None:
        side = self.torch
        assert side is not None
        op = side.ops.get(target.name)
        if op is None:
            res.torch_status = f"skipped: no torch op for {target.name}"
            return
        try:
            tsets = [side.upload(h) for h in host_sets]
            out = op(**tsets[0])
            side.torch.cuda.synchronize()
            res.torch_verified = verifier.verify(out, side.io, "torch eager")
            del out
            launches: list[list[Launch]] = [[Launch(TorchCall(op, t), (1,), (1,), ())] for t in tsets]
            side.modes.clear()
            proxy = TimerSwap(self.backend, side.timer)
            res.torch_m = measure(proxy, launches, self.torch_cfg, flush=flush)
            res.torch_mode = "; ".join(sorted(set(side.modes)))
            res.torch_status = "ok"
            del launches, tsets
        except Exception as exc:
            res.torch_status = f"failed: {short_error(exc)}"
        finally:
            try:
                side.release()
            except Exception as exc:
                res.torch_status += f" (release failed: {type(exc).__name__})"


# -- report ----------------------------------------------------------------------------------


def params_text(p: Mapping[str, Any] | None) -> str:
    return " ".join(f"{k}={v}" for k, v in p.items()) if p else "n/a"


def best_params(results: Sequence[CaseResult]) -> list[dict[str, Any]]:
    """Per (target, key): the configuration with the lowest geometric-mean sweep time over
    the cases of that key, among configurations that passed in all of them."""
    groups: dict[tuple[str, str], list[CaseResult]] = {}
    for r in results:
        groups.setdefault((r.target, json.dumps(r.key, sort_keys=True)), []).append(r)
    out = []
    for (tname, _), rs in groups.items():
        scores: dict[str, list[float]] = {}
        params_of: dict[str, Params] = {}
        for r in rs:
            for c in r.configs:
                if c.m is not None:
                    ps = json.dumps(c.params, sort_keys=True)
                    params_of[ps] = c.params
                    scores.setdefault(ps, []).append(c.m.median)
        complete = {ps: v for ps, v in scores.items() if len(v) == len(rs)}
        if not complete:
            continue
        ps = min(complete, key=lambda s: sum(math.log(v) for v in complete[s]))
        out.append({"target": tname, "key": rs[0].key, "params": params_of[ps],
                    "cases": [r.case for r in rs],
                    "sweep_median_us": [common.us(v) for v in complete[ps]]})
    return out


def markdown(results: Sequence[CaseResult], meta: Mapping[str, Any], copy_bw: float) -> str:
    def frac(r: CaseResult, t: float | None) -> str:
        g = r.gbps(t)
        return f"{100 * g * 1e9 / copy_bw:.0f}" if g else "n/a"

    rows = []
    for r in results:
        d, b, t = r.final("default"), r.final("best"), r.final("torch")
        best = r.best
        n_ok = sum(1 for c in r.configs if c.m is not None)
        rows.append([
            r.target, r.case, common.fmt_us(d), common.fmt_us(b),
            params_text(best.params if best else None), common.fmt_us(t),
            common.fmt_num(d / b if d and b else None, ".2f", "×"),
            common.fmt_num(t / b if t and b else None, ".2f", "×"),
            " / ".join(common.fmt_num(r.gbps(x), ".0f") for x in (d, b, t)),
            " / ".join(frac(r, x) for x in (d, b, t)),
            f"{n_ok}/{len(r.configs)}",
        ])
    header = ["target", "case", "default µs", "best µs", "best params", "torch µs",
              "best vs default", "best vs torch", "GB/s def / best / torch",
              "% copy BW def / best / torch", "configs ok"]
    gm = meta["geomean_best_vs_default"]
    gm_t = meta["geomean_best_vs_torch"]
    lines = [
        f"# bench_kernels: {meta['device']['name']} ({meta['backend']})",
        "",
        f"- date: {meta['date']}",
        f"- command: `{meta['command']}`",
        f"- device copy bandwidth (measured in this run, read + write): {copy_bw / 1e9:.0f} GB/s",
        f"- L2: {meta['device']['l2_bytes'] / 2**20:.0f} MiB; bench config: {meta['bench_config_text']}",
        f"- torch: {meta['torch']}",
        "",
        common.md_table(header, rows),
        "",
        f"Geometric mean of best vs default over {meta['geomean_cases']} case(s): "
        f"{common.fmt_num(gm, '.3f', '×')}; best vs torch eager: {common.fmt_num(gm_t, '.3f', '×')}.",
        "",
        "Times are medians per call. *best vs default* is default time / best time (above 1: the "
        "sweep found a faster configuration); *best vs torch* is torch time / best time. GB/s counts "
        "the target's `bytes_moved` (what the op must read and write) for all three, torch included. "
        "Default and best come from a final interleaved A/B timing (`measure_ab`) after the sweep.",
    ]
    failed = [(r, c) for r in results for c in r.configs if c.status == "failed"]
    torch_bad = [r for r in results if r.torch_status.startswith("failed")]
    torch_eager = [r for r in results if r.torch_mode and r.torch_mode != "graph"]
    notes = [r for r in results if r.note]
    reversed_ab = [r for r in results
                   if (td := r.final("default")) and (tb := r.final("best")) and tb > td]
    if failed or torch_bad or torch_eager or notes or reversed_ab:
        lines += ["", "## Failures and notes", ""]
        for r, c in failed:
            first = c.error.splitlines()[0] if c.error else ""
            lines.append(f"- {r.target}[{r.case}] {params_text(c.params)}: {first}")
        for r in torch_bad:
            lines.append(f"- {r.target}[{r.case}] torch: {r.torch_status.splitlines()[0]}")
        for r in torch_eager:
            lines.append(f"- {r.target}[{r.case}] torch timed without a graph: {r.torch_mode}")
        for r in notes:
            lines.append(f"- {r.target}[{r.case}]: {r.note}")
        for r in reversed_ab:
            picked = params_text(r.best.params if r.best else None)
            lines.append(f"- {r.target}[{r.case}]: the sweep's fastest ({picked}) was slower than the "
                         "default in the final A/B: the two are within noise of each other")
    return "\n".join(lines)


# -- main ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--backend", default="cuda", choices=["cuda", "opencl", "auto"],
                   help="where to run (default: cuda)")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: the smallest case of each dtype, at most 6 configurations, short timing")
    p.add_argument("--targets", default=None, help="comma-separated target names (default: all)")
    p.add_argument("--cases", default=None, help="only cases whose id contains this text")
    p.add_argument("--max-configs", type=int, default=None,
                   help="time at most this many configurations per case, evenly spread (default: all)")
    p.add_argument("--min-samples", type=int, default=20,
                   help="at least this many timing samples per measurement (default: 20)")
    p.add_argument("--verify-elements", type=int, default=1 << 20,
                   help="outputs above this many elements are compared on a sample of rows (default: 1Mi)")
    p.add_argument("--seed", type=int, default=0, help="base seed of the inputs (default: 0)")
    p.add_argument("--no-torch", action="store_true", help="do not time torch eager")
    p.add_argument("--no-ab", action="store_true", help="skip the final interleaved default/best timing")
    p.add_argument("--list", action="store_true", help="list cases and configuration counts, then exit")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON output (default: benchmarks/results/bench_kernels-<backend>[-quick].json); "
                        "the markdown goes beside it with the suffix .md")
    args = p.parse_args(argv)
    if args.quick and args.max_configs is None:
        args.max_configs = 6
    return args


def make_backend(choice: str) -> Backend:
    try:
        return create(resolve(choice))
    except BackendUnavailable as exc:
        print(f"error: the {choice} backend is not available here:\n{exc.render()}", file=sys.stderr)
        raise SystemExit(2) from None


def bench_configs(backend: Backend, args: argparse.Namespace) -> tuple[BenchConfig, BenchConfig]:
    cfg = BenchConfig.for_backend(backend)
    if args.quick:
        cfg = dataclasses.replace(cfg, max_samples=min(cfg.max_samples, 20),
                                  max_time_s=min(cfg.max_time_s, 0.5),
                                  min_samples=min(cfg.min_samples, args.min_samples))
        return cfg, cfg
    cfg = dataclasses.replace(cfg, min_samples=max(cfg.min_samples, args.min_samples))
    # Torch: at least 20 samples whatever --min-samples says.
    return cfg, dataclasses.replace(cfg, min_samples=max(cfg.min_samples, 20))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    targets = load_targets()
    if args.targets:
        wanted = {t.strip() for t in args.targets.split(",") if t.strip()}
        unknown = wanted - {t.name for t in targets}
        if unknown:
            print(f"error: unknown target(s) {sorted(unknown)}; known: {[t.name for t in targets]}",
                  file=sys.stderr)
            return 2
        targets = [t for t in targets if t.name in wanted]
    backend = make_backend(args.backend)
    plan = [(t, c) for t in targets if backend.name in t.sources
            for c in select_cases(t, backend, args.quick, args.cases)]
    if args.list:
        for t, c in plan:
            n = len(choose_configs(t, t.case_key(c), args.max_configs))
            print(f"{t.name}[{t.case_id(c)}]: {n} configuration(s), inputs {c.input_bytes / 2**20:.1f} MiB")
        return 0
    if not plan:
        print(f"error: no case to run on {backend.name}", file=sys.stderr)
        return 2

    t_start = time.perf_counter()
    dev = backend.device
    print(f"device: {dev.name} ({dev.arch}; {dev.compiler}); L2 {dev.l2_bytes / 2**20:.0f} MiB", flush=True)
    copy_bw = backend.copy_bandwidth()
    print(f"copy bandwidth: {copy_bw / 1e9:.0f} GB/s (read + write)", flush=True)
    cfg, torch_cfg = bench_configs(backend, args)
    torch_side, torch_note = open_torch(backend, not args.no_torch)
    print(f"torch eager: {'on' if torch_side else 'off: ' + torch_note}", flush=True)
    bench = Bench(backend, args, cfg=cfg, torch_cfg=torch_cfg, torch=torch_side, torch_note=torch_note)

    results: list[CaseResult] = []
    for target, case in plan:
        label = f"{target.name}[{target.case_id(case)}]"
        try:
            r = bench.case(target, case)
        except Exception as exc:  # a case that cannot even start is reported, the rest still run
            r = CaseResult(target.name, target.case_id(case), {}, {}, None, 0, 0, False,
                           note=f"case failed: {short_error(exc)}")
            with contextlib.suppress(Exception):
                backend.release()
        results.append(r)
        b = r.best
        n_ok = sum(1 for c in r.configs if c.m is not None)
        print(f"{label}: {n_ok}/{len(r.configs)} ok; default {common.fmt_us(r.final('default'))} µs, "
              f"best {common.fmt_us(r.final('best'))} µs ({params_text(b.params if b else None)}), "
              f"torch {common.fmt_us(r.final('torch'))} µs  [{r.seconds:.1f} s, "
              f"total {time.perf_counter() - t_start:.0f} s]", flush=True)
        if r.note:
            print(f"  note: {r.note.splitlines()[0]}", flush=True)

    speedups = [td / tb for r in results if (td := r.final("default")) and (tb := r.final("best"))]
    vs_torch = [tt / tb for r in results if (tt := r.final("torch")) and (tb := r.final("best"))]
    gm, gm_t = common.geomean(speedups), common.geomean(vs_torch)
    torch_text = "off: " + torch_note if torch_side is None else (
        f"torch {common.versions().get('torch', '?')}, eager, timed through CUDA graphs")
    meta: dict[str, Any] = {
        "script": "bench_kernels",
        "date": common.now_utc(),
        "command": common.command_line(),
        "backend": backend.name,
        "device": {**dataclasses.asdict(dev), "id": dev.id},
        "versions": common.versions(),
        "copy_bandwidth_Bps": copy_bw,
        "bench_config": dataclasses.asdict(cfg),
        "torch_bench_config": dataclasses.asdict(torch_cfg),
        "bench_config_text": f"min {cfg.min_samples} samples of >= {cfg.min_sample_s * 1e6:.0f} µs, "
                             f"CI target {cfg.ci_target:.0%}, at most {cfg.max_samples} samples / "
                             f"{cfg.max_time_s:g} s",
        "options": {"quick": args.quick, "max_configs": args.max_configs, "seed": args.seed,
                    "verify_elements": args.verify_elements, "targets": args.targets, "cases": args.cases},
        "torch": torch_text,
        "geomean_best_vs_default": gm,
        "geomean_best_vs_torch": gm_t,
        "geomean_cases": len(speedups),
        "wall_s": round(time.perf_counter() - t_start, 1),
    }
    md = markdown(results, meta, copy_bw)
    data = {**meta, "cases": [r.to_json(copy_bw) for r in results], "best_params": best_params(results)}
    out = args.out or common.RESULTS / f"bench_kernels-{backend.name}{'-quick' if args.quick else ''}.json"
    md_path = common.write_results(out, data, md)
    print()
    print(md)
    print(f"\nwrote {common.shown_path(out)} and {common.shown_path(md_path)} "
          f"({time.perf_counter() - t_start:.0f} s)")
    ran = [r for r in results if r.best is not None]
    return 0 if ran else 1


if __name__ == "__main__":
    sys.exit(main())
