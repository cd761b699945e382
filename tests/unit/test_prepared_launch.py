"""Launches prepared once: the backends' kernel functions check a block and convert arguments on the first
launch of a block and argument types, and take a launch like it without the checks; anything else is
checked as before (a block over the limit, a Python scalar that must be an int32, a constant left out)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from pytest_ktune.backends.base import Constant, Resources
from pytest_ktune.backends.cuda_launch import CudaFunction
from pytest_ktune.core.errors import LimitError


class _RawKernel:
    """Stands in for a cupy.RawKernel: records what each launch passed."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, Any, tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, grid: Any, block: Any, args: tuple[Any, ...], **kw: Any) -> None:
        self.calls.append((grid, block, args, kw))


def _cuda_function(monkeypatch: pytest.MonkeyPatch) -> tuple[CudaFunction, _RawKernel, list[int]]:
    raw = _RawKernel()
    backend = SimpleNamespace(device=SimpleNamespace(name="a GPU", shared_limit=48 << 10),
                              external_stream=lambda handle: f"stream {handle}", streams={})
    fn = CudaFunction(backend, raw, "k", "k.cu")
    fn._resources = Resources(registers=32, shared_bytes=0, local_bytes=0, max_threads_per_block=256)
    fn._limit = 256
    checks: list[int] = []
    original = CudaFunction._check_block

    def counted(self: CudaFunction, grid: Any, block: Any) -> None:
        checks.append(1)
        original(self, grid, block)

    monkeypatch.setattr(CudaFunction, "_check_block", counted)
    return fn, raw, checks


def test_a_cuda_launch_like_the_last_checked_one_skips_the_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    fn, raw, checks = _cuda_function(monkeypatch)
    out, x = np.zeros(4, np.float32), np.ones(4, np.float32)
    fn.launch((1,), (128,), [out, x, np.int32(4)])
    fn.launch((2,), (128,), [x, out, np.int32(8)])
    assert len(checks) == 1
    assert raw.calls[1][0] == (2,) and raw.calls[1][2][0] is x and raw.calls[1][2][2] == 8
    fn.launch_on_stream((1,), (128,), [np.uint64(7), x, np.int32(4)], 99)  # other types: checked
    fn.launch_on_stream((1,), (128,), [np.uint64(9), x, np.int32(4)], 99)
    assert len(checks) == 2 and raw.calls[-1][3]["stream"] == "stream 99"


def test_a_cuda_launch_that_differs_is_checked_and_converted(monkeypatch: pytest.MonkeyPatch) -> None:
    fn, raw, checks = _cuda_function(monkeypatch)
    x = np.ones(4, np.float32)
    fn.launch((1,), (128,), [x, np.int32(4)])
    fn.launch((1,), (128,), [x, 4])  # a Python int: the kernel takes an int32, as the checked way gives it
    assert type(raw.calls[-1][2][1]) is np.int32
    fn.launch((1,), (128,), [x, 5])  # like the last checked launch: converted at its place, not checked again
    assert type(raw.calls[-1][2][1]) is np.int32 and raw.calls[-1][2][1] == 5
    assert len(checks) == 2
    fn.launch((1,), (128,), [x, 2.5, 3])  # a float becomes a float32
    fn.launch((1,), (128,), [x, 0.5, 7])
    assert [type(a) for a in raw.calls[-1][2][1:]] == [np.float32, np.int32] and raw.calls[-1][2][1:] == (0.5, 7)
    fn.launch((1,), (128,), [x, Constant("table", 16), np.int32(4)])  # a constant is left out
    assert len(raw.calls[-1][2]) == 2
    fn.launch((1,), (128,), [x, Constant("table", 16), np.int32(4)])  # and checked every time
    with pytest.raises(LimitError, match="512 threads per block"):
        fn.launch((1,), (512,), [x, np.int32(4)])
    assert len(checks) == 6


def test_an_opencl_launch_like_the_last_one_computes_the_same_and_a_bad_block_is_still_refused() -> None:
    pytest.importorskip("pyopencl")
    import pyopencl.array as cla

    from pytest_ktune.backends.opencl import OpenCLBackend
    from pytest_ktune.core.errors import LaunchError

    backend = OpenCLBackend()
    src = "__kernel void k(__global float* o, __global const float* x, int n) " \
          "{ int i = get_global_id(0); if (i < n) o[i] = x[i] * n; }"
    fn = backend.compile(src, {}, filename="k.cl").function("k")
    x = cla.to_device(backend.queue, np.arange(8, dtype=np.float32))
    for n in (8, 3, 8):
        out = cla.zeros(backend.queue, 8, np.float32)
        fn.launch((1,), (8,), [out, x, np.int32(n)])
        want = np.where(np.arange(8) < n, np.arange(8, dtype=np.float32) * n, 0)
        np.testing.assert_array_equal(out.get(), want)
    out = cla.zeros(backend.queue, 8, np.float32)
    fn.launch((1,), (8,), [out, x, 2])  # a Python int where an int32 was: packed as the kernel's int
    np.testing.assert_array_equal(out.get()[:2], [0, 2])
    limit = fn.resources().max_threads_per_block
    with pytest.raises(LimitError):
        fn.launch((1,), (limit * 2,), [out, x, np.int32(8)])
    with pytest.raises(LaunchError):
        fn.launch((1,), (8,), [out, np.int32(8), x])  # a buffer where a scalar was: the checked way names it
