"""MoE top-k softmax gating, as a pytest-ktune target.

The router step of a mixture-of-experts layer (Mixtral: 8 experts, top 2; Qwen-MoE and DeepSeek:
64 to 256 experts, top 6 or 8).

* ``gating``: ``[T, E]`` float32 router logits, contiguous;
* ``topk``: ``k``, at most ``E``; ``renormalize``: whether the k weights are rescaled to sum to 1.

For each token, ``p = softmax(gating[t])`` over all ``E`` experts (in float32, after subtracting the
row's max). The k experts with the largest logits are chosen, in descending order of logit, ties
broken by the lower expert index (so the order is that of ``p``, but decided on the exact inputs).
Then ``topk_weights[t, i] = p[topk_ids[t, i]]``, divided by their sum when ``renormalize`` is true
(Mixtral's router does; Qwen-MoE's, with ``norm_topk_prob=False``, does not).

The function, ``moe_topk_softmax(gating, topk, renormalize=True)``, returns
``(topk_weights, topk_ids)``: ``[T, k]`` float32 and ``[T, k]`` int32. The ids are compared exactly.
In torch: ``w, ids = gating.softmax(-1).topk(k)``, then ``w / w.sum(-1, keepdim=True)`` when
renormalising (``topk`` leaves the order of equal values unspecified).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ktune


def moe_topk_softmax_reference(gating: np.ndarray, topk: int,
                               renormalize: bool) -> tuple[np.ndarray, np.ndarray]:
    """(weights in float64, ids as int32)."""
    x = gating.astype(np.float64)
    p = np.exp(x - x.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    # A stable sort of the negated logits: descending, equal logits in index order.
    ids = np.argsort(-gating, axis=-1, kind="stable")[:, :topk]
    weights = np.take_along_axis(p, ids, axis=-1)
    if renormalize:
        weights /= weights.sum(axis=-1, keepdims=True)
    return weights, ids.astype(np.int32)


def _key(gating: Any, topk: int) -> dict[str, Any]:
    where = f"target moe_topk_softmax ({__file__})"
    if len(gating.shape) != 2 or np.dtype(gating.dtype) != np.float32:
        raise ktune.KtuneError(f"gating is {np.dtype(gating.dtype)} of shape {tuple(gating.shape)}",
                               where=where, hint="pass the router logits as float32 [tokens, experts]")
    if not 1 <= topk <= gating.shape[1]:
        raise ktune.KtuneError(f"topk={topk} is not between 1 and the {gating.shape[1]} experts",
                               where=where, hint="choose topk between 1 and the number of experts")
    return {"T": ktune.bucket(gating.shape[0]), "E": gating.shape[1], "K": topk}


def _case(t: int, e: int, k: int, renormalize: bool, **kw: Any) -> ktune.Case:
    return ktune.Case(gating=ktune.Tensor((t, e), "float32"), topk=k, renormalize=renormalize, **kw)


@ktune.target(
    sources={"cuda": "moe_topk_softmax.cu", "opencl": "moe_topk_softmax.cl"},
    # What serving stacks ship for expert counts their fused kernel does not cover: one row per
    # block of 256 threads, scalar loads (there as a softmax kernel and a top-k kernel, here one).
    default={"BLOCK": 256, "TPR": 256, "VPT": 1},
    space=ktune.Space(BLOCK=[32, 64, 128, 256, 512, 1024], TPR=[1, 2, 4, 8, 16, 32, 64, 128, 256],
                      VPT=[1, 2, 4, 8],
                      constraints=["TPR <= BLOCK", "E % VPT == 0",
                                   # logits a thread holds in registers: at most 32
                                   "VPT * ((E // VPT + TPR - 1) // TPR) <= 32"]),
    key=_key,
    defines=lambda gating, topk, renormalize: {"NUM_EXPERTS": gating.shape[1], "TOPK": topk,
                                               "RENORM": int(renormalize)},
    cases=[
        _case(16, 8, 2, True),
        _case(5, 64, 6, False),
        _case(3, 256, 8, True),
        _case(1, 256, 8, True, backends=["cuda"]),
        _case(16384, 8, 2, True, backends=["cuda"]),
        _case(4096, 64, 6, False, backends=["cuda"]),
        _case(16384, 128, 8, True, backends=["cuda"]),
        _case(16384, 256, 8, False, backends=["cuda"]),
    ],
    reference=moe_topk_softmax_reference,
    tolerance={"float32": ktune.Tolerance(norm=1e-5, atol=1e-6, rtol=1e-5),
               "int32": ktune.Tolerance(norm=0.0, atol=0.0, rtol=0.0)},
    # logits read; k weights and k ids written per token.
    bytes_moved=lambda gating, topk: gating.nbytes + 8 * gating.shape[0] * topk,
    # For the tuner's priors: VPT is how many logits a thread loads at once, and the threads share
    # out the logits (the k outputs per row are far fewer).
    vectors=["VPT"],
    work=lambda gating: gating.size,
)
def moe_topk_softmax(kernel: ktune.Kernel, gating: Any, topk: int,
                     renormalize: bool = True) -> tuple[Any, Any]:
    tokens = gating.shape[0]
    weights = kernel.empty((tokens, topk), np.float32)
    ids = kernel.empty((tokens, topk), np.int32)
    rows_per_block = int(kernel["BLOCK"]) // int(kernel["TPR"])
    kernel.launch(grid=ktune.cdiv(tokens, rows_per_block), block=kernel["BLOCK"],
                  args=[weights, ids, gating, np.int32(tokens)])
    return weights, ids
