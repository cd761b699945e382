"""Summarise bench-search runs: per landscape, the default strategy against the best other, and the
fraction of the optimum each strategy reaches after 10 and 20 trials (the budgets a CI tune affords).

    python benchmarks/search_summary.py RUN.json [--rivals EARLIER.json] > summary.md

``RUN.json`` is a ``bench-search.json``. With ``--rivals`` (repeatable; a ``bench-search.json`` or a
folder of ``*/bench-search.json``, the first given first), the strategies of an earlier run of the same
landscapes that this run did not repeat are taken from it, matched by the file's path (by its name
only where one file has it: the hub's ``A100.json.gz`` is a dedispersion and a convolution file), and
marked. A run made with ``--no-priors`` says so on each landscape.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from search_overall import BOUND, Rivals, with_rivals

from pytest_ktune.lab.strategies import OWN_STRATEGIES as OWN


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


def _label(land: dict[str, Any]) -> str:
    if not land.get("file"):
        return str(land["key"])
    f = Path(land["file"])
    return f"{f.parent.name}/{f.name}" if f.parent.name.endswith("_milo") else f.name


def summarise(run: dict[str, Any], earlier: Rivals) -> str:
    lines = ["| landscape | configurations | ktune, trials to 3 % | best other | its trials | verdict | "
             "ktune: of the optimum after 10 trials | after 20 | best other after 10 | after 20 |",
             "|---|---:|---:|---|---:|---|---:|---:|---:|---:|"]
    total = oracle = 0.0
    tally = {"fewer": 0, "as many": 0, "MORE": 0}
    borrowed: set[str] = set()
    singles: dict[str, float] = {}
    over: list[str] = []
    for ran in run["landscapes"]:
        name = _label(ran) + (" (no priors)" if run.get("priors") is False else "")
        budget, optimum = int(ran["budget"]), float(ran["optimum_us"])
        land = with_rivals(ran, earlier.of(ran), borrowed)
        rows = {s["strategy"]: s for s in land["strategies"] if not s["skipped"]}
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
        if not math.isinf(b) and m > BOUND * b:
            over.append(f"{name} ({_text(m, budget)} against {best}'s {_text(b, budget)})")
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
                  f"more on {tally['MORE']}, of {sum(tally.values())}.",
              "", f"More than {BOUND:g}x the best other's trials on {len(over)}: {'; '.join(over) or 'none'}."]
    if borrowed:
        lines += ["", "Taken from the earlier run (not run again here): " + ", ".join(sorted(borrowed)) + "."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--rivals", type=Path, action="append", default=[], metavar="EARLIER",
                    help="an earlier bench-search.json of the same landscapes, or a folder of */bench-search.json "
                         "(repeat for several; the first given wins)")
    args = ap.parse_args()
    print(summarise(json.loads(args.run.read_text()), Rivals(args.rivals)), end="")


if __name__ == "__main__":
    main()
