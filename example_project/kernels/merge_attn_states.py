"""Merging two partial attention states by their log-sum-exp, as a pytest-ktune target.

Cascade and split-KV attention compute attention over a shared prefix and over
the rest (the suffix) separately, each with the log-sum-exp (LSE) of its
scores; this kernel merges the two. Layout (all arrays contiguous):

* ``prefix_out``, ``suffix_out``: ``[T, NH, D]``, fp16, bf16 (CUDA only) or fp32;
* ``prefix_lse``, ``suffix_lse``: ``[NH, T]``, float32 (head-major, as vLLM lays them out).

For every token ``t`` and head ``h``, with ``p = prefix_lse[h, t]`` and
``s = suffix_lse[h, t]``, either of them set to ``-inf`` where it is ``+inf``
or ``-inf`` (an empty side gets weight 0, as vLLM does), and ``m = max(p, s)``::

    out[t, h, :]  = (e^(p-m) prefix_out[t, h, :] + e^(s-m) suffix_out[t, h, :]) / (e^(p-m) + e^(s-m))
    out_lse[h, t] = log(e^(p-m) + e^(s-m)) + m

A pair whose two sides are both empty has no defined result (NaN, as in vLLM);
the cases never hold one. ``merge_attn_states(prefix_out, prefix_lse,
suffix_out, suffix_lse)`` returns ``(out, out_lse)``.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import numpy as np

import ktune


@ktune.array_api
def merge_attn_states_reference(prefix_out: Any, prefix_lse: Any, suffix_out: Any,
                                suffix_lse: Any) -> tuple[Any, Any]:
    """(merged output [T, NH, D], merged LSE [NH, T]) in float64, in whichever array library holds
    the inputs."""
    xp = ktune.array_namespace(prefix_out, prefix_lse)
    p = xp.astype(prefix_lse, xp.float64, copy=False)
    s = xp.astype(suffix_lse, xp.float64, copy=False)
    empty = xp.full_like(p, -math.inf)
    p = xp.where(xp.isinf(p), empty, p)
    s = xp.where(xp.isinf(s), empty, s)
    m = xp.maximum(p, s)
    pe, se = xp.exp(p - m), xp.exp(s - m)
    total = pe + se
    out = (xp.astype(prefix_out, xp.float64, copy=False) * (pe / total).T[:, :, None]
           + xp.astype(suffix_out, xp.float64, copy=False) * (se / total).T[:, :, None])
    return out, xp.log(total) + m


def lse_values(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype[Any], *,
               empty_at: int = -1) -> np.ndarray:
    """LSE values of a realistic spread; with ``empty_at`` in [0, 8), every eighth element (flat
    index = ``empty_at`` mod 8) is an empty side: ``+inf`` and ``-inf`` in turn."""
    out = (rng.standard_normal(shape) * 4.0 + 2.0).astype(dtype)
    if empty_at >= 0:
        flat = out.reshape(-1)
        idx = np.arange(empty_at, flat.size, 8)
        flat[idx] = np.where(np.arange(idx.size) % 2 == 0, np.inf, -np.inf)
    return out


# Prefix and suffix are empty at different positions, so no pair has both sides empty.
_PREFIX_EMPTY = partial(lse_values, empty_at=3)
_SUFFIX_EMPTY = partial(lse_values, empty_at=6)


def _case(t: int, nh: int, d: int, dtype: str, *, empty: bool = False, **kw: Any) -> ktune.Case:
    lse_p = ktune.Tensor((nh, t), "float32", init=_PREFIX_EMPTY if empty else lse_values)
    lse_s = ktune.Tensor((nh, t), "float32", init=_SUFFIX_EMPTY if empty else lse_values)
    return ktune.Case(prefix_out=ktune.Tensor((t, nh, d), dtype), prefix_lse=lse_p,
                      suffix_out=ktune.Tensor((t, nh, d), dtype), suffix_lse=lse_s,
                      id=f"T{t}-NH{nh}-D{d}-{dtype}" + ("-empty" if empty else ""), **kw)


@ktune.target(
    sources={"cuda": "merge_attn_states.cu", "opencl": "merge_attn_states.cl"},
    # What serving stacks ship as the portable path: vLLM's Triton merge_attn_states runs one
    # program of 4 warps (128 threads) per (token, head), one element per thread. Its CUDA
    # kernel (128 threads, 16-byte packs, 8 heads per block) is a point of the space.
    default={"BLOCK": 128, "VEC": 1, "HEADS": 1},
    space=ktune.Space(BLOCK=[32, 64, 128, 256, 512], VEC=[1, 2, 4, 8], HEADS=[1, 2, 4, 8, 16],
                      constraints=["D % VEC == 0"]),
    key=lambda prefix_out: {"T": ktune.bucket(prefix_out.shape[0]), "NH": prefix_out.shape[1],
                            "D": prefix_out.shape[2], "dtype": prefix_out.dtype.name},
    defines=lambda prefix_out: {"DTYPE_F16": int(prefix_out.dtype == np.float16),
                                "DTYPE_BF16": int(np.dtype(prefix_out.dtype).name == "bfloat16")},
    cases=[
        _case(7, 32, 128, "float16", empty=True),
        _case(64, 32, 128, "float32", empty=True),
        _case(16, 8, 64, "float32"),
        _case(1, 64, 128, "float16", backends=["cuda"]),
        _case(256, 32, 128, "float16", empty=True, backends=["cuda"]),
        _case(4096, 64, 128, "float16", backends=["cuda"]),
        _case(16384, 32, 128, "float16", backends=["cuda"]),
        _case(16384, 64, 128, "float16", empty=True, backends=["cuda"]),
        # bfloat16 (ml_dtypes arrays): CUDA only, OpenCL has no bfloat16.
        _case(1, 64, 128, "bfloat16", backends=["cuda"]),
        _case(4096, 64, 128, "bfloat16", empty=True, backends=["cuda"]),
    ],
    reference=merge_attn_states_reference,
    # Both partial outputs and both LSEs read; the merged output and LSE written.
    bytes_moved=lambda prefix_out, prefix_lse: 3 * prefix_out.nbytes + 3 * prefix_lse.nbytes,
    flops=lambda prefix_out: 3 * prefix_out.size,
)
def merge_attn_states(kernel: ktune.Kernel, prefix_out: Any, prefix_lse: Any, suffix_out: Any,
                      suffix_lse: Any) -> tuple[Any, Any]:
    tokens, heads, d = prefix_out.shape
    out = kernel.empty_like(prefix_out)
    out_lse = kernel.empty((heads, tokens), np.float32)
    kernel.launch(grid=ktune.cdiv(tokens * heads, int(kernel["HEADS"])), block=kernel["BLOCK"],
                  args=[out, out_lse, prefix_out, prefix_lse, suffix_out, suffix_lse,
                        np.int32(tokens), np.int32(heads), np.int32(d)])
    return out, out_lse
