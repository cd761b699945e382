"""The ``ktune`` command: tune targets, join a shared study as a worker, record landscapes, export the tuned
parameters for code built ahead of time; outside pytest."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.names import AUTO, BACKENDS

if TYPE_CHECKING:
    from pytest_ktune.core.target import Target
    from pytest_ktune.report.results import ItemOutcome
    from pytest_ktune.run.options import RunOptions


_SHARED = ("params", "backend", "trials", "tune_timeout", "sampler", "storage", "seed", "trial_timeout")


def _add(p: argparse.ArgumentParser, *names: str) -> None:
    """The options of pytest's ``--ktune-NAME`` as ``--NAME``, with the same meaning and help (run.config);
    each None when not given, so that the environment and the project's files can fill it in."""
    from pytest_ktune.run.config import BY_NAME, default_text

    for name in names:
        o = BY_NAME[name]
        where = f"{o.flag} under pytest" + (f"; env: {o.env_name}" if o.env else "") + f"; file: {o.name}"
        text = (o.help if o.kind is bool else f"{o.help} (default: {default_text(o)})") + f" [{where}]"
        aliases = ("--timeout",) if name == "tune_timeout" else ()  # its name before it matched pytest's
        if o.kind is bool:
            p.add_argument(o.cli_flag, *aliases, dest=name, action="store_true", default=None,
                           help=text.replace("%", "%%"))
        else:
            convert: Callable[[str], Any] = o.kind
            p.add_argument(o.cli_flag, *aliases, dest=name, default=None, metavar=o.metavar, type=convert,
                           help=text.replace("%", "%%"))


def _tune_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", type=Path, default=Path.cwd(),
                   help="the project root: where .ktune/ lives, and where the params file, pytest's ini file "
                        "and pyproject.toml's [tool.ktune] are looked for (default: .)")
    _add(p, *_SHARED)


def _parser() -> argparse.ArgumentParser:
    from pytest_ktune.core.version import __version__

    ap = argparse.ArgumentParser(prog="ktune", description="Tune @ktune.target kernels outside pytest.")
    ap.add_argument("--version", action="version", version=f"pytest-ktune {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    tune = sub.add_parser("tune", help="tune the named targets (default: all) for every key of their cases")
    tune.add_argument("targets", nargs="*", help="target names, or file::name as the params file writes them")
    _add(tune, "autotune", "write")
    tune.add_argument("--no-write", action="store_true", help="the same as --write none")
    _add(tune, "agent", "model", "agent_iterations", "agent_wall", "agent_memory", "agent_tools", "junit")
    tune.add_argument("--key", action="append", default=[], metavar="NAME=VALUE",
                      help="tune only the keys with this dimension (repeat for more: --key T=64 --key H=4096); "
                           "default: every key of the targets' cases")
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
    report = sub.add_parser("report", help="one self-contained HTML page of the project: each kernel's time across "
                                           "commits, and its tuning studies' plots")
    report.add_argument("--root", type=Path, default=Path.cwd(), help="the project root (default: .)")
    _add(report, "params")
    report.add_argument("--history", nargs="*", type=Path, default=[], metavar="PATH",
                        help="benchmark JSON files (--ktune-benchmark-json), or folders of them, to chart beside the "
                             "params file's git history")
    report.add_argument("--out", type=Path, default=None, help="the page (default: .ktune/report.html)")
    dash = sub.add_parser("dashboard", help="optuna-dashboard on the project's studies (pip install "
                                             "'pytest-ktune[dashboard]')")
    dash.add_argument("--root", type=Path, default=Path.cwd(), help="the project root (default: .)")
    _add(dash, "storage")
    dash.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)")
    dash.add_argument("--port", type=int, default=8080, help="the port to listen on (default: 8080)")
    export = sub.add_parser("export", help="the tuned parameters of every target, device and key as a C++ header "
                                           "(constexpr tables and a lookup) or JSON, for code built ahead of time")
    export.add_argument("targets", nargs="*", help="target names (default: all)")
    export.add_argument("--format", choices=("header", "json"), default="header", help="default: header")
    export.add_argument("-o", "--out", type=Path, default=None, help="the file to write (default: standard output)")
    export.add_argument("--namespace", default="ktune", help="the header's C++ namespace (default: ktune)")
    export.add_argument("--root", type=Path, default=Path.cwd(), help="the project root (default: .)")
    export.add_argument("--params", default=None, metavar="PATH", help="the params file (default: as ktune tune)")
    from pytest_ktune.agent import add_templatize_parser

    add_templatize_parser(sub)
    return ap


def _options(args: argparse.Namespace, *, tune: bool) -> RunOptions:
    """The command's arguments, merged with the environment and the project's files (``run.config``), as
    the options of one run: the same as pytest's (``run.options``)."""
    from pytest_ktune.run.config import OPTIONS, project_files, resolve
    from pytest_ktune.run.options import run_options

    root = args.root.resolve()
    given = {o.name: getattr(args, o.name, None) for o in OPTIONS}
    if getattr(args, "no_write", False):
        given["write"] = "none"
    given["tune"] = tune and not getattr(args, "autotune", False)
    resolved = resolve(given, project_files(root))
    opts = run_options(resolved, root=root, command="ktune " + " ".join(sys.argv[1:]))
    return replace(opts, tune=tune and not opts.autotune)


def cmd_tune(args: argparse.Namespace) -> int:
    from pytest_ktune import backends
    from pytest_ktune.agent import AGENT_OFF
    from pytest_ktune.core.discover import discover, select
    from pytest_ktune.core.keys import key_string, parse_key
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
    errors: dict[str, int] = {}
    outcomes: list[ItemOutcome] = []
    device_id: str | None = None
    for target, key, cases in _keys(targets, backend, parse_key(args.key)):
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
        started = time.monotonic()
        try:
            out = tuning.tune(target, key, tuple(cases))
        except KtuneError as exc:
            failures += 1
            text = exc.render()
            errors[text] = errors.get(text, 0) + 1
            if errors[text] == 1:  # the same error for every key (no GPU, say) is said once
                print(f"error: {text}", file=sys.stderr)
            outcomes.append(_tune_outcome(target, key, root, "error", time.monotonic() - started, message=text))
            continue
        outcomes.append(_tune_outcome(target, key, root, "passed", time.monotonic() - started))
        if settings.tune.write:
            change = "params file updated" if out.written else "params file unchanged"
        else:
            change = ("not written (--no-write)" if args.no_write
                      else f"not written yet (--write {settings.write_mode})")
        print(f"{target.name} {key_string(key)}: best {out.best_us:.2f} µs {dict(out.best_params)} "
              f"after {out.timed} timed trials ({out.infeasible} infeasible, {out.failed} failed); "
              f"{out.decision}; {change}; report: {out.report}")
    for text, n in errors.items():
        if n > 1:
            print(f"error: the same error as above for {n - 1} more key(s): {text.splitlines()[0]}", file=sys.stderr)
    for result in tuning.agents.values():
        print(result.message)
        if result.transcript is not None:
            print(f"  transcript: {result.transcript} ({result.usage})")
        failures += result.status == "error"
    line = tuning.finish()
    if line:
        print(f"ktune: {line}")
    junit = _options_value(args, "junit")
    if junit:
        from pytest_ktune.report import junit as junit_report
        from pytest_ktune.report.results import RunResults

        device = tuning.outcomes[0].device if tuning.outcomes else ""
        junit_report.write(Path(junit), RunResults(root=root, backend=backend, device=device,
                                                   outcomes=tuple(outcomes), tunes=tuple(tuning.outcomes)))
        print(f"ktune: wrote the JUnit report to {junit}")
    return 1 if failures else 0


def _options_value(args: argparse.Namespace, name: str) -> Any:
    """One option's value as ``run.config`` resolves it for this command."""
    from pytest_ktune.run.config import OPTIONS, project_files, resolve

    return resolve({o.name: getattr(args, o.name, None) for o in OPTIONS}, project_files(args.root.resolve()))[name]


def _tune_outcome(target: Target, key: dict[str, Any], root: Path, outcome: str, duration_s: float, *,
                  message: str = "") -> ItemOutcome:
    """A tuned key as the JUnit report's testcase ``tune[KEY]``, as pytest's tune item would be."""
    from pytest_ktune.core.keys import key_label
    from pytest_ktune.core.store import target_id
    from pytest_ktune.report.results import ItemOutcome

    tid = target_id(target, root)
    label = key_label(key)
    return ItemOutcome(nodeid=f"{tid}::tune[{label}]", check="tune", target=tid, name=target.name, label=label,
                       outcome=outcome, duration_s=duration_s, message=message, key=dict(key))
def _keys(targets: Sequence[Target], backend: str,
          wanted: Mapping[str, str]) -> list[tuple[Target, dict[str, Any], list[int]]]:
    """Each target's keys on ``backend`` that have every dimension of ``wanted`` (``--key``; all keys
    without it); a KtuneError listing the targets' keys when ``wanted`` matches none of them."""
    from pytest_ktune.core.keys import cases_by_key, key_matches, key_string

    chosen, known = [], []
    for target in targets:
        if backend not in target.sources:
            print(f"{target.name}: no {backend} source, skipped", file=sys.stderr)
            continue
        keys = list(cases_by_key(target, backend).values())
        known.append(f"{target.name}: {'; '.join(key_string(k) for k, _ in keys) or 'none'}")
        chosen += [(target, k, idx) for k, idx in keys if key_matches(k, wanted)]
    if wanted and not chosen:
        asked = ", ".join(f"{k}={v}" for k, v in wanted.items())
        raise KtuneError(f"no case on {backend} has a key of {asked}",
                         where=targets[0].where if len(targets) == 1 else "",
                         hint=f"the keys on {backend}: {' | '.join(known) or 'none'}")
    return chosen


def cmd_record(args: argparse.Namespace) -> int:
    from pytest_ktune.core.keys import parse_key
    from pytest_ktune.lab.record import RecordSettings, parse_bytes, run_record

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


def cmd_export(args: argparse.Namespace) -> int:
    from pytest_ktune.core.discover import discover, select
    from pytest_ktune.core.files import write_atomic
    from pytest_ktune.core.paths import params_path
    from pytest_ktune.core.store import Store
    from pytest_ktune.report.export import collect, render_header, render_json

    root = args.root.resolve()
    path = params_path(root, explicit=args.params, root=root)
    if not path.is_file():
        raise KtuneError("there is no params file to export", where=str(path),
                         hint="record baselines (pytest --ktune --ktune-update-baseline) or tune first, or pass "
                              "--params")
    exported, unknown = collect(Store.load(path), select(discover(root), args.targets, root))
    for ident in [] if args.targets else unknown:
        print(f"ktune export: {ident} is in {path.name}, but no such target is under {root}: left out", file=sys.stderr)
    text = render_json(exported, path.name) if args.format == "json" else \
        render_header(exported, path.name, args.namespace)
    if args.out is None:
        sys.stdout.write(text)
    else:
        write_atomic(args.out, text)
        print(f"ktune export: {args.out}: {len(exported)} targets, "
              f"{sum(len(t.entries) for t in exported)} entries", file=sys.stderr)
    return 0


def _single(out: Path | None, count: int, what: str) -> bool:
    """Whether ``--out`` names one file (and then there must be one input)."""
    single = out is not None and (out.name.endswith(".json") or out.name.endswith(".json.gz"))
    if single and count != 1:
        raise KtuneError(f"--out {out} names one file, but {count} {what} were given", hint="give a folder to --out")
    return single


def cmd_import_landscape(args: argparse.Namespace) -> int:
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


def cmd_worker(args: argparse.Namespace) -> int:
    from pytest_ktune.run.extensions import cli_manager
    from pytest_ktune.run.options import build
    from pytest_ktune.tuner.join import join_studies

    run = build(_options(args, tune=True), cli_manager().hook)
    settings = run.tune
    assert settings is not None
    if not settings.storage:
        raise KtuneError("a worker joins a shared study, so it needs --storage",
                         hint="pass the same --storage URL (or KTUNE_STORAGE) as the `ktune tune` it helps")
    done = join_studies(run.root, settings, args.study, backend=run.backend)
    print(f"worker {os.getpid()}: {done} timed trials")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Write the project's HTML page (``report.page``)."""
    from pytest_ktune.core.paths import params_path
    from pytest_ktune.report import history, page

    root = args.root.resolve()
    opts = _options(args, tune=False)
    path = params_path(root, explicit=opts.params, root=root, configured=opts.params_configured)
    points = history.params_history(path) + history.benchmark_history(args.history)
    studies = history.study_plots(root / ".ktune" / "reports")
    out = (args.out or root / ".ktune" / "report.html").resolve()
    page.write(out, root.name, points, studies)
    targets = len({p.target for p in points} | {s.target for s in studies})
    print(f"ktune: wrote the report to {out} ({targets} targets, {len(points)} timings, {len(studies)} studies)")
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    """optuna-dashboard on the project's storage: the journal under .ktune/, or the shared one."""
    from pytest_ktune.tuner.storage import open_storage

    root = args.root.resolve()
    url = _options_value(args, "storage")
    journal = root / ".ktune" / "studies.journal"
    if url is None and not journal.is_file():
        raise KtuneError(f"no studies under {root / '.ktune'} yet",
                         hint="tune first (ktune tune, or pytest --ktune --ktune-tune), or give --storage URL")
    try:
        import optuna_dashboard
    except ImportError:
        raise KtuneError("ktune dashboard needs optuna-dashboard",
                         hint="pip install 'pytest-ktune[dashboard]'") from None
    storage, name = open_storage(url, root / ".ktune")
    print(f"ktune: optuna-dashboard on {name} at http://{args.host}:{args.port}/ (Ctrl-C stops it)", flush=True)
    optuna_dashboard.run_server(storage, host=args.host, port=args.port)
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
        if args.command == "report":
            return cmd_report(args)
        if args.command == "dashboard":
            return cmd_dashboard(args)
        if args.command == "export":
            return cmd_export(args)
        if args.command == "import-landscape":
            return cmd_import_landscape(args)
        if args.command == "export-landscape":
            return cmd_export_landscape(args)
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
