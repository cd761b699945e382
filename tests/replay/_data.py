"""Shared by the replay tests: the committed landscapes and the example project they were recorded in.

Where an example kernel changed since its landscapes were recorded, the tests replay them on a copy of
the target as it was then, under tests/data (``FROZEN``): rmsnorm before ROWS, CACHE and REDUCE (its
one-block-per-row kernel is the new template at ROWS=1, CACHE=0, REDUCE=0, so what these landscapes
say of the search still holds); silu_and_mul and gelu_tanh_and_mul before ROWS, FAST and GRID (their
flat range of vectors is the new templates at ROWS=0, FAST=0, GRID=0); fused_add_rmsnorm before ROWS,
CACHE, REDUCE and PREFETCH (the new template at ROWS=1, CACHE=0, REDUCE=0, PREFETCH=0);
per_token_group_quant before FAST and IDX64 (the new template at FAST=0 with IDX64=1).
"""

from __future__ import annotations

from pathlib import Path

from pytest_ktune.core.discover import discover
from pytest_ktune.core.target import Target
from pytest_ktune.lab.landscape import Landscape, load

REPO = Path(__file__).resolve().parents[2]
ROOT = REPO / "example_project"
LANDSCAPES = REPO / "benchmarks" / "results" / "landscapes"
RMSNORM = LANDSCAPES / "rmsnorm-T64-H4096-float16-H200.json"
SILU = LANDSCAPES / "silu_and_mul-T256-I14336-float16-H200.json"
GLU_V1 = REPO / "tests" / "data" / "glu_v1"
FROZEN = {"rmsnorm": REPO / "tests" / "data" / "rmsnorm_v1", "silu_and_mul": GLU_V1, "gelu_tanh_and_mul": GLU_V1,
          "fused_add_rmsnorm": REPO / "tests" / "data" / "fused_add_rmsnorm_v1",
          "per_token_group_quant": REPO / "tests" / "data" / "quant_v1"}


def root_of(name: str) -> Path:
    """The project that holds the target ``name`` as its landscapes were recorded."""
    return FROZEN.get(name, ROOT)


RMSNORM_ROOT = root_of("rmsnorm")
SILU_ROOT = root_of("silu_and_mul")


def target(name: str) -> Target:
    return next(t for t in discover(root_of(name)) if t.name == name)


def landscape(path: Path) -> Landscape:
    return load(path)
