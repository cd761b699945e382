"""Accepted templates under the checking tools: compute-sanitizer on CUDA, Oclgrind on OpenCL.

For each naive kernel of ``benchmarks/naive`` (SiLU-and-mul, GELU(tanh)-and-mul, RMSNorm) its rule-based
template, and for SiLU-and-mul the scripted agent's vectorised template too, is checked as the agent
checks every proposal (``check_proposal``: a covering design of the space, edge values, an odd shape,
guards) with the tools required (``ToolPlan(mode="require")``: memcheck with ``--padding 4096`` and
racecheck on CUDA, Oclgrind with data-race detection on OpenCL). Two controls must be rejected: a read
past the end of the input whose value never counts (only a tool can see it), and a shared-memory
reduction with its barrier left out (a tool, or the device check where the race shows in a result).

Writes ``sanitize.md`` (one line per template: the verdict and what each tool ran) and each tool's whole
output under ``--out``. Run on the GPU machine::

    python3 benchmarks/sanitize_templates.py --backend cuda --out benchmarks/results/h200-sanitizer

``--backend opencl`` runs the same on a CPU under Oclgrind (needs Debian's ``oclgrind``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common

common.add_repo_to_path()

from pytest_ktune.agent._check import check_proposal  # noqa: E402
from pytest_ktune.agent._proposal import Proposal, ProposalCheck  # noqa: E402
from pytest_ktune.agent._rules import rule_proposal  # noqa: E402
from pytest_ktune.core.discover import import_file  # noqa: E402
from pytest_ktune.core.target import Target  # noqa: E402
from pytest_ktune.measure.tools import ToolPlan  # noqa: E402

NAIVE = Path(__file__).resolve().parent / "naive"
KERNELS = {"silu_and_mul": "silu_and_mul_naive", "gelu_tanh_and_mul": "gelu_tanh_and_mul_naive",
           "rmsnorm": "rmsnorm_naive"}

# The controls: edits of the rule-based SiLU-and-mul template that only a tool can see.
OVERREAD = {"cuda": ("const float u = load_f(x[row * 2 * I + I + c]);",
                     "const float u = load_f(x[row * 2 * I + I + c]);\n"
                     "        const float past = load_f(x[row * 2 * I + 2 * I + c + 64]);  // past the end\n"
                     "        if (past == 12345.0f) continue;"),
            "opencl": ("const float u = LOAD(x, row * 2 * I + I + c);",
                       "const float u = LOAD(x, row * 2 * I + I + c);\n"
                       "        const float past = LOAD(x, row * 2 * I + 2 * I + c + 64);  // past the end\n"
                       "        if (past == 12345.0f) continue;")}
BARRIER = {"cuda": "__syncthreads();", "opencl": "barrier(CLK_LOCAL_MEM_FENCE);"}


@dataclass(frozen=True)
class Row:
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


def _scripted_silu(backend: str) -> Proposal:
    import importlib.util

    spec = importlib.util.spec_from_file_location("ktune_scripted_agent", NAIVE / "scripted_agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Proposal.from_json({**module.silu_template(backend), "origin": "agent"}, backend=backend)


def _racy_rmsnorm(rules: Proposal, backend: str) -> Proposal | None:
    """The RMSNorm rules template with the first barrier of its reduction left out, if it has one."""
    barrier = BARRIER[backend]
    if barrier not in rules.source:
        return None
    return Proposal.from_json({**rules.to_json(), "source": rules.source.replace(barrier, "", 1),
                               "notes": "control: a barrier left out"}, backend=backend)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("cuda", "opencl"), default="cuda")
    ap.add_argument("--out", type=Path, default=common.RESULTS / "sanitizer")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds each tool run may take")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    plan = ToolPlan(mode="require", timeout_s=args.timeout, log_dir=out / "logs")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="ktune-sanitize-") as tmp:
        root = Path(tmp)
        shutil.copytree(NAIVE, root / "ktsanitize", ignore=shutil.ignore_patterns("__pycache__", "*_tpl*"))

        def check(what: str, proposal: Proposal, base: Target, expect: str) -> None:
            started = time.monotonic()
            result = check_proposal(proposal, base, root=root, backend=args.backend, sample=0, seed=args.seed,
                                    tools=plan)
            rows.append(Row(what, expect, result, time.monotonic() - started))
            print(f"{what}: {result.summary()}", flush=True)

        bases: dict[str, Target] = {}
        for module, name in KERNELS.items():
            base = vars(import_file(root / "ktsanitize" / f"{module}.py"))[name]
            bases[module] = base
            check(f"{module}, rules", rule_proposal(base, args.backend), base, "accepted")
        check("silu_and_mul, scripted agent", _scripted_silu(args.backend), bases["silu_and_mul"], "accepted")
        rules = rule_proposal(bases["silu_and_mul"], args.backend)
        old, new = OVERREAD[args.backend]
        if old in rules.source:
            check("control: silu_and_mul reading past its input",
                  Proposal.from_json({**rules.to_json(), "source": rules.source.replace(old, new)},
                                     backend=args.backend), bases["silu_and_mul"], "rejected by a tool")
        racy = _racy_rmsnorm(rule_proposal(bases["rmsnorm"], args.backend), args.backend)
        if racy is not None:
            # on a GPU the race may also show in a result, and the device check rejects it first
            check("control: rmsnorm without its barrier", racy, bases["rmsnorm"], "rejected")
    lines = [f"# Accepted templates under the checking tools ({args.backend})", "",
             f"Run {common.now_utc()}: `{common.command_line()}`. Each tool's whole output is under `logs/`.", "",
             "| template | expected | verdict | as expected | seconds |", "|---|---|---|---|---|"]
    lines += [f"| {r.what} | {r.expect} | {r.check.summary().replace('|', '/')} | {'yes' if r.as_expected else 'NO'} "
              f"| {r.seconds:.0f} |" for r in rows]
    (out / "sanitize.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'sanitize.md'}")
    return 0 if all(r.as_expected for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
