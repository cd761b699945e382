"""SiLU-and-mul (the SwiGLU activation) as a pytest-ktune target.

Its space holds what wins at each shape class: the flat range of vectors that serving stacks ship (the
default), a 2-D grid that takes several rows (tokens) a block with no division per vector and every
load in flight before the first store (few tokens), 16-byte loads and stores, the fast reciprocal, and
a persistent grid whose blocks stride over the rows (many tokens).
"""

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


# CUDA's limit on gridDim.y: the row groups past it are taken by the blocks striding over them.
MAX_GRID_Y = 65535


@ktune.target(
    sources={"cuda": "silu_and_mul.cu", "opencl": "silu_and_mul.cl"},
    # What serving stacks ship: 256 threads, scalar loads, one element per thread. ROWS=0 and FAST=0 are
    # the kernel before those parameters existed (GRID only caps the 2-D launch), so records written
    # without them mean what they meant.
    default={"BLOCK": 256, "VEC": 1, "ITEMS": 1, "ROWS": 0, "FAST": 0, "GRID": 0},
    space=ktune.Space(
        BLOCK=[64, 128, 256, 512, 1024], VEC=[1, 2, 4, 8], ITEMS=[1, 2, 4],
        ROWS=[0, 1, 2, 4, 8],             # 0: one flat range of vectors; >= 1: a 2-D grid, ROWS rows a block
        FAST=[0, 1],                      # 1: __fdividef (native_divide) for the division
        GRID=[0, 256, 512, 1024, 2048],   # with ROWS >= 1: at most this many blocks, striding over the rows
        constraints=[
            "I % VEC == 0",                                   # whole vectors in a row, each one aligned
            "ROWS <= T",                                      # no block of rows all past the last
            "ROWS == 0 or (ITEMS - 1) * BLOCK * VEC < I",     # each of a block's passes meets the row
            "ROWS * ITEMS * VEC <= 64",                       # at most 64 elements of x held a thread
            # A cap only where it binds: a row's column blocks or more, fewer than the grid would have.
            "GRID == 0 or ROWS >= 1 and (I // VEC + BLOCK * ITEMS - 1) // (BLOCK * ITEMS) <= GRID"
            " < (T + ROWS - 1) // ROWS * ((I // VEC + BLOCK * ITEMS - 1) // (BLOCK * ITEMS))",
        ]),
    key=lambda x: {"T": ktune.bucket(x.shape[0]), "I": x.shape[1] // 2, "dtype": x.dtype.name},
    # KI: the row's width as a compile-time constant (the key's I: one program a width, as it is one record);
    # IDX64: 64-bit indices only where x has 2^31 elements or more (CUDA; glu.cuh).
    defines=lambda x: {"DTYPE_F16": int(x.dtype == np.float16),
                       "DTYPE_BF16": int(np.dtype(x.dtype).name == "bfloat16"),
                       "KI": x.shape[1] // 2, "IDX64": int(x.size >= 2**31)},
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
    block, rows = kernel["BLOCK"], kernel["ROWS"]
    per_block, vectors = block * kernel["ITEMS"], inter // kernel["VEC"]
    if rows == 0:
        grid: int | tuple[int, int] = ktune.cdiv(tokens * vectors, per_block)
    else:
        columns, groups, cap = ktune.cdiv(vectors, per_block), ktune.cdiv(tokens, rows), kernel["GRID"]
        grid = (columns, min(groups, MAX_GRID_Y, max(1, cap // columns) if cap else groups))
    # T as the kernel's 64-bit integer; I a Python int, which the launch passes as an int32
    kernel.launch(grid=grid, block=block, args=[out, x, np.int64(tokens), inter])
    return out
