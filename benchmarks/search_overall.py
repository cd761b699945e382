"""Rank every strategy over the landscapes of several ``ktune bench-search`` runs (one run per file, as
``bench_search_hub.sh`` makes them): the table ``bench-search.md`` ends with for one run, over all;
and per landscape, the default against the best other strategy.

    python benchmarks/search_overall.py RUN_DIR/*/bench-search.json [--rivals EARLIER_DIR] > overall.md

With ``--rivals``, the strategies a run did not repeat are taken from the earlier run of the same file
(``EARLIER_DIR/<the run's folder name>/bench-search.json``), and the table says which.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from pytest_ktune.lab.results import stats_of_json
from pytest_ktune.lab.strategies import OWN_STRATEGIES
from pytest_ktune.lab.tables import overall_table


def _with_rivals(land: dict[str, Any], earlier: dict[str, Any] | None, borrowed: set[str]) -> dict[str, Any]:
    if earlier is None:
        return land
    have = {s["strategy"] for s in land["strategies"]}
    extra = [s for s in earlier["strategies"] if s["strategy"] not in have and s["strategy"] not in OWN_STRATEGIES]
    borrowed.update(s["strategy"] for s in extra)
    return {**land, "strategies": [*land["strategies"], *extra]}


def _text(v: float | None, budget: int) -> str:
    return f"> {budget}" if v is None or math.isinf(v) else f"{v:g}"


def versus_rows(name: str, land: dict[str, Any]) -> str:
    """One landscape: the default's median trials to 3 % and fraction after 20 against the best other's."""
    budget = int(land["budget"])
    rows = {s["strategy"]: s for s in land["strategies"] if not s["skipped"]}
    mine = rows.get("ktune")
    rivals = [s for k, s in rows.items() if k not in OWN_STRATEGIES]
    if mine is None or not rivals:
        return ""

    def trials(s: dict[str, Any]) -> float:
        v = s.get("median_trials_to_3pct")
        return math.inf if v is None else float(v)

    best = min(rivals, key=trials)
    after = max(rivals, key=lambda s: s.get("of_optimum_after_20", 0.0))
    m, b = trials(mine), trials(best)
    ratio = "–" if math.isinf(b) else f"> {budget / b:.2f}" if math.isinf(m) else f"{m / b:.2f}"
    a20 = float(after.get("of_optimum_after_20", 0.0))
    return (f"| {name} | {_text(m, budget)} | {best['strategy']} ({_text(b, budget)}) | {ratio} | "
            f"{mine.get('of_optimum_after_20', 0.0):.3f} | {after['strategy']} ({a20:.3f}) |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="bench-search.json files")
    ap.add_argument("--rivals", type=Path, default=None, metavar="EARLIER_DIR",
                    help="take the strategies a run did not repeat from the earlier run of the same file")
    args = ap.parse_args()
    borrowed: set[str] = set()
    lands: list[tuple[str, dict[str, Any]]] = []
    for path in args.runs:
        earlier_path = args.rivals / path.parent.name / "bench-search.json" if args.rivals else None
        earlier = json.loads(earlier_path.read_text())["landscapes"] if earlier_path and earlier_path.exists() else []
        for i, land in enumerate(json.loads(path.read_text())["landscapes"]):
            lands.append((path.parent.name, _with_rivals(land, earlier[i] if i < len(earlier) else None, borrowed)))
    print(f"Landscapes: {', '.join(n for n, _ in lands)}.\n")
    if borrowed:
        print(f"From the earlier run of each file (not run again): {', '.join(sorted(borrowed))}.\n")
    print(overall_table([stats_of_json(land) for _, land in lands]))
    print("## The default against the best other, per landscape\n")
    print("| landscape | ktune: trials to 3 % | best other (its trials) | ktune ÷ best | ktune after 20 | "
          "best other after 20 |")
    print("|---|---:|---|---:|---:|---|")
    for name, land in lands:
        line = versus_rows(name, land)
        if line:
            print(line)


if __name__ == "__main__":
    main()
