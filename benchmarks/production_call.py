"""The host cost of a production call on a GPU, side by side with a raw CuPy launch, torch eager and Liger-Kernel.

For rmsnorm (H=4096) and silu_and_mul (I=14336) of ``example_project``, fp16, at T = 1, 16 and 256, each of
these is called ``--calls`` times in a loop with one synchronisation at the end, in ``--repeats`` interleaved
rounds (a rotating order); the tables give the median host time per call (the loop's time before the
synchronisation, divided by the calls) and, in the JSON, the wall time per call with it:

- ``ktune (CuPy)``: ``rmsnorm(x, w)`` on CuPy arrays, with the parameters the params file records for this
  device and key (the default where none is);
- ``ktune (torch)``: the same call on torch tensors (zero copy, torch's current stream, torch's allocator);
- ``raw CuPy``: the same compiled kernel (the ``cupy.RawKernel`` the ktune call launches), the same grid,
  block and arguments, launched directly, its output allocated with ``cupy.empty``: what a call costs
  without pytest-ktune;
- ``torch eager``: ``F.rms_norm(x, (H,), w, eps)``, ``F.silu(x[:, :I]) * x[:, I:]``;
- ``Liger``: ``LigerRMSNormFunction.apply(x, w, eps)`` and ``LigerSiLUMulFunction.apply(a, b)`` (on two
  contiguous halves, made once), where ``liger_kernel`` imports; "not installed" otherwise.

Every output is checked against torch eager's first. The goals (issue 16): ktune's host time within 5 µs of
the raw launch, and below torch eager's.

Usage: python3 benchmarks/production_call.py [--calls 2000] [--repeats 7] [--out benchmarks/results/DIR]
"""

from __future__ import annotations

import argparse
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
GOAL_US = 5.0
COLUMNS = ("ktune (CuPy)", "ktune (torch)", "raw CuPy", "torch eager", "Liger")


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

    from example_project.kernels.rmsnorm import rmsnorm
    from example_project.kernels.silu_and_mul import silu_and_mul

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
        if not isinstance(liger, str):
            swiglu = liger[1]
            a, b = xt[:, :INTER].contiguous(), xt[:, INTER:].contiguous()
            methods["Liger"] = lambda: swiglu.apply(a, b)
    methods["raw CuPy"] = _raw(target, backend, bound)
    methods["torch eager"] = eager
    return target, bound, {c: methods[c] for c in COLUMNS if c in methods}


def _params(target: Any, backend: Any, bound: dict[str, Any]) -> tuple[dict[str, Any], str]:
    from pytest_ktune.core.paths import params_path
    from pytest_ktune.core.store import Store, target_id

    path = params_path(target.file.parent)
    record = Store.load(path).find(target_id(target, path.parent), backend.device.id, target.key(bound))
    return (dict(record.params), "recorded") if record else (dict(target.default), "default")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
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
            row["ktune_minus_raw_us"] = {k: host[k] - host["raw CuPy"] for k in ("ktune (CuPy)", "ktune (torch)")}
            row["ktune_over_eager"] = {k: host[k] / host["torch eager"] for k in ("ktune (CuPy)", "ktune (torch)")}
            rows.append(row)
            print(f"{op} T={t}: " + ", ".join(f"{m} {v:.2f} µs" for m, v in host.items()), flush=True)
    date = now_utc()
    out = args.out or RESULTS / f"h200-{date[:10]}-production"
    facts = {"date": date, "command": command_line(), "device": backend.device.id, "compiler": backend.device.compiler,
             "versions": versions(), "calls": args.calls, "repeats": args.repeats,
             "liger": liger if isinstance(liger, str) else "installed", "rows": rows}

    def cell(r: dict[str, Any], m: str) -> str:
        return f"{r['host_us'][m]:.2f}" if m in r["host_us"] else (liger if isinstance(liger, str) else "n/a")

    table = md_table(
        ["op, shape (fp16)", *(f"{c} (µs)" for c in COLUMNS), "ktune − raw (µs, CuPy / torch)",
         "ktune / eager (CuPy / torch)", "goals met", "params"],
        [[f"{r['op']} T={r['T']}", *(cell(r, c) for c in COLUMNS),
          " / ".join(f"{v:+.2f}" for v in r["ktune_minus_raw_us"].values()),
          " / ".join(f"{v:.2f}" for v in r["ktune_over_eager"].values()),
          "yes" if all(v <= GOAL_US for v in r["ktune_minus_raw_us"].values())
          and all(v < 1 for v in r["ktune_over_eager"].values()) else "no",
          f"{r['params']} ({r['params_from']})"] for r in rows])
    text = (f"# Production call: host time per call\n\n{date}, `{facts['command']}`, {backend.device.id}\n\n"
            f"A loop of {args.calls} calls, one synchronisation at the end, median of {args.repeats} interleaved "
            f"rounds. Goals: ktune within {GOAL_US:g} µs of the raw launch, and below torch eager.\n\n{table}\n")
    write_results(out / "production_call.json", facts, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
