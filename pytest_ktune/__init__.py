"""pytest-ktune: correctness, honest timing, a regression gate and tuning for GPU kernels.

The public API is small: ``target``, ``Space``, ``BackendSpace``, ``Case``, ``Tensor``,
``Tolerance``, ``Source``, ``bucket``, ``cdiv``, ``grid``, ``array_api`` / ``array_namespace`` for
references and ``assert_close`` for ``check=`` functions; ``reload`` (read the params file again
now) and ``torch_op`` (a target as a torch custom op) for production.
``import ktune`` gives the same names.
Names load on first use, so the pytest plugin costs nothing without ``--ktune``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pytest_ktune.core.version import __version__

_EXPORTS = {
    "BackendUnavailable": "core.errors", "CompileError": "core.errors", "KtuneError": "core.errors",
    "LaunchError": "core.errors", "MismatchError": "core.errors", "ReferenceShapeError": "core.errors",
    "SpaceError": "core.errors", "StoreError": "core.errors", "KtuneWarning": "core.errors",
    "reload": "call.plan", "torch_op": "call.torchop",
    "Kernel": "measure.runtime", "cdiv": "core.launch", "grid": "core.launch",
    "Space": "core.space", "BackendSpace": "core.variants", "Source": "core.sources",
    "assert_close": "core.compare",
    "Case": "core.case", "Target": "core.target", "Tensor": "core.case",
    "Tolerance": "core.case", "bucket": "core.case", "target": "call",
    "array_api": "core.reference", "array_namespace": "core.reference",
}

__all__ = [
    "BackendSpace", "BackendUnavailable", "Case", "CompileError", "Kernel", "KtuneError", "KtuneWarning",
    "LaunchError", "MismatchError", "ReferenceShapeError", "Source", "Space", "SpaceError", "StoreError", "Target",
    "Tensor", "Tolerance", "__version__", "array_api", "array_namespace", "assert_close", "bucket", "cdiv",
    "grid", "reload", "target", "torch_op",
]

if TYPE_CHECKING:
    from pytest_ktune.call import target
    from pytest_ktune.call.plan import reload
    from pytest_ktune.call.torchop import torch_op
    from pytest_ktune.core.case import Case, Tensor, Tolerance, bucket
    from pytest_ktune.core.compare import assert_close
    from pytest_ktune.core.errors import (
        BackendUnavailable,
        CompileError,
        KtuneError,
        KtuneWarning,
        LaunchError,
        MismatchError,
        ReferenceShapeError,
        SpaceError,
        StoreError,
    )
    from pytest_ktune.core.launch import cdiv, grid
    from pytest_ktune.core.reference import array_api, array_namespace
    from pytest_ktune.core.sources import Source
    from pytest_ktune.core.space import Space
    from pytest_ktune.core.target import Target
    from pytest_ktune.core.variants import BackendSpace
    from pytest_ktune.measure.runtime import Kernel


def __getattr__(name: str) -> Any:
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module 'pytest_ktune' has no attribute {name!r}")
    module, _, attr = where.partition(":")
    value = getattr(importlib.import_module(f".{module}", __name__), attr or name)
    globals()[name] = value
    return value
