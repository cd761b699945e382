"""Device priors: 16-byte vectors, and blocks that fill the SMs on a launch-bound shape."""

from __future__ import annotations

from typing import Any

from pytest_ktune._priors import device_priors, occupancy
from pytest_ktune._replay import _device_of
from pytest_ktune._target import Target

from ._data import RMSNORM, SILU, landscape, target


def _cases(t: Target, key: dict[str, Any]) -> list[int]:
    return [i for i, c in enumerate(t.cases) if c.runs_on("cuda") and t.case_key(c) == key]


def test_launch_bound_rmsnorm_fills_the_sms_first() -> None:
    land = landscape(RMSNORM)
    t = target("rmsnorm")
    priors = device_priors(t, land.key, _cases(t, dict(land.key)), _device_of(land))
    assert [p for _, p in priors] == [{"BLOCK": 1024, "VEC": 8}, {"BLOCK": 256, "VEC": 8}]
    assert "fill the SMs" in priors[0][0]


def test_a_shape_that_fills_the_device_keeps_the_default_block() -> None:
    land = landscape(SILU)
    t = target("silu_and_mul")
    priors = device_priors(t, land.key, _cases(t, dict(land.key)), _device_of(land))
    assert priors == [("prior: 16-byte vectors", {"BLOCK": 256, "VEC": 8, "ITEMS": 1})]


def test_float32_gets_four_wide_vectors() -> None:
    t = target("silu_and_mul")
    key = {"T": 16, "I": 14336, "dtype": "float32"}
    priors = device_priors(t, key, _cases(t, key), _device_of(landscape(SILU)))
    assert priors[0][1]["VEC"] == 4


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
    assert [p for _, p in priors] == [{"BLOCK": 128, "VEC": 8, "ITEMS": 1}, {"BLOCK": 256, "VEC": 8, "ITEMS": 1}]
