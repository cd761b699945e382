"""Rotary position embedding, NeoX style (rotate halves), as a pytest-ktune target.

Layout (all arrays contiguous, rotated in place over the whole head dimension):

* ``positions``: ``[T]``, int32 or int64, each in ``[0, max_pos)``;
* ``query``: ``[T, Hq, D]`` and ``key``: ``[T, Hk, D]`` (``Hk <= Hq`` for GQA), fp16, bf16 (CUDA
  only) or fp32;
* ``cos``, ``sin``: ``[max_pos, D/2]``, the dtype of ``query``: ``cos[p, i] = cos(p * f_i)``.

For every token ``t`` (``p = positions[t]``), head and ``i < D/2``, with
``a = v[i]`` and ``b = v[i + D/2]``::

    v[i]       = a * cos[p, i] - b * sin[p, i]
    v[i + D/2] = b * cos[p, i] + a * sin[p, i]

The function, ``rotary_neox(positions, query, key, cos=cos, sin=sin)``, updates
``query`` and ``key`` in place and returns ``(query, key)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ktune

ROPE_BASE = 10000.0


def _angles(shape: tuple[int, ...]) -> np.ndarray:
    max_pos, half = shape
    inv_freq = ROPE_BASE ** (-np.arange(half, dtype=np.float64) / half)
    out: np.ndarray = np.arange(max_pos, dtype=np.float64)[:, None] * inv_freq[None, :]
    return out


def cos_cache(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """A real cosine cache (the generator is unused: the cache is deterministic)."""
    out: np.ndarray = np.cos(_angles(shape)).astype(dtype)
    return out


def sin_cache(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """A real sine cache (the generator is unused: the cache is deterministic)."""
    out: np.ndarray = np.sin(_angles(shape)).astype(dtype)
    return out


@ktune.array_api
def rotary_neox_reference(positions: Any, query: Any, key: Any, cos: Any, sin: Any) -> tuple[Any, Any]:
    """(rotated query, rotated key) in float64, in whichever array library holds the inputs."""
    xp = ktune.array_namespace(query, cos)
    c = xp.take(xp.astype(cos, xp.float64, copy=False), positions, axis=0)[:, None, :]
    s = xp.take(xp.astype(sin, xp.float64, copy=False), positions, axis=0)[:, None, :]

    def rotate(v: Any) -> Any:
        v64 = xp.astype(v, xp.float64, copy=False)
        half = v.shape[-1] // 2
        a, b = v64[..., :half], v64[..., half:]
        return xp.concat([a * c - b * s, b * c + a * s], axis=-1)

    return rotate(query), rotate(key)


def _case(t: int, heads: tuple[int, int], d: int, dtype: str, *, pos: str, max_pos: int = 8192,
          **kw: Any) -> ktune.Case:
    hq, hk = heads
    return ktune.Case(positions=ktune.Tensor((t,), pos, init="int", low=0, high=max_pos),
                      query=ktune.Tensor((t, hq, d), dtype), key=ktune.Tensor((t, hk, d), dtype),
                      cos=ktune.Tensor((max_pos, d // 2), dtype, init=cos_cache),
                      sin=ktune.Tensor((max_pos, d // 2), dtype, init=sin_cache), **kw)


@ktune.target(
    sources={"cuda": "rotary_neox.cu", "opencl": "rotary_neox.cl"},
    # What serving stacks ship: one block of 512 threads per token, scalar loads.
    default={"BLOCK": 512, "VEC": 1, "TOKENS": 1},
    space=ktune.Space(BLOCK=[64, 128, 256, 512, 1024], VEC=[1, 2, 4, 8], TOKENS=[1, 2, 4, 8],
                      constraints=["D % (2 * VEC) == 0"]),
    key=lambda positions, query, key: {
        "T": ktune.bucket(query.shape[0]), "Hq": query.shape[1], "Hk": key.shape[1],
        "D": query.shape[2], "dtype": query.dtype.name, "pos": positions.dtype.name},
    defines=lambda positions, query: {"DTYPE_F16": int(query.dtype == np.float16),
                                      "DTYPE_BF16": int(np.dtype(query.dtype).name == "bfloat16"),
                                      "POS_I64": int(positions.dtype == np.int64)},
    cases=[
        _case(8, (32, 8), 128, "float16", pos="int64"),
        _case(96, (32, 8), 128, "float16", pos="int32"),
        _case(8, (32, 8), 128, "float32", pos="int32"),
        _case(96, (16, 16), 64, "float32", pos="int64"),
        _case(4096, (32, 8), 128, "float16", pos="int64", backends=["cuda"]),
        _case(16384, (32, 8), 128, "float16", pos="int64", backends=["cuda"]),
        _case(16384, (64, 8), 128, "float16", pos="int32", max_pos=32768, backends=["cuda"]),
        # bfloat16 (ml_dtypes arrays): CUDA only, OpenCL has no bfloat16.
        _case(8, (32, 8), 128, "bfloat16", pos="int64", backends=["cuda"]),
        _case(4096, (32, 8), 128, "bfloat16", pos="int64", backends=["cuda"]),
    ],
    reference=rotary_neox_reference,
    # query and key read and written; positions and one cos and one sin row per token read.
    bytes_moved=lambda positions, query, key, cos: (
        2 * (query.nbytes + key.nbytes) + positions.nbytes
        + 2 * query.shape[0] * cos.shape[1] * cos.dtype.itemsize),
    flops=lambda query, key: 3 * (query.size + key.size),
)
def rotary_neox(kernel: ktune.Kernel, positions: Any, query: Any, key: Any, *, cos: Any,
                sin: Any) -> tuple[Any, Any]:
    tokens, hq, d = query.shape
    hk = key.shape[1]
    kernel.launch(grid=ktune.cdiv(tokens, int(kernel["TOKENS"])), block=kernel["BLOCK"],
                  args=[query, key, cos, sin, positions, np.int32(tokens), np.int32(hq),
                        np.int32(hk), np.int32(d)])
    return query, key
