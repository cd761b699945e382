"""On the GPU: a pull request that changes only the launcher (the busy-loop count it passes a CUDA kernel
as a scalar argument) fails under --ktune-base HEAD, timed A/B against HEAD's whole target; the same
launcher made faster passes (needs CUDA)."""

from __future__ import annotations

import pytest

from ._kit import Project, failure_section, lit, summary_rows

pytestmark = pytest.mark.gpu

SPIN_CU = r"""
extern "C" __global__ void spin(float* out, const float* x, int reps, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float t = x[i];
    for (int r = 0; r < reps; ++r) t = sinf(t);
    out[i] = (t == 12345.0f) ? 0.0f : x[i];
}
"""

KERNELS = '''
import numpy as np
import ktune

{reps}


def copied(x):
    return x.copy()


def launch(kernel, x):
    n = x.shape[0]
    out = kernel.empty_like(x)
    kernel.launch(grid=ktune.cdiv(n, 256), block=256, args=[out, x, np.int32(REPS), np.int32(n)])
    return out


spin = ktune.target(
    name="spin", kernel="spin", sources={{"cuda": "spin.cu"}}, space=ktune.Space(BLOCK=[256]),
    default={{"BLOCK": 256}}, key=lambda x: {{"N": x.shape[0]}},
    cases=[ktune.Case(id="n1m", x=ktune.Tensor((1 << 20,)))], reference=copied,
)(launch)
'''


def _run(project: Project) -> pytest.RunResult:
    return project.pytester.runpytest_subprocess("--ktune", "--ktune-backend=cuda", "-p", "no:cacheprovider", "-v",
                                                 "--ktune-base", "HEAD", timeout=600)


def test_a_slower_launcher_alone_fails_on_the_gpu_against_head_s_whole_target(project: Project) -> None:
    kernels = project.path / "kernels.py"
    kernels.write_text(KERNELS.format(reps="REPS = 64"))
    (project.path / "spin.cu").write_text(SPIN_CU)
    # pytester's HOME is the project folder, so CuPy's (~/.cupy) and the driver's (~/.nv) caches land there
    (project.path / ".gitignore").write_text(".ktune/\n__pycache__/\nrunpytest-*\nstdout\nstderr\n.cupy/\n.nv/\n")
    project.commit_all("kernels")
    before = (project.git("status", "--porcelain"), project.git("rev-parse", "HEAD"), project.git("ls-files", "-s"))

    kernels.write_text(KERNELS.format(reps="REPS = 1024"))
    slow = _run(project)
    slow.assert_outcomes(passed=1, failed=1)
    slow.stdout.fnmatch_lines([lit("kernels.py::spin::perf[n1m]") + " FAILED*"])
    assert summary_rows(slow)["spin", "n1m"][-1] == "REGRESSION"
    assert "launcher module kernels.py changed" in failure_section(slow, "spin::perf[n1m]")

    kernels.write_text(KERNELS.format(reps="REPS = 4"))
    fast = _run(project)
    fast.assert_outcomes(passed=2)
    assert summary_rows(fast)["spin", "n1m"][-1] in {"ok", "faster"}
    kernels.write_text(KERNELS.format(reps="REPS = 64"))
    after = (project.git("status", "--porcelain"), project.git("rev-parse", "HEAD"), project.git("ls-files", "-s"))
    assert after == before  # the user's git state as it was
