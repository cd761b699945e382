"""Kernel Tuner's cache files in and out: files Kernel Tuner wrote itself, our landscapes exported,
a round trip through its simulation mode, and the bad input a user can meet."""

from __future__ import annotations

import gzip
import json
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_ktune.cli import main
from pytest_ktune.core.space import config_key
from pytest_ktune.lab.benchsearch import bench, problems_for
from pytest_ktune.lab.ktcache import export_cache, import_cache, load_any, write_cache
from pytest_ktune.lab.landscape import LandscapeError, Point
from pytest_ktune.lab.results import BenchSettings
from pytest_ktune.lab.tables import markdown

from ._data import RMSNORM, SILU, landscape

kernel_tuner = pytest.importorskip("kernel_tuner", reason="Kernel Tuner is a dev dependency (pip install -e '.[dev]')")

# A C function Kernel Tuner compiles with g++ and runs on the CPU; what it returns is the time Kernel
# Tuner records (in ms), so the file it writes is the same on every machine.
C_SOURCE = """
extern "C" float scale(float *out, float *x, int n) {
    for (int i = 0; i < n; i += STEP) out[i] = x[i] * 2.0f;
    return 0.25f * REPEAT + 0.125f * STEP;
}
"""


@pytest.fixture(scope="module")
def kt_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kt") / "scale.json"
    x = np.ones(1024, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kernel_tuner.tune_kernel("scale", C_SOURCE, 1024, [np.zeros_like(x), x, np.int32(1024)],
                                 {"REPEAT": [1, 8], "STEP": [1, 2]}, lang="C", cache=str(path),
                                 restrictions=["REPEAT * STEP < 16"], quiet=True, verbose=False)
    return path


def test_a_cache_file_kernel_tuner_wrote_reads_as_a_landscape(kt_file: Path) -> None:
    land = import_cache(kt_file)
    assert land.imported and land.name == "scale" and land.key == {"x": 1024}
    assert land.target == "kernel_tuner::scale"
    # The restriction ruled out REPEAT=8, STEP=2: Kernel Tuner wrote no entry for it, so it is no point.
    got = {(p.params["REPEAT"], p.params["STEP"]): p.value_us for p in land.points}
    assert got == pytest.approx({(1, 1): 375.0, (1, 2): 500.0, (8, 1): 2125.0})
    assert land.optimum.params == {"REPEAT": 1, "STEP": 1}
    assert land.origin is not None and land.origin["file"] == "scale.json"


def test_an_unclosed_cache_reads_as_kernel_tuner_reads_it_and_one_cut_inside_an_entry_is_refused(
        kt_file: Path, tmp_path: Path) -> None:
    text = kt_file.read_text().rstrip()
    assert text.endswith("}\n}")
    open_file = tmp_path / "open.json"
    open_file.write_text(text[:-3] + ",")  # as Kernel Tuner leaves it while it still tunes
    assert [p.params for p in import_cache(open_file).points] == [p.params for p in import_cache(kt_file).points]
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(text[: text.rindex('"times"')].encode()))
    with pytest.raises(LandscapeError, match="truncated or damaged") as err:
        import_cache(cut)
    assert err.value.where == str(cut)
    gz = tmp_path / "short.json.gz"
    gz.write_bytes(gzip.compress(text.encode())[:-20])
    with pytest.raises(LandscapeError, match="gzip file is truncated"):
        import_cache(gz)


@pytest.mark.parametrize(("content", "message"), [
    ('{"a": 1}', "not a Kernel Tuner cache file: it has no tune_params and no cache"),
    ('{"metadata": {}, "results": []}', "T4 results file"),
    ("block_size_x,time\n32,1.0\n", "it is not JSON"),
    ('[1, 2]', "not an object"),
])
def test_a_file_that_is_not_kernel_tuners_is_refused_saying_what_it_is(tmp_path: Path, content: str,
                                                                       message: str) -> None:
    path = tmp_path / "x.json"
    path.write_text(content)
    with pytest.raises(LandscapeError, match=message):
        import_cache(path)


def test_a_ktune_landscape_is_not_taken_for_a_cache_file() -> None:
    with pytest.raises(LandscapeError, match="this is a ktune landscape") as err:
        import_cache(SILU)
    assert "bench-search" in (err.value.hint or "")
    assert not load_any(SILU).imported


def test_tune_params_that_disagree_with_the_entries_are_refused(kt_file: Path, tmp_path: Path) -> None:
    data = json.loads(kt_file.read_text())
    data["tune_params"]["STEP"] = [1]  # the entries still hold STEP=2
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(LandscapeError, match=r"tune_params disagree with its entries: the entry '1,2' has STEP=2"):
        import_cache(bad)
    data = json.loads(kt_file.read_text())
    del data["cache"]["8,1"]["STEP"]
    bad.write_text(json.dumps(data))
    with pytest.raises(LandscapeError, match="the entry '8,1' has no value for STEP"):
        import_cache(bad)
    data = json.loads(kt_file.read_text())
    data["tune_params_keys"] = ["REPEAT"]
    bad.write_text(json.dumps(data))
    with pytest.raises(LandscapeError, match="tune_params_keys"):
        import_cache(bad)


def _with_failures() -> Any:
    land = landscape(SILU)
    points = list(land.points)
    points[0] = Point(points[0].params, "failed", "compile error: 'VEC' redefined", compile_s=0.2)
    points[1] = Point(points[1].params, "infeasible", "2048 threads per block; scale allows 1024")
    points[2] = Point(points[2].params, "failed", "outputs differ from the reference at 3 of 4096 elements")
    return replace(land, points=tuple(points))


def test_an_export_keeps_every_point_failures_in_kernel_tuners_markers_with_their_reasons(tmp_path: Path) -> None:
    land = _with_failures()
    doc = export_cache(land)
    assert doc["tune_params_keys"] == ["BLOCK", "VEC", "ITEMS"] and len(doc["cache"]) == 60
    assert list(doc)[-1] == "cache"  # Kernel Tuner reads a file that does not end with it as an open one
    assert doc["cache"]["128,8,1"]["time"] == pytest.approx(land.optimum.value_us / 1000)
    entries = [doc["cache"][",".join(str(p.params[n]) for n in doc["tune_params_keys"])] for p in land.points[:3]]
    assert [e["time"] for e in entries] == ["CompilationFailedConfig", "InvalidConfig", "RuntimeFailedConfig"]
    assert [e["reason"] for e in entries] == [p.reason for p in land.points[:3]]
    back = import_cache(write_cache(land, tmp_path / "silu.json.gz"))
    assert (back.target, back.name, dict(back.key), back.device_id) == (land.target, land.name, dict(land.key),
                                                                        land.device_id)
    assert back.space_params() == land.space_params()
    assert [(p.params, p.state, p.reason) for p in back.points] == [(p.params, p.state, p.reason) for p in land.points]
    assert [c.median_us for p in back.timed for c in p.cases] == [c.median_us for p in land.timed for c in p.cases]


def test_a_round_trip_through_kernel_tuners_simulation_mode_times_what_the_landscape_holds(tmp_path: Path) -> None:
    land = landscape(RMSNORM)
    points = list(land.points)
    points[3] = Point(points[3].params, "failed", "compile error: out of registers")
    land = replace(land, points=tuple(points))
    path = write_cache(land, tmp_path / "rmsnorm.json")
    doc = export_cache(land)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results, _ = kernel_tuner.tune_kernel(land.name, "__global__ void replayed() {}", doc["problem_size"], [],
                                              land.space_params(), lang="CUDA", cache=str(path),
                                              simulation_mode=True, strategy="brute_force", quiet=True,
                                              verbose=False)
    by = {config_key({n: r[n] for n in land.space["params"]}): r for r in results}
    assert len(by) == len(land.points)
    for p in land.points:
        r = by[config_key(p.params)]
        if p.state == "ok":
            assert r["time"] == pytest.approx(p.value_us / 1000)
        else:
            assert "CompilationFailedConfig" in str(r.get("__error__", r["time"]))
    best = min((r for r in results if isinstance(r["time"], float)), key=lambda r: r["time"])
    assert {n: best[n] for n in land.space["params"]} == dict(land.optimum.params)
    again = import_cache(path)  # Kernel Tuner left the file as it was: it still imports
    assert again.optimum.params == land.optimum.params


def test_bench_search_runs_on_cache_files_without_a_project_and_says_the_priors_are_off(
        kt_file: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    data = json.loads(kt_file.read_text())
    data["device_name"] = "Another CPU"
    other.write_text(json.dumps(data))
    problems = problems_for(tmp_path, [kt_file, other])  # tmp_path holds no target
    assert [len(p.others) for p in problems] == [1, 1]  # the same kernel on the other device warms each
    settings = BenchSettings(budget=3, seeds=2, strategies=("ktune", "random", "kt:random_sample"))
    results = bench(problems, settings, progress=False)
    for lr in results:
        by = {r.strategy: r for r in lr.results}
        assert not any(r.skipped for r in lr.results), [r.skipped for r in lr.results]
        assert all(len(t) == 3 for t in by["ktune"].traces)
        # Both devices are the same here: the other's best is the optimum, and it is timed first.
        assert by["ktune"].median_trials(lr.optimum_us, 0.03) == 1
    assert "the device priors, which need the target's launch, are off" in markdown(results, settings)


def test_kernel_tuners_strategies_search_a_space_of_one_parameter(tmp_path: Path) -> None:
    path = tmp_path / "step.json"
    x = np.ones(1024, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kernel_tuner.tune_kernel("scale", C_SOURCE.replace("REPEAT", "1"), 1024, [np.zeros_like(x), x, np.int32(1024)],
                                 {"STEP": [1, 2, 4, 8]}, lang="C", cache=str(path), quiet=True, verbose=False)
    settings = BenchSettings(budget=4, seeds=1, strategies=("kt:random_sample", "kt:simulated_annealing"))
    (lr,) = bench(problems_for(tmp_path, [path]), settings, progress=False)
    assert not any(r.skipped for r in lr.results), [r.skipped for r in lr.results]
    # four configurations, four trials: each strategy times all of them, the optimum among them
    assert all(min(t) == lr.optimum_us for r in lr.results for t in r.traces)


def test_import_and_export_on_the_command_line(kt_file: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import-landscape", str(kt_file), "--out", str(tmp_path / "lands")]) == 0
    out = capsys.readouterr().out
    assert "scale x1024 on" in out and "3 configurations, 3 timed" in out
    written = tmp_path / "lands" / "scale.json.gz"
    assert load_any(written).optimum.params == {"REPEAT": 1, "STEP": 1}
    assert main(["export-landscape", str(SILU), "--out", str(tmp_path / "silu.json")]) == 0
    assert "60 configurations" in capsys.readouterr().out
    assert len(json.loads((tmp_path / "silu.json").read_text())["cache"]) == 60
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": 1}')
    assert main(["import-landscape", str(bad)]) == 2
    assert f"error: {bad}" in capsys.readouterr().err
