"""@ktune.target validation, bucket(), Tensor drawing and tolerances."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_ktune import Case, KtuneError, Space, SpaceError, Target, Tensor, Tolerance, bucket, target
from pytest_ktune.core.case import DEFAULT_TOLERANCES, tolerance_for

THIS_FILE = str(Path(__file__).resolve())


def sample_kernel(kernel: Any, x: Any, eps: float = 1e-6) -> Any:
    return x


def no_arguments() -> None:
    return None


def _options(**overrides: Any) -> dict[str, Any]:
    options: dict[str, Any] = {
        "sources": {"opencl": "kernels/sample.cl"},
        "space": Space(BLOCK=[64, 128], VEC=[1, 2], constraints=["H % VEC == 0"]),
        "default": {"BLOCK": 64, "VEC": 1},
        "key": lambda x: {"T": bucket(x.shape[0]), "H": x.shape[1]},
        "cases": [Case(x=Tensor((3, 8), "float16"))],
        "reference": lambda x, eps: x,
    }
    options.update(overrides)
    return options


def _make(fn: Any = sample_kernel, **overrides: Any) -> Target:
    return target(**_options(**overrides))(fn)


def _assert_names_target_and_file(exc: pytest.ExceptionInfo[Exception], name: str = "sample_kernel") -> None:
    message = str(exc.value)
    assert f"target {name}" in message
    assert THIS_FILE in message


# -- the decorator ---------------------------------------------------------
def test_a_valid_target() -> None:
    t = _make()
    assert t.name == "sample_kernel" and t.kernel_name == "sample_kernel"
    assert t.file == Path(THIS_FILE)
    # Relative source paths are resolved against the file that defines the target.
    assert t.sources == {"opencl": Path(THIS_FILE).parent / "kernels" / "sample.cl"}
    (case,) = t.cases
    assert t.case_key(case) == {"T": 4, "H": 8}
    assert t.case_id(case) == "T4-H8-float16"
    assert t.case_args(case)["eps"] == 1e-6  # defaults are applied


def test_name_and_kernel_override_the_function_name() -> None:
    t = _make(name="renamed", kernel="entry_point")
    assert t.name == "renamed" and t.kernel_name == "entry_point"


@pytest.mark.parametrize(("default", "words"), [
    ({"BLOCK": 64}, "missing ['VEC']"),
    ({"BLOCK": 64, "VEC": 1, "TILE": 4}, "unknown ['TILE']"),
    ({}, "missing ['BLOCK', 'VEC']"),
])
def test_a_default_that_does_not_match_the_space(default: dict[str, Any], words: str) -> None:
    with pytest.raises(SpaceError) as info:
        _make(default=default)
    assert words in str(info.value)
    _assert_names_target_and_file(info)


def test_space_must_be_a_space() -> None:
    with pytest.raises(SpaceError, match=r"ktune\.Space") as info:
        _make(space={"BLOCK": [64]})
    _assert_names_target_and_file(info)


@pytest.mark.parametrize(("sources", "words"), [
    ({"metal": "k.metal"}, "unknown backends ['metal']"),
    ({"opencl": "k.cl", "vulkan": "k.comp"}, "unknown backends ['vulkan']"),
    ({}, "sources= is empty"),
])
def test_bad_sources(sources: dict[str, str], words: str) -> None:
    with pytest.raises(KtuneError) as info:
        _make(sources=sources)
    assert words in str(info.value)
    _assert_names_target_and_file(info)


def test_empty_cases() -> None:
    with pytest.raises(KtuneError, match="cases= is empty") as info:
        _make(cases=[])
    _assert_names_target_and_file(info)


@pytest.mark.parametrize("case", [
    Case(y=Tensor((4, 8))),
    Case(x=Tensor((4, 8)), eps=1e-5, beta=2.0),
    Case(eps=1e-5),
])
def test_a_case_that_does_not_fit_the_signature(case: Case) -> None:
    with pytest.raises(KtuneError, match="does not fit the function's signature") as info:
        _make(cases=[case])
    _assert_names_target_and_file(info)


def test_the_function_must_take_the_kernel_handle() -> None:
    with pytest.raises(KtuneError, match="kernel handle") as info:
        _make(fn=no_arguments, cases=[Case()])
    _assert_names_target_and_file(info, "no_arguments")


def test_a_parameter_name_must_be_a_c_identifier() -> None:
    with pytest.raises(SpaceError, match="'BLOCK-SIZE' is not a valid C identifier") as info:
        params: dict[str, Any] = {"BLOCK-SIZE": [64]}
        _make(space=Space(**params), default={"BLOCK-SIZE": 64})
    _assert_names_target_and_file(info)


def test_a_missing_source_file_is_named() -> None:
    t = _make()
    with pytest.raises(KtuneError) as info:
        t.source_text("opencl")
    assert "sample.cl" in str(info.value)
    _assert_names_target_and_file(info)
    with pytest.raises(KtuneError, match="no cuda source declared"):
        t.source_text("cuda")


def test_the_source_hash_follows_the_text(tmp_path: Path) -> None:
    src = tmp_path / "k.cl"
    src.write_text("kernel A")
    t = _make(sources={"opencl": src})
    first = t.source_hash("opencl")
    assert first == t.source_hash("opencl")
    src.write_text("kernel B")
    assert t.source_hash("opencl") != first


def test_a_failing_key_function_names_the_target() -> None:
    t = _make(key=lambda x: {"H": x.shape[7]})
    with pytest.raises(KtuneError, match="the key function failed: IndexError") as info:
        t.case_key(t.cases[0])
    _assert_names_target_and_file(info)


def test_check_config_when_no_point_is_valid() -> None:
    t = _make(space=Space(VEC=[16, 32], constraints=["H % VEC == 0"]), default={"VEC": 16})
    with pytest.raises(SpaceError, match="no valid point for key H=8") as info:
        t.check_config({"VEC": 16}, {"H": 8}, "default configuration")
    _assert_names_target_and_file(info)


def test_check_config_names_the_broken_constraint() -> None:
    t = _make()
    t.check_config({"BLOCK": 64, "VEC": 2}, {"T": 4, "H": 8}, "default configuration")
    with pytest.raises(SpaceError, match="H % VEC == 0") as info:
        t.check_config({"BLOCK": 64, "VEC": 2}, {"T": 4, "H": 7}, "recorded configuration")
    assert "recorded configuration" in str(info.value)
    _assert_names_target_and_file(info)


# -- bucket ----------------------------------------------------------------
@pytest.mark.parametrize(("n", "expected"), [
    (0, 1), (1, 1), (2, 2), (3, 4), (4, 4), (5, 8), (100, 128), (128, 128), (129, 256), (4097, 8192),
])
def test_bucket_is_the_power_of_two_at_or_above(n: int, expected: int) -> None:
    assert bucket(n) == expected


# -- Tensor ----------------------------------------------------------------
@pytest.mark.parametrize("tensor", [
    Tensor((16, 32), "float32"),
    Tensor((16, 32), "float16", init="uniform", scale=3.0),
    Tensor((64,), "float64", init="positive"),
    Tensor((8, 8), "int32", init="int", low=-5, high=5),
])
def test_draw_is_determined_by_the_seed(tensor: Tensor) -> None:
    a = tensor.draw(np.random.default_rng(1234))
    b = tensor.draw(np.random.default_rng(1234))
    c = tensor.draw(np.random.default_rng(1235))
    assert a.shape == tensor.shape and a.dtype == tensor.dtype
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_draw_ranges() -> None:
    rng = np.random.default_rng(0)
    uniform = Tensor((4096,), init="uniform", scale=2.0).draw(rng)
    assert uniform.min() >= -2.0 and uniform.max() < 2.0 and uniform.min() < -1.5
    positive = Tensor((4096,), init="positive").draw(rng)
    assert positive.min() >= 0.5 and positive.max() < 1.5
    ints = Tensor((4096,), "int64", init="int", low=3, high=7).draw(rng)
    assert set(np.unique(ints).tolist()) == {3, 4, 5, 6}
    normal = Tensor((4096,), scale=10.0).draw(rng)
    assert 8.0 < float(normal.std()) < 12.0


def test_draw_with_a_callable() -> None:
    def ramp(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
        return np.arange(int(np.prod(shape))).reshape(shape)

    got = Tensor((2, 3), "float16", init=ramp).draw(np.random.default_rng(0))
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, [[0, 1, 2], [3, 4, 5]])

    with pytest.raises(KtuneError, match=r"returned shape \(6,\), expected \(3, 2\)"):
        Tensor((3, 2), init=lambda rng, shape, dtype: np.zeros(6)).draw(np.random.default_rng(0))


def test_draw_with_an_unknown_init() -> None:
    with pytest.raises(KtuneError, match="unknown Tensor init 'gaussian'"):
        Tensor((2,), init="gaussian").draw(np.random.default_rng(0))


def test_tensor_and_case_sizes() -> None:
    t = Tensor((4, 8), "float16")
    assert (t.ndim, t.size, t.nbytes) == (2, 32, 64)
    case = Case(x=t, w=Tensor((8,), "float32"), eps=1e-6, backends=["cuda"])
    assert case.input_bytes == 64 + 32
    assert set(case.tensors) == {"x", "w"}
    assert case.runs_on("cuda") and not case.runs_on("opencl")
    assert Case(x=t).runs_on("opencl")


# -- tolerances ------------------------------------------------------------
def test_tolerance_per_dtype_and_overrides() -> None:
    assert tolerance_for(np.dtype("float16"), None) == DEFAULT_TOLERANCES["float16"]
    assert tolerance_for(np.dtype("float32"), None) == DEFAULT_TOLERANCES["float32"]
    assert tolerance_for(np.dtype("int32"), None) == Tolerance(0.0, 0.0, 0.0)
    loose = Tolerance(norm=0.1, atol=0.1, rtol=0.1)
    assert tolerance_for(np.dtype("float32"), loose) == loose
    per_dtype = {"float16": loose}
    assert tolerance_for(np.dtype("float16"), per_dtype) == loose
    assert tolerance_for(np.dtype("float32"), per_dtype) == DEFAULT_TOLERANCES["float32"]
