"""Triton: ``@triton.jit`` kernels on torch tensors, on torch's CUDA device, or on the CPU in Triton's
interpreter (``TRITON_INTERPRET=1``). Imported only when a run or a call uses it.

A triton target's source is the module that holds its jit function (``core.pykernels``): ``compile`` takes
that module's text and the configuration, and its program's function is the jit function the declaration
registered for that text. The space's parameters that the function takes as ``tl.constexpr`` arguments are
passed as those, ``num_warps`` and ``num_stages`` (and ``num_ctas``, ``maxnreg`` where the installed Triton
takes them) as launch options; other parameters are the launcher's alone (``kernel["NAME"]``). Triton
compiles a configuration on its first launch and caches it: a compile error, or a configuration that
needs more shared memory or registers than the device has, is met there and raised as ``CompileError``
or ``LimitError`` (so the tuner records an infeasible point with Triton's reason).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pytest_ktune.backends.base import (
    DeviceInfo,
    Launch,
    Resources,
    Timer,
    pinned_index,
    poison_value,
)
from pytest_ktune.core.errors import BackendUnavailable, CompileError, LaunchError, LimitError
from pytest_ktune.core.pykernels import constexpr_names, lookup

#: The launch options a space may hold beside the constexpr arguments; the last two only where the installed
#: Triton takes them (``launch_options``).
OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
INSTALL = "pip install 'pytest-ktune[triton]' (and torch, for your platform)"


def interpreting() -> bool:
    """Whether Triton's interpreter is asked for (``TRITON_INTERPRET``, read as Triton reads it when a
    function is decorated)."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")


def _modules() -> tuple[Any, Any]:
    try:
        import torch
        import triton
    except ImportError as exc:
        raise BackendUnavailable(f"the triton backend needs triton and torch ({exc})", hint=INSTALL) from None
    return triton, torch


@functools.lru_cache(maxsize=1)
def launch_options() -> frozenset[str]:
    """The launch options this Triton takes: ``num_warps`` and ``num_stages`` always, ``num_ctas`` and
    ``maxnreg`` where its CUDA compiler's options have them."""
    found = {"num_warps", "num_stages"}
    try:
        from triton.backends.nvidia.compiler import CUDAOptions

        found |= {o for o in OPTIONS if o in getattr(CUDAOptions, "__dataclass_fields__", {})}
    except Exception:  # no CUDA part in this Triton: the two portable options only
        pass
    return frozenset(found)


def _direct() -> Any:
    from pytest_ktune.backends import triton_direct

    return triton_direct


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[-1] if "\n" in text and len(text) > 400 else text


class TritonFunction:
    """One jit function with one configuration's constexpr arguments and launch options."""

    def __init__(self, backend: TritonBackend, jit: Any, name: str, kwargs: Mapping[str, Any], *,
                 filename: str) -> None:
        self.backend = backend
        self.jit = jit
        self.name = name
        self.kwargs = dict(kwargs)  # the constexpr arguments and the launch options
        self.filename = filename
        self.compiled: Any = None  # what the first launch returned (Triton's CompiledKernel on a GPU)
        self._errors = backend.errors
        self._max_threads = backend.device.max_threads_per_block
        # Later launches of a specialization the JIT compiled go straight to its kernel (never on the interpreter)
        rt = getattr(backend, "direct", None)  # a stand-in backend may have none
        td = None if rt is None else _direct()
        self.direct = None if td is None else td.Direct.of(jit, self.kwargs, rt)
        self._launched = None if td is None else td.LAUNCHED

    def launch(self, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any]) -> None:
        """``jit[grid](*args, **constexprs, num_warps=..., ...)``, or its kernel launched directly where the JIT
        compiled this call's specialization before (``backends.triton_direct``); ``block`` is Triton's own
        (num_warps)."""
        if block[0] > self._max_threads:
            raise LimitError(f"{self.name}: {block[0]} threads per program; the device allows {self._max_threads}",
                             where=self.filename, hint="lower num_warps")
        direct = self.direct
        key = None
        try:
            if direct is not None and (key := direct.launch(grid, args)) is self._launched:
                return
            values = [a.item() if isinstance(a, np.generic) else a for a in args]
            compiled = self.jit[grid](*values, **self.kwargs)
        except self._errors.limits as exc:
            raise LimitError(f"{self.name}: {_reason(exc)}", where=self.filename,
                             hint="this configuration needs more than the device has; the tuner skips it") from None
        except self._errors.compile as exc:
            raise CompileError(f"Triton cannot compile {self.name} with {self.kwargs}: {_reason(exc)}",
                               where=self.filename, hint="fix the kernel, or constrain the space so this "
                                                         "configuration is not tried") from None
        except (TypeError, ValueError, RuntimeError, KeyError) as exc:
            raise LaunchError(f"launching {self.name} on grid {grid} failed: {type(exc).__name__}: {_reason(exc)}",
                              where=self.filename,
                              hint="pass torch tensors of the backend's device and the jit function's other "
                                   "arguments in its order (its constexprs come from the space)") from None
        if self.compiled is None:
            self.compiled = compiled
        if key is not None:
            direct.keep(key, compiled)  # type: ignore[union-attr]

    def resources(self) -> Resources:
        c = self.compiled
        meta = getattr(c, "metadata", None)
        return Resources(registers=int(getattr(c, "n_regs", 0) or 0),
                         shared_bytes=int(getattr(meta, "shared", 0) or 0),
                         local_bytes=int(getattr(c, "n_spills", 0) or 0) * 4,
                         max_threads_per_block=self.backend.device.max_threads_per_block)


class TritonProgram:
    """A module's text with one configuration: its functions are the jit functions the module declared."""

    log = ""

    def __init__(self, backend: TritonBackend, text: str, defines: Mapping[str, Any], filename: str) -> None:
        self.backend = backend
        self.text = text
        self.defines = dict(defines)
        self.filename = filename
        unknown = sorted(o for o in OPTIONS if o in defines and o not in launch_options())
        if unknown and not backend.device.interpreted:
            raise CompileError(f"this Triton takes no launch option {', '.join(unknown)}", where=filename,
                               hint=f"drop {', '.join(unknown)} from the space on this Triton "
                                    "(per_backend= can keep it for another)")
        warps = int(defines.get("num_warps", 4))
        self.block = (warps * backend.device.warp_size,)  # what a launch records: the threads of a program
        self._functions: dict[str, TritonFunction] = {}

    def function(self, name: str) -> TritonFunction:
        fn = self._functions.get(name)
        if fn is not None:
            return fn
        jit = lookup(self.text, name)
        if jit is None:
            raise CompileError(f"no @triton.jit function {name} declared from this version of {self.filename}",
                               where=self.filename,
                               hint="name a jit function that a target's sources= holds (kernel.launch(name=...))")
        if self.backend.device.interpreted and type(jit).__name__ != "InterpretedFunction":
            raise CompileError(f"{name} was decorated before TRITON_INTERPRET=1 was set, so the interpreter cannot "
                               "run it", where=self.filename,
                               hint="set TRITON_INTERPRET=1 in the environment before Python starts")
        constants = {k: v for k, v in self.defines.items() if k in constexpr_names(jit)}
        options = {k: v for k, v in self.defines.items() if k in OPTIONS and k in launch_options()}
        fn = self._functions[name] = TritonFunction(self.backend, jit, name, {**constants, **options},
                                                     filename=self.filename)
        return fn


class _Errors:
    """Triton's exception classes (``triton.runtime.errors.OutOfResources``, ``triton.compiler.errors.
    CompilationError``, the interpreter's ``InterpreterError``), as far as this Triton has them."""

    def __init__(self) -> None:
        limits: list[type[BaseException]] = []
        compile_: list[type[BaseException]] = []
        try:
            from triton.runtime.errors import OutOfResources

            limits.append(OutOfResources)
        except ImportError:
            pass
        try:
            from triton.compiler.errors import CompilationError

            compile_.append(CompilationError)
        except ImportError:
            pass
        try:
            from triton.runtime.errors import InterpreterError

            compile_.append(InterpreterError)
        except ImportError:
            pass
        self.limits: tuple[type[BaseException], ...] = tuple(limits)
        self.compile: tuple[type[BaseException], ...] = tuple(compile_)


class TritonBackend:
    """``@triton.jit`` kernels on torch tensors: torch's current CUDA device, or the CPU under Triton's
    interpreter (``TRITON_INTERPRET=1``: correctness in CI; its timings are the interpreter's)."""

    name = "triton"
    defines_are_macros = False  # constexpr arguments, not a preprocessor's macros

    def __init__(self) -> None:
        self.triton, self.torch = triton, torch = _modules()
        self._torch_dtype = torch.dtype
        self.errors = _Errors()
        self.cache_dir: Path | None = None
        self._bandwidth: float | None = None
        self._flush: Any = None
        self.direct: Any = None  # the runtime of direct launches (backends.triton_direct): none on the interpreter
        compiler = f"Triton {triton.__version__}; torch {torch.__version__}"
        if interpreting():
            self.device_obj = torch.device("cpu")
            self.device = _interpreter_device(compiler)
            return
        if not torch.cuda.is_available():
            raise BackendUnavailable(
                "torch sees no CUDA GPU for the triton backend",
                hint="run on a GPU, or set TRITON_INTERPRET=1 before Python starts to run the kernels in Triton's "
                     "interpreter on the CPU (correctness; its timings are not a GPU's)")
        if (index := pinned_index()) is not None:
            torch.cuda.set_device(index)
        self.ordinal = torch.cuda.current_device()
        self.device_obj = torch.device("cuda", self.ordinal)
        self.device = _gpu_device(torch, self.ordinal, compiler)
        self.direct = _direct().runtime()

    # -- sources ---------------------------------------------------------------------------------
    def compile(self, source: str, defines: Mapping[str, Any], *, filename: str) -> TritonProgram:
        if self.cache_dir is not None and "TRITON_CACHE_DIR" not in os.environ:
            os.environ["TRITON_CACHE_DIR"] = str(self.cache_dir)  # read by Triton when it compiles
        return TritonProgram(self, source, defines, filename)

    # -- arrays ----------------------------------------------------------------------------------
    def to_device(self, a: np.ndarray) -> Any:
        from pytest_ktune.backends.torch_dtypes import from_numpy

        return from_numpy(np.asarray(a), self.device_obj)

    def to_host(self, a: Any) -> np.ndarray:
        from pytest_ktune.backends.torch_dtypes import to_numpy

        return to_numpy(a)

    def empty(self, shape: Sequence[int], dtype: Any, *, poison: bool = False) -> Any:
        if not poison and type(dtype) is self._torch_dtype:  # a production call's output: torch's own dtype
            return self.torch.empty(shape, dtype=dtype, device=self.device_obj)
        from pytest_ktune.backends.torch_dtypes import pair

        np_dt, torch_dt = pair(dtype)
        out = self.torch.empty(tuple(int(s) for s in shape), dtype=torch_dt, device=self.device_obj)
        if poison:
            value = poison_value(np_dt)
            out.fill_(float(value) if isinstance(value, float) else int(value))
        return out

    def copy(self, a: Any) -> Any:
        """A device copy of the tensor ``a`` (``base.copy_of``)."""
        return a.clone()

    def owns(self, obj: Any) -> bool:
        return isinstance(obj, self.torch.Tensor)

    def synchronize(self) -> None:
        if self.device.interpreted:
            return
        try:
            self.torch.cuda.synchronize(self.device_obj)
        except Exception as exc:
            raise LaunchError(f"the GPU reported an error: {exc}",
                              hint="a kernel failed while running (often an out-of-bounds access); the CUDA "
                                   "context may be unusable until the process restarts") from None

    # -- timing ----------------------------------------------------------------------------------
    def timer(self, launch_sets: Sequence[Sequence[Launch]], repeats: int) -> Timer:
        from pytest_ktune.backends.triton_timing import HostTimer, TorchGraphTimer

        if self.device.interpreted:
            return HostTimer(self, launch_sets, repeats)
        return TorchGraphTimer(self, launch_sets, repeats)

    def flush_cache(self) -> None:
        from pytest_ktune.backends.base import flush_bytes

        if self._flush is None:
            self._flush = self.torch.empty(flush_bytes(self.device), dtype=self.torch.uint8, device=self.device_obj)
        self._flush.fill_(1)

    def copy_bandwidth(self) -> float:
        if self._bandwidth is None:
            from pytest_ktune.backends.triton_timing import copy_bandwidth

            self._bandwidth = copy_bandwidth(self)
        return self._bandwidth

    def release(self) -> None:
        if not self.device.interpreted:
            self.torch.cuda.empty_cache()


def _interpreter_device(compiler: str) -> DeviceInfo:
    cores = os.cpu_count() or 1
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 8 << 30
    return DeviceInfo(backend="triton", name="Triton interpreter (CPU)", arch="interpreter",
                      compiler=f"{compiler} (interpreter)", compute_units=cores, max_threads_per_block=1 << 16,
                      # the interpreter has no shared memory of its own to run out of: a limit nothing reaches
                      shared_mem_per_block=1 << 30, regs_per_block=0, l2_bytes=8 << 20, global_mem_bytes=int(memory),
                      warp_size=32, kind="cpu", interpreted=True)


def _gpu_device(torch: Any, ordinal: int, compiler: str) -> DeviceInfo:
    from pytest_ktune.backends.identity import identity_of

    p = torch.cuda.get_device_properties(ordinal)

    def prop(name: str, default: int = 0) -> int:
        return int(getattr(p, name, default) or default)

    name = str(p.name)
    arch = f"sm_{p.major}{p.minor}"
    gib = prop("total_memory") / 2**30
    identity = identity_of(f"{name} [triton]", f"{prop('multi_processor_count')} SMs", f"{gib:.0f} GiB",
                           f"CUDA {torch.version.cuda}", compiler)
    return DeviceInfo(backend="triton", name=name, arch=arch, compiler=compiler,
                      compute_units=prop("multi_processor_count"),
                      max_threads_per_block=prop("max_threads_per_block", 1024),
                      shared_mem_per_block=prop("shared_memory_per_block", 48 << 10),
                      regs_per_block=prop("regs_per_multiprocessor", 65536),
                      l2_bytes=prop("L2_cache_size", 4 << 20), global_mem_bytes=prop("total_memory"),
                      warp_size=prop("warp_size", 32), max_alloc_bytes=prop("total_memory"), kind="gpu",
                      shared_mem_per_block_optin=prop("shared_memory_per_block_optin"), identity=identity)


def device_count() -> int:
    """The CUDA devices torch sees (1 under the interpreter: the CPU)."""
    if interpreting():
        return 1
    _, torch = _modules()
    return max(1, int(torch.cuda.device_count()))
