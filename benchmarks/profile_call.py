"""Where the host work of a production call goes: every function one call of the example's rmsnorm and
silu_and_mul runs, from the user's call to the kernel launch, on CuPy arrays, on torch tensors and through
``ktune.torch_op``'s op, after a warm-up.

For each way of calling, one call is traced with ``sys.setprofile``: the tree of Python calls (functions with
a frame) and C calls (builtins, methods of C types) down to the launch, and their counts; the objects a call
makes are what the tree shows being built (its dicts, views, numpy scalars). Then ``--calls`` calls run under
cProfile (Python function calls per call, the top functions by own time).

``--cpu`` runs the CUDA route without a GPU: a fake CuPy whose kernels record their launches and torch CPU
tensors dressed as CUDA tensors (``pytest_ktune.testing.fake_cuda``). It counts the Python work the route
does, not GPU or driver time: the fake's own launch is one Python call where CuPy's is C. It also gives the
host time per call on this machine beside a raw launch of the fake's function (the fake's own work in both):
a measure of the route's Python, not of a GPU call. Without ``--cpu`` it runs on the GPU with CuPy and torch.

Usage: python3 benchmarks/profile_call.py [--cpu] [--calls 5000] [--out DIR]
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import add_repo_to_path, command_line, now_utc, profiled

T, H, INTER = 16, 4096, 14336
FAKE = ""  # the fake CuPy's file, with --cpu


def _name(frame: Any, event: str, arg: Any) -> str:
    if event == "c_call":
        owner = getattr(arg, "__self__", None)
        where = type(owner).__name__ if owner is not None and not isinstance(owner, type(sys)) else \
            getattr(arg, "__module__", None) or ""
        return f"{where}.{arg.__name__}" if where else arg.__name__
    code = frame.f_code
    path = Path(code.co_filename)
    short = "/".join(path.parts[-2:]) if "pytest_ktune" in path.parts or "example_project" in path.parts else \
        path.name
    return f"{code.co_qualname} ({short}:{frame.f_lineno})"


class Trace:
    """One call's events: the tree of calls and their counts. The fake CuPy's functions stand for CuPy's own
    (C in CuPy, but for ``cupy.empty``): each is one call, its insides not traced."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.python = 0
        self.c = 0
        self.cupy = 0
        self._depth = 0
        self._opaque = -1  # the depth of the fake CuPy call being skipped, or -1

    def hook(self, frame: Any, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            if self._opaque < 0:
                fake = event == "call" and frame.f_code.co_filename == FAKE
                if fake:
                    self.cupy += 1
                    self._opaque = self._depth
                elif event == "call":
                    self.python += 1
                else:
                    self.c += 1
                tag = "[CuPy] " if fake else "" if event == "call" else "[C] "
                self.lines.append("  " * self._depth + tag + _name(frame, event, arg))
            self._depth += 1
        elif event in ("return", "c_return", "c_exception"):
            self._depth -= 1
            if self._depth == self._opaque:
                self._opaque = -1


def _trace(call: Callable[[], Any]) -> Trace:
    trace = Trace()
    sys.setprofile(trace.hook)
    call()
    sys.setprofile(None)
    trace.lines.pop()  # the setprofile call that ends it
    trace.c -= 1
    trace.python -= 1  # the caller's own lambda, the tree's first line
    return trace


def _profile(call: Callable[[], Any], calls: int) -> tuple[float, str]:
    buf = io.StringIO()
    stats, per_call = profiled(call, calls, stream=buf)
    stats.strip_dirs().sort_stats("tottime").print_stats(20)
    return per_call, buf.getvalue()


def _calls_gpu() -> dict[str, Callable[[], Any]]:
    import cupy as cp
    import torch

    import ktune
    from example_project.kernels.rmsnorm import rmsnorm
    from example_project.kernels.silu_and_mul import silu_and_mul

    xt = torch.randn((T, H), device="cuda", dtype=torch.float16)
    wt = torch.rand((H,), device="cuda", dtype=torch.float16) + 0.5
    gt = torch.randn((T, 2 * INTER), device="cuda", dtype=torch.float16)
    xc, wc, gc = cp.asarray(xt), cp.asarray(wt), cp.asarray(gt)
    op = ktune.torch_op(rmsnorm)
    return {"rmsnorm, CuPy arrays": lambda: rmsnorm(xc, wc), "rmsnorm, torch tensors": lambda: rmsnorm(xt, wt),
            "rmsnorm, torch op (eager)": lambda: op(xt, wt),
            "silu_and_mul, CuPy arrays": lambda: silu_and_mul(gc), "silu_and_mul, torch tensors":
            lambda: silu_and_mul(gt)}


def _calls_cpu(cp: Any) -> dict[str, Callable[[], Any]]:
    import numpy as np
    import torch

    import ktune
    from example_project.kernels.rmsnorm import rmsnorm
    from example_project.kernels.silu_and_mul import silu_and_mul
    from pytest_ktune.testing.fake_cuda import cuda_tensor

    xc, wc, gc = cp.empty((T, H), np.float16), cp.empty((H,), np.float16), cp.empty((T, 2 * INTER), np.float16)
    xt = cuda_tensor(torch.empty((T, H), dtype=torch.float16))
    wt = cuda_tensor(torch.empty((H,), dtype=torch.float16))
    gt = cuda_tensor(torch.empty((T, 2 * INTER), dtype=torch.float16))
    op = ktune.torch_op(rmsnorm)
    calls = {"rmsnorm, CuPy arrays": lambda: rmsnorm(xc, wc), "rmsnorm, torch tensors": lambda: rmsnorm(xt, wt),
             "rmsnorm, torch op (eager)": lambda: op(xt, wt),
             "silu_and_mul, CuPy arrays": lambda: silu_and_mul(gc), "silu_and_mul, torch tensors":
             lambda: silu_and_mul(gt)}
    rmsnorm(xc, wc)
    launched = next(iter(rmsnorm._plan._dispatch.values())).kernel._fn
    fn, block = launched.kernel.kernel, launched._block  # the fake CuPy function, and the block it was given
    rest = (xc, wc, np.int32(H), np.float32(1e-6))

    def raw() -> Any:  # what benchmarks/production_call.py's raw CuPy row does, on the fake
        o = cp.empty(xc.shape, xc.dtype)
        fn((T,), block, (o, *rest))
        return o

    calls["rmsnorm, raw launch (CuPy's function)"] = raw
    return calls


def _host_us(call: Callable[[], Any], n: int, rounds: int = 7) -> float:
    """The least host time per call over ``rounds`` loops of ``n`` calls (this machine; the fake's own
    work included in every row alike)."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            call()
        best = min(best, time.perf_counter() - start)
    return best / n * 1e6


def _run(calls: dict[str, Callable[[], Any]], n: int, timed: bool) -> tuple[list[str], dict[str, Any]]:
    text: list[str] = []
    facts: dict[str, Any] = {}
    for label, call in calls.items():
        for _ in range(200):
            call()
        trace = _trace(call)
        per_call, top = _profile(call, n)
        host = _host_us(call, n) if timed else None
        facts[label] = {"python_calls": trace.python, "c_calls": trace.c, "cupy_calls": trace.cupy,
                        "cprofile_calls_per_call": round(per_call, 1), "host_us_here": host}
        here = "" if host is None else f" Host time here: {host:.2f} µs per call (least of 7 loops of {n})."
        text += [f"\n## {label}\n",
                 f"One call: {trace.python} Python calls and {trace.c} C calls of ours, the user's and torch's, and "
                 f"{trace.cupy} of CuPy. cProfile over {n} calls: {per_call:.1f} function calls per call (CuPy's "
                 f"included).{here}\n",
                 "```", *trace.lines, "```", f"\nTop 20 by own time ({n} calls; host CPU time of this machine):\n",
                 "```", top.strip(), "```"]
    return text, facts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="the CUDA route on a fake CuPy, no GPU")
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--out", type=Path, default=None, help="a folder for profile_call.md and profile_call.json")
    args = ap.parse_args()
    add_repo_to_path()
    import torch

    torch.set_grad_enabled(False)
    head = [f"# Production call: where one call goes ({'fake CuPy, no GPU' if args.cpu else 'GPU'})", "",
            f"{now_utc()}, `{command_line()}`. Counts of Python and C calls, not time"
            + (": the kernels are a fake CuPy's (`pytest_ktune.testing.fake_cuda`), which record each launch."
               if args.cpu else ".")]
    if args.cpu:
        from pytest_ktune.testing import fake_cuda

        global FAKE
        FAKE = fake_cuda.__file__
        with fake_cuda.installed() as cp:
            text, facts = _run(_calls_cpu(cp), args.calls, timed=True)
    else:
        text, facts = _run(_calls_gpu(), args.calls, timed=False)
    out = "\n".join(head + text) + "\n"
    print(out)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "profile_call.md").write_text(out)
        (args.out / "profile_call.json").write_text(json.dumps({"command": command_line(), "date": now_utc(),
                                                                "cpu": args.cpu, "calls": facts}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
