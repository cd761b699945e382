"""References written once for every array library: the Python array API standard.

A reference marked with ``@ktune.array_api`` takes its arrays from ``ktune.array_namespace(x)``
instead of numpy; pytest-ktune then calls it with the case's inputs already in float64 (floating
tensors upcast, integer ones as they are), on the device where the backend can compare there
(CuPy's arrays on CUDA), so that neither the inputs nor the answer cross to the host. A reference
without the mark gets numpy arrays in the case's own dtypes, as before.

::

    @ktune.array_api
    def rmsnorm_reference(x, w, eps):
        xp = ktune.array_namespace(x)
        rms = xp.sqrt(xp.mean(x * x, axis=-1, keepdims=True) + eps)
        return x / rms * w
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
_MARK = "__ktune_array_api__"


def array_api(fn: F) -> F:
    """Mark a reference as written against the array API standard (see the module docstring)."""
    setattr(fn, _MARK, True)
    return fn


def is_array_api(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` was marked with ``array_api``."""
    return bool(getattr(fn, _MARK, False))


def array_namespace(*arrays: Any) -> Any:
    """The array API namespace of ``arrays`` (numpy's, CuPy's, torch's, ...), through the
    ``array-api-compat`` package: the names of the standard, whatever library made the arrays."""
    import array_api_compat

    return array_api_compat.array_namespace(*arrays)
