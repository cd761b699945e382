"""Device priors: one vector per thread, blocks that fill the SMs on a launch-bound shape, 16-byte
vectors; on small synthetic targets and on the committed landscapes' targets."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from pytest_ktune import Case, Space, Tensor
from pytest_ktune import target as make_target
from pytest_ktune._priors import _itemsize, _widths, device_priors, element_types, launch_of, occupancy, one_per_thread
from pytest_ktune._replay import _device_of
from pytest_ktune._target import Target

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
    assert priors[:2] == [("prior: 16-byte vectors, two per thread", {"BLOCK": 256, "VEC": 8}),
                          ("prior: 16-byte vectors, one per thread", {"BLOCK": 512, "VEC": 8})]
    # 64 rows: one vector per thread is 32768 threads, less than one wave: no such prior.
    small = _row_target(64, 4096)
    assert "two per thread" not in device_priors(small, {"T": 64, "H": 4096, "dtype": "float16"}, [0], DEVICE)[0][0]


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
    priors = device_priors(t, land.key, _cases(t, dict(land.key)), _device_of(land))
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
    priors = device_priors(t, land.key, _cases(t, dict(land.key)), _device_of(land))
    assert [p for _, p in priors] == [{"BLOCK": 256, "VEC": 8, "ITEMS": 1}, {"BLOCK": 256, "VEC": 4, "ITEMS": 1},
                                      {"BLOCK": 256, "VEC": 8, "ITEMS": 1}]
    assert "fill the SMs" not in " ".join(label for label, _ in priors)


def test_float32_gets_four_wide_vectors_then_eight_then_two() -> None:
    t = target("silu_and_mul")
    key = {"T": 256, "I": 14336, "dtype": "float32"}  # 917,504 threads with 16-byte vectors: over a wave
    priors = device_priors(t, key, _cases(t, key), _device_of(landscape(SILU)))
    vec = [p["VEC"] for label, p in priors if "one per thread" in label]
    assert vec == [4, 8, 2]
    assert [label for label, _ in priors if "one per thread" in label] == \
        [f"prior: {b}-byte vectors, one per thread" for b in (16, 32, 8)]


def test_under_a_wave_more_blocks_of_the_same_size_go_first() -> None:
    # SiLU at T16: one 16-byte vector per thread is 112 blocks of 256 threads on 132 SMs; 8-byte vectors
    # give 224 blocks of 256, twice the warps to hide latency with, so they are timed first.
    t = target("silu_and_mul")
    dev = _device_of(landscape(SILU))
    for dtype, first in (("float16", 4), ("float32", 2)):
        key = {"T": 16, "I": 14336, "dtype": dtype}
        priors = device_priors(t, key, _cases(t, key), dev)
        assert priors[0] == ("prior: 8-byte vectors, one per thread", {"BLOCK": 256, "VEC": first, "ITEMS": 1})
    # One row per block (RMSNorm at T64): 8-byte vectors mean bigger blocks, not more: 16 bytes stay first.
    rt = target("rmsnorm")
    land = landscape(RMSNORM)
    assert device_priors(rt, dict(land.key), _cases(rt, dict(land.key)), _device_of(land))[0][0] == \
        "prior: 16-byte vectors, one per thread"


def test_the_probe_counts_occupancy_without_running_anything() -> None:
    t = target("rmsnorm")
    land = landscape(RMSNORM)
    args = t.case_args(t.cases[_cases(t, dict(land.key))[0]])
    dev = _device_of(land)
    assert occupancy(t, args, {"BLOCK": 256, "VEC": 8}, dev) == (64, 64 * 256)  # one block per row
    assert occupancy(t, args, {"BLOCK": 1024, "VEC": 8}, dev) == (64, 64 * 1024)


def test_a_grid_short_of_sms_gets_smaller_blocks() -> None:
    t = target("silu_and_mul")
    key = {"T": 16, "I": 14336, "dtype": "float16"}  # 112 blocks of 256 threads for 132 SMs
    priors = device_priors(t, key, _cases(t, key), _device_of(landscape(SILU)))
    assert priors[2:] == [("prior: 16-byte vectors, blocks that fill the SMs", {"BLOCK": 128, "VEC": 8, "ITEMS": 1}),
                          ("prior: 16-byte vectors", {"BLOCK": 256, "VEC": 8, "ITEMS": 1})]


def test_no_prior_without_a_dtype_in_the_key_or_a_vector_parameter() -> None:
    t = target("moe_topk_softmax")
    key = {"T": 16, "E": 8, "K": 2}
    assert device_priors(t, key, _cases(t, key), _device_of(landscape(SILU))) == []
