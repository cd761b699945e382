"""Where the host time of a production call goes: cProfile of ``--calls`` calls of the example's rmsnorm
(T=16, H=4096, fp16) on CuPy arrays and on torch tensors, after a warm-up: Python function calls per production
call, and the top functions by own time.

Usage: python3 benchmarks/profile_call.py [--calls 5000] [--out FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import add_repo_to_path, command_line, now_utc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    add_repo_to_path()
    import cupy as cp
    import torch

    from example_project.kernels.rmsnorm import rmsnorm

    xt = torch.randn((16, 4096), device="cuda", dtype=torch.float16)
    wt = torch.rand((4096,), device="cuda", dtype=torch.float16) + 0.5
    xc, wc = cp.asarray(xt), cp.asarray(wt)
    text = [f"# {now_utc()} `{command_line()}`"]
    calls: list[tuple[str, Callable[[], Any]]] = [("CuPy arrays", lambda: rmsnorm(xc, wc)),
                                                  ("torch tensors", lambda: rmsnorm(xt, wt))]
    for label, call in calls:
        for _ in range(200):
            call()
        cp.cuda.Device().synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.calls):
            call()
        prof.disable()
        cp.cuda.Device().synchronize()
        buf = io.StringIO()
        stats = pstats.Stats(prof, stream=buf)
        per_call = stats.total_calls / args.calls  # type: ignore[attr-defined]
        stats.sort_stats("tottime").print_stats(30)
        text += [f"\n## {label}: {args.calls} calls, {per_call:.1f} Python function calls per call; top 30 by own "
                 "time\n", buf.getvalue()]
    out = "\n".join(text)
    print(out)
    if args.out is not None:
        args.out.write_text(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
