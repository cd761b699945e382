"""Which barrier mistakes compute-sanitizer's synccheck reports on this GPU (issue 31's control).

Each variant is the scale-add kernel (out = 2x + y) with one synchronisation mistake whose result is
still right; each runs under ``compute-sanitizer --tool synccheck`` in a process of its own (block 64,
n 4096), and the script prints, per variant, whether the tool reported an error and its first finding.
On Volta and later a ``__syncthreads()`` that some warps skip is not reported when those warps exit
(exited threads count as arrived), so the agent's synccheck control must be a mistake this GPU flags.

Usage: python3 benchmarks/synccheck_controls.py [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

HEAD = 'extern "C" __global__ void k(float* out, const float* x, const float* y, int n) {\n' \
       '    const int i = blockIdx.x * blockDim.x + threadIdx.x;\n    const int lane = threadIdx.x & 31;\n'
TAIL = "    if (i < n) out[i] = 2.0f * x[i] + y[i] + 0.0f * v;\n}\n"
VARIANTS = {
    "clean": "    float v = 0.0f;\n",
    "syncthreads_first_warp": "    float v = 0.0f;\n    if (threadIdx.x < 32) __syncthreads();\n",
    "syncthreads_two_sites": "    float v = 0.0f;\n    if (threadIdx.x < 32) __syncthreads(); else __syncthreads();\n",
    "syncwarp_self_not_in_mask": "    float v = 0.0f;\n    __syncwarp(0xfffffffeu);\n",
    "syncwarp_half_the_warp": "    float v = 0.0f;\n    if (lane < 16) __syncwarp();\n",
    "shfl_half_the_warp": "    float v = i < n ? x[i] : 0.0f;\n"
                          "    if (lane < 16) v += __shfl_down_sync(0xffffffffu, v, 16);\n",
    "shfl_self_not_in_mask": "    float v = i < n ? x[i] : 0.0f;\n    v += __shfl_down_sync(0x0000ffffu, v, 1);\n",
}


def one(name: str) -> int:
    import cupy as cp
    import numpy as np

    kernel = cp.RawKernel(HEAD + VARIANTS[name] + TAIL, "k")
    n = 4096
    x = cp.arange(n, dtype=cp.float32)
    y = cp.ones(n, dtype=cp.float32)
    out = cp.empty_like(x)
    kernel(((n + 63) // 64,), (64,), (out, x, y, np.int32(n)))
    cp.cuda.Device().synchronize()
    ok = bool(cp.allclose(out, 2 * x + y))
    print(f"result {'right' if ok else 'WRONG'}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", choices=sorted(VARIANTS))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.one:
        return one(args.one)
    tool = shutil.which("compute-sanitizer")
    if tool is None:
        print("compute-sanitizer is not on PATH", file=sys.stderr)
        return 2
    done = subprocess.run([tool, "--version"], check=False, capture_output=True, text=True)
    version = done.stdout.strip().splitlines()[-1]
    rows = []
    for name in VARIANTS:
        proc = subprocess.run([tool, "--tool", "synccheck", "--error-exitcode", "9", sys.executable, __file__,
                               "--one", name], check=False, capture_output=True, text=True, timeout=300)
        text = proc.stdout + proc.stderr
        findings = [ln.strip() for ln in text.splitlines() if re.search(r"error|Barrier|Invalid", ln, re.I)
                    and "ERROR SUMMARY" not in ln]
        summary = next((ln.strip() for ln in text.splitlines() if "ERROR SUMMARY" in ln), "")
        result = next((ln.strip() for ln in text.splitlines() if ln.startswith("result")), "no result")
        first = findings[0] if findings else ""
        rows.append({"variant": name, "exit": proc.returncode, "summary": summary, "result": result,
                     "first_finding": first})
        print(f"{name:28s} exit {proc.returncode:2d}  {summary:40s} {result:14s} {first[:90]}", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"tool": version, "variants": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
