"""The OpenCL backend, through PyOpenCL: any OpenCL device; PoCL on a CPU."""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    poison_value,
    touched_bytes,
)
from pytest_ktune.backends.compile_log import annotate, clean_log, compiler_output_wanted, quiet_stderr
from pytest_ktune.backends.identity import opencl_identity
from pytest_ktune.backends.opencl_devices import (
    UNKNOWN_CPU_HINT,
    build_log,
    cl_module,
    pick_device,
)
from pytest_ktune.backends.opencl_launch import Function
from pytest_ktune.core.dtypes import as_dtype, is_bfloat16
from pytest_ktune.core.errors import (
    CompileError,
    KtuneError,
    LaunchError,
    LimitError,
)

_COPY_SRC = """
__kernel void ktune_copy(__global const float4* restrict src, __global float4* restrict dst, ulong n) {
    for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) dst[i] = src[i];
}
"""


# Eight lanes a thread: what a CPU's vector units take (PoCL fuses none of its multiply-adds, and calls a library
# for fma(), so this counts what a kernel's own arithmetic reaches); a GPU's compiler splits them into scalar chains.
_FMA_SRC = f"""
__kernel void ktune_fma(__global float* out, float a, float b, int iters) {{
    const float8 x = (float8)(get_global_id(0) * 1e-6f);
    float8 {", ".join(f"x{c} = x + {c}.0f" for c in range(FMA_CHAINS))};
    for (int i = 0; i < iters; ++i) {{ {" ".join(f"x{c} = x{c} * a + b;" for c in range(FMA_CHAINS))} }}
    vstore8({" + ".join(f"x{c}" for c in range(FMA_CHAINS))}, get_global_id(0), out);
}}
"""
_FMA_LANES = 8


# Words of OpenCL C that a CUDA kernel's parameter may be named (read_only is a parameter of Kernel
# Tuner's CUDA convolution): a -D of one of them breaks the compiler's own headers.
_OPENCL_KEYWORDS = frozenset({
    "read_only", "write_only", "read_write", "__read_only", "__write_only", "__read_write", "kernel", "global",
    "local", "constant", "private", "__kernel", "__global", "__local", "__constant", "__private", "half",
    "image1d_t", "image2d_t", "image3d_t", "sampler_t", "event_t", "uniform", "pipe",
})


@dataclass
class _Program:
    backend: OpenCLBackend
    program: Any
    filename: str
    log: str = ""
    _functions: dict[str, Function] = field(default_factory=dict)

    def constant(self, name: str, array: Any) -> Constant:
        """``array`` (host or device) as a constant buffer, for a ``__constant`` pointer parameter."""
        buf = array if self.backend.owns(array) else self.backend.to_device(np.asarray(array))
        limit = self.backend.device.max_constant_bytes
        if limit and buf.nbytes > limit:
            raise LimitError(f"kernel.constant({name!r}): {buf.nbytes} bytes are more than the {limit} bytes of "
                             f"constant memory {self.backend.device.name} allows in one buffer "
                             "(CL_DEVICE_MAX_CONSTANT_BUFFER_SIZE)", where=self.filename,
                             hint="pass the data as a __global const pointer instead")
        return Constant(name, int(buf.nbytes), buf)

    def function(self, name: str) -> KernelFunction:
        if name not in self._functions:
            try:
                kernel = self.backend.cl.Kernel(self.program, name)
            except self.backend.cl.Error:
                names = self.program.get_info(self.backend.cl.program_info.KERNEL_NAMES)
                raise CompileError(f"no kernel named {name!r} in the compiled source (it has: {names})",
                                   where=self.filename,
                                   hint="pass kernel= to @ktune.target, or name= in kernel.launch") from None
            self._functions[name] = Function(self.backend, kernel, name, self.filename)
        return self._functions[name]


@dataclass
class _Guarded:
    """A pyopencl array on a sub-buffer of a larger buffer: guard, middle, guard."""

    backend: OpenCLBackend
    whole: Any  # the cl.Buffer holding all three
    array: Any  # a pyopencl.array.Array on the middle's sub-buffer
    guard_bytes: int
    nbytes: int

    def set(self, host: np.ndarray) -> None:
        self.array.set(np.ascontiguousarray(host), queue=self.backend.queue)

    def copy_from(self, device: Any) -> None:
        src = device if device.flags.c_contiguous else device.copy()
        self.backend.cl.enqueue_copy(self.backend.queue, self.array.base_data, src.base_data, byte_count=self.nbytes,
                                     src_offset=src.offset, dst_offset=self.array.offset)

    def poison(self) -> None:
        dt = np.dtype(self.array.dtype)
        self.set(np.full(tuple(self.array.shape), poison_value(dt), dtype=dt))

    def write_guards(self, front: bytes, back: bytes) -> None:
        cl, q = self.backend.cl, self.backend.queue
        cl.enqueue_copy(q, self.whole, np.frombuffer(front, dtype=np.uint8), dst_offset=0)
        cl.enqueue_copy(q, self.whole, np.frombuffer(back, dtype=np.uint8), dst_offset=self.guard_bytes + self.nbytes)
        q.finish()

    def read_guards(self) -> tuple[bytes, bytes]:
        cl, q = self.backend.cl, self.backend.queue
        front = np.empty(self.guard_bytes, dtype=np.uint8)
        back = np.empty(self.guard_bytes, dtype=np.uint8)
        cl.enqueue_copy(q, front, self.whole, src_offset=0)
        cl.enqueue_copy(q, back, self.whole, src_offset=self.guard_bytes + self.nbytes)
        q.finish()
        return front.tobytes(), back.tobytes()


class _Timer:
    def __init__(self, backend: OpenCLBackend, launch_sets: Sequence[Sequence[Launch]], repeats: int) -> None:
        self.backend = backend
        self.sets = launch_sets
        self.repeats = repeats
        self.mode = "queue"
        self.touched = touched_bytes(launch_sets, backend.owns)

    def sample(self, flush: bool) -> float:
        cl = self.backend.cl
        if flush:
            self.backend.flush_cache(self.touched)
        gate = cl.UserEvent(self.backend.context)
        first = last = None
        for _ in range(self.repeats):
            for launches in self.sets:
                for launch in launches:
                    fn = launch.function
                    assert isinstance(fn, Function)
                    ev = fn.enqueue(launch.grid, launch.block, launch.args,
                                    wait_for=[gate] if first is None else None, shared=launch.shared)
                    first = first or ev
                    last = ev
        gate.set_status(cl.command_execution_status.COMPLETE)
        assert first is not None and last is not None
        last.wait()
        span_ns = last.profile.end - first.profile.start
        return float(span_ns) * 1e-9 / self.repeats

    def close(self) -> None:
        self.sets = ()


class OpenCLBackend:
    """PyOpenCL on the first GPU, else the first device (PoCL's CPU device on a machine with no GPU).

    ``KTUNE_OPENCL_DEVICE`` picks a device by part of its name. It offers no
    ``compare_on_device``: outputs are copied to the host and checked there (PoCL's
    device is the host's CPU anyway, and not every OpenCL device has float64).
    """

    name = "opencl"
    defines_are_macros = True  # -D macros of a C preprocessor: a value of a name the source never spells is inert

    def __init__(self, queue: Any | None = None) -> None:
        self.cl = cl = cl_module()
        if queue is None:
            dev = pick_device(cl)
            self.context = cl.Context([dev])
            self.queue = cl.CommandQueue(self.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
        else:
            self.context = queue.context
            self.queue = queue
            dev = queue.device
        self.cl_device = dev
        self._layouts: dict[tuple[tuple[int, ...], np.dtype[Any]], tuple[int, tuple[int, ...]]] = {}  # for empty
        self.device = DeviceInfo(
            backend="opencl",
            name=f"{dev.name.strip()} ({dev.platform.name.strip()})",
            arch=f"{dev.version.strip()}; driver {dev.driver_version.strip()}",
            compiler=f"{dev.platform.version.strip()}",
            compute_units=int(dev.max_compute_units),
            max_threads_per_block=int(dev.max_work_group_size),
            shared_mem_per_block=int(dev.local_mem_size),
            regs_per_block=0,
            l2_bytes=int(dev.global_mem_cache_size),
            global_mem_bytes=int(dev.global_mem_size),
            warp_size=1,
            max_alloc_bytes=int(dev.max_mem_alloc_size),
            kind=_kind(cl, dev),
            max_constant_bytes=int(dev.max_constant_buffer_size),
            identity=opencl_identity(dev, cpu=_kind(cl, dev) == "cpu"),
        )
        self._flush_buf: Any = None
        self._bandwidth: float | None = None
        self._peak: float | None = None
        self.copy_bytes = 0  # each buffer of the last copy-bandwidth measurement
        self.cache_dir: Path | None = None

    @property
    def flush_buffer_bytes(self) -> int:
        """The size of the flush buffer now held (0 before the first flush)."""
        return 0 if self._flush_buf is None else int(self._flush_buf.size)

    def compile(self, source: str, defines: Mapping[str, Any], *, filename: str) -> _Program:
        cl = self.cl
        options = [f"-D{k}={int(v) if isinstance(v, bool) else v}" for k, v in defines.items()]
        if Path(filename).parent.is_dir():
            options.append(f"-I{Path(filename).parent}")
        kwargs: dict[str, Any] = {}
        if self.cache_dir is not None:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            kwargs["cache_dir"] = str(self.cache_dir)
        loud = compiler_output_wanted()
        try:
            with quiet_stderr(not loud), warnings.catch_warnings():
                if not loud:  # "Non-empty compiler output encountered": the warnings it means are kept out
                    warnings.simplefilter("ignore", cl.CompilerWarning)
                program = cl.Program(self.context, source).build(options=options, **kwargs)
        except cl.Error as exc:
            log = build_log(exc)
            keywords = sorted(set(defines) & _OPENCL_KEYWORDS)
            hint = "fix the source at the lines shown, or constrain the space so these defines are not tried"
            if "unknown target CPU" in log:
                hint = UNKNOWN_CPU_HINT
            elif keywords:
                what = "is an OpenCL C keyword" if len(keywords) == 1 else "are OpenCL C keywords"
                hint = (f"{', '.join(keywords)} {what}: as a -D macro it breaks OpenCL's own headers. Rename it, "
                        "or drop it on OpenCL: per_backend={'opencl': ktune.BackendSpace(drop=[...])}")
            raise CompileError(f"OpenCL compile failed with {' '.join(options) or 'no options'}:\n"
                               + annotate(log, source, filename), where=filename, hint=hint) from None
        log = program.get_build_info(self.cl_device, cl.program_build_info.LOG) or ""
        return _Program(self, program, filename, log=clean_log(str(log), filename))

    def to_device(self, a: np.ndarray) -> Any:
        _refuse_bfloat16(a.dtype, tuple(a.shape))
        self._check_size(int(a.nbytes), tuple(a.shape))
        return self.cl.array.to_device(self.queue, np.ascontiguousarray(a))

    def _check_size(self, nbytes: int, shape: tuple[int, ...]) -> None:
        """An array larger than the device's largest allocation is refused plainly, not by the driver."""
        limit = self.device.max_alloc_bytes
        if limit and nbytes > limit:
            raise LimitError(f"an array of shape {shape} ({nbytes:,} bytes) is larger than the largest buffer "
                             f"{self.device.name} allows ({limit:,} bytes, CL_DEVICE_MAX_MEM_ALLOC_SIZE)",
                             hint="declare smaller cases for this backend, or give the large ones "
                                  "backends=['cuda']")

    def to_host(self, a: Any) -> np.ndarray:
        return np.asarray(a.get(queue=self.queue))

    def empty(self, shape: Sequence[int], dtype: Any, *, poison: bool = False) -> Any:
        dt = dtype if isinstance(dtype, np.dtype) else as_dtype(dtype)
        shp = shape if type(shape) is tuple else tuple(shape)
        known = None if poison else self._layouts.get((shp, dt))
        if known is not None:  # a shape and dtype checked before (production calls allocate the same ones)
            return self.cl.array.Array(None, shp, dt, strides=known[1], _fast=True, _size=known[0],
                                       _context=self.context, _queue=self.queue)
        if dt.kind == "V":
            _refuse_bfloat16(dt, shp)
        size = math.prod(shp)
        limit = self.device.max_alloc_bytes
        if limit and size * dt.itemsize > limit:
            self._check_size(size * dt.itemsize, shp)
        if poison:
            return self.to_device(np.full(shp, poison_value(dt), dtype=dt))
        if len(shp) == 1:
            strides: tuple[int, ...] = (dt.itemsize,)
        else:
            step, backwards = dt.itemsize, []
            for n in reversed(shp):
                backwards.append(step)
                step *= max(1, n)
            strides = tuple(reversed(backwards))
        try:
            # pyopencl's own constructor for an array like another (what `x * 2` allocates its result with):
            # the public one looks the queue's context up and checks the shape with numpy, 40 µs on PoCL.
            out = self.cl.array.Array(None, shp, dt, strides=strides, _fast=True, _size=size,
                                      _context=self.context, _queue=self.queue)
            if len(self._layouts) < 4096:
                self._layouts[(shp, dt)] = (size, strides)
            return out
        except TypeError:  # a pyopencl without that constructor
            return self.cl.array.empty(self.queue, shp, dt)

    def guarded_empty(self, shape: Sequence[int], dtype: Any, guard_bytes: int) -> _Guarded | None:
        """An array on a sub-buffer in the middle of one buffer, its guards rounded up to the device's
        base-address alignment (a sub-buffer must start on it); None for an empty array."""
        dt = as_dtype(dtype)
        _refuse_bfloat16(dt, tuple(shape))
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if nbytes == 0:
            return None
        align = max(1, int(self.cl_device.mem_base_addr_align) // 8)
        guard = -(-guard_bytes // align) * align
        cl = self.cl
        whole = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, 2 * guard + nbytes)
        middle = whole.get_sub_region(guard, nbytes)
        array = cl.array.Array(self.queue, tuple(shape), dt, data=middle)
        array._ktune_whole = whole  # the sub-buffer's parent lives as long as the array
        return _Guarded(self, whole, array, guard, nbytes)

    def owns(self, obj: Any) -> bool:
        return isinstance(obj, self.cl.array.Array)

    def synchronize(self) -> None:
        try:
            self.queue.finish()
        except self.cl.Error as exc:
            raise LaunchError(f"the OpenCL queue reported an error: {exc}",
                              hint="a kernel failed while running; check its indexing") from None

    def timer(self, launch_sets: Sequence[Sequence[Launch]], repeats: int) -> _Timer:
        return _Timer(self, launch_sets, repeats)

    def flush_cache(self, touched: int | None = None) -> None:
        """Write ``flush_bytes`` bytes (one buffer, kept at the largest size asked for so far)."""
        nbytes = flush_bytes(self.device, touched)
        if self._flush_buf is None or self._flush_buf.size < nbytes:
            if self._flush_buf is not None:
                self._flush_buf.release()
            self._flush_buf = self.cl.Buffer(self.context, self.cl.mem_flags.READ_WRITE, nbytes)
        self.cl.enqueue_fill_buffer(self.queue, self._flush_buf, np.uint8(1), 0, nbytes)

    def copy_bandwidth(self) -> float:
        if self._bandwidth is None:
            self._bandwidth = self._measure_copy()
        return self._bandwidth

    def _measure_copy(self) -> float:
        cl = self.cl
        nbytes = copy_buffer_bytes(self.device, cache_multiple=8, floor=64 << 20)
        self.copy_bytes = nbytes
        src = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, nbytes)
        dst = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, nbytes)
        cl.enqueue_fill_buffer(self.queue, src, np.uint8(3), 0, nbytes)
        knl = cl.Kernel(cl.Program(self.context, _COPY_SRC).build(), "ktune_copy")
        n = np.uint64(nbytes // 16)
        local = min(256, self.device.max_threads_per_block)
        glob = local * self.device.compute_units * 8
        knl.set_args(src, dst, n)
        best = []
        for use_kernel in (False, True):
            times = []
            for _ in range(6):
                if use_kernel:
                    ev = cl.enqueue_nd_range_kernel(self.queue, knl, (glob,), (local,))
                else:
                    ev = cl.enqueue_copy(self.queue, dst, src, byte_count=nbytes)
                ev.wait()
                times.append((ev.profile.end - ev.profile.start) * 1e-9)
            best.append(2 * nbytes / statistics.median(times[1:]))
        src.release()
        dst.release()
        return float(max(best))

    def peak_flops(self) -> float:
        """float32 multiply-add throughput, FLOP/s: 8 work-groups per compute unit, 8 chains of 8 lanes
        per work-item."""
        if self._peak is None:
            self._peak = self._measure_fma()
        return self._peak

    def _measure_fma(self) -> float:
        cl = self.cl
        local = min(64, self.device.max_threads_per_block)
        glob = local * self.device.compute_units * 8
        out = cl.Buffer(self.context, cl.mem_flags.WRITE_ONLY, glob * 4 * _FMA_LANES)
        knl = cl.Kernel(cl.Program(self.context, _FMA_SRC).build(), "ktune_fma")

        def run(iters: int) -> float:
            knl.set_args(out, np.float32(0.999), np.float32(1e-3), np.int32(iters))
            ev = cl.enqueue_nd_range_kernel(self.queue, knl, (glob,), (local,))
            ev.wait()
            return float(ev.profile.end - ev.profile.start) * 1e-9

        rate = multiply_add_rate(run, glob * FMA_CHAINS * _FMA_LANES * 2, min_s=5e-3)
        out.release()
        return rate

    def release(self) -> None:
        """Nothing to give back: PyOpenCL frees a buffer as soon as its last array goes."""

def _kind(cl: Any, dev: Any) -> str:
    if dev.type & cl.device_type.CPU:
        return "cpu"
    return "gpu" if dev.type & cl.device_type.GPU else "accelerator"


def _refuse_bfloat16(dtype: Any, shape: tuple[int, ...]) -> None:
    """OpenCL has no bfloat16 type (and PoCL no extension for it): refuse such arrays plainly."""
    if is_bfloat16(dtype):
        raise KtuneError(f"the opencl backend has no bfloat16: got a bfloat16 array of shape {shape}",
                         hint="bfloat16 runs on the cuda backend: declare bfloat16 cases with "
                              "backends=['cuda'] (or run with --ktune-backend=cuda)")


