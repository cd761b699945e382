"""Rank every strategy over the landscapes of several ``ktune bench-search`` runs (one run per file, as
``bench_search_hub.sh`` makes them): the table ``bench-search.md`` ends with for one run, over all.

    python benchmarks/search_overall.py benchmarks/results/bench-search-hub/*/bench-search.json > overall.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pytest_ktune.lab.results import stats_of_json
from pytest_ktune.lab.tables import overall_table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="bench-search.json files")
    args = ap.parse_args()
    landscapes = [stats_of_json(land) for path in args.runs for land in json.loads(path.read_text())["landscapes"]]
    names = [str(path.parent.name) for path in args.runs]
    print(f"Landscapes: {', '.join(names)}.\n")
    print(overall_table(landscapes))


if __name__ == "__main__":
    main()
