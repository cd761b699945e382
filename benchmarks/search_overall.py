"""Rank every strategy over the landscapes of several ``ktune bench-search`` runs (one run per file, as
``bench_search_hub.sh`` makes them, or one run of many files): the table ``bench-search.md`` ends with
for one run, over all; the default's rank; and per landscape, the default against the best other.

    python benchmarks/search_overall.py RUN_DIR/*/bench-search.json [--rivals EARLIER ...] > overall.md

A landscape is named after its run's folder where the run holds one landscape (``<kernel>-<GPU>``, as
the hub script names them), else after its file; a run made with ``--no-priors`` adds "(no priors)", so
that the same landscape with and without its priors counts twice, as two landscapes. ``--rivals`` (a
``bench-search.json``, or a folder of ``*/bench-search.json``; several, the first given first): the
strategies a run did not repeat are taken from an earlier run of the same file (matched by the file's
path, or its name where that is unique), and the table says which. The default's own parts (``ktune``,
``ktune:tpe``, ``bo``) are never taken: they are what a run is made to measure.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_ktune.lab.results import rank, stats_of_json
from pytest_ktune.lab.strategies import OWN_STRATEGIES
from pytest_ktune.lab.tables import overall_table

BOUND = 1.5  # the goal: on no landscape more than this times the best other strategy's trials


def _runs_in(path: Path) -> list[Path]:
    return [path] if path.is_file() else sorted([*path.glob("bench-search.json"), *path.glob("*/bench-search.json")])


class Rivals:
    """The landscapes of earlier runs, by file path, and by file name where only one file has it; a file
    run more than once has each of those runs, in the order given."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self.by_file: dict[str, list[dict[str, Any]]] = {}
        for path in paths:
            for run in _runs_in(path):
                for land in json.loads(run.read_text())["landscapes"]:
                    if land.get("file"):
                        self.by_file.setdefault(str(land["file"]), []).append(land)
        self.by_name: dict[str, list[str]] = {}
        for f in self.by_file:
            self.by_name.setdefault(Path(f).name, []).append(f)

    def of(self, land: dict[str, Any]) -> list[dict[str, Any]]:
        f = str(land.get("file") or "")
        if f in self.by_file:
            return self.by_file[f]
        named = self.by_name.get(Path(f).name, [])
        return self.by_file[named[0]] if len(named) == 1 else []


def with_rivals(land: dict[str, Any], earlier: Sequence[dict[str, Any]], borrowed: set[str]) -> dict[str, Any]:
    """``land`` with the strategies it lacks taken from ``earlier`` (runs of the same file before; the
    first that has a strategy gives it), the default's own parts aside."""
    rows = list(land["strategies"])
    have = {s["strategy"] for s in rows}
    for before in earlier:
        for s in before["strategies"]:
            if s["strategy"] not in have and s["strategy"] not in OWN_STRATEGIES:
                rows.append(s)
                have.add(s["strategy"])
                borrowed.add(s["strategy"])
    return {**land, "strategies": rows}


def landscape_name(run: Path, data: dict[str, Any], land: dict[str, Any]) -> str:
    if len(data["landscapes"]) == 1:
        name = run.parent.name
    else:
        f = str(land.get("file") or "")
        name = Path(f).name.removesuffix(".gz").removesuffix(".json") if f else str(land.get("key"))
    return name + (" (no priors)" if data.get("priors") is False else "")


def _text(v: float | None, budget: int) -> str:
    return f"> {budget}" if v is None or math.isinf(v) else f"{v:g}"


def _trials(s: dict[str, Any]) -> float:
    v = s.get("median_trials_to_3pct")
    return math.inf if v is None else float(v)


def versus(land: dict[str, Any], repeatable_only: bool = False) -> tuple[float, dict[str, Any], float] | None:
    """The default's median trials to 3 %, the best other strategy's row, and the ratio (inf: the
    default missed where the best got there; nan: neither got there). ``repeatable_only``: against
    the strategies that repeat themselves under a seed (leaving out those marked not repeatable)."""
    rows = {s["strategy"]: s for s in land["strategies"] if not s["skipped"]}
    mine = rows.get("ktune")
    rivals = [s for k, s in rows.items() if k not in OWN_STRATEGIES
              and not (repeatable_only and s.get("repeatable") is False)]
    if mine is None or not rivals:
        return None
    best = min(rivals, key=_trials)
    m, b = _trials(mine), _trials(best)
    ratio = math.nan if math.isinf(b) else math.inf if math.isinf(m) else m / b
    return m, best, ratio


def versus_row(name: str, land: dict[str, Any]) -> str:
    """One landscape: the default's median trials to 3 % and fraction after 20 against the best other's."""
    got = versus(land)
    if got is None:
        return ""
    m, best, ratio = got
    budget = int(land["budget"])
    rows = {s["strategy"]: s for s in land["strategies"] if not s["skipped"]}
    rivals = [s for k, s in rows.items() if k not in OWN_STRATEGIES]
    after = max(rivals, key=lambda s: s.get("of_optimum_after_20", 0.0))
    b = _trials(best)
    text = "–" if math.isnan(ratio) else f"> {budget / b:.2f}" if math.isinf(ratio) else f"{ratio:.2f}"
    mine20 = rows["ktune"].get("of_optimum_after_20")
    a20 = after.get("of_optimum_after_20")
    mine_text = "–" if mine20 is None else f"{mine20:.3f}"
    best_text = "–" if a20 is None else f"{after['strategy']} ({a20:.3f})"
    return (f"| {name} | {land['configurations']} | {_text(m, budget)} | {best['strategy']} ({_text(b, budget)}) | "
            f"{text} | {mine_text} | {best_text} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="bench-search.json files")
    ap.add_argument("--rivals", type=Path, action="append", default=[], metavar="EARLIER",
                    help="an earlier bench-search.json, or a folder of */bench-search.json, whose strategies a run "
                         "did not repeat are taken (repeat the option for several; the first given wins)")
    args = ap.parse_args()
    rivals = Rivals(args.rivals)
    borrowed: set[str] = set()
    lands: list[tuple[str, dict[str, Any]]] = []
    for path in args.runs:
        data = json.loads(path.read_text())
        for land in data["landscapes"]:
            lands.append((landscape_name(path, data, land), with_rivals(land, rivals.of(land), borrowed)))
    print(f"Landscapes ({len(lands)}): {', '.join(n for n, _ in lands)}.\n")
    if borrowed:
        print(f"Taken from an earlier run of each file (not run again): {', '.join(sorted(borrowed))}.\n")
    stats = [stats_of_json(land) for _, land in lands]
    print(overall_table(stats))
    # the default against its rivals (its own parts, which share its code, left out of the count)
    field = [r for r in rank(stats) if r.strategy == "ktune" or r.strategy not in OWN_STRATEGIES]
    by_20 = sorted(field, key=lambda r: -(0.0 if math.isnan(r.after_20) else r.after_20))
    mine = next((r for r in field if r.strategy == "ktune"), None)
    if mine is not None:
        print(f"**The default (`ktune`) among the {len(field)} strategies (its own parts left out):** rank "
              f"{field.index(mine) + 1} by the geometric mean of trials to 3 % ({mine.geomean:.2f}), rank "
              f"{by_20.index(mine) + 1} by the mean fraction of the optimum after 20 trials ({mine.after_20:.3f}).\n")
    print("## The default against the best other, per landscape\n")
    print("| landscape | configurations | ktune: trials to 3 % | best other (its trials) | ktune ÷ best | "
          "ktune after 20 | best other after 20 |")
    print("|---|---:|---:|---|---:|---:|---|")
    over: list[str] = []
    over_repeatable = 0
    for name, land in lands:
        line = versus_row(name, land)
        if line:
            print(line)
        got = versus(land)
        if got is not None and got[2] > BOUND:  # nan (nobody got there) compares False
            mark = " (not repeatable)" if got[1].get("repeatable") is False else ""
            over.append(f"{name} ({_text(got[0], int(land['budget']))} against {got[1]['strategy']}{mark}'s "
                        f"{_text(_trials(got[1]), int(land['budget']))})")
        fair = versus(land, repeatable_only=True)
        over_repeatable += fair is not None and fair[2] > BOUND
    print(f"\nLandscapes where the default needs more than {BOUND:g}x the best other strategy's trials "
          f"({len(over)} of {len(lands)}): {'; '.join(over) if over else 'none'}. Against the strategies "
          f"that repeat themselves only: {over_repeatable} of {len(lands)}.")


if __name__ == "__main__":
    main()
