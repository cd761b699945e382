"""Liger-Kernel's own Triton RMSNorm, tuned by pytest-ktune and compared with Liger's heuristic, in one run.

For each shape of ``benchmarks/liger_rmsnorm.py`` (Liger's ``_rms_norm_forward_kernel``, imported from the
package, its ``BLOCK_SIZE`` and ``num_warps`` as the space):

1. every feasible configuration is timed in the tuner's own worker (``bench_tuner.measure_landscape``: the
   same verification and timing as the tuner's, in a shuffled order): the exhaustive optimum, which is what
   ``@triton.autotune`` over the same configurations searches for, at the cost of every one of them;
2. the tuner (``tune_key``, the default sampler) searches the key with a budget below the feasible count and
   decides by its own A/B against the target's default;
3. Liger's choice (``calculate_settings``) and the tuned one are read from the same landscape.

Goals, as PASS/MISS lines: tuned <= Liger's choice (within the landscape's noise, 1 %) on every shape, and
found in fewer timed trials than the exhaustive pass. Writes JSON (and a markdown table beside it).

Run: ``python3 benchmarks/triton_liger.py --out benchmarks/results/X/triton_liger.json`` on a GPU. Triton's
interpreter cannot run Liger's kernel (it calls ``eps.to(...)`` on its float arguments, which the interpreter
passes as Python floats), so the smoke test on a CPU runs the same pipeline on the example's Triton RMSNorm,
against the same heuristic: ``TRITON_INTERPRET=1 python3 benchmarks/triton_liger.py --quick --target example
--out DIR/l.json`` (small shapes; its timings are the interpreter's, not a GPU's).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common
import bench_tuner

common.add_repo_to_path()

from pytest_ktune.core.errors import KtuneError  # noqa: E402
from pytest_ktune.core.space import config_key  # noqa: E402
from pytest_ktune.tuner.settings import TuneContext, TuneSettings  # noqa: E402
from pytest_ktune.tuner.tune import tune_key  # noqa: E402

NOISE = 0.01  # tuned within 1 % of Liger's choice counts as "not worse"


def heuristic(hidden: int) -> dict[str, int]:
    """Liger's ``calculate_settings`` for a row of ``hidden`` elements (the package's own, imported)."""
    from liger_kernel.ops.utils import calculate_settings

    block, warps = calculate_settings(hidden)
    return {"BLOCK_SIZE": int(block), "num_warps": int(warps)}


def one_key(choice: bench_tuner.KeyChoice, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    hidden = int(choice.key["H"])
    land = bench_tuner.measure_landscape(choice, "triton", root / ".ktune" / "cache", seed=args.seed,
                                         trial_timeout_s=args.trial_timeout)
    feasible = len(land.feasible)
    liger = choice.target.carry_over(heuristic(hidden))  # the target's default for what Liger does not choose
    liger_s = land.value_of(liger)
    budget = args.trials or max(2, math.ceil(feasible / 2))
    settings = TuneSettings(trials=budget, seed=args.seed, storage=None, trial_timeout_s=args.trial_timeout,
                            timeout_s=args.tune_timeout)
    ctx = TuneContext(root=root, params_path=root / "ktune-params.json", backend="triton", settings=settings,
                      progress=sys.stderr)
    row: dict[str, Any] = {"case": choice.case_id, "key": choice.key, "feasible": feasible,
                           "landscape_error": land.error, "landscape_wall_s": round(land.wall_s, 2),
                           "liger": {"params": liger, "median_us": common.us(liger_s)}}
    opt = land.optimum
    row["optimum"] = {"params": opt.params, "median_us": common.us(opt.value_s)} if opt else None
    row["landscape"] = [p.to_json() for p in land.points if p.status != "constraint"]
    t0 = time.perf_counter()
    try:
        out = tune_key(ctx, choice.target, choice.key, choice.case_indices)
    except KtuneError as exc:
        row["tune"] = {"status": "failed", "error": exc.render()}
        return row
    tuned_s = land.value_of(out.best_params)
    row["tune"] = {"status": "ok", "budget": budget, "timed": out.timed, "infeasible": out.infeasible,
                   "failed": out.failed, "best_params": dict(out.best_params), "best_us_own": out.best_us,
                   "default_us_own": out.default_us, "accepted": out.accepted, "decision": out.decision,
                   "best_us_landscape": common.us(tuned_s), "wall_s": round(time.perf_counter() - t0, 2)}
    row["tuned_over_liger"] = tuned_s / liger_s if tuned_s and liger_s else None
    row["optimum_over_liger"] = opt.value_s / liger_s if opt and opt.value_s and liger_s else None
    row["same_as_liger"] = config_key(out.best_params) == config_key(liger)
    return row


def markdown(rows: list[dict[str, Any]], device: str, interpreted: bool) -> str:
    lines = [f"# A Triton RMSNorm tuned by pytest-ktune against Liger's heuristic ({device})", ""]
    if interpreted:
        lines += ["Triton's interpreter on the CPU: these timings are the interpreter's, not a GPU's.", ""]
    table = []
    for r in rows:
        tune = r.get("tune", {})
        table.append([r["case"], str(r["liger"]["params"]), common.fmt_num(r["liger"]["median_us"]),
                      str(tune.get("best_params", "-")), common.fmt_num(tune.get("best_us_landscape")),
                      common.fmt_num(r.get("tuned_over_liger"), ".3f"),
                      common.fmt_num((r.get("optimum") or {}).get("median_us")),
                      f"{tune.get('timed', '-')} / {r['feasible']}"])
    lines.append(common.md_table(["case", "Liger's choice", "µs", "tuned", "µs", "tuned / Liger", "optimum µs",
                                  "timed / feasible (autotune: all)"], table))
    return "\n".join(lines)


def goals(rows: list[dict[str, Any]]) -> list[str]:
    ratios = [r.get("tuned_over_liger") for r in rows]
    ok = [x is not None and x <= 1 + NOISE for x in ratios]
    fewer = [r.get("tune", {}).get("timed", math.inf) < r["feasible"] for r in rows]
    return [f"{'PASS' if all(ok) and ok else 'MISS'}: tuned <= Liger's choice (+{NOISE:.0%}) on every shape "
            f"({sum(ok)}/{len(ok)})",
            f"{'PASS' if all(fewer) and fewer else 'MISS'}: found in fewer timed trials than autotune's exhaustive "
            f"pass ({sum(fewer)}/{len(fewer)})"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--out", type=Path, required=True, help="the JSON file to write (a .md beside it)")
    p.add_argument("--trials", type=int, default=None, help="the tuner's budget per key (default: half the "
                                                            "feasible configurations)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trial-timeout", type=float, default=60.0)
    p.add_argument("--tune-timeout", type=float, default=120.0)
    p.add_argument("--quick", action="store_true", help="the first shape only (a smoke test)")
    p.add_argument("--target", choices=("liger", "example"), default="liger",
                   help="liger: Liger's own kernel (default); example: the example's Triton RMSNorm, which the "
                        "interpreter can run")
    args = p.parse_args(argv)
    if args.target == "liger":
        import liger_rmsnorm

        target = liger_rmsnorm.liger_rmsnorm
    else:
        from example_project.kernels.triton_rmsnorm import triton_rmsnorm as target
    cases = [target.case_id(c) for c in target.cases]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ktune-liger-") as tmp:
        root = Path(tmp)
        (root / "pytest.ini").write_text("[pytest]\n")
        for case_id in cases[:1] if args.quick else cases:
            (choice,), _ = bench_tuner.choose_keys([target], "triton", f"{target.name}={case_id}")
            print(f"{choice.label}: sweep, then tune", file=sys.stderr, flush=True)
            rows.append(one_key(choice, root, args))
            met = write(args.out, target.name, rows)  # after every shape: a run stopped early keeps what it did
    print("\n".join(met))
    print(f"wrote {common.shown_path(args.out)} and {common.shown_path(args.out.with_suffix('.md'))}")
    return 0


def write(out: Path, name: str, rows: list[dict[str, Any]]) -> list[str]:
    """The rows so far as JSON and markdown; the goals' lines."""
    from pytest_ktune import backends

    dev = backends.create("triton").device
    met = goals(rows)
    data = {"benchmark": "triton_liger", "date": common.now_utc(), "command": common.command_line(),
            "device": dev.name, "device_id": dev.id, "interpreted": dev.interpreted, "versions": common.versions(),
            "target": name, "liger_kernel": _liger_version(), "rows": rows, "goals": met}
    common.write_results(out, data, markdown(rows, f"{name}, {dev.name}", dev.interpreted) + "\n\n" + "\n".join(met))
    return met


def _liger_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("liger-kernel")
    except PackageNotFoundError:
        return os.environ.get("LIGER_KERNEL_VERSION", "unknown")


if __name__ == "__main__":
    raise SystemExit(main())
