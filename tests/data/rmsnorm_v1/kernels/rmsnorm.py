"""The example's RMSNorm target as its committed landscapes were recorded (one block per row, BLOCK x VEC),
for the replay tests: rmsnorm.cu and rmsnorm.cl are that version's sources byte for byte (the landscapes name
their hashes). Self-contained, since tests copy this folder elsewhere."""

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
    # What serving stacks ship: 256 threads per row, scalar loads.
    default={"BLOCK": 256, "VEC": 1},
    space=ktune.Space(BLOCK=[64, 128, 256, 512, 1024], VEC=[1, 2, 4, 8],
                      constraints=["H % VEC == 0"]),
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
    reference=rmsnorm_reference,
    bytes_moved=lambda x, w: 2 * x.nbytes + w.nbytes,
    flops=lambda x: 4 * x.size,
)
def rmsnorm(kernel: ktune.Kernel, x: Any, w: Any, eps: float = 1e-6) -> Any:
    tokens, hidden = x.shape
    out = kernel.empty_like(x)
    kernel.launch(grid=tokens, block=kernel["BLOCK"],
                  args=[out, x, w, np.int32(hidden), np.float32(eps)])
    return out
