"""The example project's Triton targets (its RMSNorm and SiLU-and-mul in Triton) in CI without a GPU: in
Triton's interpreter on the triton backend they pass their items, and the summary says the timings are the
interpreter's; on the OpenCL backend's run of the same project they are skipped, saying how to run them."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_example_project import copy_example, item_outcomes, run_pytest

pytest.importorskip("torch", reason="the triton backend runs on torch tensors")
pytest.importorskip("triton", reason="the triton backend needs triton (pip install 'pytest-ktune[triton]')")

TRITON_TARGETS = ("triton_rmsnorm", "triton_silu_and_mul")


def test_the_example_s_triton_targets_pass_in_the_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    copy_example(tmp_path)
    proc = run_pytest(tmp_path, "--ktune-backend=triton", "-v", "-k", "triton_")
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    outcomes = item_outcomes(out)
    for target in TRITON_TARGETS:
        items = {k: v for k, v in outcomes.items() if f"::{target}::" in k}
        assert len(items) >= 8 and set(items.values()) == {"PASSED"}, items  # correct and perf, 4 cases
    assert "on triton / Triton interpreter (CPU)" in out
    assert "so these timings are the interpreter's on the CPU, not GPU timings" in " ".join(out.split())


def test_an_opencl_run_skips_the_triton_targets_saying_how_to_run_them(tmp_path: Path) -> None:
    copy_example(tmp_path)
    proc = run_pytest(tmp_path, "-v", "-rs", "-k", "triton_")
    assert proc.returncode in (0, 5), proc.stdout + proc.stderr  # 5: every selected item skipped
    outcomes = item_outcomes(proc.stdout)
    assert outcomes and set(outcomes.values()) == {"SKIPPED"}, outcomes
    assert "triton_rmsnorm is a Triton target (no opencl source): it runs with --ktune-backend triton" in proc.stdout
