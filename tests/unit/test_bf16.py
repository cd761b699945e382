"""bfloat16 without a GPU: ktune.Tensor draws ml_dtypes arrays, the tolerance and the comparison treat
them as floats, the OpenCL backend refuses them, and every example target with an ``elem_t`` CUDA
template has bfloat16 cases, on CUDA only, whose references take bfloat16 inputs. The CUDA runs
themselves are in tests/contract/test_cuda_bf16.py."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import ktune
from pytest_ktune import KtuneError, MismatchError, ReferenceShapeError
from pytest_ktune.backends.base import poison_value
from pytest_ktune.core.case import DEFAULT_TOLERANCES, tolerance_for
from pytest_ktune.core.compare import compare_one
from pytest_ktune.core.discover import discover
from pytest_ktune.core.dtypes import bfloat16_dtype, dtype_family, is_bfloat16
from pytest_ktune.core.target import Target
from pytest_ktune.measure.verify import call_reference, check_outputs, draw_inputs

BF16 = np.dtype(ml_dtypes.bfloat16)
EXAMPLE = Path(__file__).resolve().parents[2] / "example_project"
COMMON_CUH = EXAMPLE / "kernels" / "common.cuh"


def _targets() -> dict[str, Target]:
    """The example's targets written in CUDA C and OpenCL C (its Triton targets have no elem_t template)."""
    return {t.name: t for t in discover(EXAMPLE) if "cuda" in t.sources or "opencl" in t.sources}


def _bf16_cases(t: Target) -> list[Any]:
    return [c for c in t.cases if any(is_bfloat16(v.dtype) for v in c.tensors.values())]


# -- dtypes and Tensor -------------------------------------------------------------------------

def test_bfloat16_names_the_ml_dtypes_dtype() -> None:
    assert bfloat16_dtype() == BF16 and BF16.name == "bfloat16" and BF16.itemsize == 2
    assert is_bfloat16("bfloat16") and is_bfloat16(BF16) and is_bfloat16(ml_dtypes.bfloat16)
    assert not is_bfloat16("float16") and not is_bfloat16(np.float16) and not is_bfloat16("not a dtype")
    assert dtype_family(BF16) == "f" and dtype_family("bfloat16") == "f"
    assert dtype_family(np.float16) == "f" and dtype_family(np.int8) == "i"


def test_a_missing_ml_dtypes_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # import ml_dtypes now raises ImportError
    with pytest.raises(KtuneError, match="ml_dtypes") as info:
        ktune.Tensor((4,), "bfloat16")
    assert "pip install ml_dtypes" in str(info.value)
    ktune.Tensor((4,), "float16")  # other dtypes never need it


@pytest.mark.parametrize("init", ["normal", "uniform", "positive", "int"])
def test_a_bf16_tensor_draws_float32_values_rounded_to_bfloat16(init: str) -> None:
    t = ktune.Tensor((33, 17), "bfloat16", init=init, scale=3.0, low=-5, high=6)
    assert t.dtype == BF16 and t.nbytes == 33 * 17 * 2
    got = t.draw(np.random.default_rng(7))
    assert isinstance(got, np.ndarray) and got.dtype == BF16 and got.shape == (33, 17)
    as_f32 = ktune.Tensor((33, 17), "float32", init=init, scale=3.0, low=-5, high=6)
    want = as_f32.draw(np.random.default_rng(7)).astype(BF16)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    assert len(np.unique(got.astype(np.float32))) > 4


def test_a_callable_init_of_a_bf16_tensor_gets_float32_and_its_result_is_rounded() -> None:
    seen: list[np.dtype[Any]] = []

    def init(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
        seen.append(dtype)
        return np.full(shape, 1.0 + 2.0**-9, dtype)  # a tie between two bfloat16 values: 1 is even

    got = ktune.Tensor((3,), "bfloat16", init=init).draw(np.random.default_rng(0))
    assert seen == [np.dtype(np.float32)]
    assert got.dtype == BF16 and got.astype(np.float64).tolist() == [1.0, 1.0, 1.0]


# -- tolerance, comparison, structure ------------------------------------------------------------

def test_the_bf16_tolerance_is_its_own_and_looser_than_fp16s() -> None:
    tol = tolerance_for(BF16, None)
    assert tol == DEFAULT_TOLERANCES["bfloat16"]
    assert (tol.norm, tol.atol, tol.rtol) == (1.6e-2, 1e-2, 1.6e-2)
    fp16 = tolerance_for(np.dtype(np.float16), None)
    assert tol.norm > fp16.norm and tol.rtol > fp16.rtol
    # One rounding to bfloat16 (at most 2^-8 relative) must pass elementwise, with margin.
    assert tol.rtol >= 2 * 2.0**-8
    override = ktune.Tolerance(norm=1.0, atol=1.0, rtol=1.0)
    assert tolerance_for(BF16, {"bfloat16": override}) is override


def _normal(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    out: np.ndarray = np.random.default_rng(seed).standard_normal(shape)
    return out


def test_compare_one_passes_a_bf16_output_rounded_from_the_reference() -> None:
    ref = _normal((64, 256))
    out = ref.astype(np.float32).astype(BF16)
    c = compare_one(out, ref, 0, tolerance_for(BF16, None))
    assert c.ok and c.mismatched == 0 and 0 < c.rel_norm < 4e-3


@pytest.mark.parametrize("fault", ["scaled", "nan", "one_element"])
def test_compare_one_fails_a_wrong_bf16_output(fault: str) -> None:
    ref = _normal((64, 256), seed=1)
    wrong = ref.copy()
    if fault == "scaled":
        wrong *= 1.04  # a few bf16 steps off everywhere
    elif fault == "nan":
        wrong[5, 7] = np.nan  # an unwritten (poisoned) element
    else:
        wrong[3, 3] += 0.5
    c = compare_one(wrong.astype(np.float32).astype(BF16), ref, 0, tolerance_for(BF16, None))
    assert not c.ok and c.mismatched >= 1
    if fault == "nan":
        assert np.isnan(c.worst_value) and c.worst_index == (5, 7)


def _any_target() -> Target:
    return _targets()["rmsnorm"]


def test_check_outputs_accepts_a_float64_reference_for_a_bf16_output_and_reports_a_mismatch() -> None:
    t = _any_target()
    ref = _normal((8, 64), seed=2)
    check_outputs(t, "c", ref.astype(np.float32).astype(BF16), ref, seed=0, backend="cuda")
    check_outputs(t, "c", ref.astype(np.float32).astype(BF16), ref.astype(BF16), seed=0, backend="cuda")
    with pytest.raises(MismatchError, match="out of tolerance"):
        check_outputs(t, "c", (ref * 1.1).astype(np.float32).astype(BF16), ref, seed=0, backend="cuda")


def test_a_bf16_output_against_an_integer_reference_is_a_structure_error() -> None:
    t = _any_target()
    with pytest.raises(ReferenceShapeError, match="bfloat16"):
        check_outputs(t, "c", np.zeros((2, 3), BF16), np.zeros((2, 3), np.int32), seed=0, backend="cuda")


# -- backends ----------------------------------------------------------------------------------

def test_the_poison_of_a_bf16_output_is_nan() -> None:
    p = poison_value(BF16)
    assert np.isnan(p)
    assert np.isnan(np.full(3, p, dtype=BF16).astype(np.float32)).all()


def _opencl() -> Any:
    from pytest_ktune.backends import create

    try:
        return create("opencl")
    except ktune.BackendUnavailable as exc:  # pragma: no cover - CI installs PoCL
        pytest.skip(str(exc))


def test_the_opencl_backend_refuses_bf16_arrays_and_says_where_they_run() -> None:
    backend = _opencl()
    with pytest.raises(KtuneError) as upload:
        backend.to_device(np.zeros((4, 8), BF16))
    with pytest.raises(KtuneError) as empty:
        backend.empty((4, 8), "bfloat16", poison=True)
    for exc in (upload.value, empty.value):
        text = str(exc)
        assert "opencl backend has no bfloat16" in text and "cuda backend" in text
        assert "backends=['cuda']" in text
    # Other dtypes still go through.
    assert backend.to_host(backend.to_device(np.ones(3, np.float16))).tolist() == [1.0, 1.0, 1.0]


def test_the_cuda_backend_moves_bf16_as_bits_and_poisons_with_nan() -> None:
    """CudaBackend's bfloat16 paths, with numpy standing in for CuPy (the same calls exist in both);
    tests/contract/test_cuda_bf16.py runs them on a GPU."""
    from types import SimpleNamespace

    from pytest_ktune.backends.cuda import CudaBackend

    backend = object.__new__(CudaBackend)
    backend.cp = SimpleNamespace(asarray=lambda a: np.array(a, copy=True), asnumpy=np.array,
                                 empty=np.empty, ndarray=np.ndarray)
    host = (_normal((5, 9), seed=4) * 300).astype(np.float32).astype(BF16)
    dev = backend.to_device(host)
    assert dev.dtype == BF16
    back = backend.to_host(dev[:, ::2])
    assert back.dtype == BF16
    np.testing.assert_array_equal(back.view(np.uint16), host[:, ::2].view(np.uint16))
    poisoned = backend.empty((4, 3), "bfloat16", poison=True)
    assert poisoned.dtype == BF16 and np.isnan(backend.to_host(poisoned).astype(np.float32)).all()
    assert np.isnan(backend.empty((2,), np.float16, poison=True)).all()


def _launcher(kernel: Any, x: Any) -> Any:
    return x


def test_a_bf16_case_that_may_run_on_opencl_is_refused_when_the_target_is_made() -> None:
    common: dict[str, Any] = {"sources": {"cuda": "k.cu", "opencl": "k.cl"}, "space": ktune.Space(B=[1]),
              "default": {"B": 1}, "key": lambda x: {"n": x.shape[0], "dtype": x.dtype.name},
              "reference": lambda x: x}
    with pytest.raises(KtuneError, match=r"case n8-bfloat16 has bfloat16 tensors \(x\)") as info:
        ktune.target(cases=[ktune.Case(x=ktune.Tensor((8,), "bfloat16"))], name="bf16_everywhere",
                     **common)(_launcher)
    assert "backends=['cuda']" in str(info.value)
    ok = ktune.target(cases=[ktune.Case(x=ktune.Tensor((8,), "bfloat16"), backends=["cuda"])],
                      name="bf16_on_cuda", **common)(_launcher)
    assert ok.case_id(ok.cases[0]) == "n8-bfloat16"
    cuda_only = dict(common, sources={"cuda": "k.cu"})
    ktune.target(cases=[ktune.Case(x=ktune.Tensor((8,), "bfloat16"))], name="bf16_cuda_source",
                 **cuda_only)(_launcher)


# -- the example project ------------------------------------------------------------------------

def _has_elem_t_input(t: Target) -> bool:
    return re.search(r"\belem_t\s*\*", t.source_text("cuda")) is not None


def test_every_example_target_with_an_elem_t_template_has_bf16_cases_on_cuda_only() -> None:
    targets = _targets()
    with_elem_t = {name for name, t in targets.items() if _has_elem_t_input(t)}
    assert with_elem_t == {"rmsnorm", "fused_add_rmsnorm", "silu_and_mul", "gelu_tanh_and_mul",
                           "rotary_neox", "per_token_group_quant", "merge_attn_states",
                           "reshape_and_cache_flash"}
    for name, t in targets.items():
        bf16 = _bf16_cases(t)
        if name not in with_elem_t:
            assert not bf16, name
            continue
        assert len(bf16) >= 2, name
        for c in bf16:
            cid = t.case_id(c)
            assert c.runs_on("cuda") and not c.runs_on("opencl"), cid
            assert "bfloat16" in cid and "bfloat16" in t.case_key(c).values(), cid
            defines = t.defines(t.case_args(c))
            assert defines["DTYPE_BF16"] == 1 and defines["DTYPE_F16"] == 0, cid
        for c in t.cases:
            if c not in bf16:
                assert t.defines(t.case_args(c))["DTYPE_BF16"] == 0, t.case_id(c)
        assert len({t.case_id(c) for c in t.cases}) == len(t.cases), name


def test_opencl_never_gets_a_bf16_case() -> None:
    for t in _targets().values():
        for c in t.cases:
            if c.runs_on("opencl") and "opencl" in t.sources:
                assert not any(is_bfloat16(v.dtype) for v in c.tensors.values()), t.case_id(c)


class _Probe:
    """A stand-in kernel handle that gives numpy outputs: the output dtypes a target returns."""

    params: dict[str, Any]

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params

    def __getitem__(self, name: str) -> Any:
        return self.params[name]

    def empty(self, shape: int | Sequence[int], dtype: Any) -> Any:
        return np.empty((shape,) if isinstance(shape, int) else tuple(shape), dtype)

    def empty_like(self, a: Any) -> Any:
        return np.empty(a.shape, a.dtype)

    def launch(self, grid: Any, block: Any, args: Sequence[Any], *, name: str | None = None) -> None:
        pass


def _smallest_bf16_case(t: Target) -> Any:
    return min(_bf16_cases(t), key=lambda c: c.input_bytes)


@pytest.mark.parametrize("name", ["rmsnorm", "fused_add_rmsnorm", "silu_and_mul", "gelu_tanh_and_mul",
                                  "rotary_neox", "per_token_group_quant", "merge_attn_states",
                                  "reshape_and_cache_flash"])
def test_example_references_take_bf16_inputs_and_pass_a_kernel_that_rounds_once(name: str) -> None:
    t = _targets()[name]
    case = _smallest_bf16_case(t)
    cid = t.case_id(case)
    host = draw_inputs(case, 11)
    expected = call_reference(t, host)
    refs = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    # The same values in float32: a reference that reads bfloat16 exactly must give the same answer.
    as_f32 = {k: (v.astype(np.float32) if isinstance(v, np.ndarray) and v.dtype == BF16 else v)
              for k, v in host.items()}
    again = call_reference(t, as_f32)
    for r, r32 in zip(refs, list(again) if isinstance(again, (tuple, list)) else [again], strict=True):
        np.testing.assert_array_equal(np.asarray(r).astype(np.float64), np.asarray(r32).astype(np.float64))
    # What the kernel returns: its outputs' dtypes, filled with the reference rounded once to them.
    probe = _Probe(dict(t.default))
    shaped = t.fn(probe, **{k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in host.items()})
    outs = list(shaped) if isinstance(shaped, (tuple, list)) else [shaped]
    got = [np.asarray(r).astype(np.float32).astype(o.dtype) if dtype_family(o.dtype) == "f"
           else np.asarray(r).astype(o.dtype) for o, r in zip(outs, refs, strict=True)]
    assert any(g.dtype == BF16 for g in got) or name == "per_token_group_quant", cid
    check_outputs(t, cid, got if len(got) > 1 else got[0], expected, seed=11, backend="cuda")
    bf16_outputs = [i for i, g in enumerate(got) if g.dtype == BF16]
    if bf16_outputs and name != "reshape_and_cache_flash":  # the caches are exact copies
        wrong = [(g.astype(np.float32) * 1.05).astype(BF16) if i in bf16_outputs else g
                 for i, g in enumerate(got)]
        with pytest.raises(MismatchError):
            check_outputs(t, cid, wrong if len(wrong) > 1 else wrong[0], expected, seed=11, backend="cuda")


# -- the CUDA template's rounding ----------------------------------------------------------------

def f2bf_bits(f: np.ndarray) -> np.ndarray:
    """common.cuh's integer float -> bfloat16 rounding (used below sm_80; PTX cvt.rn.bf16.f32 above),
    in numpy: round to nearest, ties to even; NaN kept NaN (quieted)."""
    u = np.asarray(f, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    out: np.ndarray = np.where(nan, (u >> 16) | 0x40, rounded).astype(np.uint16)
    return out


def test_the_cuda_templates_bf16_conversions_are_those_of_ml_dtypes() -> None:
    text = COMMON_CUH.read_text()
    assert "return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);" in text
    assert "if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);" in text
    assert "cvt.rn.bf16.f32" in text and "__uint_as_float((unsigned)b << 16)" in text
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 1 << 32, 200_000, dtype=np.uint64).astype(np.uint32)
    special = np.array([0x3F808000, 0x3F818000, 0x3F80FFFF, 0x7F7FFFFF, 0x7F800000, 0xFF800000,
                        0x00000001, 0x80008000, 0x7FC00000, 0x7F800001, 0xFFFFFFFF, 0],
                       dtype=np.uint32)  # ties both ways, overflow to inf, infinities, subnormals, NaNs
    f = np.concatenate([bits, special]).view(np.float32)
    mine = f2bf_bits(f)
    with np.errstate(invalid="ignore"):  # NaN inputs
        theirs = f.astype(BF16).view(np.uint16)
    finite_or_inf = ~np.isnan(f)
    np.testing.assert_array_equal(mine[finite_or_inf], theirs[finite_or_inf])
    assert np.isnan(mine[~finite_or_inf].view(BF16).astype(np.float32)).all()
    # Widening (load_f) is exact: the bits shifted into the top half of a float32.
    widened = (theirs.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(widened[finite_or_inf], theirs.view(BF16).astype(np.float32)[finite_or_inf])
