"""The example's fused add + RMSNorm target as its committed landscapes and records were made (one block
per row, BLOCK x VEC), for the replay tests and the bit-for-bit tests of the grown template:
fused_add_rmsnorm.cu and fused_add_rmsnorm.cl are that version's sources byte for byte (the landscapes name
their hashes). Self-contained but for the example's unchanged common headers, linked.

The pre-norm step of a transformer layer: ``residual += x`` (written back in place), then
``out = residual / sqrt(mean(residual^2) + eps) * w``; the function returns ``(out, residual)``."""

from __future__ import annotations

from typing import Any

import numpy as np

import ktune


@ktune.array_api
def fused_add_rmsnorm_reference(x: Any, residual: Any, w: Any, eps: float) -> tuple[Any, Any]:
    """(normalised output, updated residual) in float64, in whichever array library holds ``x``."""
    xp = ktune.array_namespace(x, residual, w)
    z = xp.astype(residual, xp.float64, copy=False) + xp.astype(x, xp.float64, copy=False)
    rms = xp.sqrt(xp.mean(z * z, axis=-1, keepdims=True) + eps)
    return z / rms * xp.astype(w, xp.float64, copy=False), z


def _case(t: int, h: int, dtype: str, **kw: Any) -> ktune.Case:
    return ktune.Case(x=ktune.Tensor((t, h), dtype), residual=ktune.Tensor((t, h), dtype),
                      w=ktune.Tensor((h,), dtype, init="positive"), eps=1e-6, **kw)


@ktune.target(
    sources={"cuda": "fused_add_rmsnorm.cu", "opencl": "fused_add_rmsnorm.cl"},
    # What serving stacks ship: one block of 256 threads per row, scalar loads.
    default={"BLOCK": 256, "VEC": 1},
    space=ktune.Space(BLOCK=[64, 128, 256, 512, 1024], VEC=[1, 2, 4, 8],
                      constraints=["H % VEC == 0"]),
    key=lambda x: {"T": ktune.bucket(x.shape[0]), "H": x.shape[1], "dtype": x.dtype.name},
    defines=lambda x: {"DTYPE_F16": int(x.dtype == np.float16),
                       "DTYPE_BF16": int(np.dtype(x.dtype).name == "bfloat16")},
    cases=[
        *(_case(t, h, dt) for dt in ("float16", "float32") for t, h in ((1, 4096), (48, 2048))),
        _case(4096, 8192, "float16", backends=["cuda"]),
        _case(16384, 4096, "float16", backends=["cuda"]),
        _case(16384, 2048, "float16", backends=["cuda"]),
        # bfloat16 (ml_dtypes arrays): CUDA only, OpenCL has no bfloat16.
        _case(1, 4096, "bfloat16", backends=["cuda"]),
        _case(16384, 4096, "bfloat16", backends=["cuda"]),
    ],
    reference=fused_add_rmsnorm_reference,
    # x and w read; residual read and written; out (the size of x) written.
    bytes_moved=lambda x, residual, w: 2 * x.nbytes + 2 * residual.nbytes + w.nbytes,
    flops=lambda x: 5 * x.size,
)
def fused_add_rmsnorm(kernel: ktune.Kernel, x: Any, residual: Any, w: Any,
                      eps: float = 1e-6) -> tuple[Any, Any]:
    tokens, hidden = x.shape
    out = kernel.empty_like(x)
    kernel.launch(grid=tokens, block=kernel["BLOCK"],
                  args=[out, residual, x, w, np.int32(hidden), np.float32(eps)])
    return out, residual
