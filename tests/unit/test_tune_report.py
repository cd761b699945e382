"""The tuning report: markdown with a starred best row, SVG charts that parse, safe stable file names."""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import optuna
import pytest

from pytest_ktune.report.study import redact_storage, report_slug, write_report
from pytest_ktune.report.svg import history_svg, importance_svg
from pytest_ktune.tuner.loop import importances_of
from pytest_ktune.tuner.outcome import StudySummary, TrialRow

SVG = "{http://www.w3.org/2000/svg}"
TARGET = "kernels/rmsnorm.py::rmsnorm"
DEVICE = "NVIDIA H200 [cuda]"
KEY = {"T": 64, "H": 4096, "dtype": "float16"}


def _summary(**changes: object) -> StudySummary:
    base = StudySummary(
        target=TARGET, device=DEVICE, key=KEY, sampler="TPESampler", study_name="rmsnorm-T64",
        storage="sqlite:///.ktune/optuna.db",
        default_params={"BLOCK": 256, "VEC": 1}, default_us=20.0,
        current_params={"BLOCK": 256, "VEC": 4}, current_us=12.0,
        best_params={"BLOCK": 128, "VEC": 8}, best_us=8.0,
        accepted=True, decision="The best is 1.50x faster than the current parameters, beyond noise.",
        feasible_points=20, wall_s=95.0,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def _rows() -> list[TrialRow]:
    return [
        TrialRow(0, {"BLOCK": 256, "VEC": 4}, "timed", 12.0, source="warm-start", compile_s=0.4, run_s=0.2),
        TrialRow(1, {"BLOCK": 64, "VEC": 8}, "infeasible", None, reason="H % VEC != 0"),
        TrialRow(2, {"BLOCK": 512, "VEC": 2}, "timed", 15.5, compile_s=0.3, run_s=0.1),
        TrialRow(3, {"BLOCK": 1024, "VEC": 8}, "failed", None, reason="too many resources requested"),
        TrialRow(4, {"BLOCK": 128, "VEC": 8}, "timed", 8.0),
        TrialRow(5, {"BLOCK": 512, "VEC": 2}, "duplicate", 15.5),
        TrialRow(6, {"BLOCK": 128, "VEC": 4}, "timed", 9.0),
    ]


def _parse(path: Path) -> ET.Element:
    return ET.parse(path).getroot()


def _points(root: ET.Element) -> list[ET.Element]:
    return [c for c in root.iter(f"{SVG}circle") if c.get("class") == "point"]


def _table_rows(md: str) -> list[str]:
    return [line for line in md.splitlines() if re.match(r"^\| (\*\*)?\d+", line)]


# -- the files -------------------------------------------------------------------
def test_writes_markdown_and_both_charts_next_to_each_other(tmp_path: Path) -> None:
    folder = tmp_path / ".ktune" / "reports"
    md = write_report(folder, _summary(), _rows(), {"BLOCK": 0.7, "VEC": 0.3})
    slug = report_slug(TARGET, DEVICE, KEY)
    assert md == folder / f"{slug}.md"
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [f"{slug}.md", f"{slug}-history.svg", f"{slug}-importance.svg", f"{slug}.json"])
    # The index ktune report reads to place the plots.
    index = json.loads((folder / f"{slug}.json").read_text())
    assert index["target"] == TARGET and index["history"] == f"{slug}-history.svg"
    assert index["importance"] == f"{slug}-importance.svg" and index["report"] == md.name
    text = md.read_text(encoding="utf-8")
    # Linked relatively, so the folder can move.
    assert f"]({slug}-history.svg)" in text
    assert f"]({slug}-importance.svg)" in text


def test_the_header_names_the_study(tmp_path: Path) -> None:
    text = write_report(tmp_path, _summary(), _rows(), None).read_text(encoding="utf-8")
    for expected in (TARGET, "NVIDIA H200", "T=64, H=4096, dtype=float16", "TPESampler", "rmsnorm-T64",
                     "sqlite:///.ktune/optuna.db", "1 min 35 s", "7 (4 timed, 1 infeasible, 1 failed, "
                     "1 duplicate); 1 from the warm start"):
        assert expected in text


def test_the_result_paragraph_compares_best_with_default_and_current(tmp_path: Path) -> None:
    text = write_report(tmp_path, _summary(), _rows(), None).read_text(encoding="utf-8")
    assert "2.50× faster than the default" in text
    assert "1.50× faster than the current parameters" in text
    assert "**Accepted.**" in text
    assert "beyond noise" in text
    assert "| best | `BLOCK=128, VEC=8` | 8.00 | 0.400 | 0.667 |" in text

    rejected = _summary(accepted=False, best_us=12.1, decision="Not faster beyond noise.")
    text = write_report(tmp_path, rejected, _rows(), None).read_text(encoding="utf-8")
    assert "**Not accepted.**" in text
    assert "1.01× slower than the current parameters" in text


def test_a_decision_clause_reads_as_a_sentence(tmp_path: Path) -> None:
    summary = _summary(accepted=False, decision="the parameters in use are the best the study found")
    text = write_report(tmp_path, summary, _rows(), None).read_text(encoding="utf-8")
    assert "**Not accepted.** The parameters in use are the best the study found." in text


def test_table_lists_every_trial_by_number_and_stars_the_best(tmp_path: Path) -> None:
    rows = _rows()
    shuffled = rows[3:] + rows[:3]
    text = write_report(tmp_path, _summary(), shuffled, None).read_text(encoding="utf-8")
    table = _table_rows(text)
    assert [int(re.findall(r"\d+", r)[0]) for r in table] == list(range(7))
    starred = [r for r in table if "★" in r]
    assert len(starred) == 1
    assert starred[0].startswith("| **4** ★ | sampler | timed | `BLOCK=128, VEC=8` | 8.00 |")
    assert "| 1 | sampler | infeasible | `BLOCK=64, VEC=8` | - | 0.00 | 0.00 | H % VEC != 0 |" in table
    assert table[0].startswith("| 0 | warm-start | timed | `BLOCK=256, VEC=4` | 12.00 | 0.40 | 0.20 |")


def test_the_star_follows_the_summary_when_finalists_were_re_timed(tmp_path: Path) -> None:
    # Trial 6 recorded 9.0 µs but won the re-timing: the summary's choice is what gets the star.
    summary = _summary(best_params={"BLOCK": 128, "VEC": 4}, best_us=7.9)
    table = _table_rows(write_report(tmp_path, summary, _rows(), None).read_text(encoding="utf-8"))
    assert next(r for r in table if "★" in r).startswith("| **6** ★")


def test_importance_chart_is_omitted_with_a_sentence(tmp_path: Path) -> None:
    folder = tmp_path / "r"
    write_report(folder, _summary(), _rows(), {"BLOCK": 1.0})
    assert len(list(folder.glob("*-importance.svg"))) == 1
    nothings: tuple[dict[str, float] | None, ...] = (None, {})
    for nothing in nothings:
        md = write_report(folder, _summary(), _rows(), nothing)
        # The chart of the earlier study with this slug is gone, not left stale.
        assert not list(folder.glob("*-importance.svg"))
        text = md.read_text(encoding="utf-8")
        assert "-importance.svg" not in text
        assert "No importance chart" in text


def test_an_all_failed_study_still_writes_a_report(tmp_path: Path) -> None:
    rows = [TrialRow(i, {"BLOCK": 64 << i}, "failed" if i % 2 else "infeasible", None, reason=f"reason {i}")
            for i in range(5)]
    summary = _summary(best_params=None, best_us=None, accepted=False,
                       decision="No configuration could be timed.")
    md = write_report(tmp_path, summary, rows, None)
    text = md.read_text(encoding="utf-8")
    assert "No trial was timed" in text
    assert "★" not in text
    assert len(_table_rows(text)) == 5
    root = _parse(tmp_path / f"{md.stem}-history.svg")
    assert _points(root) == []
    marks = [e for e in root.iter(f"{SVG}line") if (e.get("class") or "").startswith("mark ")]
    assert len(marks) == 5
    assert "no trial was timed" in "".join(root.itertext())


def test_a_study_with_no_trials_still_writes_a_report(tmp_path: Path) -> None:
    md = write_report(tmp_path, _summary(best_params=None, best_us=None), [], None)
    assert "No trial ran." in md.read_text(encoding="utf-8")
    _parse(tmp_path / f"{md.stem}-history.svg")


# -- the history chart -----------------------------------------------------------
@pytest.mark.parametrize("count", [1, 2, 7, 300])
def test_history_has_one_point_per_timed_trial(count: int) -> None:
    rows = [TrialRow(i, {"B": i}, "timed" if i % 3 else "failed", None if i % 3 == 0 else 10 + (i * 7) % 13)
            for i in range(1, count + 1)]
    root = ET.fromstring(history_svg(_summary(), rows))
    assert root.tag == f"{SVG}svg"
    timed = sum(1 for r in rows if r.state == "timed")
    assert len(_points(root)) == timed
    marks = [e for e in root.iter(f"{SVG}line") if (e.get("class") or "").startswith("mark ")]
    assert len(marks) == count - timed
    assert len([p for p in root.iter(f"{SVG}path") if p.get("class") == "best-so-far"]) == (1 if timed else 0)


def test_history_axes_have_tick_labels() -> None:
    root = ET.fromstring(history_svg(_summary(), _rows()))
    labels = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert "trial number" in labels
    assert "median µs" in labels
    assert {"0", "2", "4", "6"} <= set(labels)
    assert any(re.fullmatch(r"\d+(\.\d+)?", s) and float(s) >= 8 for s in labels)


def test_best_so_far_steps_down_only_at_improvements() -> None:
    rows = [TrialRow(i, {"B": i}, "timed", v) for i, v in enumerate([10.0, 12.0, 6.0, 7.0, 6.0, 3.0])]
    root = ET.fromstring(history_svg(_summary(), rows))
    path = next(p for p in root.iter(f"{SVG}path") if p.get("class") == "best-so-far")
    # Start, then one H...V pair per improvement (trials 2 and 5), then the run to the last trial.
    assert (path.get("d") or "").count("V") == 2


def test_identical_values_sit_mid_plot_on_a_flat_line() -> None:
    rows = [TrialRow(i, {"B": i}, "timed", 5.0) for i in range(6)]
    root = ET.fromstring(history_svg(_summary(), rows))
    ys = {float(c.get("cy") or "nan") for c in _points(root)}
    assert len(ys) == 1
    height = float(root.get("height") or 0)
    assert 0.2 * height < ys.pop() < 0.8 * height


def test_widely_spread_values_switch_to_a_log_axis() -> None:
    rows = [TrialRow(i, {"B": i}, "timed", v) for i, v in enumerate([5.0, 9.0, 400.0])]
    labels = [t.text or "" for t in ET.fromstring(history_svg(_summary(), rows)).iter(f"{SVG}text")]
    assert "median µs (log scale)" in labels
    assert {"10", "100"} <= set(labels)


def test_text_is_escaped_and_control_characters_dropped(tmp_path: Path) -> None:
    nasty = 'a<b>&"c"\x1b[31m\x00|`x`'
    summary = _summary(target=f"k.py::{nasty}", device=nasty, decision=nasty)
    rows = [TrialRow(0, {"MODE": nasty}, "failed", None, reason=nasty),
            TrialRow(1, {"MODE": "ok"}, "timed", 3.0)]
    md = write_report(tmp_path, summary, rows, {nasty: 1.0})
    for svg in tmp_path.glob("*.svg"):
        _parse(svg)  # raises on bad escaping or characters XML forbids
    text = md.read_text(encoding="utf-8")
    assert "\x00" not in text
    assert "\x1b" not in text
    # A pipe inside a cell would split the table row.
    failed = next(r for r in _table_rows(text) if r.startswith("| 0 "))
    assert len(re.findall(r"(?<!\\)\|", failed)) == 9


# -- the importance chart --------------------------------------------------------
def test_importance_bars_are_sorted_largest_first() -> None:
    root = ET.fromstring(importance_svg({"VEC": 0.2, "BLOCK": 0.7, "UNROLL": 0.1, "BAD": float("nan")}))
    bars = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "bar"]
    assert len(bars) == 3
    widths = [float(b.get("width") or 0) for b in bars]
    assert widths == sorted(widths, reverse=True)
    titles = [next(iter(b)).text or "" for b in bars]
    assert [t.split(":")[0] for t in titles] == ["BLOCK", "VEC", "UNROLL"]


def test_all_zero_importances_still_draw() -> None:
    root = ET.fromstring(importance_svg({"A": 0.0, "B": 0.0}))
    assert [float(b.get("width") or -1) for b in root.iter(f"{SVG}rect") if b.get("class") == "bar"] == [0, 0]


# -- the slug --------------------------------------------------------------------
def test_slug_is_short_readable_filesystem_safe_and_stable() -> None:
    slug = report_slug(TARGET, DEVICE, KEY)
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", slug)
    # The target's name and the key; the file and the device are in the hash (and in the report).
    assert slug == "rmsnorm-H4096-T64-float16-58e3a680a0"
    assert slug == report_slug(TARGET, DEVICE, dict(reversed(list(KEY.items()))))
    # Fixed across runs and interpreters: a hash of the content, not Python's salted hash().
    assert slug.endswith("-58e3a680a0")


def test_a_report_of_the_old_long_name_is_replaced_not_shown_twice(tmp_path: Path) -> None:
    old = "kernels-rmsnorm.py-rmsnorm--NVIDIA-H200-cuda--H-4096-T-64-dtype-float16-58e3a680a0"
    for suffix in (".md", ".json", "-history.svg"):
        (tmp_path / f"{old}{suffix}").write_text("left by an earlier version")
    md = write_report(tmp_path, _summary(), _rows(), None)
    assert md.name == "rmsnorm-H4096-T64-float16-58e3a680a0.md"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("kernels-")]


@pytest.mark.parametrize(("target", "device", "key"), [
    ("a/b.py::k", "dev", {"T": 1}),
    ("../../etc/passwd::x", "C:\\dev|<>*?", {"a b": "c/d", "e": None}),
    ("", "", {}),
    ("k" * 500, "d" * 500, {"x" * 300: 1}),
    ("ядро.py::ядро", "устройство", {"ключ": 1}),
])
def test_slug_is_safe_for_any_input(target: str, device: str, key: dict[str, object]) -> None:
    slug = report_slug(target, device, key)
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", slug)
    assert len(slug) <= 60
    assert ".." not in slug.split("-")


def test_slugs_of_different_studies_differ() -> None:
    slugs = {report_slug(TARGET, DEVICE, KEY), report_slug(TARGET, DEVICE, {**KEY, "T": 128}),
             report_slug(TARGET, "pthread-CPU [opencl]", KEY), report_slug("x.py::rmsnorm", DEVICE, KEY),
             # Same readable text, different content: only the hash tells them apart.
             report_slug("a/b::k", DEVICE, KEY), report_slug("a-b::k", DEVICE, KEY)}
    assert len(slugs) == 6


def test_storage_passwords_are_redacted(tmp_path: Path) -> None:
    assert redact_storage("postgresql://tuner:s3cret@db:5432/optuna") == "postgresql://tuner:***@db:5432/optuna"
    assert redact_storage("sqlite:///.ktune/optuna.db") == "sqlite:///.ktune/optuna.db"
    md = write_report(tmp_path, _summary(storage="mysql://u:pw@h/db"), _rows(), None)
    assert "pw" not in md.read_text(encoding="utf-8")


# -- importances_of --------------------------------------------------------------
def _study(n_trials: int) -> optuna.Study:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))

    def objective(trial: optuna.Trial) -> float:
        block = trial.suggest_categorical("BLOCK", [64, 128, 256, 512])
        vec = trial.suggest_categorical("VEC", [1, 2, 4, 8])
        return float(block) + 0.01 * vec

    study.optimize(objective, n_trials=n_trials)
    return study


@pytest.fixture(autouse=True)
def _quiet_optuna() -> Iterator[None]:
    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    yield
    optuna.logging.set_verbosity(before)


def test_importances_of_a_real_study_sum_to_one() -> None:
    result = importances_of(_study(30))
    assert result is not None
    assert set(result) == {"BLOCK", "VEC"}
    assert sum(result.values()) == pytest.approx(1.0)
    assert result["BLOCK"] > result["VEC"]


@pytest.mark.parametrize("n_trials", [0, 1, 3])
def test_importances_of_too_few_trials_is_none(n_trials: int) -> None:
    assert importances_of(_study(n_trials)) is None


def test_importances_ignore_failed_and_infinite_trials() -> None:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=5))

    def objective(trial: optuna.Trial) -> float:
        block = trial.suggest_categorical("BLOCK", [64, 128, 256, 512])
        if block == 512:
            raise RuntimeError("does not compile")
        return math.inf if block == 256 else float(block)

    study.optimize(objective, n_trials=40, catch=(RuntimeError,))
    result = importances_of(study)
    assert result is not None
    assert sum(result.values()) == pytest.approx(1.0)

    # Five completed trials, but only three with a finite value: too few.
    few = optuna.create_study()
    for value in (1.0, 2.0, 3.0, math.inf, math.inf):
        few.add_trial(optuna.trial.create_trial(
            params={"B": 1}, distributions={"B": optuna.distributions.IntDistribution(1, 2)}, value=value))
    assert importances_of(few) is None


def test_importances_of_never_raises() -> None:
    class Broken:
        directions = (optuna.study.StudyDirection.MINIMIZE,)

        def get_trials(self, **_: object) -> list[object]:
            raise RuntimeError("storage went away")

    assert importances_of(Broken()) is None  # type: ignore[arg-type]


def test_the_history_title_keeps_the_key_whatever_the_names() -> None:
    from pytest_ktune.report.svg import TITLE_CHARS, history_title

    base = _summary()
    long = replace(base, target="a/very/deep/folder/of/kernels/fused_add_rmsnorm_long_name.py::fused_add_rmsnorm",
                   device="NVIDIA H200 with an extraordinarily long marketing name, 141 GB HBM3e [cuda]",
                   key={"T": 16384, "H": 4096, "dtype": "float16"})
    for s in (base, long):
        title = history_title(s)
        assert "[" + ", ".join(f"{k}={v}" for k, v in s.key.items()) + "]" in title, title
        assert len(title) <= TITLE_CHARS, (len(title), title)
    assert "fused_add_rmsnorm" in history_title(long) and " on NVIDIA H200" in history_title(long)
