"""The ``ktune`` command: tune targets, or join a shared study as a worker, outside pytest."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.names import AUTO, BACKENDS, DEFAULT_SAMPLER, DEFAULT_WRITE, SAMPLERS, WRITE_MODES

if TYPE_CHECKING:
    from pytest_ktune.run.options import RunOptions


def _tune_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", type=Path, default=Path.cwd(),
                   help="the project root: where .ktune/ lives and the params file is looked for (default: .)")
    p.add_argument("--params", default=None, metavar="PATH",
                   help="the params file (default: $KTUNE_PARAMS, else the nearest ktune-params.json at or above "
                        "--root, else one in --root)")
    p.add_argument("--backend", default=AUTO, metavar="NAME",
                   help=f"{' or '.join(BACKENDS)}, a plugin's backend, or {AUTO}: cuda when a GPU is visible, "
                        "else opencl")
    p.add_argument("--trials", type=int, default=40, help="timed trials per key (default 40)")
    p.add_argument("--timeout", type=float, default=None, help="wall-time budget per key, in seconds")
    p.add_argument("--sampler", default=DEFAULT_SAMPLER, metavar="NAME",
                   help=f"the search after the warm starts: {', '.join(SAMPLERS)} or a plugin's (default: bo, a "
                        "Gaussian process over the feasible configurations; grid times every one)")
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
                      help="only keys with no tuned entry yet for this device, or whose entry was tuned on "
                           "another version of the kernel's source")
    tune.add_argument("--write", default=DEFAULT_WRITE, metavar="MODE",
                      help=f"{', '.join(WRITE_MODES)} or a plugin's mode. none: report only (the default); "
                           "file: update the params file in place; patch: a "
                           "git-apply-able patch under .ktune/patches; commit: a new branch ktune/...; pr: commit, "
                           "push and open or update a pull request (GITHUB_TOKEN)")
    tune.add_argument("--no-write", action="store_true", help="the same as --write none")
    tune.add_argument("--agent", action="store_true",
                      help="before searching each target, run the LLM agent loop (OPENAI_BASE_URL, OPENAI_API_KEY); "
                           "a verified, faster template is written with --write file. No model: rule-based templater")
    tune.add_argument("--model", default=None, help="the agent's model (default: $KTUNE_MODEL)")
    tune.add_argument("--agent-iterations", type=int, default=12, help="model turns per target (default 12)")
    _tune_options(tune)
    worker = sub.add_parser("worker", help="join the studies in a shared storage and run trials for them")
    worker.add_argument("--study", action="append", default=None,
                        help="a study name to join (default: every pytest-ktune study in the storage)")
    _tune_options(worker)
    record = sub.add_parser("record", help="time every feasible configuration of targets for a key: a landscape "
                                           "file for replays and bench-search")
    record.add_argument("targets", nargs="*", help="target names (default: all)")
    record.add_argument("--key", action="append", default=[], metavar="NAME=VALUE",
                        help="one dimension of the key to record; repeat for each (e.g. --key T=256)")
    record.add_argument("--extreme-keys", dest="keys", action="store_const", const="extremes", default="given",
                        help="the key of the smallest and of the largest case on this backend")
    record.add_argument("--all-keys", dest="keys", action="store_const", const="all", help="every key")
    record.add_argument("--smallest-key", dest="keys", action="store_const", const="smallest",
                        help="the key of the smallest case (launch-bound)")
    record.add_argument("--largest-key", dest="keys", action="store_const", const="largest",
                        help="the key of the largest case (bandwidth-bound)")
    record.add_argument("--redo", nargs="+", type=Path, default=None, metavar="LANDSCAPE",
                        help="record again the target and key of these landscape files, over them (or into "
                             "--out, a folder): after a kernel changed")
    record.add_argument("--stale-only", action="store_true",
                        help="with --redo: only the landscapes whose target's source or space has changed")
    record.add_argument("--max-bytes", default=None,
                        help="pick keys only among cases with at most this many input bytes (e.g. 64M); on "
                             "backends that check outputs on the host, that check dominates on large shapes")
    record.add_argument("--out", type=Path, default=None,
                        help="a file (.json or .json.gz) or a folder (default: .ktune/landscapes)")
    record.add_argument("--samples", type=int, default=5,
                        help="timing samples per configuration (default 5; 0: the timer's own default)")
    record.add_argument("--root", type=Path, default=Path.cwd(), help="the project root (default: .)")
    record.add_argument("--backend", default=AUTO, choices=(AUTO, *BACKENDS))
    record.add_argument("--trial-timeout", type=float, default=60.0, help="seconds one configuration may take")
    record.add_argument("--seed", type=int, default=0, help="seed of the inputs and of the timing order")
    imp = sub.add_parser("import-landscape", help="read Kernel Tuner cache files (.json, .json.gz) as landscapes")
    imp.add_argument("files", nargs="+", type=Path, help="Kernel Tuner cache files")
    imp.add_argument("--device", default=None,
                     help="the device's name, for files that record none (default: the file's name)")
    imp.add_argument("--out", type=Path, default=None,
                     help="a file (.json or .json.gz) for one cache, or a folder (default: .ktune/landscapes)")
    exp = sub.add_parser("export-landscape", help="write landscapes as Kernel Tuner cache files, for its "
                                                  "strategies and the autotuning methodology")
    exp.add_argument("landscapes", nargs="+", type=Path, help="files written by `ktune record`")
    exp.add_argument("--out", type=Path, default=None,
                     help="a file (.json; .json.gz is gzip, which Kernel Tuner itself does not read) for one "
                          "landscape, or a folder (default: beside each landscape)")
    search = sub.add_parser("bench-search", help="compare search strategies on recorded landscapes")
    search.add_argument("landscapes", nargs="+", type=Path,
                        help="files written by `ktune record`, or Kernel Tuner cache files (no project needed)")
    search.add_argument("--root", type=Path, default=Path.cwd(), help="the project the landscapes were recorded in")
    search.add_argument("--budget", type=int, default=None, help="trials per search (default: min(100, the space))")
    search.add_argument("--seeds", type=int, default=11, help="seeds per strategy (default 11)")
    search.add_argument("--strategies", default=None,
                        help="comma-separated (default: all): ktune, ktune:tpe, bo, random, tpe, gp, cmaes, "
                             "kt:<Kernel Tuner name>")
    search.add_argument("--noise", action="store_true", help="re-sample measurement noise from the recorded spread")
    search.add_argument("--out", type=Path, default=None, help="a folder for bench-search.md, .json and .svg")
    search.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="processes running seeds side by side (default: one per CPU)")
    from pytest_ktune.agent import add_templatize_parser

    add_templatize_parser(sub)
    return ap


def _options(args: argparse.Namespace, *, tune: bool) -> RunOptions:
    """The command's arguments as the options of one run, the same as pytest's (``run.options``)."""
    from pytest_ktune.run.options import RunOptions

    mode = "none" if getattr(args, "no_write", False) else getattr(args, "write", "none")
    return RunOptions(root=args.root.resolve(), params=getattr(args, "params", None), backend=args.backend,
                      seed=args.seed, tune=tune and not getattr(args, "autotune", False),
                      autotune=getattr(args, "autotune", False), trials=args.trials, tune_timeout=args.timeout,
                      sampler=args.sampler, storage=args.storage, write=mode, trial_timeout=args.trial_timeout,
                      agent=getattr(args, "agent", False), model=getattr(args, "model", None),
                      agent_iterations=getattr(args, "agent_iterations", 12),
                      command="ktune " + " ".join(sys.argv[1:]))


def cmd_tune(args: argparse.Namespace) -> int:
    from pytest_ktune import backends
    from pytest_ktune.agent import AGENT_OFF
    from pytest_ktune.core.discover import discover, select
    from pytest_ktune.core.keys import cases_by_key, key_string
    from pytest_ktune.core.store import Store, target_id
    from pytest_ktune.run.extensions import cli_manager
    from pytest_ktune.run.options import build
    from pytest_ktune.run.tuning import Tuning, autotune_choice

    settings = build(_options(args, tune=True), cli_manager().hook)
    assert settings.tune is not None
    root = settings.root
    if settings.agent is not None:
        model = settings.agent.model
        print(f"ktune: agent: model {model.model}" if model else f"ktune: {AGENT_OFF}", file=sys.stderr)
    backend = backends.resolve(settings.backend)
    targets = select(discover(root), args.targets, root)
    if not targets:
        raise KtuneError(f"no @ktune.target found under {root}", hint="run from the project root, or pass --root")
    tuning = Tuning(root=root, params_path=settings.params_path, backend=backend, settings=settings.tune,
                    extensions=settings.extensions, agent=settings.agent, progress=sys.stderr,
                    command=settings.command, write_mode=settings.write_mode)
    store = Store.load(settings.params_path)
    failures = 0
    device_id: str | None = None
    for target in targets:
        if backend not in target.sources:
            print(f"{target.name}: no {backend} source, skipped", file=sys.stderr)
            continue
        for key, cases in cases_by_key(target, backend).values():
            if settings.autotune:
                if device_id is None:  # one backend for the device's name, not one per key
                    device_id = backends.create(backend, settings.extensions.backend).device.id
                choice = autotune_choice(store.find(target_id(target, root), device_id, key), target, backend,
                                         regressed=False)
                if not choice.tune:
                    print(f"{target.name} {key_string(key)}: already {choice.why}, skipped")
                    continue
                if choice.rule == "stale":
                    print(f"{target.name} {key_string(key)}: {choice.why}, tuning again")
            try:
                out = tuning.tune(target, key, tuple(cases))
            except KtuneError as exc:
                failures += 1
                print(f"error: {exc.render()}", file=sys.stderr)
                continue
            if settings.tune.write:
                change = "params file updated" if out.written else "params file unchanged"
            else:
                change = "not written (--no-write)" if args.no_write else f"not written yet (--write {args.write})"
            print(f"{target.name} {key_string(key)}: best {out.best_us:.2f} µs {dict(out.best_params)} "
                  f"after {out.timed} timed trials ({out.infeasible} infeasible, {out.failed} failed); "
                  f"{out.decision}; {change}; report: {out.report}")
    for result in tuning.agents.values():
        print(result.message)
        if result.transcript is not None:
            print(f"  transcript: {result.transcript} ({result.usage})")
        failures += result.status == "error"
    line = tuning.finish()
    if line:
        print(f"ktune: {line}")
    return 1 if failures else 0


def cmd_record(args: argparse.Namespace) -> int:
    from pytest_ktune.lab.record import RecordSettings, parse_bytes, parse_key, run_record

    if args.samples < 0:
        raise KtuneError("--samples must be 0 or more", hint="e.g. --samples 5")
    settings = RecordSettings(samples=args.samples or None, trial_timeout_s=args.trial_timeout, seed=args.seed)
    if args.redo is not None:
        from pytest_ktune.lab.record import run_redo

        if args.targets or args.key or args.keys != "given" or args.max_bytes:
            raise KtuneError("--redo takes its targets and keys from the landscape files",
                             hint="give either --redo FILES or targets and keys, not both")
        if args.out is not None and (args.out.name.endswith(".json") or args.out.name.endswith(".json.gz")):
            raise KtuneError(f"with --redo, --out names a folder, not a file: {args.out}",
                             hint="leave --out out to write over the files")
        run_redo(args.root.resolve(), args.redo, args.backend, out=args.out, settings=settings,
                 stale_only=args.stale_only)
        return 0
    if args.stale_only:
        raise KtuneError("--stale-only goes with --redo", hint="e.g. ktune record --redo landscapes/*.json.gz "
                                                              "--stale-only")
    run_record(args.root.resolve(), args.targets, args.backend, parse_key(args.key), keys=args.keys, out=args.out,
               settings=settings, max_bytes=parse_bytes(args.max_bytes) if args.max_bytes else None)
    return 0


def cmd_bench_search(args: argparse.Namespace) -> int:
    from pytest_ktune.lab.benchsearch import run
    from pytest_ktune.lab.results import BenchSettings
    from pytest_ktune.lab.strategies import DEFAULT_STRATEGIES

    if args.seeds < 1:
        raise KtuneError("--seeds must be 1 or more", hint="e.g. --seeds 11")
    names = tuple(s.strip() for s in args.strategies.split(",") if s.strip()) if args.strategies else None
    settings = BenchSettings(budget=args.budget, seeds=args.seeds, strategies=names or DEFAULT_STRATEGIES,
                             noise=args.noise, jobs=max(1, args.jobs))
    run(args.root.resolve(), args.landscapes, settings, args.out)
    return 0


def _single(out: Path | None, count: int, what: str) -> bool:
    """Whether ``--out`` names one file (and then there must be one input)."""
    single = out is not None and (out.name.endswith(".json") or out.name.endswith(".json.gz"))
    if single and count != 1:
        raise KtuneError(f"--out {out} names one file, but {count} {what} were given", hint="give a folder to --out")
    return single


def cmd_import(args: argparse.Namespace) -> int:
    from pytest_ktune.lab.ktcache import import_cache

    single = _single(args.out, len(args.files), "cache files")
    lands = [import_cache(f, device=args.device) for f in args.files]  # every file checked before one is written
    for path, land in zip(args.files, lands, strict=True):
        stem = path.name.removesuffix(".gz").removesuffix(".json")
        dest = args.out if single else (args.out or Path.cwd() / ".ktune" / "landscapes") / f"{stem}.json.gz"
        land.save(dest)
        failed = len(land.points) - len(land.timed)
        print(f"{land.label} on {land.device_id}: {len(land.points)} configurations, {len(land.timed)} timed, "
              f"{failed} failed or invalid; optimum {land.optimum.value_us:.3f} µs at {dict(land.optimum.params)}; "
              f"wrote {dest}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from pytest_ktune.lab.ktcache import write_cache
    from pytest_ktune.lab.landscape import load

    single = _single(args.out, len(args.landscapes), "landscapes")
    lands = [load(p) for p in args.landscapes]
    for path, land in zip(args.landscapes, lands, strict=True):
        stem = path.name.removesuffix(".gz").removesuffix(".json")
        dest = args.out if single else (args.out or path.parent) / f"{stem}.kt.json"
        write_cache(land, dest)
        failed = len(land.points) - len(land.timed)
        print(f"{land.label}: {len(land.points)} configurations ({failed} failed or infeasible, kept with Kernel "
              f"Tuner's markers); wrote {dest}")
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from pytest_ktune.run.extensions import cli_manager
    from pytest_ktune.run.options import build
    from pytest_ktune.tuner.join import join_studies

    settings = build(_options(args, tune=True), cli_manager().hook).tune
    assert settings is not None
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
        if args.command == "record":
            return cmd_record(args)
        if args.command == "bench-search":
            return cmd_bench_search(args)
        if args.command == "import-landscape":
            return cmd_import(args)
        if args.command == "export-landscape":
            return cmd_export(args)
        if args.command == "templatize":
            from pytest_ktune.agent import run_templatize

            return run_templatize(args)
        return cmd_worker(args)
    except KtuneError as exc:
        print(f"error: {exc.render()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
