"""The numpy references of the per_token_group_quant and moe_topk_softmax example targets, the
float8_e4m3fn encoder they rest on, and the tolerances they are checked with: what the kernels are
checked against must itself be right, and a wrong kernel must fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_ktune import BackendUnavailable, KtuneError, MismatchError
from pytest_ktune.core.discover import import_file
from pytest_ktune.measure.verify import call_reference, check_outputs, draw_inputs

# Imported as the ktune command line imports targets, which puts the repository on sys.path.
KERNELS = Path(__file__).resolve().parents[2] / "example_project" / "kernels"
import_file(KERNELS / "per_token_group_quant.py")

from example_project.kernels.moe_topk_softmax import (  # noqa: E402
    moe_topk_softmax,
    moe_topk_softmax_reference,
)
from example_project.kernels.per_token_group_quant import (  # noqa: E402
    float8_e4m3fn_codes,
    float8_e4m3fn_values,
    per_token_group_quant,
    per_token_group_quant_reference,
)

FP8 = "float8_e4m3fn"
CODES = np.arange(256, dtype=np.uint8)
FINITE = CODES[(CODES & 0x7F) != 0x7F]


# -- the float8_e4m3fn encoder ---------------------------------------------------------------

def test_fp8_values_are_the_e4m3fn_format() -> None:
    v = float8_e4m3fn_values(CODES)
    assert v[0x7E] == 448.0 and v[0xFE] == -448.0          # the largest finite value
    assert v[0x08] == 2.0**-6 and v[0x01] == 2.0**-9       # the smallest normal and subnormal
    assert v[0x38] == 1.0 and v[0x39] == 1.125
    assert np.isnan(v[0x7F]) and np.isnan(v[0xFF])           # no infinities: only NaN
    assert v[0x00] == 0.0 and np.signbit(v[0x80])
    pos = v[1:0x7F]
    assert (np.diff(pos) > 0).all(), "positive codes must be ordered like their values"


def test_fp8_encoder_inverts_decoding_for_every_finite_code() -> None:
    np.testing.assert_array_equal(float8_e4m3fn_codes(float8_e4m3fn_values(FINITE)), FINITE)
    assert float8_e4m3fn_codes(np.array([np.nan, -np.nan])).tolist() == [0x7F, 0xFF]


def test_fp8_encoder_rounds_ties_to_even_and_otherwise_to_nearest() -> None:
    pos = float8_e4m3fn_values(np.arange(0, 0x7F, dtype=np.uint8))
    mids = (pos[1:] + pos[:-1]) / 2
    lower = np.arange(0, 0x7E)
    tied = float8_e4m3fn_codes(mids).astype(np.int64)
    np.testing.assert_array_equal(tied, np.where(lower % 2 == 0, lower, lower + 1))
    np.testing.assert_array_equal(float8_e4m3fn_codes(np.nextafter(mids, 0)), lower)
    np.testing.assert_array_equal(float8_e4m3fn_codes(np.nextafter(mids, 1e9)), lower + 1)
    np.testing.assert_array_equal(float8_e4m3fn_codes(-mids).astype(np.int64), tied | 0x80)


def test_fp8_encoder_matches_a_brute_force_nearest_value_search() -> None:
    rng = np.random.default_rng(0)
    v = rng.choice([-1.0, 1.0], 20000) * 2.0 ** rng.uniform(-12, 9.5, 20000)
    table = float8_e4m3fn_values(FINITE)
    got = float8_e4m3fn_values(float8_e4m3fn_codes(v))
    clipped = np.clip(v, -448.0, 448.0)
    nearest = np.abs(clipped[:, None] - table[None, :]).min(axis=1)
    np.testing.assert_array_equal(np.abs(got - clipped), nearest)


def test_fp8_encoder_saturates_without_infinities() -> None:
    got = float8_e4m3fn_codes(np.array([448.0, 463.9, 464.0, 500.0, 1e30, np.inf, -np.inf, -1e9]))
    assert got.tolist() == [0x7E] * 6 + [0xFE] * 2


def test_fp8_encoder_keeps_the_sign_of_zero_and_flushes_below_half_the_smallest_subnormal() -> None:
    got = float8_e4m3fn_codes(np.array([0.0, -0.0, 2.0**-10, -2.0**-10, 2.0**-10 * 1.001, 3 * 2.0**-10]))
    assert got.tolist() == [0x00, 0x80, 0x00, 0x80, 0x01, 0x02]


# -- per_token_group_quant -------------------------------------------------------------------

def _kernel_like(x: np.ndarray, group_size: int, out_dtype: str, eps: float = 1e-10) -> list[np.ndarray]:
    """What the kernel computes, emulated in float32: its scale and its division, then one rounding."""
    tokens, hidden = x.shape
    groups = x.astype(np.float32).reshape(tokens, hidden // group_size, group_size)
    qmax = np.float32(127.0 if out_dtype == "int8" else 448.0)
    scale = np.maximum(np.abs(groups).max(axis=-1, keepdims=True), np.float32(eps)) / qmax
    v = (groups / scale).astype(np.float64)
    q = (np.clip(np.rint(v), -128, 127).astype(np.int8) if out_dtype == "int8"
         else float8_e4m3fn_codes(v))
    return [q.reshape(tokens, hidden), scale[..., 0]]


def _quant_case(out_dtype: str, dtype: str = "float16") -> Any:
    return next(c for c in per_token_group_quant.cases
                if c.args["out_dtype"] == out_dtype and c.tensors["x"].dtype == np.dtype(dtype)
                and c.runs_on("opencl"))


@pytest.mark.parametrize("out_dtype", ["int8", FP8])
def test_quant_reference_is_within_half_a_step_and_uses_the_full_range(out_dtype: str) -> None:
    x = np.random.default_rng(1).standard_normal((3, 512)) * np.array([[0.01], [1.0], [300.0]])
    q, scales = per_token_group_quant_reference(x, 128, out_dtype, 1e-10)
    assert q.shape == (3, 512) and scales.shape == (3, 4) and scales.dtype == np.float32
    groups = x.reshape(3, 4, 128)
    np.testing.assert_allclose(scales, np.abs(groups).max(-1) / (127 if out_dtype == "int8" else 448),
                               rtol=1e-7)
    s = scales.astype(np.float64)[..., None]
    if out_dtype == "int8":
        assert q.dtype == np.int8
        values = q.reshape(3, 4, 128).astype(np.float64)
        assert (np.abs(values).max(-1) == 127).all()
        assert (np.abs(values * s - groups) <= s / 2 * (1 + 1e-6)).all()
    else:
        assert q.dtype == np.uint8
        values = float8_e4m3fn_values(q.reshape(3, 4, 128))
        assert (np.abs(values).max(-1) == 448).all()
        # A relative error of at most half a step: 2^-4 of the value for normals.
        err = np.abs(values * s - groups)
        assert (err <= np.maximum(np.abs(groups) / 16, 2.0**-10 * s) * (1 + 1e-6)).all()


def test_quant_reference_floors_the_scale_of_an_all_zero_group() -> None:
    x = np.zeros((2, 256))
    x[1, 128:] = 1.0
    q, scales = per_token_group_quant_reference(x, 128, "int8", 1e-10)
    assert scales[0].tolist() == pytest.approx([1e-10 / 127] * 2) and scales[1, 0] > 0
    assert (q[0] == 0).all() and (q[1, :128] == 0).all() and (q[1, 128:] == 127).all()


def test_quant_cases_draw_a_zero_padding_token_and_a_spread_of_magnitudes() -> None:
    x = draw_inputs(_quant_case("int8"), 3)["x"]
    assert (x[-1] == 0).all()
    row_max = np.abs(x[:-1].astype(np.float64)).max(axis=1)
    assert row_max.max() / row_max.min() > 2


@pytest.mark.parametrize("out_dtype", ["int8", FP8])
def test_the_kernel_arithmetic_in_float32_passes_the_quant_check(out_dtype: str) -> None:
    for dtype in ("float16", "float32"):
        case = _quant_case(out_dtype, dtype)
        inputs = draw_inputs(case, 4)
        expected = call_reference(per_token_group_quant, inputs)
        got = _kernel_like(inputs["x"], inputs["group_size"], out_dtype)
        check_outputs(per_token_group_quant, "c", got, expected, seed=4, backend="opencl")


@pytest.mark.parametrize("out_dtype", ["int8", FP8])
def test_codes_one_step_off_on_a_few_elements_pass_the_quant_check(out_dtype: str) -> None:
    inputs = draw_inputs(_quant_case(out_dtype), 5)
    expected = call_reference(per_token_group_quant, inputs)
    q, scales = expected[0].copy(), expected[1]
    flat = q.reshape(-1)
    pick = np.flatnonzero((flat.astype(np.int64) & 0x7F) < 0x7E)[::97][:8]
    flat[pick] += 1  # one step up; for fp8, one code up is one step away from zero
    check_outputs(per_token_group_quant, "c", [q, scales], expected, seed=5, backend="opencl")


def _wrong_quants(x: np.ndarray, g: int, out_dtype: str) -> dict[str, tuple[list[np.ndarray], str]]:
    _, scales = per_token_group_quant_reference(x, g, out_dtype, 1e-10)
    tokens, hidden = x.shape
    x64 = x.astype(np.float64).reshape(tokens, hidden // g, g)
    qmax = 127.0 if out_dtype == "int8" else 448.0
    scale = np.maximum(np.abs(x64).max(-1, keepdims=True), 1e-10) / qmax

    def codes(v: np.ndarray) -> np.ndarray:
        out: np.ndarray = (np.clip(np.rint(v), -128, 127).astype(np.int8) if out_dtype == "int8"
                           else float8_e4m3fn_codes(v))
        return out.reshape(tokens, hidden)

    shifted = np.roll(scale, 1, axis=1)  # each group with its neighbour's scale
    v = x64 / scale
    if out_dtype == "int8":
        truncated = np.trunc(v).astype(np.int8).reshape(tokens, hidden)
    else:  # the nearest code, moved one step toward zero where it lies beyond the value
        near = float8_e4m3fn_codes(v)
        beyond = np.abs(float8_e4m3fn_values(near)) > np.abs(v)
        truncated = np.where(beyond, near - 1, near).astype(np.uint8).reshape(tokens, hidden)
    # Each wrong output, and the output the check must reject (the codes are 0, the scales 1).
    return {
        "off-by-one group": ([codes(x64 / shifted), shifted[..., 0].astype(np.float32)], "output 1:"),
        "scale from the wrong qmax": ([codes(x64 / (scale * qmax / (qmax + 1))),
                                       scales * qmax / (qmax + 1)], "output 1:"),
        "right scales, codes of the neighbouring group": ([codes(x64 / shifted), scales], "output 0:"),
        # Within one step everywhere: only the relative norm catches it.
        "truncating instead of rounding": ([truncated, scales], "output 0:"),
    }


@pytest.mark.parametrize("out_dtype", ["int8", FP8])
def test_wrong_quant_kernels_fail_the_check(out_dtype: str) -> None:
    case = _quant_case(out_dtype)
    inputs = draw_inputs(case, 6)
    expected = call_reference(per_token_group_quant, inputs)
    wrongs = _wrong_quants(inputs["x"], inputs["group_size"], out_dtype)
    for what, (got, rejected) in wrongs.items():
        with pytest.raises(MismatchError, match=rejected):
            check_outputs(per_token_group_quant, "c", got, expected, seed=6, backend="opencl")
            pytest.fail(f"{what} passed the check")


def test_quant_bad_input_names_the_target_and_the_fix() -> None:
    x = np.zeros((2, 200), np.float16)
    with pytest.raises(KtuneError, match="does not split into groups of 128") as exc:
        per_token_group_quant.key({"x": x, "group_size": 128, "out_dtype": "int8"})
    assert "per_token_group_quant" in str(exc.value) and "multiple of group_size" in str(exc.value)
    with pytest.raises(KtuneError, match=r"(?s)'fp4' is not supported.*int8, float8_e4m3fn"):
        per_token_group_quant.key({"x": np.zeros((2, 256)), "group_size": 128, "out_dtype": "fp4"})


def test_the_opencl_template_encodes_fp8_exactly_like_the_reference() -> None:
    """With a group maximum of 448 the scale is exactly 1, so the kernel's codes are its encoder's
    codes of the inputs themselves: every finite value, every tie and its neighbours."""
    from pytest_ktune import backends
    from pytest_ktune.measure.runtime import run

    try:
        be = backends.create("opencl")
    except BackendUnavailable as exc:
        pytest.skip(f"{exc.message}; {exc.hint}")
    fin = np.unique(np.abs(float8_e4m3fn_values(FINITE)))
    mids = ((fin[1:] + fin[:-1]) / 2).astype(np.float32)
    values = np.concatenate([fin, -fin, mids, -mids, np.nextafter(mids, np.float32(0)),
                             np.nextafter(mids, np.float32(1e4)), [1e-30, -1e-30, 1e-45]])
    g = 128
    rows = -(-len(values) // (g - 1))
    x = np.zeros((rows, g), np.float32)
    x[:, 0] = 448.0
    x[:, 1:] = np.resize(values, rows * (g - 1)).reshape(rows, g - 1)
    x = x.reshape(1, -1)
    for params in ({"BLOCK": 256, "TPG": 16, "VEC": 8, "FAST": 0}, {"BLOCK": 32, "TPG": 1, "VEC": 2, "FAST": 1}):
        bound = per_token_group_quant.bind(be.to_device(x), group_size=g, out_dtype=FP8).arguments
        (q, scales), _ = run(be, per_token_group_quant, params, bound, poison=True)
        assert (be.to_host(scales) == 1.0).all()
        np.testing.assert_array_equal(be.to_host(q), float8_e4m3fn_codes(x))



@pytest.mark.parametrize("fast", [0, 1])
def test_the_opencl_template_passes_the_check_on_every_case_dividing_or_by_the_reciprocal(fast: int) -> None:
    """FAST=1 multiplies each value by the group's reciprocal: its codes still pass the one-step check on every
    OpenCL case, as FAST=0's do, and its scales are FAST=0's bit for bit."""
    from pytest_ktune import backends
    from pytest_ktune.measure.runtime import run

    try:
        be = backends.create("opencl")
    except BackendUnavailable as exc:
        pytest.skip(f"{exc.message}; {exc.hint}")
    for case in (c for c in per_token_group_quant.cases if c.runs_on("opencl")):
        inputs = draw_inputs(case, 7)
        expected = call_reference(per_token_group_quant, inputs)
        bound = per_token_group_quant.bind(be.to_device(inputs["x"]), group_size=inputs["group_size"],
                                           out_dtype=inputs["out_dtype"], eps=inputs["eps"]).arguments
        params = {"BLOCK": 64, "TPG": 8, "VEC": 4, "FAST": fast}
        (q, scales), _ = run(be, per_token_group_quant, params, bound, poison=True)
        got = [be.to_host(q), be.to_host(scales)]
        check_outputs(per_token_group_quant, case.id or "c", got, expected, seed=7, backend="opencl")
        np.testing.assert_array_equal(got[1], _kernel_like(inputs["x"], inputs["group_size"],
                                                           inputs["out_dtype"])[1])

# -- moe_topk_softmax ------------------------------------------------------------------------

def test_topk_reference_picks_the_largest_logits_in_order_with_ties_to_the_lower_index() -> None:
    gating = np.array([[0.5, 2.0, -1.0, 2.0, 1.0, 0.0, 2.0, -3.0],
                       [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]], np.float32)
    weights, ids = moe_topk_softmax_reference(gating, 4, False)
    assert ids.dtype == np.int32
    assert ids.tolist() == [[1, 3, 6, 4], [0, 1, 2, 3]]
    p = np.exp(gating.astype(np.float64))
    p /= p.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(weights, np.take_along_axis(p, ids, axis=1), rtol=1e-12)
    renorm, same = moe_topk_softmax_reference(gating, 4, True)
    assert (same == ids).all()
    np.testing.assert_allclose(renorm.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(renorm, weights / weights.sum(axis=1, keepdims=True), rtol=1e-12)


def test_topk_reference_is_stable_for_large_logits() -> None:
    gating = np.array([[1000.0, 999.0, -1000.0, 998.0]], np.float32)
    weights, ids = moe_topk_softmax_reference(gating, 2, False)
    assert ids.tolist() == [[0, 1]] and np.isfinite(weights).all()
    np.testing.assert_allclose(weights, [[1 / (1 + np.exp(-1) + np.exp(-2)),
                                          np.exp(-1) / (1 + np.exp(-1) + np.exp(-2))]], rtol=1e-12)


def _topk_case(renormalize: bool) -> Any:
    return next(c for c in moe_topk_softmax.cases
                if c.args["renormalize"] == renormalize and c.runs_on("opencl"))


@pytest.mark.parametrize("renormalize", [True, False])
def test_wrong_topk_kernels_fail_the_check(renormalize: bool) -> None:
    case = _topk_case(renormalize)
    inputs = draw_inputs(case, 7)
    weights, ids = call_reference(moe_topk_softmax, inputs)
    good = [weights.astype(np.float32), ids]
    check_outputs(moe_topk_softmax, "c", good, [weights, ids], seed=7, backend="opencl")

    swapped = ids.copy()
    swapped[0, [0, 1]] = swapped[0, [1, 0]]  # the right experts, one token's first two in the wrong order
    other, _ = moe_topk_softmax_reference(inputs["gating"], inputs["topk"], not renormalize)
    float32_softmax = np.exp(inputs["gating"] - inputs["gating"].max(axis=1, keepdims=True))
    wrongs = {
        "ids out of order": [good[0], swapped],
        "renormalisation the other way": [other.astype(np.float32), ids],
        "weights off by 1e-4": [good[0] * np.float32(1 + 1e-4), ids],
        "weights unnormalised": [np.take_along_axis(float32_softmax, ids, axis=1), ids],
    }
    for what, got in wrongs.items():
        with pytest.raises(MismatchError):
            check_outputs(moe_topk_softmax, "c", got, [weights, ids], seed=7, backend="opencl")
            pytest.fail(f"{what} passed the check")


def test_a_tie_broken_toward_the_higher_index_fails_the_check() -> None:
    gating = np.zeros((2, 8), np.float32)
    gating[:, [2, 5]] = 3.0
    weights, ids = moe_topk_softmax_reference(gating, 2, True)
    assert ids.tolist() == [[2, 5], [2, 5]]
    with pytest.raises(MismatchError, match="output 1"):
        check_outputs(moe_topk_softmax, "c", [weights.astype(np.float32), ids[:, ::-1].copy()],
                      [weights, ids], seed=0, backend="opencl")


def test_topk_bad_input_names_the_target_and_the_fix() -> None:
    with pytest.raises(KtuneError, match="topk=9 is not between 1 and the 8 experts") as exc:
        moe_topk_softmax.key({"gating": np.zeros((4, 8), np.float32), "topk": 9})
    assert "moe_topk_softmax" in str(exc.value)
    with pytest.raises(KtuneError, match="float32 \\[tokens, experts\\]"):
        moe_topk_softmax.key({"gating": np.zeros((4, 8), np.float16), "topk": 2})
