"""The pytest skin: options, the extension hooks, collection of ``@ktune.target`` kernels, and the
summary. The items themselves are in ``pytest_ktune.items``; the run they share is a
``run.session.Session`` kept in ``config.stash``.

Nothing here imports numpy, CuPy or PyOpenCL unless ``--ktune`` is given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

FINISH_KEY = pytest.StashKey[str]()
REPORTS_KEY = pytest.StashKey[list[str]]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_ktune import hookspecs
    from pytest_ktune.run.extensions import Builtins

    pluginmanager.add_hookspecs(hookspecs)
    pluginmanager.register(Builtins(), "ktune-builtins")


def pytest_addoption(parser: pytest.Parser) -> None:
    from pytest_ktune.core.names import AUTO, BACKENDS, DEFAULT_SAMPLER, DEFAULT_WRITE, SAMPLERS, WRITE_MODES

    group = parser.getgroup("ktune", "kernel correctness, timing and regression gate (pytest-ktune)")
    group.addoption("--ktune", action="store_true", default=False,
                    help="collect @ktune.target kernels: a correctness and a performance item per case")
    group.addoption("--ktune-backend", default=AUTO, metavar="NAME",
                    help=f"where kernels run: {' or '.join(BACKENDS)} (CuPy, PyOpenCL), a plugin's backend, or "
                         f"{AUTO}: cuda when a GPU is visible, else opencl (default: {AUTO})")
    group.addoption("--ktune-threshold", default="median:5%", metavar="STAT:PCT",
                    help="how much slower than its baseline a kernel may get before its performance "
                         "item fails, once confirmed by A/B (default: median:5%%)")
    group.addoption("--ktune-update-baseline", action="store_true", default=False,
                    help="record the measured timings as the new baselines in the params file")
    group.addoption("--ktune-seed", type=int, default=None,
                    help="base seed for the random inputs (default: a new one each run, shown in the header)")
    group.addoption("--ktune-params", default=None, metavar="PATH",
                    help="the params file (default: $KTUNE_PARAMS, else the nearest ktune-params.json at or "
                         "above the rootdir, else one at the rootdir; ini: ktune_params)")
    group.addoption("--ktune-tune", action="store_true", default=False,
                    help="tune every selected target for every key of its cases (Optuna), and write a "
                         "winner that beats the current parameters in same-run A/B to the params file")
    group.addoption("--ktune-autotune", action="store_true", default=False,
                    help="tune only keys that regressed at the gate in this run, were never tuned on this "
                         "device, or were tuned on another version of their source")
    group.addoption("--ktune-trials", type=int, default=40, help="timed trials per key (default: 40)")
    group.addoption("--ktune-tune-timeout", type=float, default=None, metavar="SECONDS",
                    help="wall-time budget per key (default: none)")
    group.addoption("--ktune-sampler", default=DEFAULT_SAMPLER, metavar="NAME",
                    help=f"the search after the warm starts: {', '.join(SAMPLERS)} or a plugin's (default: "
                         f"{DEFAULT_SAMPLER}, a Gaussian process over the feasible configurations; grid times "
                         "every feasible point)")
    group.addoption("--ktune-storage", default=None, metavar="URL",
                    help="an Optuna storage URL (postgresql://...) so several workers share the studies; "
                         "default: a journal file under .ktune/")
    group.addoption("--ktune-write", default=DEFAULT_WRITE, metavar="MODE",
                    help=f"what to do with tuned winners: {', '.join(WRITE_MODES)} or a plugin's mode. none "
                         "(report only, the default), file (update the params file in place), patch (a "
                         "git-apply-able patch under .ktune/patches), commit (a new branch ktune/..., your "
                         "checkout untouched), pr (commit, push, open or update a pull request; needs "
                         "GITHUB_TOKEN)")
    group.addoption("--ktune-trial-timeout", type=float, default=60.0, metavar="SECONDS",
                    help="seconds one candidate may take, compile included, before its worker is killed")
    group.addoption("--ktune-item-timeout", type=float, default=600.0, metavar="SECONDS",
                    help="seconds one correctness or performance item's kernels may run before they count as "
                         "hung: the item fails and a fresh measurement process runs the rest (default: 600)")
    group.addoption("--ktune-skip-unavailable", action="store_true", default=False,
                    help="where the backend cannot run (no GPU, no OpenCL), skip the ktune items instead of "
                         "failing the run (for a laptop without a device; never for a merge gate)")
    group.addoption("--ktune-agent", action="store_true", default=False,
                    help="with --ktune-tune: before searching each target, let an LLM agent (OpenAI-compatible, "
                         "OPENAI_BASE_URL / OPENAI_API_KEY) template, test, analyse and plan; a verified, faster "
                         "template is written only with --ktune-write file. No model: the rule-based templater")
    group.addoption("--ktune-model", default=None, metavar="NAME",
                    help="the agent's model (default: $KTUNE_MODEL; none: the agent is off)")
    group.addoption("--ktune-agent-iterations", type=int, default=12, metavar="N",
                    help="model turns per target before the agent stops (default: 12)")
    group.addoption("--ktune-junit", default=None, metavar="PATH",
                    help="write a JUnit XML report of the ktune items (correct, perf, tune) with their times, "
                         "baselines, ratios and parameters")
    group.addoption("--ktune-benchmark-json", default=None, metavar="PATH",
                    help="write the timings in pytest-benchmark's --benchmark-json format, for tools that "
                         "chart it")
    parser.addini("ktune_params", "path of the params file, relative to the rootdir (see --ktune-params)",
                  default="")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU (skipped with a reason where none is)")
    config.addinivalue_line("markers", "ktune: an item collected by pytest-ktune")
    config.addinivalue_line("markers", "ktune_correctness: a pytest-ktune correctness item")
    config.addinivalue_line("markers", "ktune_performance: a pytest-ktune performance item")
    config.addinivalue_line("markers", "ktune_tune: a pytest-ktune tuning item (--ktune-tune, --ktune-autotune)")
    if not config.getoption("ktune") or config.option.help:
        return
    _refuse_xdist(config)
    from pytest_ktune.core.errors import BackendUnavailable, KtuneError
    from pytest_ktune.items import SESSION_KEY, OutcomeRecorder
    from pytest_ktune.run.options import RunOptions, build
    from pytest_ktune.run.session import Session

    opt = config.getoption
    explicit = opt("ktune_params")
    options = RunOptions(
        root=Path(config.rootpath),
        params=str(Path(config.invocation_params.dir) / explicit) if explicit else (config.getini("ktune_params")
                                                                                    or None),
        backend=opt("ktune_backend"), threshold=opt("ktune_threshold"),
        update_baseline=opt("ktune_update_baseline"), seed=opt("ktune_seed"), tune=opt("ktune_tune"),
        autotune=opt("ktune_autotune"), trials=opt("ktune_trials"), tune_timeout=opt("ktune_tune_timeout"),
        sampler=opt("ktune_sampler"), storage=opt("ktune_storage"), write=opt("ktune_write"),
        trial_timeout=opt("ktune_trial_timeout"), agent=opt("ktune_agent"), model=opt("ktune_model"),
        agent_iterations=opt("ktune_agent_iterations"), command=" ".join(["pytest", *config.invocation_params.args]),
        item_timeout=opt("ktune_item_timeout"), skip_unavailable=opt("ktune_skip_unavailable"))
    try:
        session = Session(build(options, config.hook))
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


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    if not config.getoption("ktune"):
        return None
    from pytest_ktune.items import session_of
    from pytest_ktune.run.session import Skip

    session = session_of(config)
    assert session is not None
    s = session.settings
    lines = [f"ktune: seed {s.seed} (rerun with --ktune-seed {s.seed}), threshold {s.threshold}, "
             f"params {s.params_path}"]
    try:
        d = session.device()
        lines.append(f"ktune: backend {d.backend} on {d.name} ({d.arch}; {d.compiler})")
    except Skip as exc:
        lines.append(f"ktune: backend {session.backend_name} unavailable, items skipped: {exc}")
    if session.store_error is not None:
        lines.append(f"ktune: WARNING {session.store_error.render()}")
    if s.agent is not None:
        from pytest_ktune.agent import AGENT_OFF

        lines.append(f"ktune: agent: model {s.agent.model.model}" if s.agent.model else f"ktune: {AGENT_OFF}")
    return lines


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if not parent.config.getoption("ktune") or file_path.suffix != ".py":
        return None
    try:
        text = file_path.read_text(errors="replace")
    except OSError:
        return None
    if "ktune" not in text or ".target(" not in text:
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
    session.config.stash[REPORTS_KEY] = _write_reports(session.config, s)


def _write_reports(config: pytest.Config, s: Any) -> list[str]:
    """Write the reports asked for on the command line; a line for the terminal about each."""
    from pytest_ktune.core.errors import KtuneError
    from pytest_ktune.report import benchjson, junit

    lines = []
    run = s.results_for_reports()
    for what, option, write in (("JUnit report", "ktune_junit", junit.write),
                                ("benchmark JSON", "ktune_benchmark_json", benchjson.write)):
        value = config.getoption(option)
        if not value:
            continue
        path = Path(config.invocation_params.dir) / Path(value).expanduser()
        try:
            write(path, run)
        except (OSError, ValueError, KtuneError) as exc:
            lines.append(f"{what} NOT written to {path}: {exc}")
        else:
            lines.append(f"wrote the {what} to {path}")
    return lines


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not config.getoption("ktune"):
        return
    from pytest_ktune.items import session_of
    from pytest_ktune.report.terminal import summary_sections

    s = session_of(config)
    assert s is not None
    agents = tuple(s.tuning.agents.values()) if s.tuning else ()
    sections = summary_sections(s.results_for_reports(), agents)
    from pytest_ktune.backends.compile_log import output_asked

    if output_asked():
        from pytest_ktune.report.terminal import compiler_section

        sections.append(compiler_section(s.compiler_output()))
    for title, lines in sections:
        terminalreporter.section(title)
        for line in lines:
            terminalreporter.write_line(line)
    for line in [config.stash.get(FINISH_KEY, ""), *config.stash.get(REPORTS_KEY, [])]:
        if line:
            terminalreporter.write_line(f"ktune: {line}")
