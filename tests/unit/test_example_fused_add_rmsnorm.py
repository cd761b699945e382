"""The example's fused add + RMSNorm template: every class of its configurations against the reference at
odd and declared shapes, both outputs (the normed row and the updated residual), and the configurations
recorded before ROWS, CACHE, REDUCE and PREFETCH existed computing what the kernel computed then, bit for
bit (tests/data/fused_add_rmsnorm_v1 holds it as it was). On OpenCL (PoCL) here; on CUDA where a GPU is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_ktune.backends import Backend
from pytest_ktune.core.discover import discover
from pytest_ktune.core.dtypes import as_dtype
from pytest_ktune.core.target import Target
from pytest_ktune.measure.guards import Guards
from pytest_ktune.measure.runtime import run
from pytest_ktune.measure.verify import call_reference, check_outputs

REPO = Path(__file__).resolve().parents[2]
NAME = "fused_add_rmsnorm"


def _target(root: Path) -> Target:
    return next(t for t in discover(root) if t.name == NAME)


NEW = _target(REPO / "example_project")
OLD = _target(REPO / "tests" / "data" / "fused_add_rmsnorm_v1")
ADDED = {"ROWS": 1, "CACHE": 0, "REDUCE": 0, "PREFETCH": 0}  # the old kernel's values of what the space gained


def _key(t: int, h: int, dtype: str) -> dict[str, Any]:
    return {"T": 1 << (t - 1).bit_length(), "H": h, "dtype": dtype}


def _inputs(t: int, h: int, dtype: str, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    dt = as_dtype(dtype)
    return {"x": rng.standard_normal((t, h)).astype(dt), "residual": rng.standard_normal((t, h)).astype(dt),
            "w": rng.uniform(0.5, 1.5, h).astype(dt), "eps": 1e-6}


def _run(backend: Backend, target: Target, params: dict[str, Any], host: dict[str, Any]) -> list[np.ndarray]:
    """(out, residual) on the host after one run on fresh copies of ``host``, every buffer inside guards:
    a row past the last, or a vector past a row's end, that wrote anything fails here."""
    guards = Guards.for_backend(backend)
    assert guards is not None  # both backends guard
    bound = {k: guards.upload(k, v) if isinstance(v, np.ndarray) else v for k, v in host.items()}
    (out, residual), _ = run(backend, target.for_backend(backend.name), params, bound, poison=True,
                             alloc=guards.output)
    backend.synchronize()
    guards.check(str(params), target.where)
    return [backend.to_host(out), backend.to_host(residual)]


def _check(backend: Backend, params: dict[str, Any], host: dict[str, Any], case: str) -> None:
    expected = [np.asarray(a) for a in call_reference(NEW, host)]
    check_outputs(NEW, case, _run(backend, NEW, params, host), expected, seed=0, backend=backend.name,
                  repro=f"configuration {params}")


def _class(p: dict[str, Any]) -> tuple[Any, ...]:
    """A configuration's class: one row a block or several; a warp or less a row or more; the row held in
    registers or read back, with its weights loaded before the reduction or after; one barrier or two;
    scalar or 16-byte (fp16) vectors."""
    rows, block = int(p["ROWS"]), int(p["BLOCK"])
    return rows > 1, block // rows <= 32, int(p["CACHE"]) > 0, p["PREFETCH"], p["REDUCE"], p["VEC"]


def _classes(key: dict[str, Any]) -> list[dict[str, Any]]:
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for p in NEW.space.feasible(key):
        if p["VEC"] in (1, 8):
            seen.setdefault(_class(p), dict(p))
    return list(seen.values())


def _assert_every_kind(configs: list[dict[str, Any]], *, rows: bool) -> None:
    """Every kind of kernel the parameters make is among ``configs``, in scalar and 16-byte vectors where
    the space has both: a block a row or several rows, each with two barriers or one, the row read back
    or held with its weights loaded after or before the reduction (6 each); a warp or less a row, read
    back or held (3: no barrier). A warp of scalars cannot hold a row of 1,000 (32 threads x 16 vectors
    at most), so that kind has 16-byte vectors only."""
    kinds = {_class(p)[:-1] for p in configs}
    assert len(kinds) == (15 if rows else 6), sorted(kinds)
    assert len(configs) >= 2 * len(kinds) - 2, sorted(_class(p) for p in configs)


# Odd shapes: T=5 and T=33 leave a block of rows partly past the last (which must write nothing, to out or
# to the residual); H=1000 is 125 vectors of 8, a row's last pass partly past its end. Declared: the
# target's own OpenCL cases' shapes.
ODD = [(5, 1000, "float32"), (33, 1000, "float16")]
DECLARED = [(1, 4096), (48, 2048)]


@pytest.mark.parametrize(("t", "h", "dtype"), ODD)
def test_every_class_of_configuration_matches_the_reference_at_odd_shapes(
        backend: Backend, t: int, h: int, dtype: str) -> None:
    configs = _classes(_key(t, h, dtype))
    _assert_every_kind(configs, rows=True)
    host = _inputs(t, h, dtype)
    for params in configs:
        _check(backend, params, host, f"T{t}-H{h}-{dtype}")


@pytest.mark.parametrize(("t", "h"), DECLARED)
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_every_class_of_configuration_matches_the_reference_at_a_declared_shape(
        backend: Backend, t: int, h: int, dtype: str) -> None:
    key = _key(t, h, dtype)
    assert any(NEW.case_key(c) == key for c in NEW.cases if c.runs_on("opencl"))
    configs = _classes(key)
    _assert_every_kind(configs, rows=t > 1)  # at T=1 one row a block only
    host = _inputs(t, h, dtype, seed=2)
    for params in configs:
        _check(backend, params, host, f"T{t}-H{h}-{dtype}")


def test_every_class_of_configuration_matches_the_reference_in_bfloat16(backend: Backend) -> None:
    if backend.name != "cuda":
        pytest.skip("OpenCL has no bfloat16: CUDA only")
    configs = _classes(_key(5, 1000, "bfloat16"))
    _assert_every_kind(configs, rows=True)
    host = _inputs(5, 1000, "bfloat16", seed=5)
    for params in configs:
        _check(backend, params, host, "T5-H1000-bfloat16")


@pytest.mark.parametrize("prefetch", [0, 1])
def test_a_row_longer_than_the_registers_hold_is_read_back_for_the_rest(backend: Backend, prefetch: int) -> None:
    # CACHE=1 of 64 threads holds 64 of 256 elements: the constraints leave it out, the kernel still works.
    params = {"BLOCK": 64, "VEC": 1, "ROWS": 1, "CACHE": 1, "REDUCE": 1, "PREFETCH": prefetch}
    _check(backend, params, _inputs(2, 256, "float32"), "T2-H256-float32")


@pytest.mark.parametrize(("block", "vec"), [(256, 1), (512, 4), (1024, 8)])
def test_a_row_held_in_registers_computes_what_reading_it_back_did_bit_for_bit(
        backend: Backend, block: int, vec: int) -> None:
    # The held row is the residual rounded as it is stored, so the output is the same to the bit, with
    # the weights loaded before the reduction or after.
    for t, h, dtype in ((3, 4096, "float16"), (2, 2048, "float32")):
        base = {"BLOCK": block, "VEC": vec, **ADDED}
        held = [p for p in NEW.space.feasible(_key(t, h, dtype)) if p["CACHE"] and p["ROWS"] == 1
                and not p["REDUCE"] and (p["BLOCK"], p["VEC"]) == (block, vec)]
        assert [p["PREFETCH"] for p in held] == [0, 1], held
        host = _inputs(t, h, dtype, seed=3)
        want = _run(backend, NEW, base, host)
        for params in held:
            for got, was in zip(_run(backend, NEW, dict(params), host), want, strict=True):
                np.testing.assert_array_equal(got, was, err_msg=str(params))


def test_the_constraints_leave_out_what_the_kernel_does_not_do() -> None:
    key = _key(64, 2048, "float16")
    feasible = list(NEW.space.feasible(key))
    assert not [p for p in feasible if p["PREFETCH"] and not p["CACHE"]]  # no held vectors, no weights held
    assert not [p for p in feasible if p["REDUCE"] and int(p["BLOCK"]) // int(p["ROWS"]) <= 32]
    assert not [p for p in NEW.space.feasible(_key(1, 4096, "float16")) if p["ROWS"] != 1]


# The configurations the params file held for this target when its space grew (H200 records, 2026-11-30):
# kept here, since records tuned since replace them there.
RECORDED_BEFORE = [{"BLOCK": 256, "VEC": 8}, {"BLOCK": 512, "VEC": 4}, {"BLOCK": 512, "VEC": 8},
                   {"BLOCK": 1024, "VEC": 4}, {"BLOCK": 1024, "VEC": 8}]


def _recorded() -> list[dict[str, Any]]:
    records = json.loads((REPO / "example_project" / "ktune-params.json").read_text())["records"]
    # the records still of the old space (tuned ones since hold ROWS and the rest of their own)
    found = {json.dumps(r["params"], sort_keys=True) for r in records
             if r["target"].endswith(f"::{NAME}") and "ROWS" not in r["params"]}
    found |= {json.dumps(p, sort_keys=True) for p in RECORDED_BEFORE}
    return [json.loads(p) for p in sorted(found)]


OLD_CONFIGS = [dict(OLD.default), *(p for p in _recorded() if p != dict(OLD.default))]


@pytest.mark.parametrize("old", OLD_CONFIGS, ids=["-".join(f"{k}{v}" for k, v in sorted(p.items()))
                                                  for p in OLD_CONFIGS])
def test_the_default_and_the_recorded_configurations_compute_what_they_did_bit_for_bit(
        backend: Backend, old: dict[str, Any]) -> None:
    params = NEW.complete(old)
    assert params == {**old, **ADDED}
    for t, h, dtype in ((3, 4096, "float16"), (2, 4096, "float32"), (3, 2048, "float16")):
        NEW.check_config(params, _key(t, h, dtype), "recorded configuration")
        host = _inputs(t, h, dtype, seed=1)
        for got, was in zip(_run(backend, NEW, params, host), _run(backend, OLD, old, host), strict=True):
            np.testing.assert_array_equal(got, was)
