"""The lab's commands of ``ktune``: ``record`` (landscapes), ``import-landscape`` and
``export-landscape`` (Kernel Tuner's cache files), ``bench-search`` (search strategies compared on
landscapes). ``pytest_ktune.cli`` adds them to its parser and runs them in the project it found."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.options import Options

COMMANDS = ("record", "import-landscape", "export-landscape", "bench-search")


def add_parsers(sub: Any, project: Any, options: Any) -> None:
    """The lab's subcommands on the ``ktune`` command's subparsers; ``project(parser)`` adds the
    options that say which project a command runs in (``--root``), ``options(parser, *names)`` the
    run's options of those names (``core.options``: the same flags, defaults and sources as a tune's)."""
    record = sub.add_parser("record", help="time every feasible configuration of targets for a key: a landscape "
                                           "file for replays and bench-search")
    record.add_argument("targets", nargs="*", metavar="PATH or TARGET",
                        help="target names, or files and folders of the project as pytest takes them (default: all)")
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
    record.add_argument("--max-bytes", default=None, metavar="BYTES",
                        help="pick keys only among cases with at most this many input bytes (e.g. 64M); on "
                             "backends that check outputs on the host, that check dominates on large shapes")
    record.add_argument("--out", type=Path, default=None, metavar="PATH",
                        help="a file (.json or .json.gz) or a folder (default: .ktune/landscapes)")
    record.add_argument("--samples", type=int, default=5, metavar="N",
                        help="timing samples per configuration (default 5; 0: the timer's own default)")
    project(record)
    options(record, "backend", "trial_timeout")
    record.add_argument("--seed", type=int, default=0, metavar="N",
                        help="seed of the inputs and of the timing order (default 0)")
    imp = sub.add_parser("import-landscape", help="read Kernel Tuner cache files (.json, .json.gz) as landscapes")
    imp.add_argument("files", nargs="+", type=Path, help="Kernel Tuner cache files")
    imp.add_argument("--device", default=None, metavar="NAME",
                     help="the device's name, for files that record none (default: the file's name)")
    imp.add_argument("--out", type=Path, default=None, metavar="PATH",
                     help="a file (.json or .json.gz) for one cache, or a folder (default: .ktune/landscapes)")
    exp = sub.add_parser("export-landscape", help="write landscapes as Kernel Tuner cache files, for its "
                                                  "strategies and the autotuning methodology")
    exp.add_argument("landscapes", nargs="+", type=Path, help="files written by `ktune record`")
    exp.add_argument("--out", type=Path, default=None, metavar="PATH",
                     help="a file (.json; .json.gz is gzip, which Kernel Tuner itself does not read) for one "
                          "landscape, or a folder (default: beside each landscape)")
    search = sub.add_parser("bench-search", help="compare search strategies on recorded landscapes")
    search.add_argument("landscapes", nargs="+", type=Path,
                        help="files written by `ktune record`, or Kernel Tuner cache files (no project needed)")
    project(search)
    search.add_argument("--budget", type=int, default=None, metavar="N",
                        help="trials per search (default: min(100, the space))")
    search.add_argument("--seeds", type=int, default=11, metavar="N", help="seeds per strategy (default 11)")
    search.add_argument("--strategies", default=None, metavar="LIST",
                        help="comma-separated (default: all): ktune, ktune:tpe, bo, random, tpe, gp, cmaes, "
                             "kt:<Kernel Tuner name>")
    search.add_argument("--noise", action="store_true", help="re-sample measurement noise from the recorded spread")
    search.add_argument("--no-priors", dest="priors", action="store_false",
                        help="run ktune and ktune:tpe without device priors and without the records of the "
                             "target's other keys and devices: the default where it knows nothing")
    search.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="a folder for bench-search.md, .json and .svg (default: none; the table only)")
    search.add_argument("--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                        help="processes running seeds side by side (default: one per CPU)")

def run(args: argparse.Namespace, root: Path | None, options: Options | None = None) -> int:
    """Run the lab's command ``args.command`` (in the project at ``root``: record and bench-search;
    record with the run's ``options`` as the ``ktune`` command merged them)."""
    if args.command == "record":
        assert root is not None and options is not None
        return cmd_record(args, root, options)
    if args.command == "bench-search":
        assert root is not None
        return cmd_bench_search(args, root)
    if args.command == "import-landscape":
        return cmd_import_landscape(args)
    return cmd_export_landscape(args)


def cmd_record(args: argparse.Namespace, root: Path, options: Options) -> int:
    from pytest_ktune.core.keys import parse_key
    from pytest_ktune.lab.record import RecordSettings, parse_bytes, run_record

    if args.samples < 0:
        raise KtuneError("--samples must be 0 or more", hint="e.g. --samples 5")
    settings = RecordSettings(samples=args.samples or None, trial_timeout_s=options.trial_timeout, seed=args.seed)
    if args.redo is not None:
        from pytest_ktune.lab.record import run_redo

        if args.names or args.within or args.key or args.keys != "given" or args.max_bytes:
            raise KtuneError("--redo takes its targets and keys from the landscape files",
                             hint="give either --redo FILES or targets and keys, not both")
        if args.out is not None and (args.out.name.endswith(".json") or args.out.name.endswith(".json.gz")):
            raise KtuneError(f"with --redo, --out names a folder, not a file: {args.out}",
                             hint="leave --out out to write over the files")
        run_redo(root, args.redo, options.backend, out=args.out, settings=settings,
                 stale_only=args.stale_only)
        return 0
    if args.stale_only:
        raise KtuneError("--stale-only goes with --redo", hint="e.g. ktune record --redo landscapes/*.json.gz "
                                                              "--stale-only")
    run_record(root, args.names, options.backend, parse_key(args.key), keys=args.keys, out=args.out,
               settings=settings, max_bytes=parse_bytes(args.max_bytes) if args.max_bytes else None,
               within=args.within)
    return 0


def cmd_bench_search(args: argparse.Namespace, root: Path) -> int:
    from pytest_ktune.lab import one_thread_env

    one_thread_env()  # before numpy and torch load (``benchsearch.one_thread``)
    from pytest_ktune.lab.benchsearch import run as bench_search
    from pytest_ktune.lab.results import BenchSettings
    from pytest_ktune.lab.strategies import DEFAULT_STRATEGIES

    if args.seeds < 1:
        raise KtuneError("--seeds must be 1 or more", hint="e.g. --seeds 11")
    names = tuple(s.strip() for s in args.strategies.split(",") if s.strip()) if args.strategies else None
    settings = BenchSettings(budget=args.budget, seeds=args.seeds, strategies=names or DEFAULT_STRATEGIES,
                             noise=args.noise, jobs=max(1, args.jobs), priors=args.priors)
    bench_search(root, args.landscapes, settings, args.out)
    return 0



def _single(out: Path | None, count: int, what: str) -> bool:
    """Whether ``--out`` names one file (and then there must be one input)."""
    single = out is not None and (out.name.endswith(".json") or out.name.endswith(".json.gz"))
    if single and count != 1:
        raise KtuneError(f"--out {out} names one file, but {count} {what} were given", hint="give a folder to --out")
    return single


def cmd_import_landscape(args: argparse.Namespace) -> int:
    from pytest_ktune.lab.ktcache import device_note, import_cache

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
        note = device_note(land)
        if note:
            print(f"  note: {note}")
    return 0


def cmd_export_landscape(args: argparse.Namespace) -> int:
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
