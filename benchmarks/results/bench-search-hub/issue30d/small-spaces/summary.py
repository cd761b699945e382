"""The small spaces without priors (issue 30, fourth round): each variant of `bo` tried, and what pure
random search gives there, one strategy alone and the best of fifteen such strategies.

    python3 summary.py variants.json > summary.md

Random search: configurations drawn without replacement, ``within_3pct`` of ``configurations`` within
3 % of the optimum; its median over 11 seeds, and the smallest of 15 such medians (as the best of
fifteen rival strategies would be if each were as good as random and no better), each the mean of 2000
draws (seeded: the same table every time)."""

import json
import math
import random
import statistics
import sys
from pathlib import Path

SEEDS, RIVALS, DRAWS = 11, 15, 2000


def median_of_random(n: int, k: int, rng: random.Random) -> float:
    return statistics.median(min(rng.sample(range(n), k)) + 1 for _ in range(SEEDS))


def main(path: str) -> None:
    runs = json.loads(Path(path).read_text())["trials_to_3pct_seeds_0_to_30"]
    variants = [v for v in next(iter(runs.values())) if v not in ("configurations", "within_3pct")]
    rng = random.Random(0)
    ones, bests = [], []
    print("| landscape | configurations | within 3 % | random: median of 11 seeds | random: best of 15 medians | "
          + " | ".join(variants) + " |")
    print("|---|---:|---:|---:|---:|" + "---:|" * len(variants))
    for name, row in runs.items():
        n, k = row["configurations"], row["within_3pct"]
        one = statistics.mean(median_of_random(n, k, rng) for _ in range(DRAWS))
        best = statistics.mean(min(median_of_random(n, k, rng) for _ in range(RIVALS)) for _ in range(DRAWS // 10))
        ones.append(math.log(one))
        bests.append(math.log(best))
        meds = [statistics.median(row[v]) for v in variants]
        print(f"| {name} | {n} | {k} | {one:.1f} | {best:.1f} | " + " | ".join(f"{m:g}" for m in meds) + " |")
    gm = [math.exp(statistics.mean(math.log(statistics.median(r[v])) for r in runs.values())) for v in variants]
    ga = [math.exp(statistics.mean(math.log(x) for r in runs.values() for x in r[v])) for v in variants]
    print(f"| geometric mean of the medians | | | {math.exp(statistics.mean(ones)):.2f} | "
          f"{math.exp(statistics.mean(bests)):.2f} | " + " | ".join(f"{g:.2f}" for g in gm) + " |")
    print("| geometric mean over every seed | | | | | " + " | ".join(f"{g:.2f}" for g in ga) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
