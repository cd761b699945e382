"""Calling a target in ordinary code runs the parameters recorded for this device and key."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from pytest_ktune import Target
from pytest_ktune.call import KtuneWarning

from . import _prod

cl = pytest.importorskip("pyopencl")
cl_array = pytest.importorskip("pyopencl.array")


def _load(tmp_path: Path, name: str) -> Target:
    t = _prod.load(tmp_path, name).scale
    assert isinstance(t, Target)
    return t


def test_default_parameters_without_a_params_file(tmp_path: Path) -> None:
    t = _load(tmp_path, "prodmod_a")
    q = _prod.queue()
    x = np.arange(100, dtype=np.float32)
    out = t(cl_array.to_device(q, x)).get()
    np.testing.assert_array_equal(out, x * 2)


def test_recorded_parameters_are_used_for_this_device_and_key(tmp_path: Path) -> None:
    from pytest_ktune.backends.opencl import OpenCLBackend

    t = _load(tmp_path, "prodmod")
    q = _prod.queue()
    device = OpenCLBackend(queue=q).device.id
    _prod.write_params(tmp_path / "ktune-params.json", [_prod.record("prodmod", "scale", device, 100, 5)])
    x = np.arange(100, dtype=np.float32)
    np.testing.assert_array_equal(t(cl_array.to_device(q, x)).get(), x * 5)
    # Another key (a length with no record) falls back to the default.
    y = np.arange(64, dtype=np.float32)
    np.testing.assert_array_equal(t(cl_array.to_device(q, y)).get(), y * 2)


def test_a_damaged_params_file_warns_and_runs_the_default(tmp_path: Path) -> None:
    t = _load(tmp_path, "prodmod_c")
    (tmp_path / "ktune-params.json").write_text("{ not json")
    q = _prod.queue()
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
    first, second = OpenCLBackend(queue=_prod.queue()), OpenCLBackend(queue=_prod.queue())
    assert first.device == second.device and first.context != second.context
    a = cache.get(first, _prod.KERNELS_CL, {"SCALE": 2}, "kernels.cl")
    assert cache.get(first, _prod.KERNELS_CL, {"SCALE": 2}, "kernels.cl") is a
    b = cache.get(second, _prod.KERNELS_CL, {"SCALE": 2}, "kernels.cl")
    assert b is not a
    assert b.program.context == second.context  # type: ignore[attr-defined]
