"""The pytest skin: options, the extension hooks, collection of ``@ktune.target`` kernels, and the
summary. The items themselves are in ``pytest_ktune.items``; the run they share is a
``run.session.Session`` kept in ``config.stash``.

Nothing here imports numpy, CuPy or PyOpenCL unless ``--ktune`` is given.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO, cast

import pytest

FINISH_KEY = pytest.StashKey[str]()
REPORTS_KEY = pytest.StashKey[list[str]]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_ktune import hookspecs
    from pytest_ktune.run.extensions import Builtins

    pluginmanager.add_hookspecs(hookspecs)
    pluginmanager.register(Builtins(), "ktune-builtins")


def pytest_addoption(parser: pytest.Parser) -> None:
    from pytest_ktune.core.options import OPTIONS
    from pytest_ktune.run.config import help_text

    group = parser.getgroup("ktune", "kernel correctness, timing and regression gate (pytest-ktune)")
    for o in OPTIONS:
        text = help_text(o, f"ini: {o.ini}" + (f"; env: {o.env_name}" if o.env else ""))
        if o.kind is bool:
            group.addoption(o.flag, action="store_true", default=None, dest=_dest(o.name), help=text)
        else:
            group.addoption(o.flag, default=None, dest=_dest(o.name), metavar=o.metavar,
                            type=o.kind if o.kind is not str else None, help=text)
        parser.addini(o.ini, f"{o.help} (see {o.flag})", default=None)


def _dest(name: str) -> str:
    return "ktune" if name == "ktune" else f"ktune_{name}"


def _enabled(config: pytest.Config) -> bool:
    """``--ktune``, or ``ktune = true`` in pytest's ini file."""
    if config.getoption("ktune"):
        return True
    from pytest_ktune.core.options import BY_NAME, OptionError

    try:
        return bool(BY_NAME["ktune"].parse(config.getini("ktune"), f"ktune in {config.inipath}"))
    except OptionError as exc:
        raise pytest.UsageError(exc.render()) from None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU (skipped with a reason where none is)")
    config.addinivalue_line("markers", "ktune: an item collected by pytest-ktune")
    config.addinivalue_line("markers", "ktune_correctness: a pytest-ktune correctness item")
    config.addinivalue_line("markers", "ktune_performance: a pytest-ktune performance item")
    config.addinivalue_line("markers", "ktune_tune: a pytest-ktune tuning item (--ktune-tune, --ktune-autotune)")
    if not _enabled(config) or config.option.help:
        return
    config.option.ktune = True  # the ini key alone switched it on: the other hooks ask the option
    _refuse_xdist(config)
    from pytest_ktune.core.errors import BackendUnavailable, KtuneError
    from pytest_ktune.core.options import OPTIONS
    from pytest_ktune.items import SESSION_KEY, OutcomeRecorder
    from pytest_ktune.run.config import ConfigFiles, ktune_table, resolve
    from pytest_ktune.run.options import build
    from pytest_ktune.run.session import Session

    try:
        table, table_path = ktune_table(Path(config.rootpath))
        files = ConfigFiles(ini={o.ini: config.getini(o.ini) for o in OPTIONS}, ini_path=config.inipath,
                            table=table, table_path=table_path)
        options = resolve({o.name: config.getoption(_dest(o.name)) for o in OPTIONS}, files,
                          root=Path(config.rootpath), command=" ".join(["pytest", *config.invocation_params.args]),
                          cwd=Path(config.invocation_params.dir))
        if options.benchmark_json:
            from pytest_ktune.report.benchjson import require

            require()  # asked for, it must be deliverable: say so now, not after the run
        # Progress needs write, flush and isatty of a text stream, which _ReporterStream has.
        progress = cast("TextIO", _ReporterStream(config))
        session = Session(replace(build(options, config.hook), progress=progress))
    except KtuneError as exc:
        raise pytest.UsageError(exc.render()) from None
    try:
        session.start()  # fail closed: a backend that cannot run is an error, before any item runs
    except BackendUnavailable as exc:
        if not session.settings.skip_unavailable:
            session.close()
            raise pytest.UsageError(
                f"the {session.settings.backend} backend cannot run: {exc.render()}\n(pass "
                "--ktune-skip-unavailable to skip the ktune items instead, on a machine without a device)") from None
    except KtuneError as exc:  # a device that cannot do what the run asks (baselines from an interpreter)
        session.close()
        raise pytest.UsageError(exc.render()) from None
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(OutcomeRecorder(session), "ktune-outcomes")


def _refuse_xdist(config: pytest.Config) -> None:
    """pytest-xdist would run the items in several processes at once, timing kernels side by side on
    one device and splitting the summary, the baselines and the reports: refused, with what to do."""
    dist = getattr(config.option, "dist", "no")
    workers = getattr(config.option, "numprocesses", None)
    if dist not in (None, "no") or workers:
        raise pytest.UsageError(
            "pytest-ktune times kernels one at a time on one device, and keeps one summary, one set of "
            f"baselines and one report per run, so it does not run under pytest-xdist (-n {workers}, --dist "
            f"{dist}). Run the ktune items in a pytest run of their own without -n (add -n 0, or -p no:xdist), "
            "e.g. `pytest --ktune -n 0`, and the rest of the suite with -n as before.")


def pytest_unconfigure(config: pytest.Config) -> None:
    if not config.getoption("ktune"):
        return
    from pytest_ktune.items import session_of

    session = session_of(config)
    if session is not None:
        session.close()
class _ReporterStream:
    """A tune's live progress line written through pytest's terminal reporter with capture suspended
    for each write (as pytest's live logging does), so it shows without ``-s``; Progress draws
    nothing where the terminal reporter does not write to a terminal (a CI log, a pipe), or where
    there is none (``-p no:terminal``)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config  # the reporter is registered after this plugin's pytest_configure: ask later
        self._mid_line = False  # our last write left the cursor after a progress line

    @property
    def reporter(self) -> Any:
        return self.config.pluginmanager.get_plugin("terminalreporter")

    def isatty(self) -> bool:
        return self.reporter is not None and bool(self.reporter.isatty)

    def write(self, text: str) -> int:
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        if self.reporter is None:
            return len(text)
        if capture is None:
            return self._write(text)
        with capture.global_and_fixture_disabled():
            return self._write(text)

    def _write(self, text: str) -> int:
        reporter = self.reporter
        if not self._mid_line:
            reporter.ensure_newline()  # off the line pytest was writing (the item's name, its dots)
        reporter.write(text, flush=True)
        self._mid_line = not text.endswith("\n")
        return len(text)

    def flush(self) -> None:
        if self.reporter is not None:
            self.reporter.flush()


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    if not config.getoption("ktune"):
        return None
    from pytest_ktune.items import session_of
    from pytest_ktune.run.session import Skip

    session = session_of(config)
    assert session is not None
    s = session.settings
    origin = s.origin("threshold")
    given = "" if origin in ("default", "command line") else f" (from {origin})"
    params = s.params_path
    if params.is_absolute() and params.is_relative_to(config.rootpath):
        params = params.relative_to(config.rootpath)  # pytest names the rootdir a line below
    lines = [f"ktune: seed {s.seed} (rerun with --ktune-seed {s.seed}), threshold {s.threshold}{given}, "
             f"params {params}"]
    try:
        from pytest_ktune.report.terminal import device_header

        lines.extend(device_header(session.device(), verbose=config.get_verbosity() > 0))
        if len(session.lanes) > 1:
            lines.append(f"ktune: measuring on {len(session.lanes)} devices: {session.device_name}")
    except Skip as exc:
        lines.append(f"ktune: backend {session.backend_name} unavailable, items skipped: {exc}")
    if session.store_error is not None:
        lines.append(f"ktune: WARNING {session.store_error.render()}")
    if s.agent is not None:
        from pytest_ktune.agent import AGENT_OFF

        lines.append(f"ktune: agent: model {s.agent.model.model}" if s.agent.model else f"ktune: {AGENT_OFF}")
    return lines


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A ktune item's skip points at its target's declaration, not at this plugin's source."""
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or not isinstance(report.longrepr, tuple) or item.get_closest_marker("ktune") is None:
        return
    target = getattr(item, "target", None) or getattr(getattr(item, "parent", None), "target", None)
    file, line = getattr(target, "file", None), getattr(target, "line", 0)
    if file is not None:
        report.longrepr = (str(file), line or None, report.longrepr[2])


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if not parent.config.getoption("ktune") or file_path.suffix != ".py":
        return None
    try:
        text = file_path.read_text(errors="replace")
    except OSError:
        return None
    from pytest_ktune.core.discover import defines_targets

    if not defines_targets(text):
        return None
    from pytest_ktune.items import KtuneModule

    module: pytest.Collector = KtuneModule.from_parent(parent, path=file_path)
    return module


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not session.config.getoption("ktune"):
        return
    from pytest_ktune.items import session_of

    s = session_of(session.config)
    assert s is not None
    line = s.finish()
    if line:
        session.config.stash[FINISH_KEY] = line
    reports, written = _write_reports(s)
    session.config.stash[REPORTS_KEY] = reports
    undelivered = s.updates or (s.tuning is not None and s.tuning.undelivered is not None) or not written
    if undelivered and session.exitstatus == pytest.ExitCode.OK:
        # What was asked for (baselines, tuned winners, a report) was not delivered: the run fails,
        # so that a CI job does not pass without it; the terminal summary says what and why.
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _write_reports(s: Any) -> tuple[list[str], bool]:
    """Write the reports the run's settings name (``Settings.reports``); a line for the terminal about
    each, and whether every one was written."""
    from pytest_ktune.core.errors import KtuneError
    from pytest_ktune.report import benchjson, junit, markdown

    lines = []
    ok = True
    run = s.results_for_reports()
    paths = s.settings.reports
    for what, path, write in (("JUnit report", paths.junit, junit.write),
                              ("benchmark JSON", paths.benchmark_json, benchjson.write),
                              ("markdown summary", paths.markdown, markdown.write)):
        if path is None:
            continue
        try:
            write(path, run)
        except (OSError, ValueError, KtuneError) as exc:
            lines.append(f"{what} NOT written to {path}: {exc}")
            ok = False
        else:
            lines.append(f"wrote the {what} to {path}")
    return lines, ok


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not config.getoption("ktune"):
        return
    from pytest_ktune.items import session_of
    from pytest_ktune.report.terminal import summary_sections

    s = session_of(config)
    assert s is not None
    agents = tuple(s.tuning.agents.values()) if s.tuning else ()
    sections = summary_sections(s.results_for_reports(), agents)
    from pytest_ktune.backends.compile_log import compiler_output_wanted

    if compiler_output_wanted():
        from pytest_ktune.report.terminal import compiler_section

        sections.append(compiler_section(s.compiler_output()))
    for title, lines in sections:
        terminalreporter.section(title)
        for line in lines:
            terminalreporter.write_line(line)
    from pytest_ktune.report.skips import skip_line

    skipped = skip_line(s.results_for_reports().outcomes)
    if skipped:
        terminalreporter.section("ktune skipped")
        terminalreporter.write_line(skipped)
    for line in [config.stash.get(FINISH_KEY, ""), *config.stash.get(REPORTS_KEY, [])]:
        if line:
            terminalreporter.write_line(f"ktune: {line}")
