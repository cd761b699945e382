"""What the benchmark scripts share: the repository on sys.path, run facts, result files."""

from __future__ import annotations

import cProfile
import datetime as _dt
import json
import math
import platform
import pstats
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def add_repo_to_path() -> None:
    """Make ``pytest_ktune``, ``ktune`` and ``example_project`` importable without installing them."""
    root = str(ROOT)
    if root not in sys.path:
        sys.path.insert(0, root)


def time_calls(fn: Callable[[], Any], calls: int, sync: Callable[[], None]) -> tuple[float, float]:
    """Host seconds per call of ``fn`` called ``calls`` times in a loop with one ``sync`` at the end (the
    loop's time before the sync, divided by the calls), and the wall seconds per call, the sync included."""
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    sync()
    t2 = time.perf_counter()
    return (t1 - t0) / calls, (t2 - t0) / calls


def interleaved(methods: Mapping[str, Callable[[], Any]], repeats: int, calls: int,
                sync: Callable[[], None]) -> dict[str, list[tuple[float, float]]]:
    """``time_calls`` of every method in ``repeats`` rounds, the order rotated each round so that no
    method always runs first: each method's (host, wall) seconds per call, a pair per round."""
    samples: dict[str, list[tuple[float, float]]] = {m: [] for m in methods}
    names = list(methods)
    for r in range(repeats):
        for m in names[r % len(names):] + names[:r % len(names)]:
            samples[m].append(time_calls(methods[m], calls, sync))
    return samples


def profiled(call: Callable[[], Any], calls: int, **stats_args: Any) -> tuple[pstats.Stats, float]:
    """cProfile's statistics of ``calls`` calls of ``call`` (``stats_args`` go to ``pstats.Stats``), and the
    Python function calls per call."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        call()
    prof.disable()
    stats = pstats.Stats(prof, **stats_args)
    return stats, stats.total_calls / calls  # type: ignore[attr-defined]


def command_line() -> str:
    """The command as typed, with the script named relative to the repository."""
    script = Path(sys.argv[0])
    try:
        shown = script.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        shown = script.name
    return shlex.join(["python3", shown, *sys.argv[1:]])


def cpu_model() -> str:
    """The host processor's model name as the operating system gives it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def now_utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def versions() -> dict[str, str]:
    """Python, the platform, and the version of each array library this process imported."""
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for name in ("numpy", "cupy", "torch", "pyopencl", "triton"):
        mod = sys.modules.get(name)
        if mod is not None:
            out[name] = str(getattr(mod, "VERSION_TEXT", None) or getattr(mod, "__version__", "?"))
    return out


def us(seconds: float | None, digits: int = 4) -> float | None:
    """Seconds as microseconds, rounded for the JSON file."""
    if seconds is None or not math.isfinite(seconds):
        return None
    return round(seconds * 1e6, digits)


def fmt_us(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    v = seconds * 1e6
    return f"{v:.2f}" if v < 1000 else f"{v:,.1f}"


def fmt_num(value: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:{spec}}{suffix}"


def geomean(values: list[float]) -> float | None:
    good = [v for v in values if v > 0 and math.isfinite(v)]
    if not good:
        return None
    return math.exp(sum(math.log(v) for v in good) / len(good))


def md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def jsonable(value: Any) -> Any:
    """Numpy scalars, paths and tuples as plain JSON values."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "item"):
        return jsonable(value.item())
    return str(value)


def write_results(json_path: Path, data: Mapping[str, Any], markdown: str) -> Path:
    """Write ``data`` to ``json_path`` and ``markdown`` beside it (same stem, ``.md``); return the latter."""
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(jsonable(data), indent=1) + "\n")
    md_path = json_path.with_suffix(".md")
    md_path.write_text(markdown.rstrip() + "\n")
    return md_path


def shown_path(path: Path) -> str:
    """``path`` relative to the repository where it lies inside it."""
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def git(repo: Path, *args: str) -> str:
    """``git -C repo ARGS``'s output; raises where git fails."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def commit_project(repo: Path, message: str) -> None:
    """``repo`` made a git repository of its own with everything in it committed as ``message``
    (``.ktune/`` and caches ignored), so the gate has a history to read."""
    (repo / ".gitignore").write_text(".ktune/\n__pycache__/\n")
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "bench@example.com")
    git(repo, "config", "user.name", "bench")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
