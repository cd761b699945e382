"""pytest-ktune: correctness, honest timing, a regression gate and tuning for GPU kernels.

The public API is small: ``target``, ``Space``, ``Case``, ``Tensor``,
``Tolerance``, ``bucket`` and ``cdiv``. ``import ktune`` gives the same names.
Names load on first use, so the pytest plugin costs nothing without ``--ktune``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "BackendUnavailable": "_errors", "CompileError": "_errors", "KtuneError": "_errors",
    "LaunchError": "_errors", "MismatchError": "_errors", "ReferenceShapeError": "_errors",
    "SpaceError": "_errors", "StoreError": "_errors",
    "Kernel": "_runtime", "cdiv": "_runtime",
    "Space": "_space",
    "Case": "_target", "Target": "_target", "Tensor": "_target", "Tolerance": "_target",
    "bucket": "_target", "target": "_target",
}

__all__ = [
    "BackendUnavailable", "Case", "CompileError", "Kernel", "KtuneError", "LaunchError",
    "MismatchError", "ReferenceShapeError", "Space", "SpaceError", "StoreError", "Target",
    "Tensor", "Tolerance", "__version__", "bucket", "cdiv", "target",
]

if TYPE_CHECKING:
    from ._errors import (
        BackendUnavailable,
        CompileError,
        KtuneError,
        LaunchError,
        MismatchError,
        ReferenceShapeError,
        SpaceError,
        StoreError,
    )
    from ._runtime import Kernel, cdiv
    from ._space import Space
    from ._target import Case, Target, Tensor, Tolerance, bucket, target


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_ktune' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
