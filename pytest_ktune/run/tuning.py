"""The one tuning orchestration, for ``ktune tune`` and ``pytest --ktune-tune`` / ``--ktune-autotune``
alike: ``Tuning`` is built from the run's ``Settings`` and its device; ``Tuning.choose``
decides which keys to tune (a target without a source for the device's backend is skipped, and under
autotune the autotune rule decides); ``Tuning.tune`` runs the agent stage once per target before its
search, the search of each key and its report; ``Tuning.finish`` hands everything tuned to the
write-back mode, the one path by which a tune changes the user's files.

The autotune rule: a key is tuned when

1. it regressed at the gate in this run (only a pytest run has a gate), or
2. it has no tuned entry for this device (it was never tuned here), or
3. its entry's baseline was measured on another version of the kernel's source or of the files
   it includes.

Otherwise it is skipped, and the reason says when it was tuned. Without autotune every key is tuned.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pytest_ktune import backends
from pytest_ktune.agent import AgentResult, Bench, run_stage
from pytest_ktune.backends.base import DeviceInfo
from pytest_ktune.core.errors import BackendUnavailable, KtuneError
from pytest_ktune.core.names import BACKENDS
from pytest_ktune.core.store import Record, Store, target_id
from pytest_ktune.core.target import Target
from pytest_ktune.report.study import write_for
from pytest_ktune.run.settings import Settings
from pytest_ktune.tuner import kept
from pytest_ktune.tuner.decide import baseline_is_stale
from pytest_ktune.tuner.outcome import TuneOutcome
from pytest_ktune.tuner.settings import TuneContext
from pytest_ktune.tuner.tune import tune_key
from pytest_ktune.writeback.deliver import WriteRequest, builtin_write_back
from pytest_ktune.writeback.deliver import unknown as unknown_mode


@dataclass(frozen=True)
class Choice:
    """What the autotune rule decided for one key, and why, in words (``tuned on DATE`` when skipped)."""

    tune: bool
    rule: str  # "regressed", "new", "stale", "current", or "no source" (nothing to tune on this backend)
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


def _device_indices(devices: tuple[int, ...] | str | None, backend: str) -> tuple[int, ...] | None:
    """--devices as indices (``all``: every device the backend can be pinned to); one past the last is
    refused before anything starts, as the gate refuses it."""
    if devices is None:
        return None
    count = backends.device_count(backend)
    if devices == "all":
        return tuple(range(count))
    assert not isinstance(devices, str)
    past = [i for i in devices if i >= count]
    if past:
        raise KtuneError(f"--ktune-devices names {backend} device {past[0]}, but there are {count}",
                         hint=f"give indices below {count}, or all")
    return devices


class Tuning:
    """Tunes keys of targets on one device, and delivers what it found at the end."""

    def __init__(self, settings: Settings, *, backend: str, device: DeviceInfo | None,
                 devices: tuple[int, ...] | None = None) -> None:
        """``backend``: the language of the sources the device's backend compiles (a plugin's backend
        too: ``DeviceInfo.backend``); ``device`` None where the backend could not start (each key then
        fails with why; the autotune rule, which reads the device's records, cannot run); ``devices``:
        the indices of --ktune-devices, whose workers tune each key's study together (None: one worker on
        the backend's device)."""
        assert settings.tune is not None, "a run that tunes has TuneSettings"
        ext = settings.extensions
        self.settings = settings
        self.device = device
        self.ctx = TuneContext(root=settings.root, params_path=settings.params_path, backend=backend,
                               settings=settings.tune, progress=settings.progress, sampler_factory=ext.sampler,
                               backend_factory=ext.backend, keep=True, devices=devices)
        write_back = ext.write_back or builtin_write_back(settings.write_mode)
        if write_back is None:
            raise unknown_mode(settings.write_mode)
        self.write_back = write_back
        self.store = Store.load(settings.params_path)  # as the run found it: what the autotune rule reads
        self.outcomes: list[TuneOutcome] = []
        self.agents: dict[str, AgentResult] = {}  # target id -> the agent stage's result
        self.undelivered: str | None = None  # why the write-back could not deliver what was asked

    @classmethod
    def in_process(cls, settings: Settings) -> Tuning:
        """The tuning of a run outside pytest (``ktune tune``), on the backend made here as a plugin or
        the built-ins make it. A built-in backend that cannot start here still names its own language,
        and each key then fails with why (under autotune, which reads the device's records, this
        raises); a plugin's backend must start to say what it compiles."""
        name = backends.resolve(settings.backend)
        try:
            device: DeviceInfo | None = backends.create(name, settings.extensions.backend).device
        except BackendUnavailable:
            if settings.autotune or backends.factory_ref(settings.extensions.backend) is not None \
                    or name not in BACKENDS:
                raise
            device = None
        return cls(settings, backend=device.backend if device else name, device=device,
                   devices=_device_indices(settings.devices, name))

    @property
    def backend(self) -> str:
        return self.ctx.backend

    def target_id(self, target: Target) -> str:
        return target_id(target, self.ctx.root)

    def choose(self, target: Target, key: Mapping[str, Any], *, regressed: bool = False) -> Choice:
        """Whether to tune this key of ``target``: never without a source for the device's backend; under
        autotune, by the autotune rule; otherwise always."""
        if self.backend not in target.sources:
            return Choice(False, "no source", f"{target.name} has no {self.backend} source")
        if not self.settings.autotune:
            return Choice(True, "asked", "tuning was asked for")
        assert self.device is not None, "autotune needs the device (the skins refuse a run without one)"
        record = self.store.find(self.target_id(target), self.device.id, key)
        return autotune_choice(record, target, self.backend, regressed=regressed)

    def tune(self, target: Target, key: dict[str, object], indices: tuple[int, ...]) -> TuneOutcome:
        """The agent stage of the target (its first key only, with an agent), then the search of this
        key, and its report. Raises KtuneError (naming the target) when the key cannot be tuned."""
        agent = self.settings.agent
        if agent is not None and self.target_id(target) not in self.agents:
            bench = Bench(root=self.ctx.root, params_path=self.ctx.params_path, backend=self.backend,
                          base=target.for_backend(self.backend), tune=self.ctx.settings,
                          progress=self.ctx.progress, tools=agent.tools)
            self.agents[self.target_id(target)] = run_stage(bench, agent)
        out = tune_key(self.ctx, target, key, indices)
        out = replace(out, report=write_for(self.ctx.scratch, out))
        self.outcomes.append(out)
        return out

    def request(self, copy_bandwidth: Callable[[], float | None]) -> WriteRequest:
        """What the write-back mode is given: every key tuned, and the agent stage's templates."""
        s = self.settings
        templates = tuple(r.template for r in self.agents.values() if r.template is not None)
        return WriteRequest(mode=s.write_mode, root=s.root, params_path=s.params_path, outcomes=tuple(self.outcomes),
                            device=self.outcomes[0].device if self.outcomes else self.device.id if self.device else "",
                            command=s.command, copy_bandwidth=copy_bandwidth, templates=templates)

    def finish(self, copy_bandwidth: Callable[[], float | None] | None = None) -> str | None:
        """Hand the tunes' outcomes and templates to the write-back mode; one line for the terminal (None:
        nothing was tuned); ``copy_bandwidth`` measures the device's (default: on the backend made in this
        process). What it delivered is marked ``written`` and its kept decisions are
        forgotten; a mode that cannot deliver leaves its reason in ``undelivered`` (the run fails) and
        the decisions stay under .ktune/winners/ for a rerun."""
        request = self.request(copy_bandwidth or (lambda: backends.create(
            backends.resolve(self.settings.backend), self.settings.extensions.backend).copy_bandwidth()))
        if not self.outcomes and not request.templates:
            return None
        try:
            line = self.write_back(request)
        except KtuneError as exc:
            self.undelivered = exc.render()
            return f"tuned winners NOT written (--ktune-write={self.settings.write_mode}): {self.undelivered}"
        if self.settings.write_mode != "none":
            kept.discard(self.ctx.scratch, [o.record for o in self.outcomes if o.record is not None])
            delivered = self.delivers()
            self.outcomes = [replace(o, written=o.record is not None and o.record.ident in delivered)
                             for o in self.outcomes]
        return line

    def delivers(self) -> set[tuple[str, str, str]]:
        """The records (by ident) the write-back is given to write: every tuned key's in ``file`` mode
        (a kept one says when it was tuned), the winners' in the others."""
        every = self.settings.write_mode == "file"
        return {o.record.ident for o in self.outcomes if o.record is not None and (every or o.changes)}
