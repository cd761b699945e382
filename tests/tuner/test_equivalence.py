"""Equivalent configurations (the same program, the same launches) are one point, timed once."""

from __future__ import annotations

from pathlib import Path

import pytest
from plugin._kit import PRELUDE

from pytest_ktune.cli import main
from pytest_ktune.core.discover import discover
from pytest_ktune.core.space import config_key
from pytest_ktune.tuner.equivalence import classes, program_params, representatives

# A grid-stride kernel: GY, the most blocks to launch, reaches only the launcher, which launches
# min(GY, the blocks that cover n). At n = 256, every GY at or above that count is one launch.
STRIDE_CL = """\
__kernel void scale(__global float* out, __global const float* x, float a, int n) {
    for (int i = get_global_id(0); i < n; i += get_global_size(0)) out[i] = x[i] * a;
}
"""

TARGET = '''
def launch_capped(kernel: ktune.Kernel, x: Any, a: float) -> Any:
    n = x.shape[0]
    out = kernel.empty_like(x)
    block = int(kernel["BLOCK"])
    kernel.launch(grid=min(int(kernel["GY"]), ktune.cdiv(n, block)), block=block,
                  args=[out, x, np.float32(a), np.int32(n)])
    return out


capped = ktune.target(
    name="capped", kernel="scale", sources={"opencl": "stride.cl"},
    space=ktune.Space(BLOCK=[64, 128], GY=[1, 2, 4, 8, 16]), default={"BLOCK": 64, "GY": 1},
    key=lambda x: {"N": x.shape[0]},
    cases=[ktune.Case(id="n256", x=ktune.Tensor((256,)), a=2.0, warm_cache=True)],
    reference=scaled,
)(launch_capped)
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "stride.cl").write_text(STRIDE_CL)
    (tmp_path / "kernels.py").write_text(PRELUDE + TARGET)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    return tmp_path


def test_configurations_with_the_same_program_and_launches_share_a_class(project: Path) -> None:
    target = next(t for t in discover(project) if t.name == "capped")
    assert program_params(target, "opencl") == []  # the source names neither BLOCK nor GY
    feasible = list(target.space.feasible({"N": 256}))
    cls = classes(target, "opencl", [0], feasible)
    groups: dict[str, list[tuple[int, int]]] = {}
    for cfg in feasible:
        groups.setdefault(cls[config_key(cfg)], []).append((int(cfg["BLOCK"]), int(cfg["GY"])))
    # BLOCK=64 covers 256 with 4 blocks, BLOCK=128 with 2: GY past that launches the same grid.
    assert sorted(groups.values()) == [[(64, 1)], [(64, 2)], [(64, 4), (64, 8), (64, 16)], [(128, 1)],
                                       [(128, 2), (128, 4), (128, 8), (128, 16)]]
    assert [(c["BLOCK"], c["GY"]) for c in representatives(feasible, cls)] == [(64, 1), (64, 2), (64, 4),
                                                                             (128, 1), (128, 2)]


def test_a_tune_times_each_class_once_and_answers_the_rest_from_it(project: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # Asked for every one of the 10 configurations, the tune times 5: one of each class.
    code = main(["tune", "capped", "--root", str(project), "--backend", "opencl", "--trials", "10",
                 "--sampler", "grid", "--write", "none", "--seed", "0"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "after 5 timed trials" in out
