"""Tuning trials per minute on one device against several (``ktune tune --devices``).

Each run tunes one key of one example target with ``ktune tune`` in a fresh copy of
``example_project`` (no study, no compile cache, no params file), on the devices given, and reads the
study back: the trials timed, the search's window (the first timed trial's start to the last one's
end) and the command's wall time. Trials per minute are the timed trials over the window; the wall
time adds the start-up (the workers' start, the warm starts' listing) and the decision's A/B. Runs of
each device list alternate, ``--rounds`` times, so that a change in the host's load falls on both.

On a CPU, ``POCL_DEVICES="pthread pthread"`` makes PoCL show two devices; they share the host's cores,
so this measures the scheduling's overhead and overlap (compiles beside timings), not the speed-up of
two GPUs.

Usage:
  POCL_DEVICES="pthread pthread" python3 benchmarks/tune_devices.py --backend opencl \
      --target silu_and_mul --key T=16 --key dtype=float16 --trials 16 --devices 0 --devices 0,1 \
      --rounds 2 --out benchmarks/results/DIR/tune_devices.json
  python3 benchmarks/tune_devices.py --backend cuda --devices 0 --devices 0,1 --devices all ...
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as common

common.add_repo_to_path()


def _window(root: Path) -> tuple[int, float, dict[str, int]]:
    """The study's timed trials, the seconds from the first one's start to the last one's end, and how
    many each device timed."""
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage
    from optuna.trial import TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = JournalStorage(JournalFileBackend(str(root / ".ktune" / "studies.journal")))
    (summary,) = optuna.get_all_study_summaries(storage, include_best_trial=False)
    trials = [t for t in optuna.load_study(study_name=summary.study_name, storage=storage).trials
              if t.state == TrialState.COMPLETE and "duplicate" not in t.user_attrs]
    starts = [t.datetime_start for t in trials if t.datetime_start]
    ends = [t.datetime_complete for t in trials if t.datetime_complete]
    per_device: dict[str, int] = {}
    for t in trials:
        name = str(t.user_attrs.get("device", "the one device"))
        per_device[name] = per_device.get(name, 0) + 1
    return len(trials), (max(ends) - min(starts)).total_seconds(), per_device


def run_once(args: argparse.Namespace, devices: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ktune-tune-devices-") as tmp:
        root = Path(tmp) / "project"
        shutil.copytree(common.ROOT / "example_project", root, ignore=shutil.ignore_patterns(".ktune", "__pycache__"))
        (root / "ktune-params.json").unlink()
        cmd = [sys.executable, "-m", "pytest_ktune.cli", "tune", args.target, "--root", str(root),
               "--backend", args.backend, "--trials", str(args.trials), "--seed", str(args.seed),
               "--write", "none", "--devices", devices, *(f"--key={k}" for k in args.key)]
        env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "KTUNE_PARAMS")}
        env["PYTHONPATH"] = os.pathsep.join([str(common.ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        t0 = time.monotonic()
        done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, check=False, timeout=900)
        wall = time.monotonic() - t0
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        timed, window, per_device = _window(root)
        return {"devices": devices, "timed": timed, "window_s": round(window, 3), "wall_s": round(wall, 3),
                "trials_per_min": round(60.0 * timed / window, 2) if window > 0 else None,
                "per_device": per_device,
                # the throwaway copy's folder named as the project's root: no path of this host in a result
                "summary": [ln.replace(str(root), "$PROJECT") for ln in done.stdout.splitlines() if " best " in ln]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="opencl")
    ap.add_argument("--target", default="silu_and_mul")
    ap.add_argument("--key", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--devices", action="append", required=True, help="a device list to run (repeat)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    load_before = os.getloadavg()
    runs = []
    for r in range(args.rounds):
        for devices in args.devices:
            one = run_once(args, devices)
            one["round"] = r
            print(f"round {r} --devices {devices}: {one['timed']} trials in {one['window_s']:.1f} s "
                  f"({one['trials_per_min']} per minute; wall {one['wall_s']:.1f} s) {one['per_device']}", flush=True)
            runs.append(one)
    summary = {}
    for devices in args.devices:
        mine = [r for r in runs if r["devices"] == devices]
        timed = sum(r["timed"] for r in mine)
        window = sum(r["window_s"] for r in mine)
        summary[devices] = {"trials_per_min": round(60.0 * timed / window, 2), "runs": len(mine),
                            "mean_wall_s": round(sum(r["wall_s"] for r in mine) / len(mine), 2)}
    first = summary[args.devices[0]]["trials_per_min"]
    for devices, s in summary.items():
        s["vs_first"] = round(s["trials_per_min"] / first, 3)
        print(f"--devices {devices}: {s['trials_per_min']} trials per minute (x{s['vs_first']} of "
              f"--devices {args.devices[0]}), mean wall {s['mean_wall_s']} s over {s['runs']} runs")
    out = {"command": common.command_line(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
           "host": {"machine": platform.machine(), "node": platform.node(), "cpus": os.cpu_count(),
                    "cpu": common.cpu_model(), "python": platform.python_version(),
                    # the 1-, 5- and 15-minute load averages: the host's cores are shared with other work
                    "load_before": [round(x, 2) for x in load_before],
                    "load_after": [round(x, 2) for x in os.getloadavg()]},
           "env": {"POCL_DEVICES": os.environ.get("POCL_DEVICES", "")}, "runs": runs, "summary": summary}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
