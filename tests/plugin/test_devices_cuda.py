"""On the GPU: ``--ktune-devices`` pins CUDA's measurement processes by device ordinal. On a host of
one GPU this is the single-device case (device 0, and ``all`` meaning that one); on a host of several,
every GPU gets items and each row names its own (needs CUDA)."""

from __future__ import annotations

import json

import pytest

from ._kit import Project
from .test_isolation_cuda import KERNELS, SCALE_CU

pytestmark = pytest.mark.gpu


def _targets() -> str:
    cases = ", ".join(f"ktune.Case(id='n{n}', x=ktune.Tensor(({n},)), a=2.0)" for n in (1 << 14, 1 << 16, 1 << 18,
                                                                                         1 << 20))
    return f"""
scale = ktune.target(
    name="scale", kernel="scale", sources={{"cuda": "scale.cu"}}, space=ktune.Space(MODE=[0]),
    default={{"MODE": 0}}, key=lambda x: {{"N": x.shape[0]}}, cases=[{cases}], reference=scaled,
)(launch)
"""


def _run(project: Project, devices: str) -> tuple[pytest.RunResult, set[str]]:
    project.pytester.makepyfile(kernels=KERNELS + _targets())
    (project.path / "scale.cu").write_text(SCALE_CU)
    result = project.pytester.runpytest_subprocess("--ktune", "--ktune-backend=cuda", "-p", "no:cacheprovider",
                                                  f"--ktune-devices={devices}", "--ktune-benchmark-json=bench.json",
                                                  timeout=600)
    bench = json.loads((project.path / "bench.json").read_text())
    return result, {b["extra_info"]["device"] for b in bench["benchmarks"]}


def test_device_zero_is_the_one_device_of_the_default(project: Project) -> None:
    result, devices = _run(project, "0")
    result.assert_outcomes(passed=8)
    assert len(devices) == 1 and "#" not in next(iter(devices))


def test_all_devices_each_take_items(project: Project) -> None:
    from pytest_ktune.backends.cuda_device import gpu_count

    result, devices = _run(project, "all")
    result.assert_outcomes(passed=8)
    n = gpu_count()
    assert len(devices) == min(n, 4)  # four cases: at most four devices get one
    if n > 1:
        assert all("#" in d for d in devices), devices  # GPUs of one model: told apart by ordinal
