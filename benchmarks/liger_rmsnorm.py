"""Liger-Kernel's own Triton RMSNorm forward kernel, imported from the ``liger-kernel`` package (not copied),
wrapped as a pytest-ktune target the way a user would: its ``BLOCK_SIZE`` and ``num_warps`` as the space,
Llama's casting mode and a weight fixed as its other constexprs. ``benchmarks/triton_liger.py`` tunes it and
compares with Liger's own heuristic (``calculate_settings``).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from liger_kernel.ops.rms_norm import _rms_norm_forward_kernel

import ktune
from example_project.kernels.rmsnorm import rmsnorm_reference

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # Triton's interpreter: small shapes only
SHAPES = ((1, 1024), (4, 1024)) if INTERPRETED else ((1, 4096), (64, 4096), (1024, 4096), (4096, 4096),
                                                     (4096, 8192))


@ktune.target(
    sources={"triton": _rms_norm_forward_kernel},
    # One block holds a whole row (Liger's kernel has no loop): BLOCK_SIZE from the row's size up to twice it.
    space=ktune.Space(BLOCK_SIZE=[1024, 2048, 4096, 8192, 16384], num_warps=[1, 2, 4, 8, 16, 32],
                      constraints=["BLOCK_SIZE >= H", "BLOCK_SIZE <= 2 * H"]),
    default={"BLOCK_SIZE": 8192, "num_warps": 16},
    defines=lambda: {"casting_mode": 0, "elementwise_affine": True},  # Llama's casting (rstd in fp32), a weight
    key=lambda x: {"T": ktune.bucket(x.shape[0]), "H": x.shape[1], "dtype": str(x.dtype).removeprefix("torch.")},
    cases=[ktune.Case(x=ktune.Tensor((t, h), "float16"), w=ktune.Tensor((h,), "float16", init="positive"), eps=1e-6)
           for t, h in SHAPES],
    reference=rmsnorm_reference,
    bytes_moved=lambda x, w: 2 * x.nbytes + w.nbytes,
)
def liger_rmsnorm(kernel: ktune.Kernel, x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> Any:
    rows, cols = x.shape
    y = kernel.empty_like(x)
    rstd = kernel.empty((rows,), torch.float32)
    kernel.launch(grid=(rows,), args=[y, y.stride(0), x, x.stride(0), w, w.stride(0), rstd, rstd.stride(0), cols,
                                      eps, 0.0])
    return y
