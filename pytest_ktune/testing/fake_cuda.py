"""A stand-in for CuPy and for torch's CUDA tensors: the CUDA route of production calls without a GPU.

``installed()`` puts a fake ``cupy`` module in ``sys.modules`` for as long as it lasts: arrays with the
attributes a production call reads (``shape``, ``strides``, ``dtype``, ``flags``, ``nbytes``), a
``RawModule`` whose compile does nothing, and a ``RawKernel`` (and the ``Function`` behind it) that records
each launch's grid, block, arguments and stream instead of running it. ``cuda_tensor(t)`` dresses a torch
CPU tensor as a tensor of ``cuda:0`` (its device, ``is_cuda``, ``get_device``) where the call looks, and
``installed()`` gives torch the raw accessors of the current device and stream that CUDA builds have.

What it is for: counting what the host does between a user's call and the kernel launch (Python calls,
allocations: ``benchmarks/profile_call.py --cpu``) and testing the CUDA and torch routes' logic on a
machine without a GPU. It says nothing of GPU time.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import sys
import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

STREAM = 0x5A5A  # the handle of torch's "current stream" while installed
# CuPy's current device while installed (``runtime.getDevice``, a C call that reads it): a test sets
# ``CURRENT[0]`` to make another device current (``installed()`` puts 0 back).
CURRENT = [0]
_BASE = 1 << 32  # where the fake device memory starts


class _Flags:
    __slots__ = ("c_contiguous",)

    def __init__(self, c_contiguous: bool) -> None:
        self.c_contiguous = c_contiguous


class ndarray:
    """A device array with no memory: a pointer, a shape, strides and a dtype."""

    __slots__ = ("dtype", "flags", "nbytes", "ptr", "shape", "size", "strides")
    _next = itertools.count()

    def __init__(self, shape: int | Sequence[int], dtype: Any = np.float64,
                 strides: Sequence[int] | None = None) -> None:
        self.dtype = np.dtype(dtype)
        self.shape = (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
        self.size = math.prod(self.shape)
        self.nbytes = self.size * self.dtype.itemsize
        dense = _dense(self.shape, self.dtype.itemsize)
        self.strides = dense if strides is None else tuple(strides)
        self.flags = _Flags(self.strides == dense)
        self.ptr = _BASE + 256 * next(self._next)

    def __len__(self) -> int:
        return self.shape[0]


ndarray.__module__ = "cupy"


def _dense(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    out, step = [], itemsize
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))


def empty(shape: int | Sequence[int], dtype: Any = np.float64) -> ndarray:
    return ndarray((shape,) if isinstance(shape, int) else shape, dtype)


def empty_like(a: ndarray, dtype: Any = None, order: str = "K", subok: Any = None,
               shape: Any = None) -> ndarray:
    return ndarray(a.shape if shape is None else shape, a.dtype if dtype is None else dtype)


def asarray(a: Any) -> ndarray:
    return ndarray(np.shape(a), np.asarray(a).dtype)


class Launch:
    """What one launch passed to the kernel."""

    __slots__ = ("args", "block", "grid", "shared_mem", "stream")

    def __init__(self, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...], shared_mem: int,
                 stream: Any) -> None:
        self.grid, self.block, self.args, self.shared_mem, self.stream = grid, block, args, shared_mem, stream


class Function:
    """``cupy.cuda.function.Function``: the kernel of one device; a call records the launch (the last one is
    kept, and a count)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls = 0
        self.last: Launch | None = None

    def __call__(self, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...],  # noqa: PLR0917
                 shared_mem: int = 0, stream: Any = None, enable_cooperative_groups: bool = False) -> None:
        if type(grid) is not tuple or type(block) is not tuple or type(args) is not tuple:
            raise TypeError("grid, block and args must be tuples")  # as CuPy's typed arguments refuse them
        for a in args:
            if not isinstance(a, (ndarray, CPointer, np.generic, int, float, bool)):
                raise TypeError(f"Unsupported type {type(a)}")
        self.calls += 1
        self.last = Launch(grid, block, args, shared_mem, stream)


class RawKernel:
    """``cupy.RawKernel``: its call goes to the ``Function`` of the current device, as CuPy's does."""

    enable_cooperative_groups = False

    def __init__(self, name: str) -> None:
        self.name = name
        self.kernel = Function(name)
        self.attributes = {"num_regs": 32, "shared_size_bytes": 0, "local_size_bytes": 0,
                           "max_threads_per_block": 1024}
        self.max_dynamic_shared_size_bytes = 0

    def __call__(self, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...], **kwargs: Any) -> None:
        self.kernel(grid, block, args, enable_cooperative_groups=self.enable_cooperative_groups, **kwargs)


class RawModule:
    def __init__(self, code: str = "", options: tuple[str, ...] = (), **_: Any) -> None:
        self.code, self.options = code, options
        self._kernels: dict[str, RawKernel] = {}

    def compile(self, log_stream: Any = None) -> None:
        return None

    def get_function(self, name: str) -> RawKernel:
        if name not in self._kernels:
            self._kernels[name] = RawKernel(name)
        return self._kernels[name]

    def get_global(self, name: str) -> int:
        raise RuntimeError(f"no __constant__ {name} in a fake module")


class CPointer:
    """``cupy.cuda.function.CPointer``: a kernel argument CuPy passes as it is."""

    __slots__ = ("ptr",)

    def __init__(self, p: int = 0) -> None:
        self.ptr = p


class CIntptr(CPointer):
    """``cupy.cuda.function.CIntptr``: a pointer-sized integer (a device pointer) as a kernel argument."""

    __slots__ = ("val",)

    def __init__(self, v: int) -> None:
        super().__init__(0)
        self.val = int(v)


class Stream:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    @classmethod
    def from_external(cls, obj: Any) -> Stream:
        return cls(obj.__cuda_stream__()[1])

    def synchronize(self) -> None:
        return None


class Device:
    def __init__(self, index: int | None = None) -> None:
        self.id = 0 if index is None else index

    def use(self) -> None:
        return None

    def synchronize(self) -> None:
        return None


_PROPS = {"name": b"Fake GPU", "major": 9, "minor": 0, "multiProcessorCount": 132, "maxThreadsPerBlock": 1024,
          "sharedMemPerBlock": 48 << 10, "regsPerBlock": 65536, "l2CacheSize": 50 << 20,
          "totalGlobalMem": 140 << 30, "warpSize": 32, "sharedMemPerBlockOptin": 227 << 10,
          "totalConstMem": 64 << 10, "clockRate": 1_980_000, "memoryClockRate": 2_619_000}


class _MemoryPool:
    def free_all_blocks(self) -> None:
        return None


def _module() -> types.ModuleType:
    cp = types.ModuleType("cupy", "a fake CuPy (pytest_ktune.testing.fake_cuda)")
    runtime = types.SimpleNamespace(getDeviceProperties=lambda i: dict(_PROPS), getDeviceCount=lambda: 1,
                                    getDevice=functools.partial(operator.getitem, CURRENT, 0),
                                    driverGetVersion=lambda: 13000, deviceGetAttribute=lambda attr, i: 0)
    function = types.SimpleNamespace(CPointer=CPointer, CIntptr=CIntptr, Function=Function)
    cp.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        Device=Device, Stream=Stream, runtime=runtime, function=function,
        nvrtc=types.SimpleNamespace(getVersion=lambda: (13, 0)), get_current_stream=lambda: Stream(0))
    for name, value in (("ndarray", ndarray), ("empty", empty), ("empty_like", empty_like), ("asarray", asarray),
                        ("RawKernel", RawKernel), ("RawModule", RawModule), ("__version__", "14.2.0-fake"),
                        ("get_default_memory_pool", _MemoryPool)):
        setattr(cp, name, value)
    return cp


@contextmanager
def installed() -> Iterator[types.ModuleType]:
    """The fake ``cupy`` in ``sys.modules`` (and a fresh CUDA backend and routes) while the block runs; where
    torch imports, torch's raw accessors of the current CUDA device and stream answer ``cuda:0`` and
    ``STREAM``. Everything is put back afterwards."""
    from pytest_ktune import backends
    from pytest_ktune.call import native

    saved_module = sys.modules.get("cupy")
    saved_backend = backends._INSTANCES.pop("cuda", None)
    saved_routes = list(native._CUDA_ROUTE)
    native._CUDA_ROUTE.clear()
    sys.modules["cupy"] = cp = _module()
    torch_saved = _dress_torch(backends)
    CURRENT[0] = 0
    try:
        yield cp
    finally:
        CURRENT[0] = 0
        _undress_torch(torch_saved)
        native._CUDA_ROUTE[:] = saved_routes
        backends._INSTANCES.pop("cuda", None)
        if saved_backend is not None:
            backends._INSTANCES["cuda"] = saved_backend
        if saved_module is None:
            sys.modules.pop("cupy", None)
        else:
            sys.modules["cupy"] = saved_module


# torch's own C accessors, as CUDA builds have them: builtins that answer at C level like the real ones; and
# torch.cuda's functions of the same questions, which the first call of a signature may ask.
_TORCH_C = {"_cuda_getDevice": itertools.repeat(0).__next__,
            "_cuda_getCurrentRawStream": {0: STREAM}.__getitem__,
            "_cuda_isCurrentStreamCapturing": itertools.repeat(False).__next__}
_TORCH_CUDA = {"current_device": itertools.repeat(0).__next__,
               "is_current_stream_capturing": itertools.repeat(False).__next__}
_MISSING = object()


def _dress_torch(backends: Any) -> list[tuple[Any, str, Any]] | None:
    try:
        import torch
    except ImportError:
        return None
    from pytest_ktune.call import torchio

    saved: list[tuple[Any, str, Any]] = [(torchio, "_CUDA_ROUTES", dict(torchio._CUDA_ROUTES))]
    for owner, names in ((torch._C, _TORCH_C), (torch.cuda, _TORCH_CUDA)):
        for name, fn in names.items():
            saved.append((owner, name, getattr(owner, name, _MISSING)))
            setattr(owner, name, fn)
    # The route of cuda:0, whose outputs are CPU tensors (a CPU build of torch allocates nothing on CUDA).
    torchio._CUDA_ROUTES.clear()
    route = torchio._CUDA_ROUTES[0] = torchio.TorchCudaRoute(backends.create("cuda"), 0)
    route.device = torch.device("cpu")
    return saved


def _undress_torch(saved: list[tuple[Any, str, Any]] | None) -> None:
    for owner, name, value in saved or ():
        if name == "_CUDA_ROUTES":
            owner._CUDA_ROUTES.clear()
            owner._CUDA_ROUTES.update(value)
        elif value is _MISSING:
            delattr(owner, name)
        else:
            setattr(owner, name, value)


def cuda_tensor(t: Any) -> Any:
    """The torch CPU tensor ``t`` as the production call sees a tensor of ``cuda:0`` (the same memory)."""
    return t.as_subclass(_dressed())


_DRESSED: list[type] = []


def _dressed() -> type:
    if not _DRESSED:
        import torch

        class CudaTensor(torch.Tensor):
            """A CPU tensor that says it is on cuda:0 (class attributes: reading them calls nothing)."""

            __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]
            is_cuda = True
            device = torch.device("cuda", 0)

            def get_device(self) -> int:
                return 0

        CudaTensor.__module__ = "torch.fake_cuda"  # the routers know torch tensors by their module
        _DRESSED.append(CudaTensor)
    return _DRESSED[0]
