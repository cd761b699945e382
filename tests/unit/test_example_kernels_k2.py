"""The numpy references of the merge_attn_states and reshape_and_cache_flash example targets, and
their case inputs: what the kernels are checked against must itself be right."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pytest_ktune import MismatchError
from pytest_ktune.core.discover import import_file
from pytest_ktune.measure.verify import call_reference, check_outputs, draw_inputs

# Imported as the ktune command line imports targets, which puts the repository on sys.path.
KERNELS = Path(__file__).resolve().parents[2] / "example_project" / "kernels"
import_file(KERNELS / "merge_attn_states.py")

from example_project.kernels.merge_attn_states import (  # noqa: E402
    lse_values,
    merge_attn_states,
    merge_attn_states_reference,
)
from example_project.kernels.reshape_and_cache_flash import (  # noqa: E402
    reshape_and_cache_flash,
    reshape_and_cache_flash_reference,
    slots,
)

INF = np.inf


def _merge_inputs(t: int = 3, nh: int = 2, d: int = 4, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"prefix_out": rng.standard_normal((t, nh, d)).astype(np.float32),
            "prefix_lse": rng.standard_normal((nh, t)).astype(np.float32),
            "suffix_out": rng.standard_normal((t, nh, d)).astype(np.float32),
            "suffix_lse": rng.standard_normal((nh, t)).astype(np.float32)}


def test_merge_equals_softmax_weighting_of_the_two_sides() -> None:
    a = _merge_inputs()
    out, lse = merge_attn_states_reference(**a)
    t, nh, _ = a["prefix_out"].shape
    for ti in range(t):
        for h in range(nh):
            p, s = float(a["prefix_lse"][h, ti]), float(a["suffix_lse"][h, ti])
            wp = np.exp(p) / (np.exp(p) + np.exp(s))
            want = wp * a["prefix_out"][ti, h] + (1 - wp) * a["suffix_out"][ti, h]
            np.testing.assert_allclose(out[ti, h], want, rtol=1e-12, atol=1e-12)
            assert lse[h, ti] == pytest.approx(np.logaddexp(p, s), rel=1e-12)
    assert out.shape == a["prefix_out"].shape and lse.shape == a["prefix_lse"].shape


def test_merge_gives_an_empty_side_weight_zero_whether_its_lse_is_plus_or_minus_inf() -> None:
    a = _merge_inputs(t=2, nh=1)
    a["prefix_lse"][0, 0] = INF    # vLLM reads +inf as an empty side too
    a["suffix_lse"][0, 1] = -INF
    out, lse = merge_attn_states_reference(**a)
    np.testing.assert_array_equal(out[0, 0], a["suffix_out"][0, 0])
    np.testing.assert_array_equal(out[1, 0], a["prefix_out"][1, 0])
    assert lse[0, 0] == a["suffix_lse"][0, 0] and lse[0, 1] == a["prefix_lse"][0, 1]
    assert np.isfinite(out).all() and np.isfinite(lse).all()


def test_merge_lse_inits_mark_empty_sides_that_never_coincide() -> None:
    rng = np.random.default_rng(1)
    p = lse_values(rng, (4, 10), np.dtype(np.float32), empty_at=3)
    s = lse_values(rng, (4, 10), np.dtype(np.float32), empty_at=6)
    assert np.flatnonzero(np.isinf(p)).tolist() == list(range(3, 40, 8))
    assert {float(v) for v in p[np.isinf(p)]} == {INF, -INF}
    assert not (np.isinf(p) & np.isinf(s)).any()
    assert np.isfinite(lse_values(rng, (4, 10), np.dtype(np.float32))).all()


def test_every_merge_case_on_opencl_has_empty_sides_where_it_says_so_and_a_finite_reference() -> None:
    cases = [c for c in merge_attn_states.cases if c.runs_on("opencl")]
    assert 2 <= len(cases) <= 4
    assert any(merge_attn_states.case_id(c).endswith("-empty") for c in cases)
    for c in cases:
        inputs = draw_inputs(c, 5)
        empty = np.isinf(inputs["prefix_lse"]).any() or np.isinf(inputs["suffix_lse"]).any()
        assert empty == merge_attn_states.case_id(c).endswith("-empty")
        out, lse = call_reference(merge_attn_states, inputs)
        assert np.isfinite(out).all() and np.isfinite(lse).all()


def test_a_wrong_merge_fails_the_check() -> None:
    case = merge_attn_states.cases[0]  # fp16, with empty sides
    inputs = draw_inputs(case, 2)
    out, lse = call_reference(merge_attn_states, inputs)
    good = [out.astype(np.float16), lse.astype(np.float32)]
    check_outputs(merge_attn_states, "c", good, [out, lse], seed=2, backend="opencl")
    # The two sides' weights swapped: the mistake a kernel makes when it mixes up the LSE arrays.
    swapped, _ = merge_attn_states_reference(inputs["prefix_out"], inputs["suffix_lse"],
                                             inputs["suffix_out"], inputs["prefix_lse"])
    with pytest.raises(MismatchError, match="output 0"):
        check_outputs(merge_attn_states, "c", [swapped.astype(np.float16), good[1]], [out, lse],
                      seed=2, backend="opencl")
    # Empty sides not treated as empty: +inf taken at face value makes that output NaN.
    bad_lse = good[1].copy()
    bad_lse[np.isinf(inputs["prefix_lse"])] = np.nan
    with pytest.raises(MismatchError, match="output 1"):
        check_outputs(merge_attn_states, "c", [good[0], bad_lse], [out, lse], seed=2, backend="opencl")


def test_cache_reference_writes_each_token_to_its_slot_and_nothing_else() -> None:
    rng = np.random.default_rng(3)
    key = rng.standard_normal((4, 2, 3)).astype(np.float16)
    value = rng.standard_normal((4, 2, 3)).astype(np.float16)
    kc = rng.standard_normal((3, 2, 2, 3)).astype(np.float16)  # 3 blocks of 2 slots
    vc = rng.standard_normal((3, 2, 2, 3)).astype(np.float16)
    slot_mapping = np.array([5, 0, -1, 2], dtype=np.int64)
    k2, v2 = reshape_and_cache_flash_reference(key, value, kc, vc, slot_mapping)
    assert k2.shape == kc.shape and k2.dtype == kc.dtype
    flat_k, flat_v = k2.reshape(6, 2, 3), v2.reshape(6, 2, 3)
    for t, slot in ((0, 5), (1, 0), (3, 2)):
        np.testing.assert_array_equal(flat_k[slot], key[t])
        np.testing.assert_array_equal(flat_v[slot], value[t])
    for slot in (1, 3, 4):  # no token maps here, the padding token (2) included
        np.testing.assert_array_equal(flat_k[slot], kc.reshape(6, 2, 3)[slot])
    assert not np.shares_memory(k2, kc)


def test_slots_are_distinct_with_padding_at_the_end() -> None:
    got = slots(np.random.default_rng(4), (20,), np.dtype(np.int64), num_slots=32, padding=3)
    assert got.dtype == np.int64 and (got[-3:] == -1).all()
    real = got[:-3]
    assert len(set(real.tolist())) == 17 and real.min() >= 0 and real.max() < 32
    with pytest.raises(ValueError, match="do not fit"):
        slots(np.random.default_rng(4), (33,), np.dtype(np.int64), num_slots=32)


def test_a_cache_write_that_misses_a_token_fails_the_check() -> None:
    case = reshape_and_cache_flash.cases[0]
    inputs = draw_inputs(case, 6)
    kc, vc = call_reference(reshape_and_cache_flash, inputs)
    check_outputs(reshape_and_cache_flash, "c", [kc, vc], [kc, vc], seed=6, backend="opencl")
    missed = vc.copy().reshape(-1, *inputs["value"].shape[1:])
    first = int(inputs["slot_mapping"][0])
    missed[first] = inputs["value_cache"].reshape(missed.shape)[first]
    with pytest.raises(MismatchError, match="output 1"):
        check_outputs(reshape_and_cache_flash, "c", [kc, missed.reshape(vc.shape)], [kc, vc], seed=6,
                      backend="opencl")
