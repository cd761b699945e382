"""The routes of a call by the library of its first array: the backend's own arrays (CuPy on CUDA, PyOpenCL on
OpenCL), passed as they are; torch tensors go to ``call.torchio``, imported only when one arrives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pytest_ktune import backends
from pytest_ktune.backends.base import Backend
from pytest_ktune.call.route import Checks, PassThrough, Route, given


class NativeRoute(PassThrough):
    """Arrays of the backend's own kind (CuPy on CUDA, PyOpenCL on OpenCL), passed as they are."""

    def __init__(self, backend: Backend, array_type: type[Any], queue: Any = None) -> None:
        super().__init__(backend)
        self.array_type = array_type
        self.queue = queue  # PyOpenCL: every array of a call must be on the backend's queue

    def prepare(self, plan: Checks, bound: dict[str, Any]) -> dict[str, Any]:
        for name, a, allowed, contiguous in given(plan, bound):
            if type(a) is not self.array_type and not isinstance(a, self.array_type):
                raise plan.bad_argument(name, f"is a {type(a).__module__}.{type(a).__name__}, while the call's "
                                              f"first array is a {self.array_type.__name__} of {self.backend.name}",
                                        "pass every array of a call in the same library, on the same device")
            if a.dtype not in allowed:
                raise plan.bad_dtype(name, np.dtype(a.dtype).name, allowed)
            if contiguous and not a.flags.c_contiguous:
                raise plan.not_contiguous(name, tuple(a.shape), tuple(a.strides))
            if self.queue is not None and a.queue is not self.queue:
                raise plan.bad_argument(name, "is on another OpenCL queue than the call's first array",
                                        "make every array of a call on one queue")
        return bound


Router = Callable[[Any, Checks, str], Route]
_ROUTERS: dict[type, Router] = {}
_CL_ROUTES: dict[int, NativeRoute] = {}
_CUDA_ROUTE: list[NativeRoute] = []


def _cupy_route(a: Any, plan: Checks, name: str) -> Route:
    if not _CUDA_ROUTE:
        _CUDA_ROUTE.append(NativeRoute(backends.create("cuda"), type(a)))
    return _CUDA_ROUTE[0]


def _opencl_route(a: Any, plan: Checks, name: str) -> Route:
    queue = a.queue
    route = _CL_ROUTES.get(id(queue))
    # An id can be reused once a queue is gone: only the same queue object may reuse a route.
    if route is None or route.queue is not queue:
        route = _CL_ROUTES[id(queue)] = NativeRoute(backends.backend_for((a,)), type(a), queue)
    return route


def router(t: type) -> Router | None:
    """The router of arrays of type ``t``; None for a type that is no device array."""
    found = _ROUTERS.get(t)
    if found is None:
        mod = t.__module__
        if mod.startswith("cupy"):
            found = _cupy_route
        elif mod.startswith("pyopencl"):
            found = _opencl_route
        elif mod.startswith("torch") and any(c.__name__ == "Tensor" for c in t.__mro__):
            from pytest_ktune.call.torchio import route_for  # torch is imported here, not before

            found = route_for
        else:
            return None
        _ROUTERS[t] = found
    return found


def route_for(a: Any, plan: Checks, name: str) -> Route:
    """The route of a call whose first array, ``name``, is ``a``."""
    found = router(type(a))
    if found is None:
        raise plan.bad_argument(name, f"is a {type(a).__module__}.{type(a).__name__}, not a device array",
                                "pass a cupy.ndarray, a pyopencl.array.Array or a torch.Tensor")
    return found(a, plan, name)
