"""Issue 26, step 4: why a tuned example kernel still trails the best alternative on a case, from Nsight
Compute's counters: the example's kernel (the production call, with the parameters recorded for this device),
Liger-Kernel's and torch.compile's, each profiled on the same inputs.

``run CASE IMPL`` is what ``ncu`` launches: it makes the case's inputs, warms the implementation up (outside the
profiled region: compiles, autotuning, the first launch), then calls it once inside an NVTX range named
``profile``, which ``ncu --nvtx --nvtx-include profile/`` profiles. It prints nothing, so ncu's CSV is all of
its standard output. ``table FILE...`` reads those CSVs (``ncu --csv --page details``, one file per case and
implementation, named ``CASE--IMPL.csv``) and writes one markdown table: the kernel, its duration, DRAM and SM
throughput, achieved and theoretical occupancy, registers, block and grid, and the two largest stall reasons
(cycles per issued instruction spent in each). ``list`` prints the cases and implementations.

Usage (on the H200):
  ncu --clock-control none --nvtx --nvtx-include profile/ --csv --page details SECTIONS \\
      python3 benchmarks/ncu_cases.py run rmsnorm-T1-H4096-float16 ours > DIR/rmsnorm-T1-H4096-float16--ours.csv
  python3 benchmarks/ncu_cases.py table DIR/*.csv --out DIR/ncu.md
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import _common as common

common.add_repo_to_path()

IMPLS = ("ours", "liger", "compile")

# The cases where the tuned kernel trails the best alternative (issue 26's tables of 2026-12-02): target,
# tokens, width (H, or I for the GLUs, whose input is [T, 2I]), dtype, and which alternatives to profile.
CASES: dict[str, tuple[str, int, int, str, tuple[str, ...]]] = {
    "rmsnorm-T1-H4096-float16": ("rmsnorm", 1, 4096, "float16", IMPLS),
    "rmsnorm-T64-H4096-float16": ("rmsnorm", 64, 4096, "float16", ("ours", "liger")),
    "rmsnorm-T16384-H8192-float16": ("rmsnorm", 16384, 8192, "float16", ("ours", "compile")),
    "fused_add_rmsnorm-T1-H4096-float16": ("fused_add_rmsnorm", 1, 4096, "float16", ("ours", "liger")),
    "silu_and_mul-T16-I14336-float16": ("silu_and_mul", 16, 14336, "float16", ("ours", "compile")),
    "silu_and_mul-T256-I14336-float32": ("silu_and_mul", 256, 14336, "float32", IMPLS),
    "gelu_tanh_and_mul-T4-I8192-float32": ("gelu_tanh_and_mul", 4, 8192, "float32", ("ours", "compile")),
    # Where the GLUs still trail after glu.cuh (session 16's bench, 2026-12-03): 0.93x of torch.compile.
    "silu_and_mul-T256-I14336-float16": ("silu_and_mul", 256, 14336, "float16", IMPLS),
}

# Stall reasons: ncu's per-issue averages of warps stalled for each reason (smsp__average_warps_issue_stalled_*).
STALLS = ("long_scoreboard", "short_scoreboard", "barrier", "membar", "wait", "not_selected", "math_pipe_throttle",
          "lg_throttle", "mio_throttle", "drain", "no_instruction", "imc_miss", "dispatch_stall", "branch_resolving",
          "sleeping", "selected", "tex_throttle")
STALL_METRICS = [f"smsp__average_warps_issue_stalled_{s}_per_issue_active.ratio" for s in STALLS]


def _args(torch: Any, target: str, t: int, width: int, dtype: str) -> dict[str, Any]:
    dt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape: int) -> Any:
        return torch.randn(*shape, generator=g, device="cuda", dtype=torch.float32).to(dt)

    if target == "rmsnorm":
        return {"x": rand(t, width), "w": rand(width).abs() + 0.5, "eps": 1e-6}
    if target == "fused_add_rmsnorm":
        return {"x": rand(t, width), "residual": rand(t, width), "w": rand(width).abs() + 0.5, "eps": 1e-6}
    return {"x": rand(t, 2 * width)}


def _impl(torch: Any, target: str, impl: str, args: dict[str, Any]) -> Callable[[], Any]:
    """A call of no arguments that runs ``impl`` of ``target`` on ``args`` once."""
    if impl == "ours":
        import importlib

        fn = getattr(importlib.import_module(f"example_project.kernels.{target}"), target)
        return lambda: fn(**args)
    if impl == "liger":
        import _liger

        ops, why = _liger.liger_ops()
        if target not in ops:
            raise SystemExit(f"Liger-Kernel has no {target} here: {why}")
        op = ops[target]
        prepared = op.prepare(args)
        return lambda: op.call(**prepared)
    import bench_kernels

    compiled = torch.compile(bench_kernels.torch_ops(torch)[target], dynamic=False)
    return lambda: compiled(**args)


def run_case(name: str, impl: str) -> None:
    import torch

    target, t, width, dtype, _ = CASES[name]
    call = _impl(torch, target, impl, _args(torch, target, t, width, dtype))
    for _ in range(5):  # compiles, autotunes, the dispatch cache's first call: all before the profiled launch
        call()
    torch.cuda.synchronize()
    nvtx: Any = torch.cuda.nvtx  # untyped in torch's stubs
    nvtx.range_push("profile")
    call()
    nvtx.range_pop()
    torch.cuda.synchronize()


# -- the table ---------------------------------------------------------------------------------------------

ROW = [("Duration", "duration"), ("DRAM Throughput", "DRAM %"), ("Compute (SM) Throughput", "SM %"),
       ("Achieved Occupancy", "achieved occ. %"), ("Theoretical Occupancy", "theor. occ. %"),
       ("Registers Per Thread", "regs"), ("Block Size", "block"), ("Grid Size", "grid"),
       ("Warp Cycles Per Issued Instruction", "cycles / issue")]


def read_csv(path: Path) -> list[dict[str, str]]:
    """The kernels of one ncu details CSV: for each, its name and every metric (name -> "value unit"); the
    lines that are not CSV (ncu's ==PROF== messages) are skipped."""
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.startswith('"')]
    kernels: dict[str, dict[str, str]] = {}
    for row in csv.DictReader(lines):
        kid = row.get("ID", "")
        k = kernels.setdefault(kid, {"kernel": row.get("Kernel Name", "?")})
        metric, value, unit = row.get("Metric Name", ""), row.get("Metric Value", ""), row.get("Metric Unit", "")
        if metric:
            k[metric] = f"{value} {unit}".strip() if unit and unit not in ("%", "register/thread") else value
    return list(kernels.values())


def _short(kernel: str, width: int = 48) -> str:
    name = re.sub(r"\(.*", "", kernel).strip()
    return name if len(name) <= width else name[:width - 1] + "…"


def _top_stalls(k: dict[str, str], n: int = 2) -> str:
    seen = []
    for stall, metric in zip(STALLS, STALL_METRICS, strict=True):
        try:
            seen.append((float(k[metric].split()[0].replace(",", "")), stall))
        except (KeyError, ValueError):
            continue
    seen.sort(reverse=True)
    return ", ".join(f"{s} {v:.1f}" for v, s in seen[:n]) or "-"


def table(paths: Sequence[Path]) -> str:
    head = ["case", "impl", "kernel", *[label for _, label in ROW], "top stalls (cycles / issue)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for path in sorted(paths):
        case, _, impl = path.stem.partition("--")
        kernels = read_csv(path)
        if not kernels:
            lines.append(f"| {case} | {impl} | (no kernel profiled: see the log) |" + " |" * (len(head) - 3))
        for k in kernels:
            lines.append("| " + " | ".join([case, impl, _short(k["kernel"]), *[k.get(m, "-") for m, _ in ROW],
                                            _top_stalls(k)]) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("case", choices=sorted(CASES))
    r.add_argument("impl", choices=IMPLS)
    t = sub.add_parser("table")
    t.add_argument("files", nargs="+", type=Path)
    t.add_argument("--out", type=Path)
    sub.add_parser("list")
    sub.add_parser("metrics")
    a = parser.parse_args(argv)
    if a.cmd == "run":
        run_case(a.case, a.impl)
    elif a.cmd == "list":
        for name, (*_, impls) in CASES.items():
            print(name, " ".join(impls))
    elif a.cmd == "metrics":
        print(",".join(STALL_METRICS))
    else:
        text = table(a.files)
        if a.out:
            a.out.write_text(text)
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
