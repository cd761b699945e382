"""Device priors: one vector per thread, blocks that fill the SMs on a launch-bound shape, 16-byte
vectors; on small synthetic targets and on the committed landscapes' targets."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from pytest_ktune import Case, Space, Tensor
from pytest_ktune import target as make_target
from pytest_ktune.core.errors import SpaceError
from pytest_ktune.core.target import Target
from pytest_ktune.lab.replay import device_of
from pytest_ktune.tuner.priors import (
    TWIN,
    _itemsize,
    _widths,
    device_priors,
    element_types,
    in_bytes,
    launch_of,
    leading,
    occupancy,
    one_per_thread,
)

from ._data import RMSNORM, SILU, landscape, target


def _cases(t: Target, key: dict[str, Any]) -> list[int]:
    return [i for i, c in enumerate(t.cases) if c.runs_on("cuda") and t.case_key(c) == key]


def _reference(x: np.ndarray) -> np.ndarray:
    return x


def _rows(kernel: Any, x: Any) -> Any:
    """One block per row of x, BLOCK threads, each loading VEC elements at a time."""
    out = kernel.empty_like(x)
    kernel.launch(grid=x.shape[0], block=kernel["BLOCK"], args=[out, x])
    return out


def _flat(kernel: Any, x: Any) -> Any:
    """VEC * ITEMS elements per thread, as many blocks as that takes; returns nothing to count."""
    kernel.launch(grid=-(-x.size // (kernel["BLOCK"] * kernel["VEC"] * kernel["ITEMS"])), block=kernel["BLOCK"],
                  args=[x])


def _row_target(rows: int, width: int, dtype: str = "float16") -> Target:
    # Never compiled or run: only its space, default, cases and launch arithmetic matter here.
    return make_target(
        name="rows", sources={"cuda": "rows.cu"},
        space=Space(BLOCK=[64, 128, 256, 512, 1024], VEC=[1, 2, 4, 8], constraints=["H % VEC == 0"]),
        default={"BLOCK": 256, "VEC": 1},
        key=lambda x: {"T": x.shape[0], "H": x.shape[1], "dtype": x.dtype.name},
        cases=[Case(x=Tensor((rows, width), dtype))], reference=_reference)(_rows)


FLAT = make_target(
    name="flat", sources={"cuda": "flat.cu"},
    space=Space(BLOCK=[64, 128, 256], VEC=[1, 2, 4, 8], ITEMS=[1, 2]),
    default={"BLOCK": 128, "VEC": 1, "ITEMS": 1},
    key=lambda x: {"N": x.shape[0], "dtype": x.dtype.name},
    cases=[Case(x=Tensor((4096,), "float16"))], reference=_reference)(_flat)



def _flat_out(kernel: Any, x: Any) -> Any:
    """As _flat, writing an output the size of x."""
    out = kernel.empty_like(x)
    kernel.launch(grid=-(-x.size // (kernel["BLOCK"] * kernel["VEC"] * kernel["ITEMS"])), block=kernel["BLOCK"],
                  args=[out, x])
    return out


FLAT_OUT = make_target(
    name="flat_out", sources={"cuda": "flat.cu"},
    space=Space(BLOCK=[64, 128, 256], VEC=[1, 2, 4, 8], ITEMS=[1, 2]),
    default={"BLOCK": 128, "VEC": 1, "ITEMS": 1},
    key=lambda x: {"N": x.shape[0], "dtype": x.dtype.name},
    cases=[Case(x=Tensor((4096,), "float16"))], reference=_reference)(_flat_out)

DEVICE = SimpleNamespace(backend="cuda", compute_units=132)


def _args(t: Target) -> dict[str, Any]:
    return t.case_args(t.cases[0])


def test_one_vector_per_thread_sizes_the_block_to_the_row() -> None:
    t = _row_target(8, 4096)
    key = {"T": 8, "H": 4096, "dtype": "float16"}
    # 4096 halves a row: 512 threads of 8 (16 bytes) each, 1024 threads of 4 (8 bytes) each.
    assert one_per_thread(t, key, _args(t), ["VEC"], 8) == {"BLOCK": 512, "VEC": 8}
    assert one_per_thread(t, key, _args(t), ["VEC"], 4) == {"BLOCK": 1024, "VEC": 4}
    # A row narrower than the smallest block times the vector: no configuration keeps every thread busy.
    narrow = _row_target(8, 256)
    assert one_per_thread(narrow, {"T": 8, "H": 256, "dtype": "float16"}, _args(narrow), ["VEC"], 8) is None
    got = launch_of(t, _args(t), {"BLOCK": 512, "VEC": 8})
    assert got is not None and (got.blocks, got.threads, got.work, got.total) == (8, 512, 8 * 4096, 8 * 512)


def test_of_configurations_with_as_many_threads_the_one_closest_to_the_default_wins() -> None:
    # Every block size gives 4096 / 8 = 512 threads of one 16-byte vector: ITEMS=1 and the default's
    # block (128) are kept, rather than the first block size listed.
    key = {"N": 4096, "dtype": "float16"}
    assert one_per_thread(FLAT_OUT, key, _args(FLAT_OUT), ["VEC"], 8) == {"BLOCK": 128, "VEC": 8, "ITEMS": 1}
    assert one_per_thread(FLAT_OUT, key, _args(FLAT_OUT), ["VEC"], 2) == {"BLOCK": 128, "VEC": 2, "ITEMS": 1}


def test_a_launch_that_returns_no_array_has_no_work_to_share_and_gets_no_such_prior() -> None:
    key = {"N": 4096, "dtype": "float16"}
    got = launch_of(FLAT, _args(FLAT), {"BLOCK": 128, "VEC": 8, "ITEMS": 1})
    assert got is not None and got.work is None
    assert all("one per thread" not in label for label, _ in device_priors(FLAT, key, [0], DEVICE))


def test_a_shape_of_more_than_two_waves_gets_two_vectors_per_thread_first() -> None:
    # 4096 rows of 4096 halves: one 16-byte vector per thread is 2M threads, more than twice the
    # 132 x 2048 the device holds; 256 threads of two vectors each per row still fill it.
    t = _row_target(4096, 4096)
    key = {"T": 4096, "H": 4096, "dtype": "float16"}
    assert one_per_thread(t, key, _args(t), ["VEC"], 8, vectors=2) == {"BLOCK": 256, "VEC": 8}
    priors = device_priors(t, key, [0], DEVICE)
    # Then the same launch (256 threads a row, 16 halves each) with 8-byte loads, four per thread.
    assert priors[:3] == [("prior: 16-byte vectors, two per thread", {"BLOCK": 256, "VEC": 8}),
                          (TWIN, {"BLOCK": 256, "VEC": 4}),
                          ("prior: 16-byte vectors, one per thread", {"BLOCK": 512, "VEC": 8})]
    assert launch_of(t, _args(t), priors[0][1]) == launch_of(t, _args(t), priors[1][1])
    assert leading(priors) == 2  # the pair is timed before the default on a key never tuned
    # 64 rows: one vector per thread is 32768 threads, less than one wave: no such prior, no twin.
    small = _row_target(64, 4096)
    few = device_priors(small, {"T": 64, "H": 4096, "dtype": "float16"}, [0], DEVICE)
    assert "two per thread" not in few[0][0] and TWIN not in [label for label, _ in few]
    assert leading(few) == 1 and leading([]) == 0


def test_without_an_8_byte_width_listed_there_is_no_twin() -> None:
    t = make_target(
        name="rows", sources={"cuda": "rows.cu"},
        space=Space(BLOCK=[64, 128, 256, 512, 1024], VEC=[1, 8], constraints=["H % VEC == 0"]),
        default={"BLOCK": 256, "VEC": 1},
        key=lambda x: {"T": x.shape[0], "H": x.shape[1], "dtype": x.dtype.name},
        cases=[Case(x=Tensor((4096, 4096), "float16"))], reference=_reference)(_rows)
    priors = device_priors(t, {"T": 4096, "H": 4096, "dtype": "float16"}, [0], DEVICE)
    assert priors[0][0] == "prior: 16-byte vectors, two per thread" and leading(priors) == 1
    assert all(label != TWIN for label, _ in priors)


def test_vector_widths_16_bytes_then_the_widest_then_8_bytes() -> None:
    t = _row_target(8, 4096)
    assert _widths(t, ["VEC"], 2) == [8, 4]  # halves: 16 bytes is the widest listed
    assert _widths(t, ["VEC"], 4) == [4, 8, 2]  # floats: 16, 32, then 8 bytes
    assert _widths(t, ["VEC"], 8) == [2, 8, 1]  # doubles


def test_element_types_are_the_key_dimensions_naming_a_dtype() -> None:
    assert element_types({"T": 64, "dtype": "float16", "out": "int8", "mode": "fast"}) == \
        {"dtype": "float16", "out": "int8"}
    assert element_types({"T": 64}) == {}


def test_a_bfloat16_key_is_a_two_byte_element_type() -> None:
    # numpy knows no "bfloat16" name until ml_dtypes is imported: the priors must not depend on that.
    assert element_types({"T": 64, "dtype": "bfloat16"}) == {"dtype": "bfloat16"}
    assert _itemsize({"T": 64, "dtype": "bfloat16"}) == 2


def test_launch_bound_rmsnorm() -> None:
    land = landscape(RMSNORM)
    t = target("rmsnorm")
    priors = device_priors(t, land.key, _cases(t, dict(land.key)), device_of(land))
    assert priors == [
        ("prior: 16-byte vectors, one per thread", {"BLOCK": 512, "VEC": 8}),  # the recorded optimum
        ("prior: 8-byte vectors, one per thread", {"BLOCK": 1024, "VEC": 4}),
        ("prior: 16-byte vectors, blocks that fill the SMs", {"BLOCK": 1024, "VEC": 8}),
        ("prior: 16-byte vectors", {"BLOCK": 256, "VEC": 8}),
    ]
    assert land.optimum.params == priors[0][1]


def test_a_shape_that_fills_the_device_keeps_the_default_block() -> None:
    land = landscape(SILU)
    t = target("silu_and_mul")
    priors = device_priors(t, land.key, _cases(t, dict(land.key)), device_of(land))
    assert [p for _, p in priors] == [{"BLOCK": 256, "VEC": 8, "ITEMS": 1}, {"BLOCK": 256, "VEC": 4, "ITEMS": 1},
                                      {"BLOCK": 256, "VEC": 8, "ITEMS": 1}]
    assert "fill the SMs" not in " ".join(label for label, _ in priors)


def test_float32_gets_four_wide_vectors_then_eight_then_two() -> None:
    t = target("silu_and_mul")
    key = {"T": 256, "I": 14336, "dtype": "float32"}  # 917,504 threads with 16-byte vectors: over a wave
    priors = device_priors(t, key, _cases(t, key), device_of(landscape(SILU)))
    vec = [p["VEC"] for label, p in priors if "one per thread" in label]
    assert vec == [4, 8, 2]
    assert [label for label, _ in priors if "one per thread" in label] == \
        [f"prior: {b}-byte vectors, one per thread" for b in (16, 32, 8)]


def test_under_a_wave_more_blocks_of_the_same_size_go_first() -> None:
    # SiLU at T16: one 16-byte vector per thread is 112 blocks of 256 threads on 132 SMs; 8-byte vectors
    # give 224 blocks of 256, twice the warps to hide latency with, so they are timed first.
    t = target("silu_and_mul")
    dev = device_of(landscape(SILU))
    for dtype, first in (("float16", 4), ("float32", 2)):
        key = {"T": 16, "I": 14336, "dtype": dtype}
        priors = device_priors(t, key, _cases(t, key), dev)
        assert priors[0] == ("prior: 8-byte vectors, one per thread", {"BLOCK": 256, "VEC": first, "ITEMS": 1})
    # One row per block (RMSNorm at T64): 8-byte vectors mean bigger blocks, not more: 16 bytes stay first.
    rt = target("rmsnorm")
    land = landscape(RMSNORM)
    assert device_priors(rt, dict(land.key), _cases(rt, dict(land.key)), device_of(land))[0][0] == \
        "prior: 16-byte vectors, one per thread"


def test_the_probe_counts_occupancy_without_running_anything() -> None:
    t = target("rmsnorm")
    land = landscape(RMSNORM)
    args = t.case_args(t.cases[_cases(t, dict(land.key))[0]])
    dev = device_of(land)
    assert occupancy(t, args, {"BLOCK": 256, "VEC": 8}, dev) == (64, 64 * 256)  # one block per row
    assert occupancy(t, args, {"BLOCK": 1024, "VEC": 8}, dev) == (64, 64 * 1024)


def test_a_grid_short_of_sms_gets_smaller_blocks() -> None:
    t = target("silu_and_mul")
    key = {"T": 16, "I": 14336, "dtype": "float16"}  # 112 blocks of 256 threads for 132 SMs
    priors = device_priors(t, key, _cases(t, key), device_of(landscape(SILU)))
    assert priors[2:] == [("prior: 16-byte vectors, blocks that fill the SMs", {"BLOCK": 128, "VEC": 8, "ITEMS": 1}),
                          ("prior: 16-byte vectors", {"BLOCK": 256, "VEC": 8, "ITEMS": 1})]


def test_no_prior_without_a_vector_parameter() -> None:
    t = make_target(
        name="rows", sources={"cuda": "rows.cu"}, space=Space(BLOCK=[64, 128, 256, 512, 1024]),
        default={"BLOCK": 256}, key=lambda x: {"T": x.shape[0], "H": x.shape[1], "dtype": x.dtype.name},
        cases=[Case(x=Tensor((64, 4096), "float16"))], reference=_reference)(_rows)
    assert device_priors(t, {"T": 64, "H": 4096, "dtype": "float16"}, [0], DEVICE) == []


def _topk(kernel: Any, x: Any) -> Any:
    """TPR threads a row, BLOCK // TPR rows a block; returns 2 values a row (far fewer than it reads)."""
    out = kernel.empty((x.shape[0], 2), np.float32)
    kernel.launch(grid=-(-x.shape[0] // (kernel["BLOCK"] // kernel["TPR"])), block=kernel["BLOCK"], args=[out, x])
    return out


def _topk_target(**declared: Any) -> Target:
    return make_target(
        name="topk", sources={"cuda": "topk.cu"},
        space=Space(BLOCK=[32, 64, 128, 256], TPR=[1, 2, 4, 8, 16, 32], VPT=[1, 2, 4],
                    constraints=["TPR <= BLOCK", "E % VPT == 0"]),
        default={"BLOCK": 256, "TPR": 32, "VPT": 1},
        key=lambda x: {"T": x.shape[0], "E": x.shape[1]},  # no dtype dimension
        cases=[Case(x=Tensor((16, 32), "float32"))], reference=_reference, **declared)(_topk)


def test_declared_vectors_and_work_give_priors_where_names_and_outputs_say_nothing() -> None:
    key = {"T": 16, "E": 32}
    plain = _topk_target()
    assert device_priors(plain, key, [0], DEVICE) == []  # no parameter named like VEC
    # VPT named, but the work counted from the output (16 x 2): no thread can get a whole vector.
    outputs = _topk_target(vectors=["VPT"])
    assert all("per thread" not in label for label, _ in device_priors(outputs, key, [0], DEVICE))
    # The threads share out the 16 x 32 floats read; the element size comes from that input (float32).
    t = _topk_target(vectors=["VPT"], work=lambda x: x.size)
    assert launch_of(t, _args(t), {"BLOCK": 32, "TPR": 8, "VPT": 4}).work == 16 * 32  # type: ignore[union-attr]
    priors = device_priors(t, key, [0], DEVICE)
    # 16-byte vectors: 512 / 4 = 128 threads, 8 a row (8 x 4 = the row's 32 floats), one block of 128.
    assert priors[0] == ("prior: 16-byte vectors, one per thread", {"BLOCK": 128, "TPR": 8, "VPT": 4})
    assert ("prior: 8-byte vectors, one per thread", {"BLOCK": 256, "TPR": 16, "VPT": 2}) in priors


def test_the_example_moe_target_declares_its_vector_width_and_work() -> None:
    t = target("moe_topk_softmax")
    assert t.vector_params() == ["VPT"]
    key = {"T": 16, "E": 8, "K": 2}
    first = device_priors(t, key, _cases(t, key), device_of(landscape(SILU)))[0]
    assert first == ("prior: 16-byte vectors, one per thread", {"BLOCK": 32, "TPR": 2, "VPT": 4})


def test_vectors_must_name_whole_number_parameters_of_the_space() -> None:
    for bad, said in ((["WIDTH"], "not a parameter of the space"), ("VPT", "is a string"),
                      (["BLOCK"], None)):
        try:
            _topk_target(vectors=bad)
        except SpaceError as exc:
            assert said is not None and said in str(exc) and "target topk" in str(exc)
        else:
            assert said is None  # BLOCK is a whole number parameter: allowed
    try:
        make_target(name="f", sources={"cuda": "f.cu"}, space=Space(BLOCK=[64, 128], SCALE=[0.5, 1.0]),
                    default={"BLOCK": 64, "SCALE": 1.0}, key=lambda x: {"N": x.shape[0]},
                    cases=[Case(x=Tensor((8,), "float32"))], reference=_reference, vectors=["SCALE"])(_flat)
    except SpaceError as exc:
        assert "not element counts" in str(exc) and "[0.5, 1.0]" in str(exc)
    else:
        raise AssertionError("a fractional vector width was accepted")


def test_a_record_of_another_element_size_carries_its_vector_width_over_in_bytes() -> None:
    t = _row_target(8, 4096)
    half, single = {"T": 1, "H": 4096, "dtype": "float16"}, {"T": 16384, "H": 4096, "dtype": "float32"}
    assert in_bytes(t, {"BLOCK": 512, "VEC": 8}, half, single) == {"BLOCK": 512, "VEC": 4}  # 16 bytes
    assert in_bytes(t, {"BLOCK": 512, "VEC": 2}, single, half) == {"BLOCK": 512, "VEC": 4}  # 8 bytes
    # 8 floats would be 16 halves, which the space does not list: kept as recorded.
    assert in_bytes(t, {"BLOCK": 256, "VEC": 8}, single, half) == {"BLOCK": 256, "VEC": 8}
    # One half is half a float: kept.
    assert in_bytes(t, {"BLOCK": 256, "VEC": 1}, half, single) == {"BLOCK": 256, "VEC": 1}
    same = {"T": 64, "H": 4096, "dtype": "float16"}
    assert in_bytes(t, {"BLOCK": 256, "VEC": 8}, half, same) == {"BLOCK": 256, "VEC": 8}
    assert in_bytes(t, {"BLOCK": 256, "VEC": 8}, {"T": 1}, single) == {"BLOCK": 256, "VEC": 8}  # no dtype


def test_vector_widths_are_found_by_name_unless_declared() -> None:
    t = make_target(
        name="w", sources={"cuda": "w.cu"}, space=Space(BLOCK=[64, 128], WIDTH=[1, 2], PACK=[1, 4], VECTOR=[1, 2],
                                                      ITEMS=[1, 2]),
        default={"BLOCK": 64, "WIDTH": 1, "PACK": 1, "VECTOR": 1, "ITEMS": 1}, key=lambda x: {"N": x.shape[0]},
        cases=[Case(x=Tensor((8,), "float32"))], reference=_reference)(_flat)
    assert t.vector_params() == ["WIDTH", "PACK", "VECTOR"]
    assert _topk_target(vectors=[]).vector_params() == []  # declared: none, whatever the names


def test_a_work_function_that_fails_is_an_error_naming_the_target() -> None:
    from pytest_ktune.core.errors import KtuneError

    t = _topk_target(vectors=["VPT"], work=lambda x: x.no_such_attribute)
    try:
        device_priors(t, {"T": 16, "E": 32}, [0], DEVICE)
    except KtuneError as exc:
        assert "work function failed" in str(exc) and "target topk" in str(exc)
    else:
        raise AssertionError("a broken work= function went unnoticed")
