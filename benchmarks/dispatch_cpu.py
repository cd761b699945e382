"""The production call's dispatch and the torch route's views, timed on the CPU without a GPU.

- ``dispatch``: ``rmsnorm(x, w)`` of the example on 1 x 64 float32 PyOpenCL arrays (PoCL) with the target's
  function replaced, after the first calls, by one that does nothing: what is left is the call layer's own
  work for a call like the last one (the params file's follow-up, the signature, the entry), minus the empty
  function called directly;
- ``dispatch, two signatures``: calls alternating between two shapes (each a miss of the last-signature
  compare where the layer has one, found by the lookup), per call;
- ``torch views``: the torch CUDA route's views of ``(x, w)`` (``TorchCudaRoute.view_args``), made here of CPU
  tensors by a route whose current device is given (the views read the tensors' dtypes, shapes and pointers,
  which a CPU tensor has as a CUDA one does).

Medians of ``--repeats`` rounds of ``--calls`` calls, interleaved. Run it on two commits to compare them.

Usage: python3 benchmarks/dispatch_cpu.py [--calls 20000] [--repeats 9] [--out DIR]
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, add_repo_to_path, command_line, cpu_model, md_table, now_utc, versions, write_results


def _views(plan: Any) -> Callable[[], Any]:
    import torch

    from pytest_ktune.call.torchio import TorchCudaRoute, layout

    route: Any = object.__new__(TorchCudaRoute)  # no CUDA here: the parts view_args reads, given
    route.ordinal = 0
    route._current = lambda: 0
    route._pointer = np.uint64
    x = torch.randn(16, 4096, dtype=torch.float16)
    w = torch.randn(4096, dtype=torch.float16)
    args = (x, w)
    sig = (2, type(x), layout(x), type(w), layout(w))
    if len(inspect.signature(route.view_args).parameters) == 3:  # since the views take the signature
        return lambda: route.view_args(plan, args, sig)
    return lambda: route.view_args(plan, args)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    add_repo_to_path()
    import pyopencl as cl
    import pyopencl.array as cla

    from example_project.kernels.rmsnorm import rmsnorm

    ctx = cl.create_some_context(interactive=False)
    q = cl.CommandQueue(ctx)
    rng = np.random.default_rng(0)
    x = cla.to_device(q, rng.random((1, 64), dtype=np.float32))
    x2 = cla.to_device(q, rng.random((2, 64), dtype=np.float32))
    w = cla.to_device(q, np.ones(64, np.float32))
    for _ in range(3):
        rmsnorm(x, w)
        rmsnorm(x2, w)
    q.finish()
    plan = rmsnorm._plan

    def nothing(kernel: Any, *a: Any) -> None:
        return None

    plan.fn = nothing  # the call layer's work alone from here on
    pair = [x, x2]

    def alternating() -> None:
        rmsnorm(pair[0], w)
        rmsnorm(pair[1], w)

    methods: dict[str, tuple[Callable[[], Any], int]] = {
        "empty function, called directly": (lambda: nothing(None, x, w), 1),
        "dispatch": (lambda: rmsnorm(x, w), 1),
        "dispatch, two signatures": (alternating, 2),
        "torch views": (_views(plan), 1),
    }
    samples: dict[str, list[float]] = {m: [] for m in methods}
    names = list(methods)
    for r in range(args.repeats):
        for m in names[r % len(names):] + names[:r % len(names)]:
            fn, per = methods[m]
            t0 = time.perf_counter()
            for _ in range(args.calls):
                fn()
            samples[m].append((time.perf_counter() - t0) / (args.calls * per) * 1e9)
    ns = {m: statistics.median(v) for m, v in samples.items()}
    base = ns["empty function, called directly"]
    date = now_utc()
    rows = [[m, f"{v:.0f}", f"{v - base:.0f}" if m.startswith("dispatch") else "",
             f"{min(samples[m]):.0f}-{max(samples[m]):.0f}"] for m, v in ns.items()]
    table = md_table(["row", "ns per call", "minus the empty function", "rounds' range"], rows)
    md = (f"# The dispatch and the torch views on the CPU\n\n{date}, `{command_line()}`, {cpu_model()}\n\n"
          f"Median of {args.repeats} interleaved rounds of {args.calls} calls.\n\n{table}\n")
    out = args.out or RESULTS / f"cpu-{date[:10]}-dispatch"
    write_results(out / "dispatch_cpu.json", {"date": date, "command": command_line(), "cpu": cpu_model(),
                                               "versions": versions(), "ns": ns, "samples_ns": samples}, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
