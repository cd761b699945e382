"""Show the merge gate catching two real regressions on a GPU, in a scratch git repository.

1. A worse recorded configuration: the params file's entry for one key is
   edited to a slow configuration; its baseline stays. Exactly that case's
   performance item must fail, confirmed by same-run A/B against the
   baseline's parameters.
2. A slower source: the kernel source is edited (uncommitted) to repeat its
   reduction; the gate must fail its cases, confirmed by A/B against the
   baseline's source read from git.

Usage: python3 benchmarks/gate_demo.py [--backend cuda] [--workdir DIR]
Prints each pytest run and a verdict line; exits non-zero if the gate missed
a regression or failed an unchanged case.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SELECT = "rmsnorm and (T64- or T1024-)"
SLOW_KEY = {"H": 4096, "T": 64, "dtype": "float16"}
SLOW_PARAMS = {"BLOCK": 64, "VEC": 1}
# Per source language: the sum-of-squares loop to repeat 8 times, and the line that divides the sum by 8.
SLOWDOWN = {
    ".cu": ("    float ss = 0.f;\n    for (int i = threadIdx.x; i < nv; i += BLOCK) {",
            ("rsqrtf(block_sum<BLOCK>(ss) / H + eps)", "rsqrtf(block_sum<BLOCK>(ss) * 0.125f / H + eps)")),
    ".cl": ("    float ss = 0.f;\n    for (int i = lid; i < nv; i += BLOCK) {",
            ("rsqrt(partial[0] / H + eps)", "rsqrt(partial[0] * 0.125f / H + eps)")),
}


def sh(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    print("$", " ".join(cmd), flush=True)
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    print(out.stdout[-6000:], out.stderr[-2000:], sep="\n", flush=True)
    return out


def pytest(work: Path, backend: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return sh([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--ktune",
               f"--ktune-backend={backend}", str(work), "-k", SELECT, "-q", "-rf", *extra], ROOT)


def failed_ids(out: subprocess.CompletedProcess[str]) -> set[str]:
    return {line.split()[1].split("::")[-1] for line in out.stdout.splitlines() if line.startswith("FAILED")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args()
    work = (args.workdir or Path(tempfile.mkdtemp(prefix="ktune-gate-"))) / "project"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(ROOT / "example_project", work)
    git = ["git", "-c", "user.name=ktune demo", "-c", "user.email=demo@example.invalid"]
    sh(["git", "init", "-q"], work)
    sh([*git, "add", "-A"], work)
    sh([*git, "commit", "-qm", "sources"], work)
    ok = pytest(work, args.backend, "--ktune-update-baseline").returncode == 0
    sh([*git, "commit", "-qam", "baselines"], work)

    params_file = work / "ktune-params.json"
    data = json.loads(params_file.read_text())
    edited = [r for r in data["records"] if r["key"] == SLOW_KEY and r["device"].endswith(f"[{args.backend}]")
              and r["target"].endswith("::rmsnorm")]
    assert len(edited) == 1, edited
    edited[0]["params"] = SLOW_PARAMS
    params_file.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    run1 = pytest(work, args.backend)
    f1 = failed_ids(run1)
    want1 = {"perf[T64-H4096-float16]"}
    print(f"VERDICT worse configuration: failed {sorted(f1)}; expected {sorted(want1)}", flush=True)
    ok &= f1 == want1 and "A/B" in run1.stdout
    sh(["git", "checkout", "--", "ktune-params.json"], work)

    src = work / "kernels" / ("rmsnorm.cu" if args.backend == "cuda" else "rmsnorm.cl")
    text = src.read_text()
    loop, reduce_ = SLOWDOWN[src.suffix]
    repeated = loop.replace("    for (", "    for (int rep = 0; rep < 8; ++rep)\n    for (", 1)
    slow = text.replace(loop, repeated, 1)
    slow = slow.replace(reduce_[0], reduce_[1], 1)
    assert slow != text
    src.write_text(slow)
    run2 = pytest(work, args.backend)
    f2 = failed_ids(run2)
    perf2 = {f for f in f2 if f.startswith("perf[")}
    print(f"VERDICT slower source: failed {sorted(f2)}", flush=True)
    ok &= bool(perf2) and not any(f.startswith("correct[") for f in f2) and "source" in run2.stdout
    src.write_text(text)
    run3 = pytest(work, args.backend)
    print(f"VERDICT restored: failed {sorted(failed_ids(run3))}", flush=True)
    ok &= run3.returncode == 0
    print("GATE DEMO", "PASSED" if ok else "FAILED", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
