"""What a new user of bench-search and import-landscape meets: a skip that names what is missing, a
device name that says where it came from, imported times kept whole, and a progress line at once."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.lab.benchsearch import bench, problems_for
from pytest_ktune.lab.ktcache import device_note, import_cache
from pytest_ktune.lab.landscape import load
from pytest_ktune.lab.results import BenchSettings
from pytest_ktune.lab.tables import markdown
from pytest_ktune.tuner.encoding import Encoding
from pytest_ktune.tuner.samplers import make_sampler

from ._data import RMSNORM, RMSNORM_ROOT, target


def _cache(tmp_path: Path, device_name: str) -> Path:
    """A small Kernel Tuner cache whose observations have a slow outlier (the mean above the median),
    with times of many digits, as Kernel Tuner writes them."""
    cache = {}
    for i, (bx, tile) in enumerate([(16, 1), (16, 2), (32, 1), (32, 2)]):
        times = [0.1234567891 + 0.0001 * i, 0.1234587654, 0.1234512345, 0.1234599999, 0.2000012345]
        cache[f"{bx},{tile}"] = {"bx": bx, "tile": tile, "time": sum(times) / len(times), "times": times,
                                 "compile_time": 12.5}
    data = {"device_name": device_name, "kernel_name": "k", "problem_size": [1024], "tune_params_keys": ["bx", "tile"],
            "tune_params": {"bx": [16, 32], "tile": [1, 2]}, "objective": "time", "cache": cache}
    path = tmp_path / "MI250X.json.gz"
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    return path


def test_the_gp_sampler_names_only_the_package_that_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    enc = Encoding(target("rmsnorm"))
    with pytest.raises(KtuneError) as err:
        make_sampler("gp", 0, enc)
    assert err.value.message == "the GP sampler needs torch, which is not installed"
    assert "pip install torch," in (err.value.hint or "") and "scipy" not in (err.value.hint or "")


def test_a_device_the_cache_does_not_name_is_named_after_the_file_and_says_so(tmp_path: Path) -> None:
    land = import_cache(_cache(tmp_path, ""))
    assert land.device["name"] == "MI250X"
    note = device_note(land)
    assert "records no device" in note and "MI250X.json.gz" in note and "--device NAME" in note
    assert device_note(import_cache(_cache(tmp_path, ""), device="AMD Instinct MI250X")) == ""
    assert device_note(import_cache(_cache(tmp_path, "AMD Instinct MI250X"))) == ""
    results = bench(problems_for(tmp_path, [_cache(tmp_path, "")]),
                    BenchSettings(budget=4, seeds=1, strategies=("random",)), progress=False)
    assert "records no device" in markdown(results, BenchSettings(seeds=1))


def test_imported_times_keep_every_digit_and_their_interval_holds_them(tmp_path: Path) -> None:
    path = _cache(tmp_path, "gpu")
    land = import_cache(path)
    raw = json.loads(gzip.decompress(path.read_bytes()))["cache"]
    saved = load(land.save(tmp_path / "out.json.gz"))
    for p in saved.timed:
        (c,) = p.cases
        assert c.median_us == raw[f"{p.params['bx']},{p.params['tile']}"]["time"] * 1000  # not rounded
        assert c.ci_us[0] <= c.median_us <= c.ci_us[1]  # Kernel Tuner's objective is the mean: so is its interval
        assert c.ci_us[0] < c.ci_us[1]


def test_a_progress_line_comes_before_any_replay_has_finished(capsys: pytest.CaptureFixture[str]) -> None:
    bench(problems_for(RMSNORM_ROOT, [RMSNORM]), BenchSettings(budget=3, seeds=1, strategies=("random",)))
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("ktune bench-search: 1 replays (1 landscape(s) x 1 strategies x 1 seeds) and 0 repeated, "
                      "1 at a time")
    assert err[1].startswith("ktune bench-search: 1/1 replays")


def test_the_summary_of_a_json_run_ranks_as_the_run_itself(tmp_path: Path) -> None:
    from pytest_ktune.lab.results import rank, stats_of, stats_of_json
    from pytest_ktune.lab.tables import to_json

    settings = BenchSettings(budget=10, seeds=2, strategies=("ktune", "random"))
    results = bench(problems_for(RMSNORM_ROOT, [RMSNORM]), settings, progress=False)
    data: dict[str, Any] = json.loads(json.dumps(to_json(results, settings)))
    assert rank([stats_of_json(x) for x in data["landscapes"]]) == rank([stats_of(lr) for lr in results])


def _row(strategy: str, trials: list[int | None], **extra: Any) -> dict[str, Any]:
    runs = sorted(99 if n is None else n for n in trials)
    median = runs[len(runs) // 2]
    return {"strategy": strategy, "skipped": None, "trials_to_3pct": trials,
            "median_trials_to_3pct": None if median == 99 else median, **extra}


def _run(path: Path, files: list[str], rows: list[dict[str, Any]], priors: bool | None = None) -> Path:
    data: dict[str, Any] = {"landscapes": [{"file": f, "budget": 10, "configurations": 50, "optimum_us": 1.0,
                                            "strategies": rows} for f in files]}
    if priors is not None:
        data["priors"] = priors
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def test_the_summary_over_runs_names_each_landscape_borrows_rivals_by_file_and_lists_the_misses(
        tmp_path: Path) -> None:
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    mine = [_row("ktune", [2, 3, 4], of_optimum_after_10=0.9)]
    on = _run(tmp_path / "on" / "bench-search.json", ["lands/a.json.gz", "lands/b.json.gz"], mine)
    off = _run(tmp_path / "off" / "bench-search.json", ["lands/a.json.gz"], [_row("ktune", [8, 9, 9])], priors=False)
    # Two earlier runs: the first given wins where both ran a strategy; the second, written before the
    # fractions were kept, gives them from its median curve.
    _run(tmp_path / "old1" / "x" / "bench-search.json", ["lands/a.json.gz", "lands/b.json.gz"],
         [_row("random", [3, 5, 6]), _row("bo", [1, 1, 1])])
    _run(tmp_path / "old2.json", ["lands/a.json.gz", "lands/b.json.gz"],
         [_row("random", [1, 1, 1]), _row("kt:pso", [4, 5, None], median_best_so_far_us=[2.0] * 9 + [1.25])])
    out = subprocess.run([sys.executable, str(repo / "benchmarks" / "search_overall.py"), str(on), str(off),
                          "--rivals", str(tmp_path / "old1"), "--rivals", str(tmp_path / "old2.json")],
                         capture_output=True, text=True, check=True, cwd=repo,
                         env={**__import__("os").environ, "PYTHONPATH": str(repo)}).stdout
    # a run of many files names each after its file; a run of one, after its folder (as the hub's are)
    assert "Landscapes (3): a, b, off (no priors)." in out
    assert "not run again): kt:pso, random." in out  # never bo: one of the default's own parts
    # its upper quartile a miss, counted as the budget + 1; its fraction after 10 read from its curve
    assert "| 2 | kt:pso | 5.00 | 4.0–11.0 | 3/3 | 15 | 0.800 | – | 3 |" in out
    assert "| off (no priors) | 50 | 9 | random (5) | 1.80 |" in out  # random from old1, not old2's 1
    assert "more than 1.5x the best other strategy's trials (1 of 3): off (no priors) (9 against random's 5)" in out
    assert "repeat themselves only: 1 of 3." in out
