"""A scripted "good agent": the conversation a capable model would have with the agent loop, replayed
by the loopback OpenAI-compatible server (``pytest_ktune.testing.openai_stub``) to the real openai client.

Written by engineer A (the agent loop) for engineer T's ``benchmarks/bench_agent.py`` and for
``tests/agent/test_agent_loop.py``. It turns the naive SiLU-and-mul here (``silu_and_mul.py``: scalar,
128 threads, capped grid) into a vectorised template with BLOCK, VEC and ITEMS, then steers the Optuna
search. No network: the server listens on 127.0.0.1 only.

Use::

    from benchmarks.naive.scripted_agent import run_scripted
    result = run_scripted(bench, seed=0)       # bench: a pytest_ktune.agent._tools.Bench on the naive target
    result.status, result.comparisons          # "improved" / "no-improvement"; base vs template, side by side

The templates keep the naive kernel's name and arguments, so the naive Python wrapper launches them;
the ``launch`` expressions re-aim its grid and block (``n`` and ``inter`` are the wrapper's integers).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

SILU_OPENCL = r"""// SiLU-and-mul as a template: BLOCK work-items per group, VEC elements per load, ITEMS vectors per
// work-item; a flat range over T * I / VEC vectors with a guarded tail.
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#if VEC == 1
typedef float floatV;
#else
typedef CAT(float, VEC) floatV;
#endif
#if DTYPE_F16
#define elem_t half
#if VEC == 1
#define LOADV(i, p) vload_half((i), (p))
#define STOREV(v, i, p) vstore_half_rte((v), (i), (p))
#else
#define LOADV(i, p) CAT(vload_half, VEC)((i), (p))
#define STOREV(v, i, p) CAT(CAT(vstore_half, VEC), _rte)((v), (i), (p))
#endif
#else
#define elem_t float
#if VEC == 1
#define LOADV(i, p) ((p)[(i)])
#define STOREV(v, i, p) ((p)[(i)] = (v))
#else
#define LOADV(i, p) CAT(vload, VEC)((i), (p))
#define STOREV(v, i, p) CAT(vstore, VEC)((v), (i), (p))
#endif
#endif

__kernel __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
void silu_and_mul_naive(__global elem_t* restrict out, __global const elem_t* restrict x, long T, int I) {
    const long nv = I / VEC;
    const long total = T * nv;
    const long first = (long)get_group_id(0) * BLOCK * ITEMS + get_local_id(0);
    for (int it = 0; it < ITEMS; ++it) {
        const long e = first + (long)it * BLOCK;
        if (e < total) {
            const long row = e / nv;
            const long c = e - row * nv;
            const floatV g = LOADV(c, x + row * 2 * I);
            const floatV u = LOADV(c, x + row * 2 * I + I);
            STOREV(g / (1.0f + exp(-g)) * u, c, out + row * I);
        }
    }
}
"""

SILU_CUDA = r"""// SiLU-and-mul as a template: BLOCK threads, VEC elements per aligned load, ITEMS vectors per thread;
// a flat grid over T * I / VEC vectors with a guarded tail.
#include "naive.cuh"

template <int N>
struct __align__(sizeof(elem_t) * N) vec_t {
    elem_t v[N];
};

extern "C" __global__ void __launch_bounds__(BLOCK)
silu_and_mul_naive(elem_t* __restrict__ out, const elem_t* __restrict__ x, long long T, int I) {
    typedef vec_t<VEC> V;
    const long long nv = I / VEC;
    const long long total = T * nv;
    const long long first = (long long)blockIdx.x * BLOCK * ITEMS + threadIdx.x;
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        const long long e = first + (long long)it * BLOCK;
        if (e < total) {
            const long long row = e / nv;
            const long long c = e - row * nv;
            const V a = reinterpret_cast<const V*>(x + row * 2 * I)[c];
            const V b = reinterpret_cast<const V*>(x + row * 2 * I + I)[c];
            V r;
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const float g = load_f(a.v[j]);
                r.v[j] = store_f(g / (1.f + __expf(-g)) * load_f(b.v[j]));
            }
            reinterpret_cast<V*>(out + row * I)[c] = r;
        }
    }
}
"""

# A first attempt with a typo (an undeclared name): the compiler rejects it in the worker, and the
# error goes back to the model, which fixes it.
SILU_OPENCL_TYPO = SILU_OPENCL.replace("const long nv = I / VEC;", "const long nv = I / VECS;")
SILU_CUDA_TYPO = SILU_CUDA.replace("const long long nv = I / VEC;", "const long long nv = I / VECS;")


def silu_template(backend: str) -> dict[str, Any]:
    """The good template for the naive SiLU-and-mul, as the model sends it to propose_template."""
    if backend == "cuda":
        space: dict[str, list[Any]] = {"BLOCK": [128, 256, 512, 1024], "VEC": [1, 2, 4, 8], "ITEMS": [1, 2, 4]}
        source = SILU_CUDA
    else:
        space = {"BLOCK": [32, 64, 128, 256], "VEC": [1, 2, 4, 8], "ITEMS": [1, 2, 4, 8]}
        source = SILU_OPENCL
    return {"source": source, "space": space, "default": {"BLOCK": 128, "VEC": 1, "ITEMS": 1},
            "constraints": ["I % VEC == 0"],
            "launch": {"block": "BLOCK", "grid": "cdiv(n // VEC, BLOCK * ITEMS)"},
            "notes": "vectorised loads (VEC), several vectors per thread (ITEMS), an uncapped grid"}


def _last_tool_ok(body: Mapping[str, Any]) -> str:
    """'' when the last message the client sent is a successful tool result; else a complaint."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    if last.get("role") != "tool":
        return f"expected a tool result last, got a {last.get('role')!r} message"
    try:
        content = json.loads(last.get("content") or "{}")
    except json.JSONDecodeError:
        return "the tool result is not JSON"
    return "" if content.get("ok") else f"the tool failed: {str(content)[:300]}"


def _last_tool_failed(body: Mapping[str, Any]) -> str:
    return "" if _last_tool_ok(body) else "expected the template with a typo to be rejected"


def good_conversation(backend: str, *, with_mistake: bool = True, steer: bool = True) -> list[Any]:
    """The scripted answers: look at the base kernel (with ``steer``), (optionally) test a template with a
    typo and get it rejected, propose the good one (checked, then searched), enqueue a few configurations
    the search may have missed (with ``steer``), and finish."""
    from pytest_ktune.testing.openai_stub import Canned, completion, tool_call

    good = silu_template(backend)
    bad = dict(good, source=SILU_CUDA_TYPO if backend == "cuda" else SILU_OPENCL_TYPO)
    wide = ([{"BLOCK": 256, "VEC": 8, "ITEMS": 1}, {"BLOCK": 512, "VEC": 8, "ITEMS": 2}] if backend == "cuda"
            else [{"BLOCK": 64, "VEC": 4, "ITEMS": 4}, {"BLOCK": 128, "VEC": 8, "ITEMS": 2}])
    script = []
    if steer:
        script.append(Canned(completion(content="Let me look at the measurements first.",
                                        tool_calls=[tool_call("analyze", {"top": 5})])))
    if with_mistake:
        script.append(Canned(completion(tool_calls=[tool_call("test_template", {**bad, "sample": 2})]),
                             expect=_last_tool_ok if steer else None))
    after_bad = _last_tool_failed if with_mistake else _last_tool_ok if steer else None
    script += [
        Canned(completion(content="Scalar loads, a fixed block and a capped grid: vectorise and expose them.",
                          tool_calls=[tool_call("propose_template", good)]), expect=after_bad)]
    if steer:
        script.append(Canned(completion(tool_calls=[tool_call("plan", {"action": "enqueue", "configs": wide,
                                                                       "reason": "wide vectors, few items"})]),
                             expect=_last_tool_ok))
    script.append(Canned(completion(tool_calls=[tool_call("plan", {"action": "finish",
                                                                   "reason": "at the memory roof"})]),
                         expect=_last_tool_ok))
    return script


def run_scripted(bench: Any, *, iterations: int = 8, with_mistake: bool = True, model: str = "scripted-good",
                 steer: bool = True, dest: Any = None, compare_rounds: int = 3) -> Any:
    """Run the agent loop on ``bench`` (a Bench over the naive SiLU-and-mul) against the scripted
    conversation, on a loopback server. Returns the AgentResult; raises AssertionError if the loop
    sent something the script did not expect."""
    from pytest_ktune.agent._client import ModelSettings
    from pytest_ktune.agent._loop import AgentSettings, run_agent
    from pytest_ktune.testing.openai_stub import StubServer

    with StubServer({model: good_conversation(bench.backend, with_mistake=with_mistake, steer=steer)}) as server:
        settings = AgentSettings(model=ModelSettings(model=model, base_url=server.base_url, api_key="scripted",
                                                     timeout_s=60.0), iterations=iterations,
                                 compare_rounds=compare_rounds)
        result = run_agent(bench, settings, dest=dest)
        if server.problems:
            raise AssertionError("the scripted conversation went off script: " + "; ".join(server.problems))
    return result


def main(argv: list[str] | None = None) -> int:
    """Run the scripted good conversation through the whole agent loop on one backend, in a scratch copy
    of the naive SiLU-and-mul; write what happened (side-by-side times, usage, the transcript) to --out."""
    import argparse
    import shutil
    import sys
    import tempfile
    import time
    from pathlib import Path

    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here.parents[1]))
    from pytest_ktune.agent._tools import Bench
    from pytest_ktune.core.discover import import_file
    from pytest_ktune.tuner.settings import TuneSettings

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--backend", default="cuda", choices=("cuda", "opencl"))
    ap.add_argument("--trials", type=int, default=40, help="timed trials per search round (default 40)")
    ap.add_argument("--sample", type=int, default=8, help="configurations checked per template besides the default")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True,
                    help="a folder for scripted_agent-<backend>.json and the transcript")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ktune-scripted-") as tmp:
        root = Path(tmp)
        for name in ("silu_and_mul.py", "silu_and_mul.cl", "silu_and_mul.cu", "naive.clh", "naive.cuh"):
            shutil.copy(here / name, root / name)
        base = vars(import_file(root / "silu_and_mul.py"))["silu_and_mul_naive"]
        bench = Bench(root=root, params_path=root / "ktune-params.json", backend=args.backend, base=base,
                      tune=TuneSettings(trials=args.trials, seed=args.seed), sample=args.sample)
        started = time.monotonic()
        result = run_scripted(bench)
        wall = time.monotonic() - started
        print(result.message)
        if result.transcript is not None:
            shutil.copy(result.transcript, args.out / f"scripted_agent-{args.backend}.transcript.jsonl")
    doc = {"backend": args.backend, "trials": args.trials, "sample": args.sample, "seed": args.seed,
           "status": result.status, "stop": result.stop, "message": result.message, "usage": result.usage,
           "iterations": result.iterations, "wall_s": round(wall, 1),
           "comparisons": [{"key": c.label, "base_params": dict(c.base_params), "base_us": c.base_us,
                            "template_params": dict(c.template_params), "template_us": c.template_us,
                            "speedup": c.base_us / c.template_us, "faster": c.faster, "note": c.note}
                           for c in result.comparisons]}
    (args.out / f"scripted_agent-{args.backend}.json").write_text(json.dumps(doc, indent=1) + "\n")
    return 0 if result.status == "improved" else 1


if __name__ == "__main__":
    raise SystemExit(main())
