"""The default's run on one landscape, seed by seed (issue 30, sixth round): trials to 3 % of the optimum,
the final best over the optimum, and the last improvements (trial, best over optimum, the configuration's
varying parameters). Run from the repository root:

    python3 benchmarks/results/bench-search-hub/issue30f/scripts/seeds.py FILE [SEEDS]"""

import sys
from pathlib import Path

from pytest_ktune.core.names import DEFAULT_SAMPLER
from pytest_ktune.lab.benchsearch import problems_for
from pytest_ktune.lab.replay import replay_tune

path = Path(sys.argv[1])
seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 11
problem = problems_for(Path(), [path])[0]
optimum = min(p.value_us for p in problem.land.timed)
names = [n for n, values in problem.land.space["params"].items() if len(values) > 1]
for seed in range(seeds):
    run = replay_tune(problem.root, problem.target, problem.land, sampler=DEFAULT_SAMPLER, trials=100, seed=seed,
                      noise=False)
    trace = run.trace[:100]
    best, steps = float("inf"), []
    for i, (config, value) in enumerate(trace):
        if value < best:
            best = value
            steps.append((i + 1, round(value / optimum, 3), {n: config[n] for n in names}))
    hit = next((i + 1 for i, (_, v) in enumerate(trace) if v <= 1.03 * optimum), None)
    print(f"seed {seed}: trials to 3 % {hit if hit else '> 100'}, final {best / optimum:.3f}")
    for step in steps[-4:]:
        print("   ", step)
