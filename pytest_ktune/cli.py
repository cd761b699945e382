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

if TYPE_CHECKING:
    from pytest_ktune.core.project import Located
    from pytest_ktune.core.target import Target
    from pytest_ktune.report.results import ItemOutcome
    from pytest_ktune.run.config import RunOptions


_SHARED = ("params", "backend", "trials", "tune_timeout", "sampler", "storage", "seed", "trial_timeout")


def _add(p: argparse.ArgumentParser, *names: str, flags: Mapping[str, str] | None = None) -> None:
    """The options of pytest's ``--ktune-NAME`` as ``--NAME`` (or a command's own flag in ``flags``), with
    the same meaning, default and help (``core.options``); each None when not given, so that the
    environment and the project's files can fill it in (``_options``)."""
    from pytest_ktune.core.options import BY_NAME
    from pytest_ktune.run.config import cli_text, help_text

    for name in names:
        o = BY_NAME[name]
        where = f"{o.flag} under pytest" + (f"; env: {o.env_name}" if o.env else "") + f"; file: {o.name}"
        text = help_text(o, where, words=lambda t: cli_text(t, flags))
        flag = (flags or {}).get(name, o.cli_flag)
        aliases = ("--timeout",) if name == "tune_timeout" else ()  # its name before it matched pytest's
        if o.kind is bool:
            p.add_argument(flag, *aliases, dest=name, action="store_true", default=None, help=text)
        else:
            convert: Callable[[str], Any] = o.kind
            p.add_argument(flag, *aliases, dest=name, default=None, metavar=o.metavar, type=convert, help=text)


_ROOT_HELP = ("the project's folder (as pytest's --rootdir): .ktune/ and the params file are found there, pytest's "
              "ini file and [tool.ktune] from there up (default: found as pytest finds its rootdir, from the paths "
              "given, else the current folder: the nearest pytest.ini, pyproject.toml, tox.ini or setup.cfg with "
              "pytest settings)")
_PATHS_HELP = ("target names, files or folders of the project (as given to pytest: example_project, "
               "kernels/rmsnorm.py), or file::name as the params file writes them (default: every target)")


def _project(p: argparse.ArgumentParser, *, path: bool = False) -> None:
    """The options that say which project a command runs in: ``--root``, and a project ``PATH``."""
    if path:
        p.add_argument("path", nargs="?", type=Path, default=None,
                       help="a folder or file of the project, as given to pytest (default: the current folder)")
    p.add_argument("--root", type=Path, default=None, metavar="DIR", help=_ROOT_HELP)


def _tune_options(p: argparse.ArgumentParser) -> None:
    _project(p)
    _add(p, *_SHARED)


def _parser() -> argparse.ArgumentParser:
    from pytest_ktune.core.version import __version__
    from pytest_ktune.lab import commands as lab

    ap = argparse.ArgumentParser(prog="ktune", description="Tune, record and export @ktune.target kernels outside "
                                 "pytest. Each command runs in the project pytest would find from the same folder "
                                 "and paths (its first line names the project and its params file).")
    ap.add_argument("--version", action="version", version=f"pytest-ktune {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    tune = sub.add_parser("tune", help="tune the named targets (default: all) for every key of their cases")
    tune.add_argument("targets", nargs="*", metavar="PATH or TARGET", help=_PATHS_HELP)
    _add(tune, "autotune", "write", "devices")
    tune.add_argument("--no-write", action="store_true", help="the same as --write none")
    _add(tune, "agent", "model", "agent_iterations", "agent_wall", "agent_memory", "agent_tools", "junit")
    tune.add_argument("--key", action="append", default=[], metavar="NAME=VALUE",
                      help="tune only the keys with this dimension (repeat for more: --key T=64 --key H=4096); "
                           "default: every key of the targets' cases")
    _tune_options(tune)
    worker = sub.add_parser("worker", help="join the studies in a shared storage and run trials for them")
    worker.add_argument("--study", action="append", default=None, metavar="NAME",
                        help="a study name to join (default: every pytest-ktune study in the storage)")
    _tune_options(worker)
    lab.add_parsers(sub, _project, _add)
    report = sub.add_parser("report", help="one self-contained HTML page of the project: what regressed, improved "
                                           "or drifted; each kernel's time across commits; its tuning studies' plots")
    _project(report, path=True)
    _add(report, "params")
    report.add_argument("--history", nargs="*", type=Path, default=[], metavar="PATH",
                        help="benchmark JSON files (pytest's --ktune-benchmark-json), or folders of them, to chart "
                             "beside the params file's git history")
    report.add_argument("--out", type=Path, default=None, metavar="PATH",
                        help="the page (default: .ktune/report.html)")
    dash = sub.add_parser("dashboard", help="optuna-dashboard on the project's studies (pip install "
                                             "'pytest-ktune[dashboard]')")
    _project(dash, path=True)
    _add(dash, "storage")
    dash.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)")
    dash.add_argument("--port", type=int, default=8080, help="the port to listen on (default: 8080)")
    export = sub.add_parser("export", help="the tuned parameters of every target, device and key as a C++17 header "
                                           "(constexpr tables and a lookup), JSON, or a Python module of dicts "
                                           "(a Triton user's own dispatch)")
    export.add_argument("targets", nargs="*", metavar="PATH or TARGET", help=_PATHS_HELP)
    export.add_argument("--format", choices=("header", "json", "python"), default="header",
                        help="header: C++17 (inline constexpr tables, std::string_view), for -std=c++17 or later; "
                             "json: the same entries as data; python: DEFAULTS, CONFIGS and lookup() (default: header)")
    export.add_argument("-o", "--out", type=Path, default=None, metavar="PATH",
                        help="the file to write (default: standard output)")
    export.add_argument("--namespace", default="ktune", metavar="NAME",
                        help="the header's C++ namespace (default: ktune)")
    _project(export)
    _add(export, "params")
    from pytest_ktune.agent import add_templatize_parser

    add_templatize_parser(sub, lambda p, *names: _add(p, *names, flags=_TEMPLATIZE_FLAGS))
    return ap


def _located(args: argparse.Namespace) -> Located:
    """The project the command runs in (``core.project``: pytest's rootdir rules, from the paths given
    and the current folder, or ``--root``), found once; ``args.root`` becomes its rootdir, and the
    positional arguments are split into ``args.names`` (targets) and ``args.within`` (paths)."""
    from pytest_ktune.core.project import locate, split_args

    found: Located | None = getattr(args, "located", None)
    if found is not None:
        return found
    here = Path.cwd()
    within, names = split_args(getattr(args, "targets", None) or [], here)
    path: Path | None = getattr(args, "path", None)
    if path is not None and not path.exists():
        raise KtuneError(f"no file or folder {path}", hint="give a folder of the project, or leave it out")
    found = locate([*within, *([path] if path else [])], here, rootdir=args.root)
    for p in within:
        if not p.is_relative_to(found.rootdir):
            raise KtuneError(f"{p} is outside the project {found.rootdir}",
                             hint="give files and folders inside --root, or leave --root out")
    args.located, args.root, args.names, args.within = found, found.rootdir, names, within
    return found


def _options(args: argparse.Namespace, *, tune: bool = False, located: Located | None = None) -> RunOptions:
    """The command's arguments, merged with the environment and the project's files (``run.config``), as
    the options of one run: the same as pytest's. Merged once per command: every part of it reads them."""
    from pytest_ktune.core.options import OPTIONS
    from pytest_ktune.run.config import project_files, resolve

    cached: RunOptions | None = getattr(args, "run_options", None)
    if cached is not None:
        return replace(cached, tune=tune and not cached.autotune)
    found = located or _located(args)
    given = {o.name: getattr(args, o.name, None) for o in OPTIONS}
    if getattr(args, "no_write", False):
        given["write"] = "none"
    opts = resolve(given, project_files(found.rootdir, found), root=found.rootdir,
                   command="ktune " + " ".join(sys.argv[1:]))
    args.run_options = opts
    return replace(opts, tune=tune and not opts.autotune)


def _params_path(args: argparse.Namespace) -> Path:
    """The params file of the command's project, by ``core.paths``' rule."""
    from pytest_ktune.run.options import run_params_path

    return run_params_path(_options(args))


def _say_project(args: argparse.Namespace, params: Path | None = None) -> None:
    """The command's first line: the project it runs in, how it was found, and its params file."""
    from pytest_ktune.core.project import describe

    print(f"ktune: {describe(_located(args), params or _params_path(args), Path.cwd())}", file=sys.stderr,
          flush=True)


def cmd_tune(args: argparse.Namespace) -> int:
    from pytest_ktune.agent import AGENT_OFF
    from pytest_ktune.core.discover import discover, select
    from pytest_ktune.core.keys import key_string, parse_key
    from pytest_ktune.run.config import cli_text
    from pytest_ktune.run.extensions import cli_manager
    from pytest_ktune.run.options import build
    from pytest_ktune.run.tuning import Tuning

    _say_project(args)  # first: an option refused below is refused in a project the user can see
    opts = _options(args, tune=True)
    settings = replace(build(opts, cli_manager().hook), progress=sys.stderr)
    assert settings.tune is not None
    root = settings.root
    _refuse_a_stray_params_file(args, settings.params_path, settings.write_mode, opts.params)
    if settings.agent is not None:
        model = settings.agent.model
        print(f"ktune: agent: model {model.model}" if model else f"ktune: {cli_text(AGENT_OFF)}", file=sys.stderr)
    targets = select(discover(root, args.within), args.names, root, command="ktune tune")
    if not targets:
        raise KtuneError(f"no @ktune.target found under {root}", hint="give the project's folder (as to pytest), "
                                                                      "or --root")
    tuning = Tuning.in_process(settings)
    failures = 0
    errors: dict[str, int] = {}
    outcomes: list[ItemOutcome] = []
    skipped: dict[str, str] = {}  # why keys were not tuned: by target (no source), or "current"
    try:
        for target, key, cases in _keys(targets, tuning.backend, parse_key(args.key)):
            choice = tuning.choose(target, key)
            if not choice.tune:
                if choice.rule == "no source":
                    if target.name not in skipped:  # said once per target
                        skipped[target.name] = choice.why
                        print(f"{target.name}: no {tuning.backend} source, skipped", file=sys.stderr)
                    continue
                skipped["current"] = choice.why
                print(f"{target.name} {key_string(key)}: already {choice.why}, skipped")
                continue
            if choice.rule == "stale":
                print(f"{target.name} {key_string(key)}: {choice.why}, tuning again")
            started = time.monotonic()
            try:
                out = tuning.tune(target, key, tuple(cases))
            except KtuneError as exc:
                failures += 1
                text = cli_text(exc.render())
                errors[text] = errors.get(text, 0) + 1
                if errors[text] == 1:  # the same error for every key (no GPU, say) is said once
                    print(f"error: {text}", file=sys.stderr)
                outcomes.append(_tune_outcome(target, key, root, "error", time.monotonic() - started, message=text))
                continue
            outcomes.append(_tune_outcome(target, key, root, "passed", time.monotonic() - started))
            if settings.write_mode == "none":
                change = "not written (--no-write)" if args.no_write else "not written (--write none)"
            else:
                change = f"to be delivered (--write {settings.write_mode})"
            print(f"{target.name} {key_string(key)}: best {out.best_us:.2f} µs {dict(out.best_params)} "
                  f"after {out.timed} timed trials ({out.infeasible} infeasible, {out.failed} failed)"
                  f"{out.resumed_text()}{out.devices_text()}; {out.decision}; {change}; report: {out.report}")
    except KeyboardInterrupt:
        if tuning.outcomes:
            print(f"ktune: the {len(tuning.outcomes)} key(s) decided before the interruption are kept under "
                  ".ktune/winners/: rerun the same command to deliver them (nothing is timed again)",
                  file=sys.stderr, flush=True)
        raise
    if not tuning.outcomes and not failures and "current" not in skipped:
        # Nothing was tuned and nothing is up to date: never exit 0 having done nothing.
        why = "; ".join(skipped.values()) or "no case of the targets runs there"
        raise KtuneError(f"nothing to tune on the {tuning.backend} backend (--backend {settings.backend}): {why}",
                         hint=f"add a {tuning.backend} source to the targets' sources=, or give --backend one they "
                              "have")
    for text, n in errors.items():
        if n > 1:
            print(f"error: the same error as above for {n - 1} more key(s): {text.splitlines()[0]}", file=sys.stderr)
    for result in tuning.agents.values():
        print(cli_text(result.message))
        if result.transcript is not None:
            print(f"  transcript: {result.transcript} ({result.usage})")
        failures += result.status == "error"
    line = tuning.finish()
    if line:
        print(f"ktune: {cli_text(line)}", file=sys.stderr if tuning.undelivered else sys.stdout)
    failures += tuning.undelivered is not None
    junit = settings.reports.junit
    if junit:
        from pytest_ktune.report import junit as junit_report
        from pytest_ktune.report.results import RunResults

        device_id = tuning.outcomes[0].device if tuning.outcomes else ""
        try:
            junit_report.write(junit, RunResults(root=root, backend=tuning.backend, device=device_id,
                                                 outcomes=tuple(outcomes), tunes=tuple(tuning.outcomes)))
        except (OSError, KtuneError) as exc:
            print(f"error: the JUnit report was NOT written to {junit}: {exc}", file=sys.stderr)
            return 1
        print(f"ktune: wrote the JUnit report to {junit}")
    return 1 if failures else 0


def _refuse_a_stray_params_file(args: argparse.Namespace, params: Path, write: str, explicit: str | None) -> None:
    """Outside a project (no configuration file, no ``--root``), a tune that would write makes no new
    params file where the command happens to run: it says where it looked and what to give instead."""
    found = _located(args)
    if found.is_project or write == "none" or params.is_file() or explicit or os.environ.get("KTUNE_PARAMS"):
        return
    raise KtuneError(f"no project at {found.rootdir}: no pytest.ini, pyproject.toml, tox.ini or setup.cfg with "
                     f"pytest settings there or above it, so --write {write} would create a stray {params.name} there",
                     hint="give the project's folder (as to pytest: ktune tune example_project ...), or --root DIR "
                          "to make DIR the project, or --params PATH")


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
        keys = list(cases_by_key(target, backend).values())
        known.append(f"{target.name}: {'; '.join(key_string(k) for k, _ in keys) or 'none'}")
        chosen += [(target, k, idx) for k, idx in keys if key_matches(k, wanted)]
    if wanted and not chosen:
        asked = ", ".join(f"{k}={v}" for k, v in wanted.items())
        raise KtuneError(f"no case on {backend} has a key of {asked}",
                         where=targets[0].where if len(targets) == 1 else "",
                         hint=f"the keys on {backend}: {' | '.join(known) or 'none'}")
    return chosen


def cmd_export(args: argparse.Namespace) -> int:
    from pytest_ktune.core.discover import discover, select
    from pytest_ktune.core.files import write_atomic
    from pytest_ktune.core.store import Store
    from pytest_ktune.report.export import collect, render_header, render_json, render_python

    path = _params_path(args)
    _say_project(args, path)
    root = args.root
    if not path.is_file():
        from pytest_ktune.core.discover import project_folders
        from pytest_ktune.core.paths import FILENAME

        there = [os.path.relpath(f) for f in project_folders(root) if (f / FILENAME).is_file()]
        elsewhere = (f"{', '.join(there)} {'is a project' if len(there) == 1 else 'are projects'} of its own with "
                     f"a params file: give its folder, as to pytest (ktune export {there[0]}), or --root; ") \
            if there else ""
        raise KtuneError("there is no params file to export", where=str(path),
                         hint=f"{elsewhere}record baselines (pytest --ktune --ktune-update-baseline) or tune first, "
                              "or pass --params")
    exported, unknown = collect(Store.load(path), select(discover(root, args.within), args.names, root,
                                                         command="ktune export"))
    for ident in [] if args.names or args.within else unknown:
        print(f"ktune export: {ident} is in {path.name}, but no such target is under {root}: left out", file=sys.stderr)
    render = {"json": render_json, "python": render_python}.get(args.format)
    text = render(exported, path.name) if render is not None else render_header(exported, path.name, args.namespace)
    if args.out is None:
        sys.stdout.write(text)
    else:
        write_atomic(args.out, text)
        print(f"ktune export: {args.out}: {len(exported)} targets, "
              f"{sum(len(t.entries) for t in exported)} entries", file=sys.stderr)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from pytest_ktune.run.extensions import cli_manager
    from pytest_ktune.run.options import build
    from pytest_ktune.tuner.join import join_studies

    _say_project(args)
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
    """Write the project's HTML page (``report.page``): 1 when the params file cannot be read."""
    from pytest_ktune.core.store import Store
    from pytest_ktune.core.threshold import Threshold
    from pytest_ktune.report import history, page

    path = _params_path(args)
    _say_project(args, path)
    root = args.root
    if path.is_file():
        Store.load(path)  # a damaged params file is an error here, not a page that leaves its records out
    points = history.params_history(path) + history.benchmark_history(args.history)
    studies = history.study_plots(root / ".ktune" / "reports")
    out = (args.out or root / ".ktune" / "report.html").resolve()
    threshold = Threshold.parse(_options(args).threshold).fraction  # the project's, as its gate's
    page.write(out, root.name, points, studies, threshold=threshold)
    targets = len({p.target for p in points} | {s.target for s in studies})
    print(f"ktune: wrote the report to {out} ({targets} targets, {len(points)} timings, {len(studies)} studies)")
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    """optuna-dashboard on the project's storage: the journal under .ktune/, or the shared one."""
    from pytest_ktune.tuner.storage import open_storage

    _say_project(args)
    root = args.root
    url = _options(args).storage
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


def _run(args: argparse.Namespace) -> int:
    from pytest_ktune.lab import commands as lab

    if args.command in lab.COMMANDS:
        root = None
        if args.command in ("record", "bench-search"):
            _say_project(args)
            root = args.root
        return lab.run(args, root, _options(args) if args.command == "record" else None)
    if args.command == "templatize":
        from pytest_ktune.agent import run_templatize
        from pytest_ktune.core.project import locate
        from pytest_ktune.run.config import cli_text

        # the project is the kernel file's, as pytest would find it from there (or --root)
        found = locate([args.kernel], Path.cwd(), rootdir=args.root)
        args.root = found.rootdir
        return run_templatize(args, _options(args, located=found),
                              words=lambda text: cli_text(text, _TEMPLATIZE_FLAGS))
    command: Callable[[argparse.Namespace], int] = {
        "tune": cmd_tune, "worker": cmd_worker, "report": cmd_report, "dashboard": cmd_dashboard,
        "export": cmd_export}[args.command]
    return command(args)


# templatize's own flags for what ``ktune tune`` calls --agent-wall and --agent-memory
_TEMPLATIZE_FLAGS = {"agent_wall": "--wall", "agent_memory": "--memory", "agent_tools": "--tools"}


def main(argv: Sequence[str] | None = None) -> int:
    from pytest_ktune.run.config import cli_text

    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except KtuneError as exc:
        flags = _TEMPLATIZE_FLAGS if args.command == "templatize" else None
        print(f"error: {cli_text(exc.render(), flags)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
