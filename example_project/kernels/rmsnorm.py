"""RMSNorm as a pytest-ktune target: one CUDA and one OpenCL template.

Its space holds what the best alternatives do at each shape class: a block per row (the default), several
rows per block with a warp or part of one per row (short rows, few tokens), the row held in registers in
one pass over memory, 16-byte loads of x and w, reductions with one barrier or none, and (CUDA) the held
vectors' weights loaded with the row, before the reduction.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ktune


@ktune.array_api
def rmsnorm_reference(x: Any, w: Any, eps: float) -> Any:
    """RMSNorm in float64, in whichever array library holds ``x`` (on the GPU under the gate)."""
    xp = ktune.array_namespace(x, w)
    x64 = xp.astype(x, xp.float64, copy=False)
    rms = xp.sqrt(xp.mean(x64 * x64, axis=-1, keepdims=True) + eps)
    return x64 / rms * xp.astype(w, xp.float64, copy=False)


def _case(t: int, h: int, dtype: str, **kw: Any) -> ktune.Case:
    return ktune.Case(x=ktune.Tensor((t, h), dtype), w=ktune.Tensor((h,), dtype, init="positive"),
                      eps=1e-6, **kw)


@ktune.target(
    sources={"cuda": "rmsnorm.cu", "opencl": "rmsnorm.cl"},
    # What serving stacks ship: 256 threads per row, scalar loads. ROWS=1, CACHE=0, REDUCE=0 is the
    # kernel before those parameters existed, so records written without them mean what they meant.
    default={"BLOCK": 256, "VEC": 1, "ROWS": 1, "CACHE": 0, "REDUCE": 0},
    space=ktune.Space(
        BLOCK=[64, 128, 256, 512, 1024], VEC=[1, 2, 4, 8],
        ROWS=[1, 2, 4, 8, 16, 32],    # rows per block; BLOCK // ROWS threads per row (a warp or less at <= 32)
        CACHE=[0, 1, 2, 4, 8, 16],    # vectors per thread held in registers between the passes
        REDUCE=[0, 1],                # across a row's warps: two barriers (0) or one (1)
        constraints=[
            "H % VEC == 0",
            "ROWS == 1 or ROWS <= T",                             # no block of rows all past the last
            "REDUCE == 0 or BLOCK // ROWS > 32",                  # a row within a warp needs no barrier
            "CACHE == 0 or CACHE * VEC * (BLOCK // ROWS) >= H",   # the whole row held, else read twice ...
            "CACHE <= 1 or CACHE // 2 * VEC * (BLOCK // ROWS) < H",  # ... in the fewest registers that hold it
            "CACHE * VEC <= 64",                                  # at most 64 elements a thread
        ]),
    key=lambda x: {"T": ktune.bucket(x.shape[0]), "H": x.shape[1], "dtype": x.dtype.name},
    defines=lambda x: {"DTYPE_F16": int(x.dtype == np.float16),
                       "DTYPE_BF16": int(np.dtype(x.dtype).name == "bfloat16")},
    cases=[
        *(_case(t, 4096, dt) for dt in ("float16", "float32") for t in (1, 64, 1024)),
        _case(4096, 8192, "float16", backends=["cuda"]),
        _case(16384, 8192, "float16", backends=["cuda"]),
        _case(16384, 4096, "float32", backends=["cuda"]),
        # bfloat16 (ml_dtypes arrays): CUDA only, OpenCL has no bfloat16.
        _case(64, 4096, "bfloat16", backends=["cuda"]),
        _case(4096, 8192, "bfloat16", backends=["cuda"]),
    ],
    # CUDA only: the held vectors' weights loaded with the row, before the reduction (1), or after it (0).
    per_backend={"cuda": ktune.BackendSpace(PREFETCH=[0, 1], default={"PREFETCH": 0},
                                            constraints=["PREFETCH == 0 or CACHE > 0"])},
    reference=rmsnorm_reference,
    bytes_moved=lambda x, w: 2 * x.nbytes + w.nbytes,
    flops=lambda x: 4 * x.size,
)
def rmsnorm(kernel: ktune.Kernel, x: Any, w: Any, eps: float = 1e-6) -> Any:
    tokens, hidden = x.shape
    out = kernel.empty_like(x)
    kernel.launch(grid=ktune.cdiv(tokens, kernel["ROWS"]), block=kernel["BLOCK"],
                  args=[out, x, w, hidden, eps, tokens])  # Python scalars: int as int32, float as float32
    return out
