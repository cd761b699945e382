"""What the CUDA backend keeps beside its main module: the CUDA-graph timer, guarded arrays (a CuPy view
in the middle of one allocation) and the size of a module's ``__constant__`` variable."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_ktune.backends.base import Launch, poison_value, replay_sets, wait_timed
from pytest_ktune.core.dtypes import is_bfloat16

BF16_NAN = 0x7FC0  # bfloat16's quiet NaN: the poison of a bfloat16 output


def gpu_count() -> int:
    """How many CUDA devices CuPy sees (those CUDA_VISIBLE_DEVICES shows): what --ktune-devices all means."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # no driver, no device, no CuPy: all mean "no GPU here"
        return 0


@dataclass
class GuardedView:
    """A CuPy view into the middle of one byte allocation: guard, middle, guard."""

    backend: Any  # the CudaBackend (its cp and synchronize)
    whole: Any  # a cupy uint8 array holding all three
    array: Any  # the view of the middle, of the shape and dtype asked for
    guard_bytes: int
    nbytes: int

    def _middle(self) -> Any:
        return self.whole[self.guard_bytes:self.guard_bytes + self.nbytes]

    def set(self, host: np.ndarray) -> None:
        flat = np.ascontiguousarray(host).reshape(-1).view(np.uint8)
        self._middle().set(flat)

    def copy_from(self, device: Any) -> None:
        cp = self.backend.cp
        self._middle()[...] = cp.ascontiguousarray(device).reshape(-1).view(cp.uint8)

    def poison(self) -> None:
        dt = np.dtype(self.array.dtype)
        if is_bfloat16(dt):
            self._middle().view(np.uint16).fill(BF16_NAN)
        else:
            self._middle().view(dt).fill(poison_value(dt))

    def write_guards(self, front: bytes, back: bytes) -> None:
        g, n = self.guard_bytes, self.nbytes
        self.whole[:g].set(np.frombuffer(front, dtype=np.uint8))
        self.whole[g + n:].set(np.frombuffer(back, dtype=np.uint8))
        self.backend.synchronize()

    def read_guards(self) -> tuple[bytes, bytes]:
        self.backend.synchronize()
        g, n = self.guard_bytes, self.nbytes
        cp = self.backend.cp
        return cp.asnumpy(self.whole[:g]).tobytes(), cp.asnumpy(self.whole[g + n:]).tobytes()


class GraphTimer:
    """Times a CUDA graph of ``repeats`` passes over the launch sets (events, if capture fails)."""

    def __init__(self, backend: Any, launch_sets: Sequence[Sequence[Launch]], repeats: int) -> None:
        cp = backend.cp
        self.backend = backend
        self.repeats = repeats
        self.sets = launch_sets
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.start = cp.cuda.Event()
        self.end = cp.cuda.Event()
        self.graph: Any = None
        self.mode = "graph"
        try:
            with self.stream:
                self.stream.begin_capture()
                try:
                    self._replay()
                finally:
                    self.graph = self.stream.end_capture()
        except Exception:  # capture unsupported for some launch: fall back to events
            self.graph = None
            self.mode = "events"

    def _replay(self) -> None:
        replay_sets(self.sets, self.repeats)

    def sample(self, flush: bool) -> float:
        with self.stream:
            if flush:
                self.backend.flush_cache()
            self.start.record(self.stream)
            if self.graph is not None:
                self.graph.launch(self.stream)
            else:
                self._replay()
            self.end.record(self.stream)
        wait_timed(self.end)
        ms = float(self.backend.cp.cuda.get_elapsed_time(self.start, self.end))
        return ms * 1e-3 / self.repeats

    def close(self) -> None:
        self.graph = None
        self.sets = ()



def global_size(module: Any, name: str) -> int | None:
    """The size in bytes of the module's global ``name`` (``cuModuleGetGlobal``, which CuPy does not
    expose); None where the driver cannot be asked."""
    try:
        handle = module.module.ptr
        driver = ctypes.CDLL("libcuda.so.1")
        ptr, size = ctypes.c_uint64(), ctypes.c_size_t()
        status = driver.cuModuleGetGlobal_v2(ctypes.byref(ptr), ctypes.byref(size), ctypes.c_void_p(handle),
                                             name.encode())
    except (OSError, AttributeError):
        return None
    return int(size.value) if status == 0 else None
