"""A 2-D convolution (an image filter: not an LLM-serving kernel) as a pytest-ktune target.

The filter lives in constant memory (``kernel.constant``), each block stages its input tile in dynamic
shared memory sized from the parameters (``kernel.launch(..., shared=...)``), and the rate is counted
in GFLOP/s (``flops=``). The CUDA template tunes one parameter more than the OpenCL one (``READ_ONLY``:
loads through the read-only cache), declared in ``per_backend``; the tolerance grows with the filter's
size (each output sums that many products).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ktune


@ktune.array_api
def conv2d_reference(image: Any, filt: Any) -> Any:
    """The cross-correlation of ``image`` with ``filt`` ("valid": no padding), in float64, in whichever
    array library holds them (on the GPU under the gate)."""
    xp = ktune.array_namespace(image, filt)
    fh, fw = filt.shape
    h, w = image.shape[0] - fh + 1, image.shape[1] - fw + 1
    out = xp.zeros((h, w), dtype=xp.float64)
    for i in range(fh):
        for j in range(fw):
            out += filt[i, j] * image[i:i + h, j:j + w]
    return out


def _case(h: int, w: int, f: int, **kw: Any) -> ktune.Case:
    return ktune.Case(image=ktune.Tensor((h + f - 1, w + f - 1), "float32"),
                      filt=ktune.Tensor((f, f), "float32", init="uniform"), **kw)


def _tile_bytes(params: Any, fh: int, fw: int) -> int:
    """The input tile a block stages in shared memory: its outputs and the filter's halo, in floats."""
    rows = int(params["BLOCK_Y"]) * int(params["TILE_Y"]) + fh - 1
    cols = int(params["BLOCK_X"]) * int(params["TILE_X"]) + fw - 1
    return 4 * rows * cols


def _outputs(image: Any, filt: Any) -> int:
    return int((image.shape[0] - filt.shape[0] + 1) * (image.shape[1] - filt.shape[1] + 1))


@ktune.target(
    sources={"cuda": "conv2d.cu", "opencl": "conv2d.cl"},
    # A hand-written first version: 16 x 16 threads, one output each.
    default={"BLOCK_X": 16, "BLOCK_Y": 16, "TILE_X": 1, "TILE_Y": 1},
    space=ktune.Space(BLOCK_X=[16, 32, 64], BLOCK_Y=[1, 2, 4, 8, 16], TILE_X=[1, 2, 4], TILE_Y=[1, 2, 4],
                      constraints=["32 <= BLOCK_X * BLOCK_Y <= 1024",
                                   # the tile must fit the 48 KiB of shared memory any block may use
                                   "(BLOCK_Y * TILE_Y + F - 1) * (BLOCK_X * TILE_X + F - 1) <= 12288"]),
    per_backend={"cuda": ktune.BackendSpace(READ_ONLY=[0, 1], default={"READ_ONLY": 0})},
    key=lambda image, filt: {"H": image.shape[0] - filt.shape[0] + 1, "W": image.shape[1] - filt.shape[1] + 1,
                             "F": filt.shape[0]},
    defines=lambda filt: {"FH": filt.shape[0], "FW": filt.shape[1]},
    cases=[
        # Small enough for a CPU through OpenCL (PoCL), where local memory and barriers are slow.
        _case(128, 128, 5),
        _case(128, 128, 17),
        _case(256, 256, 9),
        _case(1024, 1024, 9, backends=["cuda"]),
        _case(4096, 4096, 5, backends=["cuda"]),
        _case(4096, 4096, 17, backends=["cuda"]),  # Kernel Tuner's convolution example
    ],
    reference=conv2d_reference,
    # Each output sums F * F products: rounding errors grow with the square root of that.
    tolerance=lambda filt: ktune.Tolerance.for_sum(filt.shape[0] * filt.shape[1]),
    bytes_moved=lambda image, filt: image.nbytes + filt.nbytes + 4 * _outputs(image, filt),
    flops=lambda image, filt: 2 * filt.size * _outputs(image, filt),
)
def conv2d(kernel: ktune.Kernel, image: Any, filt: Any) -> Any:
    fh, fw = filt.shape
    h, w = image.shape[0] - fh + 1, image.shape[1] - fw + 1
    out = kernel.empty((h, w), np.float32)
    bx, by = int(kernel["BLOCK_X"]), int(kernel["BLOCK_Y"])
    per_block = (bx * int(kernel["TILE_X"]), by * int(kernel["TILE_Y"]))
    # On CUDA the filter goes to the source's __constant__ array and is left out of the arguments; on
    # OpenCL it is the __constant buffer argument it stands for.
    weights = kernel.constant("filter", filt)
    kernel.launch(grid=ktune.grid((w, h), per_block), block=(bx, by),
                  args=[out, image, weights, np.int32(h), np.int32(w)],
                  shared=lambda params: _tile_bytes(params, fh, fw))
    return out
