"""One suite-wide summary from several ``bench_kernels.py`` runs: each target's rows from the last file
that holds it.

When a kernel changes after the full run, ``bench_kernels.py --targets`` times only the targets that
changed; this script then judges the issue's three goals on the whole suite without re-running the
rest. Every row stays as measured: default, tuned, torch eager and torch.compile side by side in one
run, and its share of the copy bandwidth measured in that same run. The summary names the run of
each target.

Usage: python benchmarks/combine_kernels.py FULL.json [LATER.json ...] [--out SUMMARY.md]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kernels import COLUMN_NAMES, GOAL_COPY_FRACTION, GOAL_SPEEDUP, GOAL_VS_BEST, LARGE_BYTES


def rows_by_target(runs: Sequence[Mapping[str, Any]]) -> dict[str, tuple[int, list[Mapping[str, Any]]]]:
    """target -> (index of the run its rows come from, its rows); a later run replaces an earlier one."""
    out: dict[str, tuple[int, list[Mapping[str, Any]]]] = {}
    for i, run in enumerate(runs):
        seen: dict[str, list[Mapping[str, Any]]] = {}
        for case in run["cases"]:
            seen.setdefault(case["target"], []).append(case)
        for target, cases in seen.items():
            out[target] = (i, cases)
    return out


def _geomean(values: Sequence[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def best_alternative(case: Mapping[str, Any]) -> tuple[str, float] | None:
    """The fastest of torch eager, torch.compile and Liger that its run timed in a CUDA graph, as it timed
    ours: its column and time over the tuned time; None where none was (runs before Liger's column have
    eager and torch.compile only)."""
    tuned = case["summary"].get("tuned_us")
    timed = [(col, t) for col in COLUMN_NAMES if (case.get(col) or {}).get("mode") == "graph"
             and (t := case["summary"].get(f"{col}_us"))]
    if not tuned or not timed:
        return None
    col, t = min(timed, key=lambda x: x[1])
    return col, t / tuned


def summary(runs: Sequence[Mapping[str, Any]], names: Sequence[str]) -> list[str]:
    """The goals, judged on the combined rows, as markdown lines."""
    picked = rows_by_target(runs)
    cases = [c for _, rows in picked.values() for c in rows]
    speedups = [s for c in cases if (s := c["summary"].get("speedup_tuned_vs_default"))]
    untuned = sum(1 for c in cases if c["summary"].get("speedup_tuned_vs_default")
                  and c["tuned_params"] == c["default_params"])
    large = [c for c in cases if (c.get("bytes_moved") or 0) >= LARGE_BYTES
             and c["summary"]["copy_bw_fraction"].get("tuned") is not None]
    below = [c for c in large if c["summary"]["copy_bw_fraction"]["tuned"] < GOAL_COPY_FRACTION]
    timed = [c for c in cases if c["summary"].get("compile_over_tuned")]
    compared = [c for c in timed if (c.get("compiled") or {}).get("mode") == "graph"]
    behind = [c for c in compared if c["summary"]["compile_over_tuned"] < 1.0]
    gm = _geomean(speedups)
    lines = ["| target | rows from |", "|---|---|"]
    lines += [f"| {t} | {names[i]} |" for t, (i, _) in picked.items()]
    lines += [""]
    if gm is not None:
        lines.append(f"- geomean tuned over default: **{gm:.2f}x** over {len(speedups)} cases (goal "
                     f"{GOAL_SPEEDUP}x: {'met' if gm >= GOAL_SPEEDUP else 'missed'}); {untuned} run the default "
                     "as their tuned parameters")
    if large:
        low = min(c["summary"]["copy_bw_fraction"]["tuned"] for c in large)
        lines.append(f"- large shapes (>= 256 MB moved) at >= 85 % of copy bandwidth: {len(large) - len(below)} "
                     f"of {len(large)} (lowest {low * 100:.0f} %)")
        lines += [f"  - {c['target']}[{c['case']}]: {c['summary']['copy_bw_fraction']['tuned'] * 100:.1f} %"
                  for c in below]
    lines.append(f"- tuned at or ahead of torch.compile: {len(compared) - len(behind)} of {len(compared)} "
                 f"compared ({len(timed) - len(compared)} more not compared: torch.compile ran outside a CUDA "
                 "graph there)")
    worst = sorted(behind, key=lambda c: c["summary"]["compile_over_tuned"])
    lines += [f"  - {c['target']}[{c['case']}]: {c['summary']['compile_over_tuned']:.2f}x" for c in worst]
    best = [(c, b) for c in cases if (b := best_alternative(c)) is not None]
    if best:
        gb = _geomean([r for _, (_, r) in best])
        assert gb is not None
        trailing = sorted(((c, b) for c, b in best if b[1] < 1.0), key=lambda x: x[1][1])
        met = gb >= GOAL_VS_BEST and not trailing
        lines.append("- tuned at or ahead of the best of torch eager, torch.compile and Liger: "
                     f"{len(best) - len(trailing)} of {len(best)}; geomean best alternative over tuned "
                     f"**{gb:.2f}x** (goal every case and {GOAL_VS_BEST:.2f}x: {'met' if met else 'missed'})")
        lines += [f"  - {c['target']}[{c['case']}]: {r:.2f}x ({COLUMN_NAMES[col]})" for c, (col, r) in trailing]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="bench_kernels JSON files, the full run first")
    ap.add_argument("--out", type=Path, default=None, help="write the summary here as well")
    args = ap.parse_args(argv)
    runs = [json.loads(p.read_text()) for p in args.runs]
    # Each run by its path as given where that is relative (several runs' files share a name), else its name.
    names = [f"`{p.name if p.is_absolute() else p.as_posix()}` ({r['date']}, "
             f"copy {r['copy_bandwidth_Bps'] / 1e9:,.0f} GB/s)"
             for p, r in zip(args.runs, runs, strict=True)]
    text = "\n".join(["# The example kernels, combined", "", *summary(runs, names), ""])
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
