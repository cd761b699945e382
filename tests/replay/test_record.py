"""ktune record on the OpenCL backend (PoCL on a CPU): a real sweep through the tuner's worker."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_ktune import cli
from pytest_ktune.lab.landscape import load
from pytest_ktune.lab.replay import check_landscape, replay_tune

from ._data import RMSNORM_ROOT, target


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("record") / "record_project"  # imports as record_project.kernels.*
    # rmsnorm as its committed landscapes were recorded (tests/replay/_data.py): a sweep of 20 points.
    shutil.copytree(RMSNORM_ROOT, dest, ignore=shutil.ignore_patterns(".ktune", "__pycache__", "ktune-params.json"))
    return dest


def test_record_sweeps_every_feasible_point_and_replays(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = project / "land.json.gz"
    rc = cli.main(["record", "rmsnorm", "--key", "T=1", "--key", "dtype=float32", "--backend", "opencl",
                   "--samples", "2", "--root", str(project), "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    land = load(out)
    t = target("rmsnorm")
    assert land.key == {"T": 1, "H": 4096, "dtype": "float32"}
    assert len(land.points) == len(list(t.space.feasible(land.key))) == 20
    assert all(p.state == "ok" and len(p.cases[0].samples_us) == 2 for p in land.points)
    assert land.source_hash == t.source_hash("opencl") and land.samples == 2
    assert "20/20 timed" in capsys.readouterr().out
    check_landscape(t, land)
    r = replay_tune(project, t, land, sampler="tpe", trials=6, seed=0)
    assert len({str(c) for c, _ in r.trace}) == 6


def test_record_names_the_keys_there_are_when_none_matches(project: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["record", "rmsnorm", "--key", "T=3", "--backend", "opencl", "--root", str(project)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "rmsnorm has no case on opencl with key {'T': '3'}" in err and "H=4096,T=1,dtype=float16" in err


def test_record_needs_a_key_or_a_rule(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["record", "rmsnorm", "--backend", "opencl", "--root", str(project)]) == 2
    assert "--extreme-keys" in capsys.readouterr().err


def test_one_file_cannot_hold_two_landscapes(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["record", "rmsnorm", "--extreme-keys", "--backend", "opencl", "--root", str(project),
                   "--out", str(project / "one.json")])
    assert rc == 2
    assert "names one file, but 2 landscapes would be recorded" in capsys.readouterr().err


def test_key_rules_pick_the_smallest_and_largest_case_within_a_size() -> None:
    from pytest_ktune.core.keys import key_label
    from pytest_ktune.lab.record import choose_keys, parse_bytes

    t = target("silu_and_mul")
    assert parse_bytes("64M") == 64 << 20 and parse_bytes("1.5k") == 1536 and parse_bytes("100") == 100

    def labels(mode: str, limit: int | None = None) -> list[str]:
        return [key_label(k) for k, _ in choose_keys(t, "cuda", None, mode=mode, max_bytes=limit)]

    assert labels("extremes") == ["T16-I14336-float16", "T16384-I11008-float16"]
    assert labels("largest", parse_bytes("64M")) == ["T256-I14336-float32"]
    assert labels("smallest") == ["T16-I14336-float16"]
    assert len(labels("all")) == 8
