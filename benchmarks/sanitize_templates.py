"""The example's agent templates under the checking tools: compute-sanitizer on CUDA, Oclgrind on OpenCL.

For each naive kernel of ``benchmarks/naive`` (SiLU-and-mul, GELU(tanh)-and-mul, RMSNorm) its rule-based
template, and for SiLU-and-mul the scripted agent's vectorised template too, is checked as the agent checks
every proposal (``check_proposal``: a covering design of the solved feasible space, edge values, an odd
shape, guards) with the tools required (``ToolPlan(mode="require")``): on CUDA compute-sanitizer memcheck
(``--padding 4096``), racecheck, initcheck and synccheck, each on the odd shape and on the edge-value
cases; on OpenCL Oclgrind with its race and uninitialised-value checks, on the odd shape. Controls that
must be rejected: a read past the end of the input whose value never counts (only a tool sees it), a
shared-memory reduction with its barrier left out (a tool, or the device check where the race shows in
a result), and on CUDA a barrier only the first warp reaches (synccheck), on OpenCL a branch on local
memory no work-item wrote (Oclgrind's uninitialised-value check).

Writes, into ``--out``: ``sanitize.md`` (one line per template: the verdict and what each tool ran, after
each template, so a run stopped by a time limit keeps what it did), ``sanitize.json`` (the same, with each
check's record and each tool's findings), ``run.txt`` (date, device, driver, compute-sanitizer's version,
the command) and each tool's whole output under ``logs/``. On the GPU machine, one command per group so
that each stays within ten minutes::

    python3 benchmarks/sanitize_templates.py --backend cuda --only silu_rules,silu_agent --out $OUT/sanitizer
    python3 benchmarks/sanitize_templates.py --backend cuda --only gelu_rules,rmsnorm_rules --out $OUT/sanitizer
    python3 benchmarks/sanitize_templates.py --backend cuda --only overread,racy,barrier --out $OUT/sanitizer

``--backend opencl`` runs the same on a CPU under Oclgrind (needs Debian's ``oclgrind``).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common

common.add_repo_to_path()

from pytest_ktune import backends  # noqa: E402
from pytest_ktune.agent._check import check_proposal  # noqa: E402
from pytest_ktune.agent._proposal import Proposal, ProposalCheck  # noqa: E402
from pytest_ktune.agent._rules import rule_proposal  # noqa: E402
from pytest_ktune.core.discover import import_file  # noqa: E402
from pytest_ktune.core.target import Target  # noqa: E402
from pytest_ktune.measure.tools import ToolPlan, compute_sanitizer  # noqa: E402

NAIVE = Path(__file__).resolve().parent / "naive"
KERNELS = {"silu_and_mul": "silu_and_mul_naive", "gelu_tanh_and_mul": "gelu_tanh_and_mul_naive",
           "rmsnorm": "rmsnorm_naive"}

# The controls: edits of the rule-based templates that only a tool can see.
OVERREAD = {"cuda": ("const float u = load_f(x[row * 2 * I + I + c]);",
                     "const float u = load_f(x[row * 2 * I + I + c]);\n"
                     "        const float past = load_f(x[row * 2 * I + 2 * I + c + 64]);  // past the end\n"
                     "        if (past == 12345.0f) continue;"),
            "opencl": ("const float u = LOAD(x, row * 2 * I + I + c);",
                       "const float u = LOAD(x, row * 2 * I + I + c);\n"
                       "        const float past = LOAD(x, row * 2 * I + 2 * I + c + 64);  // past the end\n"
                       "        if (past == 12345.0f) continue;")}
BARRIER = {"cuda": "__syncthreads();", "opencl": "barrier(CLK_LOCAL_MEM_FENCE);"}
# CUDA: a barrier the first warp of a block reaches and the others never do (right results; synccheck).
DIVERGENT = ("const long long total = T * (long long)I;\n",
             "const long long total = T * (long long)I;\n"
             "    if (threadIdx.x < 32) __syncthreads();  // the first warp only\n")
ROWS = ("silu_rules", "gelu_rules", "rmsnorm_rules", "silu_agent", "overread", "racy", "barrier", "uninit")


@dataclass(frozen=True)
class Row:
    name: str
    what: str
    expect: str  # "accepted", "rejected by a tool" or "rejected" (by the device check or a tool)
    check: ProposalCheck
    seconds: float

    @property
    def as_expected(self) -> bool:
        if self.expect == "accepted":
            return self.check.ok
        if self.expect == "rejected":
            return not self.check.ok
        return not self.check.ok and self.check.stage == "tools"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "what": self.what, "expect": self.expect, "as_expected": self.as_expected,
                "seconds": round(self.seconds, 1), "ok": self.check.ok, "stage": self.check.stage,
                "summary": self.check.summary(), "message": self.check.message,
                "record": self.check.record() if self.check.ok else "",
                "tools": [{"tool": r.tool, "status": r.status, "configurations": len(r.configs),
                           "cases": list(r.cases), "findings": [[dict(c), f] for c, f in r.findings],
                           "failures": [[dict(c), f] for c, f in r.failures], "note": r.note}
                          for r in self.check.tools]}


def _scripted_silu(backend: str) -> Proposal:
    import importlib.util

    spec = importlib.util.spec_from_file_location("ktune_scripted_agent", NAIVE / "scripted_agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Proposal.from_json({**module.silu_template(backend), "origin": "agent"}, backend=backend)


def _edited(rules: Proposal, old: str, new: str, note: str) -> Proposal | None:
    if old not in rules.source:
        return None
    return Proposal.from_json({**rules.to_json(), "source": rules.source.replace(old, new, 1), "notes": note},
                              backend=rules.backend)


def _uninitialised(rules: Proposal) -> Proposal | None:
    """The OpenCL RMSNorm rules template branching on an element of a local array no work-item wrote (the
    others are written, so the compiler cannot fold the read away; the results stay right)."""
    decl, store, use = ("__local float partial[THREADS];", "partial[tid] = ss;",
                        "const float inv = rsqrt(partial[0] / H + eps);")
    if not all(part in rules.source for part in (decl, store, use)):
        return None
    spare = "\n    __local float spare[THREADS + 1];  // spare[THREADS]: never written"
    source = (rules.source.replace(decl, decl + spare)
              .replace(store, store + "\n    spare[tid] = ss;")
              .replace(use, "if (spare[THREADS] == 12345.0f) return;\n    " + use))
    return Proposal.from_json({**rules.to_json(), "source": source, "notes": "control: uninitialised local memory"},
                              backend=rules.backend)


def _machine(backend: str) -> list[str]:
    lines = [f"date: {common.now_utc()}", f"command: {common.command_line()}", f"host: {platform.node()}"]
    try:
        lines.append(f"device: {backends.create(backend).device.name}")
    except Exception as exc:  # the tools' own runs will say more
        lines.append(f"device: not available ({type(exc).__name__}: {exc})")
    if backend == "cuda":
        for cmd in (["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                    [str(compute_sanitizer() or "compute-sanitizer"), "--version"]):
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False).stdout.strip()
            except OSError as exc:
                out = f"not run: {exc}"
            lines.append(f"{Path(cmd[0]).name}: {' / '.join(out.splitlines()[-2:])}")
    else:
        lines.append(f"oclgrind: {'installed' if shutil.which('oclgrind') else 'not found'}")
    lines.append("versions: " + json.dumps(common.versions()))
    return lines


def _write(out: Path, backend: str, machine: list[str], rows: list[Row]) -> None:
    lines = [f"# Agent templates under the checking tools ({backend})", "",
             *[f"- {m}" for m in machine], "", "Each tool's whole output is under `logs/`.", "",
             "| template | expected | verdict | as expected | seconds |", "|---|---|---|---|---|"]
    lines += [f"| {r.what} | {r.expect} | {r.check.summary().replace('|', '/')} | {'yes' if r.as_expected else 'NO'} "
              f"| {r.seconds:.0f} |" for r in rows]
    (out / "sanitize.md").write_text("\n".join(lines) + "\n")
    (out / "sanitize.json").write_text(json.dumps({"machine": machine, "rows": [r.to_json() for r in rows]},
                                                  indent=1, default=str) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("cuda", "opencl"), default="cuda")
    ap.add_argument("--out", type=Path, default=common.RESULTS / "sanitizer")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds each tool run may take")
    ap.add_argument("--only", default=",".join(ROWS), help=f"comma-separated rows: {', '.join(ROWS)}")
    ap.add_argument("--deadline", type=float, default=540.0,
                    help="seconds after which no further template is started (default 540)")
    args = ap.parse_args(argv)
    wanted = [w.strip() for w in args.only.split(",") if w.strip()]
    unknown = sorted(set(wanted) - set(ROWS))
    if unknown:
        ap.error(f"unknown rows {unknown}; choose from {', '.join(ROWS)}")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    machine = _machine(args.backend)
    (out / "run.txt").write_text("\n".join(machine) + "\n")
    plan = ToolPlan(mode="require", timeout_s=args.timeout, log_dir=out / "logs")
    started = time.monotonic()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="ktune-sanitize-") as tmp:
        root = Path(tmp)
        shutil.copytree(NAIVE, root / "ktsanitize", ignore=shutil.ignore_patterns("__pycache__", "*_tpl*"))
        bases: dict[str, Target] = {m: vars(import_file(root / "ktsanitize" / f"{m}.py"))[n]
                                    for m, n in KERNELS.items()}
        rules = {m: rule_proposal(b, args.backend) for m, b in bases.items()}
        silu, rms = rules["silu_and_mul"], rules["rmsnorm"]
        barrier = BARRIER[args.backend]
        made: dict[str, tuple[str, Callable[[], Proposal | None], str, str]] = {
            "silu_rules": ("silu_and_mul, rules", lambda: silu, "silu_and_mul", "accepted"),
            "gelu_rules": ("gelu_tanh_and_mul, rules", lambda: rules["gelu_tanh_and_mul"], "gelu_tanh_and_mul",
                           "accepted"),
            "rmsnorm_rules": ("rmsnorm, rules", lambda: rms, "rmsnorm", "accepted"),
            "silu_agent": ("silu_and_mul, scripted agent", lambda: _scripted_silu(args.backend), "silu_and_mul",
                           "accepted"),
            "overread": ("control: silu_and_mul reading past its input",
                         lambda: _edited(silu, *OVERREAD[args.backend], "control: a read past the end"),
                         "silu_and_mul", "rejected by a tool"),
            # on a GPU the race may also show in a result, and the device check rejects it first
            "racy": ("control: rmsnorm without its barrier", lambda: _edited(rms, barrier, "", "control: no barrier"),
                     "rmsnorm", "rejected"),
            "barrier": ("control: silu_and_mul with a barrier only the first warp reaches",
                        lambda: _edited(silu, *DIVERGENT, "control: a divergent barrier") if args.backend == "cuda"
                        else None, "silu_and_mul", "rejected by a tool"),
            "uninit": ("control: rmsnorm reading local memory no work-item wrote",
                       lambda: _uninitialised(rms) if args.backend == "opencl" else None, "rmsnorm",
                       "rejected by a tool"),
        }
        for name in wanted:
            what, make, kernel, expect = made[name]
            if time.monotonic() - started > args.deadline:
                print(f"{what}: not started (past --deadline {args.deadline:g} s)", flush=True)
                continue
            proposal = make()
            if proposal is None:
                print(f"{what}: does not apply to {args.backend}", flush=True)
                continue
            t0 = time.monotonic()
            result = check_proposal(proposal, bases[kernel], root=root, backend=args.backend, sample=0,
                                    seed=args.seed, tools=plan)
            rows.append(Row(name, what, expect, result, time.monotonic() - t0))
            print(f"{what}: {result.summary()}", flush=True)
            _write(out, args.backend, machine, rows)
    _write(out, args.backend, machine, rows)
    print(f"wrote {out / 'sanitize.md'}")
    return 0 if all(r.as_expected for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
