"""A pull request that changes only the launcher (the Python module that declares a target, here the
busy-loop count it passes the kernel as a scalar argument) is a changed program: under
``--ktune-base REF`` it is timed A/B against REF's whole target, its module loaded from a copy of REF's
files, and a slower launcher fails. An unchanged module is not A/B'd; REF's module that cannot load
here fails under --ktune-strict, saying why; the user's git state is left as it was."""

from __future__ import annotations

import pytest

from ._kit import ADD_CL, PRELUDE, Project, add_target, failure_section, lit, summary_rows

# The busy work is an argument: the launcher alone says how much there is.
SPIN_CL = """\
__kernel void spin(__global float* out, __global const float* x, int reps, int n) {
    const int i = get_global_id(0);
    if (i >= n) return;
    float t = x[i];
    for (int r = 0; r < reps; ++r) t = sin(t);
    out[i] = (t == 12345.0f) ? 0.0f : x[i];
}
"""

SPIN = '''
{reps}


def copied(x: np.ndarray) -> np.ndarray:
    return x.copy()


def launch_spin(kernel: ktune.Kernel, x: Any) -> Any:
    n = x.shape[0]
    out = kernel.empty_like(x)
    kernel.launch(grid=ktune.cdiv(n, 64), block=64, args=[out, x, np.int32(REPS), np.int32(n)])
    return out


spin = ktune.target(
    name="spin", kernel="spin", sources={{"opencl": "spin.cl"}},
    space=ktune.Space(BLOCK=[64]), default={{"BLOCK": 64}},
    key=lambda x: {{"N": x.shape[0]}},
    cases=[ktune.Case(id="n16k", x=ktune.Tensor((16384,)), warm_cache=True)],
    reference=copied,
)(launch_spin)
'''

GITIGNORE = ".ktune/\n.cache/\n__pycache__/\nrunpytest-*\nstdout\nstderr\n"


def _write(project: Project, reps: str) -> None:
    (project.path / "kernels.py").write_text(PRELUDE + SPIN.format(reps=reps))


@pytest.fixture
def committed(project: Project) -> Project:
    """A committed project: the spin target in kernels.py, the add target in a module of its own."""
    _write(project, "REPS = 4")
    (project.path / "steady.py").write_text(PRELUDE + add_target())
    (project.path / "spin.cl").write_text(SPIN_CL)
    (project.path / "add.cl").write_text(ADD_CL)
    (project.path / ".gitignore").write_text(GITIGNORE)
    project.commit_all("kernels")
    return project


def _git_state(project: Project) -> tuple[str, str, str, str]:
    return (project.git("status", "--porcelain"), project.git("rev-parse", "HEAD"),
            project.git("ls-files", "--stage"), project.git("stash", "list"))


def test_a_slower_launcher_alone_fails_under_base_against_ref_s_whole_target(committed: Project) -> None:
    _write(committed, "REPS = 64")  # the kernel's source and parameters as they were; 16 times the work
    before = _git_state(committed)
    result = committed.run("-v", "--ktune-base", "HEAD")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines([lit("kernels.py::spin::perf[n16k]") + " FAILED*"])
    rows = summary_rows(result)
    assert rows["spin", "n16k"][-1] == "REGRESSION"
    assert "A/B" not in " ".join(rows["add", "n4096"])  # steady.py did not change: not A/B'd
    message = failure_section(result, "spin::perf[n16k]")
    assert "same-run A/B against HEAD (" in message and "launcher module kernels.py changed" in message
    assert _git_state(committed) == before  # status, HEAD, index and stash as they were

    # The launcher made faster instead passes, A/B'd against REF's all the same.
    _write(committed, "REPS = 1")
    faster = committed.run("-v", "--ktune-base", "HEAD")
    faster.assert_outcomes(passed=4)
    assert summary_rows(faster)["spin", "n16k"][-1] in {"ok", "faster"}
    faster.stdout.fnmatch_lines(["--ktune-base HEAD (*): 1 case(s) of targets changed since then timed A/B*"])


def test_an_unchanged_launcher_is_not_ab_d(committed: Project) -> None:
    text = (committed.path / "kernels.py").read_text()
    (committed.path / "kernels.py").write_text(text.replace("REPS = 4", "REPS = 4  # the work per element"))
    result = committed.run("-v", "--ktune-base", "HEAD")
    result.assert_outcomes(passed=4)
    assert "1 case(s) of targets changed" not in result.stdout.str()
    assert all("A/B" not in " ".join(row) for row in summary_rows(result).values())


def test_ref_s_module_that_cannot_load_fails_under_strict_saying_why(committed: Project) -> None:
    # REF's kernels.py takes REPS from a sibling module, which the change removes: REF's copy imports the
    # current tree's modules, so it cannot load beside this one.
    (committed.path / "helpers.py").write_text("REPS = 4\n")
    _write(committed, "from helpers import REPS")
    committed.run("-k", "add", "--ktune-update-baseline").assert_outcomes(passed=2)  # strict needs the file
    committed.commit_all("REPS from a helper module")
    (committed.path / "helpers.py").unlink()
    _write(committed, "REPS = 64")
    plain = committed.run("-v", "--ktune-base", "HEAD")
    plain.assert_outcomes(passed=4)
    assert summary_rows(plain)["spin", "n16k"][-1] == "unjudged"

    strict = committed.run("-v", "--ktune-base", "HEAD", "--ktune-strict")
    strict.assert_outcomes(passed=3, failed=1)
    message = " ".join(failure_section(strict, "spin::perf[n16k]").split())
    assert "kernels.py does not import (ModuleNotFoundError: No module named 'helpers')" in message
    assert "make HEAD's version of it loadable here, or name another --ktune-base" in message
