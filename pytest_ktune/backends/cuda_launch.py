"""A kernel function of the CUDA backend: its block checked and its arguments converted on the first launch of
a block and argument types, and a launch like it passed straight to CuPy's function of the kernel."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_ktune.backends.base import Constant, Resources, scalar_arg
from pytest_ktune.core.errors import LaunchError, LimitError

_STATIC_SHARED_LIMIT = 48 << 10  # what a block may use without opting in to more
_SEEN = 256  # converted values kept a place (past it the place starts again): a loop's few sizes and constants


def _direct_function(kernel: Any) -> Any:
    """CuPy's function behind the RawKernel ``kernel`` on the current device: what the RawKernel's call calls
    after finding it by device and merging keywords, on every call; None where ``kernel`` has none."""
    found = getattr(kernel, "kernel", None)
    return found if callable(found) else None


@dataclass
class CudaFunction:
    """One kernel of a compiled CUDA module, as the backend launches it."""

    backend: Any  # the CudaBackend: its device, cp, streams (cuda imports this module)
    kernel: Any
    name: str
    filename: str
    _resources: Resources | None = None
    _limit: int = 0  # max threads per block, once resources() has been read
    _dynamic_allowed: int = 0  # dynamic shared memory opted in past 48 KiB, in bytes
    _block: tuple[int, ...] = ()  # the last checked launch's block, and its arguments' types (None: convert)
    _types: tuple[type, ...] | None = None
    # CuPy's function of the kernel on the device current at the first checked launch (the RawKernel's own,
    # called without the RawKernel's wrapper), and that device; None where the kernel has none.
    _direct: Any = None
    _direct_device: int = -1
    _device_now: Any = None  # CuPy's runtime.getDevice
    # Where the last checked launch had Python scalars, to what they convert, and the values converted there.
    _convert: tuple[tuple[int, type, dict[Any, Any]], ...] = ()
    # What a caller may launch with itself, in its own frame (``call.kernel``, ``call.torchio``): the last checked
    # launch's block and argument types, CuPy's function, runtime.getDevice, the device it was loaded on, and
    # ``convert`` where that launch had Python scalars (None where it had none). None until a checked launch
    # without constants has found the function.
    straight: tuple[tuple[int, ...], tuple[type, ...], Any, Any, int, Any] | None = None

    def _check_block(self, grid: tuple[int, ...], block: tuple[int, ...]) -> None:
        threads = block[0] if len(block) == 1 else math.prod(block)
        limit = self._limit or self.resources().max_threads_per_block
        if threads > limit:
            raise LimitError(
                f"kernel {self.name} launched with {threads} threads per block; it allows at most "
                f"{limit} on {self.backend.device.name} (registers per thread: {self.resources().registers})",
                where=self.filename, hint="use a smaller block, or constrain the block-size parameter")

    def _kernel_args(self, args: Sequence[Any], shared: int) -> tuple[Any, ...]:
        if shared:
            self._allow_shared(shared)
        # Constant memory is the module's own: a Constant among the arguments is not one of the kernel's.
        return tuple(scalar_arg(a) for a in args if not isinstance(a, Constant))

    def _checked(self, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any],
                 shared: int) -> tuple[Any, ...]:
        self._check_block(grid, block)
        kargs = self._kernel_args(args, shared)
        if not shared:
            # A launch of this block and argument types is taken the same way next time without these checks:
            # its Python scalars converted at their places (int and bool to int32, float to float32), the rest
            # as they are (arrays, numpy scalars, prepared pointers). One with a constant among its arguments
            # (left out) is checked every time.
            plain = len(kargs) == len(args)
            self._block, self._types = block, (tuple(map(type, args)) if plain else None)
            self._convert = tuple((i, type(k), {}) for i, (k, a) in enumerate(zip(kargs, args, strict=True))
                                  if k is not a) if plain else ()
            if self._direct is None and (direct := _direct_function(self.kernel)) is not None:
                self._device_now = self.backend.cp.cuda.runtime.getDevice
                self._direct_device = int(self._device_now())
                self._direct = direct
            self.straight = None if self._direct is None or self._types is None else (
                block, self._types, self._direct, self._device_now, self._direct_device,
                self.convert if self._convert else None)
        return kargs

    def convert(self, args: Sequence[Any]) -> tuple[Any, ...]:
        """``args`` (of the last checked launch's types) with their Python scalars converted as that launch's
        were (int and bool to int32, float to float32), each value once a place: a later launch with the same
        value takes the numpy scalar made for it. Zero is converted every time (``-0.0 == 0.0``)."""
        out = list(args)
        for i, to, seen in self._convert:
            v = out[i]
            c = seen.get(v) if v else None
            if c is None:
                c = to(v)
                if v:
                    if len(seen) >= _SEEN:
                        seen.clear()
                    seen[v] = c
            out[i] = c
        return tuple(out)

    def launch(self, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any], shared: int = 0,
               stream: Any = None) -> None:
        """Launch on ``stream`` (a CuPy stream; None: CuPy's current one). A launch like the last checked one
        (the same block, arguments of the same types) goes straight to CuPy's function where the device is the
        one it was loaded on."""
        if not shared and block == self._block and tuple(map(type, args)) == self._types:
            kargs = self.convert(args) if self._convert else args if type(args) is tuple else tuple(args)
            direct = self._direct
            if direct is not None and self._device_now() == self._direct_device:
                try:
                    direct(grid, block, kargs, 0, stream)
                except Exception as exc:  # CuPy raises CUDADriverError or TypeError for bad launches
                    raise self._failed(grid, block, exc) from None
                return
        else:
            kargs = self._checked(grid, block, args, shared)
        try:
            if stream is None:
                self.kernel(grid, block, kargs, shared_mem=shared)
            else:
                self.kernel(grid, block, kargs, stream=stream, shared_mem=shared)
        except Exception as exc:
            raise self._failed(grid, block, exc) from None

    def launch_on_stream(self, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any],
                         stream: int, shared: int = 0) -> None:
        """Launch on the CUDA stream whose handle is ``stream`` (another library's, e.g. torch's current), on
        the current device (which the caller has checked is the kernel's)."""
        on = self.backend.streams.get(stream)
        if on is None:
            on = self.backend.external_stream(stream)
        self.launch(grid, block, args, shared, on)

    def _failed(self, grid: tuple[int, ...], block: tuple[int, ...], exc: Exception) -> LaunchError:
        return LaunchError(f"launch of kernel {self.name} (grid {grid}, block {block}) failed: "
                           f"{type(exc).__name__}: {exc}", where=self.filename,
                           hint="check the grid, block and argument list against the kernel")

    def _allow_shared(self, shared: int) -> None:
        """Check ``shared`` bytes of dynamic shared memory against the device, and opt in past 48 KiB."""
        static = self.resources().shared_bytes
        limit = self.backend.device.shared_limit
        if static + shared > limit:
            raise LimitError(f"kernel {self.name} asks for {shared} bytes of dynamic shared memory beside its "
                             f"{static} static; {self.backend.device.name} allows {limit} per block",
                             where=self.filename, hint="constrain the parameters that size the shared memory")
        if static + shared > _STATIC_SHARED_LIMIT and shared > self._dynamic_allowed:
            self.kernel.max_dynamic_shared_size_bytes = shared
            self._dynamic_allowed = shared

    def resources(self) -> Resources:
        if self._resources is None:
            a = self.kernel.attributes
            self._resources = Resources(
                registers=int(a["num_regs"]),
                shared_bytes=int(a["shared_size_bytes"]),
                local_bytes=int(a["local_size_bytes"]),
                max_threads_per_block=int(a["max_threads_per_block"]),
            )
            self._limit = self._resources.max_threads_per_block
        return self._resources
