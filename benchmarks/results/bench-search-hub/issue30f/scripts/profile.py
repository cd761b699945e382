"""A landscape's timings along one parameter with the others fixed, over its optimum, and the configurations
within 3 % of the optimum (issue 30, sixth round). Run from the repository root:

    python3 benchmarks/results/bench-search-hub/issue30f/scripts/profile.py FILE [PARAMETER 'FIXED']

FIXED: a Python dict of the other parameters' values, e.g. "{'block_size_y': 2, 'tile_size_y': 4}"."""

import ast
import collections
import sys
from pathlib import Path

from pytest_ktune.lab.benchsearch import problems_for

problem = problems_for(Path(), [Path(sys.argv[1])])[0]
timed = problem.land.timed
optimum = min(p.value_us for p in timed)
if len(sys.argv) > 3:
    along, fixed = sys.argv[2], ast.literal_eval(sys.argv[3])
    line = sorted((p.params[along], round(p.value_us / optimum, 3)) for p in timed
                  if all(p.params[k] == v for k, v in fixed.items()))
    print(f"{along} with {fixed}: {line}")
else:
    names = [n for n, values in problem.land.space["params"].items() if len(values) > 1]
    good = sorted((p for p in timed if p.value_us <= 1.03 * optimum), key=lambda p: p.value_us)
    print(f"{len(timed)} timed of {len(problem.land.points)}; within 3 % of the optimum: {len(good)}")
    for p in good:
        print(f"  {p.value_us / optimum:.3f}", {n: p.params[n] for n in names})
    for n in names:
        counts = collections.Counter(p.params[n] for p in good)
        print(f"  {n}: {dict(sorted(counts.items()))}")
