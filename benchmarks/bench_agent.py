"""Template + search against the naive kernels and against free rewrites, side by side in one run.

For each naive kernel of ``benchmarks/naive`` (scalar loads, fixed 128-thread blocks, a capped grid)
and its one tuning key on the chosen backend:

1. **default**: the naive kernel as shipped, timed in the tuner's isolated worker.
2. **rules + search**: the rule-based template (``pytest_ktune.agent._rules``), checked with
   ``check_proposal``, then searched by the tuner (``tune_key``, TPE, a fixed trial budget) once per
   seed, each seed in a fresh study.
3. **scripted agent + search**: for SiLU-and-mul, the scripted conversation of
   ``benchmarks/naive/scripted_agent.py`` replayed through the agent loop and the real openai client
   over a loopback server (the loop checks, searches and compares its template), once per seed; for
   the other kernels (and with ``--no-agent-loop``), a scripted agent proposal (the vectorised
   templates under ``benchmarks/naive/scripted``: VEC-wide loads, BLOCK, grid cap) replayed directly
   through ``check_proposal`` and searched the same way as the rules. The output says which, per kernel.
4. **free rewrites**: six distinct fixed rewrites of each naive kernel (on the structure of the
   ``scripted`` templates), with the choices an LLM might make when rewriting freely (vector width,
   block size, grid cap written into the text, no search).
   They are scripted stand-ins for free LLM rewrites: no model is reachable on the GPU machine.

Finally every method's results are timed again side by side (one worker per template): the spread
of the final result over the seeds (min, median, max, coefficient of variation) is compared with the
spread over the free rewrites.

Run: ``python3 benchmarks/bench_agent.py --backend cuda --seeds 5 --out FILE.json``;
``--backend opencl --quick`` is a smoke test on a CPU (PoCL), under two minutes on two cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common

common.add_repo_to_path()

from pytest_ktune.agent._check import check_proposal  # noqa: E402
from pytest_ktune.agent._proposal import Proposal  # noqa: E402
from pytest_ktune.agent._rules import device_max_threads, rule_proposal  # noqa: E402
from pytest_ktune.agent._sandbox import proposal_target  # noqa: E402
from pytest_ktune.core.discover import import_file  # noqa: E402
from pytest_ktune.core.keys import cases_by_key, key_label  # noqa: E402
from pytest_ktune.core.space import Value  # noqa: E402
from pytest_ktune.core.target import Target  # noqa: E402
from pytest_ktune.measure.worker import TargetRef, WorkerPool, WorkerSpec  # noqa: E402
from pytest_ktune.tuner.settings import TuneContext, TuneSettings  # noqa: E402
from pytest_ktune.tuner.tune import tune_key  # noqa: E402

NAIVE = Path(__file__).resolve().parent / "naive"
SCRIPTED = NAIVE / "scripted"
KERNELS = ("silu_and_mul", "gelu_tanh_and_mul", "rmsnorm")
ACT = {
    ("silu_and_mul", "cuda"): "((g) / (1.f + __expf(-(g))))",
    ("silu_and_mul", "opencl"): "((g) / (1.0f + exp(-(g))))",
    ("gelu_tanh_and_mul", "cuda"):
        "(0.5f * (g) * (1.f + tanhf(0.7978845608f * ((g) + 0.044715f * (g) * (g) * (g)))))",
    ("gelu_tanh_and_mul", "opencl"):
        "(0.5f * (g) * (1.0f + tanh(0.7978845608f * ((g) + 0.044715f * (g) * (g) * (g)))))",
}
ELEMENTWISE_LAUNCH = {"block": "BLOCK", "grid": "min(cdiv(n // VEC, BLOCK), GRID_CAP)"}
# Free rewrites: (VEC, BLOCK, GRID_CAP) for the gated activations; (VEC, THREADS) for RMSNorm.
FREE_ELEMENTWISE = ((8, 256, 1 << 20), (4, 512, 1024), (2, 1024, 65536), (1, 256, 1 << 20), (8, 128, 4096),
                    (4, 64, 16384))
FREE_RMSNORM = ((8, 256), (4, 512), (2, 1024), (1, 256), (8, 128), (4, 64))
STANDIN = ("The free rewrites are scripted stand-ins for free LLM rewrites (no model is reachable on the GPU "
           "machine): six distinct fixed-choice rewrites per kernel, written as text with their choices "
           "hard-coded, no search.")
DIRECT = "scripted proposal replayed directly through check_proposal and the tuner (tune_key)"
LOOPED = ("scripted conversation replayed through the agent loop (pytest_ktune.agent._loop) and the openai client "
          "over a loopback server; its template searched by the loop's tuner")
REPLAY = ("Scripted agent: per kernel, the 'agent path' in the JSON says whether its template came through the agent "
          "loop over the loopback server or was replayed directly through check_proposal and the tuner.")


def load_base(kernel: str) -> Target:
    module = import_file(NAIVE / f"{kernel}.py")
    t = getattr(module, f"{kernel}_naive")
    assert isinstance(t, Target)
    return t


def _with_defines(source: str, defines: Mapping[str, str]) -> str:
    """``#define``s after the source's leading comment."""
    lines = source.splitlines(keepends=True)
    at = 0
    while at < len(lines) and lines[at].startswith("//"):
        at += 1
    return "".join(lines[:at]) + "".join(f"#define {k} {v}\n" for k, v in defines.items()) + "".join(lines[at:])


def scripted_proposal(kernel: str, base: Target, backend: str, max_threads: int) -> Proposal:
    """The scripted agent's template: what an agent proposes after reading the naive kernel."""
    ext = ".cu" if backend == "cuda" else ".cl"
    blocks = tuple(b for b in (32, 64, 128, 256, 512, 1024) if b <= max_threads)
    if kernel == "rmsnorm":
        return Proposal(backend=backend, source=(SCRIPTED / f"rmsnorm{ext}").read_text(),
                        space={"THREADS": blocks, "VEC": (1, 2, 4, 8)}, default={"THREADS": 128, "VEC": 1},
                        constraints=("H % VEC == 0",), launch={"block": "THREADS"}, origin="agent",
                        notes="Scripted agent template: VEC-wide loads, THREADS per row.")
    source = _with_defines((SCRIPTED / f"elementwise{ext}").read_text(),
                           {"KERNEL_NAME": base.kernel_name, "ACT(g)": ACT[(kernel, backend)]})
    return Proposal(backend=backend, source=source,
                    space={"BLOCK": blocks, "VEC": (1, 2, 4, 8), "GRID_CAP": (1024, 4096, 16384, 65536, 1 << 20)},
                    default={"BLOCK": 128, "VEC": 1, "GRID_CAP": 1024}, constraints=("I % VEC == 0",),
                    launch=dict(ELEMENTWISE_LAUNCH), origin="agent",
                    notes="Scripted agent template: VEC-wide loads and stores, BLOCK threads, grid cap.")


def free_rewrites(kernel: str, agent: Proposal) -> list[tuple[str, Proposal]]:
    """Fixed rewrites: the choices written into the text, a one-point space, literal launch geometry."""
    out = []
    if kernel == "rmsnorm":
        for vec, threads in FREE_RMSNORM:
            src = _with_defines(agent.source, {"VEC": str(vec), "THREADS": str(threads)})
            out.append((f"VEC={vec} THREADS={threads}",
                        Proposal(backend=agent.backend, source=src, space={"REWRITE": (1,)}, default={"REWRITE": 1},
                                 launch={"block": str(threads)}, origin="user")))
        return out
    for vec, block, cap in FREE_ELEMENTWISE:
        src = _with_defines(agent.source, {"VEC": str(vec), "BLOCK": str(block), "GRID_CAP": str(cap)})
        out.append((f"VEC={vec} BLOCK={block} GRID_CAP={cap}",
                    Proposal(backend=agent.backend, source=src, space={"REWRITE": (1,)}, default={"REWRITE": 1},
                             launch={"block": str(block), "grid": f"min(cdiv(n // {vec}, {block}), {cap})"},
                             origin="user")))
    return out


@dataclass
class Timed:
    label: str
    params: Mapping[str, Value]
    seconds: float | None
    reason: str = ""


@dataclass(frozen=True)
class Run:
    """What the whole run shares."""

    backend: str
    seeds: tuple[int, ...]
    trials: int
    sample: int
    work: Path
    cache: Path
    max_threads: int
    agent_loop: bool = True


def time_configs(run: Run, target: Target, cases: Sequence[int], configs: Sequence[Mapping[str, Value]],
                 labels: Sequence[str], *, seed: int) -> list[Timed]:
    """Each configuration verified and timed in one worker: side by side."""
    spec = WorkerSpec(target=TargetRef.of(target), backend=run.backend, cases=tuple(cases), cache_dir=str(run.cache))
    out = []
    with WorkerPool(spec, trial_timeout_s=120.0) as pool:
        for label, o in zip(labels, pool.evaluate(list(configs), seed), strict=True):
            out.append(Timed(label, dict(o.params), o.value_s if o.status == "ok" else None, o.reason))
    return out


def search(run: Run, proposal: Proposal, base: Target, *, seed: int, work: Path) -> dict[str, Any]:
    """One tune of the proposal's template, in a fresh study (its own scratch folder)."""
    backend = run.backend
    root = work / f"{proposal.origin}-{seed}"
    (root / ".ktune").mkdir(parents=True)
    (root / ".ktune" / "cache").symlink_to(run.cache.parent, target_is_directory=True)
    target = proposal_target(proposal, base, workdir=root / ".ktune" / "agent")
    (key, cases), = cases_by_key(target, backend).values()
    settings = TuneSettings(trials=run.trials, seed=seed, sampler="tpe")
    ctx = TuneContext(root=root, params_path=root / "ktune-params.json", backend=backend, settings=settings)
    t0 = time.perf_counter()
    o = tune_key(ctx, target, key, cases)
    return {"seed": seed, "best_params": dict(o.best_params), "best_us_in_search": o.best_us,
            "default_us_in_search": o.default_us, "timed": o.timed, "infeasible": o.infeasible,
            "failed": o.failed, "wall_s": round(time.perf_counter() - t0, 2), "_target": target, "_cases": cases}


def through_agent_loop(run: Run, base: Target, work: Path) -> dict[str, Any]:
    """The scripted agent conversation (benchmarks/naive/scripted_agent.py, by the agent loop's author)
    replayed through the agent loop and the real openai client over a loopback server, once per seed.
    Falls back to the direct path, saying why, when the loop is not available or goes off script."""
    try:
        from naive.scripted_agent import run_scripted

        from pytest_ktune.agent._tools import Bench
    except ImportError as exc:
        return {"path": f"{DIRECT} (the agent loop is not available: {exc})"}
    runs = []
    proposal = None
    for seed in run.seeds:
        root = work / f"loop-{seed}"
        (root / ".ktune").mkdir(parents=True)
        (root / ".ktune" / "cache").symlink_to(run.cache.parent, target_is_directory=True)
        bench = Bench(root=root, params_path=root / "ktune-params.json", backend=run.backend, base=base,
                      tune=TuneSettings(trials=run.trials, seed=seed, sampler="tpe"), sample=run.sample)
        t0 = time.perf_counter()
        try:
            res = run_scripted(bench, with_mistake=True, steer=True)
        except Exception as exc:  # any failure of the loop: measure the direct way instead, and say why
            return {"path": f"{DIRECT} (the agent loop failed on seed {seed}: {type(exc).__name__}: {exc})"}
        if res.proposal is None or not res.comparisons:
            return {"path": f"{DIRECT} (the agent loop ended without a template on seed {seed}: {res.stop})"}
        proposal = res.proposal
        c = res.comparisons[0]
        runs.append({"seed": seed, "best_params": dict(c.template_params), "best_us_in_search": c.template_us,
                     "default_us_in_search": c.base_us, "status": res.status, "stop": res.stop,
                     "iterations": res.iterations, "wall_s": round(time.perf_counter() - t0, 2),
                     "_target": proposal_target(proposal, base, workdir=root / ".ktune" / "agent")})
        print(f"  agent loop seed {seed}: {res.status}, best {c.template_us:.2f} µs {dict(c.template_params)} "
              f"({runs[-1]['wall_s']} s)", flush=True)
    return {"path": LOOPED, "proposal": proposal, "runs": runs}


def spread(values: Sequence[float | None]) -> dict[str, Any]:
    good = [v for v in values if v is not None]
    if not good:
        return {"n": 0}
    mean = statistics.fmean(good)
    return {"n": len(good), "min_us": common.us(min(good)), "median_us": common.us(statistics.median(good)),
            "max_us": common.us(max(good)),
            "cv": round(statistics.stdev(good) / mean, 4) if len(good) > 1 and mean > 0 else 0.0}


def bench_kernel(run: Run, kernel: str) -> dict[str, Any]:
    backend, work, max_threads = run.backend, run.work, run.max_threads
    base = load_base(kernel)
    (key, cases), = cases_by_key(base, backend).values()
    print(f"== {kernel} {key}", flush=True)
    result: dict[str, Any] = {"kernel": kernel, "target": base.name, "key": key,
                              "cases": [base.case_id(base.cases[i]) for i in cases]}
    proposals = {"rules": rule_proposal(base, backend, max_threads=max_threads),
                 "agent": scripted_proposal(kernel, base, backend, max_threads)}
    searched: dict[str, list[dict[str, Any]]] = {}
    if kernel == "silu_and_mul" and not run.agent_loop:
        result["agent_path"] = DIRECT + " (the agent loop was switched off: --quick or --no-agent-loop)"
    elif kernel == "silu_and_mul":
        looped = through_agent_loop(run, base, work / kernel)
        result["agent_path"] = looped.pop("path")
        if looped.get("runs"):
            proposals["agent"] = looped["proposal"]
            searched["agent"] = looped["runs"]
    else:
        result["agent_path"] = DIRECT + " (the scripted conversation of the agent loop covers SiLU-and-mul only)"
    print(f"  agent path: {result['agent_path']}", flush=True)
    for method, p in proposals.items():
        chk = check_proposal(p, base, root=work, backend=backend, sample=run.sample, seed=0)
        print(f"  {method}: {chk.summary()}", flush=True)
        result[f"{method}_template"] = {"space": {k: list(v) for k, v in p.space.items()},
                                        "default": dict(p.default), "constraints": list(p.constraints),
                                        "launch": dict(p.launch), "check": chk.summary(), "ok": chk.ok}
        if method in searched:
            continue  # searched by the agent loop itself
        searched[method] = []
        if not chk.ok:
            continue
        for s in run.seeds:
            r = search(run, p, base, seed=s, work=work / kernel)
            print(f"  {method} seed {s}: best {r['best_us_in_search']:.2f} µs {r['best_params']} "
                  f"({r['timed']} trials, {r['wall_s']} s)", flush=True)
            searched[method].append(r)
    # Side by side: the default, every seed's winner, every free rewrite.
    default = time_configs(run, base, cases, [dict(base.default)], ["default"], seed=1)[0]
    result["default"] = {"us": common.us(default.seconds), "reason": default.reason}
    for method, runs in searched.items():
        if not runs:
            result[f"{method}_search"] = {"runs": [], "final": spread([])}
            continue
        finals = time_configs(run, runs[0]["_target"], cases, [r["best_params"] for r in runs],
                              [f"seed {r['seed']}" for r in runs], seed=2)
        clean = []
        for r, f in zip(runs, finals, strict=True):
            clean.append({k: v for k, v in r.items() if not k.startswith("_")} | {
                "final_us": common.us(f.seconds), "final_reason": f.reason,
                "best_us_in_search": round(r["best_us_in_search"], 4)})
        result[f"{method}_search"] = {"runs": clean, "final": spread([f.seconds for f in finals])}
    rewrites = []
    for label, p in free_rewrites(kernel, scripted_proposal(kernel, base, backend, max_threads)):
        target = proposal_target(p, base, workdir=work / kernel / "rewrites")
        t = time_configs(run, target, cases, [dict(p.default)], [label], seed=3)[0]
        rewrites.append(t)
        print(f"  free rewrite {label}: {common.fmt_us(t.seconds)} µs {t.reason}", flush=True)
    result["free_rewrites"] = {"runs": [{"choices": t.label, "us": common.us(t.seconds), "reason": t.reason}
                                        for t in rewrites],
                               "spread": spread([t.seconds for t in rewrites])}
    return result


def markdown(data: Mapping[str, Any]) -> str:
    rows = []
    def cell(s: Mapping[str, Any], d: float | None) -> str:
        if not s.get("n"):
            return "n/a"
        ratio = f", {d / s['median_us']:.2f}x" if d and s["median_us"] else ""
        return f"{s['median_us']:.2f} [{s['min_us']:.2f}–{s['max_us']:.2f}] CV {s['cv']:.3f}{ratio}"

    for k in data["kernels"]:
        d = k["default"]["us"]
        rows.append([k["kernel"], key_label(k["key"]),
                     common.fmt_num(d), cell(k["rules_search"]["final"], d), cell(k["agent_search"]["final"], d),
                     cell(k["free_rewrites"]["spread"], d)])
    table = common.md_table(["kernel", "key", "default µs", "rules + search µs (median [min–max], CV, speedup)",
                             "scripted agent + search µs", "free rewrites µs"], rows)
    return "\n".join([
        f"# Template + search from naive kernels ({data['backend']})", "",
        f"- device: {data['device']}", f"- date: {data['date']}", f"- command: `{data['command']}`",
        f"- seeds: {data['seeds']}; trials per search: {data['trials']}; sample per check: {data['sample']}",
        f"- wall: {data['wall_s']} s", "",
        "Times are the sum over the key's cases of the median per call, all re-measured side by side at the end. "
        "Spread: over the seeds for the searches, over the rewrites for the free rewrites.", "",
        table, "", *(f"- {k['kernel']}, scripted agent: {k['agent_path']}." for k in data["kernels"]),
        f"- {STANDIN}", "",
        "Raw numbers (every seed's winner and search statistics, every rewrite) are in the JSON file.", ""])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--backend", default="cuda", choices=("cuda", "opencl"))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--trials", type=int, default=10, help="timed trials per search (default 10)")
    ap.add_argument("--sample", type=int, default=4, help="configurations checked per template (default 4)")
    ap.add_argument("--kernels", default=",".join(KERNELS))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--no-agent-loop", action="store_true",
                    help="replay the scripted agent proposals directly, not through the agent loop")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke test: silu_and_mul only, 2 seeds, 3 trials, a sample of 1, no agent loop")
    args = ap.parse_args(argv)
    if args.quick:
        args.kernels, args.seeds, args.trials, args.sample = "silu_and_mul", 2, 3, 1
    from pytest_ktune import backends

    started = time.perf_counter()
    device = backends.create(args.backend).device
    max_threads = device_max_threads(args.backend)
    out = args.out or common.RESULTS / f"bench_agent-{args.backend}{'-quick' if args.quick else ''}.json"
    work = Path(tempfile.mkdtemp(prefix="ktune-bench-agent-"))
    cache = work / "cache" / args.backend
    cache.mkdir(parents=True)
    seeds = tuple(range(1, args.seeds + 1))
    run = Run(backend=args.backend, seeds=seeds, trials=args.trials, sample=args.sample, work=work, cache=cache,
              max_threads=max_threads, agent_loop=not (args.quick or args.no_agent_loop))
    kernels: list[dict[str, Any]] = []
    md = ""
    try:
        for k in args.kernels.split(","):
            kernels.append(bench_kernel(run, k))
            # Written after every kernel: a run stopped by a time limit keeps the kernels it finished.
            data = {"backend": args.backend, "device": device.name, "date": common.now_utc(),
                    "command": common.command_line(), "seeds": list(seeds), "trials": args.trials,
                    "sample": args.sample, "versions": common.versions(),
                    "wall_s": round(time.perf_counter() - started, 1), "notes": [REPLAY, STANDIN],
                    "kernels": kernels}
            md = markdown(data)
            md_path = common.write_results(out, data, md)
    finally:
        if not os.environ.get("KTUNE_KEEP_WORK"):
            shutil.rmtree(work, ignore_errors=True)
    print(md)
    print(f"wrote {common.shown_path(out)} and {common.shown_path(md_path)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
