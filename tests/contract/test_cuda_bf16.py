"""bfloat16 on the CUDA backend (CuPy 14 with ml_dtypes); skipped where no NVIDIA GPU is visible."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from pytest_ktune.backends import Backend, create
from pytest_ktune.core.case import tolerance_for
from pytest_ktune.core.discover import discover
from pytest_ktune.core.target import Target
from pytest_ktune.measure.runtime import run, to_host_tree
from pytest_ktune.measure.verify import call_reference, check_outputs, draw_inputs, upload

pytestmark = pytest.mark.gpu

BF16 = np.dtype(ml_dtypes.bfloat16)
EXAMPLE = Path(__file__).resolve().parents[2] / "example_project"


@pytest.fixture
def backend() -> Backend:
    return create("cuda")


def test_bf16_arrays_round_trip_bit_for_bit(backend: Backend) -> None:
    host = (np.random.default_rng(0).standard_normal((37, 129)) * 100).astype(np.float32).astype(BF16)
    dev = backend.to_device(host)
    assert np.dtype(dev.dtype) == BF16 and tuple(dev.shape) == host.shape
    back = backend.to_host(dev)
    assert back.dtype == BF16
    np.testing.assert_array_equal(back.view(np.uint16), host.view(np.uint16))
    # A strided view comes back too.
    np.testing.assert_array_equal(backend.to_host(dev[:, ::2]).view(np.uint16), host[:, ::2].view(np.uint16))


def test_a_poisoned_bf16_output_is_nan_and_a_plain_one_has_the_dtype(backend: Backend) -> None:
    got = backend.to_host(backend.empty((3, 17), "bfloat16", poison=True))
    assert got.dtype == BF16 and np.isnan(got.astype(np.float32)).all()
    assert np.dtype(backend.empty((2,), BF16).dtype) == BF16


def test_bf16_outputs_are_judged_on_the_device_from_their_bits(backend: Backend) -> None:
    host = np.linspace(-3, 3, 64, dtype=np.float32).astype(BF16).reshape(4, 16)
    a = backend.to_device(host)
    method = getattr(backend, "compare_on_device", None)
    assert method is not None and method(a, a, tolerance_for(BF16, None)) is True
    off = host.astype(np.float32)
    off[2, 5] += 1.0  # one element a whole unit away: past bfloat16's tolerance
    assert method(backend.to_device(off.astype(BF16)), a, tolerance_for(BF16, None)) is False


def _rmsnorm() -> Target:
    return next(t for t in discover(EXAMPLE) if t.name == "rmsnorm")


@pytest.mark.parametrize("vec", [1, 8])
def test_a_bf16_rmsnorm_case_runs_and_matches_the_reference(backend: Backend, vec: int) -> None:
    target = _rmsnorm()
    case = next(c for c in target.cases if target.case_id(c) == "T64-H4096-bfloat16")
    host = draw_inputs(case, 5)
    expected = call_reference(target, host)
    bound = target.bind(**upload(backend, host)).arguments
    params = target.complete({"BLOCK": 256, "VEC": vec})  # one block per row, as before ROWS and CACHE
    result, launches = run(backend, target, params, bound, poison=True)
    backend.synchronize()
    assert launches and np.dtype(result.dtype) == BF16
    out: Any = to_host_tree(backend, result)
    assert out.dtype == BF16
    comparisons = check_outputs(target, "T64-H4096-bfloat16", out, expected, seed=5, backend="cuda")
    # The kernel rounds a float32 result once: well inside the tolerance, not at its edge.
    assert comparisons[0].rel_norm < 4e-3
