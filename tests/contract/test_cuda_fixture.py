"""On the GPU: inputs drawn on the device, an array-API reference run there in float64, and outputs
compared there, so that a passing check moves nothing to the host (needs CUDA)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pytest_ktune import Case, Space, Tensor, array_api, array_namespace, target
from pytest_ktune.backends import create
from pytest_ktune.core.dtypes import bfloat16_dtype
from pytest_ktune.measure.evaluate import FixtureCache, Job, verify_once
from pytest_ktune.measure.fixture import make_fixture

pytestmark = pytest.mark.gpu

SCALE_CU = r"""
extern "C" __global__ void scale(float* out, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i];
}
"""


@pytest.fixture
def cuda() -> Any:
    return create("cuda")


def test_normal_uniform_positive_and_int_draws_mean_what_they_mean_on_the_host(cuda: Any) -> None:
    n = 1 << 20
    normal = cuda.to_host(cuda.draw(Tensor((n,), "float32"), 7))
    assert abs(normal.mean()) < 0.01 and abs(normal.std() - 1) < 0.01
    uniform = cuda.to_host(cuda.draw(Tensor((n,), "float16", init="uniform"), 7))
    assert uniform.dtype == np.float16 and uniform.min() >= -1 and uniform.max() <= 1
    positive = cuda.to_host(cuda.draw(Tensor((n,), "float32", init="positive", scale=2.0), 7))
    assert positive.min() >= 1.0 and positive.max() < 3.0
    ints = cuda.to_host(cuda.draw(Tensor((n,), "int32", init="int", low=3, high=9), 7))
    assert ints.dtype == np.int32 and set(np.unique(ints)) == set(range(3, 9))
    again = cuda.to_host(cuda.draw(Tensor((n,), "float32"), 7))
    np.testing.assert_array_equal(normal, again)  # the same seed, the same inputs
    assert cuda.draw(Tensor((4,), init=lambda rng, shape, dtype: np.zeros(shape, dtype)), 7) is None


def test_bfloat16_draws_round_to_nearest_even_and_widen_exactly(cuda: Any) -> None:
    bf16 = bfloat16_dtype()
    drawn = cuda.draw(Tensor((1 << 16,), "bfloat16"), 3)
    wide = cuda.to_host(cuda.float64(drawn))
    as_f32 = cuda.to_host(cuda.draw(Tensor((1 << 16,), "float32"), 3))
    np.testing.assert_array_equal(wide, as_f32.astype(bf16).astype(np.float64))  # ml_dtypes rounds RNE too


@array_api
def _scaled(x: Any, a: float) -> Any:
    xp = array_namespace(x)
    assert type(x).__module__.startswith("cupy") and x.dtype == xp.float64
    return x * a


def test_an_array_api_reference_runs_on_the_device_and_nothing_comes_back(cuda: Any, tmp_path: Any) -> None:
    src = tmp_path / "scale.cu"
    src.write_text(SCALE_CU)

    def launch(kernel: Any, x: Any, a: float) -> Any:
        out = kernel.empty_like(x)
        n = x.shape[0]
        kernel.launch(grid=(n + 255) // 256, block=256, args=[out, x, np.float32(a), np.int32(n)])
        return out

    t = target(sources={"cuda": str(src)}, space=Space(B=[1]), default={"B": 1}, key=lambda x: {"N": x.shape[0]},
               cases=[Case(x=Tensor((1 << 20,), "float32"), a=2.0)], reference=_scaled, name="scale",
               kernel="scale")(launch)
    job = Job.of(cuda, t, t.cases[0])
    fixture = make_fixture(job, 11)
    assert fixture.on_device and fixture.host is None
    cache = FixtureCache()
    launches = verify_once(job, {"B": 1}, 11, cache=cache)
    assert launches and cache.made == 1 and cache.uploads == 0
    assert cache.get(job, 11).host is None  # passed on the device: no input or output came to the host
