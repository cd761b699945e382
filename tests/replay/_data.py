"""Shared by the replay tests: the committed landscapes and the example project they were recorded in."""

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


def target(name: str) -> Target:
    return next(t for t in discover(ROOT) if t.name == name)


def landscape(path: Path) -> Landscape:
    return load(path)
