"""Collection: which items the plugin makes, how they are named and selected, and what it imports."""

from __future__ import annotations

import pytest

from ._kit import Project, add_target, case, lit, scale_target

SCALE_CASES = f"{case(4096, case_id='small')}, {case(16384)}"

ALL_IDS = [
    "kernels.py::add::correct[n4096]",
    "kernels.py::add::perf[n4096]",
    "kernels.py::scale::correct[small]",
    "kernels.py::scale::perf[small]",
    "kernels.py::scale::correct[N16384-float32]",
    "kernels.py::scale::perf[N16384-float32]",
]


def collected(result: pytest.RunResult) -> list[str]:
    return [line for line in result.stdout.lines if line.startswith("kernels.py::")]


def test_one_correctness_and_one_performance_item_per_case(project: Project) -> None:
    project.write(scale_target(cases=SCALE_CASES), add_target())
    result = project.run("--collect-only", "-q")
    assert result.ret == 0, result.stdout.str()
    # Targets in name order; per case its correctness item, then its performance item.
    # A case without id= is named from its key and dtype.
    assert collected(result) == ALL_IDS
    result.stdout.fnmatch_lines(["6 tests collected*"])


@pytest.mark.parametrize(("selection", "expected"), [
    (("-k", "perf"), [i for i in ALL_IDS if "::perf[" in i]),
    (("-m", "ktune_correctness"), [i for i in ALL_IDS if "::correct[" in i]),
    (("-m", "ktune_performance", "-k", "scale"), [i for i in ALL_IDS if "scale::perf[" in i]),
    (("-k", "small"), [i for i in ALL_IDS if "[small]" in i]),
], ids=["k-perf", "m-correctness", "m-performance-k-target", "k-case"])
def test_keywords_and_markers_select_items(project: Project, selection: tuple[str, ...],
                                           expected: list[str]) -> None:
    project.write(scale_target(cases=SCALE_CASES), add_target())
    result = project.run("--collect-only", "-q", *selection)
    assert result.ret == 0, result.stdout.str()
    assert collected(result) == expected
    result.stdout.fnmatch_lines([f"{len(expected)}/6 tests collected ({6 - len(expected)} deselected)*"])


def test_selected_items_are_the_ones_that_run(project: Project) -> None:
    project.write(scale_target(cases=SCALE_CASES), add_target())
    result = project.run("-v", "-m", "ktune_correctness")
    result.assert_outcomes(passed=3, deselected=3)
    result.stdout.fnmatch_lines([lit("kernels.py::scale::correct[small]") + " PASSED*"])
    result.stdout.no_fnmatch_line("*::perf[*")


PROBE_CONFTEST = """
import sys

def pytest_terminal_summary(terminalreporter):
    heavy = sorted(m for m in ("cupy", "numpy", "pyopencl") if m in sys.modules)
    terminalreporter.write_line(f"heavy modules: {heavy}")
"""


def test_without_ktune_nothing_is_collected_and_nothing_heavy_is_imported(project: Project) -> None:
    project.write()
    project.pytester.makeconftest(PROBE_CONFTEST)
    project.pytester.makepyfile(test_plain="def test_plain():\n    assert 1 + 1 == 2\n")

    plain = project.pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v")
    plain.assert_outcomes(passed=1)
    plain.stdout.fnmatch_lines(["test_plain.py::test_plain PASSED*", lit("heavy modules: []")])
    plain.stdout.no_fnmatch_line("kernels.py*")
    plain.stdout.no_fnmatch_line("*ktune:*")

    # The probe does see the imports once --ktune asks for them: numpy for the targets; the backend's
    # packages load in the measurement process only, never in pytest's own.
    tuned = project.run("-v")
    tuned.assert_outcomes(passed=5)
    tuned.stdout.fnmatch_lines([lit("kernels.py::scale::correct[small]") + " PASSED*",
                                lit("heavy modules: ['numpy']")])


def test_the_header_names_seed_backend_and_params_file(project: Project) -> None:
    project.write()
    result = project.run("--collect-only", "--ktune-seed", "77")
    result.stdout.fnmatch_lines([
        "ktune: seed 77 (rerun with --ktune-seed 77), threshold median:5%, params ktune-params.json",
        "ktune: backend opencl on *",
    ])
    # The params file under the rootdir (named a line below) by its relative path; each line in 120 columns.
    header = [ln for ln in result.stdout.lines if ln.startswith("ktune: ")]
    assert all(len(ln) <= 120 for ln in header), header
    assert not any(ln.startswith("ktune: machine identity") for ln in header)
    verbose = project.run("--collect-only", "--ktune-seed", "77", "-v")
    verbose.stdout.fnmatch_lines(["ktune: backend opencl on *", "ktune: machine identity * [[]opencl[]]*"])


def test_a_skip_points_at_the_target_not_at_the_plugin(project: Project) -> None:
    only_cuda = "ktune.Case(id='gpu', x=ktune.Tensor((4096,)), a=2.0, backends=['cuda'])"
    project.write(scale_target(cases=only_cuda))
    declared = next(i for i, line in enumerate((project.path / "kernels.py").read_text().splitlines(), 1)
                    if line.startswith("scale = ktune.target("))
    result = project.run("-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines([f"SKIPPED [[]2[]] kernels.py:{declared}: case declared for cuda only, not opencl"])
    assert "pytest_ktune" not in result.stdout.str()


def test_targets_are_collected_however_target_is_imported(project: Project) -> None:
    # `from ktune import target` (no ".target(" in the text) finds its target as `ktune.target(` does.
    body = scale_target().replace("ktune.target(", "make(")
    project.write("from ktune import target as make\n" + body)
    result = project.run("--collect-only", "-q")
    assert result.ret == 0, result.stdout.str()
    assert collected(result) == ["kernels.py::scale::correct[small]", "kernels.py::scale::perf[small]"]
