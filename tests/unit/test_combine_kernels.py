"""benchmarks/combine_kernels.py: a later run's rows replace an earlier run's, target by target, and the
goals are judged on the combined rows."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "combine_kernels.py"


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("combine_kernels", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["combine_kernels"] = module
    spec.loader.exec_module(module)
    return module


ck = _load()


def _case(target: str, case: str, speedup: float, *, compile_ratio: float | None = None, mode: str = "graph",
          fraction: float = 0.5, moved: int = 1000, same: bool = False) -> dict[str, Any]:
    return {"target": target, "case": case, "bytes_moved": moved,
            "default_params": {"B": 1}, "tuned_params": {"B": 1} if same else {"B": 2},
            "compiled": {"mode": mode} if compile_ratio is not None else {"mode": None},
            "summary": {"speedup_tuned_vs_default": speedup, "compile_over_tuned": compile_ratio,
                        "tuned_us": 10.0, "compiled_us": 10.0 * compile_ratio if compile_ratio else None,
                        "copy_bw_fraction": {"tuned": fraction}}}


def _run(date: str, *cases: dict[str, Any]) -> dict[str, Any]:
    return {"date": date, "copy_bandwidth_Bps": 4.2e12, "cases": list(cases)}


def test_a_later_run_replaces_its_targets_and_the_goals_are_judged_on_the_rest(tmp_path: Path) -> None:
    full = _run("d1", _case("a", "a1", 4.0, compile_ratio=0.5), _case("a", "a2", 4.0),
                _case("b", "b1", 1.0, compile_ratio=1.2, fraction=0.80, moved=300 * 10**6, same=True),
                _case("c", "c1", 2.0, compile_ratio=50.0, mode="events (graph capture failed: x)"))
    later = _run("d2", _case("a", "a1", 2.0, compile_ratio=0.9, fraction=0.9, moved=300 * 10**6))
    picked = ck.rows_by_target([full, later])
    assert {t: (i, [c["case"] for c in rows]) for t, (i, rows) in picked.items()} == {
        "a": (1, ["a1"]), "b": (0, ["b1"]), "c": (0, ["c1"])}
    lines = ck.summary([full, later], ["full", "later"])
    assert "| a | later |" in lines and "| b | full |" in lines
    text = "\n".join(lines)
    # (2 * 1 * 2) ** (1 / 3) = 1.587
    assert "geomean tuned over default: **1.59x** over 3 cases (goal 1.5x: met); 1 run the default" in text
    assert "at >= 85 % of copy bandwidth: 1 of 2 (lowest 80 %)" in text and "b[b1]: 80.0 %" in text
    assert "at or ahead of torch.compile: 1 of 2 compared (1 more not compared" in text
    assert "  - a[a1]: 0.90x" in lines
    # Best alternative: only a1 (later) and b1 have a graph-timed torch.compile beside a tuned time.
    assert "ahead of the best of torch eager, torch.compile and Liger: 1 of 2; geomean best alternative over " \
           "tuned **1.04x** (goal every case and 1.10x: missed)" in text
    assert "  - a[a1]: 0.90x (torch.compile)" in lines

    a, b = tmp_path / "full.json", tmp_path / "later.json"
    a.write_text(json.dumps(full))
    b.write_text(json.dumps(later))
    out = tmp_path / "summary.md"
    assert ck.main([str(a), str(b), "--out", str(out)]) == 0
    assert out.read_text().startswith("# The example kernels, combined") and "`later.json` (d2" in out.read_text()


def test_the_best_alternative_is_the_fastest_column_timed_in_a_graph() -> None:
    case = {"summary": {"tuned_us": 2.0, "eager_us": 1.0, "compiled_us": 2.5, "liger_us": 1.6},
            "eager": {"mode": "events (graph capture failed: x)"}, "compiled": {"mode": "graph"},
            "liger": {"mode": "graph"}}
    assert ck.best_alternative(case) == ("liger", 0.8)  # eager is faster but was not timed in a graph
    assert ck.best_alternative({"summary": {"tuned_us": 2.0}, "compiled": {"mode": None}}) is None
