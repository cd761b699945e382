"""The gate as a required check: a kernel that crashes or hangs fails its own item and the run goes
on (summary, JUnit and JSON still written); a backend that cannot run fails the run instead of
skipping it into a green one; pytest-xdist is refused at the start."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from tuner._tk import MODE_HANG, MODE_OK, MODE_OUT_OF_BOUNDS, PROBE_CL, probe_target

from ._kit import Project, failure_section, lit, scale_target


def _write(project: Project, mode: int) -> None:
    # Items run in the order of the targets' names: "broken" first, so "later" runs after its crash.
    project.write(probe_target("broken", space="BLOCK=[64], MODE=[0, 1, 2, 3, 4, 5]",
                               default=f"{{'BLOCK': 64, 'MODE': {mode}}}"),
                  scale_target("later"), sources={"probe": PROBE_CL})


def test_a_kernel_that_crashes_fails_its_own_items_and_the_run_goes_on(project: Project) -> None:
    _write(project, MODE_OUT_OF_BOUNDS)
    result = project.run("-v", "--ktune-junit=junit.xml", "--ktune-benchmark-json=bench.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines([lit(f"kernels.py::{item}") + f" {outcome}*" for item, outcome in (
        ("broken::correct[small]", "FAILED"), ("broken::perf[small]", "FAILED"),
        ("later::correct[small]", "PASSED"), ("later::perf[small]", "PASSED"))])
    text = failure_section(result, "broken::correct[small]")
    assert "target broken (" in text and "kernels.py), case small: checking its kernels:" in text
    assert "the measurement process died from signal 11 (a crash in the kernel or the driver)" in text
    assert "a fresh measurement process runs the rest of the session" in text
    # The session ended as usual: its summary and both reports are there, with the crash in them.
    result.stdout.fnmatch_lines(["*= ktune summary =*"])
    suites = ET.parse(project.path / "junit.xml").getroot()
    failures = [tc for tc in suites.iter("testcase") if tc.find("failure") is not None]
    assert {tc.get("name") for tc in failures} == {"correct[small]", "perf[small]"}
    names = [b["fullname"] for b in json.loads((project.path / "bench.json").read_text())["benchmarks"]]
    assert len(names) == 1 and names[0].startswith("kernels.py::later::perf[small] on "), names


def test_a_kernel_that_hangs_fails_after_the_item_timeout(project: Project) -> None:
    _write(project, MODE_HANG)
    result = project.run("-v", "--ktune-item-timeout=4", "-k", "correct")
    result.assert_outcomes(passed=1, failed=1)
    text = failure_section(result, "broken::correct[small]")
    assert "no answer within 4 s (the kernel hangs, or is far too slow)" in text
    result.stdout.fnmatch_lines([lit("kernels.py::later::correct[small]") + " PASSED*"])


def test_a_healthy_target_is_untouched_by_the_isolation(project: Project) -> None:
    _write(project, MODE_OK)
    result = project.run("-v")
    result.assert_outcomes(passed=4)


def test_an_item_timeout_of_zero_is_a_usage_error(project: Project) -> None:
    _write(project, MODE_OK)
    result = project.run("--ktune-item-timeout=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --ktune-item-timeout 0 leaves no time to run a kernel"])


def test_a_backend_asked_for_that_cannot_run_fails_the_run(project: Project) -> None:
    project.write()
    result = project.pytester.runpytest_subprocess("--ktune", "--ktune-backend=cuda", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: the cuda backend cannot run: *", "next step: *",
                                 "*--ktune-skip-unavailable*"])
    # Without CuPy's CUDA libraries the step installs them; with a CUDA library but no driver to match, it
    # names the driver.
    (step,) = [line for line in result.stderr.lines if line.startswith("next step: ")]
    assert "pip install 'pytest-ktune[cuda]'" in step or "the NVIDIA driver" in step, step
    result.stdout.no_fnmatch_line("*passed*")


def test_auto_with_no_device_fails_unless_skipping_is_asked_for(project: Project,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    project.write()
    monkeypatch.setenv("KTUNE_OPENCL_DEVICE", "no-such-device")  # no GPU here, and now no OpenCL device
    failed = project.pytester.runpytest_subprocess("--ktune", "-p", "no:cacheprovider")
    assert failed.ret == pytest.ExitCode.USAGE_ERROR
    failed.stderr.fnmatch_lines(["ERROR: the auto backend cannot run: *no-such-device* matches no device*"])
    skipped = project.pytester.runpytest_subprocess("--ktune", "--ktune-skip-unavailable", "-p",
                                                    "no:cacheprovider", "-rs")
    assert skipped.ret == pytest.ExitCode.OK
    skipped.assert_outcomes(skipped=4)
    skipped.stdout.fnmatch_lines(["ktune: backend opencl unavailable, items skipped: *no-such-device*"])


def test_pytest_xdist_is_refused_at_the_start(project: Project) -> None:
    pytest.importorskip("xdist")
    project.write()
    result = project.run("-n", "2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: pytest-ktune times kernels one at a time on one device*pytest-xdist (-n 2*"
                                 "Run the ktune items in a pytest run of their own without -n*"])
    assert not (project.path / "ktune-params.json").exists()
    ok = project.run("-n", "0")
    ok.assert_outcomes(passed=4)
