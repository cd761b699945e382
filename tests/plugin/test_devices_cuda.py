"""On the GPU: ``--ktune-devices`` pins CUDA's measurement processes by device ordinal. On a host of
one GPU this is the single-device case (device 0, and ``all`` meaning that one); on a host of several,
every GPU gets items and each row names its own (needs CUDA)."""

from __future__ import annotations

import json
from typing import Any

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


def _tunable() -> str:
    return """
def launch_block(kernel, x, a):
    n = x.shape[0]
    out = kernel.empty_like(x)
    block = int(kernel["BLOCK"])
    kernel.launch(grid=ktune.cdiv(n, block), block=block, args=[out, x, np.float32(a), np.int32(n)])
    return out


scale = ktune.target(
    name="scale", kernel="scale", sources={"cuda": "scale.cu"}, space=ktune.Space(BLOCK=[64, 128, 256, 512, 1024]),
    default={"BLOCK": 256}, key=lambda x: {"N": x.shape[0]},
    cases=[ktune.Case(id="n1M", x=ktune.Tensor((1 << 20,)), a=2.0)], reference=scaled,
)(launch_block)
"""


def _tune(project: Project, devices: str) -> tuple[pytest.RunResult, list[Any]]:
    from tuner._tk import only_study, open_journal, timed

    project.pytester.makepyfile(kernels=KERNELS + _tunable())
    (project.path / "scale.cu").write_text(SCALE_CU)
    result = project.pytester.runpytest_subprocess("--ktune", "--ktune-backend=cuda", "-p", "no:cacheprovider",
                                                  "--ktune-tune", f"--ktune-devices={devices}", "--ktune-trials=5",
                                                  "--ktune-seed=1", "-m", "ktune_tune", timeout=600)
    _, trials = only_study(open_journal(project.path))
    return result, list(timed(trials))


def test_the_tuner_on_device_zero_is_the_single_device_case(project: Project) -> None:
    result, trials = _tune(project, "0")
    result.assert_outcomes(passed=1, deselected=2)
    assert len(trials) == 5
    assert all("device" not in t.user_attrs for t in trials)  # one device: as today
    assert "trials on" not in result.stdout.str()


def test_the_tuner_on_all_devices_runs_trials_on_each(project: Project) -> None:
    from pytest_ktune.backends.cuda_device import gpu_count

    result, trials = _tune(project, "all")
    result.assert_outcomes(passed=1, deselected=2)
    assert len(trials) == 5
    on = {t.user_attrs.get("device") for t in trials}
    if gpu_count() > 1:
        assert len(on) > 1 and all("#" in str(d) for d in on), on  # GPUs of one model: told apart by ordinal
    else:
        assert on == {None}
