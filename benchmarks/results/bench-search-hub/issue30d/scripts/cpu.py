"""CPU time per trial of the default and of Kernel Tuner's strategies on one landscape, in one process
(issue 30, fourth round). Run from the repository root with one BLAS thread:

    OMP_NUM_THREADS=1 python3 benchmarks/results/bench-search-hub/issue30d/scripts/cpu.py FILE [ktune loop pso ...]

``ktune``: the default as bench-search runs it; ``loop``: Optuna's random sampler through the same tuner
loop (what the loop costs without a model); any other name: that Kernel Tuner strategy. Seeds 1 to 5,
budget 100 each; ``time.process_time()`` around the replays."""

import sys
import tempfile
import time
from pathlib import Path

from pytest_ktune.lab.benchsearch import problems_for
from pytest_ktune.lab.strategies import run_kernel_tuner, run_ktune, run_optuna

path = Path(sys.argv[1])
which = sys.argv[2:] or ["ktune", "loop", "genetic_algorithm", "pso", "mls"]
problem = problems_for(Path(), [path])[0]
with tempfile.TemporaryDirectory() as folder:
    run_ktune(problem, 5, 99, False)  # imports and first-call costs, not counted
    run_kernel_tuner(problem, "random_sample", 5, 99, Path(folder))
    for name in which:
        start, trials = time.process_time(), 0
        for seed in range(1, 6):
            if name == "ktune":
                trace = run_ktune(problem, 100, seed, False)
            elif name == "loop":
                trace = run_optuna(problem, "random", 100, seed, False)
            else:
                trace = run_kernel_tuner(problem, name, 100, seed, Path(folder))
            trials += len(trace)
        print(f"{name:20s} {(time.process_time() - start) / trials * 1000:.2f} ms CPU per trial ({trials} trials)")
