"""check_outputs: what passes, what never passes, and what a failure message tells the user."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_ktune import Case, MismatchError, ReferenceShapeError, Space, Target, Tensor, Tolerance, target
from pytest_ktune.measure.verify import case_seed, check_outputs, draw_inputs

THIS_FILE = str(Path(__file__).resolve())


def verify_kernel(kernel: Any, x: Any) -> Any:
    return x


def _target(tolerance: Any = None) -> Target:
    return target(
        sources={"opencl": "verify.cl"}, space=Space(BLOCK=[64]), default={"BLOCK": 64},
        key=lambda x: {"N": x.shape[0]}, cases=[Case(x=Tensor((4,)))], reference=lambda x: x,
        tolerance=tolerance,
    )(verify_kernel)


def _check(got: Any, expected: Any, *, seed: int = 7, tolerance: Any = None, repro: str = "") -> Any:
    return check_outputs(_target(tolerance), "N4-float32", got, expected, seed=seed, backend="opencl",
                         repro=repro)


def _ref(dtype: str = "float32", shape: tuple[int, ...] = (4, 6)) -> np.ndarray:
    return (np.arange(int(np.prod(shape))).reshape(shape) * 0.5 + 1).astype(dtype)


INFINITE = Tolerance(norm=math.inf, atol=math.inf, rtol=math.inf)


def test_equal_outputs_pass() -> None:
    ref = _ref()
    (c,) = _check(ref.copy(), ref)
    assert c.ok and c.mismatched == 0 and c.rel_norm == 0.0


def test_several_outputs_are_compared_in_order() -> None:
    a, b = _ref(), _ref("int32")
    results = _check((a.copy(), b.copy()), [a, b])
    assert [c.index for c in results] == [0, 1] and all(c.ok for c in results)


@pytest.mark.parametrize("tolerance", [None, INFINITE])
@pytest.mark.parametrize("ref_value", [3.0, math.nan])
def test_nan_never_passes(tolerance: Any, ref_value: float) -> None:
    ref = _ref()
    ref[1, 2] = ref_value
    got = ref.copy()
    got[1, 2] = math.nan
    with pytest.raises(MismatchError) as info:
        _check(got, ref, tolerance=tolerance)
    message = str(info.value)
    assert "worst at index (1, 2)" in message
    assert "NaN where a value was expected" in message


@pytest.mark.parametrize("tolerance", [None, INFINITE])
@pytest.mark.parametrize(("got_value", "ref_value"), [
    (math.inf, 3.0), (-math.inf, 3.0), (math.inf, math.inf), (-math.inf, -math.inf),
])
def test_inf_never_passes(tolerance: Any, got_value: float, ref_value: float) -> None:
    ref = _ref()
    ref[3, 0] = ref_value
    got = ref.copy()
    got[3, 0] = got_value
    with pytest.raises(MismatchError, match=r"worst at index \(3, 0\)"):
        _check(got, ref, tolerance=tolerance)


def test_the_worst_element_is_reported() -> None:
    ref = _ref()
    got = ref.copy()
    got[0, 1] += 0.01   # off, but less so
    got[2, 3] += 1.0    # the worst
    with pytest.raises(MismatchError) as info:
        _check(got, ref)
    message = str(info.value)
    expected = float(ref[2, 3])
    assert "2 of 24 elements out of tolerance" in message
    assert f"worst at index (2, 3): got {expected + 1.0!r}, expected {expected!r}" in message


def test_the_message_names_the_seed_case_backend_target_and_next_step() -> None:
    ref = _ref()
    with pytest.raises(MismatchError) as info:
        _check(ref + 1, ref, seed=424242, repro="rerun with --ktune-seed 99")
    message = str(info.value)
    assert "(seed 424242)" in message
    assert "case N4-float32 on opencl" in message
    assert "target verify_kernel" in message and THIS_FILE in message
    assert "next step: rerun with --ktune-seed 99" in message


def test_a_shape_mismatch_is_a_reference_error() -> None:
    with pytest.raises(ReferenceShapeError, match=r"shape \(4, 6\) but the reference's has \(6, 4\)"):
        _check(_ref(), _ref(shape=(6, 4)))


def test_a_dtype_family_mismatch_is_a_reference_error() -> None:
    with pytest.raises(ReferenceShapeError, match="is float32 but the reference's is int64"):
        _check(_ref(), _ref("int64"))


def test_integer_widths_may_differ() -> None:
    (c,) = _check(_ref("int32"), _ref("int64"))
    assert c.ok


def test_a_different_number_of_outputs_is_a_reference_error() -> None:
    ref = _ref()
    with pytest.raises(ReferenceShapeError, match="returned 2 output"):
        _check((ref, ref), ref)


def test_tolerance_depends_on_the_dtype() -> None:
    ref = _ref("float64")
    near = ref * (1 + 5e-4)  # 0.05 % off everywhere
    (c,) = _check(near.astype(np.float16), ref.astype(np.float16))
    assert c.ok, "0.05 % is within float16's tolerance"
    with pytest.raises(MismatchError, match=r"limit 1e-05"):
        _check(near.astype(np.float32), ref.astype(np.float32))


def test_elementwise_and_norm_tests_both_apply() -> None:
    ref = np.ones(1000, dtype=np.float32)
    # Every element within float32's atol + rtol * |ref| (1.1e-4), but the norm is 5e-5 > 1e-5.
    got = ref * np.float32(1 + 5e-5)
    with pytest.raises(MismatchError, match=r"0 of 1000 elements out of tolerance; .*\(limit 1e-05\)"):
        _check(got, ref)


def test_integers_must_match_exactly() -> None:
    ref = _ref("int32")
    got = ref.copy()
    got[0, 0] += 1
    with pytest.raises(MismatchError, match="1 of 24 elements"):
        _check(got, ref)


def test_a_target_tolerance_overrides_the_default() -> None:
    ref = _ref()
    got = ref * np.float32(1.001)
    with pytest.raises(MismatchError):
        _check(got, ref)
    loose = Tolerance(norm=1e-2, atol=1e-2, rtol=1e-2)
    assert _check(got, ref, tolerance=loose)[0].ok
    assert _check(got, ref, tolerance={"float32": loose})[0].ok
    with pytest.raises(MismatchError):
        _check(got, ref, tolerance={"float16": loose})


def test_inputs_are_drawn_from_the_seed() -> None:
    case = Case(x=Tensor((8, 16)), w=Tensor((16,), "float16", init="positive"), eps=1e-6)
    a, b, c = draw_inputs(case, 5), draw_inputs(case, 5), draw_inputs(case, 6)
    assert a["eps"] == 1e-6
    for name in ("x", "w"):
        np.testing.assert_array_equal(a[name], b[name])
        assert not np.array_equal(a[name], c[name])


def test_case_seeds_differ_per_case_and_purpose_and_are_stable() -> None:
    t = _target()
    seeds = {case_seed(0, t, "a"), case_seed(0, t, "b"), case_seed(1, t, "a"), case_seed(0, t, "a", "perf")}
    assert len(seeds) == 4
    assert case_seed(0, t, "a") == case_seed(0, t, "a")
