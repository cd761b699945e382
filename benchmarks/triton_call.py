"""The host cost of a Triton target's production call, side by side with what a Triton user calls instead.

The example's Triton RMSNorm (``example_project/kernels/triton_rmsnorm.py``) on torch tensors, four ways, each
making its output with ``torch.empty_like`` (ktune's through ``kernel.empty_like``) and launching the same
kernel with the same configuration (the recorded or default one):

- ``plain``: the jit function launched as ``kernel[grid](x, w, y, N, eps, BLOCK_SIZE=..., num_warps=...)``;
- ``autotune``: the same Python function under ``@triton.autotune`` with that one configuration (its cached
  call: one configuration is never benchmarked);
- ``ktune (JIT)``: ``triton_rmsnorm(x, w)`` with its direct launches turned off, every launch through
  ``kernel[grid](...)`` as before ``backends.triton_direct``;
- ``ktune (direct)``: ``triton_rmsnorm(x, w)`` as it runs now: after its first call, Triton's compiled kernel
  launched directly.

Host seconds per call over a loop with one synchronisation at the end (``_common.interleaved``, the order
rotated each round), and the Python function calls per call under cProfile. The goals: ktune (direct) <=
autotune's cached call, and <= plain + 5 µs (issue 25). Writes JSON and a markdown table beside it.

Run: ``python3 benchmarks/triton_call.py --out DIR/triton_call.json`` on a GPU. ``--cpu``: Triton's own JIT,
compiler and runtime on torch CPU tensors over a fake CUDA driver (``testing.fake_triton.FakeDriver``: Triton
compiles for sm_90 with its ptxas, nothing is loaded or run, a launch is one Python call where CUDA's is C):
the Python work of each way on this machine, no GPU's time.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common

common.add_repo_to_path()

GOAL_US = 5.0
METHODS = ("plain", "autotune", "ktune (JIT)", "ktune (direct)")


@contextlib.contextmanager
def _device(cpu: bool) -> Iterator[Any]:
    """The triton backend the calls run on: the GPU's, or (``--cpu``) one of CPU tensors on Triton's own runtime
    over the fake driver."""
    from pytest_ktune import backends

    if not cpu:
        yield backends.create("triton")
        return
    os.environ.pop("TRITON_INTERPRET", None)
    from pytest_ktune.backends import triton_direct
    from pytest_ktune.testing.fake_triton import FakeDriver, backend_installed

    with FakeDriver(check=False).installed(), backend_installed(triton_direct.runtime()) as backend:
        yield backend


def _host(call: Callable[[], Any], n: int, rounds: int) -> float:
    """The least host seconds per call over ``rounds`` loops of ``n`` (``--cpu``: nothing to synchronise)."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            call()
        best = min(best, time.perf_counter() - start)
    return best / n


def _methods(mod: Any, x: Any, w: Any, cpu: bool) -> tuple[dict[str, Callable[[], Any]], dict[str, Any], Any]:
    import torch
    import triton

    target = mod.triton_rmsnorm
    target(x, w)  # the first call: the plan, the entry, Triton's compile
    entry = next(iter(target._plan._entries.values()))
    fn = entry.kernel._fn  # the backend's TritonFunction
    direct = fn.direct
    params = target.for_backend("triton").complete(dict(entry.kernel.params))
    kw = {k: v for k, v in params.items() if k in ("BLOCK_SIZE", "num_warps", "num_stages")}
    jit = mod._rmsnorm_kernel
    config = triton.Config({"BLOCK_SIZE": kw["BLOCK_SIZE"]}, num_warps=kw.get("num_warps", 4),
                           num_stages=kw.get("num_stages", 2))
    tuned = triton.autotune(configs=[config], key=["N"])(triton.jit(jit.fn))
    rows, hidden = x.shape

    def plain() -> Any:
        y = torch.empty_like(x)
        jit[(rows,)](x, w, y, hidden, 1e-6, **kw)
        return y

    def autotuned() -> Any:
        y = torch.empty_like(x)
        tuned[(rows,)](x, w, y, hidden, 1e-6)
        return y

    def through_jit() -> Any:
        fn.direct = None
        try:
            return target(x, w)
        finally:
            fn.direct = direct

    def straight() -> Any:
        fn.direct = direct
        return target(x, w)

    methods = dict(zip(METHODS, (plain, autotuned, through_jit, straight), strict=True))
    for m in methods.values():  # every way compiled, and (on a GPU, where kernels run) the same output from each
        out = m()
        if not cpu:
            torch.testing.assert_close(out, plain())
    return methods, params, direct


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--cpu", action="store_true", help="Triton's own runtime over a fake CUDA driver, no GPU")
    p.add_argument("--quick", action="store_true", help="a smoke test: few calls of a small shape")
    args = p.parse_args(argv)
    import torch

    torch.set_grad_enabled(False)
    shapes = [(4, 1024)] if args.quick else [(1, 4096), (64, 4096), (1024, 4096)]
    calls, repeats = (50, 2) if args.quick else (args.calls, args.repeats)
    rows: list[dict[str, Any]] = []
    with _device(args.cpu) as backend:
        from example_project.kernels import triton_rmsnorm as mod

        dev = backend.device
        device = getattr(backend, "device_obj", None)
        sync = (lambda: None) if args.cpu else torch.cuda.synchronize
        for t, h in shapes:
            x = torch.randn(t, h, dtype=torch.float16, device=device)
            w = torch.rand(h, dtype=torch.float16, device=device)
            methods, params, direct = _methods(mod, x, w, args.cpu)
            if args.cpu:
                host = {m: _host(c, calls, repeats) for m, c in methods.items()}
                samples: dict[str, list[float | None]] = {}
            else:
                timed = common.interleaved(methods, repeats, calls, sync)
                host = {m: statistics.median(s for s, _ in v) for m, v in timed.items()}
                samples = {m: [common.us(s) for s, _ in v] for m, v in timed.items()}
            counts = {m: round(common.profiled(c, min(calls, 500))[1], 1) for m, c in methods.items()}
            rows.append({"shape": [t, h], "params": params, "host_us": {m: common.us(v) for m, v in host.items()},
                         "python_calls_per_call": counts, "samples_us": samples,
                         "direct_launches": None if direct is None else direct.launches})
    goals = _goals(rows)
    data = {"benchmark": "triton_call", "date": common.now_utc(), "command": common.command_line(),
            "device": "CPU: Triton's own runtime over a fake CUDA driver" if args.cpu else dev.name, "cpu": args.cpu,
            "versions": common.versions(), "calls": calls, "repeats": repeats, "rows": rows, "goals": goals}
    table = common.md_table(
        ["shape", *(f"{m} µs" for m in METHODS), "Python calls per call (same order)"],
        [[f"{r['shape'][0]}x{r['shape'][1]}", *(common.fmt_num(r["host_us"][m]) for m in METHODS),
          " / ".join(f"{r['python_calls_per_call'][m]:g}" for m in METHODS)] for r in rows])
    note = ("\n\nTriton's own runtime over a fake CUDA driver on this machine's CPU: the Python work of each way, "
            "no GPU's time (the fake's launcher is one Python call where CUDA's is C)." if args.cpu else "")
    title = f"# Triton production call, host time ({data['device']})"
    md = common.write_results(args.out, data, f"{title}\n\n{table}{note}\n\n" + "\n".join(goals))
    print(table)
    print("\n".join(goals))
    print(f"wrote {common.shown_path(args.out)} and {common.shown_path(md)}")
    return 0


def _goals(rows: list[dict[str, Any]]) -> list[str]:
    def worst(a: str, b: str) -> float:
        return float(max(r["host_us"][a] - r["host_us"][b] for r in rows))

    vs_autotune, vs_plain, jit = worst("ktune (direct)", "autotune"), worst("ktune (direct)", "plain"), \
        worst("ktune (JIT)", "plain")
    return [f"{'PASS' if vs_autotune <= 0 else 'MISS'}: the production call (direct) costs at most {vs_autotune:+.2f} "
            "µs of host time against @triton.autotune's cached call (goal <= 0)",
            f"{'PASS' if vs_plain <= GOAL_US else 'MISS'}: the production call (direct) adds at most "
            f"{vs_plain:+.2f} µs to a plain kernel[grid](...) call (goal <= +{GOAL_US:g} µs)",
            f"(through the JIT, as before the direct launches: at most {jit:+.2f} µs against the plain call)"]


if __name__ == "__main__":
    raise SystemExit(main())
