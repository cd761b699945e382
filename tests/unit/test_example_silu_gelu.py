"""The example's SiLU-and-mul and GELU(tanh)-and-mul templates: every class of their configurations against
the reference at odd and declared shapes, the fast path at the edge values, and the configurations recorded
before ROWS, FAST and GRID existed computing what the kernels computed then, bit for bit (tests/data/glu_v1
holds them as they were). On OpenCL (PoCL) here; on CUDA where a GPU is."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_ktune.backends import Backend
from pytest_ktune.core.case import edge_values
from pytest_ktune.core.discover import discover
from pytest_ktune.core.dtypes import as_dtype
from pytest_ktune.core.target import Target
from pytest_ktune.measure.runtime import run
from pytest_ktune.measure.verify import call_reference, check_outputs

REPO = Path(__file__).resolve().parents[2]
NAMES = ("silu_and_mul", "gelu_tanh_and_mul")
NEW = {t.name: t for t in discover(REPO / "example_project") if t.name in NAMES}
OLD = {t.name: t for t in discover(REPO / "tests" / "data" / "glu_v1") if t.name in NAMES}
ADDED = {"ROWS": 0, "FAST": 0, "GRID": 0}  # the old kernel's values of what the space gained


def _bucket(t: int) -> int:
    return 1 << (t - 1).bit_length()


def _key(t: int, inter: int, dtype: str) -> dict[str, Any]:
    return {"T": _bucket(t), "I": inter, "dtype": dtype}


def _inputs(t: int, inter: int, dtype: str, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {"x": (rng.standard_normal((t, 2 * inter)) * 2).astype(as_dtype(dtype))}


def _run(backend: Backend, target: Target, params: dict[str, Any], host: dict[str, Any]) -> np.ndarray:
    bound = {k: backend.to_device(v) if isinstance(v, np.ndarray) else v for k, v in host.items()}
    out, _ = run(backend, target.for_backend(backend.name), params, bound, poison=True)
    return backend.to_host(out)


def _check(backend: Backend, target: Target, params: dict[str, Any], host: dict[str, Any], case: str) -> None:
    with np.errstate(over="ignore"):  # e^-g overflows in the reference too at the edge values
        expected = [np.asarray(call_reference(target, host))]
    check_outputs(target, case, [_run(backend, target, params, host)], expected, seed=0, backend=backend.name,
                  repro=f"configuration {params}")


def _class(p: dict[str, Any]) -> tuple[Any, ...]:
    """A configuration's class: the flat range, one row a block or several; the IEEE or the fast path;
    a grid of one block a tile or a persistent one; one vector a thread or several; scalar or 16-byte
    (fp16) vectors."""
    return min(int(p["ROWS"]), 2), p["FAST"], int(p["GRID"]) > 0, int(p["ITEMS"]) > 1, p["VEC"]


def _classes(target: Target, key: dict[str, Any]) -> list[dict[str, Any]]:
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for p in target.space.feasible(key):
        if p["VEC"] in (1, 8):
            seen.setdefault(_class(p), dict(p))
    return list(seen.values())


# Odd shapes: T=5 leaves a group of rows partly past the last (and every T=5 block of the flat range
# meets two rows); T=600 rows take a capped grid's blocks two passes; I=1000 is 125 vectors of 8, a block's
# last pass partly past the row's end. Declared: the first of each target's own OpenCL cases' shapes.
SHAPES = [(5, 1000, "float32"), (600, 1000, "float16")]
DECLARED = {"silu_and_mul": (16, 14336), "gelu_tanh_and_mul": (4, 8192)}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("t", "inter", "dtype"), SHAPES)
def test_every_class_of_configuration_matches_the_reference_at_odd_shapes(
        backend: Backend, name: str, t: int, inter: int, dtype: str) -> None:
    target = NEW[name]
    configs = _classes(target, _key(t, inter, dtype))
    # Every class but the capped grid's at T=5 (no cap binds on 8 rows): 8 flat, 16 or 32 two-dimensional.
    assert len(configs) >= (24 if t < 256 else 40), sorted({_class(p) for p in configs})
    host = _inputs(t, inter, dtype)
    for params in configs:
        _check(backend, target, params, host, f"T{t}-I{inter}-{dtype}")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_every_class_of_configuration_matches_the_reference_at_a_declared_shape(
        backend: Backend, name: str, dtype: str) -> None:
    target = NEW[name]
    t, inter = DECLARED[name]
    assert any(target.case_key(c) == _key(t, inter, dtype) for c in target.cases if c.runs_on("opencl"))
    configs = _classes(target, _key(t, inter, dtype))
    assert len(configs) >= 24
    host = _inputs(t, inter, dtype, seed=2)
    for params in configs:
        _check(backend, target, params, host, f"T{t}-I{inter}-{dtype}")


@pytest.mark.parametrize("name", NAMES)
def test_every_class_of_configuration_matches_the_reference_in_bfloat16(backend: Backend, name: str) -> None:
    if backend.name != "cuda":
        pytest.skip("OpenCL has no bfloat16: CUDA only")
    target = NEW[name]
    configs = _classes(target, _key(5, 1000, "bfloat16"))
    assert len(configs) >= 24
    host = _inputs(5, 1000, "bfloat16", seed=5)
    for params in configs:
        _check(backend, target, params, host, "T5-I1000-bfloat16")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_the_fast_path_meets_the_tolerance_at_the_edge_values(backend: Backend, name: str, dtype: str) -> None:
    # "sweep": zero, every decade from tiny to large, and the cut-offs of exp (up to 88, where e^-g
    # overflows in float32: the fast division must then give 0, as the reference does).
    target = NEW[name]
    g = edge_values("sweep", np.random.default_rng(3), (6, 512), np.dtype(dtype))
    u = np.random.default_rng(4).uniform(-2.0, 2.0, (6, 512)).astype(dtype)
    host = {"x": np.concatenate([g, u], axis=1)}
    for params in ({"BLOCK": 64, "VEC": 8, "ITEMS": 1, "ROWS": 2, "FAST": 1, "GRID": 0},
                   {"BLOCK": 128, "VEC": 1, "ITEMS": 2, "ROWS": 0, "FAST": 1, "GRID": 0}):
        target.check_config(params, _key(6, 512, dtype), "edge values")
        _check(backend, target, params, host, f"edge-{dtype}")


@pytest.mark.parametrize("name", NAMES)
def test_a_capped_grid_strides_over_more_rows_than_the_cuda_grid_holds(name: str) -> None:
    # The launch alone (no device): gridDim.y is at most 65535, and the cap in blocks divides by the columns.
    target = NEW[name]

    class Probe:
        def __init__(self, params: dict[str, Any]) -> None:
            self.params = params
            self.grids: list[Any] = []

        def __getitem__(self, k: str) -> Any:
            return self.params[k]

        def empty(self, shape: Any, dtype: Any) -> np.ndarray:
            return np.empty(shape, dtype)

        def launch(self, grid: Any, block: Any, args: Any) -> None:
            self.grids.append(grid)

    x = np.broadcast_to(np.float16(0), (70000, 2 * 4096))  # the shape alone, no memory
    for grid, want in ((0, (4, 65535)), (1024, (4, 256)), (256, (4, 64))):
        probe = Probe({"BLOCK": 128, "VEC": 8, "ITEMS": 1, "ROWS": 1, "FAST": 0, "GRID": grid})
        target.fn(probe, x)
        assert probe.grids == [want]


def _recorded(name: str) -> list[dict[str, Any]]:
    records = json.loads((REPO / "example_project" / "ktune-params.json").read_text())["records"]
    # the records written before the space grew (tuned ones since hold ROWS, FAST and GRID of their own)
    found = {json.dumps(r["params"], sort_keys=True) for r in records
             if r["target"].endswith(f"::{name}") and "ROWS" not in r["params"]}
    return [json.loads(p) for p in sorted(found)]


def _old_configs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for n in NAMES:
        found = [dict(OLD[n].default), *(p for p in _recorded(n) if p != dict(OLD[n].default))]
        out += [(n, p) for p in found]
    return out


OLD_CONFIGS = _old_configs()


@pytest.mark.parametrize(("name", "old"), OLD_CONFIGS,
                         ids=[f"{n}-" + "-".join(f"{k}{v}" for k, v in sorted(p.items())) for n, p in OLD_CONFIGS])
def test_the_default_and_the_recorded_configurations_compute_what_they_did_bit_for_bit(
        backend: Backend, name: str, old: dict[str, Any]) -> None:
    new = NEW[name]
    params = new.complete(old)
    assert params == {**old, **ADDED}
    for t, inter, dtype in ((3, 1000, "float16"), (2, 1000, "float32")):
        new.check_config(params, _key(t, inter, dtype), "recorded configuration")
        host = _inputs(t, inter, dtype, seed=1)
        np.testing.assert_array_equal(_run(backend, new, params, host), _run(backend, OLD[name], old, host))


def _landscape_hash(path: Path) -> str:
    raw = path.read_bytes()
    text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    return str(json.loads(text)["source_hash"])


def test_the_frozen_copies_are_the_kernels_the_records_name() -> None:
    # A record or landscape names its source's hash: the frozen sources are the ones the H200 records made
    # before ROWS, FAST and GRID (those still in the params file) and the committed landscapes were made on.
    records = json.loads((REPO / "example_project" / "ktune-params.json").read_text())["records"]
    for name in NAMES:
        hashes = {r["baseline"]["source_hash"] for r in records if r["target"].endswith(f"::{name}")
                  and r["baseline"]["source_path"].endswith(".cu") and "ROWS" not in r["params"]}
        hashes |= {_landscape_hash(p) for p in (REPO / "benchmarks" / "results" / "landscapes").glob(f"{name}-*")}
        assert hashes == {OLD[name].source_hash("cuda")}, name
