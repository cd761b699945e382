"""The fast path of production calls: after the first call for a device and key, a call binds its arguments,
computes the key, does one lookup and launches.

A ``CallPlan`` per target holds what the first call worked out: the argument binding (``measure.binding``),
the params file (``core.paramsfile``: read once, and again only when it changes on disk or on
``ktune.reload()``) and, per route, key and defines, an ``Entry``: the recorded parameters, the compiled
program and the ``ProductionKernel`` handle the target's function receives, made once and reused.

A ``Route`` is how one call's arrays reach a backend: ``NativeRoute`` for the backend's own arrays (CuPy,
PyOpenCL); ``measure.torchio`` has the routes of torch tensors, imported only when one arrives.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from pytest_ktune import backends
from pytest_ktune.backends.base import Backend, Dim, KernelFunction, Program, SharedMemoryFunction
from pytest_ktune.core.errors import BackendUnavailable, CompileError, KtuneError, LaunchError
from pytest_ktune.core.keys import key_string
from pytest_ktune.core.paramsfile import ParamsFile, reload_all, watch
from pytest_ktune.core.paths import params_path
from pytest_ktune.core.space import Value
from pytest_ktune.core.store import target_id
from pytest_ktune.core.target import Target
from pytest_ktune.measure.binding import Binder, Caller, array_arguments
from pytest_ktune.measure.route import Checks, Route
from pytest_ktune.measure.runtime import Kernel, compile_target


class ProductionKernel(Kernel):
    """The kernel handle of production calls: one per route, device, key and parameters, reused by every call.

    It records no launches (``launches`` counts them) and allocates its outputs through its route.
    """

    def __init__(self, backend: Backend, program: Program, params: Mapping[str, Value], default_name: str,
                 route: Route, *, where: str = "") -> None:
        super().__init__(backend, program, dict(params), default_name, where=where)
        self._route = route
        self._fn = program.function(default_name)
        self.launches = 0

    def empty(self, shape: int | Sequence[int], dtype: Any) -> Any:
        return self._route.empty((shape,) if isinstance(shape, int) else shape, dtype)

    def empty_like(self, a: Any) -> Any:
        return self._route.empty(a.shape, a.dtype)

    def launch(self, grid: Dim, block: Dim, args: Sequence[Any], *, name: str | None = None,
               shared: int | Callable[[Mapping[str, Value]], int] = 0) -> None:
        fn = self._fn if name is None else self.program.function(name)
        if type(grid) is int and type(block) is int and grid > 0 and block > 0 and not shared:
            self._route.launch(fn, (grid,), (block,), args)
        else:  # another rank, or dynamic shared memory: checked as the handle of checks does
            g, b, nbytes = self.launch_shape(grid, block, shared)
            if nbytes:
                self.shared_function(fn)
            self._route.launch(fn, g, b, args, nbytes)
        self.launches += 1


@dataclass
class Entry:
    """What a call for one route, key and defines needs: the handle, and the params file's generation it read."""

    kernel: ProductionKernel
    generation: int
    launched: bool = False


class NativeRoute:
    """Arrays of the backend's own kind (CuPy on CUDA, PyOpenCL on OpenCL), passed as they are."""

    def __init__(self, backend: Backend, array_type: type[Any], queue: Any = None) -> None:
        self.backend = backend
        self.array_type = array_type
        self.queue = queue  # PyOpenCL: every array of a call must be on the backend's queue
        self.empty = backend.empty  # type: ignore[method-assign]

    def prepare(self, plan: Checks, bound: dict[str, Any]) -> dict[str, Any]:
        for name, allowed, contiguous in plan.arrays:
            a = bound.get(name)
            if a is None:
                continue
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

    def empty(self, shape: Sequence[int], dtype: Any) -> Any:  # replaced by the backend's own in __init__
        return self.backend.empty(shape, dtype)

    @staticmethod
    def launch(fn: KernelFunction, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any],
               shared: int = 0) -> None:
        if shared:
            cast(SharedMemoryFunction, fn).launch(grid, block, args, shared=shared)
        else:
            fn.launch(grid, block, args)

    @staticmethod
    def finish(result: Any, bound: dict[str, Any], seen: dict[str, Any]) -> Any:
        return result

    @staticmethod
    def capturing() -> bool:
        return False


_NO_DEFINES: dict[str, Value] = {}


class CallPlan:
    """How one target's production calls run; made on its first call and kept for the process."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.binder = Binder(target)
        self.key_of = Caller(target.key_fn, target, "key")
        self.defines_of = Caller(target.defines_fn, target, "defines") if target.defines_fn is not None else None
        declared = array_arguments(target)
        self.arrays: tuple[tuple[str, frozenset[np.dtype[Any]], bool], ...] = tuple(
            (n, dts, n not in target.strided) for n, dts in declared.items())
        self.array_names = tuple(declared)
        self._entries: dict[tuple[Any, ...], Entry] = {}
        self._file: ParamsFile | None = None
        self._target_id = ""
        self._lock = threading.Lock()

    # -- the call ----------------------------------------------------------------------------------------
    def __call__(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        bound = self.binder.bind(args, kwargs)
        route = self._route(bound)
        seen = route.prepare(self, bound)
        key = self.key_of(seen)
        defines = self.defines_of(seen) if self.defines_of is not None else _NO_DEFINES
        try:
            ck: tuple[Any, ...] = (route, tuple(key.items()), tuple(defines.items()))
            entry = self._entries.get(ck)
        except TypeError:  # an unhashable key or define value: its text names it
            ck = (route, key_string(key), repr(sorted((k, str(v)) for k, v in defines.items())))
            entry = self._entries.get(ck)
        pf = self._file
        if pf is None or pf.due():
            pf = self._check_file()
        if entry is None or (entry.generation != pf.generation and not route.capturing()):
            # A params file that changed during a CUDA graph capture is followed after it: compiling and
            # loading a module is not allowed while a stream is being captured.
            entry = self._resolve(ck, route, key, defines, pf)
        kernel = entry.kernel
        try:
            result = self.target.fn(kernel, **seen)
        except (CompileError, LaunchError) as exc:
            raise self._named(exc) from None
        if not entry.launched:
            if not kernel.launches:
                raise KtuneError("the function returned without launching a kernel", where=self.target.where,
                                 hint="call kernel.launch(grid, block, args) in it")
            entry.launched = True
        return route.finish(result, bound, seen)

    def _route(self, bound: Mapping[str, Any]) -> Route:
        for name in self.array_names:
            a = bound.get(name)
            if a is not None:
                return route_for(a, self, name)
        for name, a in bound.items():  # no declared array given: any array among the arguments
            if _router(type(a)) is not None:
                return route_for(a, self, name)
        raise BackendUnavailable(
            "no CuPy, PyOpenCL or torch array among the arguments, so the device is unknown",
            where=self.target.where, hint="pass device arrays (cupy.ndarray, pyopencl.array.Array or torch.Tensor)")

    # -- the first call of a route and key -----------------------------------------------------------------
    def _check_file(self) -> ParamsFile:
        pf = self._file
        if pf is None:
            path = params_path(self.target.file.parent)
            self._target_id = target_id(self.target, path.parent)
            pf = self._file = watch(path)
        else:
            pf.refresh()
        return pf

    def _resolve(self, ck: tuple[Any, ...], route: Route, key: Mapping[str, Any], defines: Mapping[str, Value],
                 pf: ParamsFile) -> Entry:
        with self._lock:
            generation = pf.generation
            target = self.target.for_backend(route.backend.name)  # its per_backend space and default
            record = pf.find(self._target_id, route.backend.device.id, key)
            params = dict(record.params) if record is not None else dict(target.default)
            target.check_config(params, key, "recorded configuration" if record else "default")
            try:
                program = compile_target(route.backend, target, params, defines)
                kernel = ProductionKernel(route.backend, program, params, target.kernel_name, route, where=target.where)
            except (CompileError, LaunchError) as exc:
                raise self._named(exc) from None
            old = self._entries.get(ck)
            entry = Entry(kernel, generation, launched=old is not None and old.launched)
            self._entries[ck] = entry
            return entry

    def _named(self, exc: KtuneError) -> KtuneError:
        if exc.where.startswith("target "):
            return exc
        # Backends know the source file, not the target: name both.
        return type(exc)(exc.message, where=f"{self.target.where}, source {exc.where}", hint=exc.hint)

    def forget(self) -> None:
        """Drop what was worked out from the params file (``ktune.reload``): the next call looks again."""
        with self._lock:
            self._entries.clear()
            self._file = None

    # -- errors a call can meet --------------------------------------------------------------------------
    def bad_argument(self, name: str, what: str, hint: str) -> KtuneError:
        return KtuneError(f"argument {name} {what}", where=self.target.where, hint=hint)

    def bad_dtype(self, name: str, dtype: str, allowed: frozenset[np.dtype[Any]]) -> KtuneError:
        names = ", ".join(sorted(d.name for d in allowed))
        return self.bad_argument(name, f"has dtype {dtype}, which the target does not declare for it "
                                       f"(its cases give {names})",
                                 f"convert {name} to one of {names}, or declare a ktune.Case with a {dtype} "
                                 f"{name} (and check the kernel handles it)")

    def not_contiguous(self, name: str, shape: tuple[int, ...], strides: tuple[int, ...]) -> KtuneError:
        return self.bad_argument(name, f"is not contiguous (shape {shape}, strides {strides}); the kernel reads "
                                       "it as one dense block",
                                 f"pass {name}.contiguous() (torch) or ascontiguousarray({name}); a target whose "
                                 f"kernel takes strides declares strided=['{name}']")


# -- routes by the type of a call's first array ------------------------------------------------------------
Router = Callable[[Any, CallPlan, str], Route]
_ROUTERS: dict[type, Router] = {}
_CL_ROUTES: dict[int, NativeRoute] = {}
_CUDA_ROUTE: list[NativeRoute] = []


def _cupy_route(a: Any, plan: CallPlan, name: str) -> Route:
    if not _CUDA_ROUTE:
        _CUDA_ROUTE.append(NativeRoute(backends.create("cuda"), type(a)))
    return _CUDA_ROUTE[0]


def _opencl_route(a: Any, plan: CallPlan, name: str) -> Route:
    queue = a.queue
    route = _CL_ROUTES.get(id(queue))
    # An id can be reused once a queue is gone: only the same queue object may reuse a route.
    if route is None or route.queue is not queue:
        route = _CL_ROUTES[id(queue)] = NativeRoute(backends.backend_for((a,)), type(a), queue)
    return route


def _router(t: type) -> Router | None:
    found = _ROUTERS.get(t)
    if found is None:
        mod = t.__module__
        if mod.startswith("cupy"):
            found = _cupy_route
        elif mod.startswith("pyopencl"):
            found = _opencl_route
        elif mod.startswith("torch") and any(c.__name__ == "Tensor" for c in t.__mro__):
            from pytest_ktune.measure.torchio import route_for  # torch is imported here, not before

            found = route_for
        else:
            return None
        _ROUTERS[t] = found
    return found


def route_for(a: Any, plan: CallPlan, name: str) -> Route:
    """The route of a call whose first array, ``name``, is ``a``."""
    router = _router(type(a))
    if router is None:
        raise plan.bad_argument(name, f"is a {type(a).__module__}.{type(a).__name__}, not a device array",
                                "pass a cupy.ndarray, a pyopencl.array.Array or a torch.Tensor")
    return router(a, plan, name)


# -- plans, by target ---------------------------------------------------------------------------------------
_PLANS: dict[int, CallPlan] = {}


def plan_for(target: Target) -> CallPlan:
    """The target's call plan, made on its first call."""
    plan = _PLANS.get(id(target))
    if plan is None or plan.target is not target:
        plan = _PLANS[id(target)] = CallPlan(target)
    return plan


def reload() -> None:
    """Look at the params files again now, and drop every cached lookup, so that the next call of each
    target finds its params file again (``KTUNE_PARAMS`` included) and reads what it records."""
    for plan in list(_PLANS.values()):
        plan.forget()
    reload_all()
