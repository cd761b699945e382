"""The pure parts of benchmarks/bench_kernels.py: run order, tuned parameters from a params file,
sampled checks, and the goals' verdicts. The script itself runs on a GPU; these run anywhere."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_ktune import MismatchError
from pytest_ktune.core.store import Record, Store, Tuned
from pytest_ktune.measure.bench import Measurement
from pytest_ktune.measure.verify import draw_inputs

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_kernels.py"


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("bench_kernels", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_kernels"] = module
    spec.loader.exec_module(module)
    return module


bk = _load()
DEVICE = "NVIDIA H200 [cuda]"


def _target(name: str) -> Any:
    return next(t for t in bk.load_targets() if t.name == name)


def _m(us: float) -> Measurement:
    return Measurement(tuple(us * 1e-6 for _ in range(5)), repeats=1, flushed=False, rotation=1)


def _result(target: str, default_us: float | None, tuned_us: float | None, *, compiled_us: float | None = None,
            bytes_moved: int = 1000, same_params: bool = False, compiled_mode: str = "graph") -> Any:
    r = bk.CaseResult(target, f"case-{target}-{default_us}", {}, {}, bytes_moved, bytes_moved, 1, False,
                      default_params={"BLOCK": 256})
    r.tuned_params = {"BLOCK": 256} if same_params else {"BLOCK": 128}
    r.tuned_source = "tuned"
    for col, us in ((r.default, default_us), (r.tuned, tuned_us), (r.compiled, compiled_us)):
        col.m = _m(us) if us is not None else None
        col.status = "ok" if us is not None else "fails: Unsupported: data-dependent"
    r.compiled.mode = compiled_mode if compiled_us is not None else ""
    return r


def test_all_nine_targets_are_found_in_the_issues_order() -> None:
    names = [t.name for t in bk.load_targets()]
    assert names[:len(bk.ORDER)] == list(bk.ORDER)


def test_run_order_takes_each_targets_extremes_first_then_goes_round_the_targets() -> None:
    assert bk.extremes_first([3, 1, 4, 2, 5], float) == [5, 1, 4, 2, 3]
    assert bk.interleave([["a1", "a2", "a3"], ["b1"], ["c1", "c2"]]) == ["a1", "b1", "c1", "a2", "c2", "a3"]
    assert bk.interleave([]) == []


def test_tuned_parameters_come_from_the_record_of_this_device_and_key() -> None:
    rms = _target("rmsnorm")
    key = {"T": 64, "H": 4096, "dtype": "float16"}
    tuned = Tuned(date="2026-11-30T20:00:00Z", sampler="tpe", trials=24, study="s", result="improved")
    store = Store(Path("elsewhere/ktune-params.json"), [
        Record("kernels/rmsnorm.py::rmsnorm", DEVICE, key, {"BLOCK": 128, "VEC": 8}, tuned=tuned),
        Record("kernels/rmsnorm.py::rmsnorm", DEVICE, {**key, "T": 1}, {"BLOCK": 256, "VEC": 1}),
    ])
    got = bk.recorded_params(store, rms, DEVICE, key)
    # A record of the space before ROWS, CACHE and REDUCE: completed with the default's values for them.
    assert got.params == {"BLOCK": 128, "VEC": 8, "ROWS": 1, "CACHE": 0, "REDUCE": 0}
    assert got.source == "tuned 2026-11-30 (tpe, 24 trials)"
    assert bk.recorded_params(store, rms, DEVICE, {**key, "T": 1}).source == "recorded, never tuned"
    assert bk.recorded_params(store, rms, "other GPU [cuda]", key) is None
    assert bk.recorded_params(store, _target("silu_and_mul"), DEVICE, key) is None
    assert bk.recorded_params(None, rms, DEVICE, key) is None


class NumpyIO:
    def host(self, a: np.ndarray) -> np.ndarray:
        return a

    def rows(self, a: np.ndarray, rows: np.ndarray, axis: int) -> np.ndarray:
        return np.take(a, rows, axis=axis)

    def all_finite(self, a: np.ndarray) -> bool:
        return bool(np.isfinite(a).all())


@pytest.mark.parametrize("wrong", ["lse_of_a_sampled_token", "output_of_an_unsampled_token", "none"])
def test_a_sampled_check_follows_each_outputs_token_axis(wrong: str) -> None:
    merge = _target("merge_attn_states")
    case = next(c for c in merge.cases if merge.case_id(c) == "T64-NH32-D128-float32-empty")
    host = draw_inputs(case, 3)
    out, lse = (np.asarray(v) for v in bk.call_reference(merge, host))
    out, lse = out.astype(np.float32), lse.astype(np.float32)
    verifier = bk.Verifier(merge, "c", host, 3, "opencl", limit=20_000)
    if wrong == "lse_of_a_sampled_token":
        lse[:, -1] += 1.0  # the last token is always among those sampled; its LSE is on axis 1
    elif wrong == "output_of_an_unsampled_token":
        out[1] = np.nan  # not sampled, but an unwritten element is still caught
    if wrong == "none":
        assert verifier.verify((out, lse), NumpyIO(), "t").endswith("rows against the reference; "
                                                                      "all elements finite")
        assert verifier.rows is not None and 2 <= len(verifier.rows) < 64
    else:
        with pytest.raises(MismatchError):
            verifier.verify((out, lse), NumpyIO(), "t")


def test_a_cache_is_checked_on_sampled_blocks_of_the_whole_reference() -> None:
    cache = _target("reshape_and_cache_flash")
    case = next(c for c in cache.cases if cache.case_id(c) == "T48-NKV8-D128-float32-pad5")
    host = draw_inputs(case, 4)
    kc, vc = bk.call_reference(cache, host)
    verifier = bk.Verifier(cache, "c", host, 4, "opencl", limit=10_000)
    verifier.verify((kc, vc), NumpyIO(), "t")
    assert verifier.rows is not None and verifier.rows[-1] == kc.shape[0] - 1
    bad = vc.copy()
    bad[-1] += 1.0
    with pytest.raises(MismatchError, match="output 1"):
        verifier.verify((kc, bad), NumpyIO(), "t")


def test_goals_say_met_or_missed_and_by_how_much() -> None:
    copy_bw = 4000e9
    big = 512 * 10**6
    results = [
        _result("rmsnorm", 12.0, 10.0, compiled_us=12.0),                   # 1.2x, ahead of compile
        _result("silu_and_mul", 20.0, 20.0, compiled_us=16.0, same_params=True),   # 1x, 25 % slower
        # 512 MB in 150 µs: 3413 GB/s, 85.3 % of 4000; in 160 µs: 80 %
        _result("gelu_tanh_and_mul", 300.0, 150.0, bytes_moved=big),
        _result("rotary_neox", 320.0, 160.0, compiled_us=None, bytes_moved=big),
        _result("merge_attn_states", 10.0, None),                             # no tuned timing: left out
    ]
    g_speed, g_bw, g_compile, _ = bk.goals(results, copy_bw)
    # (1.2 * 1 * 2 * 2) ** (1 / 4) = 1.480
    assert g_speed.met is False and g_speed.value == "1.48x over 4 case(s)"
    assert g_speed.detail[0] == "short by 0.02x (1 % more speed needed)"
    assert "1 of 4 case(s) run the default" in g_speed.detail[1]
    assert g_bw.met is False and g_bw.value == "1 of 2 case(s) at or above; lowest 80 %"
    assert g_bw.detail[0].startswith("rotary_neox[") and "80.0 % (5.0 points short" in g_bw.detail[0]
    assert g_compile.met is False and g_compile.value == "1 of 2 case(s) at or ahead"
    assert "silu_and_mul[" in g_compile.detail[0] and "(25 % slower)" in g_compile.detail[0]
    met = bk.goals([_result("rmsnorm", 30.0, 10.0, compiled_us=10.0)], copy_bw)
    assert [g.met for g in met] == [True, None, True, False]  # torch.compile at 1.0x: short of 1.10x


def test_a_torch_compile_timing_outside_a_cuda_graph_is_not_compared() -> None:
    # torch.compile timed call by call (its capture failed) carries launch overhead that ours does not.
    results = [_result("rmsnorm", 12.0, 10.0, compiled_us=12.0),
               _result("reshape_and_cache_flash", 3.0, 2.0, compiled_us=300.0,
                       compiled_mode="events (graph capture failed: x)"),
               _result("silu_and_mul", 3.0, 2.0, compiled_us=1.5, compiled_mode="events (graph capture failed: x)")]
    g_compile = bk.goals(results, 4000e9)[2]
    assert g_compile.met is True
    assert g_compile.value.startswith("1 of 1 case(s) at or ahead; 2 more not compared: torch.compile could not "
                                      "run in a CUDA graph")


def test_a_cell_shows_the_time_or_why_there_is_none() -> None:
    assert bk.cell(bk.Column(status="ok", m=_m(1234.5))) == "1,234.5"
    assert bk.cell(bk.Column(status="torch not installed")) == "torch not installed"
    assert bk.cell(bk.Column(status="fails: Unsupported: x")) == "fails: Unsupported: x"
    assert bk.cell(bk.Column(status="skipped: no record")) == "no record"


def test_the_best_alternative_is_the_fastest_graph_timed_of_eager_compile_and_liger() -> None:
    r = _result("rmsnorm", 12.0, 10.0, compiled_us=11.0)
    r.eager.m, r.eager.mode = _m(30.0), "graph"
    r.liger.m, r.liger.mode = _m(9.0), "graph"
    assert r.best_alternative() == ("liger", pytest.approx(9e-6))
    assert r.vs_best() == pytest.approx(0.9)
    r.liger.mode = "events (graph capture failed: x)"  # launch overhead included: not compared
    assert r.best_alternative() == ("compiled", pytest.approx(11e-6))
    assert bk.cell(bk.Column(status="not installed")) == "not installed"


def test_issue_26s_goal_needs_every_case_at_or_ahead_and_the_geomean() -> None:
    ahead = _result("rmsnorm", 12.0, 10.0, compiled_us=12.0)     # 1.2x
    close = _result("silu_and_mul", 12.0, 10.0, compiled_us=10.2)  # 1.02x
    behind = _result("gelu_tanh_and_mul", 12.0, 10.0, compiled_us=12.0)
    behind.liger.m, behind.liger.mode = _m(8.0), "graph"          # 0.8x: Liger 25 % faster
    goal = bk.goals([ahead, close, behind], 4000e9)[3]
    assert goal.met is False and goal.value.startswith("geomean 0.99x over 3 case(s); at or ahead on 2")
    assert goal.detail == [f"gelu_tanh_and_mul[{behind.case}]: tuned 10.00 µs vs Liger 8.00 µs (25 % slower)"]
    assert bk.goals([ahead, close], 4000e9)[3].met is True       # both ahead, geomean 1.106x
    assert bk.goals([close], 4000e9)[3].met is False             # ahead, but 1.02x < 1.10x


def test_the_floor_shows_on_small_cases_only() -> None:
    bw = 4000e9
    assert bk.is_small(16 * 2**20, bw)          # 16 MiB: 4 µs at 4 TB/s
    assert not bk.is_small(64 * 2**20, bw)      # 64 MiB: 17 µs
    f = bk._floor.Floor(_m(1.9), _m(2.1), _m(2.4))
    assert bk.floor_cell(f) == "1.90 / 2.10 / 2.40"
    assert bk.floor_cell(bk._floor.Floor(None, None, error="CompileError: x")) == "failed: CompileError: x"
    assert bk.floor_cell(None) == ""


def test_the_floor_kernels_run_and_are_timed_on_opencl() -> None:
    from pytest_ktune import BackendUnavailable
    from pytest_ktune.backends import create
    from pytest_ktune.measure.bench import BenchConfig

    try:
        backend = create("opencl")
    except BackendUnavailable as exc:  # pragma: no cover - CI installs PoCL
        pytest.skip(str(exc))
    cfg = BenchConfig(min_samples=3, max_samples=3, min_sample_s=1e-4, max_time_s=0.2)
    f = bk._floor.measure_floor(backend, cfg, flush=False)
    assert f.error == "" and f.empty is not None and f.copy1 is not None
    assert 0 < f.empty.median < 1e-2 and 0 < f.copy1.median < 1e-2


def test_liger_says_not_installed_where_it_does_not_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "liger_kernel", None)  # import of it raises ModuleNotFoundError
    monkeypatch.delitem(sys.modules, "liger_kernel.ops", raising=False)
    ops, note = bk._liger.liger_ops()
    assert ops == {} and note == "not installed"


def test_liger_gets_gate_and_up_as_two_contiguous_halves() -> None:
    x = np.arange(2 * 6, dtype=np.float32).reshape(2, 6)

    class Halves:  # numpy stands in for torch: slicing, .contiguous()
        def __init__(self, a: np.ndarray) -> None:
            self.a = a
            self.shape = a.shape

        def __getitem__(self, key: Any) -> Halves:
            return Halves(self.a[key])

        def contiguous(self) -> np.ndarray:
            return np.ascontiguousarray(self.a)

    halves = bk._liger._halves({"x": Halves(x)})
    assert halves["a"].flags.c_contiguous and halves["b"].flags.c_contiguous
    assert halves["a"].tolist() == x[:, :3].tolist() and halves["b"].tolist() == x[:, 3:].tolist()
