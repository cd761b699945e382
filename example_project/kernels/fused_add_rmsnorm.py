"""Fused residual-add + RMSNorm as a pytest-ktune target.

The pre-norm step of a transformer layer: ``residual += x`` (written back in
place), then ``out = residual / sqrt(mean(residual^2) + eps) * w``. The
function returns ``(out, residual)``: ``out`` is a fresh array, ``residual`` is
the caller's array with its new value, so both are checked.

Its space holds what the best alternatives do at each shape class: a block per row (the default), several
rows per block with a warp or part of one per row (short rows, many tokens), the row (x + residual) held in
registers in one pass over memory with its weights loaded before the reduction, 16-byte loads, and
reductions with one barrier or none.
"""

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
    # What serving stacks ship: one block of 256 threads per row, scalar loads. ROWS=1, CACHE=0, REDUCE=0,
    # PREFETCH=0 is the kernel before those parameters existed, so records written without them mean what
    # they meant.
    default={"BLOCK": 256, "VEC": 1, "ROWS": 1, "CACHE": 0, "REDUCE": 0, "PREFETCH": 0},
    space=ktune.Space(
        BLOCK=[64, 128, 256, 512, 1024], VEC=[1, 2, 4, 8],
        ROWS=[1, 2, 4, 8, 16, 32],    # rows per block; BLOCK // ROWS threads per row (a warp or less at <= 32)
        CACHE=[0, 1, 2, 4, 8, 16],    # vectors per thread held in registers between the passes
        REDUCE=[0, 1],                # across a row's warps: two barriers (0) or one (1)
        PREFETCH=[0, 1],              # the held vectors' weights loaded after the reduction (0) or before (1)
        constraints=[
            "H % VEC == 0",
            "ROWS == 1 or ROWS <= T",                             # no block of rows all past the last
            "REDUCE == 0 or BLOCK // ROWS > 32",                  # a row within a warp needs no barrier
            "CACHE == 0 or CACHE * VEC * (BLOCK // ROWS) >= H",   # the whole row held, else read twice ...
            "CACHE <= 1 or CACHE // 2 * VEC * (BLOCK // ROWS) < H",  # ... in the fewest registers that hold it
            "CACHE * VEC <= 64",                                  # at most 64 elements a thread
            "PREFETCH == 0 or CACHE > 0",                         # only held vectors have weights to hold
        ]),
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
    kernel.launch(grid=ktune.cdiv(tokens, kernel["ROWS"]), block=kernel["BLOCK"],
                  args=[out, residual, x, w, np.int32(hidden), np.float32(eps), np.int32(tokens)])
    return out, residual
