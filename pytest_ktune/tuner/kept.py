"""Decisions kept under ``.ktune/winners/`` until the write-back delivers them.

A tune decides each key (its best timed A/B against the parameters in use) long before the run
ends and the write-back mode delivers. Each decision is kept here as it is made, one small JSON file
per target, device and key, so that a run interrupted after some keys loses none of them: a rerun
resumes each study (its trials are in the study's storage), finds the same best against the same
parameters in use, and takes the kept decision instead of timing the A/B again. The write-back
removes what it delivered (``run.tuning.Tuning.finish``). Only scratch is written here, never the
user's files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pytest_ktune.core.files import write_atomic
from pytest_ktune.core.keys import key_string
from pytest_ktune.core.space import Value, config_key
from pytest_ktune.core.store import Record, source_changed
from pytest_ktune.core.target import Target
from pytest_ktune.tuner.outcome import CaseChange
from pytest_ktune.tuner.storage import study_name

FOLDER = "winners"


@dataclass(frozen=True)
class Kept:
    """One key's decision: the best the study found, the parameters it was timed against, the verdict,
    and what the params file gets."""

    best: Mapping[str, Value]
    current: Mapping[str, Value]
    accepted: bool
    decision: str
    record: Record
    changes: tuple[CaseChange, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"best": dict(self.best), "current": dict(self.current), "accepted": self.accepted,
                "decision": self.decision, "record": self.record.to_json(),
                "changes": [asdict(c) for c in self.changes]}


def path_of(scratch: Path, tid: str, device: str, key: Mapping[str, Any]) -> Path:
    """Where the decision of this target id, device and key is kept."""
    return scratch / FOLDER / f"{study_name(tid, device, key)}.json"


def keep(scratch: Path, kept: Kept) -> Path:
    """Keep ``kept`` (atomically: an interruption leaves the old file or the new one); its path."""
    r = kept.record
    path = path_of(scratch, r.target, r.device, r.key)
    write_atomic(path, json.dumps(kept.to_json(), indent=1, sort_keys=True) + "\n")
    return path


def resume(scratch: Path, target: Target, backend: str, *, tid: str, device: str, key: Mapping[str, Any],
           best: Mapping[str, Value], current: Mapping[str, Value]) -> Kept | None:
    """The kept decision of this key where it still holds: made between the same best and the same
    parameters in use, with a baseline measured on the source as it is now. None otherwise (nothing
    kept, a damaged file, or a decision about something that has changed since)."""
    path = path_of(scratch, tid, device, key)
    try:
        raw = json.loads(path.read_text())
        kept = Kept(best=dict(raw["best"]), current=dict(raw["current"]), accepted=bool(raw["accepted"]),
                    decision=str(raw["decision"]), record=Record.from_json(raw["record"], str(path)),
                    changes=tuple(CaseChange(**c) for c in raw["changes"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if config_key(kept.best) != config_key(best) or config_key(kept.current) != config_key(current):
        return None
    if kept.record.ident != (tid, device, key_string(key)):
        return None
    baseline = kept.record.baseline
    if baseline is not None and source_changed(baseline, target, backend):
        return None
    return kept


def discard(scratch: Path, records: list[Record]) -> None:
    """Forget the decisions of these records: delivered."""
    for r in records:
        path_of(scratch, r.target, r.device, r.key).unlink(missing_ok=True)
