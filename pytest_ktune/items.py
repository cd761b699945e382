"""The pytest items of ``--ktune``: per target and case a correctness and a performance item, per key
a tune item under ``--ktune-tune``; and the recorder of how each ended, for the JUnit report.

Each item calls the run's ``Session`` (``config.stash[SESSION_KEY]``); nothing here measures.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.keys import cases_by_key, clash, key_label
from pytest_ktune.core.target import Target
from pytest_ktune.gate.verdict import PerfResult, Regression
from pytest_ktune.report.results import ItemOutcome
from pytest_ktune.run.session import Session, Skip

SESSION_KEY = pytest.StashKey[Session]()


def session_of(config: pytest.Config) -> Session | None:
    return config.stash.get(SESSION_KEY, None)


#: Packages a kernel module may need that only one backend needs: a module that cannot import one of them is
#: skipped, saying what to install, rather than an error of a run on another backend.
BACKEND_PACKAGES = {"triton": "pip install 'pytest-ktune[triton]'",
                    "torch": "install torch for your platform: Triton kernels run on torch tensors"}


class KtuneModule(pytest.Module):
    """A Python file that defines ``@ktune.target`` kernels; one collector per target."""

    def _getobj(self) -> Any:
        try:
            return super()._getobj()  # type: ignore[no-untyped-call]
        except self.CollectError as exc:
            cause = exc.__context__
            missing = cause.name if isinstance(cause, ModuleNotFoundError) else None
            top = (missing or "").partition(".")[0]
            if top in BACKEND_PACKAGES:
                pytest.skip(f"{self.path.name} needs {top}, which is not installed ({BACKEND_PACKAGES[top]}); "
                            "its targets run with --ktune-backend triton", allow_module_level=True)
            raise

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
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
        session = session_of(self.config)
        assert session is not None
        backend = session.backend_for(self.target)  # the run's, or its second's (Triton's, in a cuda run)
        ids: list[tuple[int, str | KtuneError]] = []
        for i, case in enumerate(self.target.cases):
            try:
                ids.append((i, self.target.case_id(case)))
            except KtuneError as exc:
                ids.append((i, exc))
        error = clash(self.target, [(i, c) for i, c in ids if isinstance(c, str)])
        if error is not None:  # a collection error, before any item runs: the ids name baselines
            raise self.CollectError(error.render())
        for i, case_id in ids:
            if isinstance(case_id, KtuneError):
                yield BrokenItem.from_parent(self, name=f"case{i}", error=case_id)
                continue
            for cls in (CorrectnessItem, PerformanceItem):
                item = cls.from_parent(self, name=f"{cls.kind}[{case_id}]", target=self.target, case_index=i)
                yield self._mark(item, cls.marker, backend)
        if session.settings.tune is None:
            return
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

    def __init__(self, *, target: Target, case_index: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.case_index = case_index

    @property
    def session_(self) -> Session:
        s = session_of(self.config)
        assert s is not None
        return s

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.target.file, None, f"{self.target.name}::{self.name}"

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str | Any:
        if isinstance(excinfo.value, (KtuneError, Regression)):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class CorrectnessItem(_KtuneItem):
    """Fresh random inputs, poisoned outputs, compared with the reference."""

    kind = "correct"
    marker = "correctness"

    def runtest(self) -> None:
        try:
            notes = self.session_.check(self.target, self.case_index)
        except Skip as exc:
            pytest.skip(str(exc))
        for note in notes:
            self.user_properties.append(("ktune", note))


class PerformanceItem(_KtuneItem):
    """Timed against the recorded baseline; a regression is confirmed by same-run A/B."""

    kind = "perf"
    marker = "performance"

    def runtest(self) -> None:
        try:
            result: PerfResult = self.session_.perf(self.target, self.case_index)
        except Skip as exc:
            pytest.skip(str(exc))
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
        session = session_of(self.config)
        assert session is not None
        try:
            out = session.tune(self.target, self.key, self.indices)
        except Skip as exc:
            pytest.skip(str(exc))
        self.user_properties.append(("ktune_tuned", out.decision))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str | Any:
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


class OutcomeRecorder:
    """Keeps how each ktune item ended in the Session, for the JUnit report."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.items: dict[str, ItemOutcome] = {}

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
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
        self.session.expect([(item.target, item.case_index) for item in items if isinstance(item, PerformanceItem)],
                            [(item.target, item.case_index) for item in items if isinstance(item, CorrectnessItem)])

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
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
