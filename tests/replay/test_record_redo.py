"""``ktune record --redo``: a landscape recorded again for its own target and key, after the kernel changed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_ktune import cli
from pytest_ktune.lab.landscape import load

from ._data import RMSNORM_ROOT, ROOT


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    # A folder name of its own: its kernels import as redo_project.kernels.*, not as the example_project
    # modules another test may have imported from elsewhere in this process.
    dest = tmp_path / "redo_project"
    # rmsnorm as its committed landscapes were recorded (tests/replay/_data.py): a sweep of 20 points.
    shutil.copytree(RMSNORM_ROOT, dest, ignore=shutil.ignore_patterns(".ktune", "__pycache__", "ktune-params.json"))
    return dest


def _record(project: Path, out: Path) -> None:
    assert cli.main(["record", "rmsnorm", "--key", "T=1", "--key", "dtype=float32", "--backend", "opencl",
                     "--samples", "1", "--root", str(project), "--out", str(out)]) == 0


def test_redo_records_a_stale_landscape_again_and_keeps_a_fresh_one(project: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = project / "rms.json.gz"
    _record(project, path)
    first = load(path)
    capsys.readouterr()

    # Unchanged: --stale-only keeps the file as it is.
    assert cli.main(["record", "--redo", str(path), "--stale-only", "--backend", "opencl", "--samples", "1",
                     "--root", str(project)]) == 0
    assert "source and space unchanged, kept" in capsys.readouterr().err
    assert load(path).recorded == first.recorded

    # The kernel changes: replaying the old landscape is refused, and the hint is the command that fixes it.
    cl = project / "kernels" / "rmsnorm.cl"
    cl.write_text(cl.read_text() + "\n// changed\n")
    assert cli.main(["bench-search", str(path), "--root", str(project), "--strategies", "random",
                     "--seeds", "1", "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert "was recorded for rmsnorm with source hash" in err and f"ktune record --redo {path}" in err

    assert cli.main(["record", "--redo", str(path), "--stale-only", "--backend", "opencl", "--samples", "1",
                     "--root", str(project)]) == 0
    again = load(path)
    assert again.key == first.key and again.source_hash != first.source_hash
    assert len(again.points) == len(first.points) == 20
    assert "20/20 timed; wrote" in capsys.readouterr().out


def test_redo_refuses_targets_or_keys_beside_the_files(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = project / "rms.json.gz"
    path.write_bytes(b"")
    assert cli.main(["record", "rmsnorm", "--redo", str(path), "--backend", "opencl", "--root", str(project)]) == 2
    assert "--redo takes its targets and keys from the landscape files" in capsys.readouterr().err
    assert cli.main(["record", "--stale-only", "--smallest-key", "--backend", "opencl", "--root", str(project)]) == 2
    assert "--stale-only goes with --redo" in capsys.readouterr().err


def test_redo_stops_on_a_truncated_file_before_recording(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    committed = ROOT.parent / "benchmarks" / "results" / "landscapes" / "rmsnorm-T1-H4096-float16-NVIDIA_H200.json.gz"
    path = project / "rms.json.gz"
    path.write_bytes(committed.read_bytes()[:200])
    assert cli.main(["record", "--redo", str(path), "--backend", "opencl", "--root", str(project)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "points" not in err  # no sweep was started
