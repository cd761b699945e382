"""The production call's dispatch cache: a call with a signature seen before runs neither key nor defines, a
changed shape, dtype or scalar argument dispatches again, bad arguments are refused after a good call as on the
first, ``key_cache=False`` runs the key every call, and ``KTUNE_CHECK_DISPATCH=1`` catches a key that reads
more than the signature."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import ktune
from pytest_ktune.core.errors import KtuneError

from . import _prod

cl_array = pytest.importorskip("pyopencl.array")

KERNEL = """
__kernel void scale(__global T* out, __global const T* x, int n) {
    int i = get_global_id(0);
    if (i < n) out[i] = x[i] * SCALE;
}
"""

MODULE = '''
import numpy as np
import ktune

CALLS = {"key": 0, "defines": 0}
MODE = [1]  # what an impure key reads besides its arguments


def _key(x, k=1):
    CALLS["key"] += 1
    return {"N": x.shape[0], "K": k}


def _defines(x):
    CALLS["defines"] += 1
    return {"T": "double" if x.dtype == np.float64 else "float"}


def _launch(kernel, x):
    out = kernel.empty_like(x)
    n = x.shape[0]
    kernel.launch(grid=ktune.cdiv(n, kernel["BLOCK"]), block=kernel["BLOCK"], args=[out, x, np.int32(n)])
    return out


_common = dict(sources={"opencl": "kernels.cl"}, space=ktune.Space(SCALE=[2, 3, 5], BLOCK=[32, 64]),
               default={"SCALE": 2, "BLOCK": 64}, defines=_defines, reference=lambda x, k=1: x * 2, kernel="scale",
               cases=[ktune.Case(x=ktune.Tensor((100,), dt), k=1) for dt in ("float32", "float64")])


@ktune.target(key=_key, **_common)
def scale(kernel, x, k=1):
    return _launch(kernel, x)


@ktune.target(key=lambda x, k=1: {"N": x.shape[0], "K": MODE[0]}, **_common)
def impure(kernel, x, k=1):
    return _launch(kernel, x)


@ktune.target(key=lambda x, k=1: {"N": x.shape[0], "K": MODE[0]}, key_cache=False, **_common)
def uncached(kernel, x, k=1):
    return _launch(kernel, x)
'''


def _load(tmp_path: Path, name: str, device: str) -> ModuleType:
    records = [{"target": f"{name}.py::{t}", "device": device, "key": {"N": n, "K": k},
                "params": {"SCALE": s, "BLOCK": 32}}
               for t in ("scale", "impure", "uncached") for n, k, s in ((100, 1, 5), (100, 2, 3), (50, 1, 3))]
    _prod.write_params(tmp_path / "ktune-params.json", records)
    return _prod.load(tmp_path, name, MODULE, KERNEL)


@pytest.fixture
def setup(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[ModuleType, Any]:
    q = _prod.queue()
    name = "dispatch_" + request.node.name.removeprefix("test_")[:40]
    return _load(tmp_path, name, _prod.device_id(q)), q


def _x(q: Any, n: int = 100, dtype: Any = np.float32) -> Any:
    return cl_array.to_device(q, np.arange(n, dtype=dtype))


def test_a_seen_signature_runs_neither_key_nor_defines_and_a_changed_one_dispatches_again(
        setup: tuple[ModuleType, Any]) -> None:
    module, q = setup
    x = _x(q)
    np.testing.assert_array_equal(module.scale(x).get(), x.get() * 5)
    for _ in range(20):
        module.scale(x)
    module.scale(_x(q))  # another array of the same signature
    assert module.CALLS == {"key": 1, "defines": 1}
    np.testing.assert_array_equal(module.scale(x, 2).get(), x.get() * 3)  # a scalar the key takes
    assert module.CALLS["key"] == 2
    module.scale(x, k=2)  # the same signature, by keyword
    assert module.CALLS["key"] == 2
    half = _x(q, 50)
    np.testing.assert_array_equal(module.scale(half).get(), half.get() * 3)  # another shape
    assert module.CALLS["key"] == 3
    wide = _x(q, 100, np.float64)
    np.testing.assert_array_equal(module.scale(wide).get(), wide.get() * 5)  # another dtype: another program
    assert module.CALLS == {"key": 4, "defines": 4}
    np.testing.assert_array_equal(module.scale(x).get(), x.get() * 5)  # the first signature, still cached
    assert module.CALLS["key"] == 4


def test_calls_that_alternate_between_two_signatures_each_get_their_own_kernel(
        setup: tuple[ModuleType, Any]) -> None:
    # The fast path compares a call with the last signature it served first: a call of the other one is a miss
    # there and found by the lookup, every time, without running the key again.
    module, q = setup
    x, half = _x(q), _x(q, 50)
    for _ in range(4):
        np.testing.assert_array_equal(module.scale(x).get(), x.get() * 5)
        np.testing.assert_array_equal(module.scale(half).get(), half.get() * 3)
        np.testing.assert_array_equal(module.scale(x, 2).get(), x.get() * 3)
    assert module.CALLS == {"key": 3, "defines": 3}


def test_the_last_signature_gives_way_to_a_second_miss_not_a_first(setup: tuple[ModuleType, Any]) -> None:
    module, q = setup
    x, half = _x(q), _x(q, 50)
    module.scale(x)
    module.scale(x)
    plan = module.scale._plan

    def last_rows() -> int:
        return int(plan._last[0][2][1][0])  # the signature's x: (type, (dtype, shape, strides, queue))

    assert last_rows() == 100
    module.scale(half)  # a new signature: the first call's way
    module.scale(half)  # a first miss, found by the lookup: the last one kept
    assert last_rows() == 100
    module.scale(half)  # a second: the last one is half's now
    assert last_rows() == 50
    module.scale(x)
    assert last_rows() == 50
    np.testing.assert_array_equal(module.scale(half).get(), half.get() * 3)


def test_after_a_good_call_bad_arguments_are_still_refused_naming_them(setup: tuple[ModuleType, Any]) -> None:
    module, q = setup
    module.scale(_x(q))
    with pytest.raises(KtuneError, match="argument x has dtype int32"):
        module.scale(_x(q, 100, np.int32))
    strided = cl_array.to_device(q, np.arange(200, dtype=np.float32).reshape(100, 2)).transpose()[0]
    assert strided.shape == (100,) and not strided.flags.c_contiguous
    with pytest.raises(KtuneError, match="argument x is not contiguous"):
        module.scale(strided)
    with pytest.raises(KtuneError, match=r"argument x is a numpy\.ndarray, not a device array"):
        module.scale(np.arange(100, dtype=np.float32))
    with pytest.raises(TypeError):
        module.scale(_x(q), 1, 2)
    other = _prod.queue()  # another context's queue: another route, checked as a first call
    np.testing.assert_array_equal(module.scale(_x(other)).get(), np.arange(100, dtype=np.float32) * 5)


def test_a_scalar_the_key_reads_is_told_apart_by_type(setup: tuple[ModuleType, Any]) -> None:
    module, q = setup
    module.scale(_x(q), 1)
    module.scale(_x(q), True)  # equal to 1 and of the same hash: another signature all the same
    assert module.CALLS["key"] == 2


def test_key_cache_false_runs_the_key_on_every_call(setup: tuple[ModuleType, Any]) -> None:
    module, q = setup
    x = _x(q)
    np.testing.assert_array_equal(module.uncached(x).get(), x.get() * 5)
    module.MODE[0] = 2
    np.testing.assert_array_equal(module.uncached(x).get(), x.get() * 3)


def test_an_impure_key_is_cached_as_the_contract_says_and_caught_in_the_debug_mode(
        setup: tuple[ModuleType, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    module, q = setup
    x = _x(q)
    np.testing.assert_array_equal(module.impure(x).get(), x.get() * 5)
    module.MODE[0] = 2
    np.testing.assert_array_equal(module.impure(x).get(), x.get() * 5)  # the signature's entry, not K=2's
    monkeypatch.setenv("KTUNE_CHECK_DISPATCH", "1")
    ktune.reload()  # the debug mode is read when the cache starts again
    module.MODE[0] = 1
    module.impure(x)  # fills the cache
    module.MODE[0] = 2
    with pytest.raises(KtuneError) as err:
        module.impure(x)
    text = err.value.render()
    assert "target impure" in text and "the key function gave" in text and "key_cache=False" in text
    module.MODE[0] = 1
    module.scale(x)
    module.scale(x)  # a pure key passes the check
    monkeypatch.delenv("KTUNE_CHECK_DISPATCH")
    ktune.reload()
