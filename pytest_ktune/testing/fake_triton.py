"""A stand-in for the pieces of Triton's runtime that direct launches touch (``backends.triton_direct``): jit
functions of torch CPU tensors without a GPU or a compiler.

``FakeTriton().jit`` decorates a Python function as Triton's ``@triton.jit`` does (``.fn``, ``.params``,
``.arg_names``, ``fn[grid](...)``, ``pre_run_hooks``, ``used_global_vals``, ``device_caches``). Its ``run``
does what Triton's JIT does on every call, in the same order: the pre-run hooks, the binding, each argument's
specialization by Triton's rules (a tensor's dtype and 16-byte alignment, an integer's width and divisibility
by 16, an integer equal to 1 as a constant, floats and bools unspecialized), the text of the cache key, a
"compile" (a ``CompiledKernel`` of that specialization) on a miss, the check of the globals the kernel read,
and the launch through the kernel's launcher with the knobs' hooks. A launcher records each launch and fails
(``WrongVariant``) when an argument does not fit the specialization its kernel was compiled for: a direct
launch that picked the wrong variant is caught. ``runtime()`` is the ``triton_direct.Runtime`` of it.

``FakeDriver`` goes one step closer: the installed Triton's own JIT, compiler and ``CompiledKernel`` on a
fake CUDA driver (Triton compiles for sm_90 with its own ptxas; nothing loads or runs), whose launchers check
each launch against the specialization its kernel was compiled for. ``backend_installed`` makes the triton
backend of torch CPU tensors that launches through either, for the production call.

Neither says anything of GPU time; ``benchmarks/triton_call.py --cpu`` counts the Python work of a call on
the fake driver.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

STREAM = 0xC0FFEE  # the current stream's handle


class WrongVariant(AssertionError):
    """A kernel launched with an argument that its specialization does not fit."""


class HookChain:
    """Triton's chain of launch hooks: empty by default, which launches treat as no hook."""

    def __init__(self) -> None:
        self.calls: list[Callable[..., Any]] = []

    def add(self, fn: Callable[..., Any]) -> None:
        self.calls.append(fn)

    def __call__(self, *args: Any) -> None:
        for fn in self.calls:
            fn(*args)


@dataclass
class Param:
    name: str
    is_constexpr: bool
    default: Any
    has_default: bool


@dataclass
class Launch:
    """One launch: the grid, the stream, the kernel (its specialization) and every argument it was given."""

    grid: tuple[int, int, int]
    stream: int
    kernel: CompiledKernel
    args: tuple[Any, ...]


class NativeBackend:
    """The compiler backend of a CUDA device: tensors specialized by dtype and alignment alone."""

    supports_native_tensor_specialization = True


def specialize(a: Any) -> tuple[str, Any]:
    """One argument as Triton's JIT specializes it: its type's name and its specialization ("D": divisible by
    16), or ("constexpr", 1) for the integer 1."""
    import torch

    if isinstance(a, torch.Tensor):
        return "*" + str(a.dtype).removeprefix("torch."), "D" if a.data_ptr() % 16 == 0 else ""
    if type(a) is bool:
        return "u1", None
    if type(a) is int:
        if a == 1:
            return "constexpr", 1
        width = "i32" if -2**31 <= a < 2**31 else "i64" if -2**63 <= a < 2**63 else "u64"
        return width, "D" if a % 16 == 0 else ""
    if type(a) is float:
        return "fp32", None
    if a is None:
        return "constexpr", None
    raise TypeError(f"the fake JIT cannot specialize a {type(a).__name__}")


class Launcher:
    """A compiled kernel's launcher: checks each argument against the kernel's specialization and records it."""

    def __init__(self, kernel: CompiledKernel, log: list[Launch]) -> None:
        self.kernel = kernel
        self.log = log

    def __call__(self, g0: int, g1: int, g2: int, stream: int, function: Any, meta: Any,  # noqa: PLR0917
                 launch_metadata: Any, enter: Any, leave: Any, *args: Any) -> None:  # (Triton's launcher's order)
        spec = self.kernel.specialization
        if len(args) != len(spec):
            raise TypeError(f"the launcher takes {len(spec)} arguments, {len(args)} given")
        for i, (a, (kind, attr)) in enumerate(zip(args, spec, strict=True)):
            if kind == "constexpr":
                if a != attr or type(a) is not type(attr):
                    raise WrongVariant(f"argument {i} is {a!r}, the kernel was compiled for the constant {attr!r}")
            elif specialize(a) != (kind, attr):
                raise WrongVariant(f"argument {i} specializes as {specialize(a)}, the kernel was compiled for "
                                   f"{(kind, attr)}")
        if enter is not None:
            enter(launch_metadata)
        self.log.append(Launch((g0, g1, g2), stream, self.kernel, args))
        if leave is not None:
            leave(launch_metadata)


class CompiledKernel:
    """One specialization's kernel: what Triton's compile returns, with a launcher that checks and records."""

    _ids = itertools.count()

    def __init__(self, specialization: list[tuple[str, Any]], options: dict[str, Any], log: list[Launch]) -> None:
        self.specialization = specialization
        self.options = options
        self.function = next(self._ids)  # the driver's function handle
        self.packed_metadata = (options.get("num_warps", 4), 1, 0)
        self.run = Launcher(self, log)

    def launch_metadata(self, grid: Any, stream: int, *args: Any) -> Any:
        return {"grid": grid, "stream": stream}


@dataclass
class FakeTriton:
    """One fake runtime: its knobs, its device and stream, its jit functions, and every launch they made."""

    device: int = 0
    knobs: Any = field(default_factory=lambda: SimpleNamespace(
        runtime=SimpleNamespace(debug=False, launch_enter_hook=HookChain(), launch_exit_hook=HookChain(),
                                add_stages_inspection_hook=None),
        compilation=SimpleNamespace(instrumentation_mode="")))
    launches: list[Launch] = field(default_factory=list)

    def jit(self, fn: Callable[..., Any]) -> JITFunction:
        return JITFunction(self, fn)

    def current_device(self) -> int:
        return self.device

    def current_stream(self, device: int) -> int:
        return STREAM + device

    def runtime(self) -> Any:
        """The ``triton_direct.Runtime`` of this fake."""
        import torch

        from pytest_ktune.backends.triton_direct import Runtime

        return Runtime(JITFunction, CompiledKernel, self.knobs, self.current_device, self.current_stream, HookChain,
                       torch.Tensor)


class JITFunction:
    """A jit function of the fake runtime: Triton's per-call work of ``fn[grid](...)``, counted."""

    def __init__(self, triton: FakeTriton, fn: Callable[..., Any]) -> None:
        self.triton = triton
        self.fn = fn
        self.signature = inspect.signature(fn)
        self.params = [Param(p.name, "constexpr" in str(p.annotation), p.default, p.default is not p.empty)
                       for p in self.signature.parameters.values()]
        self.arg_names = [p.name for p in self.params]
        self.pre_run_hooks: list[Callable[..., Any]] = []
        self.used_global_vals: dict[tuple[str, int], tuple[Any, dict[str, Any]]] = {}
        self.device_caches: dict[int, tuple[Any, ...]] = {}
        self.compiles = 0
        self.calls = 0  # calls through the JIT

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)

    def run(self, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> CompiledKernel:
        knobs = self.triton.knobs
        self.calls += 1
        kwargs["debug"] = kwargs.get("debug", False) or knobs.runtime.debug
        kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
        device = self.triton.current_device()
        stream = self.triton.current_stream(device)
        for hook in self.pre_run_hooks:
            hook(*args, **kwargs)
        if device not in self.device_caches:
            self.device_caches[device] = ({}, {}, "cuda", NativeBackend(), None)
        cache: dict[str, CompiledKernel] = self.device_caches[device][0]
        options = {k: v for k, v in kwargs.items() if k not in self.arg_names}
        bound = self.signature.bind(*args, **{k: v for k, v in kwargs.items() if k in self.arg_names})
        bound.apply_defaults()
        values = list(bound.arguments.values())
        spec = [("constexpr", v) if p.is_constexpr else specialize(v) for p, v in zip(self.params, values, strict=True)]
        key = str(spec) + str(options)
        kernel = cache.get(key)
        if kernel is None:
            self.compiles += 1
            kernel = cache[key] = CompiledKernel(spec, options, self.triton.launches)
        for (name, _), (value, where) in self.used_global_vals.items():
            if where.get(name) != value:
                raise RuntimeError(f"Global variable {name} has changed since we compiled this kernel, from {value} "
                                   f"to {where.get(name)}")
        if callable(grid):
            grid = grid(bound.arguments)
        size = len(grid)
        kernel.run(grid[0], grid[1] if size > 1 else 1, grid[2] if size > 2 else 1, stream, kernel.function,
                   kernel.packed_metadata, kernel.launch_metadata(grid, stream, *values),
                   knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, *values)
        return kernel


# -- Triton's own runtime on a fake CUDA driver --------------------------------------------------------------
class DriverLaunch:
    """One launch through Triton's own runtime on the fake driver: the grid, the stream, the kernel's source
    (its specialization: ``src.attrs``, ``src.constants``) and the arguments."""

    def __init__(self, grid: tuple[int, int, int], stream: int, src: Any, args: tuple[Any, ...]) -> None:
        self.grid, self.stream, self.src, self.args = grid, stream, src, args


class FakeDriver:
    """A CUDA driver for the installed Triton's own JIT and compiler on a machine without a GPU: an sm_90
    target (Triton compiles for it with its own ptxas), ``load_binary`` that loads nothing, and a launcher
    class whose launchers check each argument against the specialization their kernel was compiled for (the
    pointer's and integer's divisibility by 16, the constants, the types: ``WrongVariant``) and record it.
    ``installed()`` makes it Triton's active driver while it lasts. ``check=False`` (for benchmarks) makes its
    launchers count their launches and nothing else."""

    def __init__(self, arch: int = 90, *, check: bool = True) -> None:
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", arch, 32)
        self.device = 0
        self.launches: list[DriverLaunch] = []
        self.count = 0
        log = self.launches
        fake = self

        class Launcher:
            def __init__(self, src: Any, metadata: Any) -> None:
                self.src = src

            def __call__(self, g0: int, g1: int, g2: int, stream: int, function: Any, meta: Any,  # noqa: PLR0917
                         launch_metadata: Any, enter: Any, leave: Any, *args: Any) -> None:
                fake.count += 1
                if not check:
                    return
                check_variant(self.src, args)
                if enter is not None:
                    enter(launch_metadata)
                log.append(DriverLaunch((g0, g1, g2), stream, self.src, args))
                if leave is not None:
                    leave(launch_metadata)

        self.launcher_cls = Launcher
        self.utils = SimpleNamespace(
            load_binary=lambda name, kernel, shared, device: (1, 2, 32, 0, 1024),
            get_device_properties=lambda device: {"max_shared_mem": 232448, "multiprocessor_count": 132,
                                                  "max_num_regs": 65536, "warpSize": 32, "sm_clock_rate": 1,
                                                  "mem_clock_rate": 1, "mem_bus_width": 1},
            unload_module=lambda module: None)

    def get_current_device(self) -> int:
        return self.device

    def get_current_stream(self, device: int) -> int:
        return STREAM + device

    def get_current_target(self) -> Any:
        return self.target

    def get_active_torch_device(self) -> Any:
        import torch

        return torch.device("cpu")

    @staticmethod
    def is_active() -> bool:
        return True

    @contextmanager
    def installed(self) -> Iterator[FakeDriver]:
        """This driver as Triton's active one (and ``triton_direct.runtime()`` made of it) while it lasts. Where
        no driver was active before (no GPU), it stays Triton's afterwards: the kernels compiled meanwhile
        unload through it when they are collected."""
        from triton.runtime.driver import driver

        from pytest_ktune.backends import triton_direct

        before = getattr(driver, "_active", None)  # not .active: without a GPU, making the default one fails
        driver.set_active(self)
        triton_direct.runtime.cache_clear()
        try:
            yield self
        finally:
            if before is not None:
                driver.set_active(before)
            triton_direct.runtime.cache_clear()


def check_variant(src: Any, args: tuple[Any, ...]) -> None:
    """Fail (``WrongVariant``) where ``args`` do not fit the specialization ``src`` was compiled for."""
    from triton.runtime.jit import mangle_type

    names = list(src.signature)
    for i, (name, a) in enumerate(zip(names, args, strict=True)):
        kind = src.signature[name]
        if kind == "constexpr":
            value = src.constants.get((i,))
            if a != value or type(a) is not type(value):
                raise WrongVariant(f"{name} is {a!r}; the kernel was compiled for the constant {value!r}")
            continue
        if kind.replace("*k", "*") != mangle_type(a):
            raise WrongVariant(f"{name} is a {mangle_type(a)}; the kernel was compiled for a {kind}")
        attrs = src.attrs.get((i,))
        if attrs is None:
            continue
        divisible = ["tt.divisibility", 16] in attrs
        value = a.data_ptr() if hasattr(a, "data_ptr") else a
        if divisible != (value % 16 == 0):
            raise WrongVariant(f"{name} is {'not ' if divisible else ''}divisible by 16; the kernel was compiled "
                               f"{'for' if divisible else 'without'} that")


@contextmanager
def backend_installed(direct: Any) -> Iterator[Any]:
    """A triton backend of torch CPU tensors that launches as on a GPU (never in the interpreter), with
    ``direct`` as its runtime of direct launches (a ``FakeTriton``'s, or Triton's own on a ``FakeDriver``),
    as ``backends.create("triton")`` while it lasts (and the production call's triton route made again)."""
    import os

    from pytest_ktune import backends
    from pytest_ktune.backends.triton import TritonBackend
    from pytest_ktune.call import torchio

    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"  # a backend of CPU tensors...
    try:
        backend = TritonBackend()
    finally:
        if before is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = before
    backend.device = dataclasses.replace(backend.device, interpreted=False)  # ...whose launches are no interpreter's
    backend.direct = direct
    saved, routes = backends._INSTANCES.get("triton"), list(torchio._TRITON_ROUTE)
    backends._INSTANCES["triton"] = backend
    torchio._TRITON_ROUTE.clear()
    try:
        yield backend
    finally:
        if saved is None:
            backends._INSTANCES.pop("triton", None)
        else:
            backends._INSTANCES["triton"] = saved
        torchio._TRITON_ROUTE[:] = routes
