"""``ktune report``: one self-contained page of a project with its params file's history, stored benchmark
JSON and a tuning study, and that page in a real headless Chromium (Debian's chromium): it loads with no
console error and no request beyond the file, the plots are drawn, and a screenshot is taken.

Chromium is installed by .ci/run; without it these browser tests skip here, and fail under CI=true."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_ktune.cli import main
from pytest_ktune.core.store import Baseline, Record, Store, Timing
from pytest_ktune.gate.verdict import PerfResult
from pytest_ktune.measure.bench import Measurement
from pytest_ktune.report import benchjson
from pytest_ktune.report.study import write_report
from pytest_ktune.tuner.outcome import StudySummary, TrialRow

TARGET = "kernels.py::scale"
DEVICE = "Test GPU [opencl]"


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout


def _baseline(times: dict[str, float]) -> Baseline:
    return Baseline(params={"BLOCK": 64}, source_hash="0" * 16, source_path="scale.cl", commit=None,
                    date="2026-11-30T00:00:00Z", ktune_version="0.1.0",
                    timings={c: Timing(t, 0.1, t - 0.1, t + 0.1, 20, gbps=100.0 / t) for c, t in times.items()})


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository whose params file changed three times, a benchmark JSON of a later run, and a study."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.delenv("KTUNE_PARAMS", raising=False)
    root = tmp_path / "proj"
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    for k, v in (("user.name", "t"), ("user.email", "t@example.invalid"), ("commit.gpgsign", "false")):
        _git(root, "config", k, v)
    for i, small in enumerate((10.0, 8.0, 6.0)):
        store = Store(root / "ktune-params.json")
        store.save([Record(target=TARGET, device=DEVICE, key={"N": 4096}, params={"BLOCK": 64},
                           baseline=_baseline({"small": small, "big": 4 * small}))])
        _git(root, "add", "ktune-params.json")
        # Commits of one second, as a script makes them: their order must come from git, not the clock.
        monkeypatch.setenv("GIT_COMMITTER_DATE", "2026-11-20T12:00:00Z")
        _git(root, "commit", "-q", "-m", f"baseline {i}")
    measured = Measurement((5.4e-6, 5.5e-6, 5.6e-6), repeats=4, flushed=True, rotation=2)
    run = PerfResult(target="scale", case="small", backend="opencl", device="Test GPU", time_us=5.5,
                     baseline_us=6.0, ratio=5.5 / 6.0, gbps=18.2, copy_fraction=0.42, verdict="ok",
                     target_id=TARGET, params={"BLOCK": 64}, measurement=measured)
    doc = benchjson.build([run], root=root, backend="opencl", device="Test GPU")
    (root / "history").mkdir()
    (root / "history" / "run.json").write_text(json.dumps(doc))
    summary = StudySummary(target=TARGET, device=DEVICE, key={"N": 4096}, sampler="bo", study_name="s",
                           storage="journal", default_params={"BLOCK": 64}, default_us=10.0,
                           current_params={"BLOCK": 64}, current_us=10.0, best_params={"BLOCK": 128}, best_us=6.0,
                           accepted=True, decision="x1.6 faster", feasible_points=2, wall_s=3.0)
    rows = [TrialRow(number=i, params={"BLOCK": b}, state="timed", value_us=v)
            for i, (b, v) in enumerate([(64, 10.0), (128, 6.0), (64, 10.1), (128, 6.1), (64, 9.9)])]
    write_report(root / ".ktune" / "reports", summary, rows, {"BLOCK": 1.0})
    return root


def _write_page(root: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    assert main(["report", "--root", str(root), "--history", str(root / "history")]) == 0
    out = capsys.readouterr().out
    assert "ktune: wrote the report to " in out and "(1 targets, 7 timings, 1 studies)" in out
    return root / ".ktune" / "report.html"


def test_the_page_holds_every_case_across_commits_and_the_studies(project: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    text = _write_page(project, capsys).read_text()
    assert text.count('<section class="target"') == 1 and f'data-target="{TARGET}"' in text
    assert text.count('<figure class="case"') == 2
    # small: three baselines (one per commit of the params file) and the stored run; big: the baselines.
    assert text.count('<polyline class="series"') == 3
    assert text.count('<svg class="history"') == 1 and text.count('<svg class="importance"') == 1
    assert "42%" in text  # the run's % of copy bandwidth
    # Oldest commit first: the small case's baselines read 10, 8, 6 µs from left to right.
    oldest_first = _git(project, "rev-list", "--reverse", "HEAD").split()
    small = text.split('data-case="small"', 1)[1].split("</figure>", 1)[0]
    labels = re.findall(r'transform="rotate\(-35[^"]*">([0-9a-f]{8})</text>', small)
    assert labels == [c[:8] for c in oldest_first]
    line = re.search(r'data-source="params file" points="([^"]+)"', small)
    assert line is not None
    ys = [float(xy.split(",")[1]) for xy in line.group(1).split()]
    assert ys == sorted(ys)  # screen y grows downwards: the times fall
    assert "% of peak" not in text  # no result carries a measured peak: no column, and no made-up one
    # Self-contained: nothing is fetched, no stylesheet or script from elsewhere.
    assert "<link" not in text and "src=" not in text and "url(" not in text
    assert "http" not in text.replace("http://www.w3.org/2000/svg", "")


def test_percent_of_peak_shows_where_a_result_carries_it(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = project / "history" / "run.json"
    doc = json.loads(path.read_text())
    doc["benchmarks"][0]["extra_info"]["peak_fraction"] = 0.31
    path.write_text(json.dumps(doc))
    text = _write_page(project, capsys).read_text()
    assert text.count("% of peak") == 1 and "31%" in text  # in the small case's table only


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    message = "Chromium is not installed: apt-get install chromium (.ci/run installs it)"
    if os.environ.get("CI", "").strip().lower() == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def test_the_page_in_a_headless_chromium(project: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    page_path = _write_page(project, capsys)
    problems: list[str] = []
    requests: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(page_path.as_uri())
            page.wait_for_function("document.body.dataset.ready !== undefined", timeout=30_000)
            drawn: dict[str, Any] = page.evaluate("""() => ({
                ready: document.body.dataset.ready,
                series: document.querySelectorAll('svg.timeline polyline.series').length,
                points: document.querySelectorAll('svg.timeline circle.point').length,
                history: document.querySelectorAll('svg.history circle.point').length,
                bars: document.querySelectorAll('svg.importance rect.bar').length,
                width: document.querySelector('svg.timeline').getBoundingClientRect().width,
            })""")
            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot), full_page=True)
            page.fill("#filter", "no such target")
            hidden = page.evaluate("document.querySelector('section.target').hidden")
        finally:
            browser.close()
    assert problems == []
    assert requests == [page_path.as_uri()]  # the page alone: no network, no CDN
    assert drawn == {"ready": "1", "series": 3, "points": 7, "history": 5, "bars": 1, "width": 720}
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert hidden is True


def test_the_page_opens_on_what_changed_since_the_last_run(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = _write_page(project, capsys).read_text()
    assert text.index('<section id="overview">') < text.index('<section class="target"')
    overview = text.split('<section id="overview">', 1)[1].split("</section>", 1)[0]
    assert '<h3 class="regression">Regressions: 0</h3>' in overview
    assert '<h3 class="improvement">Improvements: 2</h3>' in overview and '<h3 class="drift">Drift: 0</h3>' in overview
    # Both cases' baselines fell by a quarter at the last commit (8 to 6 µs, 32 to 24 µs); each row links its chart.
    assert overview.count("-25.0%") == 2
    for case in ("small", "big"):
        link = re.search(rf'<a href="#(case-[0-9a-f]{{12}})">scale</a></td><td>{case}</td>', overview)
        assert link is not None and f'<figure class="case" id="{link.group(1)}" data-case="{case}"' in text
    assert "0 unchanged" in overview and "1 with a single timing so far" in overview  # the one benchmark run


def test_the_overview_uses_the_projects_threshold(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "pytest.ini").write_text("[pytest]\nktune_threshold = median:30%\n")
    text = _write_page(project, capsys).read_text()
    # The last step (-25 %) is within 30 %; since the first baseline (10 to 6 µs, 40 to 24 µs) it is not: drift.
    assert '<h3 class="improvement">Improvements: 0</h3>' in text and '<h3 class="drift">Drift: 2</h3>' in text
    assert "whose steps were each within 30%, but add up to more than 30% since the last larger one" in text
    assert text.count("-40.0%") == 2


def test_regressions_improvements_and_drift() -> None:
    from pytest_ktune.report.history import Point
    from pytest_ktune.report.overview import overview

    def series(case: str, times: list[float]) -> list[Point]:
        return [Point(target=TARGET, case=case, device=DEVICE, commit=f"c{i}", date=f"2026-01-0{i + 1}",
                      time_us=t) for i, t in enumerate(times)]

    points = (series("slower", [10.0, 10.0, 12.0]) + series("faster", [10.0, 9.9, 8.0])
              + series("creep", [10.0, 10.3, 10.6, 10.9]) + series("flat", [10.0, 10.2, 10.1])
              + series("tuned", [10.0, 5.0, 5.1, 5.2])
              + series("once", [10.0])[:1])
    ov = overview(points, [f"c{i}" for i in range(4)], 0.05)
    assert [(c.case, round(c.ratio, 3)) for c in ov.regressions] == [("slower", 1.2)]
    assert [(c.case, round(c.ratio, 3)) for c in ov.improvements] == [("faster", 0.808)]
    # Each step of creep is within 5 % of the one before; all together it is 9 % slower than the first.
    assert [(c.case, c.before.commit, c.latest.commit) for c in ov.drift] == [("creep", "c0", "c3")]
    # tuned halved at c1 (a change that was seen), and is within 5 % of that since: unchanged, not drift.
    assert (ov.unchanged, ov.single) == (2, 1)


def test_baselines_not_committed_yet_are_the_last_run(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # As `pytest --ktune --ktune-update-baseline` leaves it: a new baseline in the working tree, 20 % slower.
    Store(project / "ktune-params.json").save([Record(target=TARGET, device=DEVICE, key={"N": 4096},
                                                      params={"BLOCK": 64},
                                                      baseline=_baseline({"small": 7.2, "big": 24.0}))])
    assert main(["report", "--root", str(project)]) == 0
    assert "(1 targets, 8 timings, 1 studies)" in capsys.readouterr().out
    text = (project / ".ktune" / "report.html").read_text()
    overview = text.split('<section id="overview">', 1)[1].split("</section>", 1)[0]
    assert '<h3 class="regression">Regressions: 1</h3>' in overview and "+20.0%" in overview
    assert '6.00 <span class="muted">' in overview and '7.20 <span class="muted">worktree</span>' in overview
    assert "1 unchanged" in overview  # big: 24 µs, as committed
