"""Which OpenCL devices the backend runs on: the candidates in order (a name asked for, else the GPUs,
else any), all of one platform, the first platform that builds a program on this machine; and the one
device a measurement process is pinned to."""

from __future__ import annotations

import os
import warnings
from typing import Any

from pytest_ktune.backends.base import pinned_index
from pytest_ktune.backends.compile_log import quiet_stderr
from pytest_ktune.core.errors import BackendUnavailable, KtuneWarning

INSTALL_HINT = "pip install 'pytest-ktune[opencl]' (pyopencl and, for a CPU, pocl-binary-distribution)"
DRIVER_HINT = "an OpenCL driver is what is missing: pip install pocl-binary-distribution (CPU), or a GPU's runtime"


def cl_module() -> Any:
    try:
        import pyopencl as cl
        import pyopencl.array
    except ImportError as exc:
        raise BackendUnavailable(f"the OpenCL backend needs pyopencl ({exc})", hint=INSTALL_HINT) from None
    return cl


_PROBE_SRC = "__kernel void ktune_probe(__global int* out) { out[get_global_id(0)] = 1; }"
_probed: dict[tuple[str, str, str], str | None] = {}  # (platform, version, device) -> why it cannot build, or None
_told: set[str] = set()  # the platforms left out that this process has warned of

UNKNOWN_CPU_HINT = ("this OpenCL driver's LLVM does not know this machine's CPU (it asks for the CPU 'generic', which "
                    "LLVM refuses): PoCL's wheel (pocl-binary-distribution) bundles an LLVM older than the CPU. "
                    "Install your distribution's PoCL, built on a newer LLVM (Debian and Ubuntu: apt install "
                    "pocl-opencl-icd); ktune uses it in place of the wheel's")


def _first_error(log: str) -> str:
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower() and "BUILD_PROGRAM_FAILURE" not in line]
    return (errors or lines or ["the build failed with no log"])[0]


def _cannot_build(cl: Any, device: Any) -> str | None:
    """Why ``device`` cannot build a trivial program (the first error of its build log), or None where it can.
    Once a process for each platform and device: a platform's compiler may be broken on this machine
    (the unknown-CPU case of ``UNKNOWN_CPU_HINT``) while another platform's works."""
    key = (device.platform.name.strip(), device.platform.version.strip(), device.name.strip())
    if key not in _probed:
        try:
            with quiet_stderr(True), warnings.catch_warnings():
                warnings.simplefilter("ignore", cl.CompilerWarning)
                cl.Program(cl.Context([device]), _PROBE_SRC).build()
            _probed[key] = None
        except cl.Error as exc:
            _probed[key] = _first_error(build_log(exc) or str(exc))
    return _probed[key]


def _hint_for(why: str) -> str:
    return UNKNOWN_CPU_HINT if "unknown target CPU" in why else \
        "update or reinstall that OpenCL driver, or name another device with KTUNE_OPENCL_DEVICE"


def _candidates(cl: Any) -> list[Any]:
    """The devices this backend chooses among, in order: those KTUNE_OPENCL_DEVICE names (a substring
    of the name), else the GPUs, else any; all of one platform, the first of those platforms that builds a
    program here (two platforms may drive one device: PoCL's wheel and a distribution's PoCL both run on
    the CPU, and a device counted twice would be measured twice at once). ``--ktune-devices`` indices count
    in this list."""
    try:
        platforms = cl.get_platforms()
    except Exception as exc:  # pyopencl raises LogicError when no ICD is installed
        raise BackendUnavailable(f"no OpenCL platform found ({exc})", hint=DRIVER_HINT) from None
    devices = [d for p in platforms for d in p.get_devices()]
    if not devices:
        raise BackendUnavailable("OpenCL found no device", hint=DRIVER_HINT)
    wanted = os.environ.get("KTUNE_OPENCL_DEVICE")
    if wanted:
        pool = [d for d in devices if wanted.lower() in f"{d.platform.name} {d.name}".lower()]
        if not pool:
            names = "; ".join(f"{d.platform.name}: {d.name}" for d in devices)
            raise BackendUnavailable(f"KTUNE_OPENCL_DEVICE={wanted!r} matches no device ({names})",
                                     hint="set it to part of one of those names")
    else:
        pool = [d for d in devices if d.type & cl.device_type.GPU] or devices
    groups: dict[int, list[Any]] = {}  # by platform (its handle: each `.platform` is a new wrapper)
    for d in pool:
        groups.setdefault(int(d.platform.int_ptr), []).append(d)
    if len(groups) == 1:
        return pool  # its compiler's failures, if any, show on the first build, with their hint
    left_out: list[tuple[Any, str]] = []
    for group in groups.values():
        why = _cannot_build(cl, group[0])
        if why is None:
            for platform, reason in left_out:
                label = f"{platform.name.strip()} ({platform.version.strip()})"
                if label not in _told:
                    _told.add(label)
                    warnings.warn(KtuneWarning(f"OpenCL platform {label} left out: it cannot build a program on "
                                               f"this machine ({reason}); using {group[0].platform.name.strip()} "
                                               f"({group[0].platform.version.strip()}). {_hint_for(reason)}"),
                                  stacklevel=2)
            return group
        left_out.append((group[0].platform, why))
    whys = "; ".join(f"{p.name.strip()} ({p.version.strip()}): {why}" for p, why in left_out)
    raise BackendUnavailable(f"no OpenCL platform here builds a program: {whys}", hint=_hint_for(whys))


def device_count() -> int:
    """How many devices ``--ktune-devices all`` means here."""
    return len(_candidates(cl_module()))


def pick_device(cl: Any) -> Any:
    """The first candidate, or the one at the index the measurement process is pinned to."""
    devices = _candidates(cl)
    index = pinned_index()
    if index is None:
        return devices[0]
    if index >= len(devices):
        raise BackendUnavailable(f"--ktune-devices names OpenCL device {index}, but there are {len(devices)} "
                                 f"({'; '.join(d.name for d in devices)})",
                                 hint=f"give indices below {len(devices)}, or all")
    return devices[index]



def build_log(exc: Any) -> str:
    # pyopencl puts the build log into the error's text; keep all of it.
    return str(exc)
