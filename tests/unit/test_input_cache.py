"""InputCache: a tuner's worker draws each case's inputs and reference once per seed, and forgets the
oldest when over its memory bound."""

from __future__ import annotations

from typing import Any

import numpy as np

from pytest_ktune import Case, Space, Target, Tensor, target
from pytest_ktune.measure.evaluate import InputCache, Job

CALLS: list[int] = []


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
    return Job(backend=None, target=t, case=case, case_id=t.case_id(case), key=t.case_key(case))  # type: ignore[arg-type]


def test_the_same_seed_reuses_inputs_and_reference() -> None:
    CALLS.clear()
    cache, job = InputCache(), _job()
    host, expected = cache.get(job, 1)
    again, expected_again = cache.get(job, 1)
    assert again is host and expected_again is expected
    assert CALLS == [256] and cache.hits == 1
    np.testing.assert_array_equal(expected, host["x"].astype(np.float64) * 2)


def test_another_seed_draws_other_inputs() -> None:
    cache, job = InputCache(), _job()
    a, _ = cache.get(job, 1)
    b, _ = cache.get(job, 2)
    assert not np.array_equal(a["x"], b["x"])
    assert cache.hits == 0


def test_the_least_recently_used_entry_goes_past_the_bound() -> None:
    CALLS.clear()
    job = _job(1024)  # float32 input 4 KiB + float64 reference 8 KiB per entry
    cache = InputCache(max_bytes=30 * 1024)
    cache.get(job, 1)
    cache.get(job, 2)
    cache.get(job, 1)  # 1 is now the most recent
    cache.get(job, 3)  # 36 KiB > 30 KiB: 2 goes
    cache.get(job, 1)
    assert cache.hits == 2
    cache.get(job, 2)
    assert len(CALLS) == 4  # seeds 1, 2, 3, then 2 again


def test_an_entry_larger_than_the_bound_is_still_kept_alone() -> None:
    cache, job = InputCache(max_bytes=1), _job()
    cache.get(job, 1)
    cache.get(job, 1)
    assert cache.hits == 1
