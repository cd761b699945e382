"""The one tuning orchestration, for ``ktune tune`` and ``pytest --ktune-tune`` / ``--ktune-autotune``
alike: which keys to tune (the autotune rule), the agent stage once per target before its search,
the search of each key, its report, and at the end the write-back.

The autotune rule: a key is tuned when

1. it regressed at the gate in this run (only a pytest run has a gate), or
2. it has no tuned entry for this device (it was never tuned here), or
3. its entry's baseline was measured on another version of the kernel's source or of the files
   it includes.

Otherwise it is skipped, and the reason says when it was tuned. Without autotune every key is tuned.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from pytest_ktune import backends
from pytest_ktune.agent import AgentResult, AgentSettings, Bench, run_stage
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.names import DEFAULT_WRITE
from pytest_ktune.core.store import Record, target_id
from pytest_ktune.core.target import Target
from pytest_ktune.report.study import write_for
from pytest_ktune.run.extensions import Extensions
from pytest_ktune.tuner.decide import baseline_is_stale
from pytest_ktune.tuner.outcome import TuneOutcome
from pytest_ktune.tuner.settings import TuneContext, TuneSettings
from pytest_ktune.tuner.tune import tune_key
from pytest_ktune.writeback.deliver import WriteRequest, builtin_write_back


@dataclass(frozen=True)
class Choice:
    """What the autotune rule decided for one key, and why, in words (``tuned on DATE`` when skipped)."""

    tune: bool
    rule: str  # "regressed", "new", "stale" or "current": which part of the rule decided
    why: str


def autotune_choice(record: Record | None, target: Target, backend: str, *, regressed: bool) -> Choice:
    """The autotune rule (the module's docstring) for one key."""
    if regressed:
        return Choice(True, "regressed", "it regressed in this run")
    if record is None or record.tuned is None:
        return Choice(True, "new", "it was never tuned on this device")
    if baseline_is_stale(record, target, backend):
        return Choice(True, "stale", f"tuned on {record.tuned.date} for another version of its source; the "
                                     "source has changed since")
    return Choice(False, "current", f"tuned on {record.tuned.date}")


class Tuning:
    """Tunes keys of targets on one backend, and delivers the winners at the end."""

    def __init__(self, *, root: Path, params_path: Path, backend: str, settings: TuneSettings,
                 extensions: Extensions | None = None, agent: AgentSettings | None = None,
                 progress: TextIO | None = None, command: str = "", write_mode: str = DEFAULT_WRITE) -> None:
        ext = extensions or Extensions()
        self.ctx = TuneContext(root=root, params_path=params_path, backend=backend, settings=settings,
                               progress=progress, sampler_factory=ext.sampler, backend_factory=ext.backend)
        self.agent = agent
        self.command = command
        self.write_mode = write_mode
        self.write_back = ext.write_back or builtin_write_back(write_mode)
        self.outcomes: list[TuneOutcome] = []
        self.agents: dict[str, AgentResult] = {}  # target id -> the agent stage's result
        self.undelivered: str | None = None  # why the write-back could not deliver what was asked

    def target_id(self, target: Target) -> str:
        return target_id(target, self.ctx.root)

    def tune(self, target: Target, key: dict[str, object], indices: tuple[int, ...]) -> TuneOutcome:
        """The agent stage of the target (its first key only, with an agent), then the search of this
        key, and its report. Raises KtuneError (naming the target) when the key cannot be tuned."""
        if self.agent is not None and self.target_id(target) not in self.agents:
            bench = Bench(root=self.ctx.root, params_path=self.ctx.params_path, backend=self.ctx.backend,
                          base=target.for_backend(self.ctx.backend), tune=self.ctx.settings,
                          progress=self.ctx.progress, tools=self.agent.tools)
            self.agents[self.target_id(target)] = run_stage(bench, self.agent, write=self.ctx.settings.write)
        out = tune_key(self.ctx, target, key, indices)
        out = replace(out, report=write_for(self.ctx.scratch, out))
        self.outcomes.append(out)
        return out

    def finish(self, copy_bandwidth: Callable[[], float | None] | None = None) -> str | None:
        """Hand the tunes' outcomes to the write-back mode; one line for the terminal (None: nothing
        was tuned). A mode that cannot deliver leaves its reason in ``undelivered``: the run fails."""
        if not self.outcomes:
            return None
        assert self.write_back is not None
        measure = copy_bandwidth or (lambda: backends.create(self.ctx.backend,
                                                              self.ctx.backend_factory).copy_bandwidth())
        request = WriteRequest(mode=self.write_mode, root=self.ctx.root, params_path=self.ctx.params_path,
                               outcomes=tuple(self.outcomes), device=self.outcomes[0].device,
                               command=self.command, copy_bandwidth=measure)
        try:
            return self.write_back(request)
        except KtuneError as exc:
            self.undelivered = exc.render()
            return f"tuned winners NOT written (--ktune-write={self.write_mode}): {self.undelivered}"
