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

    _own: dict[str, Value]

    def __new__(cls, backend: Backend, program: Program, params: Mapping[str, Value], default_name: str,
                route: Route, *, where: str = "") -> ProductionKernel:
        # ``kernel["BLOCK"]`` as a dictionary's own lookup, not a frame: special methods are looked up on the
        # class, so each handle is made of a class of its own whose ``__getitem__`` is its parameters' (a
        # KeyError for an unknown name, as before). Made so from the start: an instance whose class is changed
        # afterwards loses CPython's fast attribute access.
        own = dict(params)
        mine = type(cls.__name__, (cls,), {"__getitem__": own.__getitem__, "__slots__": ()})
        self: ProductionKernel = object.__new__(mine)
        self._own = own
        return self

    def __init__(self, backend: Backend, program: Program, params: Mapping[str, Value], default_name: str,
                 route: Route, *, where: str = "") -> None:
        super().__init__(backend, program, self._own, default_name, where=where)
        self._route = route
        self._fn = program.function(default_name)
        self._launch = route.launch
        self._native = route.native  # a native route launches as the function does: no call in between
        self._block: tuple[int, ...] | None = getattr(program, "block", None)  # a program that sets its own block
        self.launches = 0
        # A native route whose backend hands out its library's allocation (CuPy's): outputs come from it with no
        # frame of the route's or the backend's between; ``empty_like`` is the library's own.
        allocation = getattr(route.backend, "native_allocation", None) if route.native else None
        self._library_empty: Callable[..., Any] | None = None
        if allocation is not None:
            self._library_empty, self.empty_like = allocation()  # type: ignore[method-assign]
        elif (like := getattr(route, "empty_like", None)) is not None:  # a route's own, in one frame (torch's)
            self.empty_like = like  # type: ignore[method-assign]

    def empty(self, shape: int | Sequence[int], dtype: Any) -> Any:
        if self._library_empty is not None and type(dtype) is not str:  # a name: the backend resolves it
            return self._library_empty(shape, dtype)
        return self._route.empty((shape,) if isinstance(shape, int) else shape, dtype)

    def empty_like(self, a: Any) -> Any:  # replaced by the library's own in __init__ where there is one
        return self._route.empty(a.shape, a.dtype)

    def launch(self, grid: Dim, block: Dim | None = None, args: Sequence[Any] = (), *, name: str | None = None,
               shared: int | Callable[[Mapping[str, Value]], int] = 0) -> None:
        fn = self._fn if name is None else self.program.function(name)
        g: Any
        if block is None and self._block is not None and not shared:
            # a Triton launch: the grid as Triton takes it, the block its program's (num_warps)
            g = grid if type(grid) is tuple else (grid,) if type(grid) is int else as_dim(grid)
            if self._native:
                fn.launch(g, self._block, args)
            else:
                self._launch(fn, g, self._block, args)
        elif (type(block) is int and block > 0 and not shared
              and ((type(grid) is int and grid > 0) or (type(grid) is tuple and len(grid) == 2 and type(grid[0]) is int
                                                        and type(grid[1]) is int and grid[0] > 0 and grid[1] > 0))):
            # A grid of one or two positive ints and a block of threads: as ``launch_shape`` would make them (the
            # block of the grid's rank), without its checks.
            g = (grid,) if type(grid) is int else grid
            b: tuple[int, ...] = (block,) if type(grid) is int else (block, 1)
            if self._native:
                # A launch like the function's last checked one (``straight``: the same block and argument types,
                # on the device it was loaded on) calls CuPy's function from here, its Python scalars converted by
                # the function (``convert``: a lookup each, where it has any); any other goes to the function.
                s = getattr(fn, "straight", None)
                if s is not None and b == s[0] and tuple(map(type, args)) == s[1] and s[3]() == s[4]:
                    try:
                        s[2](g, b, (args if type(args) is tuple else tuple(args)) if s[5] is None else s[5](args), 0,
                             None)
                    except Exception as exc:  # CuPy raises CUDADriverError or TypeError for bad launches
                        raise fn._failed(g, b, exc) from None  # type: ignore[attr-defined]
                else:
                    fn.launch(g, b, args)
            else:
                self._launch(fn, g, b, args)
        else:  # another grid or block, or dynamic shared memory: checked as the handle of checks does
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
