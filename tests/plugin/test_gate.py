"""The regression gate inside a git repository: a slower source or a worse recorded configuration fails
exactly its own performance item, with the numbers; an unchanged kernel never fails."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from ._kit import Project, add_target, case, failure_section, lit, scale_target, summary_rows

# REPEAT sets how much busy work each element costs (see SCALE_CL); 4 is what ships, 64 is a
# much slower configuration that still computes the same output.
GATED = scale_target(
    cases=case(16384, case_id="n16k"),
    space="BLOCK=[64], REPEAT=[4, 64]",
    default="{'BLOCK': 64, 'REPEAT': 4}",
) + add_target()

GITIGNORE = ".ktune/\n.cache/\n__pycache__/\nrunpytest-*\nstdout\nstderr\n"


@pytest.fixture
def gated(project: Project) -> Project:
    """A committed project whose baseline was recorded from the committed sources and committed too."""
    project.write(GATED)
    (project.path / ".gitignore").write_text(GITIGNORE)
    head = project.commit_all("kernels")

    recorded = project.run("--ktune-update-baseline")
    recorded.assert_outcomes(passed=4)
    records = project.records()
    assert [r["baseline"]["commit"] for r in records] == [head, head]
    project.git("add", "ktune-params.json")
    project.git("commit", "-q", "-m", "baseline")
    return project


def _baseline_of(project: Project, target: str) -> dict[str, object]:
    baseline: dict[str, object] = next(
        r["baseline"] for r in project.records() if r["target"] == f"kernels.py::{target}")
    return baseline


def _assert_only_scale_regressed(result: pytest.RunResult) -> str:
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines([
        lit("kernels.py::add::correct[n4096]") + " PASSED*",
        lit("kernels.py::add::perf[n4096]") + " PASSED*",
        lit("kernels.py::scale::correct[n16k]") + " PASSED*",
        lit("kernels.py::scale::perf[n16k]") + " FAILED*",
    ])
    rows = summary_rows(result)
    assert rows["scale", "n16k"][-1] == "REGRESSION"
    assert rows["add", "n4096"][-1] in {"ok", "drift", "faster"}
    message = failure_section(result, "scale::perf[n16k]")
    # The numbers: current time against the baseline's, the ratio and threshold, and the A/B.
    # The numbers are the A/B's: the current kernel, then the baseline's, and their ratio.
    m = re.search(r"scale\[n16k\] on .* regressed: same-run A/B against the baseline \(commit [0-9a-f]+\): "
                  r"([\d.]+) (µs|ms) vs ([\d.]+) (µs|ms), x([\d.]+), p=[\d.e-]+ \([^)]*\), beyond the threshold "
                  r"median:5%",
                  message)
    assert m, message
    assert float(m.group(5)) > 2, message
    assert "Traceback" not in message
    return message


def test_a_slower_source_fails_its_perf_item_with_the_numbers(gated: Project) -> None:
    source = gated.path / "scale.cl"
    slow = source.read_text().replace("r < REPEAT;", "r < 8 * REPEAT;")  # 8x the busy work
    assert slow != source.read_text()
    source.write_text(slow)

    result = gated.run("-v")
    message = _assert_only_scale_regressed(result)
    old_hash = _baseline_of(gated, "scale")["source_hash"]
    new_hash = hashlib.sha256(slow.encode()).hexdigest()[:16]
    head = gated.git("rev-parse", "HEAD~1").strip()
    assert "same-run A/B against the baseline" in message
    assert f"Changed since the baseline (commit {head[:12]}): source {old_hash} -> {new_hash}" in message
    assert "accept the new time with --ktune-update-baseline" in message


def test_a_worse_recorded_configuration_fails_its_perf_item(gated: Project) -> None:
    data = json.loads(gated.params_path.read_text())
    for record in data["records"]:
        if record["target"] == "kernels.py::scale":
            record["params"]["REPEAT"] = 64
    gated.params_path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")

    result = gated.run("-v")
    message = _assert_only_scale_regressed(result)
    assert "same-run A/B against the baseline" in message
    assert ("parameters {'BLOCK': 64, 'REPEAT': 4} -> {'BLOCK': 64, 'REPEAT': 64}") in message
    assert "source " not in message.split("Changed since the baseline")[1]


def test_a_target_with_its_own_threshold_passes_a_slowdown_within_it(gated: Project) -> None:
    kernels = gated.path / "kernels.py"
    # This target allows 10x, whatever the run's threshold says; its source now costs about 3x.
    kernels.write_text(kernels.read_text().replace("reference=scaled,", 'reference=scaled, threshold="median:900%",'))
    source = gated.path / "scale.cl"
    source.write_text(source.read_text().replace("r < REPEAT;", "r < 3 * REPEAT;"))

    # The run's threshold (50 %) would fail scale's 3x; the unchanged add stays within it even on a loaded host,
    # where a 2 µs PoCL kernel's same-run A/B has read 1.2x.
    result = gated.run("-v", "--ktune-threshold=median:50%")
    result.assert_outcomes(passed=4)
    rows = summary_rows(result)
    assert rows["scale", "n16k"][-1] == "ok" and float(rows["scale", "n16k"][4]) > 1.5, rows


def test_a_change_that_does_not_slow_the_kernel_passes(gated: Project) -> None:
    source = gated.path / "scale.cl"
    source.write_text("// Scales x by a.\n" + source.read_text())
    result = gated.run()
    result.assert_outcomes(passed=4)
    rows = summary_rows(result)
    # A changed source cannot be waved through as drift: if the screen flags it, A/B decides.
    assert rows["scale", "n16k"][-1] in {"ok", "faster"}
    assert rows["add", "n4096"][-1] in {"ok", "drift", "faster"}


def test_an_unchanged_kernel_never_fails_the_gate(gated: Project) -> None:
    before = gated.params_path.read_bytes()
    verdicts: list[str] = []
    for _ in range(10):
        result = gated.run("-m", "ktune_performance")
        assert result.ret == 0, result.stdout.str()
        result.assert_outcomes(passed=2, deselected=2)
        rows = summary_rows(result)
        assert set(rows) == {("add", "n4096"), ("scale", "n16k")}
        verdicts += [row[-1] for row in rows.values()]
    assert set(verdicts) <= {"ok", "drift", "faster"}, verdicts
    assert gated.params_path.read_bytes() == before
