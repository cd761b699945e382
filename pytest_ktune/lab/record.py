"""``ktune record``: brute-force every feasible configuration of a target for one key, on this device.

The sweep goes through the tuner's own worker (``WorkerPool.evaluate``: configurations of a request
are compiled in parallel threads, then verified and timed one by one), so a landscape holds what the
tuner would have measured, failures and device-limit rejections included, with their reasons.
"""

from __future__ import annotations

import dataclasses
import random
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_ktune import backends
from pytest_ktune.core.discover import discover, select
from pytest_ktune.core.errors import KtuneError, SpaceError
from pytest_ktune.core.keys import cases_by_key, key_label, key_matches, key_string
from pytest_ktune.core.options import DEFAULTS
from pytest_ktune.core.store import now_utc, target_id
from pytest_ktune.core.target import Target
from pytest_ktune.core.version import __version__
from pytest_ktune.lab.landscape import CaseTiming, Landscape, LandscapeError, Point, load, space_of
from pytest_ktune.measure.bench import BenchConfig
from pytest_ktune.measure.worker import Outcome, TargetRef, WorkerPool, WorkerSpec

CHUNK = 16  # configurations per worker request: compiled in parallel, then timed one by one


@dataclasses.dataclass(frozen=True)
class RecordSettings:
    """How to record: samples per point (None: the backend's timer defaults), timeouts, seed."""

    samples: int | None = 5
    trial_timeout_s: float = DEFAULTS.trial_timeout
    seed: int = 0


KEY_MODES = ("given", "all", "extremes", "smallest", "largest")


def choose_keys(target: Target, backend: str, wanted: Sequence[Mapping[str, Any]] | None, *,
                mode: str = "all", max_bytes: int | None = None) -> list[tuple[dict[str, Any], list[int]]]:
    """The keys to record: those given; else, by ``mode``, every key of the target's cases on this
    backend, or the key of the smallest and/or the largest case (by input bytes), among the keys
    whose cases hold at most ``max_bytes`` of inputs."""

    by_key = cases_by_key(target, backend)
    if wanted:
        out = []
        for want in wanted:
            hit = next(((k, idx) for k, idx in by_key.values() if key_matches(k, want)), None)
            if hit is None:

                known = "; ".join(key_string(k) for k, _ in by_key.values()) or "none"
                raise KtuneError(f"{target.name} has no case on {backend} with key {dict(want)}",
                                 where=target.where, hint=f"its keys on {backend}: {known}")
            out.append((dict(hit[0]), list(hit[1])))
        return out
    def size(item: tuple[dict[str, Any], list[int]]) -> int:
        return max(target.cases[i].input_bytes for i in item[1])

    keys = [(dict(k), list(idx)) for k, idx in by_key.values()]
    if max_bytes is not None:
        keys = [k for k in keys if size(k) <= max_bytes]
    if mode == "all" or not keys:
        return keys

    ordered = sorted(keys, key=size)
    if mode == "smallest":
        return ordered[:1]
    if mode == "largest":
        return ordered[-1:]
    return ordered[:1] + ordered[1:][-1:]


def record_landscape(root: Path, target: Target, backend: str, key: Mapping[str, Any], cases: Sequence[int], *,
                     settings: RecordSettings, progress: bool = True) -> Landscape:
    """Time every feasible point of ``target`` (its space on ``backend``) for ``key`` and return the landscape."""

    target = target.for_backend(backend)
    feasible = list(target.space.feasible(key))
    if not feasible:
        raise SpaceError(f"the space has no valid point for key {key_string(key)}", where=target.where,
                         hint="widen the Space or relax a constraint")
    order = list(feasible)
    random.Random(settings.seed).shuffle(order)  # a slow drift of the device favours no corner
    bench = None
    if settings.samples is not None:
        base = BenchConfig() if backend == "cuda" else BenchConfig(min_sample_s=2e-3, max_repeats=200, warmup=2)
        bench = dataclasses.replace(base, min_samples=settings.samples, max_samples=settings.samples,
                                    max_time_s=min(base.max_time_s, 1.0))
    spec = WorkerSpec(target=TargetRef.of(target), backend=backend, cases=tuple(cases),
                      cache_dir=str(root / ".ktune" / "cache" / backend), bench=bench)
    outcomes: dict[int, Outcome] = {}
    t0 = time.monotonic()
    label = f"{target.name} {key_string(key)}"
    with WorkerPool(spec, trial_timeout_s=settings.trial_timeout_s) as pool:
        pool.ensure()
        device = pool.device
        for start in range(0, len(order), CHUNK):
            chunk = order[start:start + CHUNK]
            # One seed for the whole sweep: the worker then reuses its inputs and the reference's answer.
            for j, out in enumerate(pool.evaluate(chunk, settings.seed)):
                outcomes[start + j] = out
            if progress:
                done = min(start + CHUNK, len(order))
                print(f"ktune record: {label}: {done}/{len(order)} points  [{time.monotonic() - t0:.0f} s]",
                      file=sys.stderr, flush=True)
    rank = {id(cfg): i for i, cfg in enumerate(order)}
    points = [_point(cfg, outcomes[rank[id(cfg)]]) for cfg in feasible]
    return Landscape(target=target_id(target, root), name=target.name, key=dict(key), backend=backend,
                     device={**dataclasses.asdict(device), "id": device.id},
                     source_hash=target.source_hash(backend), space=space_of(target), ktune_version=__version__,
                     points=tuple(points), recorded=now_utc(), samples=settings.samples,
                     note=f"recorded by ktune record in {time.monotonic() - t0:.1f} s")


def run_redo(root: Path, files: Sequence[Path], backend: str, *, out: Path | None, settings: RecordSettings,
             stale_only: bool) -> list[Path]:
    """``ktune record --redo``: record again the target and key of each landscape file, on this device, and
    write the new landscape over the old file (or into ``out``, a folder). With ``stale_only``, only
    landscapes whose target's source or space has changed since they were recorded."""

    backend = backends.resolve(backend)
    by_id = {target_id(t, root): t for t in discover(root)}
    jobs = []
    for path in files:
        land = load(path)  # a truncated or foreign file stops here, before any GPU time is spent
        target = by_id.get(land.target)
        if target is None:
            raise KtuneError(f"{path} was recorded for {land.target}, which is not a target under {root}",
                             hint="pass the project it was recorded in with --root")
        if land.backend != backend:
            raise KtuneError(f"{path} was recorded on {land.backend}; this run records on {backend}",
                             hint=f"pass --backend {land.backend}")
        try:
            land.check_for(target.source_hash(backend), space_of(target.for_backend(backend)), what=target.name)
            fresh = True
        except LandscapeError:
            fresh = False
        if stale_only and fresh:
            print(f"ktune record: {path.name}: source and space unchanged, kept", file=sys.stderr)
            continue
        chosen = choose_keys(target, backend, [{k: str(v) for k, v in land.key.items()}])
        jobs.append((path, target, *chosen[0]))
    written = []
    for path, target, key, idx in jobs:
        land = record_landscape(root, target, backend, key, idx, settings=settings)
        dest = path if out is None else out / path.name
        land.save(dest)
        print(f"{target.name} {key_string(key)}: {len(land.timed)}/{len(land.points)} timed; wrote {dest}")
        written.append(dest)
    return written


def _point(cfg: Mapping[str, Any], out: Outcome) -> Point:
    if out.status != "ok":
        return Point(dict(cfg), out.status, out.reason, compile_s=out.compile_s)
    return Point(dict(cfg), "ok", cases=tuple(
        CaseTiming(t.case_id, t.median_s * 1e6, (t.ci[0] * 1e6, t.ci[1] * 1e6), t.iqr_s * 1e6,
                   tuple(s * 1e6 for s in t.samples)) for t in out.times), compile_s=out.compile_s)


def default_name(target: Target, key: Mapping[str, Any], device_name: str) -> str:
    """The file name of a landscape: target, key and device, safe on any filesystem."""
    import re


    raw = f"{target.name}-{key_label(key)}-{device_name}"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", raw) + ".json.gz"


def parse_bytes(text: str) -> int:
    """``"64M"`` -> 67108864; K, M and G are powers of 1024."""

    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    try:
        return int(float(t[:-1]) * scale[t[-1]]) if t and t[-1] in scale else int(t)
    except ValueError:
        raise KtuneError(f"--max-bytes {text!r} is not a size", hint="e.g. --max-bytes 64M") from None


def run_record(root: Path, names: Sequence[str], backend: str, key: Mapping[str, str], *, keys: str,
               out: Path | None, settings: RecordSettings, max_bytes: int | None = None,
               within: Sequence[Path] = ()) -> list[Path]:
    """``ktune record``: record the chosen keys of the chosen targets (those under the files and
    folders ``within``, where given); the files written."""

    backend = backends.resolve(backend)
    targets = select(discover(root, within), names, root, command="ktune record")
    if not targets:
        raise KtuneError(f"no @ktune.target found under {root}", hint="run from the project root, or pass --root")
    if key and keys != "given":
        raise KtuneError("--key and --extreme-keys (or --all-keys, --smallest-key, --largest-key) pick keys two "
                         "ways", hint="give one of them")
    if not key and keys == "given":
        raise KtuneError("which key? give --key NAME=VALUE (repeat it for each dimension), --extreme-keys "
                         "(the smallest and the largest case) or --all-keys",
                         hint="e.g. ktune record silu_and_mul --key T=256 --key dtype=float16")
    jobs = []
    for target in targets:
        if backend not in target.sources:
            print(f"ktune record: {target.name}: no {backend} source, skipped", file=sys.stderr)
            continue
        chosen = choose_keys(target, backend, [key] if key else None, mode=keys, max_bytes=max_bytes)
        if not chosen:
            print(f"ktune record: {target.name}: no key on {backend} within --max-bytes, skipped", file=sys.stderr)
        jobs += [(target, k, idx) for k, idx in chosen]
    single = out is not None and (out.name.endswith(".json") or out.name.endswith(".json.gz"))
    if single and len(jobs) != 1:
        raise KtuneError(f"--out {out} names one file, but {len(jobs)} landscapes would be recorded",
                         hint="give a folder to --out")
    written = []
    for target, k, idx in jobs:
        land = record_landscape(root, target, backend, k, idx, settings=settings)
        if single:
            assert out is not None
            path = out
        else:
            folder = out if out is not None else root / ".ktune" / "landscapes"
            path = folder / default_name(target, k, str(land.device.get("name", backend)))
        land.save(path)
        timed = len(land.timed)
        opt = land.optimum if timed else None
        print(f"{target.name} {key_string(k)}: {timed}/{len(land.points)} timed"
              + (f", optimum {opt.value_us:.3f} µs at {dict(opt.params)}" if opt else "")
              + f"; wrote {path}")
        written.append(path)
    return written
