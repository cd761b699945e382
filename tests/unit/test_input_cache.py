"""FixtureCache: a process that checks many configurations draws each case's inputs and reference once
per seed, and forgets the oldest when over its memory bound."""

from __future__ import annotations

from typing import Any

import numpy as np

from pytest_ktune import Case, Space, Target, Tensor, target
from pytest_ktune.measure.evaluate import FixtureCache, Job

CALLS: list[int] = []


class NumpyDevice:
    """Just enough of a backend for fixtures: its device arrays are numpy arrays, drawn on the host."""

    name = "opencl"

    def owns(self, obj: Any) -> bool:
        return isinstance(obj, np.ndarray)

    def to_device(self, a: np.ndarray) -> np.ndarray:
        return np.array(a)

    def to_host(self, a: np.ndarray) -> np.ndarray:
        return np.array(a)


def cache_kernel(kernel: Any, x: Any) -> Any:
    return x


def _reference(x: np.ndarray) -> np.ndarray:
    CALLS.append(x.size)
    return x.astype(np.float64) * 2


def _job(n: int = 256) -> Job:
    t: Target = target(
        sources={"opencl": "cache.cl"}, space=Space(BLOCK=[64]), default={"BLOCK": 64},
        key=lambda x: {"N": x.shape[0]}, cases=[Case(x=Tensor((n,)))], reference=_reference,
    )(cache_kernel)
    case = t.cases[0]
    return Job(backend=NumpyDevice(), target=t, case=case, case_id=t.case_id(case),  # type: ignore[arg-type]
               key=t.case_key(case))


def test_the_same_seed_reuses_inputs_and_reference() -> None:
    CALLS.clear()
    cache, job = FixtureCache(), _job()
    fixture = cache.get(job, 1)
    assert cache.get(job, 1) is fixture
    assert CALLS == [256] and cache.hits == 1 and cache.made == 1
    np.testing.assert_array_equal(fixture.expected[0], fixture.inputs["x"].astype(np.float64) * 2)


def test_another_seed_draws_other_inputs() -> None:
    cache, job = FixtureCache(), _job()
    a = cache.get(job, 1).inputs["x"]
    b = cache.get(job, 2).inputs["x"]
    assert not np.array_equal(a, b)
    assert cache.hits == 0


def test_each_run_gets_its_own_copy_of_the_inputs() -> None:
    fixture = FixtureCache().get(_job(), 1)
    backend = NumpyDevice()
    run = fixture.fresh(backend)  # type: ignore[arg-type]
    run["x"][:] = 0  # a kernel that updates its input in place
    assert np.count_nonzero(fixture.inputs["x"]) > 200  # the fixture's stays as drawn
    assert fixture.fresh(backend)["x"] is not run["x"]  # type: ignore[arg-type]


def test_the_least_recently_used_entry_goes_past_the_bound() -> None:
    CALLS.clear()
    job = _job(1024)  # per entry: the float32 input on the device and on the host, 4 KiB each, and the
    # float64 reference, 8 KiB: 16 KiB
    cache = FixtureCache(max_bytes=40 * 1024)
    cache.get(job, 1)
    cache.get(job, 2)
    cache.get(job, 1)  # 1 is now the most recent
    cache.get(job, 3)  # 48 KiB > 40 KiB: 2 goes
    cache.get(job, 1)
    assert cache.hits == 2
    cache.get(job, 2)
    assert len(CALLS) == 4  # seeds 1, 2, 3, then 2 again


def test_an_entry_larger_than_the_bound_is_still_kept_alone() -> None:
    cache, job = FixtureCache(max_bytes=1), _job()
    cache.get(job, 1)
    cache.get(job, 1)
    assert cache.hits == 1
