"""Check pytest-ktune's timing method (``_bench.measure``) against facts known without it.

(i)   Bandwidth: a copy kernel moving >= 1 GiB must take bytes / copy bandwidth,
      within 10 %, the bandwidth being ``backend.copy_bandwidth()`` of the same run.
(ii)  Launch overhead: for a ~2 µs kernel (a 4 KiB copy), the per-launch time from
      ``measure`` (a CUDA graph of back-to-back launches) must be lower than one
      launch timed between two CUDA events (median of 100), and than
      ``cupyx.profiler.benchmark``'s GPU time; the difference is about the launch
      overhead that the graph keeps out of short kernels.
(iii) L2: the same copy with an ~8 MiB working set, timed cold (L2 flushed before
      each sample and inputs rotated, pytest-ktune's default), flushed but not
      rotated, and warm. Reported side by side; no pass/fail.

Exits 1 when (i) or (ii) fails on CUDA, 2 when the backend is missing. On
``--backend opencl`` (a smoke test on a CPU) (ii) is skipped and nothing is
enforced.

Run: ``python3 benchmarks/check_timing.py`` (CUDA).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common

common.add_repo_to_path()

from pytest_ktune.backends import Backend, KernelFunction, Launch, create, resolve  # noqa: E402
from pytest_ktune.core.errors import BackendUnavailable  # noqa: E402
from pytest_ktune.measure.bench import BenchConfig, Measurement, measure, rotation_for, should_flush  # noqa: E402

CUDA_SRC = r"""
extern "C" __global__ void timing_copy(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                       unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        dst[i] = src[i];
}
"""

OPENCL_SRC = r"""
__kernel void timing_copy(__global const float4* restrict src, __global float4* restrict dst, ulong n) {
    for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) dst[i] = src[i];
}
"""

VEC_BYTES = 16  # one uint4 / float4


@dataclasses.dataclass
class Copy:
    """One copy of ``nbytes`` between two fresh buffers, as a launch ``_bench.measure`` can replay."""

    nbytes: int
    launch: Launch
    src: Any
    dst: Any

    @property
    def moved(self) -> int:
        """Bytes read plus bytes written."""
        return 2 * self.nbytes


class Kit:
    """The copy kernel compiled for the backend, and buffers for it."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        src = CUDA_SRC if backend.name == "cuda" else OPENCL_SRC
        suffix = ".cu" if backend.name == "cuda" else ".cl"
        program = backend.compile(src, {}, filename=f"timing_copy{suffix}")
        self.fn: KernelFunction = program.function("timing_copy")
        dev = backend.device
        self.block = 512 if backend.name == "cuda" else max(1, min(256, dev.max_threads_per_block))
        # CUDA: a grid-stride loop over 8 blocks per multiprocessor, as the backend's own copy
        # kernel; elsewhere (PoCL on a CPU prefers it) one vector per work-item.
        self.grid: int | None = max(1, dev.compute_units * 8) if backend.name == "cuda" else None

    def copy(self, nbytes: int, grid: int | None = None, block: int | None = None) -> Copy:
        n = max(1, nbytes // VEC_BYTES)
        src = self.backend.empty((4 * n,), np.float32, poison=True)  # NaN bits: any payload will do
        dst = self.backend.empty((4 * n,), np.float32)
        b = block or self.block
        g = grid or min(self.grid or 2**31 - 1, -(-n // b))
        launch = Launch(self.fn, (g,), (b,), (src, dst, np.uint64(n)))
        return Copy(n * VEC_BYTES, launch, src, dst)


def mjson(m: Measurement) -> dict[str, Any]:
    lo, hi = m.ci
    return {"median_us": common.us(m.median), "iqr_us": common.us(m.iqr),
            "ci95_us": [common.us(lo), common.us(hi)], "n_samples": len(m.samples), "repeats": m.repeats,
            "flushed": m.flushed, "rotation": m.rotation, "samples_us": [common.us(s) for s in m.samples]}


def event_times(cp: Any, call: Callable[[], None], n: int, warmup: int = 10) -> list[float]:
    """Seconds of single calls, each between two CUDA events on the current stream."""
    start, end = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(warmup):
        call()
    cp.cuda.Device().synchronize()
    out = []
    for _ in range(n):
        start.record()
        call()
        end.record()
        end.synchronize()
        out.append(float(cp.cuda.get_elapsed_time(start, end)) * 1e-3)
    return out


def raw_call(backend: Backend, c: Copy) -> Callable[[], None] | None:
    """The copy launched straight through CuPy (no pytest-ktune wrapper in the way), or None."""
    raw = getattr(c.launch.function, "kernel", None)
    if backend.name != "cuda" or raw is None:
        return None
    grid, block, args = c.launch.grid, c.launch.block, c.launch.args

    def call() -> None:
        raw(grid, block, args)

    return call


# -- the checks ------------------------------------------------------------------------------


def check_bandwidth(backend: Backend, kit: Kit, cfg: BenchConfig, nbytes: int, *, copy_bw: float,
                    tolerance: float) -> dict[str, Any]:
    c = kit.copy(nbytes)
    l2 = backend.device.l2_bytes
    flush = should_flush(c.moved, l2, False)
    c.launch.function.launch(c.launch.grid, c.launch.block, c.launch.args)
    backend.synchronize()
    m = measure(backend, [[c.launch]], cfg, flush=flush)
    expected = c.moved / copy_bw
    ratio = m.median / expected
    out: dict[str, Any] = {
        "copied_bytes": c.nbytes, "moved_bytes": c.moved, "grid": c.launch.grid, "block": c.launch.block,
        "flush": flush, "rotation": rotation_for(c.moved, l2, False), "measure": mjson(m),
        "expected_us": common.us(expected), "ratio": round(ratio, 4),
        "gbps": round(c.moved / m.median / 1e9, 1), "tolerance": tolerance,
        "passed": abs(ratio - 1) <= tolerance,
    }
    call = raw_call(backend, c)
    if call is not None:  # a cross-check: a 0.5 ms launch between events carries ~1 % of overhead
        ev = event_times(backend.cp, call, 20, warmup=3)  # type: ignore[attr-defined]
        out["events_us"] = common.us(statistics.median(ev))
        out["events_samples_us"] = [common.us(t) for t in ev]
    del c
    backend.release()
    return out


def check_overhead(backend: Backend, kit: Kit, cfg: BenchConfig, nbytes: int, n: int) -> dict[str, Any]:
    c = kit.copy(nbytes, grid=1, block=max(32, min(256, nbytes // VEC_BYTES)))
    call = raw_call(backend, c)
    if call is None:
        return {"skipped": "needs the CUDA backend (CuPy events and cupyx.profiler)"}
    cp: Any = backend.cp  # type: ignore[attr-defined]
    call()
    backend.synchronize()
    m = measure(backend, [[c.launch]], cfg, flush=False)
    ev = event_times(cp, call, n)
    out: dict[str, Any] = {
        "copied_bytes": c.nbytes, "grid": c.launch.grid, "block": c.launch.block,
        "measure": mjson(m), "graph_us": common.us(m.median),
        "events_us": common.us(statistics.median(ev)), "events_samples_us": [common.us(t) for t in ev],
    }
    try:
        from cupyx.profiler import benchmark

        perf = benchmark(call, (), n_repeat=n, n_warmup=10)
        gpu = [float(t) for t in np.asarray(perf.gpu_times).reshape(-1)]
        cpu = [float(t) for t in np.asarray(perf.cpu_times).reshape(-1)]
        out["cupyx_gpu_us"] = common.us(statistics.median(gpu))
        out["cupyx_cpu_us"] = common.us(statistics.median(cpu))
        out["cupyx_gpu_samples_us"] = [common.us(t) for t in gpu]
    except Exception as exc:  # cupyx missing or changed: the event timing still decides
        out["cupyx_error"] = f"{type(exc).__name__}: {exc}"
    graph = m.median
    others = {"events": statistics.median(ev)}
    if "cupyx_gpu_us" in out:
        others["cupyx"] = out["cupyx_gpu_us"] * 1e-6
    out["overhead_us"] = {k: common.us(v - graph) for k, v in others.items()}
    out["passed"] = all(graph < v for v in others.values())
    out["failed_against"] = [k for k, v in others.items() if not graph < v]
    del c
    backend.release()
    return out


def check_l2(backend: Backend, kit: Kit, cfg: BenchConfig, working_set: int) -> dict[str, Any]:
    l2 = backend.device.l2_bytes
    k = rotation_for(working_set, l2, False)
    copies = [kit.copy(working_set // 2) for _ in range(k)]
    sets = [[c.launch] for c in copies]
    for s in sets:
        s[0].function.launch(s[0].grid, s[0].block, s[0].args)
    backend.synchronize()
    moved = copies[0].moved
    modes = {
        "cold: flush + rotation (pytest-ktune)": (sets, True),
        "flush, no rotation": (sets[:1], True),
        "warm: no flush, no rotation": (sets[:1], False),
    }
    rows: dict[str, Any] = {}
    for name, (ss, flush) in modes.items():
        m = measure(backend, ss, cfg, flush=flush)
        rows[name] = {"measure": mjson(m), "median_us": common.us(m.median),
                      "gbps": round(moved / m.median / 1e9, 1)}
    warm = rows["warm: no flush, no rotation"]["median_us"]
    for r in rows.values():
        r["vs_warm"] = round(r["median_us"] / warm, 3) if warm else None
    del copies, sets
    backend.release()
    return {"working_set_bytes": moved, "l2_bytes": l2, "rotation": k, "modes": rows}


# -- report ----------------------------------------------------------------------------------


def markdown(data: dict[str, Any]) -> str:
    bw, oh, l2 = data["bandwidth"], data["overhead"], data["l2"]
    dev = data["device"]
    verdict = {True: "PASS", False: "FAIL", None: "-"}
    enforce = data["enforced"]

    def v(ok: bool | None) -> str:
        return verdict[ok] + ("" if enforce or ok is None else " (not enforced)")

    rows = [[
        "(i) bandwidth",
        f"copy of {bw['copied_bytes'] / 2**20:,.0f} MiB ({bw['moved_bytes'] / 2**30:.2f} GiB moved): "
        f"measure {bw['measure']['median_us']:,.1f} µs ({bw['gbps']:,.0f} GB/s); bytes / copy BW "
        f"{bw['expected_us']:,.1f} µs" + (f"; one launch between events {bw['events_us']:,.1f} µs"
                                           if "events_us" in bw else ""),
        f"ratio {bw['ratio']:.3f} (within ±{bw['tolerance']:.0%})", v(bw["passed"]),
    ]]
    if "skipped" in oh:
        rows.append(["(ii) launch overhead", f"skipped: {oh['skipped']}", "", "-"])
    else:
        cupyx = (f"cupyx gpu {oh['cupyx_gpu_us']:.2f} µs" if "cupyx_gpu_us" in oh
                 else f"cupyx n/a ({oh.get('cupyx_error', '')})")
        diffs = ", ".join(f"{k} {d:+.2f} µs" for k, d in oh["overhead_us"].items())
        rows.append([
            "(ii) launch overhead",
            f"copy of {oh['copied_bytes']:,} B: measure (graph) {oh['graph_us']:.2f} µs/launch; "
            f"one launch between events {oh['events_us']:.2f} µs (median of {len(oh['events_samples_us'])}); "
            f"{cupyx}",
            f"graph lower than each; difference {diffs}", v(oh["passed"]),
        ])
    modes = l2["modes"]
    parts = [f"{name}: {r['median_us']:.2f} µs ({r['gbps']:,.0f} GB/s, ×{r['vs_warm']:.2f} of warm)"
             for name, r in modes.items()]
    rows.append(["(iii) L2", f"{l2['working_set_bytes'] / 2**20:.0f} MiB working set, "
                 f"{l2['rotation']} input sets when rotating: " + "; ".join(parts), "informational", "-"])
    lines = [
        f"# check_timing: {dev['name']} ({data['backend']})",
        "",
        f"- date: {data['date']}",
        f"- command: `{data['command']}`",
        f"- copy bandwidth (backend.copy_bandwidth(), read + write): "
        f"{data['copy_bandwidth_Bps'] / 1e9:,.0f} GB/s",
        f"- L2: {dev['l2_bytes'] / 2**20:.0f} MiB",
        "",
        common.md_table(["check", "measured", "criterion", "verdict"], rows),
    ]
    if data["failures"]:
        lines += ["", "## Failures", "", *[f"- {f}" for f in data["failures"]]]
    if not enforce:
        lines += ["", f"Criteria are enforced on CUDA only; this run used {data['backend']}."]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Check pytest-ktune's timing method.")
    p.add_argument("--backend", default="cuda", choices=["cuda", "opencl", "auto"],
                   help="cuda (default); opencl runs (i) and (iii) as a smoke test, enforcing nothing")
    p.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke test")
    p.add_argument("--large-mib", type=int, default=None,
                   help="MiB copied in (i) (default 1024, so 2 GiB move; 64 with --quick)")
    p.add_argument("--small-bytes", type=int, default=4096, help="bytes copied in (ii) (default 4096)")
    p.add_argument("--l2-working-set-mib", type=float, default=8.0,
                   help="working set of (iii) in MiB, read + written (default 8)")
    p.add_argument("--tolerance", type=float, default=0.10, help="allowed deviation in (i) (default 0.10)")
    p.add_argument("--repeats", type=int, default=100, help="single launches timed in (ii) (default 100)")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON output (default benchmarks/results/check_timing.json, or "
                        "check_timing-<backend>.json off CUDA); the markdown goes beside it")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        backend = create(resolve(args.backend))
    except BackendUnavailable as exc:
        print(f"error: check_timing needs the {args.backend} backend, which is not available here:\n"
              f"{exc.render()}", file=sys.stderr)
        return 2
    if backend.name != "cuda":
        print(f"note: {backend.name} backend: (ii) needs CUDA and is skipped; the criteria of (i) and (ii) "
              "are enforced on CUDA only", flush=True)
    t0 = time.perf_counter()
    dev = backend.device
    print(f"device: {dev.name} ({dev.arch}); L2 {dev.l2_bytes / 2**20:.0f} MiB", flush=True)
    cfg = BenchConfig.for_backend(backend)
    copy_bw = backend.copy_bandwidth()
    print(f"copy bandwidth: {copy_bw / 1e9:,.0f} GB/s", flush=True)
    kit = Kit(backend)
    large = (args.large_mib if args.large_mib is not None else (64 if args.quick else 1024)) << 20
    bw = check_bandwidth(backend, kit, cfg, large, copy_bw=copy_bw, tolerance=args.tolerance)
    print(f"(i) bandwidth: {bw['measure']['median_us']:,.1f} µs vs {bw['expected_us']:,.1f} µs expected "
          f"(ratio {bw['ratio']:.3f})", flush=True)
    oh = check_overhead(backend, kit, cfg, args.small_bytes, args.repeats)
    if "skipped" not in oh:
        cupyx = f"{oh['cupyx_gpu_us']:.2f} µs" if "cupyx_gpu_us" in oh else "n/a"
        print(f"(ii) overhead: graph {oh['graph_us']:.2f} µs/launch, events {oh['events_us']:.2f} µs, "
              f"cupyx gpu {cupyx}", flush=True)
    l2 = check_l2(backend, kit, cfg, int(args.l2_working_set_mib * 2**20))
    print("(iii) L2: " + "; ".join(f"{k} {r['median_us']:.2f} µs" for k, r in l2["modes"].items()),
          flush=True)

    failures = []
    if not bw["passed"]:
        events = "" if "events_us" not in bw else (
            f"; one launch between CUDA events took {bw['events_us']:,.1f} µs (if that agrees with "
            "measure, the copy kernel is what is off, not the timing method)")
        failures.append(
            f"(i) the {bw['moved_bytes'] / 2**30:.2f} GiB copy measured "
            f"{bw['measure']['median_us']:,.1f} µs, {bw['ratio']:.3f}× the {bw['expected_us']:,.1f} µs "
            f"that the copy bandwidth ({copy_bw / 1e9:,.0f} GB/s) implies, outside ±{args.tolerance:.0%}"
            + events)
    if oh.get("passed") is False:
        failures.append(
            f"(ii) the graph's per-launch time ({oh['graph_us']:.2f} µs) is not below the single-launch "
            f"time of {', '.join(oh['failed_against'])} (events {oh['events_us']:.2f} µs, cupyx gpu "
            f"{oh.get('cupyx_gpu_us', 'n/a')} µs): graph replay should save the launch overhead")
    enforced = backend.name == "cuda"
    data: dict[str, Any] = {
        "script": "check_timing", "date": common.now_utc(), "command": common.command_line(),
        "backend": backend.name, "device": {**dataclasses.asdict(dev), "id": dev.id},
        "versions": common.versions(), "copy_bandwidth_Bps": copy_bw,
        "bench_config": dataclasses.asdict(cfg), "enforced": enforced,
        "bandwidth": bw, "overhead": oh, "l2": l2, "failures": failures,
        "passed": not failures, "wall_s": round(time.perf_counter() - t0, 1),
    }
    md = markdown(data)
    default_name = "check_timing.json" if backend.name == "cuda" else f"check_timing-{backend.name}.json"
    out = args.out or common.RESULTS / default_name
    md_path = common.write_results(out, data, md)
    print()
    print(md)
    print(f"\nwrote {common.shown_path(out)} and {common.shown_path(md_path)}")
    if failures and enforced:
        print("\nFAILED:\n" + "\n".join(f"  {f}" for f in failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
