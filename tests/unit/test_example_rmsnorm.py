"""The example's RMSNorm template: every class of its configurations against the reference, and the
configurations recorded before ROWS, CACHE and REDUCE existed computing what the kernel computed then,
bit for bit (tests/data/rmsnorm_v1 holds it as it was). On OpenCL (PoCL) here; on CUDA where a GPU is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_ktune.backends import Backend
from pytest_ktune.core.discover import discover
from pytest_ktune.core.target import Target
from pytest_ktune.measure.runtime import run
from pytest_ktune.measure.verify import call_reference, check_outputs

REPO = Path(__file__).resolve().parents[2]


def _target(root: Path) -> Target:
    return next(t for t in discover(root) if t.name == "rmsnorm")


NEW = _target(REPO / "example_project")
OLD = _target(REPO / "tests" / "data" / "rmsnorm_v1")


def _inputs(t: int, h: int, dtype: str, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((t, h)).astype(dtype)
    w = rng.uniform(0.5, 1.5, h).astype(dtype)
    return {"x": x, "w": w, "eps": 1e-6}


def _run(backend: Backend, target: Target, params: dict[str, Any], host: dict[str, Any]) -> np.ndarray:
    bound = {k: backend.to_device(v) if isinstance(v, np.ndarray) else v for k, v in host.items()}
    out, _ = run(backend, target.for_backend(backend.name), params, bound, poison=True)
    return backend.to_host(out)


def _classes(key: dict[str, Any], backend: str) -> list[dict[str, Any]]:
    """One feasible configuration of each class of the backend's space: one row a block or several, a warp
    or less a row or more, the row held in registers or read twice, one barrier or two, scalar or 16-byte
    vectors, and (CUDA) the held vectors' weights loaded before the reduction or after it."""
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for p in NEW.for_backend(backend).space.feasible(key):
        block, rows, cache, vec = (int(p[n]) for n in ("BLOCK", "ROWS", "CACHE", "VEC"))
        if vec in (1, 8):
            seen.setdefault((rows > 1, block // rows <= 32, cache > 0, p["REDUCE"], vec, p.get("PREFETCH", 0)),
                            dict(p))
    return list(seen.values())


@pytest.mark.parametrize(("t", "h", "dtype"), [(5, 256, "float32"), (3, 1024, "float16")])
def test_every_class_of_configuration_matches_the_reference(backend: Backend, t: int, h: int, dtype: str) -> None:
    # T=5 and T=3: the last block of several rows has rows past the end, which must write nothing.
    key = {"T": 8 if t == 5 else 4, "H": h, "dtype": dtype}
    configs = _classes(key, backend.name)
    assert len(configs) >= 12  # the classes of the space (ROWS <= T leaves out the largest ROWS)
    host = _inputs(t, h, dtype)
    expected = [np.asarray(call_reference(NEW, host))]
    for params in configs:
        got = _run(backend, NEW, params, host)
        check_outputs(NEW, f"T{t}-H{h}-{dtype}", [got], expected, seed=0, backend=backend.name,
                      repro=f"configuration {params}")


def test_a_row_longer_than_the_registers_hold_is_read_again_for_the_rest(backend: Backend) -> None:
    # CACHE=1 of 64 threads holds 64 of 256 elements: the constraints leave it out, the kernel still works.
    host = _inputs(2, 256, "float32")
    params = {"BLOCK": 64, "VEC": 1, "ROWS": 1, "CACHE": 1, "REDUCE": 1}
    check_outputs(NEW, "T2-H256-float32", [_run(backend, NEW, params, host)],
                  [np.asarray(call_reference(NEW, host))], seed=0, backend=backend.name, repro=str(params))


def _recorded() -> list[dict[str, Any]]:
    records = json.loads((REPO / "example_project" / "ktune-params.json").read_text())["records"]
    # the records written before the space grew (tuned ones since hold ROWS, CACHE and REDUCE of their own)
    found = {json.dumps(r["params"], sort_keys=True) for r in records
             if r["target"].endswith("::rmsnorm") and "ROWS" not in r["params"]}
    return [json.loads(p) for p in sorted(found)]


@pytest.mark.parametrize("old", [dict(OLD.default), *_recorded()], ids=lambda p: "-".join(map(str, p.values())))
def test_the_default_and_the_recorded_configurations_compute_what_they_did_bit_for_bit(
        backend: Backend, old: dict[str, Any]) -> None:
    params = NEW.for_backend(backend.name).complete(old)
    assert params == {**old, "ROWS": 1, "CACHE": 0, "REDUCE": 0, **({"PREFETCH": 0} if backend.name == "cuda" else {})}
    for t, h, dtype in ((3, 4096, "float16"), (2, 4096, "float32")):
        NEW.for_backend(backend.name).check_config(params, {"T": 4, "H": h, "dtype": dtype}, "recorded configuration")
        host = _inputs(t, h, dtype, seed=1)
        np.testing.assert_array_equal(_run(backend, NEW, params, host), _run(backend, OLD, old, host))
