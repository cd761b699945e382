"""Triton targets through pytest: they run with ``--ktune-backend triton`` (here in Triton's interpreter, whose
timings the summary says are no GPU's and which never become baselines), are skipped with the reason on
another backend's run, and a module that cannot import triton is skipped saying what to install; a triton
backend asked for that cannot run fails the run. Under ``--ktune-base`` a changed jit function's module is
timed A/B against the commit's whole target."""

from __future__ import annotations

import contextlib

import pytest

from ._kit import ADD_CL, PRELUDE, Project, add_target, failure_section, lit, summary_rows

# pyopencl loaded before torch: the mixed project below runs OpenCL beside Triton in this process, and loading
# pyopencl only after torch and Triton have run kernels aborts the process on some hosts.
with contextlib.suppress(ImportError):
    import pyopencl  # noqa: F401
pytest.importorskip("torch", reason="the triton backend runs on torch tensors")
pytest.importorskip("triton", reason="the triton backend needs triton (pip install 'pytest-ktune[triton]')")

# REPS rounds of busy work that leave the output as it is (the jit function's module is the launcher too).
TRITON_KERNELS = '''\
"""A Triton kernel of a throwaway test project."""

from typing import Any

import numpy as np
import triton
import triton.language as tl

import ktune

REPS = {reps}


@triton.jit
def _double(X, Y, N, BLOCK: tl.constexpr, REPS: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(X + i, mask=i < N)
    t = v
    for _ in range(REPS):
        t = tl.sin(t)
    tl.store(Y + i, tl.where(t == 12345.0, 0.0, v * 2), mask=i < N)


@ktune.target(
    sources={{"triton": _double}},
    space=ktune.Space(BLOCK=[64, 128], num_warps=[1, 4]), default={{"BLOCK": 128, "num_warps": 4}},
    key=lambda x: {{"N": x.shape[0]}}, defines=lambda: {{"REPS": REPS}},
    cases=[ktune.Case(id="n4k", x=ktune.Tensor((4096,), "float32"))],
    reference=lambda x: 2 * np.asarray(x, np.float64),
)
def double(kernel: ktune.Kernel, x: Any) -> Any:
    y = kernel.empty_like(x)
    n = x.shape[0]
    kernel.launch(grid=(triton.cdiv(n, kernel["BLOCK"]),), args=[x, y, n])
    return y
'''

GITIGNORE = ".ktune/\n.cache/\n__pycache__/\nrunpytest-*\nstdout\nstderr\n"


@pytest.fixture
def mixed(project: Project, monkeypatch: pytest.MonkeyPatch) -> Project:
    """A Triton target in tkernels.py beside an OpenCL one in kernels.py; Triton's interpreter on."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    (project.path / "tkernels.py").write_text(TRITON_KERNELS.format(reps=1))
    (project.path / "kernels.py").write_text(PRELUDE + add_target())
    (project.path / "add.cl").write_text(ADD_CL)
    return project


def test_triton_targets_run_on_the_triton_backend_in_the_interpreter_and_say_so(mixed: Project) -> None:
    result = mixed.run("-v", "--ktune-backend", "triton", "-rs")
    result.assert_outcomes(passed=2, skipped=2)
    result.stdout.fnmatch_lines([lit("tkernels.py::double::correct[n4k]") + " PASSED*",
                                 "on triton / Triton interpreter (CPU)",
                                 "*the kernels ran in Triton's interpreter (TRITON_INTERPRET=1), so these timings*"])
    assert "add has no triton source" in result.stdout.str()


def test_another_backend_s_run_skips_triton_targets_saying_how_to_run_them(mixed: Project) -> None:
    pytest.importorskip("pyopencl", reason="the other backend of this project is OpenCL")
    result = mixed.run("-rs")
    result.assert_outcomes(passed=2, skipped=2)
    result.stdout.fnmatch_lines(["*double is a Triton target (no opencl source): it runs with --ktune-backend triton*"])


def test_interpreter_timings_are_never_recorded_as_baselines(mixed: Project) -> None:
    result = mixed.run("--ktune-backend", "triton", "--ktune-update-baseline")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--ktune-update-baseline: Triton interpreter (CPU) runs the kernels in an "
                                 "interpreter on the CPU*never recorded*", "*record baselines on a GPU*"])
    assert not mixed.params_path.exists()


def test_a_module_that_cannot_import_triton_is_skipped_saying_what_to_install(mixed: Project) -> None:
    pytest.importorskip("pyopencl", reason="the other backend of this project is OpenCL")
    (mixed.path / "conftest.py").write_text("import sys\n\nsys.modules['triton'] = None  # triton not installed\n")
    result = mixed.run("-rs")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["*" + lit("tkernels.py needs triton, which is not installed (pip install "
                                           "'pytest-ktune[triton]'); its targets run with --ktune-backend triton")])


def test_a_triton_backend_asked_for_that_cannot_run_fails_the_run(mixed: Project,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("torch sees a GPU here: the triton backend can run")
    monkeypatch.delenv("TRITON_INTERPRET")
    result = mixed.run("--ktune-backend", "triton")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*the triton backend cannot run: torch sees no CUDA GPU for the triton backend*",
                                 "*set TRITON_INTERPRET=1*"])


def test_a_slower_jit_module_is_timed_ab_against_the_commit_s_whole_target(mixed: Project) -> None:
    (mixed.path / ".gitignore").write_text(GITIGNORE)
    mixed.commit_all("kernels")
    (mixed.path / "tkernels.py").write_text(TRITON_KERNELS.format(reps=400))
    result = mixed.run("-v", "--ktune-backend", "triton", "--ktune-base", "HEAD", "-k", "double")
    result.assert_outcomes(passed=1, failed=1)
    assert summary_rows(result)["double", "n4k"][-1] == "REGRESSION"
    message = failure_section(result, "double::perf[n4k]")
    assert "same-run A/B against HEAD (" in message and "launcher module tkernels.py changed" in message


def test_a_tune_in_the_interpreter_writes_its_parameters_and_no_baseline(mixed: Project) -> None:
    result = mixed.run("--ktune-backend", "triton", "--ktune-tune", "--ktune-trials", "3", "--ktune-write", "file",
                       "-k", "double")
    assert result.ret == 0, result.stdout.str()
    (record,) = [r for r in mixed.records() if r["target"].endswith("::double")]
    assert record["device"] == "Triton interpreter (CPU) [triton]"
    assert record.get("baseline") is None and record["tuned"]["trials"] >= 1
    assert set(record["params"]) == {"BLOCK", "num_warps"}


def test_a_configuration_triton_cannot_compile_is_an_infeasible_point_with_its_reason(mixed: Project) -> None:
    text = TRITON_KERNELS.format(reps=1).replace("BLOCK=[64, 128]", "BLOCK=[64, 100]")  # arange needs 2^k
    (mixed.path / "tkernels.py").write_text(text.replace('"BLOCK": 128,', '"BLOCK": 64,'))
    result = mixed.run("--ktune-backend", "triton", "--ktune-tune", "--ktune-trials", "4", "-k", "double")
    assert result.ret == 0, result.stdout.str()
    study = next((mixed.path / ".ktune" / "reports").glob("double-*.md")).read_text()
    assert "infeasible" in study and "arange's range must be a power of 2" in study, study
