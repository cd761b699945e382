"""Tolerances that scale with a reduction, per-case tolerances, assert_close, unique case ids, GFLOP/s and
the roofline, in-memory sources, and how compiler output is cleaned and kept."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_ktune import Case, KtuneError, Source, Space, Target, Tensor, Tolerance, assert_close, bucket, target
from pytest_ktune.backends.compile_log import clean_log
from pytest_ktune.core.case import DEFAULT_TOLERANCES
from pytest_ktune.core.includes import source_hash
from pytest_ktune.core.keys import case_ids, key_matches, parse_key
from pytest_ktune.gate.verdict import Rate
from pytest_ktune.measure.compiler_output import CompilerOutput

THIS_FILE = str(Path(__file__).resolve())


def rows(kernel: Any, x: Any) -> Any:
    return x


def _make(**overrides: Any) -> Target:
    options: dict[str, Any] = {
        "sources": {"opencl": "rows.cl"}, "space": Space(BLOCK=[64]), "default": {"BLOCK": 64},
        "key": lambda x: {"T": bucket(x.shape[0])}, "cases": [Case(x=Tensor((4, 8)))], "reference": lambda x: x,
    }
    options.update(overrides)
    return target(**options)(rows)


# -- tolerances -----------------------------------------------------------------------------------


def test_a_tolerance_scales_with_the_square_root_of_the_terms_summed() -> None:
    base = Tolerance(norm=1e-5, atol=1e-5, rtol=1e-4)
    scaled = base.scaled(289)
    assert (scaled.norm, scaled.atol, scaled.rtol) == pytest.approx((17e-5, 17e-5, 17e-4))
    assert Tolerance.for_sum(289) == DEFAULT_TOLERANCES["float32"].scaled(289)
    assert Tolerance.for_sum(4, "float16").rtol == pytest.approx(2 * DEFAULT_TOLERANCES["float16"].rtol)
    with pytest.raises(KtuneError, match="at least one term"):
        base.scaled(0)
    with pytest.raises(KtuneError, match="no default tolerance for int32"):
        Tolerance.for_sum(4, "int32")


def test_a_case_or_a_function_of_the_arguments_gives_the_tolerance() -> None:
    loose = Tolerance(1e-2, 1e-2, 1e-2)
    t = _make(tolerance=lambda x: Tolerance.for_sum(x.shape[1]),
              cases=[Case(x=Tensor((4, 16))), Case(x=Tensor((4, 8)), tolerance=loose, id="loose")])
    assert t.tolerance_of(t.cases[0]) == Tolerance.for_sum(16)
    assert t.tolerance_of(t.cases[1]) is loose
    broken = _make(tolerance=lambda x: 1e-3)
    with pytest.raises(KtuneError, match="the tolerance function returned a float") as info:
        broken.tolerance_of(broken.cases[0])
    assert THIS_FILE in str(info.value)
    with pytest.raises(KtuneError, match=r"Case\(tolerance=...\) is a float"):
        Case(x=Tensor((4,)), tolerance=1e-3)  # type: ignore[arg-type]


def test_assert_close_judges_as_the_built_in_comparison() -> None:
    ref = np.linspace(1, 2, 100)
    assert_close(ref.astype(np.float32), ref)
    with pytest.raises(AssertionError, match=r"1 of 100 elements out of tolerance.*worst at index \(7,\)"):
        bad = ref.copy()
        bad[7] += 1
        assert_close(bad.astype(np.float32), ref)
    with pytest.raises(AssertionError, match="shape"):
        assert_close(ref[:5], ref)
    assert_close(ref * (1 + 1e-3), ref, Tolerance(1e-2, 1e-2, 1e-2))


# -- case ids --------------------------------------------------------------------------------------


def test_two_cases_with_one_id_are_refused_saying_how_to_name_them() -> None:
    # 37 and 64 tokens both bucket to T64.
    t = _make(cases=[Case(x=Tensor((37, 8))), Case(x=Tensor((64, 8))), Case(x=Tensor((1, 8)))])
    with pytest.raises(KtuneError) as info:
        case_ids(t)
    message = str(info.value)
    assert "cases 0, 1 all have the id 'T64-float32'" in message
    assert "case 0: x=(37, 8) float32; case 1: x=(64, 8) float32" in message
    assert "ktune.Case(id='T64-float32-0', ...)" in message and THIS_FILE in message
    named = _make(cases=[Case(x=Tensor((37, 8)), id="T37"), Case(x=Tensor((64, 8)))])
    assert case_ids(named) == ["T37", "T64-float32"]


def test_a_key_is_picked_by_some_of_its_dimensions() -> None:
    want = parse_key(["T=64", " dtype = float16 "])
    assert want == {"T": "64", "dtype": "float16"}
    assert key_matches({"T": 64, "H": 4096, "dtype": "float16"}, want)
    assert not key_matches({"T": 64, "H": 4096, "dtype": "float32"}, want)
    with pytest.raises(KtuneError, match="is not NAME=VALUE"):
        parse_key(["T64"])


# -- GFLOP/s and the roofline ------------------------------------------------------------------


def test_a_rate_counts_gflops_the_fraction_of_peak_and_the_side_of_the_ridge() -> None:
    # A device of 10 TFLOP/s and 1 TB/s: the ridge is at 10 FLOP per byte.
    gemm = Rate.of(flops=2 * 4096**3, seconds=0.02, bytes_moved=3 * 4096**2 * 4, peak=10e12, bandwidth=1e12)
    assert gemm.gflops == pytest.approx(2 * 4096**3 / 0.02 / 1e9)
    assert gemm.peak_fraction == pytest.approx(2 * 4096**3 / 0.02 / 10e12)
    assert gemm.intensity == pytest.approx(2 * 4096 / 12) and gemm.bound == "compute"
    axpy = Rate.of(flops=2 << 20, seconds=1e-5, bytes_moved=12 << 20, peak=10e12, bandwidth=1e12)
    assert axpy.bound == "memory"
    unknown = Rate.of(flops=100, seconds=1e-6, bytes_moved=None, peak=None, bandwidth=None)
    assert unknown.peak_fraction is None and unknown.intensity is None and unknown.bound is None


# -- in-memory sources -------------------------------------------------------------------------


def test_an_in_memory_source_is_read_and_hashed_like_a_file() -> None:
    text = "__kernel void rows(__global float* out) {}\n"
    t = _make(sources={"opencl": Source(text, name="gen/rows.cl"), "cuda": Source("// cuda\n")})
    assert t.source_text("opencl") == text and t.in_memory("opencl")
    assert t.source_hash("opencl") == source_hash(text)
    assert t.source_path("opencl") == Path(THIS_FILE).parent / "gen" / "rows.cl"
    assert t.source_path("cuda") == Path(THIS_FILE).parent / "rows.cu"  # named after the target
    with pytest.raises(TypeError, match="takes the kernel's text as a str"):
        Source(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(KtuneError, match=r"sources\['opencl'\] is a int"):
        _make(sources={"opencl": 3})


# -- compiler output -------------------------------------------------------------------------------


def test_a_build_log_names_the_source_and_keeps_each_message_once() -> None:
    log = ("warning: /root/.cache/pocl/kcache/tempfile_weYcl8.cl:2:9: 'HINT' macro redefined\n"
           "warning: /root/.cache/pocl/kcache/tempfile_weYcl8.cl:2:9: 'HINT' macro redefined\n"
           "1 warning generated.\n")
    assert clean_log(log, "/p/kernels/noisy.cl") == "warning: noisy.cl:2:9: 'HINT' macro redefined"
    out = CompilerOutput(echo=io.StringIO())
    assert out.add("target a (f.py)", "w1\nw2") == ["w1", "w2"]
    assert out.add("target a (f.py)", "w2\nw3") == ["w3"]
    assert out.lines("target a (f.py)") == ["w1", "w2", "w3"] and out.lines("target b") == []
    assert out.all() == {"target a (f.py)": ["w1", "w2", "w3"]}
    assert out.echo is not None and isinstance(out.echo, io.StringIO)
    assert out.echo.getvalue().count("ktune: compiler output for target a (f.py):") == 2
    assert len(out.echo.getvalue().splitlines()) == 5  # two headings, three lines
