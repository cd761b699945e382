"""Backends: CUDA through CuPy, OpenCL through PyOpenCL. Imported lazily."""

from __future__ import annotations

from typing import Any

from .._errors import BackendUnavailable
from .base import Backend, DeviceInfo, KernelFunction, Launch, Program, Resources, Timer

__all__ = [
    "Backend",
    "DeviceInfo",
    "KernelFunction",
    "Launch",
    "Program",
    "Resources",
    "Timer",
    "backend_for",
    "create",
    "resolve",
]

_INSTANCES: dict[str, Backend] = {}


def resolve(choice: str) -> str:
    """``auto`` becomes ``cuda`` when a GPU is visible, else ``opencl``."""
    if choice not in ("auto", "cuda", "opencl"):
        raise BackendUnavailable(f"unknown backend {choice!r}", hint="use auto, cuda or opencl")
    if choice != "auto":
        return choice
    from .cuda import gpu_visible

    return "cuda" if gpu_visible() else "opencl"


def create(name: str) -> Backend:
    """The process-wide backend of that name, made on first use.

    Raises BackendUnavailable, whose hint says how to install what is missing.
    """
    if name not in _INSTANCES:
        if name == "cuda":
            from .cuda import CudaBackend

            _INSTANCES[name] = CudaBackend()
        elif name == "opencl":
            from .opencl import OpenCLBackend

            _INSTANCES[name] = OpenCLBackend()
        else:
            raise BackendUnavailable(f"unknown backend {name!r}", hint="use auto, cuda or opencl")
    return _INSTANCES[name]


def backend_for(args: tuple[Any, ...]) -> Backend:
    """The backend that owns the first device array among ``args`` (for production calls)."""
    for a in args:
        mod = type(a).__module__
        if mod.startswith("cupy"):
            return create("cuda")
        if mod.startswith("pyopencl"):
            from .opencl import OpenCLBackend

            key = f"opencl:{id(a.queue)}"
            known = _INSTANCES.get(key)
            # An id can be reused once a queue is gone: only the same queue object may reuse a backend.
            if known is None or getattr(known, "queue", None) is not a.queue:
                _INSTANCES[key] = OpenCLBackend(queue=a.queue)
            return _INSTANCES[key]
    raise BackendUnavailable(
        "no CuPy or PyOpenCL array among the arguments, so the device is unknown",
        hint="pass device arrays (cupy.ndarray or pyopencl.array.Array)")
