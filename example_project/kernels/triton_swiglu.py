"""SiLU-and-mul (SwiGLU's activation) written in Triton, as a pytest-ktune target: a 2-D grid of rows by
column blocks, its block size and warps as the space. Runs with ``--ktune-backend triton``."""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

import ktune
from example_project.kernels.silu_and_mul import silu_and_mul_reference

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # the interpreter runs each program in Python


@triton.jit
def _silu_and_mul_kernel(X, Y, N, BLOCK_SIZE: tl.constexpr):
    """y[r, c] = silu(x[r, c]) * x[r, N + c] (N: the intermediate size), for one row and one block of columns
    per program."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = cols < N
    gate = tl.load(X + row * 2 * N + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(X + row * 2 * N + N + cols, mask=mask, other=0.0).to(tl.float32)
    y = gate * tl.sigmoid(gate) * up
    tl.store(Y + row * N + cols, y.to(Y.dtype.element_ty), mask=mask)


def _case(t: int, inter: int, dtype: str) -> ktune.Case:
    return ktune.Case(x=ktune.Tensor((t, 2 * inter), dtype))


@ktune.target(
    sources={"triton": _silu_and_mul_kernel},
    default={"BLOCK_SIZE": 1024, "num_warps": 4},
    space=ktune.Space(BLOCK_SIZE=[128, 256, 512, 1024, 2048, 4096], num_warps=[1, 2, 4, 8],
                      constraints=["BLOCK_SIZE >= 32 * num_warps"]),
    key=lambda x: {"T": ktune.bucket(x.shape[0]), "I": x.shape[1] // 2, "dtype": str(x.dtype).removeprefix("torch.")},
    cases=[
        *(_case(t, 2048, dt) for dt in ("float16", "float32") for t in ((1, 4) if INTERPRETED else (1, 16))),
        *(() if INTERPRETED else (_case(256, 14336, "float16"), _case(8192, 14336, "float16"),
                                  _case(16, 14336, "bfloat16"))),
    ],
    reference=silu_and_mul_reference,
    bytes_moved=lambda x: 3 * x.nbytes // 2,
)
def triton_silu_and_mul(kernel: ktune.Kernel, x: torch.Tensor) -> torch.Tensor:
    rows, inter = x.shape[0], x.shape[1] // 2
    y: torch.Tensor = kernel.empty((rows, inter), x.dtype)
    kernel.launch(grid=(rows, triton.cdiv(inter, kernel["BLOCK_SIZE"])), args=[x, y, inter])
    return y
