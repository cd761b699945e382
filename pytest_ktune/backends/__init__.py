"""Backends: CUDA through CuPy, OpenCL through PyOpenCL, Triton's ``@triton.jit`` on torch tensors (each
imported lazily), behind the ``Backend`` Protocol of ``backends.base``; a plugin may add its own
(``pytest_ktune_backend``).

This module keeps one backend per name per process (``create``), knows the built-in factories
(``builtin_factory``), and finds the backend of a production call's arrays (``backend_for``).

May import: core.
"""

from __future__ import annotations

import importlib
from typing import Any

from pytest_ktune.backends.base import (
    Backend,
    BackendFactory,
    DeviceInfo,
    KernelFunction,
    Launch,
    Program,
    Resources,
    Timer,
)
from pytest_ktune.core.errors import BackendUnavailable
from pytest_ktune.core.names import AUTO, BACKENDS

__all__ = [
    "Backend",
    "BackendFactory",
    "DeviceInfo",
    "KernelFunction",
    "Launch",
    "Program",
    "Resources",
    "Timer",
    "backend_for",
    "builtin_factory",
    "create",
    "factory_ref",
    "load_factory",
    "resolve",
]

_INSTANCES: dict[str, Backend] = {}


def resolve(choice: str) -> str:
    """``auto`` becomes ``cuda`` when a GPU is visible, else ``opencl``; any other name is kept."""
    if choice != AUTO:
        return choice
    from pytest_ktune.backends.cuda import gpu_visible

    return "cuda" if gpu_visible() else "opencl"


def builtin_factory(name: str) -> BackendFactory | None:
    """The built-in backend called ``name`` (``cuda``, ``opencl``, ``triton``), as a factory; None for others."""
    if name == "cuda":
        from pytest_ktune.backends.cuda import CudaBackend

        return CudaBackend
    if name == "opencl":
        from pytest_ktune.backends.opencl import OpenCLBackend

        return OpenCLBackend
    if name == "triton":
        from pytest_ktune.backends.triton import TritonBackend

        return TritonBackend
    return None


def unknown(name: str) -> BackendUnavailable:
    return BackendUnavailable(f"unknown backend {name!r}",
                              hint=f"use {AUTO}, {' or '.join(BACKENDS)}, or a name a plugin supplies "
                                   "through the pytest_ktune_backend hook")


def device_count(name: str) -> int:
    """How many devices the backend ``name`` can be pinned to (``--ktune-devices all``); 1 for a
    plugin's backend, which picks its own device."""
    if name == "cuda":
        from pytest_ktune.backends.cuda_device import gpu_count

        return gpu_count()
    if name == "opencl":
        from pytest_ktune.backends.opencl_devices import device_count as opencl_count

        return opencl_count()
    if name == "triton":
        from pytest_ktune.backends.triton import device_count as triton_count

        return triton_count()
    return 1


def create(name: str, factory: BackendFactory | None = None) -> Backend:
    """The process-wide backend of that name, made on first use by ``factory`` (default: the
    built-in one of that name).

    Raises BackendUnavailable, whose hint says how to install what is missing.
    """
    if name not in _INSTANCES:
        make = factory or builtin_factory(name)
        if make is None:
            raise unknown(name)
        _INSTANCES[name] = make()
    return _INSTANCES[name]


def factory_ref(factory: BackendFactory | None) -> str | None:
    """``module:qualname`` of a backend factory a worker process must import again; None for the
    built-in ones (and none at all), which it knows by name."""
    if factory is None or any(factory is builtin_factory(n) for n in BACKENDS):
        return None
    return f"{factory.__module__}:{factory.__qualname__}"


def load_factory(ref: str) -> BackendFactory:
    """The factory ``factory_ref`` named."""
    module, _, name = ref.partition(":")
    try:
        value: Any = importlib.import_module(module)
        for part in name.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError) as exc:
        raise BackendUnavailable(f"cannot import the backend factory {ref}: {exc}",
                                 hint="define a plugin's backend in a module the worker processes can "
                                      "import (not inside a function)") from None
    factory: BackendFactory = value
    return factory


def backend_for(args: tuple[Any, ...]) -> Backend:
    """The backend that owns the first device array among ``args`` (for production calls)."""
    for a in args:
        mod = type(a).__module__
        if mod.startswith("cupy"):
            return create("cuda")
        if mod.startswith("pyopencl"):
            from pytest_ktune.backends.opencl import OpenCLBackend

            key = f"opencl:{id(a.queue)}"
            known = _INSTANCES.get(key)
            # An id can be reused once a queue is gone: only the same queue object may reuse a backend.
            if known is None or getattr(known, "queue", None) is not a.queue:
                _INSTANCES[key] = OpenCLBackend(queue=a.queue)
            return _INSTANCES[key]
    raise BackendUnavailable(
        "no CuPy or PyOpenCL array among the arguments, so the device is unknown",
        hint="pass device arrays (cupy.ndarray or pyopencl.array.Array)")
