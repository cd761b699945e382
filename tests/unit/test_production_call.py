"""Calling a target in ordinary code runs the parameters recorded for this device and key."""

from __future__ import annotations

import importlib.util
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_ktune import Target
from pytest_ktune.measure.production import KtuneWarning

cl = pytest.importorskip("pyopencl")
cl_array = pytest.importorskip("pyopencl.array")

KERNEL_CL = """
__kernel void scale(__global float* out, __global const float* x, int n) {
    int i = get_global_id(0);
    if (i < n) out[i] = x[i] * SCALE;
}
"""

MODULE = '''
import numpy as np
import ktune

@ktune.target(
    sources={"opencl": "scale.cl"},
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
'''


def _load(tmp_path: Path, name: str) -> Target:
    (tmp_path / "scale.cl").write_text(KERNEL_CL)
    (tmp_path / f"{name}.py").write_text(MODULE)
    spec = importlib.util.spec_from_file_location(name, tmp_path / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    t = module.scale
    assert isinstance(t, Target)
    return t


def _queue() -> Any:
    from pytest_ktune.backends.opencl import _pick_device

    dev = _pick_device(cl)
    return cl.CommandQueue(cl.Context([dev]))


def _record(tmp_path: Path, device: str, scale: int, n: int = 100, module: str = "prodmod") -> None:
    record = {"target": f"{module}.py::scale", "device": device, "key": {"N": n},
              "params": {"SCALE": scale, "BLOCK": 32}}
    (tmp_path / "ktune-params.json").write_text(
        json.dumps({"format": "pytest-ktune/1", "records": [record]}))


def test_default_parameters_without_a_params_file(tmp_path: Path) -> None:
    t = _load(tmp_path, "prodmod_a")
    q = _queue()
    x = np.arange(100, dtype=np.float32)
    out = t(cl_array.to_device(q, x)).get()
    np.testing.assert_array_equal(out, x * 2)


def test_recorded_parameters_are_used_for_this_device_and_key(tmp_path: Path) -> None:
    from pytest_ktune.backends.opencl import OpenCLBackend

    t = _load(tmp_path, "prodmod")
    q = _queue()
    device = OpenCLBackend(queue=q).device.id
    _record(tmp_path, device, scale=5)
    x = np.arange(100, dtype=np.float32)
    np.testing.assert_array_equal(t(cl_array.to_device(q, x)).get(), x * 5)
    # Another key (a length with no record) falls back to the default.
    y = np.arange(64, dtype=np.float32)
    np.testing.assert_array_equal(t(cl_array.to_device(q, y)).get(), y * 2)


def test_a_damaged_params_file_warns_and_runs_the_default(tmp_path: Path) -> None:
    t = _load(tmp_path, "prodmod_c")
    (tmp_path / "ktune-params.json").write_text("{ not json")
    q = _queue()
    x = np.arange(100, dtype=np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = t(cl_array.to_device(q, x)).get()
    np.testing.assert_array_equal(out, x * 2)
    messages = [str(w.message) for w in caught if issubclass(w.category, KtuneWarning)]
    assert messages and "ktune-params.json" in messages[0] and "not valid JSON" in messages[0]
    assert (tmp_path / "ktune-params.json").read_text() == "{ not json"


def test_two_backends_on_one_device_never_share_a_compiled_program() -> None:
    """A program belongs to its context: a second OpenCL context on the same device gets its own build."""
    from pytest_ktune.backends.opencl import OpenCLBackend
    from pytest_ktune.measure.runtime import CompileCache

    cache = CompileCache()
    first, second = OpenCLBackend(queue=_queue()), OpenCLBackend(queue=_queue())
    assert first.device == second.device and first.context != second.context
    a = cache.get(first, KERNEL_CL, {"SCALE": 2}, "scale.cl")
    assert cache.get(first, KERNEL_CL, {"SCALE": 2}, "scale.cl") is a
    b = cache.get(second, KERNEL_CL, {"SCALE": 2}, "scale.cl")
    assert b is not a
    assert b.program.context == second.context  # type: ignore[attr-defined]
