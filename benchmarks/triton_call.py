"""The host cost of a Triton target's production call against a plain ``kernel[grid](...)`` call.

The example's Triton RMSNorm (``example_project/kernels/triton_rmsnorm.py``) on torch tensors: ``triton_rmsnorm(x,
w)`` (the recorded or default configuration, the dispatch cache, ``kernel.empty_like``) against the jit function
launched directly with the same configuration and an output from ``torch.empty_like``, the way a Triton user
calls it. Host seconds per call over a loop with one synchronisation at the end (``_common.interleaved``, the
order rotated each round); the goal: ours <= plain + 5 µs. Writes JSON (and a markdown table beside it).

Run: ``python3 benchmarks/triton_call.py --out DIR/triton_call.json`` on a GPU; ``TRITON_INTERPRET=1 python3
benchmarks/triton_call.py --quick --out DIR/c.json`` on a CPU (the interpreter runs the kernel inside the call,
so there the difference is the overhead among much noise).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common

common.add_repo_to_path()

GOAL_US = 5.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="a smoke test: few calls of a small shape")
    args = p.parse_args(argv)
    import torch

    from example_project.kernels import triton_rmsnorm as mod
    from pytest_ktune import backends

    backend = backends.create("triton")
    device = getattr(backend, "device_obj", None)  # torch's device of the triton backend
    shapes = [(4, 1024)] if args.quick else [(1, 4096), (64, 4096), (1024, 4096)]
    calls, repeats = (20, 2) if args.quick else (args.calls, args.repeats)
    sync = (lambda: None) if backend.device.interpreted else torch.cuda.synchronize
    rows: list[dict[str, Any]] = []
    for t, h in shapes:
        x = torch.randn(t, h, dtype=torch.float16, device=device)
        w = torch.rand(h, dtype=torch.float16, device=device)
        view = mod.triton_rmsnorm.for_backend("triton")
        mod.triton_rmsnorm(x, w)  # the first call: the plan, the entry, Triton's compile
        entry = next(iter(mod.triton_rmsnorm._plan._entries.values()))
        params = dict(entry.kernel.params)
        launch_kw = {k: v for k, v in params.items() if k in ("BLOCK_SIZE", "num_warps", "num_stages")}

        def plain(x: Any = x, w: Any = w, kw: dict[str, Any] = launch_kw) -> Any:
            y = torch.empty_like(x)
            mod._rmsnorm_kernel[(x.shape[0],)](x, w, y, x.shape[1], 1e-6, **kw)
            return y

        def ours(x: Any = x, w: Any = w) -> Any:
            return mod.triton_rmsnorm(x, w)

        torch.testing.assert_close(ours(), plain())
        samples = common.interleaved({"plain": plain, "ktune": ours}, repeats, calls, sync)
        host = {m: statistics.median(h for h, _ in v) for m, v in samples.items()}
        rows.append({"shape": [t, h], "params": params, "default": params == dict(view.default),
                     "plain_host_us": common.us(host["plain"]), "ktune_host_us": common.us(host["ktune"]),
                     "added_us": common.us(host["ktune"] - host["plain"]),
                     "samples_us": {m: [common.us(a) for a, _ in v] for m, v in samples.items()}})
    worst = max(r["added_us"] for r in rows)
    goal = f"{'PASS' if worst <= GOAL_US else 'MISS'}: the production call adds at most {worst:.2f} µs of host " \
           f"time to a plain kernel[grid](...) call (goal <= {GOAL_US:g} µs)"
    dev = backend.device
    data = {"benchmark": "triton_call", "date": common.now_utc(), "command": common.command_line(),
            "device": dev.name, "interpreted": dev.interpreted, "versions": common.versions(), "calls": calls,
            "repeats": repeats, "rows": rows, "goal": goal}
    table = common.md_table(["shape", "plain µs", "ktune µs", "added µs"],
                            [[f"{r['shape'][0]}x{r['shape'][1]}", common.fmt_num(r["plain_host_us"]),
                              common.fmt_num(r["ktune_host_us"]), common.fmt_num(r["added_us"])] for r in rows])
    note = "\n\nTriton's interpreter: the kernel runs inside each call, so these are no GPU's costs." \
        if dev.interpreted else ""
    md = common.write_results(args.out, data, f"# Triton production call, host time ({dev.name})\n\n{table}{note}"
                                              f"\n\n{goal}")
    print(table)
    print(goal)
    print(f"wrote {common.shown_path(args.out)} and {common.shown_path(md)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
