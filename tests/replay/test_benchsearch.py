"""ktune bench-search: the metrics, Kernel Tuner's cache, bad input, and the default strategy's claim."""

from __future__ import annotations

import importlib.util
import json
import math
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_ktune import cli
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.lab.benchsearch import bench, problems_for
from pytest_ktune.lab.landscape import LandscapeError
from pytest_ktune.lab.results import BenchSettings, StrategyResult, budget_for, summary_lines
from pytest_ktune.lab.strategies import best_so_far, trials_to

from ._data import LANDSCAPES as LANDSCAPES_DIR
from ._data import RMSNORM, RMSNORM_ROOT, ROOT, SILU, landscape, root_of

HAS_KT = importlib.util.find_spec("kernel_tuner") is not None


def test_trials_count_from_one_and_failures_never_lower_the_best() -> None:
    trace = [9.0, math.inf, 5.0, 4.0]
    assert best_so_far(trace, 6) == [9.0, 9.0, 5.0, 4.0, 4.0, 4.0]
    assert trials_to(trace, 5.0) == 3
    assert trials_to(trace, 3.0) is None
    r = StrategyResult("x", traces=[trace, [4.0], [math.inf, math.inf]])
    assert r.median_trials(4.0, 0.03) == 4  # 4, 1 and never: the median is 4
    assert r.hit_rate(4.0, 0.03) == pytest.approx(2 / 3)


def test_the_fraction_of_the_optimum_after_a_few_trials_is_the_median_over_seeds() -> None:
    # Seeds at 2x, 1.25x and 1x of the optimum after two trials: the median reaches 0.8 of it.
    r = StrategyResult("x", traces=[[8.0, 8.0, 4.0], [8.0, 5.0], [4.0], [math.inf, math.inf]])
    assert r.reached_after(4.0, 1) == pytest.approx(0.5)  # 0.5, 0.5, 1 and nothing timed (0)
    assert r.reached_after(4.0, 2) == pytest.approx((0.5 + 0.8) / 2)
    assert r.reached_after(4.0, 3) == pytest.approx(0.9)


def test_a_budget_larger_than_the_space_is_an_error_naming_the_landscape() -> None:
    land = landscape(RMSNORM)
    assert budget_for(land, None) == 20
    with pytest.raises(LandscapeError, match="larger than the space of rmsnorm T64-H4096-float16") as err:
        budget_for(land, 21)
    assert "--budget 20" in (err.value.hint or "")


def test_an_unknown_strategy_lists_the_known_ones() -> None:
    with pytest.raises(KtuneError, match="unknown strategy 'hyperband'") as err:
        bench(problems_for(RMSNORM_ROOT, [RMSNORM]), BenchSettings(strategies=("hyperband",)), progress=False)
    assert "kt:simulated_annealing" in (err.value.hint or "")


def test_a_landscape_of_a_changed_kernel_is_refused(tmp_path: Path) -> None:
    stale = replace(landscape(SILU), source_hash="0123456789abcdef").save(tmp_path / "stale.json")
    with pytest.raises(LandscapeError, match="source hash 0123456789abcdef"):
        problems_for(root_of("silu_and_mul"), [stale])


def test_the_default_strategy_needs_fewer_trials_than_every_other() -> None:
    """The claim of the benchmark figure, at 5 seeds and a budget of 20, on the committed landscapes."""
    rivals = ("random", "tpe", "cmaes") + (("kt:pso", "kt:firefly_algorithm", "kt:simulated_annealing",
                                           "kt:genetic_algorithm") if HAS_KT else ())
    results = bench(problems_for(RMSNORM_ROOT, [RMSNORM]) + problems_for(root_of("silu_and_mul"), [SILU]),
                    BenchSettings(budget=20, seeds=5, strategies=("ktune", *rivals), jobs=2), progress=False)
    for lr in results:
        by = {r.strategy: r for r in lr.results if not r.skipped}
        assert set(by) == {"ktune", *rivals}
        mine = by["ktune"].median_trials(lr.optimum_us, 0.03)
        others = {n: r.median_trials(lr.optimum_us, 0.03) for n, r in by.items() if n != "ktune"}
        assert mine < min(others.values()), (lr.land.label, mine, others)
        assert by["ktune"].hit_rate(lr.optimum_us, 0.03) == 1.0


def test_the_command_writes_a_table_json_and_svg(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    rc = cli.main(["bench-search", str(RMSNORM), "--root", str(RMSNORM_ROOT), "--seeds", "2", "--budget", "10",
                   "--strategies", "ktune,random", "--out", str(out), "--jobs", "2"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "| ktune | 1 | 1–1 | 1 | 100% | 100% |" in text
    # Under a budget of 10 there is no "after 20" column: it would repeat "after 10" under another name.
    assert "of the optimum after 10 trials | final" in text and "after 20" not in text.split("## Over all")[0]
    data = json.loads((out / "bench-search.json").read_text())
    rows = {s["strategy"]: s for s in data["landscapes"][0]["strategies"]}
    assert rows["ktune"]["median_trials_to_3pct"] == 1 and len(rows["random"]["median_best_so_far_us"]) == 10
    assert "of_optimum_after_10" in rows["ktune"] and "of_optimum_after_20" not in rows["ktune"]
    svg = ET.parse(out / "bench-search.svg").getroot()
    assert len(svg.findall("{http://www.w3.org/2000/svg}polyline")) == 2


def test_without_priors_the_default_is_its_sampler_alone_from_the_default(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """--no-priors: ktune runs as on a target's first key on a new device (no device priors, no records
    of the target's other keys), which is the bo row; with priors it is not."""
    others = [LANDSCAPES_DIR / "silu_and_mul-T16-I14336-float16-NVIDIA_H200.json.gz", SILU]
    problems = problems_for(root_of("silu_and_mul"), others)
    strategies = ("ktune", "bo")
    off = bench(problems, BenchSettings(budget=10, seeds=2, strategies=strategies, priors=False), progress=False)
    on = bench(problems, BenchSettings(budget=10, seeds=2, strategies=strategies), progress=False)
    for lr in off:
        ktune, bo = lr.results
        assert ktune.traces == bo.traces
    assert any(lr.results[0].traces != lr.results[1].traces for lr in on)
    out = tmp_path / "out"
    assert cli.main(["bench-search", str(SILU), "--root", str(root_of("silu_and_mul")), "--seeds", "1", "--budget", "4",
                     "--strategies", "ktune", "--no-priors", "--out", str(out), "--jobs", "1"]) == 0
    assert "Priors: off (--no-priors)" in capsys.readouterr().out
    assert json.loads((out / "bench-search.json").read_text())["priors"] is False


def test_the_command_refuses_a_budget_larger_than_the_space(capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["bench-search", str(RMSNORM), "--root", str(RMSNORM_ROOT), "--budget", "500"])
    assert rc == 2
    assert "larger than the space" in capsys.readouterr().err


def test_the_command_refuses_a_truncated_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "cut.json"
    bad.write_text(SILU.read_text()[:2000])
    assert cli.main(["bench-search", str(bad), "--root", str(ROOT)]) == 2
    err = capsys.readouterr().err
    assert "truncated" in err and str(bad) in err


def test_seeds_run_side_by_side_give_the_same_traces() -> None:
    strategies = ("ktune", "random") + (("kt:random_sample",) if HAS_KT else ())
    problems = problems_for(RMSNORM_ROOT, [RMSNORM])
    one, two = (bench(problems, BenchSettings(budget=8, seeds=3, strategies=strategies, jobs=j), progress=False)
                for j in (1, 2))
    assert [r.traces for r in one[0].results] == [r.traces for r in two[0].results]
    assert all(len(t) == 8 for r in one[0].results for t in r.traces)


# Landscapes where the priors hold a point within 3 % of the optimum, and the trial by which the
# default strategy (run_ktune: the other keys' replayed bests as records, then tune_key) has timed it.
WITHIN = {
    "fused_add_rmsnorm-T64-H2048-float32-NVIDIA_H200.json.gz": 3,  # 32-byte vectors, one per thread
    "fused_add_rmsnorm-T1-H4096-float16-NVIDIA_H200.json.gz": 2,  # 16-byte vectors, one per thread
    "merge_attn_states-T256-NH32-D128-float16-NVIDIA_H200.json.gz": 2,  # 16-byte vectors, one per thread
    "silu_and_mul-T16-I14336-float16-NVIDIA_H200.json.gz": 4,  # 8-byte vectors, one per thread
    "rotary_neox-T8-Hq32-Hk8-D128-float32-int32-NVIDIA_H200.json.gz": 2,  # before the float16 key's best
    "gelu_tanh_and_mul-T16384-I8192-float16-NVIDIA_H200.json.gz": 2,  # 16-byte vectors, two per thread
    "rotary_neox-T16384-Hq64-Hk8-D128-float16-int32-NVIDIA_H200.json.gz": 2,  # the same
    # Its 8-byte twin (the same launch, four 8-byte loads a thread), timed before the default.
    "rmsnorm-T16384-H4096-float32-NVIDIA_H200.json.gz": 2,
}


@pytest.mark.parametrize("name", sorted(WITHIN))
def test_the_default_strategy_reaches_3_percent_within_its_priors(name: str) -> None:
    from pytest_ktune.lab.strategies import Problem, run_ktune

    from ._data import LANDSCAPES, target

    # Built by hand rather than by problems_for: this is about the search, not about whether the
    # kernel's source changed since the landscape was recorded.
    lands = [landscape(p) for p in sorted(LANDSCAPES.glob(name.split("-", maxsplit=1)[0] + "-*"))]
    land = next(x for x in lands if x.path is not None and x.path.name == name)
    others = tuple(x for x in lands if x is not land and dict(x.key) != dict(land.key))
    problem = Problem(land, target(land.name), root_of(land.name), others)
    for seed in (0, 1):
        trace = run_ktune(problem, 8, seed, False)
        reached = trials_to(trace, land.optimum.value_us * 1.03)
        assert reached is not None and reached <= WITHIN[name], (name, seed, reached)


# Landscapes where no prior is within 3 %, so the bo sampler finds it: the default strategy must
# need no more trials than any rival in the committed bench-search run, and fewer than every rival
# that repeats with the same seeds (Kernel Tuner's bayes_opt draws an unseeded Latin hypercube and
# switches on measured run time, diff_evo also varies: their medians move between runs).
UNREPEATABLE = ("kt:bayes_opt", "kt:diff_evo")
SEARCHED = ("moe_topk_softmax-T16-E8-K2-NVIDIA_H200.json.gz", "moe_topk_softmax-T16384-E256-K8-NVIDIA_H200.json.gz",
            "per_token_group_quant-T1-H7168-G128-float16-float8_e4m3fn-NVIDIA_H200.json.gz")
COMMITTED = LANDSCAPES_DIR / "bench-search-h200" / "bench-search.json"


@pytest.mark.parametrize("name", SEARCHED)
def test_where_no_prior_hits_the_default_strategy_still_beats_the_best_rival(name: str) -> None:
    from pytest_ktune.lab.strategies import OWN_STRATEGIES, Problem, run_ktune

    from ._data import LANDSCAPES, target

    committed = next(x for x in json.loads(COMMITTED.read_text())["landscapes"] if Path(x["file"]).name == name)
    rivals = {s["strategy"]: s["median_trials_to_3pct"] for s in committed["strategies"]
              if s["strategy"] not in OWN_STRATEGIES and not s["skipped"] and s["median_trials_to_3pct"] is not None}
    repeatable = [v for k, v in rivals.items() if k not in UNREPEATABLE]
    lands = [landscape(p) for p in sorted(LANDSCAPES.glob(name.split("-", maxsplit=1)[0] + "-*"))]
    land = next(x for x in lands if x.path is not None and x.path.name == name)
    others = tuple(x for x in lands if x is not land and dict(x.key) != dict(land.key))
    problem = Problem(land, target(land.name), root_of(land.name), others)
    # Without noise, and with the records replayed by the same strategy, every seed gives these.
    trace = run_ktune(problem, min(100, len(land.points)), 0, False)
    reached = trials_to(trace, land.optimum.value_us * 1.03 * (1 + 1e-9))
    assert reached is not None and reached <= min(rivals.values()) and reached < min(repeatable), \
        (name, reached, rivals)


def test_the_overall_table_sums_medians_and_counts_a_miss_as_the_budget_plus_one() -> None:
    from pytest_ktune.lab.results import LandscapeResult, overall, versus
    from pytest_ktune.lab.tables import overall_markdown

    land = landscape(RMSNORM)
    opt = land.optimum.value_us
    hit = [opt]  # within 3 % at trial 1
    late = [opt * 2, opt * 2, opt]  # at trial 3
    never = [opt * 2] * 5
    a = LandscapeResult(land, 5, [StrategyResult("ktune", [hit, hit]), StrategyResult("bo", [late, late]),
                                  StrategyResult("random", [late, late]), StrategyResult("kt:pso", skipped="no")])
    b = LandscapeResult(land, 5, [StrategyResult("ktune", [late, late]), StrategyResult("bo", [hit, hit]),
                                  StrategyResult("random", [never, never]), StrategyResult("kt:pso", [hit, hit])])
    rows = {r.strategy: r for r in overall([a, b])}
    assert (rows["ktune"].total, rows["ktune"].reached, rows["ktune"].fewest) == (4, 2, 1)
    assert (rows["random"].total, rows["random"].reached, rows["random"].fewest) == (3 + 6, 1, 1)
    assert (rows["kt:pso"].total, rows["kt:pso"].ran, rows["kt:pso"].fewest) == (6 + 1, 1, 1)
    # An ablation is set against the rivals only, not against the default: bo ties random on a (3) and
    # ties pso on b (1), though ktune needs 1 on a.
    assert rows["bo"].fewest == 2
    assert math.isclose(rows["ktune"].geomean, math.sqrt(3))
    assert [v for *_, v in versus([a, b])] == ["fewer", "MORE"]
    text = overall_markdown([a, b])
    # Ranked by the geometric mean: ktune and bo (1.73), pso (2.45), random (4.24); with a budget of 5,
    # no fraction after 10 or 20 trials.
    # The spread: the quartiles over seeds, counted as the medians are (both seeds alike here).
    assert "| 3 | kt:pso (skipped on 1) | ≥ 2.45 | 2.4–2.4 | 1/2 | ≥ 7 | – | – | 1 |" in text
    assert "| 4 | random | ≥ 4.24 | 4.2–4.2 | 1/2 | ≥ 9 | – | – | 1 |" in text
    c = LandscapeResult(land, 5, [StrategyResult("ktune", [hit, late, never, never])])
    assert overall([c])[0].spread == pytest.approx((3, 6))  # seeds at 1, 3 and twice never (6): quartiles 3 and 6
    assert "summed: 4 trials" in text  # the best other on each landscape: random's 3, then pso's 1


def test_the_default_strategys_own_parts_are_not_its_rivals() -> None:
    # ktune:tpe and bo are ablations of the default; the summary sets it against the others only.
    results = bench(problems_for(RMSNORM_ROOT, [RMSNORM]),
                    BenchSettings(budget=10, seeds=2, strategies=("ktune", "ktune:tpe", "bo", "random")),
                    progress=False)
    by = {r.strategy: r for r in results[0].results}
    assert all(not r.skipped and len(r.traces) == 2 for r in by.values())
    assert by["ktune:tpe"].traces[0][:1] == by["ktune"].traces[0][:1]  # the same warm starts first
    (line,) = summary_lines(results)
    assert "best other random" in line
