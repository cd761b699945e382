"""What the merge gate costs and whether it can be trusted, on the example project.

``cost``: ``pytest --ktune`` on a fresh copy of a project, cold (no compile cache) and then warm, each
run in its own process tree: wall time, the peak resident memory of the whole tree (pytest and its
measurement process, sampled every 0.1 s with psutil where it is installed, else the largest single
process's), seconds per phase (from the JUnit report: correctness items, performance items, the rest:
start-up, collection, the summary), and the items' outcomes.

``slowed``: a configuration ×LOW–×HIGH slower than the one in use for a key, picked from a recorded
landscape, written as that key's parameters (its baseline stays); the gate is run RUNS times on that
key's cases and must fail every time, by a regression confirmed A/B.

``--site DIR`` runs another build of pytest-ktune (a wheel installed with ``pip --target DIR``):
the same benchmark, side by side, for a before/after table.

Usage:
  python3 benchmarks/gate_cost.py cost --project example_project --backend cuda [--runs N] [--label L]
      [--site DIR] [-k EXPR] [--without GLOB] [--devices all|0,1,...] --out FILE.json
  python3 benchmarks/gate_cost.py slowed --project example_project --backend cuda
      --landscape benchmarks/results/landscapes/X.json.gz --runs 10 --out FILE.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import _common as common

common.add_repo_to_path()

from pytest_ktune.core.keys import key_string  # noqa: E402
from pytest_ktune.lab.landscape import load  # noqa: E402


def _env(site: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "KTUNE_PARAMS", "CUPY_CACHE_DIR")}
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Peak:
    """The peak resident memory of a process and all its descendants, sampled every 0.1 s."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self.sampled = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            import psutil
        except ImportError:
            return
        self.sampled = True
        while not self._stop.is_set():
            try:
                root = psutil.Process(self.pid)
                total = sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
                self.peak = max(self.peak, total)
            except psutil.Error:
                pass
            self._stop.wait(0.1)

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def gate_run(project: Path, backend: str, site: Path | None, extra: list[str], junit: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--ktune", f"--ktune-backend={backend}",
           str(project), "-q", f"--ktune-junit={junit}", *extra]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=project.parent, env=_env(site), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    with Peak(proc.pid) as peak:
        out, _ = proc.communicate()
    wall = time.perf_counter() - t0
    children_max = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    phases = {"correct": 0.0, "perf": 0.0}
    outcomes: dict[str, int] = {}
    if junit.exists():
        for tc in ET.parse(junit).getroot().iter("testcase"):
            kind = (tc.get("name") or "").split("[", 1)[0]
            if kind in phases:
                phases[kind] += float(tc.get("time") or 0)
            state = next((c.tag for c in tc if c.tag in ("failure", "error", "skipped")), "passed")
            outcomes[state] = outcomes.get(state, 0) + 1
    return {"command": " ".join(cmd), "returncode": proc.returncode, "wall_s": round(wall, 2),
            "peak_rss_bytes": peak.peak if peak.sampled else children_max,
            "peak_rss_how": "process tree, sampled" if peak.sampled else "largest single process",
            "phase_s": {"correctness items": round(phases["correct"], 2), "performance items": round(phases["perf"], 2),
                        "start-up, collection and summary": round(wall - phases["correct"] - phases["perf"], 2)},
            "outcomes": outcomes, "tail": out[-3000:]}


def cmd_cost(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="ktune-gate-cost-"))
    project = work / args.project.name
    shutil.copytree(args.project, project, ignore=shutil.ignore_patterns(".ktune", "__pycache__"))
    dropped = sorted(str(f.relative_to(project)) for pattern in args.without for f in project.glob(pattern))
    for name in dropped:  # the project as it would be without those files (their imports too)
        (project / name).unlink()
    extra = ["-k", args.k] if args.k else []
    if args.devices:
        extra.append(f"--ktune-devices={args.devices}")  # the gate over several devices: 0, 0,1 or all
    runs = []
    for i in range(args.runs):
        label = "cold" if i == 0 else "warm"
        r = gate_run(project, args.backend, args.site, extra, work / f"junit-{i}.xml")
        r["run"] = f"{label} {i}"
        print(f"{args.label} {r['run']}: {r['wall_s']} s, peak {r['peak_rss_bytes'] / 2**30:.2f} GiB, "
              f"{r['outcomes']}, rc {r['returncode']}, phases {r['phase_s']}", flush=True)
        runs.append(r)
    return {"kind": "cost", "label": args.label, "select": args.k, "without": dropped, "runs": runs}


def cmd_slowed(args: argparse.Namespace) -> dict[str, Any]:
    land = load(args.landscape)
    params_file = args.project / "ktune-params.json"
    data = json.loads(params_file.read_text())
    tid = land.target
    rec = next(r for r in data["records"] if r["target"] == tid and key_string(r["key"]) == key_string(land.key)
               and r["device"].startswith(land.device.get("name", "")))
    in_use = rec["params"]
    times = {json.dumps(p.params, sort_keys=True): sum(c.median_us for c in p.cases) for p in land.points
             if p.state == "ok"}
    base = times[json.dumps(in_use, sort_keys=True)]
    slow = sorted(((t / base, k) for k, t in times.items() if args.low <= t / base <= args.high))
    if not slow:
        raise SystemExit(f"no configuration of {land.label} is x{args.low}-x{args.high} of {in_use}")
    ratio, chosen = slow[len(slow) // 2]
    work = Path(tempfile.mkdtemp(prefix="ktune-gate-slowed-"))
    project = work / args.project.name
    shutil.copytree(args.project, project, ignore=shutil.ignore_patterns(".ktune", "__pycache__"))
    for r in data["records"]:
        if r is rec:
            r["params"] = json.loads(chosen)
    (project / "ktune-params.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    case_ids = [c.case_id for c in land.points[0].cases]
    select = f"{land.target.rsplit('::', 1)[-1]} and perf and ({' or '.join(case_ids)})"
    runs = []
    for i in range(args.runs):
        r = gate_run(project, args.backend, args.site, ["-k", select, "-rf"], work / f"junit-{i}.xml")
        r["caught"] = r["returncode"] == 1 and "regressed" in r["tail"] and "confirmed by same-run A/B" in r["tail"]
        print(f"slowed run {i}: caught={r['caught']} rc {r['returncode']} {r['wall_s']} s", flush=True)
        runs.append(r)
    return {"kind": "slowed", "landscape": str(args.landscape), "target": tid, "key": land.key, "in_use": in_use,
            "slowed_to": json.loads(chosen), "landscape_ratio": round(ratio, 4), "select": select, "runs": runs,
            "caught": sum(r["caught"] for r in runs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("cost", "slowed"):
        p = sub.add_parser(name)
        p.add_argument("--project", type=Path, default=common.ROOT / "example_project")
        p.add_argument("--backend", default="cuda")
        p.add_argument("--site", type=Path, default=None, help="a folder with another build of pytest-ktune")
        p.add_argument("--runs", type=int, default=2)
        p.add_argument("--out", type=Path, required=True)
    sub.choices["cost"].add_argument("-k", default=None, help="pytest's -k: a part of the project")
    sub.choices["cost"].add_argument("--label", default="after")
    sub.choices["cost"].add_argument("--without", action="append", default=[], metavar="GLOB",
                                     help="files of the project (a glob under it) left out of the copy")
    sub.choices["cost"].add_argument("--devices", default=None, help="--ktune-devices: all, or indices like 0,1")
    sub.choices["slowed"].add_argument("--landscape", type=Path, required=True)
    sub.choices["slowed"].add_argument("--low", type=float, default=1.08)
    sub.choices["slowed"].add_argument("--high", type=float, default=1.10)
    args = ap.parse_args()
    args.project = args.project.resolve()
    result = cmd_cost(args) if args.cmd == "cost" else cmd_slowed(args)
    result.update(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  host=platform.node(), command=" ".join(sys.argv), versions=common.versions())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
