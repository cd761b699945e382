"""Liger-Kernel's forward ops as its users call them, for the Liger column of bench_kernels.py.

Liger-Kernel (``liger-kernel``, Triton kernels for LLM training and serving) is what a PyTorch user
might pick instead of the example's RMSNorm, fused add + RMSNorm, SwiGLU and GEGLU. Each op here takes
the target's arguments, turns them into Liger's once (``prepare``, outside the timed region: the
GLUs take gate and up as two contiguous tensors where the target takes one ``[T, 2I]`` tensor), and
calls Liger's autograd function the way its modules do (``LigerRMSNorm``, ``LigerSwiGLUMLP``,
``LigerGEGLUMLP``, ``LigerFusedAddRMSNorm``: default offset and casting mode).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any


@dataclass(frozen=True)
class LigerOp:
    """One target's op in Liger-Kernel: ``call(**prepare(target_args))`` returns the target's outputs."""

    prepare: Callable[[Mapping[str, Any]], dict[str, Any]]
    call: Callable[..., Any]


def _halves(args: Mapping[str, Any]) -> dict[str, Any]:
    x = args["x"]
    i = x.shape[-1] // 2
    return {"a": x[..., :i].contiguous(), "b": x[..., i:].contiguous()}


def liger_ops() -> tuple[dict[str, LigerOp], str]:
    """Liger's ops by target name and its version; ``({}, why)`` where it does not import here."""
    try:
        # The package's names, as its documentation asks: the implementation chosen for this device.
        ops = importlib.import_module("liger_kernel.ops")
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] == "liger_kernel":
            return {}, "not installed"
        return {}, f"does not import (ModuleNotFoundError: {exc})"
    except Exception as exc:  # a build whose Triton or torch does not match the ones here
        lines = str(exc).strip().splitlines()
        return {}, f"does not import ({type(exc).__name__}{': ' + lines[0][:100] if lines else ''})"
    try:
        version = str(metadata.version("liger-kernel"))
    except Exception:  # imported from a path without its distribution's metadata
        version = "unknown version"
    rms, add_rms = ops.LigerRMSNormFunction, ops.LigerFusedAddRMSNormFunction
    silu_mul, gelu_mul = ops.LigerSiLUMulFunction, ops.LigerGELUMulFunction

    # autograd's apply takes its arguments by position; the timer calls with the prepared ones by name.
    def rmsnorm(x: Any, w: Any, eps: float) -> Any:
        return rms.apply(x, w, eps)

    def fused_add_rmsnorm(x: Any, r: Any, w: Any, eps: float) -> Any:
        # Liger writes the sum to a new tensor (in_place=False, its default) and returns (out, sum): the
        # target's outputs, in its order.
        return add_rms.apply(x, r, w, eps)

    def silu_and_mul(a: Any, b: Any) -> Any:
        return silu_mul.apply(a, b)

    def gelu_tanh_and_mul(a: Any, b: Any) -> Any:
        return gelu_mul.apply(a, b)

    def eps(a: Mapping[str, Any]) -> float:
        return float(a.get("eps", 1e-6))

    by_target = {
        "rmsnorm": LigerOp(lambda a: {"x": a["x"], "w": a["w"], "eps": eps(a)}, rmsnorm),
        "fused_add_rmsnorm": LigerOp(lambda a: {"x": a["x"], "r": a["residual"], "w": a["w"], "eps": eps(a)},
                                     fused_add_rmsnorm),
        "silu_and_mul": LigerOp(_halves, silu_and_mul),
        "gelu_tanh_and_mul": LigerOp(_halves, gelu_tanh_and_mul),
    }
    return by_target, f"Liger-Kernel {version}"
