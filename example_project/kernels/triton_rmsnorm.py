"""RMSNorm written in Triton, as a pytest-ktune target: the kernel a PyTorch team writes, and its block size,
warps and pipeline stages as the space.

Run with ``pytest --ktune --ktune-backend triton`` (on a GPU; on a CPU with ``TRITON_INTERPRET=1`` set, in
Triton's interpreter: correctness only, its timings are no GPU's).
"""

from __future__ import annotations

import os
from typing import Any

import torch
import triton
import triton.language as tl

import ktune
from example_project.kernels.rmsnorm import rmsnorm_reference

# Triton's interpreter runs each program in Python: the large shapes are for a GPU.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _rmsnorm_kernel(X, W, Y, N, eps, BLOCK_SIZE: tl.constexpr):  # noqa: PLR0917 (a kernel's arguments)
    """One program per row: the mean of squares over the row in BLOCK_SIZE chunks, then the row scaled."""
    row = tl.program_id(0).to(tl.int64)
    X += row * N
    Y += row * N
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, N, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for start in range(0, N, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        x = tl.load(X + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(Y + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)


def _case(t: int, h: int, dtype: str) -> ktune.Case:
    return ktune.Case(x=ktune.Tensor((t, h), dtype), w=ktune.Tensor((h,), dtype, init="positive"), eps=1e-6)


def _dtype(x: Any) -> str:
    """A dtype's name, for a case's tensor (numpy's dtype) and a torch tensor alike."""
    return str(x.dtype).removeprefix("torch.")


@ktune.target(
    sources={"triton": _rmsnorm_kernel},
    default={"BLOCK_SIZE": 1024, "num_warps": 4, "num_stages": 2},
    space=ktune.Space(BLOCK_SIZE=[256, 512, 1024, 2048, 4096, 8192], num_warps=[1, 2, 4, 8, 16],
                      num_stages=[1, 2, 3], constraints=["BLOCK_SIZE >= 32 * num_warps", "BLOCK_SIZE <= 2 * H"]),
    key=lambda x: {"T": ktune.bucket(x.shape[0]), "H": x.shape[1], "dtype": _dtype(x)},
    cases=[
        *(_case(t, 4096, dt) for dt in ("float16", "float32") for t in ((1, 4) if INTERPRETED else (1, 16))),
        *(() if INTERPRETED else (_case(1024, 4096, "float16"), _case(4096, 8192, "float16"),
                                  _case(1024, 4096, "bfloat16"))),
    ],
    reference=rmsnorm_reference,
    bytes_moved=lambda x, w: 2 * x.nbytes + w.nbytes,
)
def triton_rmsnorm(kernel: ktune.Kernel, x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    rows, hidden = x.shape
    y: torch.Tensor = kernel.empty_like(x)
    kernel.launch(grid=(rows,), args=[x, w, y, hidden, eps])
    return y
