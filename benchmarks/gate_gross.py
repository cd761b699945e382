"""How long the gate takes to fail a gross regression, and whether baselines of another machine mislead it.

A throwaway project (one OpenCL kernel whose busy-work loop sets its cost) is committed to a fresh git
repository with baselines recorded on this machine; their timings are then moved to another machine's
identity, as if another runner of the pool had recorded them. Each scenario changes the kernel's source
(the loop FACTOR times longer) and runs the gate RUNS times, against the baselines and with
``--ktune-base HEAD``: wall time, exit status, verdict, and how the A/B stopped. FACTOR 1 is the
control (an unchanged kernel must pass).

Usage: python3 benchmarks/gate_gross.py --backend opencl --runs 3 --factors 1 1.5 50 --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as common

SOURCE = """\
__kernel void busy(__global float* out, __global const float* x, int n) {
    const int i = get_global_id(0);
    if (i >= n) return;
    float t = x[i];
    for (int r = 0; r < LOOP; ++r) t = sin(t);
    out[i] = (t == 12345.0f) ? 0.0f : x[i];
}
"""

KERNELS = '''\
import numpy as np
import ktune


def launch(kernel, x):
    out = kernel.empty_like(x)
    n = x.shape[0]
    kernel.launch(grid=ktune.cdiv(n, 64), block=64, args=[out, x, np.int32(n)])
    return out


busy = ktune.target(
    name="busy", kernel="busy", sources={"opencl": "busy.cl"}, space=ktune.Space(B=[64]), default={"B": 64},
    key=lambda x: {"N": x.shape[0]}, cases=[ktune.Case(id="n16k", x=ktune.Tensor((16384,)))],
    reference=lambda x: x,
)(launch)
'''

LOOP = 40


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "KTUNE_PARAMS")}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)


def project() -> Path:
    """The committed project, its baselines recorded here and then handed to another machine's identity."""
    root = Path(tempfile.mkdtemp(prefix="ktune-gross-")) / "proj"
    root.mkdir()
    (root / "busy.cl").write_text(SOURCE.replace("LOOP", str(LOOP)))
    (root / "kernels.py").write_text(KERNELS)
    (root / "tox.ini").write_text("[pytest]\n")
    common.commit_project(root, "kernel")
    done = _run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--ktune", "--ktune-update-baseline", "-q"],
                root)
    assert done.returncode == 0, done.stdout + done.stderr
    params = root / "ktune-params.json"
    data = json.loads(params.read_text())
    for rec in data["records"]:
        machines = rec["baseline"]["machines"]
        rec["baseline"]["machines"] = {f"{m} | another runner": t for m, t in machines.items()}
    params.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    common.git(root, "add", "-A")
    common.git(root, "commit", "-qm", "baselines of another machine")
    return root


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="opencl")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--factors", type=float, nargs="+", default=[1.0, 1.5, 50.0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    root = project()
    results: list[dict[str, Any]] = []
    for factor in args.factors:
        (root / "busy.cl").write_text(SOURCE.replace("LOOP", str(round(LOOP * factor))))
        for against in ("baseline", "base"):
            extra = ["--ktune-base", "HEAD"] if against == "base" else []
            for i in range(args.runs):
                cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--ktune",
                       f"--ktune-backend={args.backend}", "-q", "-rf", *extra]
                t0 = time.perf_counter()
                done = _run(cmd, root)
                wall = time.perf_counter() - t0
                out = done.stdout + done.stderr
                row = next((line for line in out.splitlines() if line.startswith("busy ")), "")
                note = next((line for line in out.splitlines() if line.startswith("busy[n16k]: ")), "")
                results.append({"factor": factor, "against": against, "run": i, "returncode": done.returncode,
                                "wall_s": round(wall, 2), "row": row, "note": note})
                print(f"x{factor:g} against {against} run {i}: rc {done.returncode}, {wall:.1f} s | {row}", flush=True)
    (root / "busy.cl").write_text(SOURCE.replace("LOOP", str(LOOP)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": common.command_line(), "backend": args.backend, "loop": LOOP,
                                    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                    "runs": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
