"""Targets for the production-call tests: written into a temporary project and imported from there."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

KERNELS_CL = """
__kernel void scale(__global float* out, __global const float* x, int n) {
    int i = get_global_id(0);
    if (i < n) out[i] = x[i] * SCALE;
}
__kernel void addto(__global float* out, __global float* acc, __global const float* x, int n) {
    int i = get_global_id(0);
    if (i < n) { acc[i] += x[i]; out[i] = acc[i] * SCALE; }
}
"""

MODULE = '''
import numpy as np
import ktune

@ktune.target(
    sources={"opencl": "kernels.cl"},
    space=ktune.Space(SCALE=[2, 3, 5], BLOCK=[32, 64]),
    default={"SCALE": 2, "BLOCK": 64},
    key=lambda x: {"N": x.shape[0]},
    cases=[ktune.Case(x=ktune.Tensor((100,), "float32"))],
    reference=lambda x: x * 2,
)
def scale(kernel, x):
    out = kernel.empty_like(x)
    n = x.shape[0]
    kernel.launch(grid=ktune.cdiv(n, kernel["BLOCK"]), block=kernel["BLOCK"], args=[out, x, np.int32(n)])
    return out

@ktune.target(
    sources={"opencl": "kernels.cl"},
    space=ktune.Space(SCALE=[2, 3, 5], BLOCK=[32, 64]),
    default={"SCALE": 2, "BLOCK": 64},
    key=lambda x: {"N": x.shape[0]},
    cases=[ktune.Case(x=ktune.Tensor((100,), "float32"), acc=ktune.Tensor((100,), "float32"), alpha=1.0)],
    reference=lambda x, acc, alpha: ((acc + x) * 2, acc + x),
    kernel="addto",
)
def addto(kernel, x, acc, alpha=1.0):
    """out = (acc + x) * SCALE, and acc updated in place (returned as it is)."""
    out = kernel.empty_like(x)
    n = x.shape[0]
    kernel.launch(grid=ktune.cdiv(n, kernel["BLOCK"]), block=kernel["BLOCK"], args=[out, acc, x, np.int32(n)])
    return out, acc

@ktune.target(
    sources={"cuda": "kernels.cu"},
    space=ktune.Space(BLOCK=[64]),
    default={"BLOCK": 64},
    key=lambda x: {"N": x.shape[0]},
    cases=[ktune.Case(x=ktune.Tensor((100,), "float32"))],
    reference=lambda x: x * 2,
)
def cuda_only(kernel, x):
    out = kernel.empty_like(x)
    kernel.launch(grid=1, block=64, args=[out, x])
    return out
'''


def load(tmp_path: Path, name: str, text: str = MODULE, kernels_cl: str = KERNELS_CL) -> ModuleType:
    """The module of targets above (or ``text``, its kernels in ``kernels_cl``), as ``name``, in
    ``tmp_path`` (a project of its own)."""
    (tmp_path / "kernels.cl").write_text(kernels_cl)
    (tmp_path / "kernels.cu").write_text("// not compiled here\n")
    (tmp_path / f"{name}.py").write_text(text)
    spec = importlib.util.spec_from_file_location(name, tmp_path / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def write_params(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text(json.dumps({"format": "pytest-ktune/1", "records": records}))


def record(module: str, target: str, device: str, n: int, scale: int) -> dict[str, Any]:
    return {"target": f"{module}.py::{target}", "device": device, "key": {"N": n},
            "params": {"SCALE": scale, "BLOCK": 32}}


def queue() -> Any:
    import pyopencl as cl

    from pytest_ktune.backends.opencl_devices import pick_device

    return cl.CommandQueue(cl.Context([pick_device(cl)]))


def device_id(q: Any) -> str:
    from pytest_ktune.backends.opencl import OpenCLBackend

    return OpenCLBackend(queue=q).device.id


def default_device_id() -> str:
    from pytest_ktune import backends

    return backends.create("opencl").device.id
