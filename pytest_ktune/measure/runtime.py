"""Running a target: the kernel handle its function receives, and the compile cache."""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from pytest_ktune.backends.base import (
    Backend,
    Constant,
    Dim,
    KernelFunction,
    Launch,
    Program,
    SharedMemoryFunction,
    as_dim,
    compiler_log,
    same_rank,
    takes_shared,
)
from pytest_ktune.core.errors import CompileError, KtuneError, LaunchError
from pytest_ktune.core.includes import include_closure, read_local
from pytest_ktune.core.macros import redefinitions
from pytest_ktune.core.space import Value
from pytest_ktune.core.target import Target
from pytest_ktune.measure.compiler_output import OUTPUT


@dataclass
class Kernel:
    """The handle a target's function receives as its first argument.

    ``kernel.params`` holds the configuration being run; ``kernel.empty`` makes
    outputs (poisoned with NaN during checks, so unwritten elements fail);
    ``kernel.launch(grid, block, args)`` runs the compiled kernel, with
    ``grid`` in blocks (work-groups) and ``block`` in threads, as in CUDA;
    ``kernel.constant(name, array)`` puts data in constant memory.
    """

    backend: Backend
    program: Program
    params: Mapping[str, Value]
    default_name: str
    poison: bool = False
    recorded: list[Launch] = field(default_factory=list)
    # In checks, the guarded allocation of outputs (``measure.guards.Guards.output``); None: the backend's own.
    alloc: Callable[[tuple[int, ...], Any, bool], Any] | None = field(default=None, repr=False)
    where: str = ""  # the target, for the errors a launch can meet

    def _error(self, message: str, hint: str) -> KtuneError:
        return KtuneError(message, where=self.where, hint=hint)

    def __getitem__(self, name: str) -> Any:
        """A parameter's value, as the Space declares it (``kernel["BLOCK"]``)."""
        return self.params[name]

    @property
    def backend_name(self) -> str:
        return self.backend.name

    def empty(self, shape: int | Sequence[int], dtype: Any) -> Any:
        shp = (shape,) if isinstance(shape, int) else tuple(shape)
        if self.alloc is not None:
            return self.alloc(shp, dtype, self.poison)
        return self.backend.empty(shp, dtype, poison=self.poison)

    def empty_like(self, a: Any) -> Any:
        return self.empty(tuple(a.shape), a.dtype)

    def constant(self, name: str, array: Any) -> Constant:
        """Put ``array`` (a host or device array) in constant memory, for the kernel's ``name``: on CUDA
        the source's ``__constant__`` variable of that name, filled now; on OpenCL a constant buffer.
        Pass the result among the launch's arguments where the OpenCL kernel takes its ``__constant``
        pointer: the CUDA backend leaves it out of the arguments, so one launcher serves both."""
        make = getattr(self.program, "constant", None)
        if make is None:
            raise self._error(f"the {self.backend.name} backend has no constant memory",
                              "pass the data as an ordinary argument on this backend")
        const: Constant = make(name, array)
        return const

    def launch_shape(self, grid: Dim, block: Dim | None, shared: int | Callable[[Mapping[str, Value]], int],
                     ) -> tuple[tuple[int, ...], tuple[int, ...], int]:
        """A launch's grid and block, of one rank, and its bytes of dynamic shared memory; an error naming
        the target for any that cannot be launched. No block: the program's own (a Triton program's threads,
        from its ``num_warps``), where it has one."""
        if block is None:
            block = getattr(self.program, "block", None)
            if block is None:
                raise self._error(f"kernel.launch has no block= on the {self.backend.name} backend",
                                  "give block= the threads per block (an int or a tuple of up to 3 ints)")
        try:
            g, b = same_rank(as_dim(grid), as_dim(block))
        except (TypeError, ValueError) as exc:
            raise self._error(f"grid {grid!r} and block {block!r}: {exc}",
                              "give grid and block as ints or tuples of 1 to 3 ints (ktune.grid computes "
                              "one)") from None
        if any(x <= 0 for x in g + b):
            raise self._error(f"grid {g} and block {b} must be positive", "check the launch arithmetic for this shape")
        nbytes = shared(self.params) if callable(shared) else shared
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
            raise self._error(f"shared={nbytes!r} is not a number of bytes",
                              "give shared= the bytes of dynamic shared memory per block (an int >= 0), or a "
                              "function of the parameters returning them")
        return g, b, int(nbytes)

    def shared_function(self, fn: KernelFunction) -> SharedMemoryFunction:
        """``fn`` as a function that takes dynamic shared memory; an error where the backend has none."""
        if not takes_shared(fn):
            raise self._error(f"the {self.backend.name} backend takes no dynamic shared memory",
                              "size the shared memory in the source instead")
        return cast(SharedMemoryFunction, fn)

    def launch(self, grid: Dim, block: Dim | None = None, args: Sequence[Any] = (), *, name: str | None = None,
               shared: int | Callable[[Mapping[str, Value]], int] = 0) -> None:
        """Launch the kernel ``name`` (default: the target's) on ``grid`` blocks of ``block`` threads.

        A grid and a block of different ranks are padded with 1s (a 2-D grid of 1-D blocks). A Triton kernel
        takes no block (its ``num_warps`` sets it): ``kernel.launch(grid=(rows,), args=[...])``.
        ``shared`` is dynamic shared memory in bytes per block, or a function of the parameters giving
        it: on CUDA the launch's (``extern __shared__``), on OpenCL a ``__local`` buffer passed as the
        kernel's last argument."""
        g, b, nbytes = self.launch_shape(grid, block, shared)
        fn = self.program.function(name or self.default_name)
        if nbytes:
            self.shared_function(fn).launch(g, b, tuple(args), shared=nbytes)
        else:
            fn.launch(g, b, tuple(args))
        self.recorded.append(Launch(fn, g, b, tuple(args), int(nbytes)))


class CompileCache:
    """Compiled programs by backend instance, device, source hash and defines; in memory here,
    on disk through each backend's own compiler cache (directed under ``.ktune/cache``).

    A program belongs to the context it was built in, so two backends on the same device
    (two OpenCL contexts, say) never share an entry.
    """

    def __init__(self) -> None:
        self._programs: dict[str, tuple[Backend, Program]] = {}

    @staticmethod
    def key(backend: Backend, source: str, defines: Mapping[str, Value]) -> str:
        d = backend.device
        text = "\n".join([backend.name, d.name, d.arch, d.compiler, source,
                          repr(sorted((k, str(v)) for k, v in defines.items()))])
        return f"{id(backend)}:" + hashlib.sha256(text.encode()).hexdigest()

    def get(self, backend: Backend, source: str, defines: Mapping[str, Value], filename: str, *,
            same_code: Mapping[str, Value] | None = None) -> Program:
        """The program of ``source`` compiled with ``defines``; one compiled with other defines is reused
        where ``same_code`` (those of ``defines`` that can change the code) is the same."""
        k = self.key(backend, source, defines if same_code is None else same_code)
        hit = self._programs.get(k)
        # The entry keeps its backend alive, so its id cannot be reused by another backend meanwhile.
        if hit is None or hit[0] is not backend:
            hit = (backend, backend.compile(source, defines, filename=filename))
            self._programs[k] = hit
        return hit[1]

    def clear(self) -> None:
        self._programs.clear()


CACHE = CompileCache()
UNNAMED = "<a value the source never reads>"


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@functools.lru_cache(maxsize=512)
def identifiers(*texts: str) -> frozenset[str] | None:
    """Every identifier of ``texts``; None where one of them pastes tokens (``##``), which can make a name
    that the text never spells."""
    if any("##" in t for t in texts):
        return None
    return frozenset(name for t in texts for name in _IDENTIFIER.findall(t))


def compile_target(backend: Backend, target: Target, params: Mapping[str, Value],
                   extra_defines: Mapping[str, Value], source: str | None = None) -> Program:
    """Compile the target's source for this backend with ``params`` and ``extra_defines`` as -D macros.

    Where the backend's defines are preprocessor macros (``defines_are_macros``: both built-in ones), a
    parameter that neither the source nor a header it includes ever names (a grid cap that only the
    launch reads, say) cannot change the compiled code through the source, so its values share one
    compiled program instead of costing a compile each. Its name still counts: a program is shared only by
    defines of the same names, so a name that the compiler's own headers use is compiled as itself. A
    source that redefines one of them itself is refused (``refuse_redefinitions``); the compiler's
    messages are kept (``measure.compiler_output``)."""
    text = target.source_text(backend.name) if source is None else source
    path = target.source_path(backend.name)
    macros = getattr(backend, "defines_are_macros", False) is True
    headers = include_closure(path, text, read_local)  # read once, for the names and the redefinitions
    named = identifiers(text, *headers.values()) if macros else None
    defines = {**extra_defines, **params}
    # An unnamed parameter keeps its name in the key, not its value: a name that the compiler's own headers
    # use (read_only on OpenCL) changes the code or breaks the build, and it is compiled once as itself.
    same_code = None if named is None else {**extra_defines,
                                            **{k: v if k in named else UNNAMED for k, v in params.items()}}
    refuse_redefinitions(target, path, text, params, extra_defines, headers=headers)
    program = CACHE.get(backend, text, defines, str(path), same_code=same_code)
    OUTPUT.add(target.where, compiler_log(program))
    return program


def refuse_redefinitions(target: Target, path: Path, text: str, params: Mapping[str, Value],
                         extra_defines: Mapping[str, Value], *,
                         headers: Mapping[Path, str] | None = None) -> None:
    """Raise a CompileError naming the macro and the line where the source (or a file it includes, read
    here unless ``headers`` has them) ``#define``s a parameter or a define without an ``#ifndef`` guard:
    its value would beat ktune's ``-D``."""
    found = redefinitions(path, text, [*params, *extra_defines], headers)
    if not found:
        return
    r = found[0]
    what = "parameter" if r.name in params else "define (from defines=)"
    value = params[r.name] if r.name in params else extra_defines[r.name]
    more = f" (and {len(found) - 1} more: {', '.join(f'{x.name} at line {x.line}' for x in found[1:])})" \
        if len(found) > 1 else ""
    raise CompileError(
        f"the source redefines the {what} {r.name}, which ktune passes as -D{r.name}={value}: "
        f"{r.render()}{more}. Its own value would win, whatever was chosen", where=target.where,
        hint=f"guard the line so that -D wins (#ifndef {r.name} / #define {r.name} ... / #endif), or rename "
             "the parameter")


def run(backend: Backend, target: Target, params: Mapping[str, Value], bound: Mapping[str, Any], *,
        poison: bool = False, source: str | None = None,
        alloc: Callable[[tuple[int, ...], Any, bool], Any] | None = None) -> tuple[Any, list[Launch]]:
    """Run the target's function once; return its result and the launches it made. ``alloc`` makes the
    outputs ``kernel.empty`` asks for (guarded ones, in checks)."""
    try:
        program = compile_target(backend, target, params, target.defines(bound), source)
        kernel = Kernel(backend, program, dict(params), target.kernel_name, poison=poison, alloc=alloc,
                        where=target.where)
        result = target.fn(kernel, **bound)
    except (CompileError, LaunchError) as exc:
        raise _named(exc, target) from None
    if not kernel.recorded:
        raise KtuneError("the function returned without launching a kernel", where=target.where,
                         hint="call kernel.launch(grid, block, args) in it")
    return result, kernel.recorded


def _named(exc: KtuneError, target: Target) -> KtuneError:
    """``exc`` naming the target: backends know the source file, not the target, so name both."""
    if exc.where.startswith("target "):
        return exc
    return type(exc)(exc.message, where=f"{target.where}, source {exc.where}", hint=exc.hint)


def postprocess(backend: Backend, target: Target, params: Mapping[str, Value], bound: Mapping[str, Any],
                result: Any, *, source: str | None = None) -> Any:
    """The target's ``postprocess=`` step on the outputs of one run, before they are compared: called
    with a kernel handle of the same program (its launches are not timed) and the outputs as the
    function returned them; returns what is compared with the reference."""
    assert target.postprocess_fn is not None
    try:
        program = compile_target(backend, target, params, target.defines(bound), source)
        kernel = Kernel(backend, program, dict(params), target.kernel_name, where=target.where)
        return target.postprocess_fn(kernel, result)
    except (CompileError, LaunchError) as exc:
        raise _named(exc, target) from None
    except KtuneError:
        raise
    except Exception as exc:
        raise KtuneError(f"the postprocess function failed: {type(exc).__name__}: {exc}", where=target.where,
                         hint="it takes the kernel handle and the function's outputs, and returns the outputs "
                              "to compare") from exc


def to_host_tree(backend: Backend, value: Any) -> Any:
    """Device arrays inside ``value`` (a tuple, list or dict of them) copied to numpy."""
    if isinstance(value, (tuple, list)):
        return type(value)(to_host_tree(backend, v) for v in value)
    if isinstance(value, dict):
        return {k: to_host_tree(backend, v) for k, v in value.items()}
    if backend.owns(value):
        return backend.to_host(value)
    return np.asarray(value)
