"""On a CUDA GPU: accepted templates run under compute-sanitizer memcheck, racecheck, initcheck and synccheck,
and what those see, a result never shows (an overread whose value never counts, a shared-memory race, a
barrier only part of the block reaches), rejects them.
Skipped with the reason where there is no GPU; ``benchmarks/sanitize_templates.py`` runs the same on
the templates of the naive kernels and writes the tools' log."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_ktune.agent._check import check_proposal
from pytest_ktune.agent._proposal import Proposal
from pytest_ktune.core.discover import import_file
from pytest_ktune.core.target import Target
from pytest_ktune.measure.tools import SANITIZER_TOOLS, ToolPlan, available

pytestmark = pytest.mark.gpu

SCALE_ADD_CU = """extern "C" __global__ void scale_add(float* out, const float* x, const float* y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * x[i] + y[i];
}
"""
# Reads past the end of x for the last 64 threads; the value is compared with one it never takes, so
# neither the result nor the guards show it: only memcheck does.
OVERREAD_CU = SCALE_ADD_CU.replace("if (i < n) out[i] = 2.0f * x[i] + y[i];",
                                   "if (i < n) { const float next = x[i + 64];\n"
                                   "        out[i] = next == 12345.0f ? 0.0f : 2.0f * x[i] + y[i]; }")
# Every thread writes its partial, and the last one sums them without a __syncthreads() between.
RACY_CU = """extern "C" __global__ void scale_add(float* out, const float* x, const float* y, int n) {
    __shared__ float seen[1024];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    seen[threadIdx.x] = i < n ? x[i] : 0.0f;
    if (threadIdx.x == blockDim.x - 1) {
        float s = 0.0f;
        for (int k = 0; k < blockDim.x; ++k) s += seen[k];
        seen[0] = s;
    }
    if (i < n) out[i] = 2.0f * x[i] + y[i] + 0.0f * seen[threadIdx.x];
}
"""

# A barrier the block reaches at two different sites (the first warp at one, the rest at another): the result
# is right, and only synccheck sees it. (A __syncthreads() that the other warps skip and then exit is not
# reported on Volta and later, where exited threads count as arrived: benchmarks/synccheck_controls.py.)
DIVERGENT_BARRIER_CU = SCALE_ADD_CU.replace("if (i < n) out[i]", "if (threadIdx.x < 32) __syncthreads(); "
                                            "else __syncthreads();\n    if (i < n) out[i]")

TARGET_PY = '''
from typing import Any

import numpy as np

import ktune


@ktune.target(
    sources={"cuda": "scale_add.cu"}, space=ktune.Space(NAIVE=[1]), default={"NAIVE": 1},
    key=lambda x: {"n": x.shape[0]},
    cases=[ktune.Case(x=ktune.Tensor((4096,)), y=ktune.Tensor((4096,)), id="n4096")],
    reference=lambda x, y: 2.0 * x.astype(np.float64) + y,
)
def scale_add(kernel: Any, x: Any, y: Any) -> Any:
    n = x.shape[0]
    out = kernel.empty((n,), x.dtype)
    kernel.launch(grid=ktune.cdiv(n, 64), block=64, args=[out, x, y, np.int32(n)])
    return out
'''


@pytest.fixture
def base(tmp_path: Path) -> Iterator[Target]:
    if not available("memcheck"):
        pytest.skip("compute-sanitizer is not installed (it comes with the CUDA toolkit)")
    (tmp_path / "scale_add.cu").write_text(SCALE_ADD_CU)
    (tmp_path / "gpu_scale_add.py").write_text(TARGET_PY)
    t = vars(import_file(tmp_path / "gpu_scale_add.py"))["scale_add"]
    assert isinstance(t, Target)
    yield t
    sys.modules.pop("gpu_scale_add", None)


def _proposal(source: str) -> Proposal:
    return Proposal.from_json({"source": source, "space": {"BLOCK": [64, 256]}, "default": {"BLOCK": 64},
                               "launch": {"block": "BLOCK", "grid": "cdiv(n, BLOCK)"}}, backend="cuda")


def test_a_clean_template_passes_every_sanitizer_tool_and_says_so(base: Target, tmp_path: Path) -> None:
    check = check_proposal(_proposal(SCALE_ADD_CU), base, root=tmp_path, backend="cuda", sample=0,
                           tools=ToolPlan(mode="require"))
    assert check.ok, check.message
    assert [(r.tool, r.status) for r in check.tools] == [(t, "clean") for t in SANITIZER_TOOLS]
    record = check.record()
    assert all(f"compute-sanitizer {t}" in record for t in SANITIZER_TOOLS)
    # each on the odd shape and on the edge-value cases
    assert all("n4096~odd(4096->4095)" in r.cases and "n4096~zeros" in r.cases for r in check.tools), \
        [r.cases for r in check.tools]


def test_an_overread_no_result_shows_is_caught_by_memcheck(base: Target, tmp_path: Path) -> None:
    check = check_proposal(_proposal(OVERREAD_CU), base, root=tmp_path, backend="cuda", sample=0,
                           tools=ToolPlan(mode="require"))
    assert not check.ok and check.stage == "tools", check.message
    assert "memcheck" in check.message and "Invalid __global__ read" in check.message


def test_a_shared_memory_race_is_caught(base: Target, tmp_path: Path) -> None:
    check = check_proposal(_proposal(RACY_CU), base, root=tmp_path, backend="cuda", sample=0,
                           tools=ToolPlan(mode="require"))
    assert not check.ok, check.summary()
    # the race may also show in a result (then the device check rejects it first)
    assert check.stage == "verify" or ("racecheck" in check.message and "ace" in check.message), check.message


def test_a_barrier_part_of_the_block_skips_is_caught_by_synccheck(base: Target, tmp_path: Path) -> None:
    check = check_proposal(_proposal(DIVERGENT_BARRIER_CU), base, root=tmp_path, backend="cuda", sample=0,
                           tools=ToolPlan(mode="require"))
    assert not check.ok and check.stage == "tools", check.summary()
    sync = next(r for r in check.tools if r.tool == "synccheck")
    assert sync.status == "errors" and any("Barrier" in f for _, f in sync.findings), sync
