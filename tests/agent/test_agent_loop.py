"""The agent loop end to end: the real openai client against a scripted OpenAI-compatible server on
127.0.0.1, templates checked and searched on PoCL.

Each bad input ends in a clear message, with nothing written: the project's files (the params file
byte for byte) are as they were. One good conversation turns a naive kernel into a faster, verified
template, which the write-back delivers.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_ktune.agent._client import ModelSettings, looks_like_refusal, validate
from pytest_ktune.agent._loop import AgentResult, AgentSettings, run_agent
from pytest_ktune.agent._tools import Bench
from pytest_ktune.core.discover import import_file
from pytest_ktune.core.redact import Redactor
from pytest_ktune.testing.openai_stub import Canned, StubServer, completion, tool_call
from pytest_ktune.tuner.settings import TuneSettings
from pytest_ktune.writeback.deliver import WriteRequest, builtin_write_back

pytest.importorskip("pyopencl")

REPO = Path(__file__).resolve().parents[2]
API_KEY = "sk-test-0123456789abcdefXYZ"

BASE_CL = """__kernel void scale_add(__global float* out, __global const float* x, __global const float* y, int n) {
    const int i = get_global_id(0);
    if (i < n) out[i] = 2.0f * x[i] + y[i];
}
"""

BASE_PY = '''
from typing import Any

import numpy as np

import ktune


def scale_add_reference(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return 2.0 * x.astype(np.float64) + y


@ktune.target(
    sources={"opencl": "scale_add.cl"},
    space=ktune.Space(NAIVE=[1]),  # nothing to tune: the launch is hard-coded
    default={"NAIVE": 1},
    key=lambda x: {"n": x.shape[0]},
    cases=[ktune.Case(x=ktune.Tensor((4096,)), y=ktune.Tensor((4096,)), id="n4096"),
           ktune.Case(x=ktune.Tensor((1001,)), y=ktune.Tensor((1001,)), id="n1001")],
    reference=scale_add_reference,
    bytes_moved=lambda x: 3 * x.nbytes,
)
def scale_add(kernel: Any, x: Any, y: Any) -> Any:
    n = x.shape[0]
    out = kernel.empty((n,), x.dtype)
    kernel.launch(grid=ktune.cdiv(n, 64), block=64, args=[out, x, y, np.int32(n)])
    return out
'''

PARAMS = json.dumps({"format": "pytest-ktune/1", "records": []}, indent=2) + "\n"


def _template(source: str, **extra: Any) -> dict[str, Any]:
    return {"source": source, "space": {"BLOCK": [64, 128]}, "default": {"BLOCK": 64},
            "launch": {"block": "BLOCK", "grid": "cdiv(n, BLOCK)"}, **extra}


COMPILE_ERROR = BASE_CL.replace("const int i", "cosnt int i")
# Whole vectors only: the tail of a length that VEC does not divide is never written (n1001 only).
ONE_CASE_WRONG = """__kernel void scale_add(__global float* out, __global const float* x, __global const float* y,
                        int n) {
    const int v = get_global_id(0);
    if (v < n / VEC) {
        for (int j = 0; j < VEC; ++j) out[v * VEC + j] = 2.0f * x[v * VEC + j] + y[v * VEC + j];
    }
}
"""
# An index far past the end of x: the read faults (or returns garbage), never the right answer.
OUT_OF_BOUNDS = BASE_CL.replace("2.0f * x[i]", "2.0f * x[i + (1L << 36)]")


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "proj"
    (root / "kernels").mkdir(parents=True)
    (root / "kernels" / "scale_add.cl").write_text(BASE_CL)
    (root / "kernels" / "scale_add_target.py").write_text(BASE_PY)
    (root / "ktune-params.json").write_text(PARAMS)
    yield root


def _files(root: Path) -> dict[str, bytes]:
    """Every file of the project outside the scratch folder .ktune/, with its bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".ktune" not in p.relative_to(root).parts and "__pycache__" not in p.parts}


def _bench(root: Path, module: str, name: str, *, trials: int = 3, sample: int = 1) -> Bench:
    base = getattr(import_file(root / "kernels" / module), name)
    return Bench(root=root, params_path=root / "ktune-params.json", backend="opencl", base=base,
                 tune=TuneSettings(trials=trials, seed=3, trial_timeout_s=30.0), sample=sample)


def _run(root: Path, script: Sequence[Canned], **loop: Any) -> tuple[AgentResult, StubServer]:
    """Run the loop on the scale_add project against ``script``; returns the result and the stopped server."""
    model_kw = {k: loop.pop(k) for k in ("timeout_s", "max_retries", "token_budget") if k in loop}
    with StubServer({"scenario": list(script)}) as server:
        model = ModelSettings(model="scenario", base_url=server.base_url, api_key=API_KEY, backoff_s=0.01,
                              **{"timeout_s": 10.0, "max_retries": 2, **model_kw})
        settings = AgentSettings(model=model, **{"iterations": 6, "max_bad_replies": 2, **loop})
        result = run_agent(_bench(root, "scale_add_target.py", "scale_add"), settings)
    return result, server


def _assert_nothing_written(root: Path, before: Mapping[str, bytes], result: AgentResult) -> None:
    assert result.template is None
    assert _files(root) == before
    assert (root / "ktune-params.json").read_text() == PARAMS


def _fed_back(server: StubServer, request: int, needle: str) -> bool:
    """Whether the ``request``-th request (from 1) ended with a tool result containing ``needle``."""
    last = server.sent("scenario")[request - 1]["messages"][-1]
    return last["role"] == "tool" and needle in last["content"]


def _finish() -> Canned:
    return Canned(completion(tool_calls=[tool_call("plan", {"action": "finish", "reason": "giving up"})]))


# -- bad input: each ends with a clear message and nothing written ---------------------------------


def test_malformed_json_in_tool_arguments(project: Path) -> None:
    before = _files(project)
    bad = Canned(completion(tool_calls=[tool_call("propose_template", '{"source": "__kernel void f(", "space": ')]))
    result, server = _run(project, [bad, bad])
    assert result.status == "no-template"
    assert "2 unusable answers in a row" in result.message
    assert "malformed JSON in the arguments of propose_template" in result.message
    assert _fed_back(server, 2, "malformed JSON")  # the error went back to the model
    assert not server.problems
    _assert_nothing_written(project, before, result)


def test_wrong_tool_arguments(project: Path) -> None:
    before = _files(project)
    wrong = Canned(completion(tool_calls=[tool_call("propose_template", {"source": 42, "space": {"BLOCK": []},
                                                                         "default": {}, "colour": "red"})]))
    result, server = _run(project, [wrong, wrong])
    assert result.status == "no-template"
    assert "wrong arguments for propose_template" in result.message
    assert "arguments.source must be string, not integer" in result.message
    assert _fed_back(server, 2, "unknown field 'colour'")
    _assert_nothing_written(project, before, result)


def test_a_template_that_does_not_compile(project: Path) -> None:
    before = _files(project)
    result, server = _run(project, [
        Canned(completion(tool_calls=[tool_call("propose_template", _template(COMPILE_ERROR))])), _finish()])
    assert result.status == "no-template"
    assert "the model finished" in result.message
    assert "template rejected (compile)" in result.message and "cosnt" in result.message
    assert _fed_back(server, 2, '"stage": "compile"')
    _assert_nothing_written(project, before, result)


def test_a_template_wrong_on_one_case_only(project: Path) -> None:
    before = _files(project)
    tpl = _template(ONE_CASE_WRONG, space={"BLOCK": [64], "VEC": [4]}, default={"BLOCK": 64, "VEC": 4},
                    launch={"block": "BLOCK", "grid": "cdiv(cdiv(n, VEC), BLOCK)"})
    result, server = _run(project, [Canned(completion(tool_calls=[tool_call("propose_template", tpl)])), _finish()])
    assert result.status == "no-template"
    assert "template rejected (verify)" in result.message
    rejected = result.message.split("template rejected")[1]
    # the declared case n4096 passes (4096 is a multiple of VEC); its odd shape, 4095, does not
    assert "n1001" in rejected and re.search(r"n4096(?!~)", rejected) is None and "n4096~odd(4096->4095)" in rejected
    assert _fed_back(server, 2, "n1001")
    _assert_nothing_written(project, before, result)


def test_a_template_that_reads_out_of_bounds(project: Path) -> None:
    before = _files(project)
    result, server = _run(project, [
        Canned(completion(tool_calls=[tool_call("test_template", _template(OUT_OF_BOUNDS))])), _finish()])
    assert result.status == "no-template"
    assert "template rejected (crash)" in result.message or "template rejected (verify)" in result.message
    assert _fed_back(server, 2, '"ok": false')
    _assert_nothing_written(project, before, result)


@pytest.mark.parametrize("answer", [completion(refusal="I can't help with modifying this kernel."),
                                    completion(content="I'm sorry, but I cannot assist with that request.")],
                         ids=["refusal-field", "plain-text"])
def test_a_refusal(project: Path, answer: dict[str, Any]) -> None:
    before = _files(project)
    result, server = _run(project, [Canned(answer)])
    assert result.status == "no-template"
    assert "the model refused: I" in result.message
    assert len(server.requests) == 1  # a refusal ends the run: no nagging
    _assert_nothing_written(project, before, result)


def test_an_empty_answer(project: Path) -> None:
    before = _files(project)
    empty = Canned(completion(content=None))
    result, server = _run(project, [empty, empty])
    assert result.status == "no-template"
    assert "an empty answer (no text and no tool call)" in result.message
    # the second request told the model what was wrong
    assert "could not be used: an empty answer" in server.sent("scenario")[1]["messages"][-1]["content"]
    _assert_nothing_written(project, before, result)


def test_a_429_then_success(project: Path) -> None:
    before = _files(project)
    started = time.monotonic()
    result, server = _run(project, [Canned.error(429, "rate limited", headers={"Retry-After": "0.4"}), _finish()])
    assert time.monotonic() - started >= 0.4  # Retry-After was honoured
    assert result.stop == "the model finished (giving up)"
    assert len(server.requests) == 2
    assert result.transcript is not None
    kinds = [json.loads(line)["kind"] for line in result.transcript.read_text().splitlines()]
    assert kinds[:5] == ["start", "request", "error", "retry", "response"]
    _assert_nothing_written(project, before, result)


def test_a_response_slower_than_the_timeout(project: Path) -> None:
    before = _files(project)
    slow = Canned(completion(tool_calls=[tool_call("analyze", {})]), delay_s=1.5)
    result, _ = _run(project, [slow, slow], timeout_s=0.3, max_retries=1)
    assert result.status == "no-template"
    assert "failed 2 time(s); last: no answer within the 0.3 s request timeout" in result.message
    assert "KTUNE_AGENT_TIMEOUT" in result.message
    _assert_nothing_written(project, before, result)


def test_a_model_that_never_stops_proposing(project: Path) -> None:
    before = _files(project)
    # Each proposal is new and each is rejected (its default is not in its space); the model never finishes.
    script = [Canned(completion(tool_calls=[tool_call("propose_template", _template(
        BASE_CL, space={"BLOCK": [64 * (i + 2)]}, default={"BLOCK": 64}))])) for i in range(10)]
    result, server = _run(project, script, iterations=3, max_failed_proposals=10)
    assert result.status == "no-template"
    assert "still proposing after 3 iterations without finishing; stopped at the bound" in result.message
    assert len(server.requests) == 3
    _assert_nothing_written(project, before, result)


def test_a_token_budget_ends_the_run(project: Path) -> None:
    before = _files(project)
    revise = Canned(completion(tool_calls=[tool_call("plan", {"action": "revise"})], usage=(900, 200)))
    result, server = _run(project, [revise] * 3, iterations=3, token_budget=1000)
    assert "the token budget of 1000 is spent (1 request(s), 1100 tokens, cost unknown" in result.message
    assert len(server.requests) == 1
    _assert_nothing_written(project, before, result)


# -- the transcript ----------------------------------------------------------------------------


def test_the_transcript_redacts_secrets(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-4f9a2c7e1b")
    leaky = ("my key is sk-test-0123456789abcdefXYZ, the db is postgresql://ktune:hunter2pw@db:5432/x, "
             "and tok-4f9a2c7e1b, with Authorization: Bearer abcdefghijkl0123")
    result, _ = _run(project, [Canned(completion(content=leaky, tool_calls=[
        tool_call("plan", {"action": "finish", "reason": leaky})]))])
    assert result.transcript is not None
    text = result.transcript.read_text()
    for secret in (API_KEY, "hunter2pw", "tok-4f9a2c7e1b", "abcdefghijkl0123"):
        assert secret not in text
    assert "postgresql://ktune:***@db:5432/x" in text
    assert result.transcript.parent == project / ".ktune" / "agent"


def test_redactor_units() -> None:
    r = Redactor(["s3cretvalue"], env={"GITHUB_TOKEN": "ghp_" + "a" * 36, "HOME": "/home/me"})
    assert r.text("x s3cretvalue y") == "x *** y"
    assert r.text("token ghp_" + "a" * 36) == "token ***"
    assert r.value({"Authorization": "Bearer xyz", "home": "/home/me"}) == {"Authorization": "***",
                                                                           "home": "/home/me"}
    assert r.text("https://u:p4ss@host/x") == "https://u:***@host/x"


# -- small units ------------------------------------------------------------------------------


def test_schema_validation_names_the_field() -> None:
    schema = {"type": "object", "required": ["action"], "additionalProperties": False,
              "properties": {"action": {"type": "string", "enum": ["finish"]},
                             "n": {"type": "integer", "minimum": 1}}}
    assert validate({"action": "finish"}, schema) == []
    assert validate({"action": "stop", "n": 0, "x": 1}, schema) == [
        'arguments.action must be one of "finish", not "stop"', "arguments.n must be at least 1, not 0",
        "arguments has an unknown field 'x' (known: action, n)"]
    assert validate([], schema) == ["arguments must be object, not array"]


def test_no_model_means_the_agent_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ModelSettings.from_env(None, env={}) is None
    s = ModelSettings.from_env(None, env={"KTUNE_MODEL": "m", "OPENAI_API_KEY": "k" * 10,
                                          "KTUNE_PRICE_PER_1K": "0.5,1.5", "KTUNE_AGENT_COST": "2"})
    assert s is not None and s.priced and s.cost_budget == 2.0
    assert "k" * 10 not in repr(s)
    assert looks_like_refusal("I'm sorry, I can't do that") and not looks_like_refusal("Here is the template")


# -- the good conversation -------------------------------------------------------------------


def _scripted_agent() -> Any:
    path = REPO / "benchmarks" / "naive" / "scripted_agent.py"
    spec = importlib.util.spec_from_file_location("ktune_scripted_agent", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_good_conversation_turns_a_naive_kernel_into_a_faster_verified_template(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    kernels = root / "kernels"
    kernels.mkdir(parents=True)
    for name in ("silu_and_mul.py", "silu_and_mul.cl", "naive.clh"):
        shutil.copy(REPO / "benchmarks" / "naive" / name, kernels / name)
    (root / "ktune-params.json").write_text(PARAMS)
    bench = _bench(root, "silu_and_mul.py", "silu_and_mul_naive", trials=3, sample=1)
    result = _scripted_agent().run_scripted(bench, with_mistake=False, steer=False, dest=kernels,
                                            compare_rounds=1)
    assert result.status == "improved", result.message
    assert result.stop == "the model finished (at the memory roof)"
    (cmp,) = result.comparisons
    assert cmp.faster and cmp.template_us < cmp.base_us  # timed side by side with the naive default
    assert dict(cmp.base_params) == {"NAIVE": 1}
    # The agent wrote nothing of the project's: the template is a change for the write-back to deliver.
    assert result.template is not None
    assert set(result.template.files) == {"kernels/silu_and_mul_tpl.cl", "kernels/silu_and_mul_tpl.py"}
    assert sorted(p.name for p in kernels.iterdir() if p.is_file()) == ["naive.clh", "silu_and_mul.cl",
                                                                         "silu_and_mul.py"]
    assert (root / "ktune-params.json").read_text() == PARAMS
    # Delivered as the run's file mode delivers it: the template beside the kernel, its records in the file.
    file_mode = builtin_write_back("file")
    assert file_mode is not None
    line = file_mode(WriteRequest(
        mode="file", root=root, params_path=root / "ktune-params.json", outcomes=(), device="pocl",
        command="pytest --ktune --ktune-tune --ktune-agent", copy_bandwidth=lambda: None,
        templates=(result.template,)))
    assert line == ("templates: wrote kernels/silu_and_mul_tpl.cl, kernels/silu_and_mul_tpl.py; "
                    f"wrote 1 tuned record(s) to {root / 'ktune-params.json'}")
    records = json.loads((root / "ktune-params.json").read_text())["records"]
    (record,) = records
    assert record["target"] == "kernels/silu_and_mul_tpl.py::silu_and_mul_naive_tpl"
    assert record["params"] == dict(cmp.template_params)
    # The written template is a target of its own: it verifies with its recorded parameters, in a worker.
    from pytest_ktune.measure.worker import TargetRef, WorkerPool, WorkerSpec

    tpl = vars(import_file(kernels / "silu_and_mul_tpl.py"))["silu_and_mul_naive_tpl"]
    assert dict(tpl.default) == {"BLOCK": 128, "VEC": 1, "ITEMS": 1}
    spec = WorkerSpec(target=TargetRef.of(tpl), backend="opencl", cases=(0,))
    with WorkerPool(spec, trial_timeout_s=30.0) as pool:
        (outcome,) = pool.evaluate([record["params"]], 11)
    assert outcome.status == "ok", outcome.reason


def test_a_cost_budget_ends_the_run(project: Path) -> None:
    from pytest_ktune.agent._client import BudgetError, ModelClient
    from pytest_ktune.agent._transcript import Transcript

    revise = Canned(completion(tool_calls=[tool_call("plan", {"action": "revise"})], usage=(1000, 1000)))
    with StubServer({"scenario": [revise, revise]}) as server:
        settings = ModelSettings(model="scenario", base_url=server.base_url, api_key=API_KEY, cost_budget=1.0,
                                 price_in_per_1k=0.25, price_out_per_1k=1.0)
        client = ModelClient(settings, Transcript(project / ".ktune" / "agent", "cost"))
        client.ask([{"role": "user", "content": "go"}], [])
        with pytest.raises(BudgetError, match=r"the cost budget of 1 is spent \(1 request\(s\), 2000 tokens, "
                                              r"cost 1.2500\)") as info:
            client.ask([{"role": "user", "content": "go"}], [])
    assert "KTUNE_AGENT_COST" in info.value.hint


def test_the_agent_as_a_proposer_for_templatize(project: Path) -> None:
    """`ktune templatize` asks the agent for proposals; each check goes back to the model as the tool result."""
    from pytest_ktune.agent._proposal import Proposal, ProposalCheck
    from pytest_ktune.agent._proposer import AgentProposer

    tpl = _template(BASE_CL)
    script = [Canned(completion(tool_calls=[tool_call("propose_template", tpl)])),
              Canned(completion(tool_calls=[tool_call("plan", {"action": "finish"})]),
                     expect=lambda body: "" if '"stage": "verify"' in body["messages"][-1]["content"]
                     else "the check was not sent back")]
    with StubServer({"scenario": script}) as server:
        proposer = AgentProposer(ModelSettings(model="scenario", base_url=server.base_url, api_key=API_KEY),
                                 project)
        context = {"target": "scale_add", "backend": "opencl", "base_source": BASE_CL, "key_dims": ["n"],
                   "cases": ["n4096", "n1001"], "device": {}, "round": 0, "max_rounds": 4}
        first = proposer(None, None, context)
        assert isinstance(first, Proposal) and first.origin == "agent" and dict(first.space) == {"BLOCK": (64, 128)}
        failed = ProposalCheck(ok=False, stage="verify", message="case n1001 differs", checked=(), failures=())
        assert proposer(first, failed, context) is None
        assert proposer.stop == "the model finished"
    assert not server.problems
