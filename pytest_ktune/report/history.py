"""A kernel's time across commits, gathered for ``ktune report``: from the params file's git history
(the baseline recorded at each commit that changed it) and from stored benchmark JSON files (what
``--ktune-benchmark-json`` wrote, e.g. on every push to main); and the tuning studies' plots under
``.ktune/reports/``.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_ktune.core import git
from pytest_ktune.core.errors import KtuneError, StoreError
from pytest_ktune.core.store import Store

PARAMS = "params file"
BENCHMARK = "benchmark JSON"


@dataclass(frozen=True)
class Point:
    """One timing of one case on one device at one commit."""

    target: str  # the target's id (``kernels/rmsnorm.py::rmsnorm``)
    case: str
    device: str  # as the params file names it: ``NVIDIA H200 [cuda]``
    commit: str  # the full hash ('' where unknown)
    date: str  # ISO 8601, for the order of the commits
    time_us: float
    gbps: float | None = None
    copy_fraction: float | None = None  # of the device's copy bandwidth measured in the same run
    peak_fraction: float | None = None  # of the device's measured compute peak, where a result carries one
    source: str = PARAMS


@dataclass(frozen=True)
class StudyPlots:
    """The plots a tune left for one study (``report.study.write_report``)."""

    target: str
    device: str
    key: dict[str, Any]
    history_svg: str
    importance_svg: str | None
    best_us: float | None
    best_params: dict[str, Any]


def _finite(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


WORKTREE = "worktree"  # the commit of the params file's baselines not committed yet


def _baselines(store: Store, commit: str, date: str) -> list[Point]:
    return [Point(target=record.target, case=case, device=machine or record.device, commit=commit, date=date,
                  time_us=timing.median_us, gbps=timing.gbps, source=PARAMS)
            for record in store.records.values() if record.baseline is not None
            for machine, case, timing in record.baseline.all_timings()]


def params_history(params_path: Path) -> list[Point]:
    """The baselines of every commit that changed the params file, then those of the file as it is
    where that differs from HEAD (a baseline just recorded, a tune just written: the last run), as
    the commit ``WORKTREE``; outside git, the file as it is."""
    folder = params_path.parent
    top = git.output(folder, "rev-parse", "--show-toplevel")
    points: list[Point] = []
    if top is not None:
        log = git.output(folder, "log", "--format=%H%x09%cI", "--", params_path.name)
        for line in reversed((log or "").splitlines()):  # oldest first: commits of one second keep their order
            commit, _, date = line.partition("\t")
            text = git.file_at(Path(top.strip()), commit, params_path)
            if text is None:
                continue
            try:
                store = Store.from_text(text, params_path)
            except StoreError:
                continue  # a damaged version in the history: left out, the others still chart
            points += _baselines(store, commit, date)
    if params_path.is_file() and (top is None or git.differs_from_head(Path(top.strip()), params_path)):
        try:
            store = Store.load(params_path)
        except StoreError:
            return points
        stamp = _dt.datetime.fromtimestamp(params_path.stat().st_mtime, _dt.timezone.utc).isoformat()
        points += _baselines(store, WORKTREE, max([stamp, *(p.date for p in points)]))
    return points


def _benchmark_files(paths: Iterable[Path]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files.extend(sorted(p.rglob("*.json")))
        elif p.is_file():
            files.append(p)
        else:
            raise KtuneError(f"no benchmark JSON at {p}", hint="give files or folders written by "
                                                              "--ktune-benchmark-json")
    return files


def benchmark_history(paths: Iterable[Path]) -> list[Point]:
    """The timings of stored benchmark JSON files (others, and files of other tools, are left out)."""
    points: list[Point] = []
    for path in _benchmark_files(paths):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict) or not str(doc.get("generator", "")).startswith("pytest-ktune"):
            continue
        commit = doc.get("commit_info") or {}
        date = str(commit.get("time") or doc.get("datetime") or "")
        for bench in doc.get("benchmarks") or []:
            info = bench.get("extra_info") or {}
            time_us = _finite(info.get("time_us"))
            if time_us is None or not info.get("target"):
                continue
            device = f"{info.get('device') or '?'} [{info.get('backend') or '?'}]"
            points.append(Point(target=str(info["target"]), case=str(info.get("case", "")), device=device,
                                commit=str(commit.get("id") or ""), date=date, time_us=time_us,
                                gbps=_finite(info.get("gbps")), copy_fraction=_finite(info.get("copy_fraction")),
                                peak_fraction=_finite(info.get("peak_fraction")), source=BENCHMARK))
    return points


def _svg_body(path: Path) -> str:
    """An SVG file's ``<svg>`` element, for inlining (its XML declaration dropped)."""
    text = path.read_text(encoding="utf-8")
    start = text.find("<svg")
    return text[start:] if start >= 0 else ""


def study_plots(reports: Path) -> list[StudyPlots]:
    """The plots of every study whose report is under ``reports`` (``.ktune/reports``)."""
    out: list[StudyPlots] = []
    for index in sorted(reports.glob("*.json")) if reports.is_dir() else []:
        try:
            data = json.loads(index.read_text())
            history = reports / str(data["history"])
            importance = reports / str(data["importance"]) if data.get("importance") else None
            out.append(StudyPlots(target=str(data["target"]), device=str(data["device"]), key=dict(data["key"]),
                                  history_svg=_svg_body(history),
                                  importance_svg=_svg_body(importance) if importance and importance.is_file()
                                  else None,
                                  best_us=_finite(data.get("best_us")),
                                  best_params=dict(data.get("best_params") or {})))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a report of an earlier version, or half written: left out
    return out


def ordered_commits(points: Sequence[Point]) -> list[str]:
    """The commits of ``points``, oldest first (by date, then by first appearance)."""
    first: dict[str, tuple[str, int]] = {}
    for i, p in enumerate(points):
        if p.commit not in first or p.date < first[p.commit][0]:
            first[p.commit] = (p.date, first.get(p.commit, (p.date, i))[1])
    return sorted(first, key=lambda c: first[c])
