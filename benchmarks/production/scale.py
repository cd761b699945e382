"""``out = x * SCALE`` as a target: what ``benchmarks/production_call_cpu.py`` compares with pyopencl's ``x * 2``."""

from __future__ import annotations

from typing import Any

import numpy as np

import ktune


@ktune.target(
    sources={"opencl": "scale.cl"},
    space=ktune.Space(SCALE=[1, 2, 3], BLOCK=[32, 64, 128, 256],
                      GROUPS=[8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]),
    default={"SCALE": 1, "BLOCK": 64, "GROUPS": 32},
    key=lambda x: {"N": ktune.bucket(x.shape[0])},
    cases=[ktune.Case(x=ktune.Tensor((n,), "float32")) for n in (1000, 10_000, 100_000)],
    reference=lambda x: x * 2,
)
def scale(kernel: ktune.Kernel, x: Any) -> Any:
    out = kernel.empty_like(x)
    n = x.shape[0]
    block = kernel["BLOCK"]
    kernel.launch(grid=min(kernel["GROUPS"], ktune.cdiv(n, block)), block=block, args=[out, x, np.int32(n)])
    return out
