"""GELU(tanh)-and-mul as serving stacks ship it: scalar, 128 threads, at most 1024 blocks. Nothing to tune."""

from __future__ import annotations

from typing import Any

import numpy as np

import ktune


def gelu_tanh_and_mul_reference(x: np.ndarray) -> np.ndarray:
    """gelu_tanh(x[:, :I]) * x[:, I:] in float64."""
    x64 = x.astype(np.float64)
    i = x.shape[-1] // 2
    g, u = x64[..., :i], x64[..., i:]
    return 0.5 * g * (1.0 + np.tanh(0.7978845608028654 * (g + 0.044715 * g**3))) * u


@ktune.target(
    sources={"cuda": "gelu_tanh_and_mul.cu", "opencl": "gelu_tanh_and_mul.cl"},
    # The decorator needs a space; one point of it means nothing to tune.
    space=ktune.Space(NAIVE=[1]),
    default={"NAIVE": 1},
    key=lambda x: {"T": ktune.bucket(x.shape[0]), "I": x.shape[1] // 2, "dtype": x.dtype.name},
    defines=lambda x: {"DTYPE_F16": int(x.dtype == np.float16)},
    cases=[
        ktune.Case(x=ktune.Tensor((64, 2 * 1024), "float32"), backends=["opencl"]),
        ktune.Case(x=ktune.Tensor((512, 2 * 4096), "float16"), backends=["cuda"]),
    ],
    reference=gelu_tanh_and_mul_reference,
    bytes_moved=lambda x: x.nbytes + x.nbytes // 2,
    kernel="gelu_tanh_and_mul_naive",
)
def gelu_tanh_and_mul_naive(kernel: ktune.Kernel, x: Any) -> Any:
    tokens, two_i = x.shape
    inter = two_i // 2
    out = kernel.empty((tokens, inter), x.dtype)
    n = tokens * inter
    kernel.launch(grid=min(ktune.cdiv(n, 128), 1024), block=128,
                  args=[out, x, np.int64(tokens), np.int32(inter)])
    return out
