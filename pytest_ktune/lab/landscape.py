"""Recorded tuning landscapes: every feasible configuration of a target for one key, timed on one device.

A landscape is what ``ktune record`` writes and what the replay backend (``_replay``) and
``ktune bench-search`` read. The file is JSON (gzip when its name ends in ``.gz``): a header
naming the target, key, device, source hash, space and ktune version, then one row per line::

    {"format": "pytest-ktune-landscape/1", "target": "...", ..., "count": 60, "rows": [
    {"params": {"BLOCK": 64, "VEC": 1}, "us": 9.61, "cases": [{"id": "...", "us": 9.61, ...}]},
    {"params": {"BLOCK": 1024, "VEC": 8}, "state": "failed", "reason": "compile error: ..."}
    ]}

``us`` is the tuner's objective (the sum over the key's cases of the median time of one call).
A file cut short is no valid JSON; ``count`` also catches rows removed by hand.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.space import Value, config_key

FORMAT = "pytest-ktune-landscape/1"


STATES = ("ok", "infeasible", "failed")


class LandscapeError(KtuneError):
    """A landscape file that cannot be used: damaged, cut short, or recorded for something else."""


@dataclass(frozen=True)
class CaseTiming:
    """One case of a timed point: the median per call and its spread, in µs."""

    case_id: str
    median_us: float
    ci_us: tuple[float, float]
    iqr_us: float
    samples_us: tuple[float, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.case_id, "us": _r(self.median_us),
                               "ci": [_r(self.ci_us[0]), _r(self.ci_us[1])], "iqr": _r(self.iqr_us)}
        if self.samples_us:
            out["samples"] = [_r(s) for s in self.samples_us]
        return out


@dataclass(frozen=True)
class Point:
    """One configuration of the landscape: timed (``ok``), or why not."""

    params: Mapping[str, Value]
    state: str = "ok"
    reason: str = ""
    cases: tuple[CaseTiming, ...] = ()
    compile_s: float = 0.0

    @property
    def value_us(self) -> float:
        """The tuner's objective; infinite for a point that was not timed."""
        return sum(c.median_us for c in self.cases) if self.state == "ok" else math.inf

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"params": dict(self.params)}
        if self.state == "ok":
            out["us"] = _r(self.value_us)
            out["cases"] = [c.to_json() for c in self.cases]
        else:
            out["state"] = self.state
            out["reason"] = self.reason
        if self.compile_s:
            out["compile_s"] = round(self.compile_s, 3)
        return out


@dataclass(frozen=True)
class Landscape:
    """A recorded landscape: its header and its points."""

    target: str  # the target id, as the params file writes it (file::name)
    name: str
    key: Mapping[str, Any]
    backend: str
    device: Mapping[str, Any]  # DeviceInfo's fields plus "id"
    source_hash: str
    space: Mapping[str, Any]  # {"params": {name: [values]}, "constraints": [text, ...]}
    ktune_version: str
    points: tuple[Point, ...]
    recorded: str = ""
    samples: int | None = None  # samples per point asked of the timer; None: the backend's default
    note: str = ""
    # Where a landscape recorded elsewhere came from (``lab.ktcache``: a Kernel Tuner cache file): no
    # ktune target stands behind it, and its feasible configurations are exactly its rows.
    origin: Mapping[str, Any] | None = None
    path: Path | None = field(default=None, compare=False)

    @property
    def device_id(self) -> str:
        return str(self.device.get("id", f"{self.device.get('name')} [{self.backend}]"))

    @property
    def where(self) -> str:
        return str(self.path) if self.path else f"the landscape of {self.name}"

    @property
    def label(self) -> str:
        return f"{self.name} " + "-".join(f"{k}{v}" if isinstance(v, (int, float)) else str(v)
                                          for k, v in self.key.items())

    @property
    def imported(self) -> bool:
        """Recorded by another tool: there is no ktune target, no launch to probe, no source to hash."""
        return self.origin is not None

    @property
    def timed(self) -> list[Point]:
        return [p for p in self.points if p.state == "ok"]

    @property
    def optimum(self) -> Point:
        timed = self.timed
        if not timed:
            raise LandscapeError("the landscape has no timed point, so it has no optimum", where=self.where,
                                 hint="record it again on a device where the kernel runs")
        return min(timed, key=lambda p: p.value_us)

    def lookup(self) -> dict[str, Point]:
        """The points by configuration key (made once: a bench replays a landscape many times)."""
        cached: dict[str, Point] | None = self.__dict__.get("_lookup")
        if cached is None:
            cached = {config_key(p.params): p for p in self.points}
            object.__setattr__(self, "_lookup", cached)
        return dict(cached)

    def space_params(self) -> dict[str, list[Value]]:
        return {n: list(v) for n, v in self.space["params"].items()}

    # -- writing -----------------------------------------------------------------------------

    def render(self) -> str:
        head = {"format": FORMAT, "target": self.target, "name": self.name, "key": dict(self.key),
                "backend": self.backend, "device": dict(self.device), "source_hash": self.source_hash,
                "space": {"params": self.space_params(), "constraints": list(self.space["constraints"])},
                "ktune_version": self.ktune_version, "recorded": self.recorded, "samples": self.samples,
                "note": self.note, "count": len(self.points)}
        if self.origin is not None:
            head["origin"] = dict(self.origin)
        text = json.dumps(head, sort_keys=False)
        rows = ",\n".join(json.dumps(p.to_json()) for p in self.points)
        return text[:-1] + ', "rows": [\n' + rows + "\n]}\n"

    def save(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = self.render().encode()
        path.write_bytes(gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)
        return path

    # -- checking against a target -------------------------------------------------------------

    def check_for(self, source_hash: str, space: Mapping[str, Any], *, what: str) -> None:
        """Fail unless this landscape was recorded for this source and space (``what`` names the target)."""
        again = f"record it again on a {self.backend} device: ktune record --redo {self.where}"
        if source_hash != self.source_hash:
            raise LandscapeError(f"{self.where} was recorded for {what} with source hash {self.source_hash}, "
                                 f"but its source now hashes to {source_hash}",
                                 where=self.where, hint=f"the kernel changed since; {again}")
        mine = {"params": self.space_params(), "constraints": list(self.space["constraints"])}
        theirs = {"params": {n: list(v) for n, v in space["params"].items()},
                  "constraints": list(space["constraints"])}
        if mine != theirs:
            raise LandscapeError(f"{self.where} was recorded for another parameter space of {what}: "
                                 f"{_space_text(mine)} there, {_space_text(theirs)} now",
                                 where=self.where, hint=f"the Space changed since; {again}")


def _space_text(space: Mapping[str, Any]) -> str:
    params = ", ".join(f"{n}={v}" for n, v in space["params"].items())
    cons = "; ".join(space["constraints"])
    return f"{{{params}}}" + (f" with {cons}" if cons else "")


def space_of(target: Any) -> dict[str, Any]:
    """A target's Space as a landscape header writes it."""
    return {"params": {n: list(v) for n, v in target.space.params.items()},
            "constraints": [c.text for c in target.space.constraints]}


def _r(x: float) -> float:
    """A time as written: in full (JSON keeps every digit of a float), so that a row's interval, computed
    from the same numbers, still holds its median once read back."""
    return float(x)


_HINT_DAMAGED = "record it again with `ktune record`, or restore the file from version control"


def load(path: Path) -> Landscape:
    """Read and validate a landscape file; a damaged or truncated one is a LandscapeError naming it."""
    where = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise LandscapeError(f"cannot read the landscape: {exc.strerror}", where=where,
                             hint="check the path; `ktune record` writes landscapes") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error):
            raise LandscapeError("the gzip landscape is truncated or damaged (it ends before its end)",
                                 where=where, hint=_HINT_DAMAGED) from None
    try:
        data = json.loads(raw.decode())
    except UnicodeDecodeError:
        raise LandscapeError("the landscape is not a text or gzip file", where=where, hint=_HINT_DAMAGED) from None
    except json.JSONDecodeError as exc:
        text = raw.decode().rstrip()
        end = exc.pos >= len(text) or not text.endswith("}")  # a landscape ends with its closing brace
        what = "is truncated: it ends" if end else "is damaged: invalid JSON"
        raise LandscapeError(f"the landscape {what} at line {exc.lineno}, column {exc.colno}",
                             where=where, hint=_HINT_DAMAGED) from None
    return parse(data, path)


def parse(data: Any, path: Path | None = None) -> Landscape:
    where = str(path) if path else "a landscape"
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else None
        raise LandscapeError(f"not a landscape file: format is {found!r}, expected {FORMAT!r}", where=where,
                             hint="give a file written by `ktune record`")
    try:
        rows = data["rows"]
        count = int(data["count"])
        points = tuple(_parse_point(r) for r in rows)
        space = data["space"]
        if not isinstance(space.get("params"), dict) or not isinstance(space.get("constraints"), list):
            raise ValueError("the space needs params and constraints")
        land = Landscape(target=str(data["target"]), name=str(data["name"]), key=dict(data["key"]),
                         backend=str(data["backend"]), device=dict(data["device"]),
                         source_hash=str(data["source_hash"]), space=space,
                         ktune_version=str(data["ktune_version"]), points=points,
                         recorded=str(data.get("recorded", "")), samples=data.get("samples"),
                         note=str(data.get("note", "")), origin=_origin(data.get("origin")), path=path)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise LandscapeError(f"the landscape is damaged: {type(exc).__name__}: {exc}", where=where,
                             hint=_HINT_DAMAGED) from None
    if len(points) != count:
        raise LandscapeError(f"the landscape is truncated: its header promises {count} rows, it has {len(points)}",
                             where=where, hint=_HINT_DAMAGED)
    seen: set[str] = set()
    for p in points:
        ck = config_key(p.params)
        if ck in seen:
            raise LandscapeError(f"the landscape lists {dict(p.params)} twice", where=where, hint=_HINT_DAMAGED)
        seen.add(ck)
        bad = [n for n, v in p.params.items() if n not in space["params"] or v not in space["params"][n]]
        if bad or set(p.params) != set(space["params"]):
            raise LandscapeError(f"the row {dict(p.params)} is not a point of the landscape's space",
                                 where=where, hint=_HINT_DAMAGED)
    return land


def _origin(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ValueError("the origin must be an object")
    return dict(raw)


def _parse_point(raw: Mapping[str, Any]) -> Point:
    params = dict(raw["params"])
    state = str(raw.get("state", "ok"))
    if state not in STATES:
        raise ValueError(f"unknown state {state!r}")
    if state != "ok":
        return Point(params, state, str(raw.get("reason", "")), compile_s=float(raw.get("compile_s", 0.0)))
    cases = tuple(CaseTiming(case_id=str(c["id"]), median_us=float(c["us"]),
                             ci_us=(float(c["ci"][0]), float(c["ci"][1])), iqr_us=float(c.get("iqr", 0.0)),
                             samples_us=tuple(float(s) for s in c.get("samples", ())))
                  for c in raw["cases"])
    if not cases:
        raise ValueError(f"the timed row {params} has no cases")
    return Point(params, "ok", cases=cases, compile_s=float(raw.get("compile_s", 0.0)))


def load_all(paths: Sequence[Path]) -> list[Landscape]:
    return [load(p) for p in paths]
