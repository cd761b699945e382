"""The host cost of a production call on a GPU, side by side with a raw CuPy launch, torch eager and Liger-Kernel.

For rmsnorm (H=4096) and silu_and_mul (I=14336) of ``example_project``, fp16, at T = 1, 16 and 256, each of
these is called ``--calls`` times in a loop with one synchronisation at the end, in ``--repeats`` interleaved
rounds (a rotating order); the tables give the median host time per call (the loop's time before the
synchronisation, divided by the calls) and, in the JSON, the wall time per call with it:

- ``ktune (CuPy)``: ``rmsnorm(x, w)`` on CuPy arrays, with the parameters the params file records for this
  device and key (the default where none is);
- ``ktune (torch)``: the same call on torch tensors (zero copy, torch's current stream, torch's allocator);
- ``ktune op (torch)``: the target as a torch custom op (``ktune.torch_op``) called eagerly on the same tensors:
  the dispatcher's part of what a compiled graph's call of the op costs;
- ``raw CuPy``: the same compiled kernel (the ``cupy.RawKernel`` the ktune call launches), the same grid,
  block and arguments, launched directly, its output allocated with ``cupy.empty``: what a call costs
  without pytest-ktune;
- ``torch eager``: ``F.rms_norm(x, (H,), w, eps)``, ``F.silu(x[:, :I]) * x[:, I:]``;
- ``Liger``: ``LigerRMSNormFunction.apply(x, w, eps)`` and ``LigerSiLUMulFunction.apply(a, b)`` (on two
  contiguous halves, made once), where ``liger_kernel`` imports; "not installed" otherwise.

Every output is checked against torch eager's first. The goals (issue 32): ktune's host time on CuPy arrays
within 3 µs of the raw launch, on torch tensors within 5 µs, and below torch eager's on every row.

Then ``torch.compile(fullgraph=True, dynamic=False)`` of a two-op module, ``(rmsnorm(x, w), silu_and_mul(g))``
at the same T, written with the ktune ops (``ktune.torch_op``) and with torch ops (``F.rms_norm``,
``F.silu(g[:, :I]) * g[:, I:]``), each compiled in the default mode and in ``mode="reduce-overhead"`` (CUDA
graphs): host time per forward in the same loops, and the ratio ktune / torch per mode (the goal: at most 1.1).
``--no-compile`` leaves that part out.

Usage: python3 benchmarks/production_call.py [--calls 2000] [--repeats 7] [--no-compile] [--out benchmarks/results/DIR]
"""

from __future__ import annotations

import argparse
import functools
import importlib
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, add_repo_to_path, command_line, interleaved, md_table, now_utc, versions, write_results

TOKENS = (1, 16, 256)
HIDDEN = 4096
INTER = 14336
EPS = 1e-6
GOAL_US = {"ktune (CuPy)": 3.0, "ktune (torch)": 5.0}
GOAL_COMPILED = 1.1
MODES = ("default", "reduce-overhead")
COLUMNS = ("ktune (CuPy)", "ktune (torch)", "ktune op (torch)", "raw CuPy", "torch eager", "Liger")
KTUNE = ("ktune (CuPy)", "ktune (torch)", "ktune op (torch)")


def _liger() -> tuple[Any, Any] | str:
    try:
        rms_norm = importlib.import_module("liger_kernel.ops.rms_norm")
        swiglu = importlib.import_module("liger_kernel.ops.swiglu")
    except Exception as exc:  # not installed, or a build that does not import here
        return f"not installed ({type(exc).__name__})"
    return rms_norm.LigerRMSNormFunction, swiglu.LigerSiLUMulFunction


def _raw(target: Any, backend: Any, bound: dict[str, Any]) -> Callable[[], Any]:
    """The ktune call's own compiled kernel, grid, block and arguments, launched straight through CuPy."""
    import cupy as cp

    from pytest_ktune.measure.runtime import run

    params = _params(target, backend, bound)[0]
    out, launches = run(backend, target, params, bound)
    (launch,) = launches
    assert launch.args[0] is out, "the benchmark expects the output as the kernel's first argument"
    kernel = launch.function.kernel  # type: ignore[attr-defined]  # the cupy.RawKernel
    grid, block, rest = launch.grid, launch.block, tuple(launch.args[1:])
    shape, dtype = out.shape, out.dtype

    def raw() -> Any:
        o = cp.empty(shape, dtype)
        kernel(grid, block, (o, *rest))
        return o

    return raw


def _case(op: str, t: int, liger: tuple[Any, Any] | str, backend: Any) -> tuple[Any, dict[str, Any],
                                                                               dict[str, Callable[[], Any]]]:
    """The target, its CuPy arguments bound, and every way to compute the op on these inputs."""
    import cupy as cp
    import torch
    import torch.nn.functional as F

    import ktune
    from example_project.kernels.rmsnorm import rmsnorm
    from example_project.kernels.silu_and_mul import silu_and_mul

    k_rms, k_silu = ktune.torch_op(rmsnorm), ktune.torch_op(silu_and_mul)
    gen = torch.Generator(device="cuda").manual_seed(t)
    methods: dict[str, Callable[[], Any]] = {}
    if op == "rmsnorm":
        xt = torch.randn((t, HIDDEN), device="cuda", dtype=torch.float16, generator=gen)
        wt = torch.rand((HIDDEN,), device="cuda", dtype=torch.float16, generator=gen) + 0.5
        xc, wc = cp.asarray(xt), cp.asarray(wt)
        target: Any = rmsnorm
        bound: dict[str, Any] = {"x": xc, "w": wc, "eps": EPS}

        def eager() -> Any:
            if hasattr(F, "rms_norm"):
                return F.rms_norm(xt, (HIDDEN,), wt, EPS)
            x32 = xt.float()
            return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS)).half() * wt

        methods["ktune (CuPy)"] = lambda: rmsnorm(xc, wc)
        methods["ktune (torch)"] = lambda: rmsnorm(xt, wt)
        methods["ktune op (torch)"] = lambda: k_rms(xt, wt)
        if not isinstance(liger, str):
            rms = liger[0]
            methods["Liger"] = lambda: rms.apply(xt, wt, EPS)
    else:
        xt = torch.randn((t, 2 * INTER), device="cuda", dtype=torch.float16, generator=gen)
        xc = cp.asarray(xt)
        target, bound = silu_and_mul, {"x": xc}

        def eager() -> Any:
            return F.silu(xt[:, :INTER]) * xt[:, INTER:]

        methods["ktune (CuPy)"] = lambda: silu_and_mul(xc)
        methods["ktune (torch)"] = lambda: silu_and_mul(xt)
        methods["ktune op (torch)"] = lambda: k_silu(xt)
        if not isinstance(liger, str):
            swiglu = liger[1]
            a, b = xt[:, :INTER].contiguous(), xt[:, INTER:].contiguous()
            methods["Liger"] = lambda: swiglu.apply(a, b)
    methods["raw CuPy"] = _raw(target, backend, bound)
    methods["torch eager"] = eager
    return target, bound, {c: methods[c] for c in COLUMNS if c in methods}


def _Block(torch: Any, forward: Callable[..., Any]) -> Any:
    """A module whose forward is ``forward``: what torch.compile compiles."""

    class Block(torch.nn.Module):  # type: ignore[misc]
        def forward(self, x: Any, w: Any, g: Any) -> Any:
            return forward(x, w, g)

    return Block()


def two_op_module(t: int, seed: int) -> tuple[tuple[Any, Any, Any], Callable[..., Any], Callable[..., Any]]:
    """The two-op module's inputs at ``t`` tokens (x, w for RMSNorm; g for SiLU-and-mul; fp16 on the GPU) and its
    forward written with ktune ops (``ktune.torch_op`` of the example's targets) and with torch ops."""
    import torch
    import torch.nn.functional as F

    import ktune
    from example_project.kernels.rmsnorm import rmsnorm
    from example_project.kernels.silu_and_mul import silu_and_mul

    k_rms, k_silu = ktune.torch_op(rmsnorm), ktune.torch_op(silu_and_mul)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn((t, HIDDEN), device="cuda", dtype=torch.float16, generator=gen)
    w = torch.rand((HIDDEN,), device="cuda", dtype=torch.float16, generator=gen) + 0.5
    g = torch.randn((t, 2 * INTER), device="cuda", dtype=torch.float16, generator=gen)

    def with_ktune(x: Any, w: Any, g: Any) -> Any:
        return k_rms(x, w, EPS), k_silu(g)

    def with_torch(x: Any, w: Any, g: Any) -> Any:
        return F.rms_norm(x, (HIDDEN,), w, EPS), F.silu(g[:, :INTER]) * g[:, INTER:]

    return (x, w, g), with_ktune, with_torch


def _compiled_row(t: int, args: argparse.Namespace, sync: Callable[[], None]) -> dict[str, Any]:
    """The two-op module with ktune ops and with torch ops, compiled in each mode, timed side by side."""
    import torch

    (x, w, g), with_ktune, with_torch = two_op_module(t, 100 + t)
    want = with_torch(x, w, g)
    torch._dynamo.reset()  # each row compiles its own modules: the earlier rows' count against no limit
    methods: dict[str, Callable[[], Any]] = {}
    for mode in MODES:
        for label, forward in (("ktune", with_ktune), ("torch", with_torch)):
            compiled: Any = torch.compile(_Block(torch, forward), fullgraph=True, dynamic=False,
                                          mode=None if mode == "default" else mode)
            for _ in range(5):  # compiles; reduce-overhead records its graphs on the first calls
                got = compiled(x, w, g)
            for a, b in zip(got, want, strict=True):
                err = float((a.float() - b.float()).abs().max() / b.float().abs().max())
                if err > 1e-2:
                    raise SystemExit(f"compiled {label} ops, {mode}, T={t}: differs from torch eager by {err:.2e}")
            methods[f"{label} ops, {mode}"] = functools.partial(compiled, x, w, g)
    for method in methods.values():
        for _ in range(50):
            method()
    samples = interleaved(methods, args.repeats, args.calls, sync)
    host = {m: statistics.median(s[0] for s in v) * 1e6 for m, v in samples.items()}
    ratio = {m: host[f"ktune ops, {m}"] / host[f"torch ops, {m}"] for m in MODES}
    print(f"compiled T={t}: " + ", ".join(f"{m} {v:.2f} µs" for m, v in host.items()), flush=True)
    return {"T": t, "host_us": host, "ratio": ratio,
            "wall_us": {m: statistics.median(s[1] for s in v) * 1e6 for m, v in samples.items()},
            "raw_samples_us": {m: [[a * 1e6, b * 1e6] for a, b in v] for m, v in samples.items()}}


def _params(target: Any, backend: Any, bound: dict[str, Any]) -> tuple[dict[str, Any], str]:
    from pytest_ktune.core.paths import params_path
    from pytest_ktune.core.store import Store, target_id

    path = params_path(target.file.parent)
    record = Store.load(path).find(target_id(target, path.parent), backend.device.id, target.key(bound))
    return (target.complete(record.params), "recorded") if record else (dict(target.default), "default")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-compile", action="store_true", help="leave out the torch.compile comparison")
    ap.add_argument("--out", type=Path, default=None, help="a folder (default: benchmarks/results/h200-<date>)")
    args = ap.parse_args()
    add_repo_to_path()
    import torch

    from pytest_ktune import backends

    backend = backends.create("cuda")
    liger = _liger()
    sync = torch.cuda.synchronize
    rows: list[dict[str, Any]] = []
    torch.set_grad_enabled(False)
    for op in ("rmsnorm", "silu_and_mul"):
        for t in TOKENS:
            target, bound, methods = _case(op, t, liger, backend)
            ref = methods["torch eager"]()
            errors = {}
            for name, fn in methods.items():
                got = fn()
                got_t = got if isinstance(got, torch.Tensor) else torch.as_tensor(got, device="cuda")
                errors[name] = float((got_t.float() - ref.float()).abs().max() / ref.float().abs().max())
                if errors[name] > 1e-2:
                    raise SystemExit(f"{op} T={t}: {name} differs from torch eager by {errors[name]:.2e} of its "
                                     "largest value")
                for _ in range(50):
                    fn()
            samples = interleaved(methods, args.repeats, args.calls, sync)
            host = {m: statistics.median(s[0] for s in v) * 1e6 for m, v in samples.items()}
            params, source = _params(target, backend, bound)
            row = {"op": op, "T": t, "params": params, "params_from": source, "host_us": host,
                   "wall_us": {m: statistics.median(s[1] for s in v) * 1e6 for m, v in samples.items()},
                   "max_diff_vs_eager_relative_to_max": errors,
                   "raw_samples_us": {m: [[a * 1e6, b * 1e6] for a, b in v] for m, v in samples.items()}}
            row["ktune_minus_raw_us"] = {k: host[k] - host["raw CuPy"] for k in KTUNE}
            row["ktune_over_eager"] = {k: host[k] / host["torch eager"] for k in KTUNE}
            rows.append(row)
            print(f"{op} T={t}: " + ", ".join(f"{m} {v:.2f} µs" for m, v in host.items()), flush=True)
    compiled = [] if args.no_compile else [_compiled_row(t, args, sync) for t in TOKENS]
    date = now_utc()
    out = args.out or RESULTS / f"h200-{date[:10]}-production"
    facts = {"date": date, "command": command_line(), "device": backend.device.id, "compiler": backend.device.compiler,
             "versions": versions(), "calls": args.calls, "repeats": args.repeats,
             "liger": liger if isinstance(liger, str) else "installed", "rows": rows, "compiled": compiled}

    def cell(r: dict[str, Any], m: str) -> str:
        return f"{r['host_us'][m]:.2f}" if m in r["host_us"] else (liger if isinstance(liger, str) else "n/a")

    table = md_table(
        ["op, shape (fp16)", *(f"{c} (µs)" for c in COLUMNS), "ktune − raw (µs, CuPy / torch / op)",
         "ktune / eager (CuPy / torch / op)", "goals met", "params"],
        [[f"{r['op']} T={r['T']}", *(cell(r, c) for c in COLUMNS),
          " / ".join(f"{v:+.2f}" for v in r["ktune_minus_raw_us"].values()),
          " / ".join(f"{v:.2f}" for v in r["ktune_over_eager"].values()),
          "yes" if all(r["ktune_minus_raw_us"][k] <= v for k, v in GOAL_US.items())
          and all(r["ktune_over_eager"][k] < 1 for k in GOAL_US) else "no",
          f"{r['params']} ({r['params_from']})"] for r in rows])
    text = (f"# Production call: host time per call\n\n{date}, `{facts['command']}`, {backend.device.id}\n\n"
            f"A loop of {args.calls} calls, one synchronisation at the end, median of {args.repeats} interleaved "
            "rounds. Goals: ktune within 3 µs (CuPy arrays) and 5 µs (torch tensors) of the raw launch, and below "
            f"torch eager.\n\n{table}\n")
    if compiled:
        ctable = md_table(
            ["T (fp16)", *(f"{w} ops, {m} (µs)" for m in MODES for w in ("ktune", "torch")),
             *(f"ktune / torch, {m}" for m in MODES), f"≤ {GOAL_COMPILED}?"],
            [[str(r["T"]), *(f"{r['host_us'][f'{w} ops, {m}']:.2f}" for m in MODES for w in ("ktune", "torch")),
              *(f"{r['ratio'][m]:.2f}" for m in MODES),
              "yes" if all(v <= GOAL_COMPILED for v in r["ratio"].values()) else "no"] for r in compiled])
        text += (f"\n## torch.compile(fullgraph=True) of (rmsnorm(x, w), silu_and_mul(g))\n\nHost time per forward, "
                 f"the same loops.\n\n{ctable}\n")
    write_results(out / "production_call.json", facts, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
