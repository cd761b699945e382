"""The ``ktune`` command: tune targets, or join a shared study as a worker, outside pytest."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ._errors import KtuneError


def _tune_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", type=Path, default=Path.cwd(),
                   help="the project root: where ktune-params.json and .ktune/ live (default: .)")
    p.add_argument("--backend", default="auto", choices=("auto", "cuda", "opencl"),
                   help="auto: cuda when a GPU is visible, else opencl")
    p.add_argument("--trials", type=int, default=40, help="timed trials per key (default 40)")
    p.add_argument("--timeout", type=float, default=None, help="wall-time budget per key, in seconds")
    p.add_argument("--sampler", default="tpe", choices=("tpe", "random", "grid", "cmaes", "gp"))
    p.add_argument("--storage", default=None,
                   help="an Optuna storage URL (e.g. postgresql://...) shared by several workers; "
                        "default: a journal file under .ktune/")
    p.add_argument("--seed", type=int, default=None, help="seed of the sampler and of the inputs")
    p.add_argument("--trial-timeout", type=float, default=60.0,
                   help="seconds one candidate may take, compile included, before its worker is killed")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ktune", description="Tune @ktune.target kernels outside pytest.")
    sub = ap.add_subparsers(dest="command", required=True)
    tune = sub.add_parser("tune", help="tune the named targets (default: all) for every key of their cases")
    tune.add_argument("targets", nargs="*", help="target names, or file::name as the params file writes them")
    tune.add_argument("--autotune", action="store_true",
                      help="only keys with no tuned entry yet for this device")
    tune.add_argument("--write", default="none", choices=("none", "file", "patch", "commit", "pr"),
                      help="none: report only (the default); file: update ktune-params.json in place; patch: a "
                           "git-apply-able patch under .ktune/patches; commit: a new branch ktune/...; pr: commit, "
                           "push and open or update a pull request (GITHUB_TOKEN)")
    tune.add_argument("--no-write", action="store_true", help="the same as --write none")
    _tune_options(tune)
    worker = sub.add_parser("worker", help="join the studies in a shared storage and run trials for them")
    worker.add_argument("--study", action="append", default=None,
                        help="a study name to join (default: every pytest-ktune study in the storage)")
    _tune_options(worker)
    return ap


def _settings(args: argparse.Namespace, *, write: bool) -> object:
    from ._tuner import TuneSettings

    return TuneSettings(trials=args.trials, timeout_s=args.timeout, sampler=args.sampler, storage=args.storage,
                        seed=args.seed, trial_timeout_s=args.trial_timeout, write=write)


def cmd_tune(args: argparse.Namespace) -> int:
    from . import backends
    from ._discover import discover, select
    from ._store import Store, key_string, target_id
    from ._tuner import TuneContext, TuneSettings, cases_by_key, tune_key

    root = args.root.resolve()
    mode = "none" if args.no_write else args.write
    settings = _settings(args, write=mode == "file")
    assert isinstance(settings, TuneSettings)
    settings.check()
    backend = backends.resolve(args.backend)
    targets = select(discover(root), args.targets, root)
    if not targets:
        raise KtuneError(f"no @ktune.target found under {root}", hint="run from the project root, or pass --root")
    ctx = TuneContext(root=root, params_path=root / "ktune-params.json", backend=backend, settings=settings,
                      progress=sys.stderr)
    store = Store.load(ctx.params_path)
    failures = 0
    outcomes = []
    for target in targets:
        if backend not in target.sources:
            print(f"{target.name}: no {backend} source, skipped", file=sys.stderr)
            continue
        for key, cases in cases_by_key(target, backend).values():
            if args.autotune:
                device = backends.create(backend).device.id
                rec = store.find(target_id(target, root), device, key)
                if rec is not None and rec.tuned is not None:
                    print(f"{target.name} {key_string(key)}: already tuned on {rec.tuned.date}, skipped")
                    continue
            try:
                out = tune_key(ctx, target, key, cases)
            except KtuneError as exc:
                failures += 1
                print(f"error: {exc.render()}", file=sys.stderr)
                continue
            outcomes.append(out)
            if settings.write:
                change = "params file updated" if out.written else "params file unchanged"
            else:
                change = "not written (--no-write)" if args.no_write else f"not written yet (--write {mode})"
            print(f"{target.name} {key_string(key)}: best {out.best_us:.2f} µs {dict(out.best_params)} "
                  f"after {out.timed} timed trials ({out.infeasible} infeasible, {out.failed} failed); "
                  f"{out.decision}; {change}; report: {out.report}")
    if outcomes:
        from ._deliver import deliver

        copy_bw = None
        if mode in ("patch", "commit", "pr") and any(o.changes for o in outcomes):
            copy_bw = backends.create(backend).copy_bandwidth()
        print("ktune: " + deliver(mode, root=root, params_path=ctx.params_path, outcomes=outcomes,
                                  device=outcomes[0].device, copy_bandwidth=copy_bw,
                                  command="ktune " + " ".join(sys.argv[1:])))
    return 1 if failures else 0


def cmd_worker(args: argparse.Namespace) -> int:
    from ._tuner import TuneSettings, join_studies

    settings = _settings(args, write=False)
    assert isinstance(settings, TuneSettings)
    if not args.storage:
        raise KtuneError("a worker joins a shared study, so it needs --storage",
                         hint="pass the same --storage URL as the `ktune tune` it helps")
    done = join_studies(args.root.resolve(), settings, args.study, backend=args.backend)
    print(f"worker {os.getpid()}: {done} timed trials")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "tune":
            return cmd_tune(args)
        return cmd_worker(args)
    except KtuneError as exc:
        print(f"error: {exc.render()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
