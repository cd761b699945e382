"""A digest of the default's traces on six landscapes, to show that a change leaves every trial the same
(issue 30, fourth round): run it on the tree before and after, from the repository root, and compare.

    python3 benchmarks/results/bench-search-hub/issue30d/scripts/traces.py [SEEDS]"""

import hashlib
import sys
from pathlib import Path

from pytest_ktune.lab.benchsearch import problems_for
from pytest_ktune.lab.strategies import run_ktune

LANDSCAPES = Path("benchmarks/results/landscapes")
HUB = Path("benchmarks/results/kernel-tuner-hub")
CASES = [("tests/data/glu_v1", LANDSCAPES / "silu_and_mul-T8192-I14336-float16-NVIDIA_H200.json.gz", False),
         ("example_project", LANDSCAPES / "per_token_group_quant-T256-H4096-G64-float16-int8-NVIDIA_H200.json.gz",
          False),
         ("example_project", LANDSCAPES / "merge_attn_states-T16384-NH32-D128-float16-NVIDIA_H200.json.gz", True),
         ("tests/data/rmsnorm_v1", LANDSCAPES / "rmsnorm-T64-H4096-float16-H200.json", False),
         (".", HUB / "convolution_milo/A4000.json.gz", True),
         (".", HUB / "dedispersion_milo/A4000.json.gz", True)]
seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 6
for root, path, priors in CASES:
    problem = problems_for(Path(root), [path])[0]
    digest = hashlib.sha256()
    for seed in range(seeds):
        digest.update(repr(run_ktune(problem, min(100, len(problem.land.points)), seed, False, priors=priors)).encode())
    print(f"{path.parent.name}/{path.name} (priors {'on' if priors else 'off'}): {digest.hexdigest()[:12]}")
