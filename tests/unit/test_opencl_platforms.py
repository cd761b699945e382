"""Which OpenCL platform's devices the backend uses where several platforms drive the same device, and one of
them cannot build a program on this machine (PoCL's wheel on a CPU its LLVM does not know, beside the
distribution's PoCL): a fake pyopencl, so each case runs on any machine."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from pytest_ktune.backends import opencl, opencl_devices
from pytest_ktune.core.errors import BackendUnavailable, CompileError, KtuneWarning

UNKNOWN_CPU = ("clBuildProgram failed: BUILD_PROGRAM_FAILURE - clBuildProgram failed: BUILD_PROGRAM_FAILURE\n\n"
               "Build on <pyopencl.Device 'pthread-AMD EPYC'>:\n\nerror: unknown target CPU 'generic'\n"
               "Device pthread-AMD EPYC failed to build the program\n")


class _Error(Exception):
    pass


class _Platform:
    def __init__(self, handle: int, version: str, names: list[str], *, broken: str = "", gpu: bool = False) -> None:
        self.int_ptr = handle
        self.name = "Portable Computing Language"
        self.version = version
        self.broken = broken
        self.devices = [_Device(self, n, gpu) for n in names]

    def get_devices(self) -> list[Any]:
        return self.devices


class _Device:
    def __init__(self, platform: _Platform, name: str, gpu: bool) -> None:
        self._platform = platform
        self.name = name
        self.type = 4 if gpu else 2

    @property
    def platform(self) -> _Platform:
        return self._platform


class _FakeCL:
    Error = _Error
    CompilerWarning = UserWarning

    class device_type:
        GPU = 4

    def __init__(self, *platforms: _Platform) -> None:
        self.platforms = list(platforms)
        self.builds: list[str] = []

    def get_platforms(self) -> list[_Platform]:
        return self.platforms

    def Context(self, devices: list[_Device]) -> Any:
        return devices[0]

    def Program(self, device: _Device, source: str) -> Any:
        fake = self

        class _Built:
            def build(self) -> None:
                fake.builds.append(device.platform.version)
                if device.platform.broken:
                    raise _Error(device.platform.broken)

        return _Built()


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(opencl_devices, "_probed", {})
    monkeypatch.setattr(opencl_devices, "_told", set())
    monkeypatch.delenv("KTUNE_OPENCL_DEVICE", raising=False)


def test_a_platform_that_cannot_build_is_left_out_with_a_warning_naming_it_and_the_fix() -> None:
    wheel = _Platform(1, "PoCL 3.0-rc2", ["pthread-AMD EPYC", "pthread-AMD EPYC"], broken=UNKNOWN_CPU)
    distro = _Platform(2, "PoCL 3.1+debian", ["pthread-AMD EPYC", "pthread-AMD EPYC"])
    cl = _FakeCL(wheel, distro)
    with pytest.warns(KtuneWarning) as caught:
        chosen = opencl_devices._candidates(cl)
    assert chosen == distro.devices  # the two of one platform, not all four
    (message,) = [str(w.message) for w in caught]
    assert "PoCL 3.0-rc2" in message and "unknown target CPU 'generic'" in message
    assert "apt install pocl-opencl-icd" in message
    # Once a process: asked again (each measurement process asks), neither a second build nor a second warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert opencl_devices._candidates(cl) == distro.devices
    assert cl.builds == ["PoCL 3.0-rc2", "PoCL 3.1+debian"]


def test_two_working_platforms_of_one_device_count_it_once() -> None:
    cl = _FakeCL(_Platform(1, "PoCL 3.1+debian", ["cpu", "cpu"]), _Platform(2, "PoCL 3.0-rc2", ["cpu", "cpu"]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [d.platform.version for d in opencl_devices._candidates(cl)] == ["PoCL 3.1+debian"] * 2


def test_one_platform_is_used_as_it_is_and_its_first_build_says_what_to_do() -> None:
    cl = _FakeCL(_Platform(1, "PoCL 3.0-rc2", ["cpu"], broken=UNKNOWN_CPU))
    assert len(opencl_devices._candidates(cl)) == 1
    assert cl.builds == []  # no probe: the first real build fails with the same hint


def test_no_platform_that_builds_is_a_clear_unavailable_backend() -> None:
    cl = _FakeCL(_Platform(1, "PoCL 3.0-rc2", ["cpu"], broken=UNKNOWN_CPU),
                 _Platform(2, "Other 1.0", ["cpu"], broken="error: the compiler crashed"))
    with pytest.raises(BackendUnavailable) as info:
        opencl_devices._candidates(cl)
    text = str(info.value)
    assert "no OpenCL platform here builds a program" in text
    assert "PoCL 3.0-rc2" in text and "Other 1.0" in text and "the compiler crashed" in text
    assert "apt install pocl-opencl-icd" in text


def test_gpus_come_first_and_the_named_device_narrows_the_platforms(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = _Platform(1, "GPU runtime", ["gpu0", "gpu1"], gpu=True)
    cpu = _Platform(2, "PoCL 3.1+debian", ["cpu"])
    assert opencl_devices._candidates(_FakeCL(cpu, gpu)) == gpu.devices
    monkeypatch.setenv("KTUNE_OPENCL_DEVICE", "cpu")
    assert opencl_devices._candidates(_FakeCL(cpu, gpu)) == cpu.devices


def test_a_build_failing_on_an_unknown_cpu_gives_the_driver_hint_not_fix_the_source(tmp_path: Any) -> None:
    pytest.importorskip("pyopencl")
    try:
        backend = opencl.OpenCLBackend()
    except BackendUnavailable as exc:
        pytest.skip(f"no OpenCL device here: {exc}")

    class _Failing:
        def __init__(self, *args: Any) -> None:
            pass

        def build(self, **kwargs: Any) -> None:
            raise backend.cl.Error(UNKNOWN_CPU)

    real = backend.cl
    backend.cl = type("cl", (), {"Program": _Failing, "Error": real.Error, "CompilerWarning": real.CompilerWarning})
    with pytest.raises(CompileError) as info:
        backend.compile("__kernel void k() {}", {}, filename=str(tmp_path / "k.cl"))
    assert "apt install pocl-opencl-icd" in str(info.value)
    assert "fix the source" not in str(info.value)
