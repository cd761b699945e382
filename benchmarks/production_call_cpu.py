"""The host cost of a production call on the CPU (PoCL), against pyopencl's own ``x * 2`` on the same arrays.

Three ways to compute ``x * 2`` on a PyOpenCL float32 array, side by side in one process:

- ``pyopencl x * 2``: pyopencl's elementwise kernel (it allocates its result and enqueues one kernel);
- ``ktune call``: ``scale(x)``, the target of ``benchmarks/production/scale.py``, whose parameters (SCALE=2)
  come from a params file written for this device (the default, SCALE=1, would give ``x``);
- ``raw launch``: the same compiled kernel through pyopencl alone: allocate the output, set the arguments,
  enqueue.

and a real target: the example's ``rmsnorm(x, w)`` (its key and defines functions, its scalar ``eps``) on a
1 x 64 float32 array, against ``x * 2`` on the same array.

Each is called ``--calls`` times in a loop with one ``queue.finish()`` at the end; the host time per call is
the loop's time before that finish, divided by the calls (the wall time per call, finish included, is kept
too, and is what the ratio is taken of: the finish is part of the work). ``--repeats`` rounds interleave the
methods, in a rotating order; the table gives medians and the ratio ktune / ``x * 2`` (the goal, issue 32:
at most 1.1). The machine's load average is recorded with the results, since a shared host skews both.
``--profile N`` adds a cProfile of N calls of each ktune call: Python function calls per production call.

Usage: python3 benchmarks/production_call_cpu.py [--calls 2000] [--repeats 15] [--profile 2000] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    RESULTS,
    add_repo_to_path,
    command_line,
    cpu_model,
    interleaved,
    md_table,
    now_utc,
    profiled,
    versions,
    write_results,
)

SIZES = (1000, 10_000, 100_000)
GOAL = 1.1


def _profile(call: Callable[[], Any], calls: int) -> dict[str, Any]:
    """Python function calls per production call, from a cProfile of ``calls`` calls, and the top functions."""
    stats, per_call = profiled(call, calls)
    top = sorted(stats.stats.items(), key=lambda kv: -kv[1][1])[:12]  # type: ignore[attr-defined]
    return {"calls_per_call": per_call,
            "top": [f"{fn[0].rsplit('/', 1)[-1]}:{fn[1]}({fn[2]}) x{v[1] / calls:g}" for fn, v in top]}


def _measure(label: str, methods: dict[str, Callable[[], Any]], args: argparse.Namespace, finish: Callable[[], None],
             ktune_name: str) -> dict[str, Any]:
    for fn in methods.values():  # warm up: compiles, caches
        for _ in range(50):
            fn()
    samples = interleaved(methods, args.repeats, args.calls, finish)
    host = {m: statistics.median(s[0] for s in v) for m, v in samples.items()}
    wall = {m: statistics.median(s[1] for s in v) for m, v in samples.items()}
    paired = statistics.median(k[1] / b[1] for k, b in zip(samples[ktune_name], samples["pyopencl x * 2"],
                                                             strict=True))
    row: dict[str, Any] = {"case": label, "host_us": {m: v * 1e6 for m, v in host.items()},
                           "wall_us": {m: v * 1e6 for m, v in wall.items()},
                           "ratio_ktune_over_x2": wall[ktune_name] / wall["pyopencl x * 2"],
                           "paired_ratio_median": paired, "load_average": list(os.getloadavg()),
                           "raw_us": {m: [[a * 1e6, b * 1e6] for a, b in v] for m, v in samples.items()}}
    if args.profile:
        row["profile"] = _profile(methods[ktune_name], args.profile)
    print(f"{label}: " + ", ".join(f"{m} {wall[m] * 1e6:.2f} µs" for m in methods)
          + f"; ktune / x*2 = {row['ratio_ktune_over_x2']:.2f} (paired {paired:.2f}), load "
          + " ".join(f"{v:.2f}" for v in os.getloadavg())
          + (f"; {row['profile']['calls_per_call']:.1f} Python calls per call" if args.profile else ""), flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--profile", type=int, default=0, help="cProfile this many calls of each ktune call")
    ap.add_argument("--only", choices=("scale", "rmsnorm"), default=None, help="one of the two targets")
    ap.add_argument("--out", type=Path, default=None, help="a folder (default: benchmarks/results/cpu-<date>)")
    args = ap.parse_args()
    add_repo_to_path()
    import numpy as np
    import pyopencl as cl
    import pyopencl.array as cla

    from pytest_ktune.backends.opencl import OpenCLBackend

    backend = OpenCLBackend()
    queue = backend.queue
    from production.scale import scale  # benchmarks/production: on sys.path above

    params = Path(tempfile.mkdtemp()) / "ktune-params.json"
    # The launch shape pyopencl's elementwise kernels take on this device (pyopencl.array._splay), so that
    # both do the same work on the device, which shares the CPU with the host thread being timed.
    shapes = {n: cla._splay(queue.device, n) for n in SIZES}
    records = [{"target": "scale.py::scale", "device": backend.device.id, "key": {"N": int(2 ** (n - 1).bit_length())},
                "params": {"SCALE": 2, "BLOCK": shapes[n][1][0], "GROUPS": shapes[n][0][0] // shapes[n][1][0]}}
               for n in SIZES]
    params.write_text(json.dumps({"format": "pytest-ktune/1", "records": records}))
    os.environ["KTUNE_PARAMS"] = str(params)

    rows: list[dict[str, Any]] = []
    for n in SIZES if args.only != "rmsnorm" else ():
        x = cla.to_device(queue, np.arange(n, dtype=np.float32))
        got = scale(x).get()
        if not np.array_equal(got, np.arange(n, dtype=np.float32) * 2):
            raise SystemExit(f"the ktune call did not compute x * 2 at n={n}: is the params file read?")
        program = cl.Program(backend.context, (Path(__file__).parent / "production" / "scale.cl").read_text())
        knl = cl.Kernel(program.build(options=["-DSCALE=2"]), "scale")
        gsize, lsize = shapes[n]
        n32 = np.int32(n)

        def raw(x: Any = x, knl: Any = knl, gsize: Any = gsize, lsize: Any = lsize, n32: Any = n32) -> None:
            out = cla.empty(queue, x.shape, x.dtype)
            knl.set_args(out.data, x.data, n32)
            cl.enqueue_nd_range_kernel(queue, knl, gsize, lsize)

        def twice(x: Any = x) -> Any:
            return x * 2

        def call(x: Any = x) -> Any:
            return scale(x)

        methods: dict[str, Callable[[], Any]] = {"pyopencl x * 2": twice, "ktune call": call, "raw launch": raw}
        rows.append({"n": n, **_measure(f"scale n={n:,}", methods, args, queue.finish, "ktune call")})
    if args.only != "scale":
        rows.append(_rmsnorm_row(args, backend, queue))

    date = now_utc()
    out = args.out or RESULTS / f"cpu-{date[:10]}"
    facts = {"date": date, "command": command_line(), "machine": {"cpu": cpu_model(), "cores": os.cpu_count(),
             "device": backend.device.id, "opencl": backend.device.arch}, "versions": versions(),
             "calls": args.calls, "repeats": args.repeats, "goal": f"ktune call / x * 2 <= {GOAL}", "rows": rows}
    table = md_table(["case (float32)", "pyopencl x * 2 (µs)", "ktune call (µs)", "raw launch (µs)",
                      "ktune / x * 2", "paired ratio", f"≤ {GOAL}?", "load average", "Python calls per call"],
                     [[r["case"], *(f"{r['wall_us'][m]:.2f}" if m in r["wall_us"] else "–"
                                    for m in ("pyopencl x * 2", "ktune call", "raw launch")),
                       f"{r['ratio_ktune_over_x2']:.2f}", f"{r['paired_ratio_median']:.2f}",
                       "yes" if r["ratio_ktune_over_x2"] <= GOAL else "no",
                       " ".join(f"{v:.2f}" for v in r["load_average"]),
                       f"{r['profile']['calls_per_call']:.1f}" if "profile" in r else "–"] for r in rows])
    text = (f"# Production call on the CPU (PoCL)\n\n{date}, `{facts['command']}`\n\n"
            f"{facts['machine']['cpu']}, {facts['machine']['cores']} cores; {backend.device.id}\n\n"
            f"Wall time per call: a loop of {args.calls} calls, one queue.finish() at the end counted, median of "
            f"{args.repeats} interleaved rounds.\n\n{table}\n")
    write_results(out / "production_call_cpu.json", facts, text)
    print(text)
    return 0


def _rmsnorm_row(args: argparse.Namespace, backend: Any, queue: Any) -> dict[str, Any]:
    """The example's rmsnorm (a real target: key and defines functions, a scalar argument) on 1 x 64 float32."""
    import numpy as np
    import pyopencl.array as cla

    from example_project.kernels.rmsnorm import rmsnorm

    rng = np.random.default_rng(0)
    xh = rng.standard_normal((1, 64)).astype(np.float32)
    wh = (rng.random(64) + 0.5).astype(np.float32)
    x, w = cla.to_device(queue, xh), cla.to_device(queue, wh)
    want = xh / np.sqrt((xh.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6) * wh
    if not np.allclose(rmsnorm(x, w).get(), want, rtol=1e-4, atol=1e-5):
        raise SystemExit("the ktune rmsnorm call does not compute RMSNorm")

    def twice() -> Any:
        return x * 2

    def call() -> Any:
        return rmsnorm(x, w)

    return _measure("rmsnorm 1 x 64", {"pyopencl x * 2": twice, "ktune call": call}, args, queue.finish, "ktune call")


if __name__ == "__main__":
    raise SystemExit(main())
