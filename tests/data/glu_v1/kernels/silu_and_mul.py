"""The example's SiLU-and-mul target as its committed landscapes and records were made (one flat
range of vectors, BLOCK x VEC x ITEMS), for the replay tests and the bit-for-bit tests of the grown
template: silu_and_mul.cu and silu_and_mul.cl are that version's sources byte for byte (the
landscapes name their hashes). Self-contained but for the example's unchanged common headers, linked."""

from __future__ import annotations

from typing import Any

import numpy as np

import ktune


@ktune.array_api
def silu_and_mul_reference(x: Any) -> Any:
    """silu(x[:, :I]) * x[:, I:] in float64, in whichever array library holds ``x``."""
    xp = ktune.array_namespace(x)
    x64 = xp.astype(x, xp.float64, copy=False)
    i = x.shape[-1] // 2
    g, u = x64[..., :i], x64[..., i:]
    return g / (1.0 + xp.exp(-g)) * u


def _case(t: int, inter: int, dtype: str, **kw: Any) -> ktune.Case:
    return ktune.Case(x=ktune.Tensor((t, 2 * inter), dtype), **kw)


@ktune.target(
    sources={"cuda": "silu_and_mul.cu", "opencl": "silu_and_mul.cl"},
    # What serving stacks ship: 256 threads, scalar loads, one element per thread.
    default={"BLOCK": 256, "VEC": 1, "ITEMS": 1},
    space=ktune.Space(BLOCK=[64, 128, 256, 512, 1024], VEC=[1, 2, 4, 8], ITEMS=[1, 2, 4],
                      constraints=["I % VEC == 0"]),
    key=lambda x: {"T": ktune.bucket(x.shape[0]), "I": x.shape[1] // 2, "dtype": x.dtype.name},
    defines=lambda x: {"DTYPE_F16": int(x.dtype == np.float16),
                       "DTYPE_BF16": int(np.dtype(x.dtype).name == "bfloat16")},
    cases=[
        *(_case(t, 14336, dt) for dt in ("float16", "float32") for t in (16, 256)),
        _case(8192, 14336, "float16", backends=["cuda"]),
        _case(16384, 11008, "float16", backends=["cuda"]),
        # bfloat16 (ml_dtypes arrays): CUDA only, OpenCL has no bfloat16.
        _case(16, 14336, "bfloat16", backends=["cuda"]),
        _case(8192, 14336, "bfloat16", backends=["cuda"]),
    ],
    reference=silu_and_mul_reference,
    bytes_moved=lambda x: x.nbytes + x.nbytes // 2,
    flops=lambda x: 3 * x.size,
)
def silu_and_mul(kernel: ktune.Kernel, x: Any) -> Any:
    tokens, two_i = x.shape
    inter = two_i // 2
    out = kernel.empty((tokens, inter), x.dtype)
    vectors = tokens * (inter // int(kernel["VEC"]))
    per_block = int(kernel["BLOCK"]) * int(kernel["ITEMS"])
    kernel.launch(grid=ktune.cdiv(vectors, per_block), block=kernel["BLOCK"],
                  args=[out, x, np.int64(tokens), np.int32(inter)])
    return out
