"""Timings in pytest-benchmark's JSON format (``--ktune-benchmark-json PATH``).

The document has the shape of ``pytest --benchmark-json`` output — ``machine_info``,
``commit_info``, ``benchmarks``, ``datetime`` and ``version`` — so tools that
read that format (``pytest-benchmark compare``, github-action-benchmark with
``tool: pytest``) chart ktune's timings. Each performance item is one benchmark:

* ``name`` is the item's name and the device (``perf[CASE] on NVIDIA H200``), ``fullname``
  the target's id and that name (``kernels/rmsnorm.py::rmsnorm::perf[CASE] on NVIDIA H200``),
  so that each GPU type is a series of its own; ``group`` is the target's id;
* ``params`` are the kernel's parameters, ``param`` the case id;
* ``stats`` are in seconds per call of the target's function, over the timing
  samples (``data``); ``iterations`` is how many calls each sample averaged;
* ``extra_info`` holds ktune's own numbers: the time and the baseline in µs,
  their ratio, the verdict, the backend, the device, GB/s, and GFLOP/s with the
  fraction of the device's multiply-add peak and the roofline side (``flops=``).

The statistics, the machine and the commit are pytest-benchmark's own (``Stats``, its machine-info
hook, ``get_commit_info``): pytest-benchmark is the ``benchmark`` extra, so that installing
pytest-ktune does not switch its plugin on in every test suite. ``version`` is the installed
pytest-benchmark's; ``generator`` names ktune.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.files import write_atomic
from pytest_ktune.core.version import __version__
from pytest_ktune.report.results import RunResults

if TYPE_CHECKING:
    from pytest_ktune.gate.verdict import PerfResult


FORMAT_VERSION = "5.1.0"  # used when pytest-benchmark's own version cannot be read


def _pytest_benchmark() -> Any:
    """pytest-benchmark's modules (an extra: installed, its plugin would run in every test suite)."""
    try:
        import pytest_benchmark.plugin
        import pytest_benchmark.stats
        import pytest_benchmark.utils
    except ImportError:
        raise KtuneError("--ktune-benchmark-json: the benchmark JSON is built with pytest-benchmark, which is not "
                         "installed", hint="pip install 'pytest-ktune[benchmark]', or leave --ktune-benchmark-json "
                                           "(KTUNE_BENCHMARK_JSON) out") from None
    return pytest_benchmark


def require() -> None:
    """A KtuneError, before the run, where the benchmark JSON could not be built (no pytest-benchmark)."""
    _pytest_benchmark()


def stats(samples: Sequence[float], iterations: int = 1, *, include_data: bool = True) -> dict[str, Any]:
    """pytest-benchmark's ``stats`` object for ``samples`` (seconds), computed by its own ``Stats``."""
    if not samples:
        raise ValueError("no samples")
    theirs = _pytest_benchmark().stats.Stats()
    for v in samples:
        theirs.update(v)
    out: dict[str, Any] = dict(theirs.as_dict())
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
    # The device is part of the name: charts of two GPU types are two series, not one.
    name = f"perf[{r.case}] on {r.device}" if r.device else f"perf[{r.case}]"
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


def commit_info(root: Path) -> dict[str, Any]:
    """pytest-benchmark's ``commit_info`` of the project at ``root``: its ``get_commit_info``, run there."""
    helpers = _pytest_benchmark().utils
    before = Path.cwd()
    os.chdir(root)  # it asks git in the current folder
    try:
        info: dict[str, Any] = dict(helpers.get_commit_info())
    finally:
        os.chdir(before)
    return info


def machine_info(backend: str, device: str) -> dict[str, Any]:
    """pytest-benchmark's ``machine_info`` (its own hook's answer), and the backend and device the
    kernels ran on."""
    info: dict[str, Any] = dict(_pytest_benchmark().plugin.pytest_benchmark_generate_machine_info())
    info["python_build"] = list(info.get("python_build", ()))
    info["ktune"] = {"backend": backend, "device": device}
    return info


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
