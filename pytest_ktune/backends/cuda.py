"""The CUDA backend, through CuPy: NVRTC compiles, CUDA-graph timing."""

from __future__ import annotations

import io
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_ktune.backends.base import (
    FMA_CHAINS,
    Constant,
    DeviceInfo,
    KernelFunction,
    Launch,
    copy_buffer_bytes,
    flush_bytes,
    multiply_add_rate,
    pinned_index,
    poison_value,
)
from pytest_ktune.backends.compile_log import annotate, clean_log, compiler_output_wanted
from pytest_ktune.backends.cuda_device import BF16_NAN, GraphTimer, GuardedView, global_size, gpu_count
from pytest_ktune.backends.cuda_launch import CudaFunction
from pytest_ktune.backends.identity import cuda_identity
from pytest_ktune.core.compare import DEVICE_KINDS, device_close
from pytest_ktune.core.dtypes import as_dtype, is_bfloat16
from pytest_ktune.core.errors import BackendUnavailable, CompileError, LaunchError, LimitError
from pytest_ktune.core.includes import deps_hash, include_closure, read_local

if TYPE_CHECKING:
    from pytest_ktune.core.case import Tensor, Tolerance

INSTALL_HINT = ("pip install 'pytest-ktune[cuda]' (CuPy for CUDA 13), or 'pytest-ktune[cuda12]' with a CUDA 12 "
                "driver, on a machine with an NVIDIA GPU")


def device_hint(exc: BaseException) -> str:
    """What to do when CuPy is installed and finds no usable device: the driver or the GPU is what is
    missing, not the extra (a driver older than CuPy's CUDA wants the cuda12 extra instead)."""
    text = str(exc)
    if "InsufficientDriver" in text or "insufficient" in text.lower():
        return ("the NVIDIA driver is older than the CUDA this CuPy was built for: update the driver, or install "
                "CuPy for the driver's CUDA (pip install 'pytest-ktune[cuda12]' for a CUDA 12 driver)")
    return ("CuPy is installed; what is missing is an NVIDIA driver or a visible GPU: check that `nvidia-smi` lists "
            "one (and CUDA_VISIBLE_DEVICES), or run on OpenCL with --ktune-backend opencl")

_COPY_SRC = r"""
extern "C" __global__ void ktune_copy(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}
"""


_FMA_SRC = r"""
extern "C" __global__ void ktune_fma(float* out, float a, float b, int iters) {
    float x[CHAINS];
    #pragma unroll
    for (int c = 0; c < CHAINS; ++c) x[c] = threadIdx.x * 1e-6f + c;
    for (int i = 0; i < iters; ++i) {
        #pragma unroll
        for (int c = 0; c < CHAINS; ++c) x[c] = x[c] * a + b;
    }
    float s = 0.0f;
    #pragma unroll
    for (int c = 0; c < CHAINS; ++c) s += x[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
""".replace("CHAINS", str(FMA_CHAINS))






def _cupy() -> Any:
    try:
        import cupy
    except ImportError as exc:
        raise BackendUnavailable(f"the CUDA backend needs CuPy ({exc})", hint=INSTALL_HINT) from None
    return cupy


def gpu_visible() -> bool:
    """Whether CuPy imports and sees at least one CUDA device."""
    return gpu_count() > 0


@dataclass(frozen=True)
class _StreamHandle:
    """A CUDA stream handle in the CUDA stream protocol (what ``cupy.cuda.Stream.from_external`` takes)."""

    handle: int

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


@dataclass
class _Program:
    backend: CudaBackend
    module: Any
    filename: str
    log: str = ""
    _functions: dict[str, CudaFunction] = field(default_factory=dict)

    def constant(self, name: str, array: Any) -> Constant:
        """Copy ``array`` (host or device) into the module's ``__constant__`` variable ``name``."""
        cp = self.backend.cp
        try:
            ptr = self.module.get_global(name)
        except Exception as exc:
            raise CompileError(f"no __constant__ variable named {name!r} in the compiled source ({exc})",
                               where=self.filename,
                               hint=f"declare it at file scope: __constant__ float {name}[SIZE];") from None
        src = array if isinstance(array, cp.ndarray) else self.backend.to_device(np.asarray(array))
        size = global_size(self.module, name)
        if size is not None and src.nbytes > size:
            raise LimitError(f"kernel.constant({name!r}): {src.nbytes} bytes do not fit the {size} bytes of "
                             f"__constant__ {name}", where=self.filename,
                             hint="declare the variable large enough, e.g. sized by a define")
        dst = cp.ndarray(src.shape, src.dtype, ptr)
        dst[...] = src
        return Constant(name, int(src.nbytes))

    def function(self, name: str) -> KernelFunction:
        if name not in self._functions:
            try:
                kernel = self.module.get_function(name)
            except Exception as exc:
                raise CompileError(f"no kernel named {name!r} in the compiled source ({exc})",
                                   where=self.filename,
                                   hint="declare it extern \"C\" __global__, or pass kernel= to "
                                        "@ktune.target") from None
            self._functions[name] = CudaFunction(self.backend, kernel, name, self.filename)
        return self._functions[name]


class CudaBackend:
    """CuPy on the current CUDA device; kernels compile with NVRTC, parameters as ``-D`` defines."""

    name = "cuda"
    defines_are_macros = True  # -D macros of a C preprocessor: a value of a name the source never spells is inert

    def __init__(self) -> None:
        self.cp = cp = _cupy()
        try:
            if (index := pinned_index()) is not None:
                cp.cuda.Device(index).use()  # --ktune-devices: this process's one device
            self.ordinal = dev_id = int(cp.cuda.Device().id)
            props = cp.cuda.runtime.getDeviceProperties(dev_id)
        except Exception as exc:
            raise BackendUnavailable(f"CuPy sees no usable CUDA device ({exc})", hint=device_hint(exc)) from None
        name = props["name"]
        name = name.decode() if isinstance(name, bytes) else str(name)
        try:
            nvrtc = ".".join(str(x) for x in cp.cuda.nvrtc.getVersion())
        except Exception:
            nvrtc = "unknown"
        compiler = f"NVRTC {nvrtc}; CuPy {cp.__version__}"
        self.device = DeviceInfo(
            backend="cuda",
            name=name,
            arch=f"sm_{props['major']}{props['minor']}",
            compiler=compiler,
            compute_units=int(props["multiProcessorCount"]),
            max_threads_per_block=int(props["maxThreadsPerBlock"]),
            shared_mem_per_block=int(props["sharedMemPerBlock"]),
            regs_per_block=int(props["regsPerBlock"]),
            l2_bytes=int(props["l2CacheSize"]),
            global_mem_bytes=int(props["totalGlobalMem"]),
            warp_size=int(props["warpSize"]),
            max_alloc_bytes=int(props["totalGlobalMem"]),  # CUDA sets no limit per allocation
            kind="gpu",
            shared_mem_per_block_optin=int(props.get("sharedMemPerBlockOptin", 0) or 0),
            max_constant_bytes=int(props.get("totalConstMem", 0) or 0),
            identity=cuda_identity(cp, dev_id, name, props, compiler),
        )
        self._flush_buf: Any = None
        self._bandwidth: float | None = None
        self._peak: float | None = None
        self.cache_dir: Path | None = None
        self.streams: dict[int, Any] = {}  # CuPy streams of other libraries' handles (external_stream)
        # A device pointer as a kernel argument that CuPy passes as it is (its CIntptr, where it has one).
        self.pointer: type = getattr(getattr(cp.cuda, "function", None), "CIntptr", np.uint64)
        if compiler_output_wanted():
            # CuPy hands over NVRTC's messages only when it compiles, never for a cached binary: with
            # KTUNE_COMPILER_OUTPUT=1 every program is compiled in this process, and its log kept.
            os.environ["CUPY_CACHE_IN_MEMORY"] = "1"

    def native_allocation(self) -> tuple[Any, Any]:
        """``empty`` and ``empty_like`` (C order) as a production call on CuPy arrays allocates its outputs: CuPy's
        array constructor itself, with no frame of this backend between (no poison, a numpy dtype as CuPy takes
        it). ``cupy.empty`` and ``cupy.empty_like`` make the same array through Python of their own: on the H200,
        1.72 µs a constructor call against 2.19 and 3.54 (benchmarks/results/h200-2026-12-03-s15/)."""
        ndarray = self.cp.ndarray
        return ndarray, lambda a: ndarray(a.shape, a.dtype)

    def external_stream(self, handle: int) -> Any:
        """A CuPy stream object for the CUDA stream ``handle`` (made once per handle)."""
        stream = self.streams.get(handle)
        if stream is None:
            cuda = self.cp.cuda
            if hasattr(cuda.Stream, "from_external"):
                stream = cuda.Stream.from_external(_StreamHandle(handle))
            else:  # CuPy before 14
                stream = cuda.ExternalStream(handle, self.ordinal)
            self.streams[handle] = stream
        return stream

    def compile(self, source: str, defines: Mapping[str, Any], *, filename: str) -> _Program:
        cp = self.cp
        options = ["--std=c++17"]
        options += [f"-D{k}={int(v) if isinstance(v, bool) else v}" for k, v in defines.items()]
        if Path(filename).parent.is_dir():
            options.append(f"-I{Path(filename).parent}")
        if self.cache_dir is not None and "CUPY_CACHE_DIR" not in os.environ:
            # CuPy keys its on-disk cubin cache by source, options, arch and NVRTC version.
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            os.environ["CUPY_CACHE_DIR"] = str(self.cache_dir)
        code = source
        included = deps_hash(Path(filename), include_closure(Path(filename), source, read_local))
        if included is not None:
            # CuPy keys its on-disk cache by the source text and options, not by the files it includes:
            # a comment naming them, after the last line, keeps an edited header from reusing a stale cubin.
            code += f"\n// pytest-ktune: included files {included}\n"
        module = cp.RawModule(code=code, options=tuple(options))
        stream = io.StringIO() if compiler_output_wanted() else None
        try:
            if stream is None:
                module.compile()
            else:
                module.compile(log_stream=stream)
        except Exception as exc:
            log = exc.get_message() if hasattr(exc, "get_message") else str(exc)
            raise CompileError(f"NVRTC compile failed with {' '.join(options[1:]) or 'no defines'}:\n"
                               + annotate(log, source, filename), where=filename,
                               hint="fix the source at the lines shown, or constrain the space so "
                                    "these defines are not tried") from None
        return _Program(self, module, filename, log=clean_log(stream.getvalue(), filename) if stream else "")

    # bfloat16 arrays (ml_dtypes on the host; CuPy 14 keeps the same dtype on the device) cross as
    # their 16-bit patterns: a bit-exact copy that needs nothing of CuPy's bfloat16 arithmetic.
    def to_device(self, a: np.ndarray) -> Any:
        a = np.ascontiguousarray(a)
        if is_bfloat16(a.dtype):
            return self.cp.asarray(a.view(np.uint16)).view(a.dtype)
        return self.cp.asarray(a)

    def to_host(self, a: Any) -> np.ndarray:
        if is_bfloat16(a.dtype):  # a view of the same item size keeps any strides
            return np.asarray(self.cp.asnumpy(a.view(np.uint16))).view(np.dtype(a.dtype))
        return np.asarray(self.cp.asnumpy(a))

    def empty(self, shape: Sequence[int], dtype: Any, *, poison: bool = False) -> Any:
        dt = dtype if isinstance(dtype, np.dtype) else as_dtype(dtype)
        out = self.cp.empty(shape, dtype=dt)
        if poison:
            if is_bfloat16(dt):
                out.view(np.uint16).fill(BF16_NAN)
            else:
                out.fill(poison_value(dt))
        return out

    def guarded_empty(self, shape: Sequence[int], dtype: Any, guard_bytes: int) -> GuardedView | None:
        """A view into the middle of one allocation, its guards rounded up to 256 bytes (CUDA's
        allocation alignment, so the view is as aligned as a plain array); None for an empty array."""
        dt = as_dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if nbytes == 0:
            return None
        guard = -(-guard_bytes // 256) * 256
        whole = self.cp.empty(2 * guard + nbytes, dtype=np.uint8)
        middle = whole[guard:guard + nbytes]
        view = (middle.view(np.uint16).view(dt) if is_bfloat16(dt) else middle.view(dt)).reshape(tuple(shape))
        return GuardedView(self, whole, view, guard, nbytes)

    def owns(self, obj: Any) -> bool:
        return isinstance(obj, self.cp.ndarray)

    def compare_on_device(self, out: Any, ref: Any, tol: Tolerance) -> bool | None:
        """Judge ``out`` against ``ref`` with CuPy in float64 on the GPU (``core.compare.device_close``),
        in chunks so the temporaries stay small; bfloat16 arrays are widened from their bits first.
        None for dtypes it does not judge (those outputs are checked on the host)."""
        out, ref = (self.float64(a) if is_bfloat16(a.dtype) else a for a in (out, ref))
        if np.dtype(out.dtype).kind not in DEVICE_KINDS or np.dtype(ref.dtype).kind not in DEVICE_KINDS:
            return None
        return device_close(self.cp, out, ref, tol)

    def draw(self, tensor: Tensor, seed: int) -> Any | None:
        """``tensor`` drawn on the GPU from ``seed`` (CuPy's ``RandomState``), with the meaning each
        ``init`` has on the host: ``normal`` in float32 times ``scale``, ``uniform`` in [-1, 1) and
        ``positive`` in [0.5, 1.5) times ``scale``, ``int`` in [low, high); then rounded once to the
        tensor's dtype (bfloat16 to nearest even, from the float32 bits). None for a callable init."""
        if callable(tensor.init) or tensor.init not in ("normal", "uniform", "positive", "int"):
            return None
        cp = self.cp
        dt = np.dtype(tensor.dtype)
        wide = np.float64 if dt == np.float64 else np.float32
        rs = cp.random.RandomState(seed)
        shape = tensor.shape
        if tensor.init == "normal":
            v = rs.standard_normal(shape, dtype=np.float32) * np.float32(tensor.scale)
        elif tensor.init == "int":
            v = rs.randint(tensor.low, tensor.high, size=shape)
        else:
            low, high = (-1.0, 1.0) if tensor.init == "uniform" else (0.5, 1.5)
            v = rs.uniform(low, high, size=shape, dtype=wide) * wide(tensor.scale)
        if is_bfloat16(dt):
            return self._to_bfloat16(v.astype(np.float32), dt)
        return cp.ascontiguousarray(v.astype(dt))

    def _to_bfloat16(self, v: Any, dt: np.dtype[Any]) -> Any:
        """float32 device values rounded to nearest even in bfloat16, from their bits."""
        cp = self.cp
        bits = v.view(cp.uint32)
        rounding = ((bits >> 16) & 1) + 0x7FFF
        return ((bits + rounding) >> 16).astype(cp.uint16).view(dt)

    def float64(self, a: Any) -> Any:
        """A float64 copy of the device array ``a``; bfloat16 widened exactly from its 16 bits."""
        cp = self.cp
        if is_bfloat16(a.dtype):
            return (cp.ascontiguousarray(a).view(cp.uint16).astype(cp.uint32) << 16).view(cp.float32).astype(
                cp.float64)
        return a.astype(cp.float64)

    def synchronize(self) -> None:
        try:
            self.cp.cuda.get_current_stream().synchronize()
            self.cp.cuda.Device().synchronize()
        except Exception as exc:
            raise LaunchError(f"the GPU reported an error: {exc}",
                              hint="a kernel failed while running (often an out-of-bounds access); "
                                   "the CUDA context may be unusable until the process restarts") from None

    def timer(self, launch_sets: Sequence[Sequence[Launch]], repeats: int) -> GraphTimer:
        return GraphTimer(self, launch_sets, repeats)

    def flush_cache(self) -> None:
        if self._flush_buf is None:
            self._flush_buf = self.cp.empty(flush_bytes(self.device), dtype=np.uint8)
        self._flush_buf.fill(1)

    def copy_bandwidth(self) -> float:
        if self._bandwidth is None:
            self._bandwidth = self._measure_copy()
        return self._bandwidth

    def _measure_copy(self) -> float:
        """Best of cudaMemcpy device-to-device and a 16-byte-vector copy kernel, bytes read + written."""
        cp = self.cp
        nbytes = copy_buffer_bytes(self.device, cache_multiple=16, floor=256 << 20)
        src = cp.empty(nbytes, dtype=np.uint8)
        src.fill(3)
        dst = cp.empty(nbytes, dtype=np.uint8)
        knl = cp.RawKernel(_COPY_SRC, "ktune_copy")
        n = np.uint64(nbytes // 16)
        grid = self.device.compute_units * 8
        start, end = cp.cuda.Event(), cp.cuda.Event()
        best = []
        for use_kernel in (False, True):
            times = []
            for _ in range(12):
                start.record()
                if use_kernel:
                    knl((grid,), (512,), (src, dst, n))
                else:
                    dst.data.copy_from_device_async(src.data, nbytes)
                end.record()
                end.synchronize()
                times.append(cp.cuda.get_elapsed_time(start, end) * 1e-3)
            best.append(2 * nbytes / statistics.median(times[2:]))
        del src, dst
        self.release()
        return float(max(best))

    def peak_flops(self) -> float:
        """float32 multiply-add throughput, FLOP/s: 8 blocks of 256 threads per SM, 8 chains each."""
        if self._peak is None:
            self._peak = self._measure_fma()
        return self._peak

    def _measure_fma(self) -> float:
        cp = self.cp
        blocks, threads = self.device.compute_units * 8, 256
        out = cp.empty(blocks * threads, dtype=np.float32)
        knl = cp.RawKernel(_FMA_SRC, "ktune_fma")
        start, end = cp.cuda.Event(), cp.cuda.Event()

        def run(iters: int) -> float:
            start.record()
            knl((blocks,), (threads,), (out, np.float32(0.999), np.float32(1e-3), np.int32(iters)))
            end.record()
            end.synchronize()
            return float(cp.cuda.get_elapsed_time(start, end)) * 1e-3

        return multiply_add_rate(run, blocks * threads * FMA_CHAINS * 2, min_s=2e-3)

    def release(self) -> None:
        self.cp.get_default_memory_pool().free_all_blocks()

