"""Running a target: the kernel handle its function receives, and the compile cache."""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytest_ktune.backends.base import Backend, Dim, Launch, Program, as_dim
from pytest_ktune.core.errors import CompileError, KtuneError, LaunchError
from pytest_ktune.core.includes import include_closure, read_local
from pytest_ktune.core.space import Value
from pytest_ktune.core.target import Target


@dataclass
class Kernel:
    """The handle a target's function receives as its first argument.

    ``kernel.params`` holds the configuration being run; ``kernel.empty`` makes
    outputs (poisoned with NaN during checks, so unwritten elements fail);
    ``kernel.launch(grid, block, args)`` runs the compiled kernel, with
    ``grid`` in blocks (work-groups) and ``block`` in threads, as in CUDA.
    """

    backend: Backend
    program: Program
    params: Mapping[str, Value]
    default_name: str
    poison: bool = False
    recorded: list[Launch] = field(default_factory=list)
    # In checks, the guarded allocation of outputs (``measure.guards.Guards.output``); None: the backend's own.
    alloc: Callable[[tuple[int, ...], Any, bool], Any] | None = field(default=None, repr=False)

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

    def launch(self, grid: Dim, block: Dim, args: Sequence[Any], *, name: str | None = None) -> None:
        g, b = as_dim(grid), as_dim(block)
        if len(g) != len(b):
            raise KtuneError(f"grid {g} and block {b} have different numbers of dimensions",
                             hint="give grid and block the same number of dimensions")
        if any(x <= 0 for x in g + b):
            raise KtuneError(f"grid {g} and block {b} must be positive",
                             hint="check the launch arithmetic for this shape")
        fn = self.program.function(name or self.default_name)
        fn.launch(g, b, tuple(args))
        self.recorded.append(Launch(fn, g, b, tuple(args)))


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


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@functools.lru_cache(maxsize=512)
def _identifiers(*texts: str) -> frozenset[str] | None:
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
    launch reads, say) cannot change the compiled code, so its values share one compiled program
    instead of costing a compile each."""
    text = target.source_text(backend.name) if source is None else source
    path = target.source_path(backend.name)
    macros = getattr(backend, "defines_are_macros", False) is True
    named = _identifiers(text, *include_closure(path, text, read_local).values()) if macros else None
    defines = {**extra_defines, **params}
    same_code = None if named is None else {**extra_defines, **{k: v for k, v in params.items() if k in named}}
    return CACHE.get(backend, text, defines, str(path), same_code=same_code)


def run(backend: Backend, target: Target, params: Mapping[str, Value], bound: Mapping[str, Any], *,
        poison: bool = False, source: str | None = None,
        alloc: Callable[[tuple[int, ...], Any, bool], Any] | None = None) -> tuple[Any, list[Launch]]:
    """Run the target's function once; return its result and the launches it made. ``alloc`` makes the
    outputs ``kernel.empty`` asks for (guarded ones, in checks)."""
    try:
        program = compile_target(backend, target, params, target.defines(bound), source)
        kernel = Kernel(backend, program, dict(params), target.kernel_name, poison=poison, alloc=alloc)
        result = target.fn(kernel, **bound)
    except (CompileError, LaunchError) as exc:
        if exc.where.startswith("target "):
            raise
        # Backends know the source file, not the target: name both.
        raise type(exc)(exc.message, where=f"{target.where}, source {exc.where}", hint=exc.hint) from None
    if not kernel.recorded:
        raise KtuneError("the function returned without launching a kernel", where=target.where,
                         hint="call kernel.launch(grid, block, args) in it")
    return result, kernel.recorded


def to_host_tree(backend: Backend, value: Any) -> Any:
    """Device arrays inside ``value`` (a tuple, list or dict of them) copied to numpy."""
    if isinstance(value, (tuple, list)):
        return type(value)(to_host_tree(backend, v) for v in value)
    if isinstance(value, dict):
        return {k: to_host_tree(backend, v) for k, v in value.items()}
    if backend.owns(value):
        return backend.to_host(value)
    return np.asarray(value)
