"""What a production call's route is, and what it asks of the call's plan: the seam between
``call.plan`` and the routes of array libraries (``call.native``, ``call.torchio``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol, cast

import numpy as np

from pytest_ktune.backends.base import Backend, KernelFunction, SharedMemoryFunction
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.target import Target


class Checks(Protocol):
    """What a route needs of a target's call plan: the declared array arguments and the errors that name
    the target and the argument."""

    target: Target
    # (name, the dtypes the cases declare for it, whether it must be contiguous), in signature order
    arrays: tuple[tuple[str, frozenset[np.dtype[Any]], bool], ...]
    # per count of positional arguments: (a declared array's position, where the signature holds what was read
    # of it), for each declared array among them (``view_args``)
    slots: dict[int, tuple[tuple[int, int], ...]]

    def bad_argument(self, name: str, what: str, hint: str) -> KtuneError: ...

    def bad_dtype(self, name: str, dtype: str, allowed: frozenset[np.dtype[Any]]) -> KtuneError: ...

    def not_contiguous(self, name: str, shape: tuple[int, ...], strides: tuple[int, ...]) -> KtuneError: ...


class Route(Protocol):
    """How the arrays of one call reach a backend, and what the call gives back."""

    backend: Backend
    # The function sees the caller's arguments as they are, and its result goes back as it is: a call that
    # the dispatch cache finds needs neither ``view`` nor ``finish``.
    native: bool
    # A result of this type (one of the route's views) goes back as its ``.tensor``, as ``finish`` would give
    # it, without a call of ``finish``; None: every result goes through ``finish``.
    view_type: type | None

    def prepare(self, plan: Checks, bound: dict[str, Any]) -> dict[str, Any]:
        """The arguments the target's function sees, after checking each array (a KtuneError naming it)."""
        ...

    def view(self, plan: Checks, bound: dict[str, Any]) -> dict[str, Any]:
        """``prepare`` for a call whose signature the cache knows: its arrays were checked by the first call
        of that signature, so only what cannot be in a signature is looked at (torch's current device)."""
        ...

    def view_args(self, plan: Checks, args: tuple[Any, ...], sig: tuple[Any, ...]) -> Sequence[Any] | None:
        """``view`` for a call of positional arguments only (``args``, in the function's order; those left out
        take their defaults) whose signature the cache knows (``sig``, where ``plan.slots`` finds what was read
        of each array: the same as this call's): the arguments the function sees, in that order.
        None where the call must go the way of ``view`` instead, which names what is wrong with it; a route
        that needs the call by name (its ``finish`` reads ``bound`` and ``seen``) always answers None, and the
        ``finish`` of a call it viewed gets empty ones."""
        ...

    def empty(self, shape: Sequence[int], dtype: Any) -> Any:
        """A new output array, of this route's kind."""
        ...

    def launch(self, fn: KernelFunction, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any],
               shared: int = 0) -> None:
        """Launch ``fn`` (with ``shared`` bytes of dynamic shared memory per block)."""
        ...

    def finish(self, result: Any, bound: dict[str, Any], seen: dict[str, Any]) -> Any:
        """The function's result as the caller gets it (``seen``: the arguments the function saw)."""
        ...

    def capturing(self) -> bool:
        """Whether launches are being captured into a CUDA graph now (then nothing is compiled)."""
        ...


def given(plan: Checks, bound: dict[str, Any]) -> Iterator[tuple[str, Any, frozenset[np.dtype[Any]], bool]]:
    """The declared array arguments a call gives: name, value, the dtypes declared for it, whether it must be
    contiguous."""
    for name, allowed, contiguous in plan.arrays:
        a = bound.get(name)
        if a is not None:
            yield name, a, allowed, contiguous


def launch(fn: KernelFunction, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any],
           shared: int = 0) -> None:
    """A launch on the backend's own queue or stream: what a route whose arrays the backend takes does."""
    if shared:
        cast(SharedMemoryFunction, fn).launch(grid, block, args, shared=shared)
    else:
        fn.launch(grid, block, args)


class PassThrough:
    """What a route does whose arrays the backend takes as they are (CuPy's and PyOpenCL's, torch tensors on the
    triton backend): after its own checks (``prepare``), nothing between the call and the backend."""

    native = True
    view_type: type | None = None

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.empty = backend.empty  # type: ignore[method-assign]

    @staticmethod
    def view(plan: Checks, bound: dict[str, Any]) -> dict[str, Any]:
        return bound

    @staticmethod
    def view_args(plan: Checks, args: tuple[Any, ...], sig: tuple[Any, ...]) -> tuple[Any, ...]:
        return args

    def empty(self, shape: Sequence[int], dtype: Any) -> Any:  # replaced by the backend's own in __init__
        return self.backend.empty(shape, dtype)

    launch = staticmethod(launch)

    @staticmethod
    def finish(result: Any, bound: dict[str, Any], seen: dict[str, Any]) -> Any:
        return result

    @staticmethod
    def capturing() -> bool:
        return False
