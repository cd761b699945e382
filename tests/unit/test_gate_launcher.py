"""A change to the launcher alone (the Python module that declares a target: its grid, its arguments,
its ``key`` and ``defines``, the declaration) is a changed program: the gate A/Bs it against the
reference commit's whole target, loaded from a copy of that commit's files under an alias module name.
Run against a fake measurement process; the plugin tests run the same on PoCL."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from pytest_ktune.core.store import new_baseline
from pytest_ktune.core.target import Target
from pytest_ktune.gate.reference import BaseRef
from pytest_ktune.gate.snapshot import ALIAS, same_python
from pytest_ktune.gate.verdict import NO_BASELINE, REGRESSION, UNJUDGED, Item

from .test_gate_reference import SOURCE, FakeMeasurer, _baseline, _gate, _git, _record

MODULE = '''\
"""A launcher."""

import ktune

REPS = 1


@ktune.target(name="k", sources={"opencl": "k.cl"}, space=ktune.Space(SCALE=[1, 2, 3]), default={"SCALE": 1},
              key=lambda x: {"N": x.shape[0]}, cases=[ktune.Case(x=ktune.Tensor((100,), "float32"))],
              reference=lambda x: x)
def k(kernel, x):
    for _ in range(REPS):
        kernel.launch(grid=1, block=1, args=[x])
    return x
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git repository with a committed kernel ``k.cl`` and the launcher module ``k.py`` beside it."""
    repo = tmp_path
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    (repo / "k.cl").write_text(SOURCE)
    (repo / ".gitignore").write_text(".ktune/\n__pycache__/\n")
    (repo / "k.py").write_text(MODULE)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "launcher")
    return repo


def _load(project: Path) -> Target:
    """The work tree's k.py, imported afresh (under a name of this test's own)."""
    name = f"k_{abs(hash(project))}_{len(sys.modules)}"
    spec = importlib.util.spec_from_file_location(name, project / "k.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    target: Target = module.k
    return target


def _item(target: Target) -> Item:
    return Item(target=target.for_backend("opencl"), case_index=0, case_id="n100", key={"N": 100}, target_id="k.py::k")


def _git_state(repo: Path) -> tuple[str, str, str]:
    return _git(repo, "status", "--porcelain"), _git(repo, "rev-parse", "HEAD"), _git(repo, "ls-files", "--stage")


def test_a_changed_launcher_is_ab_d_against_ref_s_whole_target(project: Path) -> None:
    ref = BaseRef.load(project, "HEAD", project / "ktune-params.json")
    (project / "k.py").write_text(MODULE.replace("REPS = 1", "REPS = 4").replace('default={"SCALE": 1}',
                                                                                  'default={"SCALE": 2}'))
    before = _git_state(project)
    measurer = FakeMeasurer(times={"1": 1.0e-6, "2": 1.0e-6})
    copy = project / ".ktune" / "ref" / ref.commit / "k.py"
    # The current launcher launches 4 times what REF's does: A costs 4x B.
    measurer.slower_launchers = {str(copy): 0.25}
    result = _gate(project, measurer, ref).judge(_item(_load(project)), {"SCALE": 2}, None)

    (b_ref,) = measurer.targets_b
    assert b_ref is not None and b_ref.copy and b_ref.file == str(copy) and b_ref.name == "k"
    assert b_ref.module.startswith(ALIAS) and copy.read_text() == MODULE  # REF's module, from REF's files
    (_, b_params, b_source), = measurer.abs_run
    assert b_params == {"SCALE": 1} and b_source is None  # REF's default; REF's target compiles its own source
    assert result.verdict == REGRESSION and "launcher module k.py changed" in result.failure
    assert "parameters {'SCALE': 1} -> {'SCALE': 2}" in result.failure
    assert _git_state(project) == before  # the status, HEAD and the index as they were


def test_ref_s_copy_is_loaded_beside_the_current_module_under_its_own_name(project: Path) -> None:
    ref = BaseRef.load(project, "HEAD", project / "ktune-params.json")
    (project / "k.py").write_text(MODULE.replace("REPS = 1", "REPS = 2"))
    current = _load(project)
    whole = ref.snapshot.whole_target(current, "opencl", current.cases[0])
    assert whole is not None and whole.changed and whole.module == "k.py"
    assert whole.target is not current and whole.target.module == whole.ref.module != current.module
    assert sys.modules[whole.ref.module].REPS == 1 and sys.modules[current.module].REPS == 2
    assert whole.target.source_path("opencl") == project / ".ktune" / "ref" / ref.commit / "k.cl"
    assert whole.target.source_text("opencl") == SOURCE  # REF's kernel source, from REF's copy


def test_an_unchanged_or_only_reformatted_launcher_is_not_ab_d(project: Path) -> None:
    ref = BaseRef.load(project, "HEAD", project / "ktune-params.json")
    (project / "k.py").write_text(MODULE.replace("REPS = 1\n", "REPS = 1  # a comment\n\n"))
    measurer = FakeMeasurer(times={"1": 1.0e-6})
    result = _gate(project, measurer, ref).judge(_item(_load(project)), {"SCALE": 1}, None)
    assert measurer.abs_run == [] and result.verdict == NO_BASELINE
    assert not (project / ".ktune" / "ref").exists()  # nothing changed: REF's tree is never unpacked
    assert same_python("x = 1\n", "x = (1)  # same\n") and not same_python("x = 1\n", "x = 2\n")


def test_a_ref_module_that_does_not_import_is_unjudged_with_what_to_do(project: Path) -> None:
    (project / "k.py").write_text(MODULE.replace('"""A launcher."""\n', '"""A launcher."""\n\nimport gone_since\n'))
    _git(project, "commit", "-qam", "a module that no longer imports")
    ref = BaseRef.load(project, "HEAD", project / "ktune-params.json")
    (project / "k.py").write_text(MODULE)
    measurer = FakeMeasurer(times={"1": 1.0e-6})
    result = _gate(project, measurer, ref).judge(_item(_load(project)), {"SCALE": 1}, None)
    assert measurer.abs_run == [] and result.verdict == UNJUDGED
    assert f"HEAD ({ref.commit[:12]})'s k.py does not import" in result.note


def test_a_target_ref_s_module_lacks_is_new_or_unavailable(project: Path) -> None:
    ref = BaseRef.load(project, "HEAD", project / "ktune-params.json")
    renamed = MODULE.replace('name="k"', 'name="k2"')
    (project / "k.py").write_text(renamed)
    measurer = FakeMeasurer(times={"1": 1.0e-6})
    # REF has k.cl, but no target k2: renamed, not new; nothing to A/B it with.
    result = _gate(project, measurer, ref).judge(_item(_load(project)), {"SCALE": 1}, None)
    assert result.verdict == UNJUDGED and "has no target k2" in result.note
    # A target whose source is new since REF too has no reference at all, as before.
    (project / "k2.cl").write_text(SOURCE)
    (project / "k.py").write_text(renamed.replace('"k.cl"', '"k2.cl"'))
    ref = BaseRef.load(project, "HEAD", project / "ktune-params.json")  # a new run
    result = _gate(project, FakeMeasurer(times={"1": 1.0e-6}), ref).judge(_item(_load(project)), {"SCALE": 1}, None)
    assert result.verdict == NO_BASELINE and "new since HEAD" in result.note


def test_a_launcher_changed_since_the_baseline_s_commit_is_ab_d_against_that_commit(project: Path) -> None:
    target = _load(project)
    baseline = _baseline(project, target, {"SCALE": 1}, {"unused": 1.0})
    (project / "k.py").write_text(MODULE.replace("REPS = 1", "REPS = 8"))
    measurer = FakeMeasurer(times={"1": 1.0e-6})
    result = _gate(project, measurer).judge(_item(_load(project)), {"SCALE": 1}, _record({"SCALE": 1}, baseline))
    (b_ref,) = measurer.targets_b
    assert b_ref is not None and f"/ref/{baseline.commit}/k.py" in b_ref.file
    assert result.compared == "ab" and "launcher module k.py changed" in result.note
    assert "the baseline (commit" in result.note


def test_ref_s_own_header_is_pinned_where_it_differs_from_the_current_one(project: Path) -> None:
    # The same kernel text at REF and here: only the header it includes and the launcher differ. B's source
    # comes pinned to REF's header, so that a program compiled from the current text never stands in for it.
    (project / "k.cl").write_text('#include "work.h"\n' + SOURCE)
    (project / "work.h").write_text("#define WORK 1\n")
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "header")
    ref = BaseRef.load(project, "HEAD", project / "ktune-params.json")
    (project / "work.h").write_text("#define WORK 16\n")
    (project / "k.py").write_text(MODULE.replace("REPS = 1", "REPS = 2"))
    measurer = FakeMeasurer(times={"1": 1.0e-6})
    result = _gate(project, measurer, ref).judge(_item(_load(project)), {"SCALE": 1}, None)
    (_, _, b_source), = measurer.abs_run
    assert b_source is not None and b_source != (project / "k.cl").read_text() and "work.h" in b_source
    assert measurer.targets_b[0] is not None
    assert "launcher module k.py changed" in result.note and "included files (work.h)" in result.note


def test_a_project_below_the_repository_s_top_finds_its_module_in_the_copy(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.com")
    _git(tmp_path, "config", "user.name", "t")
    project = tmp_path / "sub"
    project.mkdir()
    (project / "k.cl").write_text(SOURCE)
    (project / "k.py").write_text(MODULE)
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "a project in a folder of the repository")
    ref = BaseRef.load(project, "HEAD", project / "ktune-params.json")
    (project / "k.py").write_text(MODULE.replace("REPS = 1", "REPS = 3"))
    current = _load(project)
    whole = ref.snapshot.whole_target(current, "opencl", current.cases[0])
    assert whole is not None and whole.module == "k.py"
    assert Path(whole.ref.file) == project / ".ktune" / "ref" / ref.commit / "sub" / "k.py"  # the whole commit
    assert whole.target.source_text("opencl") == SOURCE


def test_a_baseline_recorded_from_an_edited_module_names_no_commit(project: Path) -> None:
    target = _load(project)
    clean = new_baseline(project, target, "opencl", {"SCALE": 1}, {}, machine="m")
    assert clean.commit == _git(project, "rev-parse", "HEAD").strip()
    (project / "k.py").write_text(MODULE.replace("REPS = 1", "REPS = 2"))
    edited = new_baseline(project, _load(project), "opencl", {"SCALE": 1}, {}, machine="m")
    assert edited.commit is None  # HEAD's module is not the one it was measured with
