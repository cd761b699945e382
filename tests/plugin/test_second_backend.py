"""A cuda run gates the Triton targets too: those with only a Triton source run on the triton backend in a
second measurement process of the same run (``run.lanes``), started while pytest collects. Here the first
backend is a conftest's that speaks for cuda (PoCL underneath) and Triton runs in its interpreter, so the
routing, the summary's line, the items' verdicts, the refusals and the failure of a second backend that
cannot start are checked on a CPU; on the H200 the same run times both on the GPU."""

from __future__ import annotations

import contextlib

import pytest

from ._kit import ADD_CL, PRELUDE, Project, add_target, lit, summary_rows
from .test_triton import TRITON_KERNELS

with contextlib.suppress(ImportError):
    import pyopencl  # noqa: F401  (before torch: see test_triton)
pytest.importorskip("pyopencl", reason="the first backend here is PoCL under a cuda name")
pytest.importorskip("torch", reason="the triton backend runs on torch tensors")
pytest.importorskip("triton", reason="the triton backend needs triton (pip install 'pytest-ktune[triton]')")

# The OpenCL backend under the cuda name: a run on it is a "cuda" run, whose second backend is Triton's.
CUDA_NAMED = '''
from dataclasses import replace
from pytest_ktune.backends.opencl import OpenCLBackend


class CudaNamed(OpenCLBackend):
    name = "cuda"

    def __init__(self):
        super().__init__()
        self.device = replace(self.device, backend="cuda")


def pytest_ktune_backend(name):
    return CudaNamed if name == "cuda-named" else None
'''

ARGS = ("--ktune-backend", "cuda-named", "-v", "-rs")


@pytest.fixture
def both(project: Project, monkeypatch: pytest.MonkeyPatch) -> Project:
    """A cuda target (OpenCL source, the conftest's backend compiles it) and a Triton-only one."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    project.pytester.makeconftest(CUDA_NAMED)
    (project.path / "tkernels.py").write_text(TRITON_KERNELS.format(reps=1))
    (project.path / "kernels.py").write_text(PRELUDE + add_target().replace('"opencl": "add.cl"', '"cuda": "add.cl"'))
    (project.path / "add.cl").write_text(ADD_CL)
    return project


def test_a_cuda_run_gates_its_triton_targets_in_a_second_process(both: Project) -> None:
    result = both.run(*ARGS)
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.assert_outcomes(passed=4)
    out = " ".join(result.stdout.str().split())
    assert "1 case(s) of targets with only a triton source timed on the triton backend (Triton interpreter (CPU))" \
           ", in this run's second measurement process, in Triton's interpreter: not GPU timings" in out
    rows = summary_rows(result)
    assert ("double", "n4k") in rows and ("add", "n4096") in rows


def test_the_triton_target_s_baseline_is_the_triton_device_s_and_the_interpreter_records_none(
        both: Project) -> None:
    result = both.run(*ARGS, "--ktune-update-baseline")
    result.assert_outcomes(passed=3, failed=1)  # add: correct, perf; double: correct passes, perf refused
    result.stdout.fnmatch_lines(["*--ktune-update-baseline: Triton interpreter (CPU) runs the kernels in an "
                                 "interpreter*never recorded as baselines*"])
    (record,) = both.records()
    assert record["target"].endswith("::add") and record["device"].endswith("[cuda]")


def test_a_cuda_run_tunes_only_cuda_targets_and_says_how_to_tune_the_triton_one(both: Project) -> None:
    result = both.run(*ARGS, "--ktune-tune", "--ktune-trials", "2", "-m", "ktune_tune", "-k", "double")
    result.stdout.fnmatch_lines(["*double has a triton source only: a cuda run gates it but tunes only cuda "
                                 "targets; tune it with --ktune-backend triton*"])
    result.assert_outcomes(skipped=1)


def test_a_second_backend_that_cannot_start_fails_its_items_not_silently(both: Project,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a CUDA GPU, where the triton backend starts without the interpreter")
    monkeypatch.delenv("TRITON_INTERPRET")
    result = both.run(*ARGS)
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["*the triton backend (this run's second, for its triton targets) cannot run*"])
    skipped = both.run(*ARGS, "--ktune-skip-unavailable")
    skipped.assert_outcomes(passed=2, skipped=2)
    assert lit("double") in skipped.stdout.str()
