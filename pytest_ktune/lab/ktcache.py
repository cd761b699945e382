"""Kernel Tuner's cache files in and out: the format in which the tuning community publishes landscapes.

A Kernel Tuner cache file is JSON (gzip when it says so): a header (``device_name``, ``kernel_name``,
``problem_size``, ``tune_params_keys``, ``tune_params``, ``objective``) and ``cache``, one entry per
configuration it ran, keyed by the parameter values joined with commas in ``tune_params_keys``'
order. An entry holds the parameter values, ``time`` (the objective, in milliseconds; the mean of
``times``, the observations), ``compile_time`` and other timings in milliseconds, or, for a
configuration that did not run, one of Kernel Tuner's markers in place of a value:
``InvalidConfig`` (it broke a device limit), ``CompilationFailedConfig`` or ``RuntimeFailedConfig``.
Kernel Tuner appends entries as it goes and closes the file only at the end, so a file that ends
after an entry and its comma (or right after the opening of ``cache``) is whole; one that ends
inside an entry is cut short.

Imported, a cache is a landscape with no ktune target behind it (``Landscape.origin`` says where it
came from): its feasible configurations are exactly the ones the cache lists, since Kernel Tuner
writes no entry for a configuration its restrictions rule out. Exported, a landscape keeps what
Kernel Tuner's format cannot say (the key, the cases, the reason of each failure) in fields Kernel
Tuner passes over, so that importing the export gives the landscape back.
"""

from __future__ import annotations

import gzip
import json
import math
import statistics
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_ktune.core.space import Value, config_key
from pytest_ktune.core.version import __version__
from pytest_ktune.lab.landscape import FORMAT, CaseTiming, Landscape, LandscapeError, Point, load

KT_FORMAT = "kernel-tuner-cache"


KT_BACKEND = "kernel_tuner"  # the backend an imported landscape names: Kernel Tuner ran it, on its own backend


TARGET_PREFIX = "kernel_tuner"  # an imported landscape's target: kernel_tuner::<kernel_name>


MARKERS = {"InvalidConfig": "infeasible", "CompilationFailedConfig": "failed", "RuntimeFailedConfig": "failed",
           "ErrorConfig": "failed"}


HEADER = ("device_name", "kernel_name", "problem_size", "tune_params_keys", "tune_params", "objective", "cache")


_HINT = "give a cache file written by Kernel Tuner (tune_kernel(..., cache=FILE)), whole"


def _error(message: str, path: Path, hint: str = _HINT) -> LandscapeError:
    return LandscapeError(message, where=str(path), hint=hint)


def read(path: Path) -> dict[str, Any]:
    """The cache file as Kernel Tuner reads it: an unclosed file (Kernel Tuner still writing, or
    stopped) is closed; a file cut inside an entry, or not Kernel Tuner's, is a LandscapeError."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise _error(f"cannot read the cache file: {exc.strerror}", path, "check the path") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error):
            raise _error("the gzip file is truncated or damaged (it ends before its end)", path) from None
    try:
        text = raw.decode().strip()
    except UnicodeDecodeError:
        raise _error("not a Kernel Tuner cache file: neither JSON text nor gzip", path) from None
    if not text.startswith(("{", "[")):
        raise _error("not a Kernel Tuner cache file: it is not JSON", path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        data = _closed(text, exc, path)
    if not isinstance(data, dict):
        raise _error("not a Kernel Tuner cache file: its JSON is not an object", path)
    if data.get("format") == FORMAT:
        raise _error("this is a ktune landscape, not a Kernel Tuner cache file", path,
                     "pass it to ktune bench-search as it is, or export it with ktune export-landscape")
    if "results" in data and "cache" not in data:
        raise _error("this is a T4 results file, not a Kernel Tuner cache file", path,
                     "give the cache file Kernel Tuner wrote beside it (tune_kernel(..., cache=FILE))")
    missing = [k for k in ("tune_params", "cache") if k not in data]
    if missing:
        raise _error(f"not a Kernel Tuner cache file: it has no {' and no '.join(missing)}", path)
    return data


def _closed(text: str, first: json.JSONDecodeError, path: Path) -> Any:
    """A file Kernel Tuner left open (it ends after an entry's comma, or after ``"cache": {``), closed."""
    body = text[:-1] if text.endswith(",") else text
    if body.endswith(("}", "{")):
        try:
            return json.loads(body + "}\n}")
        except json.JSONDecodeError:
            pass
    raise _error(f"the cache file is truncated or damaged: invalid JSON at line {first.lineno}, column "
                 f"{first.colno}, and it does not end after a whole entry", path,
                 "copy the whole file again; Kernel Tuner can resume a run from the entries that are whole") from None


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_params(data: Mapping[str, Any], path: Path) -> tuple[list[str], dict[str, list[Value]]]:
    tune = data["tune_params"]
    if not isinstance(tune, dict) or not tune:
        raise _error("its tune_params is not an object of parameter names and value lists", path)
    params: dict[str, list[Value]] = {}
    for name, values in tune.items():
        if not isinstance(values, list) or not values or any(isinstance(v, (list, dict)) or v is None
                                                            for v in values):
            raise _error(f"its tune_params lists no values, or values other than numbers, strings and booleans, "
                         f"for {name}", path)
        params[str(name)] = list(values)
    keys = data.get("tune_params_keys", list(params))
    if not isinstance(keys, list) or sorted(map(str, keys)) != sorted(params):
        raise _error(f"its tune_params_keys {keys} are not the parameters of its tune_params ({', '.join(params)})",
                     path, "the file was edited by hand or is damaged: restore it")
    return [str(k) for k in keys], params


def _values_match(a: Value, b: Any) -> bool:
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _point(label: str, entry: Any, names: list[str], params: Mapping[str, list[Value]], *, case_id: str,
           path: Path) -> Point:
    if not isinstance(entry, dict):
        raise _error(f"its cache entry {label!r} is not an object", path)
    missing = [n for n in names if n not in entry]
    if missing:
        raise _error(f"its tune_params disagree with its entries: the entry {label!r} has no value for "
                     f"{', '.join(missing)}", path, "the header and the entries come from different runs: "
                                                    "give the file Kernel Tuner wrote, unedited")
    cfg: dict[str, Value] = {}
    for n in names:
        hit = next((v for v in params[n] if _values_match(v, entry[n])), None)
        if hit is None:
            raise _error(f"its tune_params disagree with its entries: the entry {label!r} has {n}={entry[n]!r}, "
                         f"which tune_params does not list ({params[n]})", path,
                         "the header and the entries come from different runs: give the file Kernel Tuner "
                         "wrote, unedited")
        cfg[n] = hit
    compile_s = float(entry["compile_time"]) / 1000 if _number(entry.get("compile_time")) else 0.0
    marker = next((str(v) for v in entry.values() if isinstance(v, str) and v in MARKERS), None)
    if marker is not None:
        reason = entry.get("reason")
        text = str(reason) if isinstance(reason, str) and reason else f"Kernel Tuner: {marker}"
        state = entry.get("state") if entry.get("state") in ("infeasible", "failed") else MARKERS[marker]
        return Point(cfg, str(state), text, compile_s=compile_s)
    raw: Any = entry.get("time")
    t = float(raw) if _number(raw) else math.nan
    if not math.isfinite(t) or t <= 0:
        raise _error(f"its cache entry {label!r} has no time in milliseconds (time={raw!r}) and no failure marker",
                     path, "give a cache file whose objective Kernel Tuner recorded as time")
    cases = entry.get("cases")
    if isinstance(cases, list) and cases:  # a ktune export: its cases as they were
        try:
            timings = tuple(CaseTiming(str(c["id"]), float(c["us"]), (float(c["ci"][0]), float(c["ci"][1])),
                                       float(c.get("iqr", 0.0)), tuple(float(s) for s in c.get("samples", ())))
                            for c in cases)
        except (KeyError, TypeError, ValueError, IndexError):
            raise _error(f"its cache entry {label!r} has cases ktune cannot read", path) from None
        return Point(cfg, "ok", cases=timings, compile_s=compile_s)
    times = [float(x) * 1000 for x in entry.get("times", []) if _number(x) and math.isfinite(float(x))]
    us = t * 1000
    return Point(cfg, "ok", cases=(_timing(case_id, us, times),), compile_s=compile_s)


MEAN_CI_Z = 1.96  # a 95 % interval of a mean, in standard errors


def _timing(case_id: str, us: float, samples: list[float]) -> CaseTiming:
    """Kernel Tuner's objective (the mean of its observations) with the spread of the observations.
    The interval is the mean's (1.96 standard errors either side), so it holds the objective; the
    median's interval would miss it wherever a slow outlier pulls the mean above the median."""
    if len(samples) < 2:
        return CaseTiming(case_id, us, (us, us), 0.0, tuple(samples))
    if len(samples) < 4:
        iqr = max(samples) - min(samples)
    else:
        q = statistics.quantiles(samples, n=4, method="inclusive")
        iqr = q[2] - q[0]
    half = MEAN_CI_Z * statistics.stdev(samples) / math.sqrt(len(samples))
    return CaseTiming(case_id, us, (us - half, us + half), iqr, tuple(samples))



def problem_key(problem_size: Any) -> dict[str, Any]:
    """Kernel Tuner's problem size as a ktune key: its dimensions x, y, z (more: d3, d4, ...)."""
    dims = problem_size if isinstance(problem_size, list) else [problem_size]
    names = ["x", "y", "z"]
    out: dict[str, Any] = {}
    for i, v in enumerate(dims):
        name = names[i] if i < len(names) else f"d{i}"
        out[name] = v if _number(v) or isinstance(v, str) else str(v)
    return out


def import_cache(path: Path, *, device: str | None = None) -> Landscape:
    """A Kernel Tuner cache file as a landscape. ``device`` names the device where the file does not
    (an empty ``device_name``); by default the file's name, without its extensions, does."""
    data = read(path)
    names, params = _check_params(data, path)
    cache = data["cache"]
    if not isinstance(cache, dict) or not cache:
        raise _error("its cache holds no entry: Kernel Tuner ran no configuration", path,
                     "give the cache file of a finished (or at least started) run")
    mine: dict[str, Any] = data["ktune"] if isinstance(data.get("ktune"), dict) else {}
    kernel = str(data.get("kernel_name") or path.name.split(".")[0])
    recorded_name = str(data.get("device_name") or "")
    dev = str(device or recorded_name or path.name.split(".")[0])
    named_by = "--device" if device else "the file's device_name" if recorded_name else "the file's name"
    key = dict(mine["key"]) if isinstance(mine.get("key"), dict) else problem_key(data.get("problem_size", []))
    case_id = f"{kernel}-" + "x".join(str(v) for v in key.values()) if key else kernel
    points = [_point(str(label), entry, names, params, case_id=case_id, path=path) for label, entry in cache.items()]
    seen: dict[str, str] = {}
    for label, p in zip(cache, points, strict=True):
        ck = config_key(p.params)
        if ck in seen:
            raise _error(f"its entries {seen[ck]!r} and {label!r} are the same configuration", path)
        seen[ck] = str(label)
    if not any(p.state == "ok" for p in points):
        raise _error("none of its entries has a time: every configuration failed", path,
                     "a landscape needs at least one timed configuration")
    ordered = {n: params[n] for n in names}
    origin = {"format": KT_FORMAT, "file": path.name, "kernel_name": data.get("kernel_name"),
              "device_name": data.get("device_name"), "problem_size": data.get("problem_size"),
              "objective": data.get("objective", "time"), "device_named_by": named_by,
              "feasible": "the configurations the cache lists (Kernel Tuner writes none that its restrictions "
                          "rule out)"}
    target = str(mine.get("target") or f"{TARGET_PREFIX}::{kernel}")
    device_fields = unknown_device(dev)
    note = (f"imported from the Kernel Tuner cache file {path.name} by ktune {__version__}; times are Kernel "
            "Tuner's objective (the mean of its observations), in µs")
    return Landscape(target=target, name=str(mine.get("name") or kernel), key=key,
                     backend=str(mine.get("backend") or KT_BACKEND),
                     device=dict(mine["device"]) if isinstance(mine.get("device"), dict) else device_fields,
                     source_hash=str(mine.get("source_hash", "")),
                     space={"params": ordered, "constraints": list(mine.get("constraints", []))},
                     ktune_version=__version__, points=tuple(points), recorded=str(mine.get("recorded", "")),
                     samples=None, note=note, origin=origin, path=path)


def device_note(land: Landscape) -> str:
    """What an imported landscape's device name stands on, where the file itself did not name it; ''
    where it did, or for a landscape of ktune's own."""
    origin = land.origin or {}
    if origin.get("format") != KT_FORMAT or origin.get("device_named_by") != "the file's name":
        return ""
    return (f"the cache file {origin.get('file', '?')} records no device, so the device is named after the file "
            f"({land.device.get('name', '?')}); `ktune import-landscape --device NAME` names it")


def unknown_device(name: str) -> dict[str, Any]:
    """A device known only by its name: Kernel Tuner's cache files record nothing else about it."""
    fields: dict[str, Any] = {"backend": KT_BACKEND, "name": name, "arch": "", "compiler": "", "compute_units": 0,
                              "max_threads_per_block": 0, "shared_mem_per_block": 0, "regs_per_block": 0,
                              "l2_bytes": 0, "global_mem_bytes": 0, "warp_size": 0, "max_alloc_bytes": 0,
                              "kind": "gpu"}
    return {**fields, "id": f"{name} [{KT_BACKEND}]"}


FAILED_MARKER = {"infeasible": "InvalidConfig", "failed": "RuntimeFailedConfig"}


def _marker(p: Point) -> str:
    if p.state == "failed" and p.reason.startswith("compile error"):
        return "CompilationFailedConfig"
    return FAILED_MARKER.get(p.state, "RuntimeFailedConfig")


def problem_size(land: Landscape) -> list[Any]:
    """The problem size Kernel Tuner is told: an imported landscape's own, else the key's numbers."""
    if land.origin is not None and isinstance(land.origin.get("problem_size"), (list, int)):
        size = land.origin["problem_size"]
        return list(size) if isinstance(size, list) else [size]
    numbers = [v for v in land.key.values() if _number(v)]
    return numbers or [1]


def cache_key(params: Mapping[str, Value], names: list[str]) -> str:
    return ",".join(str(params[n]) for n in names)


def export_cache(land: Landscape) -> dict[str, Any]:
    """The landscape in Kernel Tuner's format. Every point is kept: a timed one with its time in ms
    and, for one case, its samples as ``times``; a failed or infeasible one with Kernel Tuner's
    marker as its time and ktune's reason beside it. ``ktune`` and each entry's ``cases``,
    ``state`` and ``reason`` are ktune's own fields, which Kernel Tuner passes over."""
    names = list(land.space["params"])
    cache: dict[str, Any] = {}
    for p in land.points:
        entry: dict[str, Any] = dict(p.params)
        compile_ms = p.compile_s * 1000
        if p.state == "ok":
            ms = p.value_us / 1000
            samples = p.cases[0].samples_us if len(p.cases) == 1 else ()
            times = [s / 1000 for s in samples] or [ms]
            entry.update(time=ms, times=times, compile_time=compile_ms, verification_time=0,
                         benchmark_time=sum(times), strategy_time=0, framework_time=0,
                         cases=[c.to_json() for c in p.cases])
        else:
            entry.update(time=_marker(p), compile_time=compile_ms, verification_time=0, benchmark_time=0,
                         strategy_time=0, framework_time=0, state=p.state, reason=p.reason)
        cache[cache_key(p.params, names)] = entry
    mine = {"target": land.target, "name": land.name, "key": dict(land.key), "backend": land.backend,
            "device": dict(land.device), "source_hash": land.source_hash,
            "constraints": list(land.space["constraints"]), "recorded": land.recorded,
            "ktune_version": land.ktune_version}
    # ``cache`` comes last: Kernel Tuner takes a file that does not end with the cache's closing braces
    # for one it left open, and closes it again.
    return {"device_name": str(land.device.get("name", land.device_id)), "kernel_name": land.name,
            "problem_size": problem_size(land), "tune_params_keys": names, "tune_params": land.space_params(),
            "objective": "time", "ktune": mine, "cache": cache}


def write_cache(land: Landscape, path: Path) -> Path:
    """Write the export to ``path`` (gzip when its name ends in .gz; Kernel Tuner itself reads plain JSON)."""
    data = json.dumps(export_cache(land), indent=None).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)
    return path


def is_cache_file(path: Path) -> bool:
    """Whether the file looks like a Kernel Tuner cache (and not a ktune landscape), from its first bytes."""
    try:
        with path.open("rb") as fh:
            head = fh.read(1 << 16)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as gz:
                head = gz.read(1 << 16)
    except (OSError, EOFError, zlib.error):
        return False
    text = head.decode(errors="replace")
    return FORMAT not in text and ('"tune_params"' in text or '"cache"' in text)


def load_any(path: Path, *, device: str | None = None) -> Landscape:
    """A ktune landscape file, or a Kernel Tuner cache file imported (``device`` as in import_cache)."""
    return import_cache(path, device=device) if is_cache_file(path) else load(path)
