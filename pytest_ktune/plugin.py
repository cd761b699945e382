"""The pytest skin: options, collection of ``@ktune.target`` kernels, items and the summary.

Nothing here imports numpy, CuPy or PyOpenCL unless ``--ktune`` is given.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from ._session import ItemOutcome, PerfResult, Session
    from ._target import Case, Target

SESSION_KEY = pytest.StashKey["Session"]()
FINISH_KEY = pytest.StashKey[str]()
REPORTS_KEY = pytest.StashKey[list[str]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    from ._samplers import DEFAULT_SAMPLER, SAMPLERS

    group = parser.getgroup("ktune", "kernel correctness, timing and regression gate (pytest-ktune)")
    group.addoption("--ktune", action="store_true", default=False,
                    help="collect @ktune.target kernels: a correctness and a performance item per case")
    group.addoption("--ktune-backend", default="auto", choices=("auto", "cuda", "opencl"),
                    help="where kernels run: cuda (CuPy), opencl (PyOpenCL), or auto: cuda when a GPU "
                         "is visible, else opencl (default: auto)")
    group.addoption("--ktune-threshold", default="median:5%", metavar="STAT:PCT",
                    help="how much slower than its baseline a kernel may get before its performance "
                         "item fails, once confirmed by A/B (default: median:5%%)")
    group.addoption("--ktune-update-baseline", action="store_true", default=False,
                    help="record the measured timings as the new baselines in the params file")
    group.addoption("--ktune-seed", type=int, default=None,
                    help="base seed for the random inputs (default: a new one each run, shown in the header)")
    group.addoption("--ktune-params", default=None, metavar="PATH",
                    help="the params file (default: ktune-params.json at the rootdir; ini: ktune_params)")
    group.addoption("--ktune-tune", action="store_true", default=False,
                    help="tune every selected target for every key of its cases (Optuna), and write a "
                         "winner that beats the current parameters in same-run A/B to the params file")
    group.addoption("--ktune-autotune", action="store_true", default=False,
                    help="tune only keys that regressed at the gate in this run or have no tuned entry yet")
    group.addoption("--ktune-trials", type=int, default=40, help="timed trials per key (default: 40)")
    group.addoption("--ktune-tune-timeout", type=float, default=None, metavar="SECONDS",
                    help="wall-time budget per key (default: none)")
    group.addoption("--ktune-sampler", default=DEFAULT_SAMPLER, choices=SAMPLERS,
                    help="the search after the warm starts (default: bo, a Gaussian process over the feasible "
                         "configurations; grid times every feasible point)")
    group.addoption("--ktune-storage", default=None, metavar="URL",
                    help="an Optuna storage URL (postgresql://...) so several workers share the studies; "
                         "default: a journal file under .ktune/")
    group.addoption("--ktune-write", default="none", choices=("none", "file", "patch", "commit", "pr"),
                    help="what to do with tuned winners: none (report only, the default), file (update the "
                         "params file in place), patch (a git-apply-able patch under .ktune/patches), commit "
                         "(a new branch ktune/..., your checkout untouched), pr (commit, push, open or update "
                         "a pull request; needs GITHUB_TOKEN)")
    group.addoption("--ktune-trial-timeout", type=float, default=60.0, metavar="SECONDS",
                    help="seconds one candidate may take, compile included, before its worker is killed")
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
    parser.addini("ktune_params", "path of the params file, relative to the rootdir",
                  default="ktune-params.json")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU (skipped with a reason where none is)")
    config.addinivalue_line("markers", "ktune: an item collected by pytest-ktune")
    config.addinivalue_line("markers", "ktune_correctness: a pytest-ktune correctness item")
    config.addinivalue_line("markers", "ktune_performance: a pytest-ktune performance item")
    config.addinivalue_line("markers", "ktune_tune: a pytest-ktune tuning item (--ktune-tune, --ktune-autotune)")
    if not config.getoption("ktune"):
        return
    from ._errors import KtuneError
    from ._gate import Threshold
    from ._session import Session, Settings

    try:
        threshold = Threshold.parse(config.getoption("ktune_threshold"))
    except KtuneError as exc:
        raise pytest.UsageError(f"--ktune-threshold: {exc.render()}") from None
    root = Path(config.rootpath)
    option = config.getoption("ktune_params")
    params = Path(option).resolve() if option else root / str(config.getini("ktune_params"))
    seed = config.getoption("ktune_seed")
    tune = None
    if config.getoption("ktune_tune") or config.getoption("ktune_autotune"):
        from ._tuner import TuneSettings

        tune = TuneSettings(trials=config.getoption("ktune_trials"),
                            timeout_s=config.getoption("ktune_tune_timeout"),
                            sampler=config.getoption("ktune_sampler"), storage=config.getoption("ktune_storage"),
                            seed=seed, trial_timeout_s=config.getoption("ktune_trial_timeout"),
                            write=config.getoption("ktune_write") == "file")
        try:
            tune.check()
        except KtuneError as exc:
            raise pytest.UsageError(exc.render()) from None
    agent = None
    if config.getoption("ktune_agent") and tune is None:
        raise pytest.UsageError("--ktune-agent runs around the tuner: add --ktune-tune (or --ktune-autotune)")
    if config.getoption("ktune_agent") and tune is not None:
        from .agent._client import ModelSettings
        from .agent._loop import AgentSettings

        try:
            agent = AgentSettings(model=ModelSettings.from_env(config.getoption("ktune_model")),
                                  iterations=config.getoption("ktune_agent_iterations"))
            agent.check()
        except KtuneError as exc:
            raise pytest.UsageError(f"--ktune-agent: {exc.render()}") from None
    settings = Settings(
        root=root, params_path=params, backend=config.getoption("ktune_backend"), threshold=threshold,
        update_baseline=config.getoption("ktune_update_baseline"),
        seed=seed if seed is not None else random.SystemRandom().randrange(1, 2**31),
        tune=tune, autotune=config.getoption("ktune_autotune") and not config.getoption("ktune_tune"),
        write_mode=config.getoption("ktune_write"),
        command=" ".join(["pytest", *config.invocation_params.args]),
        agent=agent,
    )
    session = Session(settings)
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(_OutcomeRecorder(session), "ktune-outcomes")


def _session(config: pytest.Config) -> Session | None:
    return config.stash.get(SESSION_KEY, None)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    session = _session(config)
    if session is None:
        return None
    s = session.settings
    lines = [f"ktune: seed {s.seed} (rerun with --ktune-seed {s.seed}), threshold {s.threshold}, "
             f"params {s.params_path}"]
    from ._session import Skip

    try:
        b = session.backend()
        lines.append(f"ktune: backend {b.name} on {b.device.name} ({b.device.arch}; {b.device.compiler})")
    except Skip as exc:
        lines.append(f"ktune: backend {session.backend_name} unavailable: {exc}")
    if session.store_error is not None:
        lines.append(f"ktune: WARNING {session.store_error.render()}")
    if s.agent is not None:
        from .agent._loop import AGENT_OFF

        lines.append(f"ktune: agent: model {s.agent.model.model}" if s.agent.model else f"ktune: {AGENT_OFF}")
    return lines


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if _session(parent.config) is None or file_path.suffix != ".py":
        return None
    try:
        text = file_path.read_text(errors="replace")
    except OSError:
        return None
    if "ktune" not in text or ".target(" not in text:
        return None
    return KtuneModule.from_parent(parent, path=file_path)


class KtuneModule(pytest.Module):
    """A Python file that defines ``@ktune.target`` kernels; one collector per target."""

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        from ._target import Target

        module = self.obj
        for _, value in sorted(vars(module).items()):
            if isinstance(value, Target) and value.module == module.__name__:
                yield TargetCollector.from_parent(self, name=value.name, target=value)


class TargetCollector(pytest.Collector):
    """The items of one target: a correctness and a performance item per case."""

    def __init__(self, *, target: Target, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target = target

    def collect(self) -> Iterator[pytest.Item]:
        from ._errors import KtuneError

        session = _session(self.config)
        assert session is not None
        backend = session.backend_name
        for i, case in enumerate(self.target.cases):
            try:
                case_id = self.target.case_id(case)
            except KtuneError as exc:
                yield BrokenItem.from_parent(self, name=f"case{i}", error=exc)
                continue
            for cls in (CorrectnessItem, PerformanceItem):
                item = cls.from_parent(self, name=f"{cls.kind}[{case_id}]", target=self.target, case=case)
                yield self._mark(item, cls.marker, backend)
        if session.settings.tune is None:
            return
        from ._tuner import cases_by_key, key_label

        try:
            keys = list(cases_by_key(self.target, backend).values())
        except KtuneError as exc:
            yield BrokenItem.from_parent(self, name="tune", error=exc)
            return
        for key, indices in keys:
            tune = TuneItem.from_parent(self, name=f"tune[{key_label(key)}]", target=self.target, key=key,
                                        indices=tuple(indices))
            yield self._mark(tune, "tune", backend)

    @staticmethod
    def _mark(item: pytest.Item, marker: str, backend: str) -> pytest.Item:
        item.add_marker("ktune")
        item.add_marker(f"ktune_{marker}")
        if backend == "cuda":
            item.add_marker("gpu")
        return item


class _KtuneItem(pytest.Item):
    kind = ""
    marker = ""

    def __init__(self, *, target: Target, case: Case, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.case = case

    @property
    def session_(self) -> Session:
        s = _session(self.config)
        assert s is not None
        return s

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.target.file, None, f"{self.target.name}::{self.name}"

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str | Any:
        from ._errors import KtuneError
        from ._session import Regression

        if isinstance(excinfo.value, (KtuneError, Regression)):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def _run(self, fn: Any) -> Any:
        from ._session import Skip

        try:
            return fn(self.target, self.case)
        except Skip as exc:
            pytest.skip(str(exc))


class CorrectnessItem(_KtuneItem):
    """Fresh random inputs, poisoned outputs, compared with the reference."""

    kind = "correct"
    marker = "correctness"

    def runtest(self) -> None:
        notes = self._run(self.session_.check)
        for note in notes:
            self.user_properties.append(("ktune", note))


class PerformanceItem(_KtuneItem):
    """Timed against the recorded baseline; a regression is confirmed by same-run A/B."""

    kind = "perf"
    marker = "performance"

    def runtest(self) -> None:
        result: PerfResult = self._run(self.session_.perf)
        self.user_properties.append(("ktune_time_us", result.time_us))
        self.user_properties.append(("ktune_verdict", result.verdict))
        if result.note:
            self.user_properties.append(("ktune_note", result.note))


class TuneItem(pytest.Item):
    """Tunes one target for one key; fails only on an error, never because nothing better was found."""

    def __init__(self, *, target: Target, key: dict[str, Any], indices: tuple[int, ...], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.key = key
        self.indices = indices

    def runtest(self) -> None:
        from ._session import Skip

        session = _session(self.config)
        assert session is not None
        try:
            out = session.tune(self.target, self.key, self.indices)
        except Skip as exc:
            pytest.skip(str(exc))
        self.user_properties.append(("ktune_tuned", out.decision))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str | Any:
        from ._errors import KtuneError

        if isinstance(excinfo.value, KtuneError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.target.file, None, f"{self.target.name}::{self.name}"


class BrokenItem(pytest.Item):
    """Stands in for a case whose id could not be computed, so the error shows and the run goes on."""

    def __init__(self, *, error: Exception, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.error = error

    def runtest(self) -> None:
        raise self.error

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str | Any:
        return str(excinfo.value)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.name


class _OutcomeRecorder:
    """Keeps how each ktune item ended in the Session, for the JUnit report."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.items: dict[str, ItemOutcome] = {}

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        from ._session import ItemOutcome

        for item in items:
            target: Target | None = None
            key = None
            if isinstance(item, _KtuneItem):
                check, target = item.kind, item.target
            elif isinstance(item, TuneItem):
                check, target, key = "tune", item.target, item.key
            elif isinstance(item, BrokenItem) and isinstance(item.parent, TargetCollector):
                check, target = "broken", item.parent.target
            if target is None:
                continue
            name = item.name
            label = name[len(check) + 1:-1] if name.startswith(f"{check}[") and name.endswith("]") else name
            self.items[item.nodeid] = ItemOutcome(nodeid=item.nodeid, check=check,
                                                  target=self.session.target_id(target), name=target.name,
                                                  label=label, outcome="passed", key=key)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        from dataclasses import replace

        base = self.items.get(report.nodeid)
        if base is None:
            return
        seen = self.session.outcomes.get(report.nodeid, base)
        outcome, message = seen.outcome, seen.message
        if report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr or "")
            outcome, message = "skipped", reason.removeprefix("Skipped: ")
        elif report.failed:
            earlier = f"{message}\n\n{report.when}: " if outcome in ("failed", "error") else ""
            outcome = "failed" if report.when == "call" else ("error" if not earlier else outcome)
            message = earlier + report.longreprtext
        self.session.outcomes[report.nodeid] = replace(seen, outcome=outcome, message=message,
                                                       duration_s=seen.duration_s + (report.duration or 0.0))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    s = _session(session.config)
    if s is None:
        return
    line = s.finish()
    if line:
        session.config.stash[FINISH_KEY] = line
    session.config.stash[REPORTS_KEY] = _write_reports(session.config, s)


def _write_reports(config: pytest.Config, s: Session) -> list[str]:
    """Write the reports asked for on the command line; a line for the terminal about each."""
    from . import _benchjson, _junit
    from ._errors import KtuneError

    lines = []
    for what, option, write in (("JUnit report", "ktune_junit", _junit.write),
                                ("benchmark JSON", "ktune_benchmark_json", _benchjson.write)):
        value = config.getoption(option)
        if not value:
            continue
        path = Path(config.invocation_params.dir) / Path(value).expanduser()
        try:
            write(path, s)
        except (OSError, ValueError, KtuneError) as exc:
            lines.append(f"{what} NOT written to {path}: {exc}")
        else:
            lines.append(f"wrote the {what} to {path}")
    return lines


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    s = _session(config)
    if s is None:
        return
    from ._report import summary_table

    if s.results:
        terminalreporter.section("ktune summary")
        for line in summary_table(s.results):
            terminalreporter.write_line(line)
        missing = [r for r in s.results if r.verdict == "no baseline"]
        notes = [r for r in s.results if r.note and r.verdict != "no baseline"]
        if notes or missing:
            terminalreporter.write_line("")
        for r in notes:
            terminalreporter.write_line(f"{r.target}[{r.case}]: {r.note}")
        if missing:
            terminalreporter.write_line(
                f"{len(missing)} case(s) have no baseline for this device: run with "
                "--ktune-update-baseline to record them in the params file")
    if s.tunes:
        from ._report import tune_table

        terminalreporter.section("ktune tuning")
        for line in tune_table(s.tunes):
            terminalreporter.write_line(line)
    if s.agents:
        terminalreporter.section("ktune agent")
        for result in s.agents.values():
            terminalreporter.write_line(result.message)
            if result.transcript is not None:
                terminalreporter.write_line(f"  transcript: {result.transcript} ({result.usage})")
    line = config.stash.get(FINISH_KEY, "")
    if line:
        terminalreporter.write_line(f"ktune: {line}")
    for line in config.stash.get(REPORTS_KEY, []):
        terminalreporter.write_line(f"ktune: {line}")
