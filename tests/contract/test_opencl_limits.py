"""The OpenCL backend on a device whose reported cache is far larger than what it lets one buffer
hold (a host with a 480 MiB L3 and a small CL_DEVICE_MAX_MEM_ALLOC_SIZE): its copy-bandwidth and
flush buffers must fit the device's limits, and the flush a CPU's sample needs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pytest_ktune import BackendUnavailable
from pytest_ktune.backends.base import Launch, flush_bytes, touched_bytes
from pytest_ktune.measure.bench import BenchConfig, measure

BIG_CACHE = 480 << 20
SMALL_ALLOC = 48 << 20

SCALE = """
__kernel void scale(__global float* out, __global const float* x, int n) {
    int i = get_global_id(0);
    if (i < n) out[i] = 2.0f * x[i];
}
"""


@pytest.fixture
def backend() -> object:
    try:
        from pytest_ktune.backends.opencl import OpenCLBackend

        b = OpenCLBackend()
    except BackendUnavailable as exc:
        pytest.skip(f"{exc.message}; {exc.hint}")
    # The device as such a host reports it: PoCL gives its L3 as the global memory cache.
    b.device = dataclasses.replace(b.device, l2_bytes=BIG_CACHE, max_alloc_bytes=SMALL_ALLOC, kind="cpu")
    return b


def test_copy_bandwidth_buffers_fit_the_allocation_limit(backend: object) -> None:
    from pytest_ktune.backends.opencl import OpenCLBackend

    assert isinstance(backend, OpenCLBackend)
    bw = backend.copy_bandwidth()
    assert 0 < bw < float("inf")
    assert 0 < backend.copy_bytes <= SMALL_ALLOC


def test_flush_writes_what_a_sample_touches_within_the_limit(backend: object) -> None:
    from pytest_ktune.backends.opencl import OpenCLBackend

    assert isinstance(backend, OpenCLBackend)
    n = 1 << 16
    x = backend.to_device(np.ones(n, np.float32))
    out = backend.empty((n,), np.float32)
    fn = backend.compile(SCALE, {}, filename="scale.cl").function("scale")
    sets = [[Launch(fn, (n // 64,), (64,), (out, x, np.int32(n)))]]
    cfg = BenchConfig(min_sample_s=1e-4, min_samples=3, max_samples=3, max_time_s=5.0, warmup=1)
    m = measure(backend, sets, cfg, flush=True)
    assert len(m.samples) == 3 and m.flushed
    touched = touched_bytes(sets, backend.owns)
    assert touched == 2 * n * 4
    held = backend.flush_buffer_bytes
    assert 0 < held <= SMALL_ALLOC
    assert held == flush_bytes(backend.device, touched)
    assert held < 2 * BIG_CACHE
    np.testing.assert_array_equal(backend.to_host(out), np.full(n, 2.0, np.float32))


def test_an_array_past_the_allocation_limit_is_refused_plainly(backend: object) -> None:
    from pytest_ktune import LaunchError
    from pytest_ktune.backends.opencl import OpenCLBackend

    assert isinstance(backend, OpenCLBackend)
    with pytest.raises(LaunchError) as info:
        backend.to_device(np.zeros(SMALL_ALLOC // 4 + 1, np.float32))
    assert "is larger than the largest buffer" in info.value.message
    assert "CL_DEVICE_MAX_MEM_ALLOC_SIZE" in info.value.message
    with pytest.raises(LaunchError):
        backend.empty((SMALL_ALLOC // 2 + 1,), np.float16)
    backend.empty((1024,), np.float32)  # what fits is made as before
