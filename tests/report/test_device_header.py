"""The header's device line (``pytest --ktune``'s second header line): the device in at most 120 columns,
whatever the driver and compiler strings; the whole strings and the machine's identity with -v."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_ktune.backends.base import DeviceInfo
from pytest_ktune.report.terminal import WIDTH, device_header

# What PoCL reports on a CPU: the name with its platform, a version with the target triple, a build string.
POCL = DeviceInfo(
    backend="opencl", name="pthread-Intel(R) Xeon(R) Processor (Portable Computing Language)",
    arch="OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-icelake-client; driver 3.0-rc2",
    compiler="OpenCL 3.0 PoCL 3.0-rc2  Linux, Release, RELOC, LLVM 14.0.6, SLEEF, DISTRO, POCL_DEBUG",
    compute_units=2, max_threads_per_block=4096, shared_mem_per_block=2 << 20, regs_per_block=0, l2_bytes=300 << 20,
    global_mem_bytes=5 << 30, warp_size=1, kind="cpu",
    identity="pthread-Intel(R) Xeon(R) Processor (Portable Computing Language) [opencl] | 2 CUs | 2100 MHz")
H200 = dataclasses.replace(POCL, backend="cuda", name="NVIDIA H200", arch="sm_90", compiler="NVRTC 13.0; CuPy 13.6.0",
                           kind="gpu", identity="")


def test_a_short_device_is_said_whole() -> None:
    assert device_header(H200) == ["ktune: backend cuda on NVIDIA H200 (sm_90; NVRTC 13.0; CuPy 13.6.0)"]


def test_pocls_253_column_line_fits_and_keeps_the_name_and_driver() -> None:
    full = f"ktune: backend opencl on {POCL.name} ({POCL.arch}; {POCL.compiler})"
    assert len(full) > 250  # what the header printed before
    (line,) = device_header(POCL)
    assert len(line) <= WIDTH
    assert line == ("ktune: backend opencl on pthread-Intel Xeon Processor (Portable Computing Language) "
                    "(driver 3.0-rc2; more with -v)")


def test_what_fits_is_kept_in_order_driver_compiler_arch() -> None:
    short = dataclasses.replace(POCL, name="EPYC")
    (line,) = device_header(short)
    # Every head fits here; the build details after "," and ":" are what -v adds.
    assert line == ("ktune: backend opencl on EPYC (OpenCL 3.0 PoCL HSTR; driver 3.0-rc2; "
                    "OpenCL 3.0 PoCL 3.0-rc2 Linux; more with -v)")
    narrower = dataclasses.replace(POCL, name="pthread-" + "x" * 20)
    (line,) = device_header(narrower)
    assert len(line) <= WIDTH and line.endswith("(driver 3.0-rc2; OpenCL 3.0 PoCL 3.0-rc2 Linux; more with -v)")


@pytest.mark.parametrize("name", ["A" * 200, "B" * 118])
def test_a_name_too_long_for_the_line_is_cut_and_the_line_still_fits(name: str) -> None:
    (line,) = device_header(dataclasses.replace(H200, name=name))
    assert len(line) <= WIDTH and line.startswith("ktune: backend cuda on ")


def test_verbose_gives_the_whole_strings_and_the_machine_identity() -> None:
    assert device_header(POCL, verbose=True) == [
        f"ktune: backend opencl on {POCL.name} ({POCL.arch}; {POCL.compiler})",
        f"ktune: machine identity {POCL.identity}"]
    assert device_header(H200, verbose=True)[1] == "ktune: machine identity NVIDIA H200 [cuda]"
