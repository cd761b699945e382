"""Time every example kernel against its default, torch eager, torch.compile and Liger-Kernel, in one run.

For every case of every target in ``example_project.kernels`` that runs on the
chosen backend, the table holds:

* **default**: the target's ``default=`` configuration (what serving stacks ship);
* **tuned**: the parameters recorded for this device and key in the params file
  (``--params``, by default ``example_project/ktune-params.json``), as a
  production call would use them; with ``--sweep``, the fastest point of an
  exhaustive sweep of the space instead. Where they differ from the default,
  default and tuned are timed interleaved (``_bench.measure_ab``);
* **torch eager**: the op written as a PyTorch user would write it (CUDA only);
* **torch.compile**: the same function through ``torch.compile(fn, dynamic=False)``,
  compiled afresh for each case (one compiled function per shape) and warmed up;
* **Liger**: Liger-Kernel's op where it has one (RMSNorm, fused add + RMSNorm, SwiGLU, GEGLU), called
  as its modules call it (``_liger``: gate and up as two contiguous tensors, split before timing);
  "not installed" where ``liger_kernel`` does not import (CUDA only);
* **floor**, on small cases (bytes that would move in under 10 µs at the copy bandwidth): an empty
  kernel and a one-element copy timed as the kernels are, and a one-element ``copy_`` timed as torch is
  (``_floor``): the launch-bound time no kernel of one launch can beat;
* GB/s from the target's ``bytes_moved``, and its share of the device's copy
  bandwidth, measured in the same run (the best of a device-to-device memcpy and
  a vectorised copy kernel).

Everything is timed with pytest-ktune's own method: the launches of one call
are recorded with ``_runtime.run`` and replayed by ``_bench.measure`` (a CUDA
graph of back-to-back calls, inputs rotated and L2 flushed between samples
where the working set fits in twice the L2). Torch's and Liger's calls go through the same
``measure`` with a timer that captures them in a ``torch.cuda.CUDAGraph``.
Every configuration, torch and Liger is checked against the target's reference
before it is timed; those that fail are reported and not timed.

The summary gives the geometric mean of default time over tuned time, and the
goals (at least 1.5x over the default; at least 85 % of copy bandwidth at 256 MB
moved and more; tuned at or ahead of torch.compile; issue 26's: at or ahead of the
best of torch eager, torch.compile and Liger on every case, with a geomean of at
least 1.10x), each met or missed, by how much.

Run: ``python3 benchmarks/bench_kernels.py --backend cuda``;
``--backend opencl --quick`` is a smoke test on a CPU (PoCL). torch is optional
and imported only here, on CUDA.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import math
import pkgutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common
import _floor
import _liger

common.add_repo_to_path()

from pytest_ktune.backends import Backend, Launch, create, resolve  # noqa: E402
from pytest_ktune.backends.base import DeviceInfo, Resources, Timer  # noqa: E402
from pytest_ktune.core.case import Case, ToleranceSpec  # noqa: E402
from pytest_ktune.core.dtypes import bfloat16_dtype, is_bfloat16  # noqa: E402
from pytest_ktune.core.errors import BackendUnavailable, KtuneError, MismatchError, StoreError  # noqa: E402
from pytest_ktune.core.store import Store, target_id  # noqa: E402
from pytest_ktune.core.target import Target  # noqa: E402
from pytest_ktune.measure.ab import measure_ab  # noqa: E402
from pytest_ktune.measure.bench import BenchConfig, Measurement, measure, rotation_for, should_flush  # noqa: E402
from pytest_ktune.measure.runtime import run  # noqa: E402
from pytest_ktune.measure.verify import call_reference, case_seed, check_outputs, draw_inputs, upload  # noqa: E402

Params = dict[str, Any]

# The goals for the suite.
GOAL_SPEEDUP = 1.5          # geomean of default time / tuned time
GOAL_COPY_FRACTION = 0.85   # share of copy bandwidth, tuned, at large shapes
LARGE_BYTES = 256 * 10**6   # "large": at least this many bytes moved
GOAL_VS_BEST = 1.10         # geomean of the best alternative's time / tuned time (issue 26)
SMALL_S = 10e-6             # "small": its bytes take under this long at the copy bandwidth (launch-bound)

# The nine example targets in the order of the issue; others found later go after them.
ORDER = ("rmsnorm", "fused_add_rmsnorm", "silu_and_mul", "gelu_tanh_and_mul", "rotary_neox",
         "per_token_group_quant", "moe_topk_softmax", "merge_attn_states", "reshape_and_cache_flash")


@dataclass(frozen=True)
class RowPlan:
    """Where the rows lie in a target's inputs and outputs, so that a large output can be checked on
    a sample of rows: with the reference computed for those rows only where ``inputs`` names the
    inputs to slice, or computed whole and then sliced where ``inputs`` is empty."""

    inputs: Mapping[str, int]      # input name -> its row (token) axis
    outputs: tuple[int, ...]       # row axis of each output, in order


ROW_PLANS: Mapping[str, RowPlan] = {
    "rmsnorm": RowPlan({"x": 0}, (0,)),
    "fused_add_rmsnorm": RowPlan({"x": 0, "residual": 0}, (0, 0)),
    "silu_and_mul": RowPlan({"x": 0}, (0,)),
    "gelu_tanh_and_mul": RowPlan({"x": 0}, (0,)),
    "rotary_neox": RowPlan({"positions": 0, "query": 0, "key": 0}, (0, 0)),
    "per_token_group_quant": RowPlan({"x": 0}, (0, 0)),
    "moe_topk_softmax": RowPlan({"gating": 0}, (0, 0)),
    "merge_attn_states": RowPlan({"prefix_out": 0, "suffix_out": 0, "prefix_lse": 1, "suffix_lse": 1},
                                 (0, 1)),
    # The caches' rows are cache blocks, not tokens: the reference (a copy and a scatter) runs whole.
    "reshape_and_cache_flash": RowPlan({}, (0, 0)),
}


def load_targets() -> list[Target]:
    """Every ``@ktune.target`` defined in a module of ``example_project.kernels``, in ``ORDER``."""
    package = importlib.import_module("example_project.kernels")
    found: dict[str, Target] = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, Target) and value.module == module.__name__:
                found[value.name] = value
    return sorted(found.values(), key=lambda t: (ORDER.index(t.name) if t.name in ORDER else len(ORDER),
                                                 t.name))


def extremes_first(items: Sequence[Any], size: Callable[[Any], float]) -> list[Any]:
    """``items`` from the largest and the smallest inwards (largest, smallest, second largest, ...):
    a budget cut then leaves out middling cases before the ones at either end."""
    ordered = sorted(items, key=size)
    out: list[Any] = []
    while ordered:
        out.append(ordered.pop())
        if ordered:
            out.append(ordered.pop(0))
    return out


def interleave(per_target: Sequence[Sequence[Any]]) -> list[Any]:
    """The first item of each list, then the second of each, ...: a budget cut drops cases of every
    target alike rather than whole targets."""
    out: list[Any] = []
    for i in range(max((len(x) for x in per_target), default=0)):
        out += [x[i] for x in per_target if i < len(x)]
    return out


# -- torch ops -----------------------------------------------------------------------------------


def torch_ops(torch: Any) -> dict[str, Callable[..., Any]]:
    """Each target's op as a PyTorch user would write it, taking the target's arguments and returning
    its outputs (in-place targets update their arguments in place, as the kernels do)."""
    functional = torch.nn.functional

    def rmsnorm(x: Any, w: Any, eps: float = 1e-6) -> Any:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)

    def fused_add_rmsnorm(x: Any, residual: Any, w: Any, eps: float = 1e-6) -> tuple[Any, Any]:
        residual.add_(x)
        r = residual.float()
        out = (r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)
        return out, residual

    def silu_and_mul(x: Any) -> Any:
        i = x.shape[-1] // 2
        return functional.silu(x[..., :i]) * x[..., i:]

    def gelu_tanh_and_mul(x: Any) -> Any:
        i = x.shape[-1] // 2
        return functional.gelu(x[..., :i], approximate="tanh") * x[..., i:]

    def rotary_neox(positions: Any, query: Any, key: Any, *, cos: Any, sin: Any) -> tuple[Any, Any]:
        c, s = cos[positions].unsqueeze(1), sin[positions].unsqueeze(1)

        def rotate(v: Any) -> Any:
            a, b = v.chunk(2, dim=-1)
            return torch.cat((a * c - b * s, b * c + a * s), dim=-1)

        query.copy_(rotate(query))
        key.copy_(rotate(key))
        return query, key

    def merge_attn_states(prefix_out: Any, prefix_lse: Any, suffix_out: Any,
                          suffix_lse: Any) -> tuple[Any, Any]:
        p = torch.where(prefix_lse.isinf(), float("-inf"), prefix_lse)
        s = torch.where(suffix_lse.isinf(), float("-inf"), suffix_lse)
        m = torch.maximum(p, s)
        pe, se = torch.exp(p - m), torch.exp(s - m)
        total = pe + se
        wp = (pe / total).t().unsqueeze(-1)
        ws = (se / total).t().unsqueeze(-1)
        out = prefix_out.float() * wp + suffix_out.float() * ws
        return out.to(prefix_out.dtype), torch.log(total) + m

    def reshape_and_cache_flash(key: Any, value: Any, key_cache: Any, value_cache: Any, *,
                                slot_mapping: Any) -> tuple[Any, Any]:
        nkv, d = key.shape[1:]
        valid = slot_mapping >= 0
        slots = slot_mapping[valid]
        key_cache.view(-1, nkv, d)[slots] = key[valid]
        value_cache.view(-1, nkv, d)[slots] = value[valid]
        return key_cache, value_cache

    def per_token_group_quant(x: Any, group_size: int = 128, out_dtype: str = "int8",
                              eps: float = 1e-10) -> tuple[Any, Any]:
        tokens, hidden = x.shape
        groups = x.float().view(tokens, hidden // group_size, group_size)
        qmax = 127.0 if out_dtype == "int8" else 448.0
        scale = groups.abs().amax(dim=-1, keepdim=True).clamp(min=eps) / qmax
        v = groups / scale
        if out_dtype == "int8":
            q = v.round().clamp(-128, 127).to(torch.int8)
        else:  # e4m3fn has no infinities: saturate first, as the kernel does; return its bit patterns
            q = v.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
        return q.view(tokens, hidden), scale.squeeze(-1)

    # cuDNN's convolutions default to TF32 (10-bit mantissas) on float32 inputs, which the kernel's float32
    # tolerance rejects: timed as float32, as the kernel computes.
    torch.backends.cudnn.allow_tf32 = False

    def conv2d(image: Any, filt: Any) -> Any:
        # torch's conv2d is the cross-correlation the kernel computes (cuDNN on the GPU).
        return functional.conv2d(image[None, None], filt[None, None])[0, 0]

    def moe_topk_softmax(gating: Any, topk: int, renormalize: bool = True) -> tuple[Any, Any]:
        weights, ids = torch.topk(torch.softmax(gating, dim=-1), topk, dim=-1)
        if renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights, ids.to(torch.int32)

    return {f.__name__: f for f in (rmsnorm, fused_add_rmsnorm, silu_and_mul, gelu_tanh_and_mul,
                                    rotary_neox, per_token_group_quant, moe_topk_softmax,
                                    merge_attn_states, reshape_and_cache_flash, conv2d)}


# -- reading outputs back ----------------------------------------------------------------------


class ArrayIO(Protocol):
    """How to bring a device output (or some of its rows along an axis) to the host, and test it for
    NaN/inf."""

    def host(self, a: Any) -> np.ndarray: ...

    def rows(self, a: Any, rows: np.ndarray, axis: int) -> np.ndarray: ...

    def all_finite(self, a: Any) -> bool: ...


class BackendIO:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.cp: Any = getattr(backend, "cp", None) if backend.name == "cuda" else None

    def host(self, a: Any) -> np.ndarray:
        return self.backend.to_host(a)

    def rows(self, a: Any, rows: np.ndarray, axis: int) -> np.ndarray:
        if self.cp is not None:
            # bfloat16 rows are gathered as their 16-bit patterns: no CuPy bfloat16 arithmetic needed.
            bits = a.view(np.uint16) if is_bfloat16(a.dtype) else a
            taken = self.cp.ascontiguousarray(self.cp.take(bits, self.cp.asarray(rows), axis=axis))
            return self.backend.to_host(taken.view(a.dtype) if bits is not a else taken)
        out: np.ndarray = np.take(self.backend.to_host(a), rows, axis=axis)
        return out

    def all_finite(self, a: Any) -> bool:
        if self.cp is not None:
            if is_bfloat16(a.dtype):  # finite unless the 8 exponent bits are all ones (inf, NaN)
                return bool(((a.view(np.uint16) & 0x7F80) != 0x7F80).all())
            return bool(self.cp.isfinite(a).all())
        return bool(np.isfinite(self.backend.to_host(a)).all())


def numpy_to_torch(torch: Any, a: np.ndarray, device: Any) -> Any:
    """A host array as a torch tensor on ``device``. torch.from_numpy takes no ml_dtypes arrays, so
    bfloat16 goes through float32 (exact: every bfloat16 value is a float32) and back on the device."""
    a = np.ascontiguousarray(a)
    if is_bfloat16(a.dtype):
        return torch.from_numpy(a.astype(np.float32)).to(device).to(torch.bfloat16)
    return torch.from_numpy(a).to(device)


def torch_to_numpy(torch: Any, t: Any) -> np.ndarray:
    """A torch tensor on the host as numpy; bfloat16 (which .numpy() refuses) through float32, exact,
    as an ml_dtypes bfloat16 array."""
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return np.asarray(t.float().cpu().numpy()).astype(bfloat16_dtype())
    return np.asarray(t.cpu().numpy())


class TorchIO:
    def __init__(self, torch: Any) -> None:
        self.torch = torch

    def host(self, a: Any) -> np.ndarray:
        return torch_to_numpy(self.torch, a)

    def rows(self, a: Any, rows: np.ndarray, axis: int) -> np.ndarray:
        idx = self.torch.as_tensor(rows, device=a.device)
        return torch_to_numpy(self.torch, a.index_select(axis, idx))

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

    Outputs of up to ``limit`` elements are compared whole. Larger ones of a
    target with a ``RowPlan`` are compared on a sample of tokens (the reference
    then runs on those tokens only), and every element is tested for NaN, which
    catches unwritten elements since checked runs' outputs are poisoned with NaN.
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
    tolerance: ToleranceSpec | None = None  # the case's (Target.tolerance_of); None: the target's

    def _prepare(self, shapes: list[tuple[int, ...]]) -> None:
        plan = ROW_PLANS.get(self.target.name)
        rows = None
        if plan is not None and len(plan.outputs) == len(shapes):
            sizes = {s[ax] for s, ax in zip(shapes, plan.outputs, strict=True) if ax < len(s)}
            if len(sizes) == 1:
                n_rows = sizes.pop()
                elems = sum(math.prod(s) for s in shapes)
                rows = pick_rows(n_rows, elems // max(1, n_rows), self.limit)
        inputs = dict(self.host)
        if rows is not None and plan is not None:
            for name, axis in plan.inputs.items():
                inputs[name] = np.take(inputs[name], rows, axis=axis)
        ref = call_reference(self.target, inputs)
        self.expected = [np.asarray(r) for r in (ref if isinstance(ref, (tuple, list)) else [ref])]
        if rows is not None and plan is not None and not plan.inputs:
            self.expected = [np.take(r, rows, axis=ax) for r, ax in zip(self.expected, plan.outputs,
                                                                         strict=True)]
        self.rows = rows
        self.description = "full" if rows is None else (
            f"{len(rows)} rows against the reference; all elements finite")

    def verify(self, result: Any, io: ArrayIO, what: str) -> str:
        outs = list(result) if isinstance(result, (tuple, list)) else [result]
        if self.expected is None:
            self._prepare([tuple(int(d) for d in o.shape) for o in outs])
        assert self.expected is not None
        rows = self.rows
        if rows is None:
            got = [io.host(o) for o in outs]
        else:
            plan = ROW_PLANS[self.target.name]
            got = [io.rows(o, rows, ax) for o, ax in zip(outs, plan.outputs, strict=True)]
        check_outputs(self.target, self.case_id, got, self.expected, seed=self.seed,
                      backend=self.backend_name, repro=f"{what}; inputs drawn with seed {self.seed}",
                      tolerance=self.tolerance)
        if rows is not None:
            bad = [i for i, o in enumerate(outs) if not io.all_finite(o)]
            if bad:
                raise MismatchError(
                    f"case {self.case_id}: output(s) {bad} of {what} hold NaN or inf outside the tokens "
                    "compared with the reference (unwritten elements stay NaN)", where=self.target.where,
                    hint="check the kernel's indexing for the tokens it skips")
        return self.description


# -- torch timing through _bench.measure -------------------------------------------------------


@dataclass
class TorchCall:
    """A torch call dressed as a recorded launch, so that ``_bench.measure`` can replay it."""

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
        return {k: (numpy_to_torch(self.torch, v, self.dev) if isinstance(v, np.ndarray) else v)
                for k, v in host.items()}

    def flush(self) -> None:
        self.flush_buf.fill_(1)

    def timer(self, launch_sets: Sequence[Sequence[Launch]], repeats: int) -> Timer:
        return TorchGraphTimer(self, launch_sets, repeats)

    def compile(self, op: Callable[..., Any]) -> Callable[..., Any]:
        """``op`` compiled for static shapes, from an empty cache: one compiled function per case."""
        importlib.import_module("torch._dynamo").reset()
        compiled: Callable[..., Any] = self.torch.compile(op, dynamic=False)
        return compiled

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
            self.mode = f"events (graph capture failed: {type(exc).__name__}: {first_line(str(exc))})"
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
        self.cache_dir = inner.cache_dir
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
    """Torch on the same GPU, or None and why not (the text the torch columns then show)."""
    if not enabled:
        return None, "torch off (--no-torch)"
    try:
        import torch
    except ImportError:
        return None, "torch not installed"
    if backend.name != "cuda":
        return None, "torch is timed on the CUDA backend only"
    try:
        if not torch.cuda.is_available():
            return None, "torch sees no CUDA device"
        return TorchSide(torch, backend.device), ""
    except Exception as exc:
        return None, f"torch could not use the GPU ({type(exc).__name__}: {first_line(str(exc))})"


# -- results ---------------------------------------------------------------------------------


def first_line(text: str, limit: int = 160) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[:limit - 1] + "…"


def short_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc.message if isinstance(exc, KtuneError) else exc}"
    lines = text.strip().splitlines()
    return "\n".join(lines[:12]) + ("\n..." if len(lines) > 12 else "")


def measurement_json(m: Measurement | None) -> dict[str, Any] | None:
    if m is None:
        return None
    lo, hi = m.ci
    return {"median_us": common.us(m.median), "iqr_us": common.us(m.iqr),
            "ci95_us": [common.us(lo), common.us(hi)], "rel_ci": round(m.rel_ci, 5),
            "n_samples": len(m.samples), "repeats": m.repeats, "flushed": m.flushed,
            "rotation": m.rotation, "samples_us": [common.us(s) for s in m.samples]}


@dataclass
class Column:
    """One timed variant of a case: a configuration of the kernel, or torch."""

    status: str = "not run"       # "ok", "failed: ...", "fails: ..." (torch.compile), "skipped: ..."
    m: Measurement | None = None
    verified: str = ""
    mode: str = ""                # torch: "graph" or how it was timed instead
    compile_s: float | None = None

    @property
    def seconds(self) -> float | None:
        return self.m.median if self.m is not None else None

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "verified": self.verified or None, "mode": self.mode or None,
                "compile_s": round(self.compile_s, 2) if self.compile_s is not None else None,
                "timing": measurement_json(self.m)}


@dataclass
class SweepPoint:
    params: Params
    status: str = "pending"
    error: str = ""
    m: Measurement | None = None

    def to_json(self) -> dict[str, Any]:
        return {"params": self.params, "status": self.status, "error": self.error or None,
                "median_us": common.us(self.m.median if self.m else None)}


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
    default_params: Params = field(default_factory=dict)
    tuned_params: Params | None = None
    tuned_source: str = ""
    default: Column = field(default_factory=Column)
    tuned: Column = field(default_factory=Column)
    eager: Column = field(default_factory=Column)
    compiled: Column = field(default_factory=Column)
    liger: Column = field(default_factory=Column)
    floor: _floor.Floor | None = None  # on small cases only (is_small)
    sweep: list[SweepPoint] = field(default_factory=list)
    timing_how: str = ""
    note: str = ""
    seconds: float = 0.0

    def t(self, which: str) -> float | None:
        col: Column = getattr(self, which)
        return col.seconds

    def speedup(self) -> float | None:
        """Default time over tuned time (above 1: tuned is faster)."""
        d, t = self.t("default"), self.t("tuned")
        return d / t if d and t else None

    def vs_compile(self) -> float | None:
        """torch.compile time over tuned time (1 or above: tuned at or ahead)."""
        c, t = self.t("compiled"), self.t("tuned")
        return c / t if c and t else None

    def best_alternative(self) -> tuple[str, float] | None:
        """The fastest of torch eager, torch.compile and Liger timed in a CUDA graph, as ours is: its
        column and time; None where none was."""
        timed = [(name, col.m.median) for name, col in (("eager", self.eager), ("compiled", self.compiled),
                                                         ("liger", self.liger))
                 if col.m is not None and col.mode == "graph"]
        return min(timed, key=lambda x: x[1]) if timed else None

    def vs_best(self) -> float | None:
        """The best alternative's time over tuned time (1 or above: tuned at or ahead of all of them)."""
        best, t = self.best_alternative(), self.t("tuned")
        return best[1] / t if best and t else None

    def gbps(self, seconds: float | None) -> float | None:
        if not seconds or not self.bytes_moved:
            return None
        return self.bytes_moved / seconds / 1e9

    def copy_fraction(self, seconds: float | None, copy_bw: float) -> float | None:
        g = self.gbps(seconds)
        return g * 1e9 / copy_bw if g and copy_bw > 0 else None

    def to_json(self, copy_bw: float) -> dict[str, Any]:
        def rnd(v: float | None, d: int = 4) -> float | None:
            return round(v, d) if v is not None else None

        cols = ("default", "tuned", "eager", "compiled", "liger")
        best = self.best_alternative()
        return {
            "target": self.target, "case": self.case, "key": self.key, "inputs": self.shapes,
            "bytes_moved": self.bytes_moved, "working_set_bytes": self.working_set,
            "rotation": self.rotation, "flush": self.flush, "note": self.note or None,
            "wall_s": round(self.seconds, 2),
            "default_params": self.default_params, "tuned_params": self.tuned_params,
            "tuned_source": self.tuned_source, "timing_how": self.timing_how or None,
            "summary": {
                **{f"{c}_us": common.us(self.t(c)) for c in cols},
                "speedup_tuned_vs_default": rnd(self.speedup()),
                "compile_over_tuned": rnd(self.vs_compile()),
                "best_alternative": best[0] if best else None,
                "best_alternative_over_tuned": rnd(self.vs_best()),
                "gbps": {c: rnd(self.gbps(self.t(c)), 3) for c in cols},
                "copy_bw_fraction": {c: rnd(self.copy_fraction(self.t(c), copy_bw)) for c in cols},
            },
            **{c: getattr(self, c).to_json() for c in cols},
            "floor": floor_json(self.floor),
            "sweep": [p.to_json() for p in self.sweep],
        }


# -- choosing configurations -----------------------------------------------------------------


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


@dataclass(frozen=True)
class Recorded:
    """The parameters a params file holds for one target, device and key, and where they came from."""

    params: Params
    source: str


EXAMPLE_ROOT = common.ROOT / "example_project"


def recorded_params(store: Store | None, target: Target, device_id: str,
                    key: Mapping[str, Any]) -> Recorded | None:
    """What a production call would use for this key, from ``store``; None where it has no record.

    Records are matched by the target's name in the example project's own params file
    (``kernels/rmsnorm.py::rmsnorm``) wherever ``store`` lies: a params file written by a run on a
    copy of the project serves as well as the committed one.
    """
    if store is None:
        return None
    record = store.find(target_id(target, EXAMPLE_ROOT), device_id, key)
    if record is None:
        return None
    if record.tuned is not None:
        t = record.tuned
        source = f"tuned {t.date[:10]} ({t.sampler}, {t.trials} trials)"
    else:
        source = "recorded, never tuned"
    return Recorded(target.complete(record.params), source)  # a record of an older space, whole


# -- the run ---------------------------------------------------------------------------------


@dataclass
class Budget:
    """Wall-clock budgets: the whole run (no case starts after it is spent) and torch.compile."""

    total_s: float
    compile_s: float
    start: float = field(default_factory=time.perf_counter)
    compile_spent: float = 0.0

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def over(self) -> bool:
        return self.total_s > 0 and self.elapsed() > self.total_s

    def compile_over(self) -> bool:
        return self.compile_s > 0 and self.compile_spent > self.compile_s


class Bench:
    def __init__(self, backend: Backend, args: argparse.Namespace, *, cfg: BenchConfig,
                 torch_cfg: BenchConfig, torch: TorchSide | None, torch_note: str, store: Store | None,
                 budget: Budget) -> None:
        self.backend = backend
        self.cfg = cfg
        self.torch_cfg = torch_cfg
        self.torch = torch
        self.torch_note = torch_note
        self.args = args
        self.store = store
        self.budget = budget
        self.io = BackendIO(backend)
        self.liger: dict[str, _liger.LigerOp] = {}
        self.liger_note = torch_note or "skipped: --no-liger"
        if torch is not None and not args.no_liger:
            self.liger, self.liger_note = _liger.liger_ops()
        self.floors: dict[bool, _floor.Floor] = {}  # by flush: measured once, shown on every small row

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
        target = target.for_backend(backend.name)  # its space and default on this backend (per_backend=)
        case_id = target.case_id(case)
        key = target.case_key(case)
        spec = target.case_args(case)
        bytes_moved = target.bytes_for(spec)
        work = bytes_moved or 2 * case.input_bytes
        l2 = backend.device.l2_bytes
        k = rotation_for(work, l2, case.warm_cache)
        flush = should_flush(work, l2, case.warm_cache)
        shapes = {n: f"{tuple(t.shape)} {t.dtype.name}" for n, t in case.tensors.items()}
        res = CaseResult(target.name, case_id, dict(key), shapes, bytes_moved, work, k, flush,
                         default_params=dict(target.default))
        seed = case_seed(self.args.seed, target, case_id, "bench")
        host_sets = [draw_inputs(case, seed + j) for j in range(k)]
        verifier = Verifier(target, case_id, host_sets[0], seed, backend.name, self.args.verify_elements,
                            tolerance=target.tolerance_of(case))
        dev_sets = [upload(backend, h) for h in host_sets]
        self.kernels(res, target, key=key, host=host_sets[0], dev_sets=dev_sets, verifier=verifier, flush=flush)
        del dev_sets
        backend.release()
        if self.torch is None:
            res.eager.status = res.compiled.status = res.liger.status = self.torch_note
        else:
            self.torch_columns(res, target, host_sets, verifier, flush)
            self.liger_column(res, target, host_sets, verifier, flush)
        if is_small(bytes_moved or work, backend.copy_bandwidth()):
            res.floor = self.floor(flush)
        res.seconds = time.perf_counter() - t0
        return res

    def floor(self, flush: bool) -> _floor.Floor:
        """The launch-bound floor under the kernels' timer (and torch's), measured once per flush setting."""
        if flush not in self.floors:
            found = _floor.measure_floor(self.backend, self.cfg, flush=flush)
            if self.torch is not None:
                fn, kwargs = _floor.torch_copy1(self.torch.torch, self.torch.dev)
                try:
                    m = measure(TimerSwap(self.backend, self.torch.timer),
                                [[Launch(TorchCall(fn, kwargs), (1,), (1,), ())]], self.torch_cfg, flush=flush)
                    found = dataclasses.replace(found, torch_copy1=m)
                except Exception as exc:
                    found = dataclasses.replace(found, error=f"{found.error}; torch copy: {short_error(exc)}"
                                                .lstrip("; "))
            self.floors[flush] = found
        return self.floors[flush]

    # -- the kernel: default and tuned --------------------------------------------------------

    def check(self, target: Target, params: Params, host: Mapping[str, Any], verifier: Verifier) -> str:
        """Run ``params`` once on a fresh upload (in-place targets change their inputs) and compare."""
        fresh = upload(self.backend, host)
        result, _ = run(self.backend, target, params, fresh, poison=True)
        self.backend.synchronize()
        verified = verifier.verify(result, self.io, f"configuration {params_text(params)}")
        del result, fresh
        return verified

    def checked(self, col: Column, target: Target, params: Params, *, key: Mapping[str, Any],
                host: Mapping[str, Any], verifier: Verifier, what: str) -> bool:
        try:
            target.check_config(params, key, what)
            col.verified = self.check(target, params, host, verifier)
            col.status = "ok"
            return True
        except Exception as exc:  # reported in the table, the other columns still run
            col.status = f"failed: {short_error(exc)}"
            return False

    def kernels(self, res: CaseResult, target: Target, *, key: Mapping[str, Any], host: Mapping[str, Any],
                dev_sets: Sequence[Mapping[str, Any]], verifier: Verifier, flush: bool) -> None:
        default = dict(target.default)
        ok_default = self.checked(res.default, target, default, key=key, host=host, verifier=verifier,
                                  what="default configuration")
        if self.args.sweep:
            found = self.sweep(res, target, key=key, host=host, dev_sets=dev_sets, verifier=verifier, flush=flush)
            tuned = Recorded(found, "sweep") if found is not None else None
        else:
            tuned = recorded_params(self.store, target, self.backend.device.id, key)
        if tuned is None:
            res.tuned.status = ("skipped: no configuration of the sweep passed" if self.args.sweep else
                                "skipped: no record")
            res.note = "" if self.args.sweep else (
                "no tuned column: the params file has no record for this device and key (tune it, "
                "or pass --sweep)")
            res.tuned_source = "none"
            if ok_default:
                res.default.m = self.time_kernel(target, default, dev_sets, flush)
                res.timing_how = "default alone"
            return
        res.tuned_params, res.tuned_source = tuned.params, tuned.source
        if tuned.params == default:
            if ok_default:
                res.default.m = self.time_kernel(target, default, dev_sets, flush)
                res.tuned = dataclasses.replace(res.default)
                res.timing_how = "tuned is the default: timed once"
            else:
                res.tuned = dataclasses.replace(res.default)
            return
        ok_tuned = self.checked(res.tuned, target, tuned.params, key=key, host=host, verifier=verifier,
                                what="tuned configuration")
        if ok_default and ok_tuned and not self.args.no_ab:
            try:
                sa = self.kernel_sets(target, default, dev_sets)
                sb = self.kernel_sets(target, tuned.params, dev_sets)
                ab = measure_ab(self.backend, sa, sb, self.cfg, flush=flush)
                res.default.m, res.tuned.m = ab.a, ab.b
                res.timing_how = "measure_ab: default and tuned interleaved (ABBA)"
                return
            except Exception as exc:
                res.note = f"A/B timing failed ({first_line(short_error(exc))}); timed one after the other"
        for col, params, ok in ((res.default, default, ok_default), (res.tuned, tuned.params, ok_tuned)):
            if ok:
                try:
                    col.m = self.time_kernel(target, params, dev_sets, flush)
                except Exception as exc:
                    col.status = f"failed: {short_error(exc)}"
        res.timing_how = res.timing_how or "one after the other"

    def time_kernel(self, target: Target, params: Params, dev_sets: Sequence[Mapping[str, Any]],
                    flush: bool) -> Measurement:
        return measure(self.backend, self.kernel_sets(target, params, dev_sets), self.cfg, flush=flush)

    def sweep(self, res: CaseResult, target: Target, *, key: Mapping[str, Any], host: Mapping[str, Any],
              dev_sets: Sequence[Mapping[str, Any]], verifier: Verifier, flush: bool) -> Params | None:
        """Every feasible point (at most ``--max-configs``), checked then timed; the fastest one."""
        for params in choose_configs(target, key, self.args.max_configs):
            p = SweepPoint(params)
            res.sweep.append(p)
            try:
                target.check_config(params, key, "configuration")
                self.check(target, params, host, verifier)
                p.m = self.time_kernel(target, params, dev_sets, flush)
                p.status = "ok"
            except Exception as exc:  # one bad configuration must not end the sweep
                p.status, p.error = "failed", short_error(exc)
        ok = [p for p in res.sweep if p.m is not None]
        return min(ok, key=lambda p: p.m.median if p.m else math.inf).params if ok else None

    # -- torch -------------------------------------------------------------------------------

    def torch_columns(self, res: CaseResult, target: Target, host_sets: Sequence[Mapping[str, Any]],
                      verifier: Verifier, flush: bool) -> None:
        side = self.torch
        assert side is not None
        op = side.ops.get(target.name)
        if op is None:
            res.eager.status = res.compiled.status = f"skipped: no torch op for {target.name}"
            return
        self.torch_column(res.eager, op, host_sets=host_sets, verifier=verifier, flush=flush, what="torch eager")
        if self.args.no_compile:
            res.compiled.status = "skipped: --no-compile"
        elif self.budget.compile_over():
            res.compiled.status = (f"skipped: the torch.compile budget ({self.budget.compile_s:g} s) "
                                   "was spent")
        else:
            self.torch_column(res.compiled, op, host_sets=host_sets, verifier=verifier, flush=flush,
                              what="torch.compile")

    def liger_column(self, res: CaseResult, target: Target, host_sets: Sequence[Mapping[str, Any]],
                     verifier: Verifier, flush: bool) -> None:
        op = self.liger.get(target.name)
        if op is None:
            res.liger.status = self.liger_note if not self.liger else f"skipped: no Liger op for {target.name}"
            return
        self.torch_column(res.liger, op.call, host_sets=host_sets, verifier=verifier, flush=flush, what="Liger",
                          prepare=op.prepare)

    def torch_column(self, col: Column, op: Callable[..., Any], *, host_sets: Sequence[Mapping[str, Any]],
                     verifier: Verifier, flush: bool, what: str,
                     prepare: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None) -> None:
        """Check ``op`` on the first input set against the reference, then time it under torch's graph
        timer; ``prepare`` turns the target's arguments into the op's once per input set, untimed."""
        side = self.torch
        assert side is not None
        compiling = what == "torch.compile"
        fn = op

        def arguments(host: Mapping[str, Any]) -> dict[str, Any]:
            uploaded = side.upload(host)
            return prepare(uploaded) if prepare is not None else uploaded

        try:
            if compiling:
                t0 = time.perf_counter()
                try:
                    fn = side.compile(op)
                    out = fn(**arguments(host_sets[0]))  # compiles, for these shapes only
                    side.torch.cuda.synchronize()
                finally:
                    col.compile_s = time.perf_counter() - t0
                    self.budget.compile_spent += col.compile_s
            else:
                out = fn(**arguments(host_sets[0]))  # Liger: Triton compiles its kernels here, untimed
                side.torch.cuda.synchronize()
        except Exception as exc:
            col.status = f"fails: {first_line(short_error(exc))}" if compiling else \
                f"failed: {short_error(exc)}"
            self.torch_release(col)
            return
        try:
            col.verified = verifier.verify(out, side.io, what)
            del out
            tsets = [arguments(h) for h in host_sets]
            launches: list[list[Launch]] = [[Launch(TorchCall(fn, t), (1,), (1,), ())] for t in tsets]
            side.modes.clear()
            col.m = measure(TimerSwap(self.backend, side.timer), launches, self.torch_cfg, flush=flush)
            col.mode = "; ".join(sorted(set(side.modes)))
            col.status = "ok"
            del launches, tsets
        except Exception as exc:
            col.status = f"failed: {short_error(exc)}"
        self.torch_release(col)

    def torch_release(self, col: Column) -> None:
        assert self.torch is not None
        try:
            self.torch.release()
        except Exception as exc:
            col.status += f" (release failed: {type(exc).__name__})"


# -- report ----------------------------------------------------------------------------------


def is_small(bytes_moved: int, copy_bw: float) -> bool:
    """A case whose bytes would move in under ``SMALL_S`` at the copy bandwidth: where a launch's
    fixed cost (a few µs) is a large part of the time, and its row shows the floor."""
    return copy_bw > 0 and bytes_moved / copy_bw < SMALL_S


def floor_json(f: _floor.Floor | None) -> dict[str, Any] | None:
    if f is None:
        return None
    return {"empty_kernel": measurement_json(f.empty), "copy_one_element": measurement_json(f.copy1),
            "torch_copy_one_element": measurement_json(f.torch_copy1), "error": f.error or None}


def floor_cell(f: _floor.Floor | None) -> str:
    """The floor as 'empty / one-element copy / torch's one-element copy', in µs."""
    if f is None:
        return ""
    parts = [common.fmt_us(m.median) if m is not None else "n/a" for m in (f.empty, f.copy1)]
    if f.torch_copy1 is not None:
        parts.append(common.fmt_us(f.torch_copy1.median))
    return " / ".join(parts) if f.empty or f.copy1 else f"failed: {first_line(f.error, 50)}"


def params_text(p: Mapping[str, Any] | None) -> str:
    return " ".join(f"{k}={v}" for k, v in p.items()) if p else "n/a"


def cell(col: Column) -> str:
    """A time, or why there is none."""
    if col.m is not None:
        return common.fmt_us(col.m.median)
    status = col.status
    if status.startswith("fails:"):
        return "fails: " + first_line(status[len("fails:"):], 60)
    if status.startswith("skipped: "):
        return first_line(status[len("skipped: "):], 60)
    return first_line(status, 60) or "n/a"


@dataclass(frozen=True)
class Goal:
    """One of the issue's goals: met or missed, with the numbers behind it."""

    name: str
    met: bool | None               # None: nothing measured it
    value: str
    detail: list[str]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def goals(results: Sequence[CaseResult], copy_bw: float) -> list[Goal]:
    """The issue's three goals, judged on this run's numbers."""
    speedups = [s for r in results if (s := r.speedup()) is not None]
    gm = common.geomean(speedups)
    if gm is None:
        g1 = Goal("geomean tuned over default >= 1.5x", None, "no case with both timings", [])
    else:
        short = [] if gm >= GOAL_SPEEDUP else [
            f"short by {GOAL_SPEEDUP - gm:.2f}x ({(GOAL_SPEEDUP / gm - 1) * 100:.0f} % more speed needed)"]
        untuned = sum(1 for r in results if r.speedup() is not None and r.tuned_params == r.default_params)
        if untuned:
            short.append(f"{untuned} of {len(speedups)} case(s) run the default as their tuned parameters")
        g1 = Goal("geomean tuned over default >= 1.5x", gm >= GOAL_SPEEDUP,
                  f"{gm:.2f}x over {len(speedups)} case(s)", short)

    large = [r for r in results if (r.bytes_moved or 0) >= LARGE_BYTES and r.t("tuned")]
    below = [(r, f) for r in large if (f := r.copy_fraction(r.t("tuned"), copy_bw)) is not None
             and f < GOAL_COPY_FRACTION]
    if not large:
        g2 = Goal("large shapes (>= 256 MB moved) at >= 85 % of copy bandwidth", None,
                  "no large case timed", [])
    else:
        fr = [f for r in large if (f := r.copy_fraction(r.t("tuned"), copy_bw)) is not None]
        g2 = Goal("large shapes (>= 256 MB moved) at >= 85 % of copy bandwidth", not below,
                  f"{len(large) - len(below)} of {len(large)} case(s) at or above; lowest "
                  f"{min(fr) * 100:.0f} %",
                  [f"{r.target}[{r.case}]: {f * 100:.1f} % ({(GOAL_COPY_FRACTION - f) * 100:.1f} points short; "
                   f"tuned {params_text(r.tuned_params)}, {r.tuned_source})" for r, f in below])

    timed = [(r, v) for r in results if (v := r.vs_compile()) is not None]
    # Ours is timed in a CUDA graph; a torch.compile call that could not be captured in one (a host
    # sync, e.g. a boolean mask) was timed call by call, launch overhead included: not comparable.
    compared = [(r, v) for r, v in timed if r.compiled.mode == "graph"]
    uncaptured = len(timed) - len(compared)
    behind = [(r, v) for r, v in compared if v < 1.0]
    if not compared:
        g3 = Goal("tuned at or ahead of torch.compile on every case it compiles", None,
                  "no case with a torch.compile timing", [])
    else:
        g3 = Goal("tuned at or ahead of torch.compile on every case it compiles", not behind,
                  f"{len(compared) - len(behind)} of {len(compared)} case(s) at or ahead"
                  + (f"; {uncaptured} more not compared: torch.compile could not run in a CUDA graph there, "
                     "so its time includes launch overhead (see the notes)" if uncaptured else ""),
                  [f"{r.target}[{r.case}]: tuned {common.fmt_us(r.t('tuned'))} µs vs torch.compile "
                   f"{common.fmt_us(r.t('compiled'))} µs ({(1 / v - 1) * 100:.0f} % slower)"
                   for r, v in behind])
    return [g1, g2, g3, goal_vs_best(results)]


def goal_vs_best(results: Sequence[CaseResult]) -> Goal:
    """Issue 26's goal: tuned at or ahead of the best of torch eager, torch.compile and Liger (each timed
    in a CUDA graph) on every case, and their geomean of best alternative over tuned at least 1.10."""
    name = f"tuned at or ahead of the best of torch eager, torch.compile and Liger; geomean >= {GOAL_VS_BEST:.2f}x"
    ratios = [(r, v) for r in results if (v := r.vs_best()) is not None]
    if not ratios:
        return Goal(name, None, "no case with both a tuned and an alternative's graph timing", [])
    gm = common.geomean([v for _, v in ratios])
    assert gm is not None
    behind = [(r, v) for r, v in ratios if v < 1.0]
    detail = []
    for r, v in behind:
        best = r.best_alternative()
        assert best is not None
        detail.append(f"{r.target}[{r.case}]: tuned {common.fmt_us(r.t('tuned'))} µs vs {COLUMN_NAMES[best[0]]} "
                      f"{common.fmt_us(best[1])} µs ({(1 / v - 1) * 100:.0f} % slower)")
    return Goal(name, gm >= GOAL_VS_BEST and not behind,
                f"geomean {gm:.2f}x over {len(ratios)} case(s); at or ahead on {len(ratios) - len(behind)}", detail)


COLUMN_NAMES = {"eager": "torch eager", "compiled": "torch.compile", "liger": "Liger"}


def verdict(g: Goal) -> str:
    return "n/a" if g.met is None else ("met" if g.met else "missed")


def markdown(results: Sequence[CaseResult], meta: Mapping[str, Any], copy_bw: float,
             skipped: Sequence[str]) -> str:
    lines = [
        f"# bench_kernels: {meta['device']['name']} ({meta['backend']})",
        "",
        f"- date: {meta['date']}",
        f"- command: `{meta['command']}`",
        f"- copy bandwidth (measured in this run, read + write): {copy_bw / 1e9:.0f} GB/s",
        f"- L2: {meta['device']['l2_bytes'] / 2**20:.0f} MiB; bench config: {meta['bench_config_text']}",
        f"- tuned parameters: {meta['tuned_from']}",
        f"- torch: {meta['torch']}",
        f"- Liger-Kernel: {meta['liger']}",
        f"- floor (small cases, whose bytes take under {SMALL_S * 1e6:g} µs at the copy bandwidth): an empty "
        "kernel / a one-element copy, as the kernels are timed / a one-element `copy_` as torch is timed",
        "",
        "## Summary",
        "",
    ]
    for g in meta["goals_obj"]:
        lines.append(f"- **{g.name}**: {verdict(g)}: {g.value}")
        lines += [f"  - {d}" for d in g.detail]
    if skipped:
        lines.append(f"- budget: {len(skipped)} case(s) not run, the --budget-s of {meta['budget_s']:g} s "
                     f"being spent: {', '.join(skipped)}")
    header = ["case", "default µs", "tuned µs", "tuned params (source)", "default / tuned",
              "torch eager µs", "torch.compile µs", "compile / tuned", "Liger µs", "best alt / tuned",
              "floor µs", "GB/s tuned", "% copy BW default / tuned"]
    for name in dict.fromkeys(r.target for r in results):
        rows = []
        for r in (x for x in results if x.target == name):
            fd = r.copy_fraction(r.t("default"), copy_bw)
            ft = r.copy_fraction(r.t("tuned"), copy_bw)
            rows.append([
                r.case, cell(r.default), cell(r.tuned),
                f"{params_text(r.tuned_params)} ({r.tuned_source})" if r.tuned_params else r.tuned_source,
                common.fmt_num(r.speedup(), ".2f", "×"), cell(r.eager), cell(r.compiled),
                common.fmt_num(r.vs_compile(), ".2f", "×"), cell(r.liger), common.fmt_num(r.vs_best(), ".2f", "×"),
                floor_cell(r.floor), common.fmt_num(r.gbps(r.t("tuned")), ".0f"),
                " / ".join(common.fmt_num(f * 100 if f else None, ".0f") for f in (fd, ft)),
            ])
        lines += ["", f"## {name}", "", common.md_table(header, rows)]
    lines += [
        "",
        "Times are medians per call, each timed after a check against the target's reference. "
        "*default / tuned* is default time over tuned time (above 1: tuned is faster); "
        "*compile / tuned* is torch.compile time over tuned time (1 or above: tuned at or ahead); "
        "*best alt / tuned* the same for the fastest of torch eager, torch.compile and Liger timed in a CUDA graph. "
        "GB/s counts the target's `bytes_moved` (what the op must read and write).",
    ]
    notes = []
    for r in results:
        label = f"{r.target}[{r.case}]"
        for what, col in (("default", r.default), ("tuned", r.tuned), ("torch eager", r.eager),
                          ("torch.compile", r.compiled), ("Liger", r.liger)):
            if col.status.startswith(("failed", "fails")):
                notes.append(f"- {label} {what}: {first_line(col.status, 400)}")
            if col.mode and col.mode != "graph":
                notes.append(f"- {label} {what} timed without a graph: {col.mode}")
        failed = [p for p in r.sweep if p.status == "failed"]
        if failed:
            notes.append(f"- {label}: {len(failed)} of {len(r.sweep)} swept configuration(s) failed, e.g. "
                         f"{params_text(failed[0].params)}: {first_line(failed[0].error)}")
        if r.note:
            notes.append(f"- {label}: {r.note}")
        if r.floor is not None and r.floor.error:
            notes.append(f"- {label} floor: {first_line(r.floor.error, 300)}")
        if r.tuned_source == "sweep" and (s := r.speedup()) is not None and s < 1:
            notes.append(f"- {label}: the sweep's fastest was slower than the default when the two were "
                         "timed interleaved: within noise of each other")
    if notes:
        lines += ["", "## Failures and notes", "", *notes]
    return "\n".join(lines)


# -- main ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--backend", default="cuda", choices=["cuda", "opencl", "auto"],
                   help="where to run (default: cuda)")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: the smallest case of each dtype, short timing, at most 6 configurations "
                        "with --sweep")
    p.add_argument("--targets", default=None, help="comma-separated target names (default: all)")
    p.add_argument("--cases", default=None, help="only cases whose id contains this text")
    p.add_argument("--params", type=Path, default=EXAMPLE_ROOT / "ktune-params.json",
                   help="params file holding the tuned parameters (default: example_project/ktune-params.json)")
    p.add_argument("--sweep", action="store_true",
                   help="tuned = the fastest point of an exhaustive sweep, not the params file's")
    p.add_argument("--max-configs", type=int, default=None,
                   help="with --sweep: time at most this many configurations per case, evenly spread")
    p.add_argument("--budget-s", type=float, default=240.0,
                   help="start no new case after this many seconds, and say which were left out "
                        "(default: 240; 0: no limit)")
    p.add_argument("--compile-budget-s", type=float, default=150.0,
                   help="stop compiling with torch.compile after this many seconds spent compiling "
                        "(default: 150; 0: no limit)")
    p.add_argument("--min-samples", type=int, default=20,
                   help="at least this many timing samples per measurement (default: 20)")
    p.add_argument("--verify-elements", type=int, default=1 << 20,
                   help="outputs above this many elements are compared on a sample of tokens (default: 1Mi)")
    p.add_argument("--seed", type=int, default=0, help="base seed of the inputs (default: 0)")
    p.add_argument("--no-torch", action="store_true", help="time neither torch eager nor torch.compile")
    p.add_argument("--no-compile", action="store_true", help="do not time torch.compile")
    p.add_argument("--no-liger", action="store_true", help="do not time Liger-Kernel's ops")
    p.add_argument("--no-ab", action="store_true", help="time default and tuned one after the other")
    p.add_argument("--list", action="store_true", help="list the cases in run order, then exit")
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


def load_store(path: Path, sweep: bool) -> tuple[Store | None, str]:
    if sweep:
        return None, "the fastest point of an exhaustive sweep of each case's space (--sweep)"
    if not path.exists():
        print(f"error: no params file at {path}; pass --params PATH, or --sweep to sweep instead",
              file=sys.stderr)
        raise SystemExit(2)
    try:
        return Store.load(path), f"recorded for this device in `{common.shown_path(path)}`"
    except StoreError as exc:
        print(f"error: {exc.render()}", file=sys.stderr)
        raise SystemExit(2) from None


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
    store, tuned_from = load_store(args.params, args.sweep)
    backend = make_backend(args.backend)
    plan: list[tuple[Target, Case]] = interleave([
        extremes_first([(t, c) for c in select_cases(t, backend, args.quick, args.cases)],
                       lambda tc: tc[1].input_bytes)
        for t in targets if backend.name in t.sources])
    if args.list:
        for t, c in plan:
            print(f"{t.name}[{t.case_id(c)}]: inputs {c.input_bytes / 2**20:.1f} MiB")
        return 0
    if not plan:
        print(f"error: no case to run on {backend.name}", file=sys.stderr)
        return 2

    budget = Budget(args.budget_s, args.compile_budget_s)
    dev = backend.device
    print(f"device: {dev.name} ({dev.arch}; {dev.compiler}); L2 {dev.l2_bytes / 2**20:.0f} MiB", flush=True)
    copy_bw = backend.copy_bandwidth()
    print(f"copy bandwidth: {copy_bw / 1e9:.0f} GB/s (read + write)", flush=True)
    cfg, torch_cfg = bench_configs(backend, args)
    torch_side, torch_note = open_torch(backend, not args.no_torch)
    print(f"torch: {'on' if torch_side else torch_note}", flush=True)
    bench = Bench(backend, args, cfg=cfg, torch_cfg=torch_cfg, torch=torch_side, torch_note=torch_note,
                  store=store, budget=budget)

    results: list[CaseResult] = []
    skipped: list[str] = []
    for target, case in plan:
        label = f"{target.name}[{target.case_id(case)}]"
        if budget.over():
            skipped.append(label)
            continue
        try:
            r = bench.case(target, case)
        except Exception as exc:  # a case that cannot even start is reported, the rest still run
            r = CaseResult(target.name, target.case_id(case), {}, {}, None, 0, 0, False,
                           note=f"case failed: {short_error(exc)}")
            with contextlib.suppress(Exception):
                backend.release()
        results.append(r)
        shown = {name: cell(col) + (" µs" if col.m is not None else "")
                 for name, col in (("default", r.default), ("tuned", r.tuned), ("eager", r.eager),
                                   ("compile", r.compiled), ("liger", r.liger))}
        floor = f", floor {floor_cell(r.floor)} µs" if r.floor is not None else ""
        print(f"{label}: " + ", ".join(f"{k} {v}" for k, v in shown.items()) + floor
              + f" (tuned: {params_text(r.tuned_params)})  [{r.seconds:.1f} s, total {budget.elapsed():.0f} s]",
              flush=True)
        if r.note:
            print(f"  note: {first_line(r.note)}", flush=True)
    if skipped:
        print(f"budget of {args.budget_s:g} s spent: {len(skipped)} case(s) not run", flush=True)

    # The tables list each target's cases in the order it declares them.
    position = {(t.name, t.case_id(c)): (ti, ci) for ti, t in enumerate(targets)
                for ci, c in enumerate(t.cases)}
    results.sort(key=lambda r: position.get((r.target, r.case), (len(targets), 0)))
    judged = goals(results, copy_bw)
    torch_text = torch_note if torch_side is None else (
        f"torch {common.versions().get('torch', '?')}, eager and torch.compile(dynamic=False), "
        "timed through CUDA graphs")
    liger_text = bench.liger_note if not bench.liger else (
        f"{bench.liger_note}, its autograd functions' forward ({', '.join(sorted(bench.liger))}), gate and up "
        "as two contiguous tensors made before timing, timed through CUDA graphs")
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
        "options": {"quick": args.quick, "sweep": args.sweep, "max_configs": args.max_configs,
                    "seed": args.seed, "verify_elements": args.verify_elements, "targets": args.targets,
                    "cases": args.cases, "params": common.shown_path(args.params),
                    "no_compile": args.no_compile, "no_liger": args.no_liger,
                    "compile_budget_s": args.compile_budget_s},
        "tuned_from": tuned_from,
        "torch": torch_text,
        "liger": liger_text,
        "budget_s": args.budget_s,
        "skipped_for_budget": skipped,
        "compile_s_total": round(budget.compile_spent, 1),
        "geomean_tuned_vs_default": common.geomean([s for r in results if (s := r.speedup()) is not None]),
        "wall_s": round(budget.elapsed(), 1),
    }
    md = markdown(results, {**meta, "goals_obj": judged}, copy_bw, skipped)
    data = {**meta, "goals": [g.to_json() for g in judged], "cases": [r.to_json(copy_bw) for r in results]}
    out = args.out or common.RESULTS / f"bench_kernels-{backend.name}{'-quick' if args.quick else ''}.json"
    md_path = common.write_results(out, data, md)
    print()
    print(md)
    print(f"\nwrote {common.shown_path(out)} and {common.shown_path(md_path)} ({budget.elapsed():.0f} s)")
    timed = [r for r in results if r.t("default") or r.t("tuned")]
    return 0 if timed else 1


if __name__ == "__main__":
    sys.exit(main())
