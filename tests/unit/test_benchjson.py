"""The benchmark JSON: pytest-benchmark's own statistics, field names and loader read ktune's timings."""

from __future__ import annotations

import csv
import importlib
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_ktune.gate.verdict import PerfResult
from pytest_ktune.measure.bench import Measurement
from pytest_ktune.report.benchjson import benchmark, build, commit_info, stats

TARGET = "kernels/rmsnorm.py::rmsnorm"

# pytest-benchmark's own code (untyped; reached through modules, whose attributes are Any)
Stats = importlib.import_module("pytest_benchmark.stats").Stats


def _result(case: str, samples: tuple[float, ...] | None, time_us: float | None = 12.5) -> PerfResult:
    m = Measurement(samples, repeats=16, flushed=True, rotation=3, mode="graph") if samples else None
    return PerfResult(target="rmsnorm", case=case, backend="cuda", device="NVIDIA H200", time_us=time_us,
                      baseline_us=12.0, ratio=1.04, gbps=800.0, copy_fraction=0.2, verdict="ok",
                      target_id=TARGET, params={"BLOCK": 256, "VEC": 4}, measurement=m)


def _document(tmp_path: Path) -> dict[str, Any]:
    rng = random.Random(7)
    results = [
        _result("T64-H4096", tuple(12.5e-6 * (1 + 0.02 * rng.random()) for _ in range(41))),
        _result("T1-H4096", tuple(3e-6 * (1 + 0.05 * rng.random()) for _ in range(12))),
        _result("median-only", None, time_us=7.0),
        _result("untimed", None, time_us=None),
    ]
    return build(results, root=tmp_path, backend="cuda", device="NVIDIA H200")


def test_stats_of_a_known_sample() -> None:
    data = [4e-6, 1e-6, 3e-6, 2e-6, 100e-6]  # seconds; the last an outlier
    ours = stats(data, iterations=8)
    assert ours["data"] == data and ours["iterations"] == 8 and ours["rounds"] == 5
    assert ours["min"] == 1e-6 and ours["max"] == 100e-6 and ours["median"] == 3e-6
    assert ours["mean"] == pytest.approx(22e-6) and ours["total"] == pytest.approx(110e-6)
    assert ours["iqr_outliers"] == 1  # the outlier is beyond 1.5 IQR
    # hd15iqr is pytest-benchmark's own figure (its definition moved between releases: 4 µs before 5.2.3,
    # the largest datum since), so a chart of ours reads as one of its own.
    theirs = Stats()
    for x in data:
        theirs.update(x)
    assert ours["hd15iqr"] == theirs.hd15iqr and ours["hd15iqr"] in data
    assert ours["ops"] == pytest.approx(1 / 22e-6)
    assert set(ours) == {*Stats.fields, "data", "iterations"}
    json.dumps(ours, allow_nan=False)


def test_the_document_has_pytest_benchmarks_fields(tmp_path: Path) -> None:
    doc = _document(tmp_path)
    # pytest-benchmark's pytest_benchmark_generate_json writes exactly these, in this order
    assert list(doc)[:5] == ["machine_info", "commit_info", "benchmarks", "datetime", "version"]
    # the keys of pytest_benchmark_generate_machine_info() and of utils.get_commit_info()
    assert {"node", "processor", "machine", "python_compiler", "python_implementation",
            "python_implementation_version", "python_version", "python_build", "release", "system",
            "cpu"} <= set(doc["machine_info"])
    assert set(doc["commit_info"]) == {"id", "time", "author_time", "dirty", "project", "branch"}
    assert isinstance(doc["datetime"], str) and isinstance(doc["version"], str)

    benches = doc["benchmarks"]
    # The device is in the name, so that two GPU types chart as two series.
    assert [b["name"] for b in benches] == ["perf[T64-H4096] on NVIDIA H200", "perf[T1-H4096] on NVIDIA H200",
                                           "perf[median-only] on NVIDIA H200"]
    for b in benches:
        # Metadata.as_dict's keys, and the stats it nests: Stats.fields, data and iterations
        assert set(b) == {"group", "name", "fullname", "params", "param", "extra_info", "options", "stats"}
        assert set(b["stats"]) == {*Stats.fields, "data", "iterations"}
        assert b["fullname"] == f"{TARGET}::{b['name']}" and b["group"] == TARGET
        assert b["params"] == {"BLOCK": 256, "VEC": 4}
        assert isinstance(b["options"], dict) and isinstance(b["extra_info"], dict)
        s = b["stats"]
        for name in ("min", "max", "mean", "stddev", "median", "iqr", "q1", "q3", "ld15iqr", "hd15iqr", "ops",
                     "total"):
            # pytest-benchmark's Stats gives the int 0 as the deviation of a single sample
            assert isinstance(s[name], float) or (name == "stddev" and s["rounds"] == 1 and s[name] == 0), name
        for name in ("rounds", "iterations", "iqr_outliers", "stddev_outliers"):
            assert isinstance(s[name], int), name
        assert s["min"] <= s["q1"] <= s["median"] <= s["q3"] <= s["max"]
        assert s["ops"] == pytest.approx(1 / s["mean"])
    first = benches[0]
    assert first["stats"]["rounds"] == 41 and first["stats"]["iterations"] == 16
    assert first["stats"]["median"] == pytest.approx(12.6e-6, rel=0.02)  # seconds, not µs
    assert first["extra_info"]["time_us"] == 12.5 and first["extra_info"]["verdict"] == "ok"
    assert first["options"]["timer"] == "cuda:graph"
    only = benches[2]["stats"]
    assert only["rounds"] == 1 and only["min"] == only["max"] == pytest.approx(7e-6) and only["stddev"] == 0
    json.dumps(doc, allow_nan=False)


def test_pytest_benchmarks_compare_command_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "ktune-bench.json"
    path.write_text(json.dumps(_document(tmp_path), indent=4))
    out = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark", "compare", str(path), "--group-by=group", "--name=long",
         "--columns=min,max,mean,stddev,median,iqr,outliers,ops,rounds,iterations", "--csv=table"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert "Failed to load" not in out.stdout + out.stderr
    assert f"{TARGET}::perf[T64-H4096] on NVIDIA H200" in out.stdout
    with (tmp_path / "table.csv").open() as f:
        rows = list(csv.reader(f))
    names = [r[0] for r in rows]
    assert f"{TARGET}::perf[T1-H4096] on NVIDIA H200" in names
    assert f"{TARGET}::perf[median-only] on NVIDIA H200" in names


def test_pytest_benchmarks_loader_and_grouping_read_it(tmp_path: Path) -> None:
    logger = importlib.import_module("pytest_benchmark.logger")
    plugin = importlib.import_module("pytest_benchmark.plugin")
    file_storage = importlib.import_module("pytest_benchmark.storage.file")

    (tmp_path / "store").mkdir()
    path = tmp_path / "store" / "0001_ktune.json"
    path.write_text(json.dumps(_document(tmp_path)))
    storage = file_storage.FileStorage(tmp_path / "store", logger=logger.Logger(logger.Logger.QUIET))
    benches = list(storage.load_benchmarks(str(path)))
    assert len(benches) == 3
    for group_by in ("group", "name", "fullname", "func", "fullfunc", "param", "param:BLOCK"):
        groups = plugin.pytest_benchmark_group_stats(config=None, benchmarks=benches, group_by=group_by)
        assert sum(len(g[1]) for g in groups) == 3, group_by


def test_commit_info_outside_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    info = commit_info(tmp_path)
    assert info["id"] == "unversioned" and info["dirty"] is False and info["project"] == tmp_path.name


def test_commit_info_in_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    (tmp_path / "a").write_text("1")
    git("add", "a")
    git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "a")
    (tmp_path / "a").write_text("2")
    info = commit_info(tmp_path)
    assert len(info["id"]) == 40 and info["branch"] == "main" and info["dirty"] is True
    assert info["time"] and info["author_time"]


def test_a_result_without_a_time_is_left_out() -> None:
    assert benchmark(_result("x", None, time_us=None)) is None
