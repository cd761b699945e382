"""The kernel handle of production calls, and what the dispatch cache finds for a call.

One ``ProductionKernel`` per route, key, defines and parameters is reused by every call: it records no
launches (``launches`` counts them), allocates its outputs through its route, and hands a launch of one
rank without dynamic shared memory straight to the route; the backend's function checks the block and
prepares the arguments once (``backends.cuda_launch.CudaFunction`` and ``backends.opencl_launch.Function``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_ktune.backends.base import Backend, Dim, Program, as_dim
from pytest_ktune.call.route import Route
from pytest_ktune.core.space import Value
from pytest_ktune.measure.runtime import Kernel


class ProductionKernel(Kernel):
    """The kernel handle of production calls: one per route, device, key and parameters, reused by every call."""

    def __init__(self, backend: Backend, program: Program, params: Mapping[str, Value], default_name: str,
                 route: Route, *, where: str = "") -> None:
        super().__init__(backend, program, dict(params), default_name, where=where)
        self._route = route
        self._fn = program.function(default_name)
        self._launch = route.launch
        self._native = route.native  # a native route launches as the function does: no call in between
        self._block: tuple[int, ...] | None = getattr(program, "block", None)  # a program that sets its own block
        self.launches = 0

    def empty(self, shape: int | Sequence[int], dtype: Any) -> Any:
        return self._route.empty((shape,) if isinstance(shape, int) else shape, dtype)

    def empty_like(self, a: Any) -> Any:
        return self._route.empty(a.shape, a.dtype)

    def launch(self, grid: Dim, block: Dim | None = None, args: Sequence[Any] = (), *, name: str | None = None,
               shared: int | Callable[[Mapping[str, Value]], int] = 0) -> None:
        fn = self._fn if name is None else self.program.function(name)
        if block is None and self._block is not None and not shared:
            # a Triton launch: the grid as Triton takes it, the block its program's (num_warps)
            g = grid if type(grid) is tuple else (grid,) if type(grid) is int else as_dim(grid)
            if self._native:
                fn.launch(g, self._block, args)
            else:
                self._launch(fn, g, self._block, args)
        elif type(grid) is int and type(block) is int and grid > 0 and block > 0 and not shared:
            if self._native:
                fn.launch((grid,), (block,), args)
            else:
                self._launch(fn, (grid,), (block,), args)
        else:  # another rank, or dynamic shared memory: checked as the handle of checks does
            g, b, nbytes = self.launch_shape(grid, block, shared)
            if nbytes:
                self.shared_function(fn)
            self._launch(fn, g, b, args, nbytes)
        self.launches += 1


@dataclass
class Entry:
    """What calls of one route, key and defines share: the handle, the params file's generation it read, and
    the key and defines it was resolved for (which the debug check compares with)."""

    route: Route
    kernel: ProductionKernel
    generation: int
    key: dict[str, Any]
    defines: dict[str, Value]
    launched: bool = False
