"""The fast path of production calls: after the first call for a device and key, a call binds, computes its
key, looks up once and launches; the params file is read again only when it changes; bad arguments are
refused naming the target and the argument."""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ktune
from pytest_ktune.call import plan
from pytest_ktune.core import paramsfile, paths
from pytest_ktune.core.errors import KtuneError, KtuneWarning
from pytest_ktune.measure import runtime

from . import _prod

cl_array = pytest.importorskip("pyopencl.array")

X = np.arange(100, dtype=np.float32)


def _setup(tmp_path: Path, name: str, scale: int | None = 5) -> tuple[Any, Any, Path]:
    module = _prod.load(tmp_path, name)
    q = _prod.queue()
    params = tmp_path / "ktune-params.json"
    if scale is not None:
        _prod.write_params(params, [_prod.record(name, "scale", _prod.device_id(q), 100, scale)])
    return module, q, params


def _caught(fn: Any) -> tuple[Any, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    return out, [str(w.message) for w in caught if issubclass(w.category, KtuneWarning)]


def test_after_the_first_call_a_call_reads_no_file_and_builds_nothing(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    module, q, params = _setup(tmp_path, "fast_a")
    x = cl_array.to_device(q, X)
    np.testing.assert_array_equal(module.scale(x).get(), X * 5)
    paramsfile.watch(params).check_every(3600.0)  # a second's calls: no stat of the file (one a second at most)
    counts: dict[str, int] = {}

    def counting(name: str, fn: Any) -> Any:
        def wrapped(*a: Any, **k: Any) -> Any:
            counts[name] = counts.get(name, 0) + 1
            return fn(*a, **k)
        return wrapped

    monkeypatch.setattr(inspect, "signature", counting("inspect.signature", inspect.signature))
    monkeypatch.setattr(plan, "params_path", counting("params_path", paths.params_path))
    monkeypatch.setattr(hashlib, "sha256", counting("sha256", hashlib.sha256))
    monkeypatch.setattr(json, "loads", counting("json.loads", json.loads))
    monkeypatch.setattr(runtime.Kernel, "__init__", counting("Kernel()", runtime.Kernel.__init__))
    monkeypatch.setattr(paramsfile, "_stamp", counting("stat", paramsfile._stamp))
    monkeypatch.setattr(plan, "compile_target", counting("compile", runtime.compile_target))
    outs = [module.scale(x) for _ in range(50)]
    assert counts == {}
    for out in outs:
        np.testing.assert_array_equal(out.get(), X * 5)


def test_an_edited_params_file_is_read_again_once_it_changes(tmp_path: Path) -> None:
    module, q, params = _setup(tmp_path, "fast_b")
    x = cl_array.to_device(q, X)
    np.testing.assert_array_equal(module.scale(x).get(), X * 5)
    _prod.write_params(params, [_prod.record("fast_b", "scale", _prod.device_id(q), 100, 3)])
    # Within the check interval the process keeps what it read; ktune.reload() looks at once.
    paramsfile.watch(params).check_every(3600.0)
    np.testing.assert_array_equal(module.scale(x).get(), X * 5)
    ktune.reload()
    np.testing.assert_array_equal(module.scale(x).get(), X * 3)
    # With the interval passed, a change is picked up without a reload.
    paramsfile.watch(params).check_every(0.0)
    _prod.write_params(params, [_prod.record("fast_b", "scale", _prod.device_id(q), 100, 2)])
    os.utime(params, ns=(1, 1))  # a distinct modification time, even on a coarse clock
    np.testing.assert_array_equal(module.scale(x).get(), X * 2)


def test_a_params_file_damaged_while_the_process_runs_keeps_the_old_parameters(tmp_path: Path) -> None:
    module, q, params = _setup(tmp_path, "fast_c")
    x = cl_array.to_device(q, X)
    np.testing.assert_array_equal(module.scale(x).get(), X * 5)
    paramsfile.watch(params).check_every(0.0)
    params.write_text('{"format": "pytest-ktune/1", "records": [')
    out, messages = _caught(lambda: module.scale(x).get())
    np.testing.assert_array_equal(out, X * 5)
    assert len(messages) == 1
    assert str(params) in messages[0] and "not valid JSON" in messages[0] and "read before stay in use" in messages[0]
    # One warning per change, not one per call.
    _, again = _caught(lambda: [module.scale(x) for _ in range(5)])
    assert again == []
    # A forced reload of a file still damaged warns again and still keeps the old parameters.
    def reload_and_call() -> Any:
        ktune.reload()
        return module.scale(x).get()

    out, messages = _caught(reload_and_call)
    np.testing.assert_array_equal(out, X * 5)
    # (ktune.reload() reads every params file this process watches: an earlier test's damaged one warns too)
    assert len([m for m in messages if str(params) in m]) == 1
    # Fixed: the new parameters.
    _prod.write_params(params, [_prod.record("fast_c", "scale", _prod.device_id(q), 100, 3)])
    ktune.reload()
    np.testing.assert_array_equal(module.scale(x).get(), X * 3)


def test_a_params_file_removed_while_the_process_runs_keeps_the_old_parameters_until_a_reload(
        tmp_path: Path) -> None:
    module, q, params = _setup(tmp_path, "fast_d")
    x = cl_array.to_device(q, X)
    np.testing.assert_array_equal(module.scale(x).get(), X * 5)
    paramsfile.watch(params).check_every(0.0)
    params.unlink()
    out, messages = _caught(lambda: module.scale(x).get())
    np.testing.assert_array_equal(out, X * 5)
    assert len(messages) == 1 and "gone" in messages[0]
    ktune.reload()
    np.testing.assert_array_equal(module.scale(x).get(), X * 2)  # the default


def test_a_params_file_that_appears_later_is_read(tmp_path: Path) -> None:
    module, q, params = _setup(tmp_path, "fast_e", scale=None)
    x = cl_array.to_device(q, X)
    np.testing.assert_array_equal(module.scale(x).get(), X * 2)
    _prod.write_params(params, [_prod.record("fast_e", "scale", _prod.device_id(q), 100, 5)])
    ktune.reload()
    np.testing.assert_array_equal(module.scale(x).get(), X * 5)


def test_keyword_arguments_and_defaults_bind_as_the_signature_says(tmp_path: Path) -> None:
    module, q, _ = _setup(tmp_path, "fast_f")
    x, acc = cl_array.to_device(q, X), cl_array.to_device(q, np.ones(100, np.float32))
    out, acc2 = module.addto(x=x, acc=acc)
    assert acc2 is acc
    np.testing.assert_array_equal(out.get(), (X + 1) * 2)
    out, _ = module.addto(x, acc, 2.0)  # acc was updated in place by the first call
    np.testing.assert_array_equal(out.get(), (2 * X + 1) * 2)
    np.testing.assert_array_equal(acc.get(), 2 * X + 1)
    with pytest.raises(TypeError):
        module.addto(x, acc, 1.0, 3.0)
    with pytest.raises(TypeError):
        module.addto(x, accumulator=acc)


def test_a_dtype_the_target_does_not_declare_is_refused_naming_the_argument(tmp_path: Path) -> None:
    module, q, _ = _setup(tmp_path, "fast_g")
    with pytest.raises(KtuneError) as err:
        module.scale(cl_array.to_device(q, X.astype(np.float64)))
    text = err.value.render()
    assert "target scale" in text and "argument x has dtype float64" in text and "float32" in text


def test_a_non_contiguous_array_is_refused_naming_the_argument(tmp_path: Path) -> None:
    module, q, _ = _setup(tmp_path, "fast_h")
    x = cl_array.to_device(q, np.arange(200, dtype=np.float32).reshape(100, 2)).transpose()
    with pytest.raises(KtuneError) as err:
        module.scale(x)
    assert "target scale" in err.value.render() and "argument x is not contiguous" in err.value.render()


def test_arrays_of_two_libraries_in_one_call_are_refused_naming_the_argument(tmp_path: Path) -> None:
    module, q, _ = _setup(tmp_path, "fast_i")
    with pytest.raises(KtuneError) as err:
        module.addto(cl_array.to_device(q, X), np.ones(100, np.float32))
    assert "target addto" in err.value.render() and "argument acc is a numpy.ndarray" in err.value.render()
    with pytest.raises(KtuneError, match=r"argument x is a numpy\.ndarray, not a device array"):
        module.scale(X)


def test_strided_names_arguments_of_the_function() -> None:
    with pytest.raises(KtuneError, match="strided="):
        ktune.target(sources={"opencl": "k.cl"}, space=ktune.Space(B=[1]), default={"B": 1},
                     key=lambda x: {}, cases=[ktune.Case(x=ktune.Tensor((4,)))], reference=lambda x: x,
                     strided=["y"])(lambda kernel, x: x)


def test_production_calls_on_pyopencl_arrays_never_import_torch(tmp_path: Path) -> None:
    _prod.load(tmp_path, "fast_j")
    code = ("import sys, numpy as np; sys.path.insert(0, sys.argv[1]); import pyopencl.array as A; import fast_j;"
            "from pytest_ktune import backends; q = backends.create('opencl').queue;"
            "out = fast_j.scale(A.to_device(q, np.ones(8, np.float32))).get();"
            "assert (out == 2).all(), out; print('torch' in sys.modules)")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=root,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
