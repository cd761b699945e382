"""Writing new keys and values into a paged KV cache (flash layout), as a pytest-ktune target.

Every serving stack with paged attention runs this once per layer and step:
the keys and values computed for the step's tokens go to the cache slots the
scheduler assigned them. Layout (all arrays contiguous):

* ``key``, ``value``: ``[T, NKV, D]``, fp16, bf16 (CUDA only) or fp32;
* ``key_cache``, ``value_cache``: ``[num_blocks, block_size, NKV, D]``, the dtype of ``key``;
* ``slot_mapping``: ``[T]`` int64, ``slot = block * block_size + offset``; ``-1`` marks a
  padding token, which writes nothing.

``key_cache.reshape(-1, NKV, D)[slot_mapping[t]] = key[t]`` (and the same for
values) for every token with a slot. The caches are updated in place and
returned as ``(key_cache, value_cache)``; slots no token maps to keep their
values, so the check covers what the kernel must not touch as well.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

import ktune


@ktune.array_api
def reshape_and_cache_flash_reference(key: Any, value: Any, key_cache: Any, value_cache: Any,
                                      slot_mapping: Any) -> tuple[Any, Any]:
    """(key cache, value cache) after the writes (a copy is exact in any wider dtype), in whichever
    array library holds the inputs."""
    xp = ktune.array_namespace(key, key_cache)
    _, nkv, d = key.shape
    kc = xp.reshape(xp.asarray(key_cache, copy=True), (-1, nkv, d))
    vc = xp.reshape(xp.asarray(value_cache, copy=True), (-1, nkv, d))
    valid = slot_mapping >= 0
    kc[slot_mapping[valid]] = key[valid]
    vc[slot_mapping[valid]] = value[valid]
    return xp.reshape(kc, key_cache.shape), xp.reshape(vc, value_cache.shape)


def slots(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype[Any], *, num_slots: int,
          padding: int = 0) -> np.ndarray:
    """Distinct cache slots in random order (as a scheduler hands out free blocks), the last
    ``padding`` tokens set to -1."""
    (t,) = shape
    if t > num_slots:
        raise ValueError(f"{t} tokens do not fit in {num_slots} cache slots")
    out = rng.permutation(num_slots)[:t].astype(dtype)
    if padding:
        out[t - padding:] = -1
    return out


BLOCK_SIZE = 16  # tokens per cache block, vLLM's default


def _case(t: int, nkv: int, d: int, dtype: str, *, num_blocks: int, padding: int = 0,
          **kw: Any) -> ktune.Case:
    cache = (num_blocks, BLOCK_SIZE, nkv, d)
    init = partial(slots, num_slots=num_blocks * BLOCK_SIZE, padding=padding)
    return ktune.Case(key=ktune.Tensor((t, nkv, d), dtype), value=ktune.Tensor((t, nkv, d), dtype),
                      key_cache=ktune.Tensor(cache, dtype), value_cache=ktune.Tensor(cache, dtype),
                      slot_mapping=ktune.Tensor((t,), "int64", init=init),
                      id=f"T{t}-NKV{nkv}-D{d}-{dtype}" + (f"-pad{padding}" if padding else ""), **kw)


@ktune.target(
    sources={"cuda": "reshape_and_cache_flash.cu", "opencl": "reshape_and_cache_flash.cl"},
    # What serving stacks ship: vLLM's reshape_and_cache_flash (and AMD aiter's) launches one block
    # per token with min(NKV * D, 512) threads, one element per thread per step. Newer vLLM copies
    # 16-byte vectors inside that same launch: VEC=8 here, a point of the space.
    default={"BLOCK": 512, "VEC": 1, "TOKENS": 1},
    space=ktune.Space(BLOCK=[64, 128, 256, 512, 1024], VEC=[1, 2, 4, 8], TOKENS=[1, 2, 4, 8],
                      constraints=["D % VEC == 0"]),
    key=lambda key: {"T": ktune.bucket(key.shape[0]), "NKV": key.shape[1], "D": key.shape[2],
                     "dtype": key.dtype.name},
    defines=lambda key: {"DTYPE_F16": int(key.dtype == np.float16),
                         "DTYPE_BF16": int(np.dtype(key.dtype).name == "bfloat16")},
    cases=[
        _case(7, 8, 128, "float16", num_blocks=4, padding=2),
        _case(64, 4, 64, "float32", num_blocks=8),
        _case(48, 8, 128, "float32", num_blocks=16, padding=5),
        _case(1, 8, 128, "float16", num_blocks=64, backends=["cuda"]),
        _case(256, 8, 128, "float16", num_blocks=256, padding=13, backends=["cuda"]),
        _case(4096, 8, 128, "float16", num_blocks=512, backends=["cuda"]),
        _case(16384, 8, 128, "float16", num_blocks=1280, backends=["cuda"]),
        _case(16384, 32, 128, "float16", num_blocks=1280, backends=["cuda"]),
        # bfloat16 (ml_dtypes arrays): CUDA only, OpenCL has no bfloat16.
        _case(1, 8, 128, "bfloat16", num_blocks=64, backends=["cuda"]),
        _case(4096, 8, 128, "bfloat16", num_blocks=512, padding=7, backends=["cuda"]),
    ],
    reference=reshape_and_cache_flash_reference,
    # Keys and values read, and written once each into the caches, and the slots read
    # (padding tokens counted as if they wrote: the count is from shapes, not values).
    bytes_moved=lambda key, value, slot_mapping: 2 * (key.nbytes + value.nbytes) + slot_mapping.nbytes,
)
def reshape_and_cache_flash(kernel: ktune.Kernel, key: Any, value: Any, key_cache: Any, value_cache: Any,
                            *, slot_mapping: Any) -> tuple[Any, Any]:
    tokens, nkv, d = key.shape
    kernel.launch(grid=ktune.cdiv(tokens, int(kernel["TOKENS"])), block=kernel["BLOCK"],
                  args=[key_cache, value_cache, key, value, slot_mapping, np.int32(tokens),
                        np.int32(nkv * d)])
    return key_cache, value_cache
