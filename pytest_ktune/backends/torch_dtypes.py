"""torch's dtypes paired with numpy's (bfloat16 and the float8 formats through ml_dtypes); imported only where
torch tensors are in use: the triton backend and the production call's torch routes."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pytest_ktune.core.dtypes import as_dtype
from pytest_ktune.core.errors import KtuneError


def _dtype_pairs() -> list[tuple[torch.dtype, np.dtype[Any]]]:
    pairs: list[tuple[torch.dtype, np.dtype[Any]]] = [
        (torch.float16, np.dtype(np.float16)), (torch.float32, np.dtype(np.float32)),
        (torch.float64, np.dtype(np.float64)), (torch.int8, np.dtype(np.int8)), (torch.int16, np.dtype(np.int16)),
        (torch.int32, np.dtype(np.int32)), (torch.int64, np.dtype(np.int64)), (torch.uint8, np.dtype(np.uint8)),
        (torch.bool, np.dtype(np.bool_))]
    for name in ("uint16", "uint32", "uint64"):
        if hasattr(torch, name):
            pairs.append((getattr(torch, name), np.dtype(name)))
    import ml_dtypes  # a dependency: numpy's names for bfloat16 and the float8 formats

    for name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        if hasattr(torch, name) and hasattr(ml_dtypes, name):
            pairs.append((getattr(torch, name), np.dtype(getattr(ml_dtypes, name))))
    return pairs


NUMPY_OF: dict[torch.dtype, np.dtype[Any]] = dict(_dtype_pairs())
TORCH_OF: dict[np.dtype[Any], torch.dtype] = {v: k for k, v in NUMPY_OF.items()}


def pair(spec: Any) -> tuple[np.dtype[Any], torch.dtype]:
    """The numpy and the torch dtype of ``spec`` (either kind, or a name): what ``kernel.empty`` is given."""
    if isinstance(spec, torch.dtype):
        np_dt = NUMPY_OF.get(spec)
        if np_dt is None:
            raise KtuneError(f"kernel.empty: torch has the dtype {spec}, kernels do not",
                             hint="allocate outputs with a numpy dtype, e.g. np.float16")
        return np_dt, spec
    np_dt = as_dtype(spec)
    torch_dt = TORCH_OF.get(np_dt)
    if torch_dt is None:
        raise KtuneError(f"kernel.empty: torch has no dtype for {np_dt.name}",
                         hint="allocate outputs of a dtype torch has (float16, bfloat16, float32, int8, ...)")
    return np_dt, torch_dt


def from_numpy(a: np.ndarray, device: torch.device) -> torch.Tensor:
    """A torch tensor on ``device`` with ``a``'s values and dtype; dtypes numpy lacks (ml_dtypes' bfloat16 and
    float8) travel as their raw bits."""
    a = np.ascontiguousarray(a)
    torch_dtype = TORCH_OF[np.dtype(a.dtype)]
    if np.dtype(a.dtype).kind == "V":
        raw = a.view(np.int16 if a.dtype.itemsize == 2 else np.uint8)
        return torch.from_numpy(raw).to(device).view(torch_dtype)
    return torch.from_numpy(a).to(device)


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A numpy copy of ``t`` (bfloat16 and float8 as ml_dtypes arrays)."""
    dt = NUMPY_OF[t.dtype]
    host = t.detach().contiguous().cpu()
    if dt.kind == "V":
        raw = host.view(torch.int16 if dt.itemsize == 2 else torch.uint8).numpy()
        return raw.view(dt)
    return host.numpy()
