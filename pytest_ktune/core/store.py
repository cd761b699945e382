"""The params file: tuned parameters and baselines per target, device and key.

One committed JSON file at the project root, ``ktune-params.json``, written
with sorted keys and records in a stable order so that diffs stay small.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_ktune.core import git as _git
from pytest_ktune.core.errors import StoreError
from pytest_ktune.core.files import write_atomic
from pytest_ktune.core.keys import key_string
from pytest_ktune.core.space import Value, is_number
from pytest_ktune.core.target import Target
from pytest_ktune.core.version import __version__

FORMAT = "pytest-ktune/1"


FILENAME = "ktune-params.json"


_FIX_HINT = "fix the file by hand, or restore the committed one with `git checkout -- {name}`"


@dataclass(frozen=True)
class Timing:
    """Timing statistics of one case, in microseconds."""

    median_us: float
    iqr_us: float
    ci_low_us: float
    ci_high_us: float
    samples: int
    gbps: float | None = None

    @classmethod
    def of(cls, median_s: float, iqr_s: float, ci_s: tuple[float, float], samples: int,
           gbps: float | None) -> Timing:
        """A measurement's statistics (in seconds) as the params file keeps them: microseconds to four
        decimals, GB/s to three; the one rounding of the gate's baselines and the tuner's records."""
        return cls(median_us=round(median_s * 1e6, 4), iqr_us=round(iqr_s * 1e6, 4),
                   ci_low_us=round(ci_s[0] * 1e6, 4), ci_high_us=round(ci_s[1] * 1e6, 4), samples=samples,
                   gbps=round(gbps, 3) if gbps else None)


@dataclass(frozen=True)
class Baseline:
    """What the gate compares against: timings measured with ``params`` on this source.

    ``commit`` holds the source file as it was measured (None where git did not). ``deps_hash`` is the
    ``Target.deps_hash`` of the files it included; None where it included none, or in a record
    written before it was kept: such a baseline makes no claim about them.

    ``machines`` holds the timings per device identity (``DeviceInfo.machine``): timings apply only to
    the machine that measured them. ``timings`` are those of a record written before identities were
    kept, on a machine no one can name now: history, never the gate's reference.
    """

    params: Mapping[str, Value]
    source_hash: str
    source_path: str
    commit: str | None
    date: str
    ktune_version: str
    timings: Mapping[str, Timing] = field(default_factory=dict)
    deps_hash: str | None = None
    machines: Mapping[str, Mapping[str, Timing]] = field(default_factory=dict)

    def timings_on(self, machine: str) -> Mapping[str, Timing]:
        """The case timings recorded on ``machine`` (a device identity); empty where it recorded none."""
        return self.machines.get(machine, {})

    def all_timings(self) -> Iterator[tuple[str | None, str, Timing]]:
        """Every timing as (machine, case, timing); machine None for the unnamed ones of old records."""
        for case, t in self.timings.items():
            yield None, case, t
        for machine, timings in self.machines.items():
            for case, t in timings.items():
                yield machine, case, t

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["params"] = dict(self.params)
        if self.deps_hash is None:
            del d["deps_hash"]
        if not self.timings and self.machines:
            del d["timings"]
        if not self.machines:
            del d["machines"]
        return d


@dataclass(frozen=True)
class Tuned:
    """When and how the parameters were last tuned, and what came of it."""

    date: str
    sampler: str
    trials: int
    study: str
    result: str
    verified: str | None = None  # a generated template's: how these parameters were verified (core.verified)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        if self.verified is None:
            del d["verified"]
        return d


@dataclass(frozen=True)
class Record:
    """The parameters production uses for one target on one device and key, and their baseline."""

    target: str
    device: str
    key: Mapping[str, Any]
    params: Mapping[str, Value]
    baseline: Baseline | None = None
    tuned: Tuned | None = None

    @property
    def ident(self) -> tuple[str, str, str]:
        return (self.target, self.device, key_string(self.key))

    @classmethod
    def from_json(cls, raw: Any, where: str = "record") -> Record:
        """The record ``to_json`` wrote; a ValueError, naming ``where``, for one that is damaged."""
        return _parse_record(raw, where)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"target": self.target, "device": self.device, "key": dict(self.key),
                             "params": dict(self.params)}
        if self.baseline is not None:
            d["baseline"] = self.baseline.to_json()
        if self.tuned is not None:
            d["tuned"] = self.tuned.to_json()
        return d


def target_id(target: Target, root: Path) -> str:
    """How the params file names a target: its file relative to the project root, and its name."""
    try:
        rel = target.file.relative_to(root.resolve()).as_posix()
    except ValueError:
        rel = target.file.name
    return f"{rel}::{target.name}"


def _parse_timing(raw: Any, where: str) -> Timing:
    if not isinstance(raw, dict):
        raise ValueError(f"{where} is not an object")
    try:
        timing = Timing(**raw)
    except TypeError as exc:
        raise ValueError(f"{where}: {exc}") from None
    for name in ("median_us", "iqr_us", "ci_low_us", "ci_high_us"):
        if not is_number(getattr(timing, name)):
            raise ValueError(f"{where}: {name} is {getattr(timing, name)!r}, not a number")
    if not isinstance(timing.samples, int) or isinstance(timing.samples, bool):
        raise ValueError(f"{where}: samples is {timing.samples!r}, not an integer")
    if timing.gbps is not None and not is_number(timing.gbps):
        raise ValueError(f"{where}: gbps is {timing.gbps!r}, not a number or null")
    return timing


def _require(raw: dict[str, Any], fields: dict[str, type], where: str) -> None:
    for name, typ in fields.items():
        if not isinstance(raw.get(name), typ):
            raise ValueError(f"{where} has no valid {name!r} (expected a {typ.__name__})")


def _check_params(params: dict[str, Any], where: str) -> None:
    for k, v in params.items():
        if not isinstance(v, (int, float, str, bool)):
            raise ValueError(f"{where}: parameter {k} has value {v!r}, not a number or string")


def _parse_baseline(raw: Any, where: str) -> Baseline:
    if not isinstance(raw, dict):
        raise ValueError(f"{where} is not an object")
    _require(raw, {"params": dict, "source_hash": str, "source_path": str, "date": str,
                   "ktune_version": str}, where)
    _check_params(raw["params"], where)
    commit = raw.get("commit")
    if commit is not None and not isinstance(commit, str):
        raise ValueError(f"{where} has a commit that is not a string")
    deps = raw.get("deps_hash")
    if deps is not None and not isinstance(deps, str):
        raise ValueError(f"{where} has a deps_hash that is not a string")
    timings_raw = raw.get("timings", {})
    if not isinstance(timings_raw, dict):
        raise ValueError(f"{where}: timings is not an object")
    machines_raw = raw.get("machines", {})
    if not isinstance(machines_raw, dict) or not all(isinstance(t, dict) for t in machines_raw.values()):
        raise ValueError(f"{where}: machines is not an object of timings by device identity")
    extra = set(raw) - {"params", "source_hash", "source_path", "commit", "date", "ktune_version", "timings",
                        "deps_hash", "machines"}
    if extra:
        raise ValueError(f"{where} has unknown fields {sorted(extra)}")
    timings = {c: _parse_timing(t, f"{where} timing {c!r}") for c, t in timings_raw.items()}
    machines = {m: {c: _parse_timing(t, f"{where} timing {c!r} on {m!r}") for c, t in ts.items()}
                for m, ts in machines_raw.items()}
    return Baseline(params=raw["params"], source_hash=raw["source_hash"], source_path=raw["source_path"],
                    commit=commit, date=raw["date"], ktune_version=raw["ktune_version"], timings=timings,
                    deps_hash=deps, machines=machines)


def _parse_record(raw: Any, where: str) -> Record:
    if not isinstance(raw, dict):
        raise ValueError(f"{where} is not an object")
    _require(raw, {"target": str, "device": str, "key": dict, "params": dict}, where)
    _check_params(raw["params"], where)
    extra = set(raw) - {"target", "device", "key", "params", "baseline", "tuned"}
    if extra:
        raise ValueError(f"{where} has unknown fields {sorted(extra)}")
    baseline = _parse_baseline(raw["baseline"], f"{where} baseline") if "baseline" in raw else None
    tuned = _parse_tuned(raw["tuned"], f"{where} tuned") if "tuned" in raw else None
    return Record(target=raw["target"], device=raw["device"], key=raw["key"], params=raw["params"],
                  baseline=baseline, tuned=tuned)


def _parse_tuned(raw: Any, where: str) -> Tuned:
    if not isinstance(raw, dict):
        raise ValueError(f"{where} is not an object")
    _require(raw, {"date": str, "sampler": str, "trials": int, "study": str, "result": str}, where)
    extra = set(raw) - {"date", "sampler", "trials", "study", "result", "verified"}
    if extra:
        raise ValueError(f"{where} has unknown fields {sorted(extra)}")
    if raw.get("verified") is not None and not isinstance(raw["verified"], str):
        raise ValueError(f"{where} has a verified that is not a string")
    return Tuned(**raw)


class Store:
    """The records of one params file, loaded once; written back atomically."""

    def __init__(self, path: Path, records: Iterable[Record] = ()) -> None:
        self.path = path
        self.records: dict[tuple[str, str, str], Record] = {r.ident: r for r in records}

    @property
    def root(self) -> Path:
        return self.path.parent

    @classmethod
    def load(cls, path: Path) -> Store:
        """Read ``path``; a missing file is an empty store, a damaged one a StoreError."""
        if not path.exists():
            return cls(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise StoreError(f"cannot read the params file: {exc.strerror}", where=str(path),
                             hint="check its permissions") from None
        return cls.from_text(text, path)

    @classmethod
    def from_text(cls, text: str, path: Path) -> Store:
        """The store that ``text`` (the params file's content, e.g. as git holds it) describes; a
        StoreError, naming ``path``, where it is damaged."""
        hint = _FIX_HINT.format(name=path.name)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise StoreError(f"the params file is not valid JSON: {exc.msg} at line {exc.lineno}, "
                             f"column {exc.colno}", where=str(path), hint=hint) from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise StoreError(f"the params file does not start with \"format\": \"{FORMAT}\"",
                             where=str(path), hint=hint)
        raw_records = data.get("records")
        if not isinstance(raw_records, list):
            raise StoreError("the params file has no \"records\" list", where=str(path), hint=hint)
        try:
            records = [_parse_record(r, f"record {i}") for i, r in enumerate(raw_records)]
        except ValueError as exc:
            raise StoreError(f"the params file is damaged: {exc}", where=str(path), hint=hint) from None
        return cls(path, records)

    def find(self, target: str, device: str, key: Mapping[str, Any]) -> Record | None:
        return self.records.get((target, device, key_string(key)))

    def for_target(self, target: str) -> list[Record]:
        return [r for r in self.records.values() if r.target == target]

    def render(self) -> str:
        ordered = [self.records[k].to_json() for k in sorted(self.records)]
        return json.dumps({"format": FORMAT, "records": ordered}, indent=2, sort_keys=True) + "\n"

    def save(self, updates: Iterable[Record]) -> None:
        """Merge ``updates`` into the file as it is on disk now, and replace it atomically."""
        current = Store.load(self.path)
        for r in updates:
            current.records[r.ident] = r
        write_atomic(self.path, current.render())
        self.records = current.records


def now_utc() -> str:
    import datetime as _dt

    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_baseline(root: Path, target: Target, backend: str, params: Mapping[str, Value],
                 timings: Mapping[str, Timing], *, machine: str) -> Baseline:
    """A baseline for ``params`` on the target's current source and the files it includes, with the
    commit that holds that source and the module that declares the target (None when either has
    changes HEAD does not hold, or outside git), and ``timings`` measured on ``machine`` (a device
    identity)."""

    path = target.source_path(backend)
    commit = _git.head_commit(root)
    module = target.file if target.file.resolve().is_relative_to(root.resolve()) else None
    if commit and any(_git.differs_from_head(root, p) for p in (path, module) if p is not None):
        commit = None
    try:
        rel = path.relative_to(root.resolve()).as_posix()
    except ValueError:
        rel = str(path)
    return Baseline(params=dict(params), source_hash=target.source_hash(backend), source_path=rel,
                    commit=commit, date=now_utc(), ktune_version=__version__,
                    deps_hash=target.deps_hash(backend), machines={machine: dict(timings)})


def merge_baselines(prev: Baseline | None, new: Baseline) -> Baseline:
    """``new`` with the timings that ``prev`` holds of the same program (parameters, source and
    included files) on other machines and other cases kept: a baseline re-recorded on one machine
    leaves the others' timings in place, and one of another program replaces them all."""
    if prev is None or dict(prev.params) != dict(new.params) or prev.source_hash != new.source_hash \
            or prev.deps_hash != new.deps_hash:
        return new
    machines = {m: dict(ts) for m, ts in prev.machines.items()}
    for m, ts in new.machines.items():
        machines[m] = {**machines.get(m, {}), **ts}
    return replace(new, machines=machines)


def source_changed(baseline: Baseline, target: Target, backend: str) -> bool:
    """Whether ``baseline`` was measured on another version of the target's source: another source
    file, or other included files where the baseline records them (its ``deps_hash``)."""
    return (baseline.source_hash != target.source_hash(backend)
            or baseline.deps_hash not in (None, target.deps_hash(backend)))
