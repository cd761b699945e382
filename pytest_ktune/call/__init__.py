"""The production call: ``rmsnorm(x, w)`` runs the kernel with the parameters recorded for this device and key.

``@ktune.target`` (``target`` here) declares a ``core.target.Target``; calling it goes to its
``plan.CallPlan``, made on the first call and kept on the target. After the first call for an argument
signature (``dispatch``: the arrays' types, dtypes, shapes, strides and devices, and the scalar arguments the
key and defines functions take), a call builds one tuple, does one lookup and runs the target's function with
a kernel handle (``kernel``) whose launches were checked and prepared on the first call. The arrays reach the
backend through a route (``route``): the backend's own arrays (``native``) or torch tensors (``torchio``,
imported only when one arrives); ``torchop`` registers a target as a torch custom op.

May import: measure, backends, core.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytest_ktune.call.plan import reload
from pytest_ktune.core.errors import KtuneWarning
from pytest_ktune.core.target import Target, declare

__all__ = ["KtuneWarning", "reload", "target"]


def target(**options: Any) -> Callable[[Callable[..., Any]], Target]:
    """Mark a kernel launcher as a pytest-ktune target (see ``core.target.declare`` for the options).

    The decorated function takes a ``kernel`` handle first (``kernel.params``, ``kernel.empty``,
    ``kernel.launch``) and then the kernel's arguments. ``sources`` maps ``"cuda"`` and/or
    ``"opencl"`` to source files; the space's parameters (and ``defines``) reach the source as
    ``-D`` macros. Calling the result runs the kernel in production.
    """
    return declare(**options)
