"""A backend that cannot start says what is missing: the package (an extra to install) when it cannot be
imported, the driver or the device when the package is there."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from pytest_ktune.core.errors import BackendUnavailable


def _fake_cupy(error: str) -> types.ModuleType:
    def device() -> Any:
        raise RuntimeError(error)

    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(Device=device)  # type: ignore[attr-defined]
    return cupy


def test_cupy_installed_without_a_gpu_points_at_the_driver_not_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_ktune.backends.cuda import CudaBackend

    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy("cudaErrorNoDevice: no CUDA-capable device is detected"))
    with pytest.raises(BackendUnavailable, match="CuPy sees no usable CUDA device") as info:
        CudaBackend()
    assert "pip install" not in info.value.hint and "pytest-ktune[cuda]" not in info.value.hint
    assert "nvidia-smi" in info.value.hint and "--ktune-backend opencl" in info.value.hint


def test_a_driver_older_than_cupys_cuda_points_at_the_cuda12_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_ktune.backends.cuda import CudaBackend

    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy("cudaErrorInsufficientDriver: CUDA driver version is "
                                                        "insufficient for CUDA runtime version"))
    with pytest.raises(BackendUnavailable) as info:
        CudaBackend()
    assert "older than the CUDA this CuPy was built for" in info.value.hint and "cuda12" in info.value.hint


def test_no_cupy_at_all_points_at_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_ktune.backends.cuda import CudaBackend

    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(BackendUnavailable, match="the CUDA backend needs CuPy") as info:
        CudaBackend()
    assert "pip install 'pytest-ktune[cuda]'" in info.value.hint


def test_pyopencl_without_a_driver_points_at_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_ktune.backends.opencl_devices import pick_device

    def no_icd() -> list[Any]:
        raise RuntimeError("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")

    with pytest.raises(BackendUnavailable, match="no OpenCL platform found") as info:
        pick_device(types.SimpleNamespace(get_platforms=no_icd))
    assert "pytest-ktune[opencl]" not in info.value.hint and "pocl-binary-distribution" in info.value.hint
    with pytest.raises(BackendUnavailable, match="OpenCL found no device") as info:
        pick_device(types.SimpleNamespace(get_platforms=lambda: []))
    assert "an OpenCL driver is what is missing" in info.value.hint
