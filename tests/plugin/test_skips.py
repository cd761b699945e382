"""The terminal summary says in one line how many ktune items were skipped and why, without -rs: on a
machine without a GPU most of a project's items skip, and an ``s`` each says nothing."""

from __future__ import annotations

from pytest_ktune.report.results import ItemOutcome
from pytest_ktune.report.skips import skip_line

from ._kit import Project, add_target, case, scale_target

ONLY_CUDA = "ktune.Case(id='gpu', x=ktune.Tensor((4096,)), a=2.0, backends=['cuda'])"


def test_the_skips_and_their_reasons_in_one_line(project: Project) -> None:
    cuda_only = """
cudaonly = ktune.target(
    name="cudaonly", kernel="scale", sources={"cuda": "scale.cu"},
    space=ktune.Space(BLOCK=[64]), default={"BLOCK": 64},
    key=lambda x: {"N": x.shape[0]},
    cases=[ktune.Case(id="small", x=ktune.Tensor((4096,)), a=2.0)],
    reference=scaled,
)(launch_scale)
"""
    project.write(scale_target(cases=f"{case(4096, case_id='small')}, {ONLY_CUDA}") + add_target() + cuda_only)
    result = project.run()
    result.assert_outcomes(passed=4, skipped=4)
    result.stdout.fnmatch_lines([
        "*ktune skipped*",
        "4 of 8 ktune items skipped (pytest -rs lists each): 2 case declared for cuda only, not opencl (scale); "
        "2 has no opencl source; add one to sources= to run it here (cudaonly)",
    ])
    assert result.ret == 0


def test_nothing_skipped_says_nothing(project: Project) -> None:
    project.write(add_target())
    result = project.run()
    result.assert_outcomes(passed=2)
    assert "ktune skipped" not in result.stdout.str()


def _skipped(name: str, message: str) -> ItemOutcome:
    return ItemOutcome(nodeid=f"k.py::{name}::perf[x]", check="perf", target=f"k.py::{name}", name=name, label="x",
                       outcome="skipped", message=message)


def test_many_reasons_are_cut_to_the_commonest() -> None:
    outcomes = [_skipped(f"t{i}", f"t{i} has no opencl source") for i in range(5)]
    outcomes += [_skipped("u", f"reason {i}") for i in range(6)]
    outcomes += [ItemOutcome(nodeid="k.py::v::perf[x]", check="perf", target="k.py::v", name="v", label="x",
                             outcome="passed")]
    line = skip_line(outcomes)
    assert line is not None
    assert line.startswith("11 of 12 ktune items skipped (pytest -rs lists each): 5 has no opencl source (5 targets); "
                           "1 reason 0 (u);")
    assert line.endswith("; 3 for 3 other reason(s)")
    assert skip_line(outcomes[-1:]) is None
