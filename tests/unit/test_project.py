"""core.project finds the rootdir and the configuration file that pytest itself finds, for the same
folder and paths: checked against pytest's own ``determine_setup`` on the layouts a user meets."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from pytest_ktune.core.discover import candidate_files, project_folders
from pytest_ktune.core.project import locate, own_config, split_args

LAYOUTS: dict[str, dict[str, str]] = {
    # This repository: pytest configured at the top, example_project a project of its own below.
    "clone": {"pyproject.toml": "[tool.pytest.ini_options]\ntestpaths = ['tests']\n",
              "example_project/pytest.ini": "[pytest]\n", "example_project/kernels/rmsnorm.py": "",
              "tests/test_x.py": ""},
    # No configuration anywhere: the folder the command runs in.
    "bare": {"a/b/kernels.py": ""},
    # A setup.py makes its folder the rootdir when no configuration file is found.
    "setup_py": {"setup.py": "", "pkg/sub/kernels.py": ""},
    # A pyproject.toml without pytest settings: pytest's fallback rootdir (pytest 8.1 and later).
    "plain_pyproject": {"pyproject.toml": "[project]\nname = 'x'\n", "src/kernels.py": ""},
    # tox.ini without [pytest] does not count; setup.cfg with [tool:pytest] does.
    "tox_and_cfg": {"tox.ini": "[tox]\n", "setup.cfg": "[tool:pytest]\nktune_trials = 5\n", "k/kernels.py": ""},
    # Two projects side by side under a folder with none.
    "siblings": {"p1/pytest.ini": "[pytest]\n", "p1/k.py": "", "p2/k.py": ""},
}

CASES = [
    ("clone", ".", []), ("clone", ".", ["example_project"]), ("clone", ".", ["example_project/kernels/rmsnorm.py"]),
    ("clone", "example_project/kernels", []), ("clone", "tests", []), ("clone", ".", ["tests", "example_project"]),
    ("bare", "a/b", []), ("bare", "a", ["b/kernels.py"]),
    ("setup_py", "pkg/sub", []), ("setup_py", ".", ["pkg"]),
    ("plain_pyproject", "src", []), ("tox_and_cfg", "k", []),
    ("siblings", ".", ["p1", "p2"]), ("siblings", "p2", []), ("siblings", ".", ["p1/k.py", "nowhere"]),
]


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _pytest_setup(args: list[str], cwd: Path) -> tuple[Path, Path | None]:
    from _pytest.config.findpaths import determine_setup

    params = inspect.signature(determine_setup).parameters
    kwargs: dict[str, object] = {"inifile": None, "args": args, "rootdir_cmd_arg": None, "invocation_dir": cwd}
    if "override_ini" in params:
        kwargs["override_ini"] = None
    if "invocation_dir" not in params:
        pytest.skip("this pytest's determine_setup has another signature")
    rootdir, inipath, *_ = determine_setup(**kwargs)  # type: ignore[arg-type]
    return Path(rootdir), Path(inipath) if inipath else None


@pytest.mark.parametrize(("layout", "cwd", "args"), CASES)
def test_the_rootdir_and_inifile_are_pytests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str, cwd: str,
                                             args: list[str]) -> None:
    root = tmp_path / layout
    _write(root, LAYOUTS[layout])
    here = (root / cwd).resolve()
    monkeypatch.chdir(here)
    expected = _pytest_setup(args, here)
    paths, _ = split_args(args, here)
    found = locate(paths, here)
    assert (found.rootdir, found.inifile) == expected


def test_root_is_the_rootdir_and_the_ini_file_is_found_from_it(tmp_path: Path) -> None:
    _write(tmp_path, LAYOUTS["tox_and_cfg"])
    found = locate([], tmp_path / "elsewhere", rootdir=tmp_path / "k")
    assert (found.rootdir, found.inifile, found.explicit) == ((tmp_path / "k").resolve(), tmp_path / "setup.cfg", True)
    assert dict(found.ini) == {"ktune_trials": "5"}


def test_a_folder_with_its_own_configuration_is_another_project(tmp_path: Path) -> None:
    _write(tmp_path, {**LAYOUTS["clone"], "example_project/kernels/rmsnorm.py": "import ktune\nktune.target(",
                      "bench/k.py": "import ktune\nktune.target(", "docs/pyproject.toml": "[project]\nname='d'\n",
                      "docs/k.py": "import ktune\nktune.target("})
    assert own_config(tmp_path / "example_project") == tmp_path / "example_project" / "pytest.ini"
    assert own_config(tmp_path / "docs") is None  # no pytest settings: part of the project above
    assert project_folders(tmp_path) == [tmp_path / "example_project"]
    assert [p.relative_to(tmp_path).as_posix() for p in candidate_files(tmp_path)] == ["bench/k.py", "docs/k.py"]
    inside = tmp_path / "example_project"
    assert [p.relative_to(inside).as_posix() for p in candidate_files(inside)] == ["kernels/rmsnorm.py"]


def test_arguments_that_name_files_or_folders_are_paths(tmp_path: Path) -> None:
    _write(tmp_path, {"proj/kernels.py": ""})
    paths, names = split_args(["proj", "rmsnorm", "proj/kernels.py::scale", "kernels/none.py::x"], tmp_path)
    assert paths == [tmp_path / "proj", tmp_path / "proj" / "kernels.py"]
    assert names == ["rmsnorm", f"{tmp_path / 'proj' / 'kernels.py'}::scale", "kernels/none.py::x"]
