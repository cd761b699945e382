"""What every backend provides, behind one Protocol, and the values it returns."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from pytest_ktune.core.dtypes import dtype_family

if TYPE_CHECKING:
    from pytest_ktune.core.case import Tensor, Tolerance

Dim = int | tuple[int, ...]

# The measurement process of one of ``--ktune-devices``' devices sets this to its index before it makes
# its backend: the built-in backends open that device (in their own order) instead of their first.
DEVICE_INDEX_VAR = "KTUNE_DEVICE_INDEX"


def pin(index: int | None) -> None:
    """Pin this process (a spawned measurement or tuning worker, before it makes its backend) to the
    device ``index``; None leaves the backend's own choice."""
    import os

    if index is not None:
        os.environ[DEVICE_INDEX_VAR] = str(index)


def pinned_index() -> int | None:
    """The device index this process is pinned to, or None (the backend's own choice)."""
    import os

    value = os.environ.get(DEVICE_INDEX_VAR, "")
    return int(value) if value.isdigit() else None


@dataclass(frozen=True)
class DeviceInfo:
    """The facts about a device that timings, limits and the params file need."""

    backend: str
    name: str
    arch: str
    compiler: str
    compute_units: int
    max_threads_per_block: int
    shared_mem_per_block: int
    regs_per_block: int
    l2_bytes: int
    global_mem_bytes: int
    warp_size: int
    # The largest single buffer the device allows (OpenCL's CL_DEVICE_MAX_MEM_ALLOC_SIZE); 0 where
    # the device reports none, and then its global memory bounds a buffer.
    max_alloc_bytes: int = 0
    kind: str = "gpu"  # "gpu", "cpu" or "accelerator": what the device is, as it reports itself
    # The most shared memory one block may use, dynamic included, once it opts in (CUDA's
    # sharedMemPerBlockOptin, 227 KiB on an H100 or H200); 0: ``shared_mem_per_block`` is the limit.
    shared_mem_per_block_optin: int = 0
    max_constant_bytes: int = 0  # the largest constant buffer (OpenCL) or constant bank (CUDA); 0: unknown
    # What tells this machine's timings apart from another's of the same name (``identity_of``): the
    # gate compares a baseline's timings only with a device of the same identity. '' where a backend
    # reads none: then its ``id`` stands for it.
    identity: str = ""
    # Kernels run in an interpreter (Triton's, under TRITON_INTERPRET=1), not on the device: its timings say
    # nothing of a GPU's, so the summary says so and no baseline is recorded from them.
    interpreted: bool = False

    @property
    def shared_limit(self) -> int:
        """The most shared (local) memory one block may use, static and dynamic together."""
        return max(self.shared_mem_per_block, self.shared_mem_per_block_optin)

    @property
    def id(self) -> str:
        """The device as the params file names it."""
        return f"{self.name} [{self.backend}]"

    @property
    def machine(self) -> str:
        """The device's identity for timings: baselines recorded on another machine are history here."""
        return self.identity or self.id

    @property
    def scratch_limit(self) -> int:
        """The most bytes one scratch buffer of the timing harness (copy, flush) may take: what the
        device allows in one allocation, and at most ``SCRATCH_SHARE`` of its memory, so that the
        buffers never crowd out the kernels' own."""
        share = max(self.global_mem_bytes // SCRATCH_SHARE, 1 << 20)
        return min(self.max_alloc_bytes, share) if self.max_alloc_bytes > 0 else share

    @property
    def timing_cache_bytes(self) -> int:
        """The cache that timing defeats (by rotating input sets, and flushing): the device's
        reported last-level cache, as far as the scratch buffers can cover twice its size."""
        return max(1, min(self.l2_bytes, self.scratch_limit // 2))


#: Scratch buffers take at most this fraction (1/8) of device memory each: the copy-bandwidth
#: measurement holds two of them at once, beside whatever the session has allocated.
SCRATCH_SHARE = 8


def copy_buffer_bytes(device: DeviceInfo, cache_multiple: int, floor: int) -> int:
    """Bytes of each of the two buffers of the copy-bandwidth measurement: ``cache_multiple`` times
    the device's cache (so the copy streams from memory), at least ``floor``, and never more than
    the device allows (``DeviceInfo.scratch_limit``); a multiple of 16 (the copy kernel's vector)."""
    want = max(cache_multiple * device.l2_bytes, floor)
    nbytes = min(want, device.scratch_limit)
    return max(16, nbytes - nbytes % 16)


def flush_bytes(device: DeviceInfo, touched: int | None = None) -> int:
    """Bytes written before a timing sample to evict what the previous one left in the cache.

    On a GPU, twice its cache (within ``scratch_limit``): 100 MB on an H200, a few tens of
    microseconds. On a CPU the last-level cache the device reports can be hundreds of MiB (a large
    host's L3, shared by every core): twice that would cost more than the sample, every sample. There
    the flush writes twice what the sample touches (``touched``, the bytes of the arrays its
    launches read and write), which is what it is there to flush, within the same limits."""
    nbytes = min(2 * device.timing_cache_bytes, device.scratch_limit)
    if device.kind == "cpu" and touched is not None and touched > 0:
        nbytes = min(nbytes, 2 * touched)
    return max(nbytes, min(1 << 20, device.scratch_limit))


def touched_bytes(launch_sets: Sequence[Sequence[Launch]], owns: Callable[[Any], bool]) -> int:
    """Bytes of the distinct device arrays (``owns`` tells them) among the launches' arguments."""
    seen: dict[int, int] = {}
    for launches in launch_sets:
        for launch in launches:
            for a in launch.args:
                if owns(a):
                    seen[id(a)] = int(a.nbytes)
    return sum(seen.values())


@dataclass(frozen=True)
class Resources:
    """What one compiled function uses, and the most threads per block it allows."""

    registers: int
    shared_bytes: int
    local_bytes: int
    max_threads_per_block: int


@dataclass(frozen=True)
class Launch:
    """One recorded kernel launch, replayed when timing (``replay``)."""

    function: KernelFunction
    grid: tuple[int, ...]
    block: tuple[int, ...]
    args: tuple[Any, ...]
    shared: int = 0  # bytes of dynamic shared memory per block


@dataclass(frozen=True)
class Constant:
    """Data a kernel reads as constant memory, made by ``kernel.constant(name, array)``.

    On CUDA the data is in the module's ``__constant__`` variable ``name``, and a Constant among a
    launch's arguments is left out; on OpenCL ``buffer`` is a read-only device array, passed where
    the Constant stands (for a ``__constant`` pointer parameter).
    """

    name: str
    nbytes: int
    buffer: Any = None


class SharedMemoryFunction(Protocol):
    """A kernel entry point that takes dynamic shared memory (both built-in backends' functions do):
    on CUDA the launch's dynamic shared memory, on OpenCL a ``__local`` buffer of that many bytes
    passed as the kernel's last argument."""

    def launch(self, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any], shared: int = 0) -> None: ...


def takes_shared(function: KernelFunction) -> bool:
    """Whether ``function.launch`` takes ``shared=`` (dynamic shared memory)."""
    import inspect

    try:
        return "shared" in inspect.signature(function.launch).parameters
    except (TypeError, ValueError):
        return False


def replay(launch: Launch) -> None:
    """Run one recorded launch again, with its dynamic shared memory."""
    if launch.shared:
        cast("SharedMemoryFunction", launch.function).launch(launch.grid, launch.block, launch.args,
                                                             shared=launch.shared)
    else:
        launch.function.launch(launch.grid, launch.block, launch.args)


def replay_sets(launch_sets: Sequence[Sequence[Launch]], repeats: int) -> None:
    """``repeats`` passes over the launch sets, each launch replayed: what a timer times (or captures)."""
    for _ in range(repeats):
        for launches in launch_sets:
            for launch in launches:
                replay(launch)


def wait_timed(end: Any) -> None:
    """Wait for a timed sample's end ``event``; a LaunchError where a kernel failed while it was timed."""
    from pytest_ktune.core.errors import LaunchError

    try:
        end.synchronize()
    except Exception as exc:
        raise LaunchError(f"a kernel failed while being timed: {exc}",
                          hint="run the correctness item first; an illegal memory access leaves the CUDA context "
                               "unusable for the rest of the process") from None


class KernelFunction(Protocol):
    """A compiled kernel entry point."""

    name: str

    def launch(self, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any]) -> None: ...

    def resources(self) -> Resources: ...


class Program(Protocol):
    """A compiled source with one set of defines.

    A program may also have ``log``, the compiler's messages (warnings) of its build, and offer
    ``constant(name, array) -> Constant`` (both built-in backends' programs do).
    """

    def function(self, name: str) -> KernelFunction: ...


def compiler_log(program: Program) -> str:
    """The compiler's messages of the program's build ('' where the backend keeps none)."""
    return str(getattr(program, "log", "") or "")


class Timer(Protocol):
    """Times repeated replays of recorded launch sets; built by ``Backend.timer``."""

    repeats: int
    mode: str  # how a sample is replayed: "graph", "events" (CUDA) or "queue" (OpenCL)

    def sample(self, flush: bool) -> float:
        """Seconds for one pass over the launch sets, averaged over ``repeats`` passes."""
        ...

    def close(self) -> None: ...


class Backend(Protocol):
    """A device and the means to compile, launch and time kernels on it.

    Implementations: ``CudaBackend`` (CuPy, NVRTC) and ``OpenCLBackend``
    (PyOpenCL; PoCL on a CPU). ``pytest_ktune.testing.BackendContract`` is
    the test suite each must pass.

    A backend may also offer ``compare_on_device`` (see ``DeviceComparison``),
    so that large outputs are checked where they are; one without it has its
    outputs copied to the host and checked there. It may offer ``peak_flops``
    (``peak_flops`` below), for the fraction of the device's peak a kernel reaches.
    """

    name: str
    device: DeviceInfo
    # Where the backend's compiler keeps compiled programs between runs (``.ktune/cache/<name>``);
    # None: its own default. Set by whoever creates the backend, before the first compile.
    cache_dir: Path | None

    def compile(self, source: str, defines: Mapping[str, Any], *, filename: str) -> Program: ...

    def to_device(self, a: np.ndarray) -> Any: ...

    def to_host(self, a: Any) -> np.ndarray: ...

    def empty(self, shape: Sequence[int], dtype: Any, *, poison: bool = False) -> Any: ...

    def owns(self, obj: Any) -> bool:
        """Whether ``obj`` is an array of this backend."""
        ...

    def synchronize(self) -> None: ...

    def timer(self, launch_sets: Sequence[Sequence[Launch]], repeats: int) -> Timer: ...

    def copy_bandwidth(self) -> float:
        """Measured device copy bandwidth in bytes/s, counting bytes read and written."""
        ...

    def release(self) -> None:
        """Give cached device memory back between targets."""
        ...


class DeviceComparison(Protocol):
    """The optional capability of comparing an output with the reference on the device."""

    def compare_on_device(self, out: Any, ref: Any, tol: Tolerance) -> bool | None:
        """Whether the device array ``out`` agrees with ``ref`` (a device copy of the reference, of
        the same shape) within ``tol``, with exactly the verdict of ``_verify.compare_one``; None
        when this backend cannot judge these arrays on the device, so they are checked on the host."""
        ...


def compare_on_device(backend: Backend, out: Any, ref: Any, tol: Tolerance) -> bool | None:
    """``backend.compare_on_device(out, ref, tol)``, or None for a backend without it."""
    method = getattr(backend, "compare_on_device", None)
    if method is None:
        return None
    verdict = method(out, ref, tol)
    return None if verdict is None else bool(verdict)


def peak_flops(backend: Backend) -> float | None:
    """``backend.peak_flops()``: the device's float32 multiply-add throughput in FLOP/s (2 per
    multiply-add), measured once, as ``copy_bandwidth`` is; None for a backend without it."""
    method = getattr(backend, "peak_flops", None)
    if method is None:
        return None
    value = float(method())
    return value if value > 0 else None


def has_device_comparison(backend: Backend) -> bool:
    """Whether ``backend`` offers ``compare_on_device`` at all (it may still decline some arrays)."""
    return callable(getattr(backend, "compare_on_device", None))


class DeviceInputs(Protocol):
    """The optional capability of making a case's inputs, and a reference's float64 copies of them,
    on the device, so that neither is drawn or converted on the host."""

    def draw(self, tensor: Tensor, seed: int) -> Any | None:
        """A device array for ``tensor``, drawn from ``seed`` (the same seed, the same array); None
        for an ``init`` this backend cannot draw on the device (a callable), which is then drawn on
        the host and uploaded."""
        ...

    def float64(self, a: Any) -> Any:
        """A float64 device copy of the device array ``a`` (bfloat16 and float16 included)."""
        ...


def device_inputs(backend: Backend) -> DeviceInputs | None:
    """``backend`` as a ``DeviceInputs``, or None for a backend without that capability."""
    ok = callable(getattr(backend, "draw", None)) and callable(getattr(backend, "float64", None))
    return cast("DeviceInputs", backend) if ok else None


class GuardedArray(Protocol):
    """A device array with guard regions before and after it, in one allocation (``GuardedAllocation``).

    ``array`` is the middle, what the kernel is handed, of the shape and dtype asked for; the guards
    are ``guard_bytes`` each, and nothing of the kernel's should ever touch them."""

    array: Any
    guard_bytes: int

    def set(self, host: np.ndarray) -> None:
        """Copy ``host`` (of the array's shape and dtype) into the middle."""
        ...

    def copy_from(self, device: Any) -> None:
        """Copy the device array ``device`` (of the array's shape and dtype) into the middle, on the device."""
        ...

    def poison(self) -> None:
        """Fill the middle with ``poison_value`` (as ``Backend.empty(poison=True)`` does)."""
        ...

    def write_guards(self, front: bytes, back: bytes) -> None:
        """Fill the guard before the middle with ``front`` and the one after it with ``back``."""
        ...

    def read_guards(self) -> tuple[bytes, bytes]:
        """The bytes of both guards now, after the device's queued work has finished."""
        ...


class GuardedAllocation(Protocol):
    """The optional capability of allocating guarded arrays, so checks can catch out-of-bounds accesses."""

    def guarded_empty(self, shape: Sequence[int], dtype: Any, guard_bytes: int) -> GuardedArray | None:
        """A guarded array, its guards at least ``guard_bytes`` each (rounded up to the device's
        alignment); None where this backend cannot guard it (an empty array, say)."""
        ...


def guarded_empty(backend: Backend, shape: Sequence[int], dtype: Any, guard_bytes: int) -> GuardedArray | None:
    """``backend.guarded_empty(...)``, or None for a backend without it."""
    method = getattr(backend, "guarded_empty", None)
    if method is None or guard_bytes <= 0:
        return None
    out: GuardedArray | None = method(shape, dtype, guard_bytes)
    return out




def copy_of(backend: Backend, a: Any) -> Any:
    """A device copy of the device array ``a``: ``backend.copy(a)`` where the backend has one (torch tensors
    clone), else the array's own ``copy()`` (CuPy's, PyOpenCL's)."""
    method = getattr(backend, "copy", None)
    return method(a) if method is not None else a.copy()


BackendFactory = Callable[[], Backend]


def as_dim(d: Dim) -> tuple[int, ...]:
    if isinstance(d, int):
        return (int(d),)
    t = tuple(int(x) for x in d)
    if not 1 <= len(t) <= 3:
        raise ValueError(f"a grid or block has 1 to 3 dimensions, got {d!r}")
    return t


def same_rank(grid: tuple[int, ...], block: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A grid and a block of as many dimensions, the shorter padded with 1s, as CUDA reads a 2-D grid
    of 1-D blocks (and OpenCL needs its global and local sizes to have)."""
    rank = max(len(grid), len(block))
    return grid + (1,) * (rank - len(grid)), block + (1,) * (rank - len(block))


# The float32 multiply-add kernels behind ``peak_flops``: FMA_CHAINS independent chains per thread
# (enough to hide the latency of each), each step counted as 2 FLOP.
FMA_CHAINS = 8


def multiply_add_rate(run: Callable[[int], float], flops_per_iteration: int, *, min_s: float,
                      max_iterations: int = 1 << 20) -> float:
    """FLOP/s of a multiply-add kernel: ``run(iterations)`` launches it once and returns its seconds;
    the iterations are doubled until one launch lasts ``min_s``, then the median of five launches
    counts."""
    iterations = 64
    while run(iterations) < min_s and iterations < max_iterations:
        iterations *= 2
    times = sorted(run(iterations) for _ in range(5))
    return flops_per_iteration * iterations / times[2]


def poison_value(dtype: np.dtype[Any]) -> Any:
    """What fills a fresh output in checks, so that unwritten elements fail."""
    dt = np.dtype(dtype)
    if dtype_family(dt) == "f":  # bfloat16 included (numpy's kind "V")
        return np.nan
    if dt.kind in "iu":
        # An unlikely value: the minimum for signed, the maximum for unsigned.
        return np.iinfo(dt).min if dt.kind == "i" else np.iinfo(dt).max
    return 0


def scalar_arg(v: Any) -> Any:
    """A Python scalar as the kernel argument it stands for: int and bool as int32, float as float32."""
    if isinstance(v, bool | int):
        return np.int32(v)
    if isinstance(v, float):
        return np.float32(v)
    return v


def device_labels(devices: Sequence[tuple[int, DeviceInfo]]) -> list[str]:
    """How the reports name each of several devices: its name, with ``#index`` where two share a name
    (two PoCL CPU devices, two H200s)."""
    names = [d.name for _, d in devices]
    return [f"{d.name} #{i}" if names.count(d.name) > 1 else d.name for i, d in devices]
