"""RMSNorm as serving stacks ship it: one 128-thread block per row, scalar loads. Nothing to tune."""

from __future__ import annotations

from typing import Any

import numpy as np

import ktune


def rmsnorm_reference(x: np.ndarray, w: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * w, in float64."""
    x64 = x.astype(np.float64)
    out: np.ndarray = x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps) * w.astype(np.float64)
    return out


def _case(t: int, h: int, dtype: str, backend: str) -> ktune.Case:
    return ktune.Case(x=ktune.Tensor((t, h), dtype), w=ktune.Tensor((h,), dtype, init="positive"),
                      backends=[backend])


@ktune.target(
    sources={"cuda": "rmsnorm.cu", "opencl": "rmsnorm.cl"},
    # The decorator needs a space; one point of it means nothing to tune.
    space=ktune.Space(NAIVE=[1]),
    default={"NAIVE": 1},
    key=lambda x, w: {"T": ktune.bucket(x.shape[0]), "H": x.shape[-1], "dtype": x.dtype.name},
    defines=lambda x, w: {"DTYPE_F16": int(x.dtype == np.float16)},
    cases=[_case(32, 1024, "float32", "opencl"), _case(1024, 4096, "float16", "cuda")],
    reference=rmsnorm_reference,
    bytes_moved=lambda x, w: 2 * x.nbytes + w.nbytes,
    kernel="rmsnorm_naive",
)
def rmsnorm_naive(kernel: ktune.Kernel, x: Any, w: Any, eps: float = 1e-6) -> Any:
    tokens, hidden = x.shape
    out = kernel.empty((tokens, hidden), x.dtype)
    kernel.launch(grid=tokens, block=128, args=[out, x, w, np.int32(hidden), np.float32(eps)])
    return out
