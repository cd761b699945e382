"""The launch-bound floor of a device under bench_kernels.py's timers: what no kernel can beat.

Two kernels of one thread: an empty one (the cost of a launch in a CUDA graph, or of an OpenCL
enqueue) and a one-element copy (a launch that touches memory: one load, one store). They are timed
through ``measure`` with the run's own configuration, as the kernels' columns are; with torch, the
one-element copy is also timed as ``dst.copy_(src)`` under torch's graph timer, the floor of the torch
and Liger columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pytest_ktune.backends import Backend, Launch
from pytest_ktune.measure.bench import BenchConfig, Measurement, measure

SOURCES = {
    "cuda": """
extern "C" __global__ void floor_empty() {}
extern "C" __global__ void floor_copy1(float* __restrict__ dst, const float* __restrict__ src) { dst[0] = src[0]; }
""",
    "opencl": """
__kernel void floor_empty(void) {}
__kernel void floor_copy1(__global float* restrict dst, __global const float* restrict src) { dst[0] = src[0]; }
""",
}


@dataclass(frozen=True)
class Floor:
    """The floor's timings (None where one could not be timed) and why not."""

    empty: Measurement | None
    copy1: Measurement | None
    torch_copy1: Measurement | None = None
    error: str = ""


def measure_floor(backend: Backend, cfg: BenchConfig, *, flush: bool) -> Floor:
    """The empty kernel and the one-element copy on ``backend``, each timed by ``measure``."""
    source = SOURCES.get(backend.name)
    if source is None:
        return Floor(None, None, error=f"no floor kernels for the {backend.name} backend")
    suffix = ".cu" if backend.name == "cuda" else ".cl"
    try:  # the source is held here; the file name only names it in messages
        program = backend.compile(source, {}, filename=str(Path(__file__).with_name(f"floor{suffix}")))
        src = backend.to_device(np.ones(1, np.float32))
        dst = backend.empty((1,), np.float32)
        empty = measure(backend, [[Launch(program.function("floor_empty"), (1,), (1,), ())]], cfg, flush=flush)
        copy1 = measure(backend, [[Launch(program.function("floor_copy1"), (1,), (1,), (dst, src))]], cfg,
                        flush=flush)
        backend.synchronize()
        if float(backend.to_host(dst)[0]) != 1.0:
            return Floor(empty, None, error="the one-element copy did not copy")
        return Floor(empty, copy1)
    except Exception as exc:  # the floor is context for the rows: its failure must not end the run
        return Floor(None, None, error=f"{type(exc).__name__}: {str(exc).strip()[:200]}")


def torch_copy1(torch: Any, device: Any) -> tuple[Any, dict[str, Any]]:
    """``dst.copy_(src)`` of one float, as a call and its keyword arguments for torch's graph timer."""
    src = torch.ones(1, dtype=torch.float32, device=device)
    dst = torch.empty(1, dtype=torch.float32, device=device)

    def copy1(dst: Any, src: Any) -> Any:
        return dst.copy_(src)

    return copy1, {"dst": dst, "src": src}
