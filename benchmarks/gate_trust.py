"""Whether the merge gate's verdict depends on where and when its baselines were recorded.

``slowed``: a copy of the project is committed to a fresh git repository (commit "base"); then, for
each recorded landscape given, the record of its key is switched to a configuration the landscape
times xLOW-xHIGH slower than the one in use (commit "slowed", the baselines left as they are). The
gate then runs RUNS times on the performance items of those targets, every case of them: the
slowed key's cases must fail (a regression confirmed by same-run A/B), the others (controls:
unchanged records) must not. ``--against baseline`` judges against the params file's baselines
(recorded on another machine and day, or on this one); ``--against base`` runs with
``--ktune-base HEAD~1``, which needs no baseline at all.

``cost``: the whole project's gate warm, unchanged and then with the one record of the first
landscape changed (``--ktune-base HEAD~1``), side by side: what a pull request that touches one
kernel pays.

Usage:
  python3 benchmarks/gate_trust.py slowed --project example_project --backend cuda --runs 10 \
      --against baseline|base --landscape L1.json.gz [--landscape L2 ...] --out FILE.json
  python3 benchmarks/gate_trust.py cost --project example_project --backend cuda --landscape L1 --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as common

common.add_repo_to_path()

from pytest_ktune.core.keys import key_string  # noqa: E402
from pytest_ktune.lab.landscape import load  # noqa: E402


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "KTUNE_PARAMS", "CUPY_CACHE_DIR")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def committed_copy(project: Path) -> Path:
    """The project copied into a fresh git repository, committed as it is."""
    work = Path(tempfile.mkdtemp(prefix="ktune-gate-trust-"))
    copy = work / project.name
    shutil.copytree(project, copy, ignore=shutil.ignore_patterns(".ktune", "__pycache__"))
    common.commit_project(copy, "base")
    return copy


def slow_records(copy: Path, landscapes: list[Path], low: float, high: float) -> list[dict[str, Any]]:
    """Each landscape's key switched to a configuration it times xlow-xhigh slower than the one in use
    (the median such one), committed as "slowed"; what was changed, per landscape."""
    params_file = copy / "ktune-params.json"
    data = json.loads(params_file.read_text())
    changed = []
    for path in landscapes:
        land = load(path)
        rec = next(r for r in data["records"] if r["target"] == land.target
                   and key_string(r["key"]) == key_string(land.key)
                   and r["device"].startswith(land.device.get("name", "")))
        times = {json.dumps(p.params, sort_keys=True): sum(c.median_us for c in p.cases) for p in land.points
                 if p.state == "ok"}
        base = times[json.dumps(rec["params"], sort_keys=True)]
        slow = sorted((t / base, k) for k, t in times.items() if low <= t / base <= high)
        if not slow:
            raise SystemExit(f"no configuration of {land.label} is x{low}-x{high} of {rec['params']}")
        ratio, chosen = slow[len(slow) // 2]
        changed.append({"landscape": path.name, "target": land.target, "key": land.key, "in_use": rec["params"],
                        "slowed_to": json.loads(chosen), "landscape_ratio": round(ratio, 4),
                        "cases": [c.case_id for c in land.points[0].cases]})
        rec["params"] = json.loads(chosen)
    params_file.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    common.git(copy, "commit", "-qam", "slowed")
    return changed


ROW = re.compile(r"^(\S+)\s{2,}(\S+)\s{2,}.*\s{2,}(ok|faster|drift|no baseline|REGRESSION|unjudged|missing|"
                 r"recorded)$")


def gate(copy: Path, backend: str, extra: list[str]) -> dict[str, Any]:
    """One gate run: its wall time, exit status, and each case's verdict from the summary table."""
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--ktune", f"--ktune-backend={backend}",
           str(copy), "-q", "-rf", *extra]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=copy.parent, env=_env(), capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    out = done.stdout + done.stderr
    verdicts = {}
    for line in out.splitlines():
        m = ROW.match(line.rstrip())
        if m:
            verdicts[f"{m.group(1)}[{m.group(2)}]"] = m.group(3)
    return {"command": " ".join(cmd), "returncode": done.returncode, "wall_s": round(wall, 2), "verdicts": verdicts,
            "ab_confirmed": out.count("regressed: same-run A/B"), "tail": out[-2500:]}


def cmd_slowed(args: argparse.Namespace) -> dict[str, Any]:
    copy = committed_copy(args.project)
    changed = slow_records(copy, args.landscape, args.low, args.high)
    names = sorted({c["target"].rsplit("::", 1)[-1] for c in changed})
    select = f"perf and ({' or '.join(names)})"
    extra = ["-k", select] + (["--ktune-base", "HEAD~1"] if args.against == "base" else [])
    slowed_cases = {f"{c['target'].rsplit('::', 1)[-1]}[{case}]" for c in changed for case in c["cases"]}
    runs = []
    caught = {case: 0 for case in sorted(slowed_cases)}
    false_alarms = 0
    control_item_runs = 0
    for i in range(args.runs):
        r = gate(copy, args.backend, extra)
        for case, verdict in r["verdicts"].items():
            failed = verdict in ("REGRESSION", "unjudged", "missing")
            if case in slowed_cases:
                caught[case] += verdict == "REGRESSION"
            else:
                control_item_runs += 1
                false_alarms += failed
        print(f"{args.against} run {i}: rc {r['returncode']}, {r['wall_s']} s, slowed verdicts "
              f"{ {c: r['verdicts'].get(c) for c in sorted(slowed_cases)} }", flush=True)
        runs.append(r)
    return {"kind": "slowed", "against": args.against, "select": select, "changed": changed, "runs": runs,
            "caught": caught, "control_item_runs": control_item_runs, "false_alarms": false_alarms}


def cmd_cost(args: argparse.Namespace) -> dict[str, Any]:
    copy = committed_copy(args.project)
    first = gate(copy, args.backend, [])  # cold: compiles everything, fills the cache
    unchanged = gate(copy, args.backend, ["--ktune-base", "HEAD"])
    changed = slow_records(copy, args.landscape[:1], args.low, args.high)
    one = gate(copy, args.backend, ["--ktune-base", "HEAD~1"])
    for label, r in (("cold", first), ("warm, unchanged", unchanged), ("warm, one target changed", one)):
        print(f"{label}: {r['wall_s']} s, rc {r['returncode']}", flush=True)
    return {"kind": "cost", "changed": changed, "cold": first, "warm_unchanged": unchanged,
            "warm_one_changed": one, "ratio": round(one["wall_s"] / unchanged["wall_s"], 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("slowed", "cost"):
        p = sub.add_parser(name)
        p.add_argument("--project", type=Path, default=common.ROOT / "example_project")
        p.add_argument("--backend", default="cuda")
        p.add_argument("--landscape", type=Path, action="append", required=True)
        p.add_argument("--low", type=float, default=1.08)
        p.add_argument("--high", type=float, default=1.10)
        p.add_argument("--out", type=Path, required=True)
    sub.choices["slowed"].add_argument("--runs", type=int, default=10)
    sub.choices["slowed"].add_argument("--against", choices=("baseline", "base"), default="baseline")
    args = ap.parse_args()
    result = cmd_slowed(args) if args.cmd == "slowed" else cmd_cost(args)
    result.update(command=common.command_line(), date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    if args.cmd == "slowed":
        print(f"caught {result['caught']} of {args.runs} runs each; false alarms {result['false_alarms']} in "
              f"{result['control_item_runs']} control item-runs")
    else:
        print(f"one changed target / unchanged, warm: x{result['ratio']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
