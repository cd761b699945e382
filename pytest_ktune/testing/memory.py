"""The part of the backend contract about memory and launch shapes, mixed into ``BackendContract``:
guarded arrays (``guarded_empty``), constant memory (``kernel.constant``), dynamic shared memory
(``kernel.launch(..., shared=)``), a 2-D grid of 1-D blocks, and the multiply-add peak (``peak_flops``).

Both are optional for a backend: these tests skip where ``WEIGH_SOURCES`` has no kernel in its language,
or where it offers no ``peak_flops``.

``weigh``
    ``ktune_weigh``: each block stages its elements in dynamic shared memory and writes them mirrored
    (a thread reads what another staged), times constant ``ktune_weights[k % 4]``; blocks are
    numbered across a 2-D grid of 1-D blocks. On OpenCL the weights are a ``__constant`` argument and
    the shared memory the last, ``__local``, one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from pytest_ktune.backends.base import Backend, KernelFunction, guarded_empty, peak_flops, poison_value
from pytest_ktune.call import target
from pytest_ktune.core.case import Case, Tensor
from pytest_ktune.core.errors import LimitError
from pytest_ktune.core.launch import cdiv
from pytest_ktune.core.names import C_BACKENDS
from pytest_ktune.core.space import Space
from pytest_ktune.measure.runtime import Kernel, run

_WEIGH: dict[str, str] = {
    "opencl": """\
__kernel void ktune_weigh(__global float* out, __global const float* x, __constant float* ktune_weights, int n,
                          __local float* stage) {
    const int b = get_group_id(1) * get_num_groups(0) + get_group_id(0);
    const int l = get_local_id(0), size = get_local_size(0);
    const int i = b * size + l;
    stage[l] = i < n ? x[i] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int j = size - 1 - l, k = b * size + j;
    if (k < n) out[k] = stage[j] * ktune_weights[k % 4];
}
""",
    "cuda": """\
__constant__ float ktune_weights[4];
extern "C" __global__ void ktune_weigh(float* out, const float* x, int n) {
    extern __shared__ float stage[];
    const int b = blockIdx.y * gridDim.x + blockIdx.x;
    const int l = threadIdx.x, size = blockDim.x;
    const int i = b * size + l;
    stage[l] = i < n ? x[i] : 0.0f;
    __syncthreads();
    const int j = size - 1 - l, k = b * size + j;
    if (k < n) out[k] = stage[j] * ktune_weights[k % 4];
}
""",
}
_SUFFIX = {"opencl": ".cl", "cuda": ".cu"}


def _weighed(x: Any, w: Any) -> Any:
    return x.astype(np.float64) * np.resize(w, x.shape)


class MemoryContract:
    """Constant and dynamic shared memory, a 2-D grid of 1-D blocks, the multiply-add peak."""

    WEIGH_SOURCES: ClassVar[Mapping[str, str]] = _WEIGH
    #: Elements of the ``weigh`` test: not a multiple of the block, nor of the grid's two rows.
    WEIGH_N: ClassVar[int] = 1000

    # Provided by BackendContract (a scale kernel: out[i] = x[i] * scale + offset, and its input).
    def scale_function(self, backend: Backend, scale: Any, offset: Any) -> KernelFunction:
        raise NotImplementedError

    def block_for(self, fn: KernelFunction) -> int:
        raise NotImplementedError

    def host_input(self, n: int | None = None, seed: int = 0) -> np.ndarray:
        raise NotImplementedError

    # -- guarded arrays ------------------------------------------------------
    @pytest.mark.parametrize("dtype", ["float16", "float32", "int32"])
    def test_a_guarded_array_runs_like_a_plain_one_and_keeps_its_guards(self, backend: Backend, dtype: str) -> None:
        """A backend that offers ``guarded_empty`` hands out a middle the kernels use like any array,
        guards that hold what was written to them, and sees a write past the end in them."""
        if not callable(getattr(backend, "guarded_empty", None)):
            pytest.skip(f"{backend.name} offers no guarded_empty")
        dt = np.dtype(dtype)
        host = (np.random.default_rng(3).standard_normal((5, 7)) * 20).astype(dt)
        buf = guarded_empty(backend, host.shape, dt, 100)
        assert buf is not None and buf.guard_bytes >= 100 and backend.owns(buf.array)
        assert tuple(buf.array.shape) == (5, 7) and np.dtype(buf.array.dtype) == dt
        front, back = bytes(i * 7 % 256 for i in range(buf.guard_bytes)), b"\x7e" * buf.guard_bytes
        buf.write_guards(front, back)
        buf.set(host)
        np.testing.assert_array_equal(backend.to_host(buf.array), host)
        assert buf.read_guards() == (front, back)
        buf.poison()
        got = backend.to_host(buf.array)
        assert (np.isnan(got).all() if dt.kind == "f" else (got == poison_value(dt)).all())
        assert buf.read_guards() == (front, back)
        # A device copy into the middle (a check's fresh input) leaves the guards as they were.
        source = backend.to_device(host[::-1].copy())
        buf.copy_from(source)
        np.testing.assert_array_equal(backend.to_host(buf.array), host[::-1])
        assert buf.read_guards() == (front, back)
        x = self.host_input()
        out = guarded_empty(backend, (x.size - 1,), np.float32, 64)
        assert out is not None
        out.write_guards(b"\0" * out.guard_bytes, b"\0" * out.guard_bytes)
        fn = self.scale_function(backend, 2, 1)
        block = self.block_for(fn)
        # n = x.size: one element more than out holds, so the last write lands in the guard after it
        fn.launch((cdiv(x.size, block),), (block,), (out.array, backend.to_device(x), np.int32(x.size)))
        backend.synchronize()
        after_front, after_back = out.read_guards()
        assert after_front == b"\0" * out.guard_bytes
        assert np.frombuffer(after_back[:4], np.float32)[0] == np.float32(x[-1] * 2 + 1)

    def _weigh(self, backend: Backend, tmp_path: Path, shared: Any) -> Any:
        if backend.name not in C_BACKENDS or backend.name not in self.WEIGH_SOURCES:
            pytest.skip(f"no weigh kernel for backend {backend.name!r} (add it to WEIGH_SOURCES)")
        path = tmp_path / f"contract_weigh{_SUFFIX[backend.name]}"
        path.write_text(self.WEIGH_SOURCES[backend.name])

        @target(sources={backend.name: path}, space=Space(BLOCK=[32, 64]), default={"BLOCK": 64},
                key=lambda x: {"N": x.shape[0]}, cases=[Case(x=Tensor((self.WEIGH_N,)), w=Tensor((4,)))],
                reference=_weighed, kernel="ktune_weigh", name="contract_weigh")
        def contract_weigh(kernel: Kernel, x: Any, w: Any) -> Any:
            n = int(x.shape[0])
            out = kernel.empty(n, np.float32)
            block = int(kernel["BLOCK"])
            grid = (cdiv(cdiv(n, block), 2), 2)  # a 2-D grid of 1-D blocks
            kernel.launch(grid=grid, block=block, args=[out, x, kernel.constant("ktune_weights", w), np.int32(n)],
                          shared=shared)
            return out

        return contract_weigh

    def test_constant_and_dynamic_shared_memory_on_a_2d_grid(self, backend: Backend, tmp_path: Path) -> None:
        weigh = self._weigh(backend, tmp_path, shared=lambda params: 4 * int(params["BLOCK"]))
        rng = np.random.default_rng(5)
        x, w = rng.standard_normal(self.WEIGH_N).astype(np.float32), np.array([1, -2, 0.5, 3], np.float32)
        bound = {"x": backend.to_device(x), "w": w}  # a host array goes to constant memory too
        for block in (32, 64):
            result, launches = run(backend, weigh, {"BLOCK": block}, bound, poison=True)
            backend.synchronize()
            np.testing.assert_allclose(backend.to_host(result), _weighed(x, w), rtol=1e-6)
            (launch,) = launches
            assert launch.grid == (cdiv(cdiv(self.WEIGH_N, block), 2), 2) and launch.block == (block, 1)
            assert launch.shared == 4 * block
            # A replay carries the shared memory and the constants along.
            out = launch.args[0]
            if hasattr(out, "fill"):  # CuPy's and PyOpenCL's arrays: poison, so the replay must write it again
                out.fill(np.float32(np.nan))
            timer = backend.timer([launches], 2)
            try:
                assert timer.sample(False) > 0
            finally:
                timer.close()
            backend.synchronize()
            np.testing.assert_allclose(backend.to_host(result), _weighed(x, w), rtol=1e-6)

    def test_more_dynamic_shared_memory_than_48_kib_where_the_device_allows_it(self, backend: Backend,
                                                                                tmp_path: Path) -> None:
        """Past 48 KiB a CUDA kernel must opt in (``cudaFuncAttributeMaxDynamicSharedMemorySize``)."""
        want = 64 << 10
        if backend.device.shared_limit < want:
            pytest.skip(f"{backend.device.name} allows {backend.device.shared_limit} bytes of shared memory per block")
        weigh = self._weigh(backend, tmp_path, shared=want)
        x = np.arange(self.WEIGH_N, dtype=np.float32)
        result, launches = run(backend, weigh, {"BLOCK": 64}, {"x": backend.to_device(x), "w": np.ones(4, np.float32)})
        backend.synchronize()
        assert launches[0].shared == want
        np.testing.assert_array_equal(backend.to_host(result), x)

    def test_dynamic_shared_memory_past_the_device_limit_is_refused(self, backend: Backend, tmp_path: Path) -> None:
        weigh = self._weigh(backend, tmp_path, shared=backend.device.shared_limit + 4)
        x = backend.to_device(np.ones(self.WEIGH_N, np.float32))
        with pytest.raises(LimitError, match=r"shared|local") as info:
            run(backend, weigh, {"BLOCK": 64}, {"x": x, "w": np.ones(4, np.float32)})
        assert "target contract_weigh (" in str(info.value)

    def test_peak_flops_is_positive_and_finite_where_offered(self, backend: Backend) -> None:
        rate = peak_flops(backend)
        if rate is None:
            pytest.skip("the backend offers no peak_flops")
        assert math.isfinite(rate) and 1e8 < rate < 1e16, f"{rate:.3g} FLOP/s: a unit error?"
        assert peak_flops(backend) == rate  # measured once
