"""What tells one machine's timings from another's of the same device name: a device's identity, the
key under which a baseline keeps its timings (``DeviceInfo.identity``)."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def identity_of(device_id: str, *facts: str) -> str:
    """A device's identity for timings: its id and the facts that change timings on devices of that
    name (multiprocessors, memory, clocks, driver, toolchain, the host CPU of a CPU device), one
    readable line, so that a params file says which machine recorded what."""
    return " | ".join([device_id, *(f for f in facts if f)])


def host_cpu() -> str:
    """The host's processor as the operating system names it, with its family and model numbers
    (a virtual machine may hide the model name but not those) and its logical CPU count; '' where
    none can be read."""
    fields: dict[str, str] = {}
    try:
        with Path("/proc/cpuinfo").open() as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block
                name, _, value = line.partition(":")
                fields.setdefault(name.strip(), value.strip())
    except OSError:
        pass
    model = fields.get("model name") or platform.processor() or platform.machine()
    numbers = ", ".join(f"{k} {fields[k]}" for k in ("cpu family", "model", "stepping") if k in fields)
    cache = fields.get("cache size", "")
    parts = [model, f"({numbers})" if numbers else "", f"{cache} cache" if cache else "",
             f"{os.cpu_count() or 0} CPUs"]
    return " ".join(p for p in parts if p)


def cuda_identity(cp: Any, dev_id: int, name: str, props: Mapping[str, Any], compiler: str) -> str:
    """What tells this GPU's timings from another's of the same name: multiprocessors, memory, the
    clocks it reports, the driver and the compiler (``identity_of``)."""

    def attribute(prop: str, attr: int) -> int:
        value = props.get(prop)  # CUDA 13 dropped the clock fields from the properties; ask for attributes
        if value is None:
            try:
                value = cp.cuda.runtime.deviceGetAttribute(attr, dev_id)
            except Exception:
                value = 0
        return int(value or 0)

    clock = attribute("clockRate", 13) // 1000  # kHz -> MHz (cudaDevAttrClockRate)
    mem_clock = attribute("memoryClockRate", 36) // 1000  # cudaDevAttrMemoryClockRate
    try:
        driver = str(cp.cuda.runtime.driverGetVersion())
    except Exception:
        driver = "unknown"
    gib = int(props["totalGlobalMem"]) / 2**30
    return identity_of(f"{name} [cuda]", f"{int(props['multiProcessorCount'])} SMs",
                       f"{gib:.0f} GiB", f"{clock} MHz" if clock else "",
                       f"memory {mem_clock} MHz" if mem_clock else "", f"driver {driver}", compiler)


def opencl_identity(dev: Any, *, cpu: bool) -> str:
    """What tells this device's timings from another's of the same name (``identity_of``): its
    compute units, clock, memory, driver and platform version, and for a CPU device the host's
    processor in place of the memory (PoCL names a CPU device by a shortened model name only)."""
    name = f"{dev.name.strip()} ({dev.platform.name.strip()}) [opencl]"
    # A CPU device's global memory is what the host has free when it starts (PoCL), so it names no
    # machine; a GPU's is fixed.
    memory = "" if cpu else f"{int(dev.global_mem_size) / 2**30:.1f} GiB"
    return identity_of(name, f"{int(dev.max_compute_units)} CUs", f"{int(dev.max_clock_frequency)} MHz",
                       memory, f"driver {dev.driver_version.strip()}",
                       " ".join(dev.platform.version.split()), host_cpu() if cpu else "")
