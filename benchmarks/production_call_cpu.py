"""The host cost of a production call on the CPU (PoCL), against pyopencl's own ``x * 2`` on the same arrays.

Three ways to compute ``x * 2`` on a PyOpenCL float32 array, side by side in one process:

- ``pyopencl x * 2``: pyopencl's elementwise kernel (it allocates its result and enqueues one kernel);
- ``ktune call``: ``scale(x)``, the target of ``benchmarks/production/scale.py``, whose parameters (SCALE=2)
  come from a params file written for this device (the default, SCALE=1, would give ``x``);
- ``raw launch``: the same compiled kernel through pyopencl alone: allocate the output, set the arguments,
  enqueue.

Each is called ``--calls`` times in a loop with one ``queue.finish()`` at the end; the host time per call is
the loop's time before that finish, divided by the calls (the wall time per call, finish included, is kept
too). ``--repeats`` rounds interleave the three, in a rotating order; the table gives medians and the
ratio ktune / ``x * 2`` (the goal: at most 1.3).

Usage: python3 benchmarks/production_call_cpu.py [--calls 2000] [--repeats 15] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, add_repo_to_path, command_line, interleaved, md_table, now_utc, versions, write_results

SIZES = (1000, 10_000, 100_000)
GOAL = 1.3


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=15)
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
    for n in SIZES:
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
        for fn in methods.values():  # warm up: compiles, caches
            for _ in range(50):
                fn()
        samples = interleaved(methods, args.repeats, args.calls, queue.finish)
        names = list(methods)
        host = {m: statistics.median(s[0] for s in v) for m, v in samples.items()}
        wall = {m: statistics.median(s[1] for s in v) for m, v in samples.items()}
        paired = statistics.median(k[0] / b[0] for k, b in zip(samples["ktune call"], samples["pyopencl x * 2"],
                                                                 strict=True))
        rows.append({"n": n, "host_us": {m: v * 1e6 for m, v in host.items()},
                     "wall_us": {m: v * 1e6 for m, v in wall.items()},
                     "ratio_ktune_over_x2": host["ktune call"] / host["pyopencl x * 2"],
                     "paired_ratio_median": paired,
                     "raw_us": {m: [[a * 1e6, b * 1e6] for a, b in v] for m, v in samples.items()}})
        print(f"n={n}: " + ", ".join(f"{m} {host[m] * 1e6:.2f} µs" for m in names)
              + f"; ktune / x*2 = {rows[-1]['ratio_ktune_over_x2']:.2f}", flush=True)

    date = now_utc()
    out = args.out or RESULTS / f"cpu-{date[:10]}"
    facts = {"date": date, "command": command_line(), "machine": {"cpu": _cpu_model(), "cores": os.cpu_count(),
             "device": backend.device.id, "opencl": backend.device.arch}, "versions": versions(),
             "calls": args.calls, "repeats": args.repeats, "goal": f"ktune call / x * 2 <= {GOAL}", "rows": rows}
    table = md_table(["n (float32)", "pyopencl x * 2 (µs)", "ktune call (µs)", "raw launch (µs)",
                      "ktune / x * 2", "paired ratio", f"≤ {GOAL}?"],
                     [[f"{r['n']:,}", *(f"{r['host_us'][m]:.2f}" for m in ("pyopencl x * 2", "ktune call",
                                                                            "raw launch")),
                       f"{r['ratio_ktune_over_x2']:.2f}", f"{r['paired_ratio_median']:.2f}",
                       "yes" if r["ratio_ktune_over_x2"] <= GOAL else "no"] for r in rows])
    text = (f"# Production call on the CPU (PoCL)\n\n{date}, `{facts['command']}`\n\n"
            f"{facts['machine']['cpu']}, {facts['machine']['cores']} cores; {backend.device.id}\n\n"
            f"Host time per call: a loop of {args.calls} calls, one queue.finish() at the end, median of "
            f"{args.repeats} interleaved rounds.\n\n{table}\n")
    write_results(out / "production_call_cpu.json", facts, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
