"""Timings in pytest-benchmark's JSON format (``--ktune-benchmark-json PATH``).

The document has the shape of ``pytest --benchmark-json`` output — ``machine_info``,
``commit_info``, ``benchmarks``, ``datetime`` and ``version`` — so tools that
read that format (``pytest-benchmark compare``, github-action-benchmark with
``tool: pytest``) chart ktune's timings. Each performance item is one benchmark:

* ``name`` is the item's name (``perf[CASE]``), ``fullname`` the target's id and
  that name (``kernels/rmsnorm.py::rmsnorm::perf[CASE]``), ``group`` the target's id;
* ``params`` are the kernel's parameters, ``param`` the case id;
* ``stats`` are in seconds per call of the target's function, over the timing
  samples (``data``); ``iterations`` is how many calls each sample averaged;
* ``extra_info`` holds ktune's own numbers: the time and the baseline in µs,
  their ratio, the verdict, the backend, the device, GB/s, and GFLOP/s with the
  fraction of the device's multiply-add peak and the roofline side (``flops=``).

``version`` is the pytest-benchmark format version this follows (the installed
pytest-benchmark's, which is a dependency); ``generator`` names ktune.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_ktune.core import git
from pytest_ktune.core.files import write_atomic
from pytest_ktune.core.version import __version__
from pytest_ktune.report.results import RunResults

if TYPE_CHECKING:
    from pytest_ktune.gate.verdict import PerfResult


FORMAT_VERSION = "5.1.0"  # used when pytest-benchmark's own version cannot be read


def _quartiles(data: Sequence[float]) -> tuple[float, float]:
    """The first and third quartiles as pytest-benchmark reports them: the median of each half for an even
    count, and the weighted interpolation of Tukey's hinges for an odd one (Wikipedia's "method 3")."""
    x = sorted(data)
    n = len(x)
    if n == 1:
        return x[0], x[0]
    if n % 2 == 0:
        return statistics.median(x[: n // 2]), statistics.median(x[n // 2:])
    k = n // 4
    if n % 4 == 1:
        return 0.25 * x[k - 1] + 0.75 * x[k], 0.75 * x[3 * k] + 0.25 * x[3 * k + 1]
    return 0.75 * x[k] + 0.25 * x[k + 1], 0.25 * x[3 * k + 1] + 0.75 * x[3 * k + 2]


def stats(samples: Sequence[float], iterations: int = 1, *, include_data: bool = True) -> dict[str, Any]:
    """pytest-benchmark's ``stats`` object for ``samples`` (seconds)."""
    if not samples:
        raise ValueError("no samples")
    x = sorted(samples)
    n = len(x)
    mean = statistics.fmean(x)
    stddev = statistics.stdev(x) if n > 1 else 0.0
    q1, q3 = _quartiles(x)
    iqr = q3 - q1
    low, high = q1 - 1.5 * iqr, q3 + 1.5 * iqr
    iqr_outliers = sum(1 for v in x if v < low or v > high)
    stddev_outliers = sum(1 for v in x if v < mean - stddev or v > mean + stddev)
    total = math.fsum(x)
    out: dict[str, Any] = {
        "min": x[0], "max": x[-1], "mean": mean, "stddev": stddev, "rounds": n, "median": statistics.median(x),
        "iqr": iqr, "q1": q1, "q3": q3, "iqr_outliers": iqr_outliers, "stddev_outliers": stddev_outliers,
        "outliers": f"{stddev_outliers};{iqr_outliers}",
        "ld15iqr": next(v for v in x if v >= low) if n > 1 else x[0],
        "hd15iqr": next(v for v in reversed(x) if v <= high) if n > 1 else x[0],
        "ops": n / total if total else 0, "total": total,
    }
    if include_data:
        out["data"] = list(samples)
    out["iterations"] = iterations
    return out


def benchmark(r: PerfResult, *, include_data: bool = True) -> dict[str, Any] | None:
    """One performance result as a pytest-benchmark benchmark; None when it has no time."""
    m = r.measurement
    if m is not None and m.samples:
        samples: Sequence[float] = m.samples
        iterations = m.repeats
    elif r.time_us is not None:
        samples, iterations = (r.time_us * 1e-6,), 1
    else:
        return None
    target = r.target_id or r.target
    name = f"perf[{r.case}]"
    return {
        "group": target,
        "name": name,
        "fullname": f"{target}::{name}",
        "params": dict(r.params) or None,
        "param": r.case,
        "extra_info": {
            "target": target, "case": r.case, "backend": r.backend, "device": r.device, "time_us": r.time_us,
            "baseline_us": r.baseline_us, "ratio": r.ratio, "verdict": r.verdict, "gbps": r.gbps,
            "copy_fraction": r.copy_fraction, "note": r.note,
            "samples": "measured" if m is not None and m.samples else "median only",
            "cache_flushed": m.flushed if m is not None else None,
            "input_sets": m.rotation if m is not None else None,
            **rate_info(r),
        },
        "options": {"disable_gc": False, "timer": f"{r.backend}:{m.mode}" if m is not None and m.mode else r.backend,
                    "min_rounds": None, "max_time": None, "min_time": None, "warmup": True},
        "stats": stats(samples, iterations, include_data=include_data),
    }


def rate_info(r: PerfResult) -> dict[str, Any]:
    """``extra_info``'s arithmetic rate: GFLOP/s, the fraction of the multiply-add peak, FLOP per byte and
    the roofline side (null where the target declares no flops=)."""
    rate = r.rate
    return {"gflops": rate.gflops if rate else None, "peak_fraction": rate.peak_fraction if rate else None,
            "flop_per_byte": rate.intensity if rate else None, "bound": rate.bound if rate else None}


def _git(root: Path, *args: str) -> str | None:
    out = git.output(root, *args)
    return out.strip() if out is not None else None


def commit_info(root: Path) -> dict[str, Any]:
    """pytest-benchmark's ``commit_info``: the commit, its times, whether the tree is dirty, the branch."""
    info: dict[str, Any] = {"id": "unversioned", "time": None, "author_time": None, "dirty": False,
                            "project": root.resolve().name, "branch": "(unknown)"}
    sha = _git(root, "rev-parse", "--verify", "-q", "HEAD")
    if not sha:
        return info
    times = (_git(root, "show", "-s", "--format=%cI%n%aI", "HEAD") or "\n").splitlines()
    branch = _git(root, "rev-parse", "--abbrev-ref", "HEAD") or "(unknown)"
    info.update(id=sha, time=times[0] or None, author_time=times[-1] or None,
                dirty=bool(_git(root, "status", "--porcelain", "--untracked-files=no")),
                branch="(detached head)" if branch == "HEAD" else branch)
    return info


def _cpu_brand() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def machine_info(backend: str, device: str) -> dict[str, Any]:
    """pytest-benchmark's ``machine_info`` keys, and the backend and device the kernels ran on."""
    return {
        "node": platform.node(), "processor": platform.processor(), "machine": platform.machine(),
        "python_compiler": platform.python_compiler(), "python_implementation": platform.python_implementation(),
        "python_implementation_version": platform.python_version(), "python_version": platform.python_version(),
        "python_build": list(platform.python_build()), "release": platform.release(), "system": platform.system(),
        "cpu": {"arch": platform.machine(), "count": os.cpu_count(), "brand_raw": _cpu_brand()},
        "ktune": {"backend": backend, "device": device},
    }


def _format_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("pytest-benchmark")
    except metadata.PackageNotFoundError:
        return FORMAT_VERSION


def build(results: Sequence[PerfResult], *, root: Path, backend: str = "", device: str = "",
          include_data: bool = True) -> dict[str, Any]:
    """The whole document, as pytest-benchmark's ``--benchmark-json`` writes it."""

    benches = [b for r in results if (b := benchmark(r, include_data=include_data)) is not None]
    return {
        "machine_info": machine_info(backend, device),
        "commit_info": commit_info(root),
        "benchmarks": benches,
        "datetime": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "version": _format_version(),
        "generator": f"pytest-ktune {__version__}",
    }


def write(path: Path, run: RunResults) -> Path:
    """Write the run's timings to ``path``, atomically; returns the path."""
    doc = build(run.results, root=run.root, backend=run.backend, device=run.device)
    write_atomic(Path(path), json.dumps(doc, indent=4, allow_nan=False) + "\n")
    return Path(path)
