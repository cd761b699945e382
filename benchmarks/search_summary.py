"""Summarise bench-search runs: per landscape, the default strategy against the best other, and the
fraction of the optimum each strategy reaches after 10 and 20 trials (the budgets a CI tune affords).

    python benchmarks/search_summary.py RUN.json [--rivals EARLIER.json] > summary.md

``RUN.json`` is a ``bench-search.json``. With ``--rivals``, the strategies of an earlier run of the
same landscapes that this run did not repeat are taken from it (matched by file name), and marked.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

OWN = ("ktune", "ktune:tpe", "bo")


def _median(row: dict[str, Any], budget: int) -> float:
    v = row.get("median_trials_to_3pct")
    return math.inf if v is None else float(v)


def _after(row: dict[str, Any], optimum: float, trials: int) -> float:
    curve = row.get("median_best_so_far_us") or []
    if not curve:
        return 0.0
    best = curve[min(trials, len(curve)) - 1]
    return optimum / best if best and math.isfinite(best) else 0.0


def _text(v: float, budget: int) -> str:
    return f"> {budget}" if math.isinf(v) else f"{v:g}"


def summarise(run: dict[str, Any], earlier: dict[str, Any] | None) -> str:
    old = {Path(x["file"]).name: x for x in (earlier or {}).get("landscapes", []) if x.get("file")}
    lines = ["| landscape | configurations | ktune, trials to 3 % | best other | its trials | verdict | "
             "ktune: of the optimum after 10 trials | after 20 | best other after 10 | after 20 |",
             "|---|---:|---:|---|---:|---|---:|---:|---:|---:|"]
    total = oracle = 0.0
    tally = {"fewer": 0, "as many": 0, "MORE": 0}
    borrowed: set[str] = set()
    singles: dict[str, float] = {}
    for land in run["landscapes"]:
        name = Path(land["file"]).name if land.get("file") else str(land["key"])
        budget, optimum = int(land["budget"]), float(land["optimum_us"])
        rows = {s["strategy"]: s for s in land["strategies"] if not s["skipped"]}
        for s in old.get(name, {}).get("strategies", []):
            if s["strategy"] not in rows and s["strategy"] not in OWN and not s["skipped"]:
                rows[s["strategy"]] = s
                borrowed.add(s["strategy"])
        mine = rows.get("ktune")
        rivals = {k: v for k, v in rows.items() if k not in OWN}
        if mine is None or not rivals:
            continue
        m = _median(mine, budget)
        best = min(rivals, key=lambda k: _median(rivals[k], budget))
        b = _median(rivals[best], budget)
        for k, v in rivals.items():
            singles[k] = singles.get(k, 0.0) + min(_median(v, budget), budget + 1)
        verdict = "fewer" if m < b else "as many" if m == b else "MORE"
        tally[verdict] += 1
        total += min(m, budget + 1)
        oracle += min(b, budget + 1)
        lines.append(f"| {name} | {land['configurations']} | {_text(m, budget)} | {best} | {_text(b, budget)} | "
                     f"{verdict} | {_after(mine, optimum, 10):.3f} | {_after(mine, optimum, 20):.3f} | "
                     f"{_after(rivals[best], optimum, 10):.3f} | {_after(rivals[best], optimum, 20):.3f} |")
    single = min(singles.items(), key=lambda kv: kv[1]) if singles else ("none", math.nan)
    lines += ["", f"ktune's medians summed: {total:g}; the best other on each landscape, summed: {oracle:g}; "
                  f"the best single other strategy: {single[0]}, {single[1]:g} (a landscape not reached counts as "
                  "the budget + 1). ktune needs fewer on " + f"{tally['fewer']}, as many on {tally['as many']}, "
                  f"more on {tally['MORE']}, of {sum(tally.values())}."]
    if borrowed:
        lines += ["", "Taken from the earlier run (not run again here): " + ", ".join(sorted(borrowed)) + "."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--rivals", type=Path, default=None, help="an earlier bench-search.json of the same landscapes")
    args = ap.parse_args()
    earlier = json.loads(args.rivals.read_text()) if args.rivals else None
    print(summarise(json.loads(args.run.read_text()), earlier), end="")


if __name__ == "__main__":
    main()
