"""On the GPU: a kernel that makes an illegal memory access poisons its CUDA context; its own items
fail, saying so, and the next target runs in a fresh measurement process and passes (needs CUDA)."""

from __future__ import annotations

import pytest

from ._kit import Project, failure_section, lit

pytestmark = pytest.mark.gpu

SCALE_CU = r"""
#ifndef MODE
#define MODE 0
#endif
extern "C" __global__ void scale(float* out, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
#if MODE == 1
    out[i + (1LL << 40)] = a * x[i];  /* four terabytes past the end: an illegal address */
#endif
    out[i] = a * x[i];
}
"""

KERNELS = '''
import numpy as np
import ktune


def scaled(x, a):
    return (x.astype(np.float64) * a).astype(np.float32)


def launch(kernel, x, a):
    n = x.shape[0]
    out = kernel.empty_like(x)
    kernel.launch(grid=ktune.cdiv(n, 256), block=256, args=[out, x, np.float32(a), np.int32(n)])
    return out

'''


def _target(name: str, mode: int) -> str:
    return f"""
{name} = ktune.target(
    name={name!r}, kernel="scale", sources={{"cuda": "scale.cu"}}, space=ktune.Space(MODE=[0, 1]),
    default={{"MODE": {mode}}}, key=lambda x: {{"N": x.shape[0]}},
    cases=[ktune.Case(id="small", x=ktune.Tensor((1 << 16,)), a=2.0)], reference=scaled,
)(launch)
"""


def test_an_illegal_address_fails_its_own_items_and_the_next_target_passes(project: Project) -> None:
    project.pytester.makepyfile(kernels=KERNELS + _target("broken", 1) + _target("later", 0))
    (project.path / "scale.cu").write_text(SCALE_CU)
    result = project.pytester.runpytest_subprocess("--ktune", "--ktune-backend=cuda", "-p", "no:cacheprovider", "-v",
                                                  timeout=600)
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines([lit(f"kernels.py::{item}") + f" {outcome}*" for item, outcome in (
        ("broken::correct[small]", "FAILED"), ("broken::perf[small]", "FAILED"),
        ("later::correct[small]", "PASSED"), ("later::perf[small]", "PASSED"))])
    text = failure_section(result, "broken::correct[small]")
    assert "target broken (" in text and "illegal" in text.lower()
