"""Comparing large outputs on the device: ``device_close`` passes and fails exactly what ``compare_one``
does, and ``verify_once`` uses it only where it applies, uploads the reference once per case and seed,
and reports a failure exactly as the host path does.

The "device" here is numpy: ``device_close`` takes its array module, and the CUDA backend runs the same
function with CuPy (the backend contract checks that on a GPU).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_ktune import Case, MismatchError, ReferenceShapeError, Space, Target, Tensor, Tolerance, target
from pytest_ktune.backends.base import DeviceInfo, Resources
from pytest_ktune.core.compare import compare_one, device_close
from pytest_ktune.measure.evaluate import FixtureCache, Job, verify_once

LOOSE = Tolerance(norm=1.0, atol=1e-3, rtol=1e-2)
EXACT = Tolerance(norm=0.0, atol=0.0, rtol=0.0)


def _agree(out: np.ndarray, ref: np.ndarray, tol: Tolerance) -> bool:
    """The verdict, after checking that the device comparison (whole, and in chunks of 3) and the host
    comparison give the same one."""
    want = compare_one(out, ref, 0, tol).ok
    assert device_close(np, out, ref, tol) is want
    assert device_close(np, out, ref, tol, chunk=3) is want
    return want


def _ref(n: int = 64) -> np.ndarray:
    return np.linspace(-2.0, 3.0, n)


def _limit(ref: np.ndarray, tol: Tolerance) -> np.ndarray:
    return np.asarray(tol.atol + tol.rtol * np.abs(ref))


# -- device_close against compare_one ------------------------------------------
def test_exact_match_passes() -> None:
    ref = _ref()
    assert _agree(ref.copy(), ref, EXACT)
    assert _agree(ref.astype(np.float32), ref.astype(np.float32), EXACT)


@pytest.mark.parametrize(("factor", "ok"), [(0.999, True), (1.0, True), (1.001, False)])
def test_atol_and_rtol_edges(factor: float, ok: bool) -> None:
    ref = _ref()
    out = ref.copy()
    out[7] = ref[7] + factor * _limit(ref, LOOSE)[7]
    assert _agree(out, ref, LOOSE) is ok


@pytest.mark.parametrize(("value", "ok"), [(1e-3, True), (1.0001e-3, False), (-1e-3, True)])
def test_atol_alone_at_a_zero_reference(value: float, ok: bool) -> None:
    ref = np.zeros(10)
    out = ref.copy()
    out[3] = value
    assert _agree(out, ref, LOOSE) is ok


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_non_finite_output_fails(value: float) -> None:
    ref = _ref()
    out = ref.copy()
    out[5] = value
    assert not _agree(out, ref, LOOSE)
    assert not _agree(out, ref, Tolerance(norm=math.inf, atol=math.inf, rtol=math.inf))
    assert not _agree(out.astype(np.float16), ref, LOOSE)


@pytest.mark.parametrize("ref_value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("out_value", ["same", "finite", "other"])
def test_a_non_finite_reference(ref_value: float, out_value: str) -> None:
    ref = _ref()
    ref[2] = ref_value
    out = ref.copy()
    if out_value == "finite":
        out[2] = 1.0
    elif out_value == "other":
        out[2] = -ref_value if math.isinf(ref_value) else math.inf
    # A non-finite reference is only matched by an equal, hence non-finite, output: never a pass.
    assert not _agree(out, ref, LOOSE)


def test_the_relative_norm_fails_with_every_element_within_tolerance() -> None:
    ref = np.ones(1000)
    out = ref + 0.009  # each within atol + rtol * |ref| = 0.011
    assert (np.abs(out - ref) <= _limit(ref, LOOSE)).all()
    assert compare_one(out, ref, 0, LOOSE).rel_norm == pytest.approx(0.009)
    assert not _agree(out, ref, Tolerance(norm=1e-3, atol=1e-3, rtol=1e-2))
    assert _agree(out, ref, Tolerance(norm=1e-2, atol=1e-3, rtol=1e-2))


def test_a_zero_reference_divides_by_one() -> None:
    ref = np.zeros(100)
    out = np.full(100, 1e-4)  # norm 1e-3
    assert _agree(out, ref, Tolerance(norm=1.1e-3, atol=1e-3, rtol=0.0))
    assert not _agree(out, ref, Tolerance(norm=0.9e-3, atol=1e-3, rtol=0.0))


def test_an_overflowing_difference_fails() -> None:
    ref = np.array([-1e308, 1.0])
    out = np.array([1e308, 1.0])
    assert not _agree(out, ref, Tolerance(norm=math.inf, atol=1e300, rtol=1.0))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64"])
def test_integer_outputs(dtype: str) -> None:
    ref = np.arange(0, 120, dtype=dtype)
    assert _agree(ref.copy(), ref, EXACT)
    assert _agree(ref.copy(), ref.astype(np.int64), EXACT)
    off = ref.copy()
    off[40] += 1
    assert not _agree(off, ref, EXACT)
    assert _agree(off, ref, Tolerance(norm=1.0, atol=1.0, rtol=0.0))
    assert not _agree(off, ref, Tolerance(norm=1.0, atol=0.5, rtol=0.0))


def test_bool_outputs() -> None:
    ref = np.arange(10) % 3 == 0
    assert _agree(ref.copy(), ref, EXACT)
    assert not _agree(~ref, ref, EXACT)


@pytest.mark.parametrize("dtype", ["float16", "float32", "int8"])
def test_empty_arrays_pass(dtype: str) -> None:
    empty = np.zeros((0, 4), dtype=dtype)
    assert _agree(empty, empty.astype(np.float64 if dtype != "int8" else dtype), LOOSE)
    assert not _agree(empty, empty, Tolerance(norm=-1.0, atol=0.0, rtol=0.0))


def test_float16_outputs_against_a_float64_reference() -> None:
    tol = Tolerance(norm=2e-3, atol=1e-2, rtol=1e-2)
    ref = np.random.default_rng(3).standard_normal((16, 33))
    out = ref.astype(np.float16)
    assert _agree(out, ref, tol)
    out[4, 5] = np.float16(ref[4, 5] + 0.2)
    assert not _agree(out, ref, tol)
    out[4, 5] = np.nan
    assert not _agree(out, ref, tol)


@pytest.mark.parametrize("seed", range(40))
def test_random_perturbations_agree(seed: int) -> None:
    rng = np.random.default_rng(seed)
    dtype = rng.choice(["float16", "float32", "float64"])
    ref = rng.standard_normal(int(rng.integers(1, 300))) * 10.0 ** rng.integers(-3, 3)
    scale = 10.0 ** rng.uniform(-6, -1)
    out = (ref + rng.standard_normal(ref.size) * scale * np.abs(ref)).astype(dtype)
    tol = Tolerance(norm=10.0 ** rng.uniform(-5, -1), atol=10.0 ** rng.uniform(-6, -1),
                    rtol=10.0 ** rng.uniform(-5, -1))
    _agree(out, ref, tol)


def test_a_size_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError, match="elements"):
        device_close(np, np.zeros(3), np.zeros(4), LOOSE)


# -- verify_once with a backend whose device is the host -----------------------
FAKE_DEVICE = DeviceInfo(
    backend="opencl", name="Fake Compare Device", arch="fake", compiler="none", compute_units=1,
    max_threads_per_block=1024, shared_mem_per_block=49152, regs_per_block=65536,
    l2_bytes=1 << 20, global_mem_bytes=1 << 34, warp_size=32,
)


@dataclass
class _Function:
    """``out = 2 * x``; MODE 1 gets one element wrong, MODE 2 leaves the last one unwritten."""

    mode: int
    name: str = "ktune_double"

    def launch(self, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any]) -> None:
        out, x = args[0], args[1]
        out[...] = x * 2
        if self.mode == 1:
            out.flat[3] += 1
        elif self.mode == 2:
            out.flat[-1] = np.nan

    def resources(self) -> Resources:
        return Resources(registers=16, shared_bytes=0, local_bytes=0, max_threads_per_block=1024)


@dataclass
class _Program:
    mode: int

    def function(self, name: str) -> _Function:
        return _Function(self.mode, name)


@dataclass
class HostBackend:
    """A backend whose device arrays are numpy arrays; it counts uploads and downloads."""

    name: str = "opencl"
    device: DeviceInfo = FAKE_DEVICE
    cache_dir: Path | None = None
    uploads: list[tuple[int, ...]] = field(default_factory=list)
    downloads: int = 0

    def compile(self, source: str, defines: Mapping[str, Any], *, filename: str) -> _Program:
        return _Program(int(defines.get("MODE", 0)))

    def to_device(self, a: np.ndarray) -> Any:
        self.uploads.append(a.shape)
        return np.array(a)

    def to_host(self, a: Any) -> np.ndarray:
        self.downloads += 1
        return np.array(a)

    def empty(self, shape: Sequence[int], dtype: Any, *, poison: bool = False) -> Any:
        return np.full(tuple(shape), np.nan if poison else 0, dtype)

    def owns(self, obj: Any) -> bool:
        return isinstance(obj, np.ndarray)

    def synchronize(self) -> None:
        pass

    def timer(self, launch_sets: Any, repeats: int) -> Any:
        raise NotImplementedError

    def copy_bandwidth(self) -> float:
        return 1e12

    def release(self) -> None:
        pass


@dataclass
class CompareBackend(HostBackend):
    """The same, with a device comparison through ``device_close`` (or one that raises)."""

    compares: int = 0
    broken: bool = False

    def compare_on_device(self, out: Any, ref: Any, tol: Tolerance) -> bool | None:
        self.compares += 1
        if self.broken:
            raise RuntimeError("out of device memory")
        return device_close(np, out, ref, tol)


def double_kernel(kernel: Any, x: Any) -> Any:
    out = kernel.empty_like(x)
    kernel.launch(grid=1, block=1, args=[out, x])
    return out


def pair_kernel(kernel: Any, x: Any) -> Any:
    out = kernel.empty_like(x)
    kernel.launch(grid=1, block=1, args=[out, x])
    return out, kernel.empty_like(x[:1])


def _double_reference(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) * 2


# Float32 elements of a large output (8 MB): a host comparison of it would cost milliseconds.
N_LARGE = (8 << 20) // 4


def _job(backend: HostBackend, tmp_path: Path, n: int = N_LARGE, fn: Any = double_kernel,
         reference: Any = _double_reference) -> Job:
    src = tmp_path / "double.cl"
    src.write_text("// the fake backend compiles nothing\n")
    t: Target = target(
        sources={"opencl": src}, space=Space(MODE=[0, 1, 2]), default={"MODE": 0},
        key=lambda x: {"N": x.shape[0]}, cases=[Case(x=Tensor((n,), "float32"))], reference=reference,
        name=fn.__name__,
    )(fn)
    return Job.of(backend, t, t.cases[0])


def _failure(job: Job, mode: int, seed: int = 5, cache: FixtureCache | None = None) -> str:
    with pytest.raises(MismatchError) as info:
        verify_once(job, {"MODE": mode}, seed, cache=cache)
    return str(info.value)


def test_a_large_passing_output_never_comes_to_the_host(tmp_path: Path) -> None:
    backend = CompareBackend()
    job = _job(backend, tmp_path)
    launches = verify_once(job, {"MODE": 0}, 1)
    assert len(launches) == 1
    assert backend.compares == 1 and backend.downloads == 0


def test_small_outputs_are_checked_on_the_device_too(tmp_path: Path) -> None:
    backend = CompareBackend()
    verify_once(_job(backend, tmp_path, n=17), {"MODE": 0}, 1)
    assert backend.compares == 1 and backend.downloads == 0


def test_a_backend_without_device_comparison_checks_on_the_host(tmp_path: Path) -> None:
    backend = HostBackend()
    verify_once(_job(backend, tmp_path), {"MODE": 0}, 1)
    assert backend.downloads == 1


@pytest.mark.parametrize("mode", [1, 2])
def test_a_failure_is_reported_as_the_host_path_reports_it(tmp_path: Path, mode: int) -> None:
    on_host = _failure(_job(HostBackend(), tmp_path), mode)
    backend = CompareBackend()
    job = _job(backend, tmp_path)
    assert _failure(job, mode) == on_host
    assert _failure(job, mode, cache=FixtureCache()) == on_host
    assert backend.compares == 2 and backend.downloads == 2
    assert "out of tolerance" in on_host and "seed 5" in on_host
    if mode == 2:
        assert "NaN where a value was expected" in on_host


def test_a_device_comparison_that_raises_falls_back_to_the_host(tmp_path: Path) -> None:
    on_host = _failure(_job(HostBackend(), tmp_path), 1)
    backend = CompareBackend(broken=True)
    job = _job(backend, tmp_path)
    verify_once(job, {"MODE": 0}, 5)
    assert backend.compares == 1 and backend.downloads == 1
    assert _failure(job, 1) == on_host


def test_inputs_and_reference_are_uploaded_once_per_case_and_seed(tmp_path: Path) -> None:
    backend = CompareBackend()
    job = _job(backend, tmp_path)
    cache = FixtureCache()
    for _ in range(4):
        for seed in (1, 2):
            verify_once(job, {"MODE": 0}, seed, cache=cache)
    # Each seed's input goes up once (every run gets a device copy of it), and so does its reference.
    assert len(backend.uploads) == 2 + 2 and cache.uploads == 2 and cache.made == 2
    assert backend.compares == 8 and backend.downloads == 0
    assert cache.device_bytes == 2 * N_LARGE * 8  # float64 references
    # Without a cache, each check draws and uploads its input and reference again.
    verify_once(job, {"MODE": 0}, 1)
    assert len(backend.uploads) == 6


def test_fixtures_go_past_their_bound_the_oldest_first(tmp_path: Path) -> None:
    backend = CompareBackend()
    job = _job(backend, tmp_path)
    cache = FixtureCache()
    verify_once(job, {"MODE": 0}, 1, cache=cache)
    one = cache.get(job, 1).nbytes  # input, reference and its device copy
    bounded = FixtureCache(max_bytes=one)
    for seed in (1, 2, 1):
        verify_once(job, {"MODE": 0}, seed, cache=bounded)
    assert bounded.made == 3  # seed 1's fixture went when 2's came, so it was made again
    verify_once(job, {"MODE": 0}, 1, cache=bounded)
    assert bounded.made == 3 and bounded.hits == 1
    assert bounded.device_bytes == N_LARGE * 8  # the newest fixture's reference copy, no other


def test_one_case_at_a_time_holds_nothing_of_the_last(tmp_path: Path) -> None:
    backend = CompareBackend()
    first, second = _job(backend, tmp_path), _job(backend, tmp_path, fn=pair_kernel,
                                                   reference=lambda x: (x * 2.0, x[:1] * 0))
    cache = FixtureCache(keep_one_case=True)
    verify_once(first, {"MODE": 0}, 1, cache=cache)
    verify_once(first, {"MODE": 0}, 2, cache=cache)
    assert cache.made == 2
    with pytest.raises(MismatchError):  # the fake kernel leaves its second output unwritten
        verify_once(second, {"MODE": 0}, 1, cache=cache)
    assert cache.device_bytes == (N_LARGE + 1) * 4  # the second case's reference copy, nothing of the first
    cache.get(first, 1)
    assert cache.made == 4  # the first case's fixtures went when the second case came


def test_shape_errors_are_the_host_paths_and_need_no_transfer(tmp_path: Path) -> None:
    def short_reference(x: np.ndarray) -> np.ndarray:
        return x[:-1].astype(np.float64)

    def int_reference(x: np.ndarray) -> np.ndarray:
        return x.astype(np.int32)

    def one_reference(x: np.ndarray) -> np.ndarray:
        return x.astype(np.float64)

    for fn, reference in ((double_kernel, short_reference), (double_kernel, int_reference),
                          (pair_kernel, one_reference)):
        with pytest.raises(ReferenceShapeError) as on_host:
            verify_once(_job(HostBackend(), tmp_path, fn=fn, reference=reference), {"MODE": 0}, 1)
        backend = CompareBackend()
        with pytest.raises(ReferenceShapeError) as on_device:
            verify_once(_job(backend, tmp_path, fn=fn, reference=reference), {"MODE": 0}, 1)
        assert str(on_device.value) == str(on_host.value)
        assert backend.downloads == 0 and backend.compares == 0
