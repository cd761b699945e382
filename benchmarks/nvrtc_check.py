"""Compile the CUDA templates of a project with NVRTC, without a GPU.

NVRTC needs no device, so a machine without one can still tell whether every configuration of every
CUDA template compiles: the same source, ``-D`` options and include folder that the CuPy backend
uses, for a virtual architecture (``compute_90`` by default: the H200). It links nothing and runs
nothing; correctness and timing still need the GPU.

Needs ``libnvrtc`` (``pip install nvidia-cuda-nvrtc-cu12``, or a CUDA toolkit); ``--lib`` names it
where it is not found on its own.

Run: ``python3 benchmarks/nvrtc_check.py [--targets NAME...] [--sample N] [--lib PATH]``
"""

from __future__ import annotations

import argparse
import ctypes
import os
import random
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common

common.add_repo_to_path()

from pytest_ktune.core.discover import discover  # noqa: E402
from pytest_ktune.core.target import Target  # noqa: E402


def find_lib(explicit: str | None) -> str:
    if explicit:
        return explicit
    for base in sys.path:
        found = sorted((Path(base or ".") / "nvidia" / "cuda_nvrtc" / "lib").glob("libnvrtc.so*"))
        hits = [str(h) for h in found if "builtins" not in h.name and ".alt." not in h.name]
        if hits:
            return hits[0]
    return "libnvrtc.so"


class Nvrtc:
    def __init__(self, path: str) -> None:
        self.lib = ctypes.CDLL(path)
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def compile(self, source: str, name: str, options: list[str]) -> str:
        """'' when it compiled, else the log."""
        prog = ctypes.c_void_p()
        rc = self.lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None)
        if rc:
            return f"nvrtcCreateProgram: {self.lib.nvrtcGetErrorString(rc).decode()}"
        try:
            opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
            rc = self.lib.nvrtcCompileProgram(prog, len(options), opts)
            if rc == 0:
                return ""
            size = ctypes.c_size_t()
            self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            self.lib.nvrtcGetProgramLog(prog, log)
            return log.value.decode(errors="replace").strip() or self.lib.nvrtcGetErrorString(rc).decode()
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(prog))


def jobs_for(target: Target, sample: int, rng: random.Random) -> list[tuple[dict[str, Any], str]]:
    """(defines, label) pairs: for each distinct define set of the CUDA cases, the default and up to
    ``sample`` feasible configurations of the case's key."""
    out: list[tuple[dict[str, Any], str]] = []
    seen: set[str] = set()
    for case in target.cases:
        if not case.runs_on("cuda"):
            continue
        args = target.case_args(case)
        key = target.case_key(case)
        extra = target.defines(args)
        feasible = list(target.space.feasible(key))
        picks = [dict(target.default)] + (rng.sample(feasible, min(sample, len(feasible))) if sample else feasible)
        for cfg in picks:
            defines: Mapping[str, Any] = {**extra, **cfg}
            label = " ".join(f"-D{k}={int(v) if isinstance(v, bool) else v}" for k, v in sorted(defines.items()))
            if label not in seen:
                seen.add(label)
                out.append((dict(defines), label))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=common.ROOT / "example_project")
    ap.add_argument("--targets", nargs="*", default=None)
    ap.add_argument("--sample", type=int, default=12, help="configurations per define set (0: all)")
    ap.add_argument("--arch", default="compute_90")
    ap.add_argument("--lib", default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    nvrtc = Nvrtc(find_lib(args.lib))
    rng = random.Random(args.seed)
    targets = [t for t in discover(args.root) if "cuda" in t.sources
               and (not args.targets or t.name in args.targets)]
    failures = 0
    for t in targets:
        src_path = t.source_path("cuda")
        source = t.source_text("cuda")
        jobs = jobs_for(t, args.sample, rng)
        t0 = time.perf_counter()

        def one(job: tuple[dict[str, Any], str], src_path: Path = src_path, source: str = source) -> str:
            defines = job[0]
            options = ["--std=c++17", f"--gpu-architecture={args.arch}", f"-I{src_path.parent}"]
            options += [f"-D{k}={int(v) if isinstance(v, bool) else v}" for k, v in defines.items()]
            return nvrtc.compile(source, src_path.name, options)

        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            logs = list(pool.map(one, jobs))
        bad = [(label, log) for (_, label), log in zip(jobs, logs, strict=True) if log]
        failures += len(bad)
        print(f"{t.name}: {len(jobs) - len(bad)}/{len(jobs)} configurations compiled "
              f"({time.perf_counter() - t0:.1f} s)")
        for label, log in bad[:3]:
            print(f"  FAILED {label}\n    " + "\n    ".join(log.splitlines()[:8]))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
