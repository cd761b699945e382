"""torch tensors in and out of production calls; imported only when a torch tensor arrives.

A target's function is written against device arrays: ``x.shape``, ``x.dtype`` compared with numpy's
dtypes, ``x.dtype.name`` in keys, ``x.nbytes``. It sees a torch tensor as a ``TorchArray``: the tensor
itself (``.tensor``) with numpy's dtype, its shape, size and bytes; nothing is copied.

- CUDA tensors (``TorchCudaRoute``): zero copy. The kernel gets the tensor's device pointer and runs on
  ``torch.cuda.current_stream()``; outputs come from ``torch.empty``, that is from torch's caching allocator
  (the graph's private pool under ``torch.cuda.graph`` capture). A call does no synchronisation and no host
  read, so it can be captured, once the first call for its key (the compile) has run outside the capture.
- CPU tensors (``TorchHostRoute``): the OpenCL backend (PoCL on a CPU), by a copy in and a copy out; an
  argument the kernel updates in place and returns comes back into the caller's tensor. This is for tests
  and development on a machine without a GPU, not for speed.

Every array argument is checked first, and a KtuneError names the target and the argument: a tensor on
another device, a CPU tensor where the call runs on CUDA, a dtype the target's cases do not declare, a
non-contiguous tensor where the kernel reads a dense one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from pytest_ktune import backends
from pytest_ktune.backends.base import Backend, KernelFunction
from pytest_ktune.backends.torch_dtypes import NUMPY_OF
from pytest_ktune.backends.torch_dtypes import pair as _pair
from pytest_ktune.call.route import PassThrough, given, launch
from pytest_ktune.core.case import Shaped
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.target import TRITON

if TYPE_CHECKING:
    from pytest_ktune.call.route import Checks as CallPlan
    from pytest_ktune.call.route import Route

Tensor = torch.Tensor


class TorchArray(Shaped):
    """A torch tensor as a target's function sees it: numpy's dtype, the tensor's shape; ``.tensor`` is it.
    On the CUDA route ``ptr`` is its device pointer as the kernel takes it, made with the view."""

    __slots__ = ("dtype", "ptr", "shape", "tensor")
    ptr: Any

    def __init__(self, tensor: Tensor, dtype: np.dtype[Any]) -> None:
        self.tensor = tensor
        self.shape = tensor.shape
        self.dtype = dtype

    @property
    def strides(self) -> tuple[int, ...]:
        """In bytes, as numpy and CuPy give them."""
        return tuple(s * int(self.dtype.itemsize) for s in self.tensor.stride())

    @property
    def device(self) -> torch.device:
        return self.tensor.device

    def __len__(self) -> int:
        return int(self.shape[0])

    def __repr__(self) -> str:
        return f"TorchArray(shape={tuple(self.shape)}, dtype={self.dtype.name}, device={self.tensor.device})"


def layout(t: Tensor) -> tuple[Any, ...]:
    """What the dispatch cache reads of a tensor (``call.dispatch``): all that the route's checks look at."""
    return (t.dtype, t.shape, t.device, t.is_contiguous())


def unwrap(value: Any) -> Any:
    """``value`` with every ``TorchArray`` inside it (a tuple, list or dict of them) replaced by its tensor."""
    t = type(value)
    if t is TorchArray:
        return value.tensor
    if t is tuple or t is list:
        return t(unwrap(v) for v in value)
    if t is dict:
        return {k: unwrap(v) for k, v in value.items()}
    return value


_new = object.__new__
_C_ORDER = torch.contiguous_format


def _array(t: Tensor, dtype: np.dtype[Any], pointer: type) -> TorchArray:
    """The view of a CUDA tensor, with its pointer (made without ``__init__``: the views of a call are built
    on every call)."""
    a: TorchArray = _new(TorchArray)
    a.tensor = t
    a.shape = t.shape
    a.dtype = dtype
    a.ptr = pointer(t.data_ptr())
    return a


def _where(t: Tensor) -> str:
    return str(t.device)


def _view(plan: CallPlan, name: str, t: Any, contiguous: bool, allowed: frozenset[np.dtype[Any]] | None) -> TorchArray:
    return TorchArray(t, _checked(plan, name, t, contiguous, allowed))


def _checked(plan: CallPlan, name: str, t: Any, contiguous: bool,
             allowed: frozenset[np.dtype[Any]] | None) -> np.dtype[Any]:
    """The numpy dtype of the tensor ``t``, once it is checked: a tensor, of a dtype the target declares for
    ``name``, contiguous where the kernel reads it as one block."""
    if not isinstance(t, Tensor):
        raise plan.bad_argument(name, f"is a {type(t).__module__}.{type(t).__name__}, while the call's first array "
                                      "is a torch tensor", "pass every array of a call as a torch tensor")
    dt = NUMPY_OF.get(t.dtype)
    if dt is None:
        raise plan.bad_argument(name, f"has dtype {t.dtype}, which no kernel argument can have",
                                f"convert {name} to a dtype the target's cases declare")
    if allowed is not None and dt not in allowed:
        raise plan.bad_dtype(name, dt.name, allowed)
    if contiguous and not t.is_contiguous():
        raise plan.not_contiguous(name, tuple(t.shape), tuple(t.stride()))
    return dt


class TorchCudaRoute:
    """torch CUDA tensors on the CUDA backend: zero copy, torch's current stream, torch's allocator."""

    native = False
    view_type: type | None = TorchArray  # finish gives such a result as its tensor

    def __init__(self, backend: Backend, ordinal: int) -> None:
        self.backend = backend
        self.ordinal = ordinal
        self.device = torch.device("cuda", ordinal)
        # torch's own accessors of the current device and stream (what torch.cuda's functions and Inductor's
        # generated code call): a C call each, no Stream object; torch.cuda's where a build has none.
        c = torch._C
        self._stream = getattr(c, "_cuda_getCurrentRawStream", None) or (
            lambda i: torch.cuda.current_stream(i).cuda_stream)
        self._current = getattr(c, "_cuda_getDevice", None) or torch.cuda.current_device  # no lazy-init check
        self._capturing = getattr(c, "_cuda_isCurrentStreamCapturing", None) or torch.cuda.is_current_stream_capturing
        self._pointer: type = getattr(backend, "pointer", np.uint64)  # CuPy's CIntptr: passed as it is
        self._dtypes: dict[Any, tuple[np.dtype[Any], torch.dtype]] = {}
        self._passed: set[type] = set()  # the types of launch arguments that are neither views nor tensors

    def prepare(self, plan: CallPlan, bound: dict[str, Any]) -> dict[str, Any]:
        seen = dict(bound)
        ordinal = self.ordinal
        for name, allowed, contiguous in plan.arrays:
            t = bound.get(name)
            if t is None:
                continue
            if isinstance(t, Tensor) and t.get_device() != ordinal:
                raise plan.bad_argument(
                    name, f"is on {_where(t)}, while the call runs on cuda:{ordinal} (its first tensor's device)",
                    f"move {name} there first ({name}.to('cuda:{ordinal}')); a kernel reads only its own GPU's memory")
            seen[name] = _array(t, _view(plan, name, t, contiguous, allowed).dtype, self._pointer)
        current = torch.cuda.current_device()  # which initialises torch's CUDA state on a first call
        if current != ordinal:
            first = next(n for n, _, _ in plan.arrays if bound.get(n) is not None)
            raise plan.bad_argument(first, f"is on cuda:{ordinal}, which is not the current device (cuda:{current})",
                                    f"call under `with torch.cuda.device({ordinal}):`, or move the tensors to "
                                    f"cuda:{current}")
        return seen

    def view(self, plan: CallPlan, bound: dict[str, Any]) -> dict[str, Any]:
        # The dispatch cache's signature holds every tensor's dtype, device and contiguity: what is left is
        # torch's current device, which no argument carries.
        if self._current() != self.ordinal:
            return self.prepare(plan, bound)  # which names the argument and the device
        seen = dict(bound)
        for name, _allowed, _contiguous in plan.arrays:
            t = bound.get(name)
            if t is not None:
                seen[name] = _array(t, NUMPY_OF[t.dtype], self._pointer)
        return seen

    def view_args(self, plan: CallPlan, args: tuple[Any, ...], sig: tuple[Any, ...]) -> list[Any] | None:
        if self._current() != self.ordinal:
            return None  # ``view`` names the argument and the device
        # Each tensor's dtype and shape are the signature's (what ``layout`` read of it, equal to this call's):
        # only its pointer is read here.
        seen = list(args)
        pointer, numpy_of = self._pointer, NUMPY_OF
        for i, at in plan.slots[len(args)]:
            read = sig[at]
            if read is not None:  # an optional array left out
                t = seen[i]
                a = _new(TorchArray)
                a.tensor = t
                a.shape = read[1]
                a.dtype = numpy_of[read[0]]
                a.ptr = pointer(t.data_ptr())
                seen[i] = a
        return seen

    def empty(self, shape: Sequence[int], dtype: Any) -> TorchArray:
        pair = self._dtypes.get(dtype)
        if pair is None:
            pair = self._dtypes[dtype] = _pair(dtype)
        t = torch.empty(shape, dtype=pair[1], device=self.device)
        a: TorchArray = _new(TorchArray)
        a.tensor = t
        a.shape = t.shape
        a.dtype = pair[0]
        a.ptr = self._pointer(t.data_ptr())
        return a

    def empty_like(self, a: Any) -> TorchArray:
        """The handle's ``empty_like`` on this route. Of one of the call's views (what the target's function is
        given), in one frame: ``torch.empty_like`` of its tensor (C order), torch's own dtype and device, none
        made here (on torch's CPU build 0.73 µs against 1.9 for ``torch.empty`` with both given); of anything
        else, ``empty(a.shape, a.dtype)``."""
        if type(a) is not TorchArray:
            return self.empty(a.shape, a.dtype)
        t = torch.empty_like(a.tensor, memory_format=_C_ORDER)
        view: TorchArray = _new(TorchArray)
        view.tensor = t
        view.shape = t.shape
        view.dtype = a.dtype
        view.ptr = self._pointer(t.data_ptr())
        return view

    def launch(self, fn: KernelFunction, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any],
               shared: int = 0) -> None:
        # Each tensor as its device pointer (a view's, made with it), on torch's current stream (read once, and
        # its CuPy stream found by handle); a launch like the CUDA function's last checked one (``straight``)
        # calls CuPy's function from here, any other goes through the function's own launch.
        try:
            straight = fn.straight  # type: ignore[attr-defined]
            streams = fn.backend.streams  # type: ignore[attr-defined]
        except AttributeError:  # another backend's function: its own launch on a stream, where it has one
            pointers = self._pointers(fn, args)  # which names what is missing
            fn.launch_on_stream(grid, block, pointers, self._stream(self.ordinal), shared)  # type: ignore[attr-defined]
            return
        pointer, passed = self._pointer, self._passed
        kargs = list(args)
        for i, a in enumerate(kargs):  # a loop, not a comprehension: no frame of its own
            t = type(a)
            if t is TorchArray:
                kargs[i] = a.ptr
            elif t in passed:  # a type seen before that is passed as it is (numpy scalars, say)
                continue
            elif isinstance(a, TorchArray):
                kargs[i] = pointer(a.tensor.data_ptr())
            elif isinstance(a, Tensor):
                kargs[i] = pointer(a.data_ptr())
            else:
                passed.add(t)
        pointers = tuple(kargs)
        raw = self._stream(self.ordinal)
        on = streams.get(raw)
        if on is None:
            on = fn.backend.external_stream(raw)  # type: ignore[attr-defined]
        if (not shared and straight is not None and block == straight[0]
                and tuple(map(type, pointers)) == straight[1] and straight[3]() == straight[4]):
            try:
                straight[2](grid, block, pointers if straight[5] is None else straight[5](pointers), 0, on)
            except Exception as exc:  # CuPy raises CUDADriverError or TypeError for bad launches
                raise fn._failed(grid, block, exc) from None  # type: ignore[attr-defined]
            return
        fn.launch(grid, block, pointers, shared, on)  # type: ignore[call-arg]

    def _pointers(self, fn: KernelFunction, args: Sequence[Any]) -> tuple[Any, ...]:
        if not hasattr(fn, "launch_on_stream"):
            raise KtuneError(f"the {self.backend.name} backend cannot launch on torch's stream",
                             hint="pass CuPy arrays to this backend, or use the built-in cuda backend")
        return tuple([_pointer(a, self._pointer) for a in args])

    @staticmethod
    def finish(result: Any, bound: dict[str, Any], seen: dict[str, Any]) -> Any:
        return result.tensor if type(result) is TorchArray else unwrap(result)

    def capturing(self) -> bool:
        return bool(self._capturing())


def _pointer(a: Any, pointer: type) -> Any:
    if isinstance(a, TorchArray):
        return pointer(a.tensor.data_ptr())
    if isinstance(a, Tensor):
        return pointer(a.data_ptr())
    return a


class TorchHostRoute:
    """torch CPU tensors on the OpenCL backend, by a copy in and a copy out (for machines without a GPU)."""

    native = False
    view_type: type | None = None  # its finish copies back

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.empty = backend.empty
        self.launch = launch
        self.view = self.prepare  # the copies are made on every call

    @staticmethod
    def view_args(plan: CallPlan, args: tuple[Any, ...], sig: tuple[Any, ...]) -> None:
        return None  # its finish copies back by name

    def prepare(self, plan: CallPlan, bound: dict[str, Any]) -> dict[str, Any]:
        seen = dict(bound)
        for name, allowed, contiguous in plan.arrays:
            t = bound.get(name)
            if t is None:
                continue
            if isinstance(t, Tensor) and t.device.type != "cpu":
                raise plan.bad_argument(name, f"is on {_where(t)}, while the call's first tensor is on the CPU",
                                        f"pass {name} on the same device as the others")
            view = _view(plan, name, t, contiguous, allowed)
            try:
                host = view.tensor.detach().numpy()
            except TypeError as exc:  # bfloat16 and the float8 formats: numpy has no such tensors to view
                raise plan.bad_argument(name, f"has dtype {view.dtype.name}, which the opencl backend does not run "
                                              f"({exc})", "run it on a CUDA device") from None
            seen[name] = self.backend.to_device(host)
        return seen

    def finish(self, result: Any, bound: dict[str, Any], seen: dict[str, Any]) -> Any:
        originals = {id(seen[n]): bound[n] for n in seen if isinstance(bound.get(n), Tensor)}
        owns = self.backend.owns

        def back(value: Any) -> Any:
            if isinstance(value, (tuple, list)):
                return type(value)(back(v) for v in value)
            if isinstance(value, dict):
                return {k: back(v) for k, v in value.items()}
            if not owns(value):
                return value
            host = torch.from_numpy(self.backend.to_host(value))
            original = originals.get(id(value))
            if original is None:
                return host
            with torch.no_grad():  # the kernel updated this argument in place: so does the call
                original.copy_(host)
            return original

        return back(result)

    @staticmethod
    def capturing() -> bool:
        return False


class TritonRoute(PassThrough):
    """torch tensors on the triton backend, passed as they are: its jit functions take tensors, on torch's
    current stream, and the target's function sees them (and makes its outputs) as torch tensors."""

    def __init__(self, backend: Backend) -> None:
        super().__init__(backend)
        self.device = getattr(backend, "device_obj", torch.device("cpu"))

    def prepare(self, plan: CallPlan, bound: dict[str, Any]) -> dict[str, Any]:
        for name, t, allowed, contiguous in given(plan, bound):
            _checked(plan, name, t, contiguous, allowed)
            if t.device != self.device:
                raise plan.bad_argument(name, f"is on {_where(t)}, while the triton backend runs on {self.device}",
                                        f"move the tensors to {self.device}" + (
                                            " (or unset TRITON_INTERPRET to run on the GPU)"
                                            if self.device.type == "cpu" else ""))
        return bound

    def capturing(self) -> bool:  # type: ignore[override]
        return self.device.type == "cuda" and bool(torch.cuda.is_current_stream_capturing())


_CUDA_ROUTES: dict[int, TorchCudaRoute] = {}
_HOST_ROUTE: list[TorchHostRoute] = []
_TRITON_ROUTE: list[TritonRoute] = []


def route_for(t: Any, plan: CallPlan, name: str) -> Route:
    """The route of a call whose first array, ``name``, is the torch tensor ``t``: the triton backend for a
    target with a triton source, else the CUDA backend for CUDA tensors and OpenCL for CPU ones."""
    if TRITON in plan.target.sources:
        if not _TRITON_ROUTE:
            _TRITON_ROUTE.append(TritonRoute(backends.create(TRITON)))
        return _TRITON_ROUTE[0]
    if t.is_cuda:
        ordinal = t.get_device()
        route = _CUDA_ROUTES.get(ordinal)
        if route is None:
            backend = backends.create("cuda")
            mine = int(getattr(backend, "ordinal", 0))
            if mine != ordinal:
                raise plan.bad_argument(name, f"is on cuda:{ordinal}, while the CUDA backend runs on cuda:{mine} "
                                              "(CuPy's current device when it started)",
                                        f"move the tensors to cuda:{mine}, or make cuda:{ordinal} current before the "
                                        "first call (torch.cuda.set_device and cupy.cuda.Device(...).use())")
            route = _CUDA_ROUTES[ordinal] = TorchCudaRoute(backend, ordinal)
        return route
    if t.device.type == "cpu":
        if "opencl" not in plan.target.sources:
            raise plan.bad_argument(name, "is a torch tensor on the CPU, and the target has no opencl source to run "
                                          "it on (its CUDA kernel reads GPU memory)",
                                    f"move the tensors to the GPU ({name}.cuda()), or add an opencl source")
        if not _HOST_ROUTE:
            _HOST_ROUTE.append(TorchHostRoute(backends.create("opencl")))
        return _HOST_ROUTE[0]
    raise plan.bad_argument(name, f"is on {_where(t)}, where no backend runs kernels",
                            "pass CUDA tensors (the cuda backend) or CPU tensors (the opencl backend, by a host copy)")
