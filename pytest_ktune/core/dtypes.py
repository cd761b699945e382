"""Dtypes a kernel's arrays may have: numpy's, and bfloat16 through ml_dtypes."""

from __future__ import annotations

from typing import Any

import numpy as np

from pytest_ktune.core.errors import KtuneError

#: The dtype name of bfloat16. numpy has no bfloat16 of its own: ``ml_dtypes`` (the package CuPy's
#: bfloat16 arrays are built on) provides it as a numpy dtype of kind ``"V"``, imported only when
#: a bfloat16 dtype is asked for. Only the CUDA backend runs it.
BFLOAT16 = "bfloat16"


def bfloat16_dtype() -> np.dtype[Any]:
    """``ml_dtypes.bfloat16`` as a numpy dtype; a KtuneError saying what to install without it."""
    try:
        import ml_dtypes
    except ImportError:
        raise KtuneError("bfloat16 needs the ml_dtypes package (numpy has no bfloat16 of its own)",
                         hint="pip install ml_dtypes (CuPy's bfloat16 arrays use it too)") from None
    dt: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
    return dt


def is_bfloat16(dtype: Any) -> bool:
    """Whether ``dtype`` (a dtype, a type or a name) is bfloat16, without importing ml_dtypes."""
    if isinstance(dtype, str):
        return dtype == BFLOAT16
    try:
        return bool(np.dtype(dtype).name == BFLOAT16)
    except TypeError:
        return False


def as_dtype(spec: Any) -> np.dtype[Any]:
    """``np.dtype(spec)``, where ``"bfloat16"`` also works before ml_dtypes has been imported."""
    if isinstance(spec, str) and spec == BFLOAT16:
        return bfloat16_dtype()
    dt: np.dtype[Any] = np.dtype(spec)
    return dt


def dtype_family(dtype: Any) -> str:
    """The dtype's kind, bfloat16 counted as a float (``"f"``): numpy gives it kind ``"V"``."""
    dt = as_dtype(dtype)
    return "f" if dt.name == BFLOAT16 else dt.kind
