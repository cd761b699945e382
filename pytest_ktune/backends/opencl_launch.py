"""An OpenCL kernel function: a launch checked and its arguments' kinds found once, then enqueued as they come.

The first launch of a block size with arguments of given types checks the block against the device,
sets the scalar arguments' types (pyopencl then packs them in generated code) and notes which arguments are
buffers; a later launch with the same block and the same argument types only takes each buffer's
``.data`` and enqueues. Anything else (another block, other types, dynamic local memory) goes the checked way.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_ktune.backends.base import Constant, Resources, scalar_arg
from pytest_ktune.core.errors import LaunchError, LimitError


@dataclass
class Function:
    backend: Any  # the opencl.OpenCLBackend that built it
    kernel: Any
    name: str
    filename: str
    _resources: Resources | None = None
    _scalars: list[Any] | None = None  # the argument types of the first launch: None for a buffer
    # The last checked launch: its block, its arguments' types, the positions of buffers and of constants.
    _block: tuple[int, ...] = ()
    _types: tuple[type, ...] | None = None
    _buffers: tuple[int, ...] = ()
    _constants: tuple[int, ...] = ()

    def launch(self, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any], shared: int = 0) -> None:
        if not shared and block == self._block and tuple(map(type, args)) == self._types:
            cargs = list(args)
            for i in self._buffers:
                cargs[i] = cargs[i].data
            for i in self._constants:
                cargs[i] = cargs[i].buffer.data
            gsize = (grid[0] * block[0],) if len(grid) == 1 else tuple(g * b for g, b in zip(grid, block, strict=True))
            try:
                self.kernel(self.backend.queue, gsize, block, *cargs)
                return
            except (self.backend.cl.Error, TypeError, ValueError, struct.error):
                pass  # the checked way says what is wrong
        self.enqueue(grid, block, args, shared=shared)

    def enqueue(self, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any],
                wait_for: Sequence[Any] | None = None, shared: int = 0) -> Any:
        cl = self.backend.cl
        threads = block[0] if len(block) == 1 else math.prod(block)
        limit = (self._resources or self.resources()).max_threads_per_block
        if threads > limit:
            raise LimitError(f"kernel {self.name} launched with {threads} threads per block; "
                              f"this device allows at most {limit} for it", where=self.filename,
                              hint="use a smaller block, or constrain the block-size parameter")
        gsize = (grid[0] * block[0],) if len(grid) == 1 else tuple(g * b for g, b in zip(grid, block, strict=True))
        cargs = [_arg(cl, a) for a in args]
        if shared:
            static = self.resources().shared_bytes
            if static + shared > self.backend.device.shared_limit:
                raise LimitError(f"kernel {self.name} asks for {shared} bytes of local memory beside its {static}; "
                                 f"this device allows {self.backend.device.shared_limit} per work-group",
                                 where=self.filename, hint="constrain the parameters that size the local memory")
            cargs.append(cl.LocalMemory(shared))  # dynamic shared memory: the kernel's last, __local, parameter
        try:
            if self._scalars is None or len(self._scalars) != len(cargs):
                # pyopencl's invoker for known argument types packs them in generated code: a launch costs
                # half of what set_args with untyped arguments does. The types are the first launch's.
                self._scalars = [None if isinstance(a, (cl.MemoryObjectHolder, cl.LocalMemory)) or a is None
                                 else np.asarray(a).dtype for a in cargs]
                self.kernel.set_scalar_arg_dtypes(self._scalars)
            event = self.kernel(self.backend.queue, gsize, block, *cargs, wait_for=wait_for)
        except (cl.Error, TypeError, ValueError, struct.error) as exc:
            extra = " (with shared=, its last parameter must be a __local pointer)" if shared else ""
            raise LaunchError(f"launch of kernel {self.name} (grid {grid}, block {block}) failed: {exc}",
                              where=self.filename,
                              hint=f"check the argument list against the kernel's signature{extra}") from None
        if not shared:
            self._prepare(block, args)
        return event

    def _prepare(self, block: tuple[int, ...], args: Sequence[Any]) -> None:
        """Remember a launch that went through, for ``launch`` to take the same way without its checks."""
        array = self.backend.cl.array.Array
        buffers = tuple(i for i, a in enumerate(args) if isinstance(a, array))
        constants = tuple(i for i, a in enumerate(args) if isinstance(a, Constant))
        self._buffers, self._constants, self._block = buffers, constants, block
        # An argument that scalar_arg converts (a Python int as int32) is packed as its first type by pyopencl.
        self._types = tuple(map(type, args))

    def resources(self) -> Resources:
        if self._resources is None:
            info = self.backend.cl.kernel_work_group_info
            dev = self.backend.cl_device
            self._resources = Resources(
                registers=0,
                shared_bytes=int(self.kernel.get_work_group_info(info.LOCAL_MEM_SIZE, dev)),
                local_bytes=int(self.kernel.get_work_group_info(info.PRIVATE_MEM_SIZE, dev)),
                max_threads_per_block=int(self.kernel.get_work_group_info(info.WORK_GROUP_SIZE, dev)),
            )
        return self._resources


def _arg(cl: Any, a: Any) -> Any:
    if isinstance(a, Constant):
        return a.buffer.data
    return a.data if isinstance(a, cl.array.Array) else scalar_arg(a)
