"""Where the production call's host time goes on a GPU: its parts timed one by one, side by side in one run.

For the example's rmsnorm (H=4096, fp16) at T = 1 and 256, with the parameters the params file records, each
row below is called ``--calls`` times in a loop with one synchronisation at the end, in ``--repeats``
interleaved rounds (the same timer as ``production_call.py``); the table gives the median host µs per call.
Each CuPy row adds one thing to the one above it, from the raw launch of ``production_call.py`` to the ktune
call, so the differences between rows say what each part costs:

- ``raw (RawKernel)``: ``cupy.empty`` and the ``cupy.RawKernel``'s call, its arguments made once;
- ``raw (Function)``: the same through CuPy's function of the kernel (what the ktune call launches with);
- ``+ empty_like``: the output from ``cupy.empty_like(x, order="C")`` (what the handle's ``empty_like`` is);
- ``+ scalars``: the argument tuple and its three numpy scalars made per call, as the user's function does;
- ``user function``: the target's function called with the call's own kernel handle (no dispatch);
- ``ktune call``: ``rmsnorm(x, w)``.

Then the torch path (tensors zero copy, torch's current stream): ``torch raw`` (``torch.empty_like`` and CuPy's
function with the tensors' pointers on torch's stream, found once), ``torch raw + stream`` (the stream read per
call, as the call does), ``ktune call (torch)``, ``ktune op (torch)``, ``torch eager`` (``F.rms_norm``). And the
parts alone: each allocation, ``getDevice``, three numpy scalars, an empty Python call; and the call's own parts:
the handle's ``launch`` and ``empty_like`` on each route, the torch route's views of the arguments, and the
user's function on the torch route's handle and views (no dispatch).

``--compiled``: the two-op module of ``production_call.py`` (``rmsnorm(x, w)``, ``silu_and_mul(g)``, T=16) with
the ktune ops, called eagerly and compiled (``torch.compile(fullgraph=True, dynamic=False)``, default mode),
beside the module with torch ops compiled, in the same loops; then cProfile of the compiled ktune module's
forwards (the functions by own time: where the compiled call's host time goes that the eager one does not
spend). Run it with ``TORCH_LOGS=output_code`` to see the code Inductor generates around the ops.

Usage: python3 benchmarks/call_breakdown.py [--calls 2000] [--repeats 7] [--out benchmarks/results/DIR]
"""

from __future__ import annotations

import argparse
import importlib
import io
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common
from _common import RESULTS, add_repo_to_path, command_line, interleaved, md_table, now_utc, versions, write_results
from production_call import two_op_module

TOKENS = (1, 256)
HIDDEN = 4096
EPS = 1e-6


def _methods(t: int, backend: Any) -> tuple[dict[str, Callable[[], Any]], dict[str, Any]]:
    import cupy as cp
    import torch
    import torch.nn.functional as F

    import ktune
    from example_project.kernels.rmsnorm import rmsnorm

    gen = torch.Generator(device="cuda").manual_seed(t)
    xt = torch.randn((t, HIDDEN), device="cuda", dtype=torch.float16, generator=gen)
    wt = torch.rand((HIDDEN,), device="cuda", dtype=torch.float16, generator=gen) + 0.5
    xc, wc = cp.asarray(xt), cp.asarray(wt)
    rmsnorm(xc, wc)
    rmsnorm(xc, wc)  # the second call is the first the dispatch cache serves
    plan = rmsnorm._plan
    entry = next(e for e in plan._dispatch.values() if e.route.native)
    handle = entry.kernel
    fn = handle._fn  # the backend's CudaFunction
    raw_kernel, direct = fn.kernel, fn._direct
    if direct is None:
        raise SystemExit("this CuPy has no function behind its RawKernel: nothing to break down")
    grid, block = (ktune.cdiv(t, handle["ROWS"]),), (handle["BLOCK"],)
    rest = (np.int32(HIDDEN), np.float32(EPS), np.int32(t))
    shape, dtype = xc.shape, xc.dtype
    user_fn = plan.fn
    k_rms = ktune.torch_op(rmsnorm)
    pointer = backend.pointer
    raw_stream = torch._C._cuda_getCurrentRawStream
    stream = backend.external_stream(raw_stream(0))
    getdevice = cp.cuda.runtime.getDevice

    def raw_rawkernel() -> Any:
        o = cp.empty(shape, dtype)
        raw_kernel(grid, block, (o, xc, wc, *rest))
        return o

    def raw_function() -> Any:
        o = cp.empty(shape, dtype)
        direct(grid, block, (o, xc, wc, *rest), 0, None)
        return o

    def with_empty_like() -> Any:
        o = cp.empty_like(xc, order="C")
        direct(grid, block, (o, xc, wc, *rest), 0, None)
        return o

    def with_scalars() -> Any:
        o = cp.empty_like(xc, order="C")
        direct(grid, block, (o, xc, wc, np.int32(HIDDEN), np.float32(EPS), np.int32(t)), 0, None)
        return o

    def torch_raw() -> Any:
        o = torch.empty_like(xt)
        direct(grid, block, (pointer(o.data_ptr()), pointer(xt.data_ptr()), pointer(wt.data_ptr()), *rest), 0,
               stream)
        return o

    def torch_raw_stream() -> Any:
        o = torch.empty_like(xt)
        on = backend.streams.get(raw_stream(0))
        direct(grid, block, (pointer(o.data_ptr()), pointer(xt.data_ptr()), pointer(wt.data_ptr()), *rest), 0, on)
        return o

    rmsnorm(xt, wt)
    rmsnorm(xt, wt)
    t_sig, t_entry = next((s, e) for s, e in plan._dispatch.items() if not e.route.native and s[0] == 2)
    t_route, t_handle = t_entry.route, t_entry.kernel
    views = t_route.view_args(plan, (xt, wt), t_sig)
    t_out = t_handle.empty_like(views[0])
    c_out = handle.empty_like(xc)
    c_args = [c_out, xc, wc, *rest]
    t_args = [t_out, views[0], views[1], *rest]
    methods: dict[str, Callable[[], Any]] = {
        "raw (RawKernel)": raw_rawkernel,
        "raw (Function)": raw_function,
        "+ empty_like": with_empty_like,
        "+ scalars": with_scalars,
        "user function": lambda: user_fn(handle, xc, wc),
        "ktune call": lambda: rmsnorm(xc, wc),
        "torch raw": torch_raw,
        "torch raw + stream": torch_raw_stream,
        "ktune call (torch)": lambda: rmsnorm(xt, wt),
        "ktune op (torch)": lambda: k_rms(xt, wt),
        "torch eager": lambda: F.rms_norm(xt, (HIDDEN,), wt, EPS),
        "handle launch (CuPy)": lambda: handle.launch(grid=grid[0], block=block[0], args=c_args),
        "handle empty_like (CuPy)": lambda: handle.empty_like(xc),
        "torch: view_args": lambda: t_route.view_args(plan, (xt, wt), t_sig),
        "torch: handle empty_like": lambda: t_handle.empty_like(views[0]),
        "torch: handle launch": lambda: t_handle.launch(grid=grid[0], block=block[0], args=t_args),
        "torch: user function": lambda: user_fn(t_handle, *t_route.view_args(plan, (xt, wt), t_sig)),
        "cupy.empty": lambda: cp.empty(shape, dtype),
        "cupy.empty_like": lambda: cp.empty_like(xc, order="C"),
        "cupy.ndarray": lambda: cp.ndarray(shape, dtype),
        "torch.empty_like": lambda: torch.empty_like(xt),
        "getDevice": getdevice,
        "3 numpy scalars": lambda: (np.int32(HIDDEN), np.float32(EPS), np.int32(t)),
        "empty Python call": lambda: None,
    }
    info = {"params": dict(handle._own), "grid": grid, "block": block}
    return methods, info


def _stub_ops(schemas: dict[str, str]) -> tuple[Any, Any, Any]:
    """Two custom ops with the ktune ops' schemas whose implementations only allocate their outputs
    (``torch.empty_like``, ``torch.empty``): what a custom op costs around it, eager and compiled."""
    torch: Any = importlib.import_module("torch")  # torch.library is untyped

    lib = torch.library.Library("ktune_stub", "FRAGMENT")
    lib.define("rmsnorm" + schemas["rmsnorm"])
    lib.define("silu_and_mul" + schemas["silu_and_mul"])

    def rms(x: Any, w: Any, eps: float = EPS) -> Any:
        return torch.empty_like(x)

    def silu(g: Any) -> Any:
        return torch.empty((g.shape[0], g.shape[1] // 2), dtype=g.dtype, device=g.device)

    lib.impl("rmsnorm", rms, "CompositeExplicitAutograd")
    lib.impl("silu_and_mul", silu, "CompositeExplicitAutograd")
    torch.library.register_fake("ktune_stub::rmsnorm", rms, lib=lib)
    torch.library.register_fake("ktune_stub::silu_and_mul", silu, lib=lib)
    return lib, torch.ops.ktune_stub.rmsnorm.default, torch.ops.ktune_stub.silu_and_mul.default


def _marked_ops(namespace: str, ops: dict[str, tuple[str, Callable[..., Any], Callable[..., Any]]],
                marks: list[float]) -> tuple[Any, list[Any]]:
    """Custom ops (name: schema, implementation, fake) whose implementations append ``perf_counter()`` to
    ``marks`` on entry and on return: where a forward's time goes, op by op and between them."""
    import time

    torch: Any = importlib.import_module("torch")  # torch.library is untyped
    lib = torch.library.Library(namespace, "FRAGMENT")
    made = []
    for name, (schema, fn, fake) in ops.items():
        lib.define(name + schema)

        def impl(*a: Any, _fn: Callable[..., Any] = fn, **k: Any) -> Any:
            marks.append(time.perf_counter())
            try:
                return _fn(*a, **k)
            finally:
                marks.append(time.perf_counter())

        lib.impl(name, impl, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{namespace}::{name}", fake, lib=lib)
        made.append(getattr(getattr(torch.ops, namespace), name).default)
    return lib, made


def _timeline(forward: Callable[[], Any], marks: list[float], forwards: int,
              sync: Callable[[], None]) -> dict[str, float]:
    """Median µs of each part of a forward of two marked ops: before the first op, each op's implementation,
    between them, after the second."""
    import time

    parts: dict[str, list[float]] = {k: [] for k in ("before", "op 1", "between", "op 2", "after", "forward")}
    for _ in range(forwards):
        marks.clear()
        marks.append(time.perf_counter())
        forward()
        marks.append(time.perf_counter())
        m = marks
        if len(m) != 6:
            raise SystemExit(f"a marked forward made {len(m) - 2} marks, not 4")
        for k, (a, b) in zip(parts, ((0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (0, 5)), strict=True):
            parts[k].append((m[b] - m[a]) * 1e6)
    sync()
    return {k: statistics.median(v) for k, v in parts.items()}


def _counts(stats: Any, calls: int) -> dict[str, float]:
    return {f"{fn[0].rsplit('/', 1)[-1]}:{fn[1]}({fn[2]})": v[1] / calls
            for fn, v in stats.stats.items()}


def _compiled(args: argparse.Namespace, sync: Callable[[], None]) -> tuple[dict[str, Any], str]:
    """The two-op module eager and compiled, beside the same module with torch ops, with stub custom ops
    (what a custom op costs in compiled code whatever it runs), with ops that mark their entry and return
    (where a forward's time goes: in the production calls, and around them), and the Python calls a
    compiled forward makes that an eager one does not."""
    import torch

    import ktune
    from example_project.kernels.rmsnorm import rmsnorm
    from example_project.kernels.silu_and_mul import silu_and_mul
    from pytest_ktune.call import plan as plan_mod

    t = 16
    (x, w, g), with_ktune, with_torch = two_op_module(t, 116)
    k_rms, k_silu = ktune.torch_op(rmsnorm), ktune.torch_op(silu_and_mul)  # the module's ops (one per target)
    _lib, s_rms, s_silu = _stub_ops({"rmsnorm": k_rms.schema, "silu_and_mul": k_silu.schema})
    marks: list[float] = []
    _lib2, (m_rms, m_silu) = _marked_ops("ktune_marked", {
        "rmsnorm": (k_rms.schema, rmsnorm, k_rms._fake), "silu_and_mul": (k_silu.schema, silu_and_mul, k_silu._fake)},
        marks)
    _lib3, (ms_rms, ms_silu) = _marked_ops("ktune_stub_marked", {
        "rmsnorm": (k_rms.schema, s_rms, s_rms), "silu_and_mul": (k_silu.schema, s_silu, s_silu)}, marks)
    def with_targets(x: Any, w: Any, g: Any) -> Any:
        return rmsnorm(x, w, EPS), silu_and_mul(g)

    def with_stubs(x: Any, w: Any, g: Any) -> Any:
        return s_rms(x, w, EPS), s_silu(g)

    def with_marked(x: Any, w: Any, g: Any) -> Any:
        return m_rms(x, w, EPS), m_silu(g)

    def with_marked_stubs(x: Any, w: Any, g: Any) -> Any:
        return ms_rms(x, w, EPS), ms_silu(g)

    def guard() -> None:  # what Inductor's generated code does around the ops
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)

    def guarded() -> Any:
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            return with_ktune(x, w, g)

    def compile_(fn: Callable[..., Any]) -> Callable[..., Any]:
        return torch.compile(fn, fullgraph=True, dynamic=False)

    ck, ct, cs = compile_(with_ktune), compile_(with_torch), compile_(with_stubs)
    cm, cms = compile_(with_marked), compile_(with_marked_stubs)
    methods: dict[str, Callable[[], Any]] = {
        "ktune targets, eager (no op)": lambda: with_targets(x, w, g),
        "rmsnorm alone (torch)": lambda: rmsnorm(x, w, EPS),
        "silu_and_mul alone (torch)": lambda: silu_and_mul(g),
        "ktune ops, eager": lambda: with_ktune(x, w, g),
        "ktune ops, eager, under the device guard": guarded,
        "the device guard alone": guard,
        "ktune ops, compiled": lambda: ck(x, w, g),
        "torch ops, eager": lambda: with_torch(x, w, g),
        "torch ops, compiled": lambda: ct(x, w, g),
        "stub ops, eager": lambda: with_stubs(x, w, g),
        "stub ops, compiled": lambda: cs(x, w, g),
    }
    warm: list[Callable[[], Any]] = [*methods.values(), lambda: cm(x, w, g), lambda: cms(x, w, g)]
    for fn in warm:
        for _ in range(100):
            fn()
    samples = interleaved(methods, args.repeats, args.calls, sync)
    host = {m: statistics.median(s[0] for s in v) * 1e6 for m, v in samples.items()}
    print("compiled T=16: " + ", ".join(f"{m} {v:.2f}" for m, v in host.items()), flush=True)
    # Where a forward's time goes, part by part (marked ops: the production calls, and the stubs).
    lines: dict[str, Callable[[], Any]] = {
        "ktune, eager": lambda: with_marked(x, w, g), "ktune, compiled": lambda: cm(x, w, g),
        "stubs, eager": lambda: with_marked_stubs(x, w, g), "stubs, compiled": lambda: cms(x, w, g)}
    timelines = {name: _timeline(fn, marks, args.calls, sync) for name, fn in lines.items()}
    for name, fn in reversed(lines.items()):  # again, in the other order: the host drifts
        second = _timeline(fn, marks, args.calls, sync)
        timelines[name] = {k: (v + second[k]) / 2 for k, v in timelines[name].items()}
    print("timelines: " + "; ".join(f"{n}: " + ", ".join(f"{k} {v:.2f}" for k, v in tl.items())
                                    for n, tl in timelines.items()), flush=True)
    # The slow path of the dispatch (a call bound by name) taken by compiled forwards, if any.
    slow = [0]
    orig = plan_mod.CallPlan._call

    def counting(self: Any, *a: Any, **k: Any) -> Any:
        slow[0] += 1
        return orig(self, *a, **k)

    plan_mod.CallPlan._call = counting  # type: ignore[method-assign]
    try:
        for _ in range(1000):
            ck(x, w, g)
    finally:
        plan_mod.CallPlan._call = orig  # type: ignore[method-assign]
    # What a compiled forward calls that an eager one does not (cProfile's call counts are exact).
    eager_stats, _ = common.profiled(lambda: with_ktune(x, w, g), 1000)
    text = io.StringIO()
    stats, per_call = common.profiled(lambda: ck(x, w, g), 1000, stream=text)
    e_counts, c_counts = _counts(eager_stats, 1000), _counts(stats, 1000)
    ktune_diff = {f: (e_counts.get(f, 0.0), n) for f, n in c_counts.items()
                  if ("pytest_ktune" in f or "kernels" in f or "torchio" in f or "plan.py" in f)
                  and abs(n - e_counts.get(f, 0.0)) > 1e-9}
    stats.sort_stats("tottime").print_stats(40)
    md = md_table(["module (T=16, fp16)", "host µs per forward"], [[m, f"{v:.2f}"] for m, v in host.items()])
    diff_md = md_table(["ktune function", "calls per eager forward", "per compiled forward"],
                       [[f, f"{a:g}", f"{b:g}"] for f, (a, b) in sorted(ktune_diff.items())]) if ktune_diff else (
        "(none: the production calls make the same Python calls in both)")
    tl_md = md_table(["forward (T=16)", *next(iter(timelines.values()))],
                     [[n, *(f"{v:.2f}" for v in tl.values())] for n, tl in timelines.items()])
    return ({"host_us": host, "python_calls_per_forward": per_call, "timelines_us": timelines,
             "slow_path_calls_per_1000": slow[0], "ktune_call_count_diff": ktune_diff},
            f"## The two-op module, eager and compiled (default mode)\n\n{md}\n\n"
            f"Where a forward's time goes (median µs of {args.calls} forwards, twice; ops whose implementations "
            f"mark their entry and return: the production calls, and the stubs):\n\n{tl_md}\n\n"
            f"Calls of the dispatch's slow path in 1000 compiled forwards: "
            f"{slow[0]}.\n\nThe ktune functions whose calls per forward differ between eager and compiled:\n\n"
            f"{diff_md}\n\ncProfile of 1000 compiled forwards with ktune ops: {per_call:.1f} function calls a "
            f"forward.\n\n```\n{text.getvalue().strip()}\n```\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--compiled", action="store_true", help="the compiled two-op module too, with a profile")
    ap.add_argument("--compiled-only", action="store_true", help="the compiled two-op module alone")
    ap.add_argument("--out", type=Path, default=None, help="a folder (default: benchmarks/results/h200-<date>)")
    args = ap.parse_args()
    add_repo_to_path()
    import torch

    from pytest_ktune import backends

    backend = backends.create("cuda")
    torch.set_grad_enabled(False)
    sync = torch.cuda.synchronize
    rows: list[dict[str, Any]] = []
    for t in () if args.compiled_only else TOKENS:
        methods, info = _methods(t, backend)
        for fn in methods.values():
            for _ in range(100):
                fn()
        samples = interleaved(methods, args.repeats, args.calls, sync)
        host = {m: statistics.median(s[0] for s in v) * 1e6 for m, v in samples.items()}
        spread = {m: [min(s[0] for s in v) * 1e6, max(s[0] for s in v) * 1e6] for m, v in samples.items()}
        rows.append({"T": t, **info, "host_us": host, "host_range_us": spread,
                     "wall_us": {m: statistics.median(s[1] for s in v) * 1e6 for m, v in samples.items()}})
        print(f"T={t}: " + ", ".join(f"{m} {v:.2f}" for m, v in host.items()), flush=True)
    date = now_utc()
    device = backend.device.name
    names = list(rows[0]["host_us"]) if rows else []
    heads = ["row", *(f"T={r['T']} (µs)" for r in rows), *(f"T={r['T']} range" for r in rows)]
    table = "(not run: --compiled-only)" if not rows else md_table(heads,
                     [[m, *(f"{r['host_us'][m]:.2f}" for r in rows),
                       *("{:.2f}-{:.2f}".format(*r["host_range_us"][m]) for r in rows)] for m in names])
    md = (f"# The production call's host time, part by part\n\n{date}, `{command_line()}`, {device}\n\n"
          f"rmsnorm H={HIDDEN} fp16, recorded parameters ({', '.join(str(r['params']) for r in rows)}). "
          f"Median host µs per call of {args.repeats} interleaved rounds of {args.calls} calls (the range: "
          f"the rounds' lowest and highest).\n\n{table}\n")
    compiled: dict[str, Any] = {}
    if args.compiled or args.compiled_only:
        compiled, section = _compiled(args, sync)
        md += "\n" + section
    out = args.out or RESULTS / f"h200-{date[:10]}"
    write_results(out / "call_breakdown.json", {"date": date, "device": device, "command": command_line(),
                                                 "versions": versions(), "rows": rows,
                                                 "compiled": compiled}, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
