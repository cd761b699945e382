"""What the agent stage says when it refuses is true: a check that runs past its time says how far it got
(not that a kernel hangs), and every refusal is one console line naming the stage and the reason."""

from __future__ import annotations

import io
import uuid
from dataclasses import replace

from pytest_ktune.agent._budget import Budget
from pytest_ktune.agent._check import check_proposal, screened_variants
from pytest_ktune.agent._client import ModelSettings
from pytest_ktune.agent._loop import AgentSettings, run_agent
from pytest_ktune.agent._proposal import Proposal
from pytest_ktune.agent._proposer import AgentProposer
from pytest_ktune.agent._templatize import TemplatizeSettings, templatize
from pytest_ktune.core.discover import import_file
from pytest_ktune.core.target import Target
from pytest_ktune.measure.tools import ToolPlan
from pytest_ktune.testing.openai_stub import StubServer

from ._hostile import API_KEY, SCALE_ADD_CL, Project, bench, finish, propose

# With A=2 and B=3 (the last configuration of the check's design), 2**20 copies of one integer statement:
# half a minute or more for the OpenCL compiler on a CPU, where every other configuration takes a fraction of
# a second. A fresh comment each run, so that no compiler cache answers for it.
SLOW_MACROS = "#define S0 k = k * 3 + 1;\n" + "".join(f"#define S{d + 1} S{d} S{d}\n" for d in range(20))
SLOW_AT_ONE = SCALE_ADD_CL.replace(
    "    const int i = get_global_id(0);\n",
    "    const int i = get_global_id(0);\n    int k = A + B;\n#if A == 2 && B == 3\n    S20\n#endif\n").replace(
    "if (i < n) out[i] = 2.0f * x[i] + y[i];", "if (i < n) out[i] = 2.0f * x[i] + y[i] + (k == 77 ? 1e-30f : 0.0f);")


def _slow(base: Target) -> Proposal:
    # 5 x 4 values: twenty pairs, twenty configurations, each a program of its own
    source = f"// {uuid.uuid4()}\n{SLOW_MACROS}{SLOW_AT_ONE}"
    return Proposal.from_json({"source": source, "space": {"A": [0, 1, 2, 3, 4], "B": [0, 1, 2, 3]},
                               "default": {"A": 0, "B": 0}}, backend="opencl")


def _base(project: Project) -> Target:
    base = vars(import_file(project.kernels / "hostile_targets.py"))["scale_one"]
    assert isinstance(base, Target)
    return base


def test_a_timeout_names_the_configuration_that_took_the_time(hostile: Project) -> None:
    # Each answer of the worker is one configuration's compile and check: the others are answered first, and
    # the one that takes the time is named, not the first of its batch.
    base = _base(hostile)
    check = check_proposal(_slow(base), base, root=hostile.root, backend="opencl", sample=0, trial_timeout_s=8.0,
                           tools=ToolPlan(mode="off"))
    assert not check.ok and check.stage == "timeout", check.message
    assert check.message.startswith("the configuration A=2, B=3 failed (timeout): no answer within 8 s"), \
        check.message
    assert len(check.checked) == 19 and [dict(c) for c, _ in check.failures] == [{"A": 2, "B": 3}]


def test_a_check_that_runs_out_of_time_says_how_far_it_got_and_blames_no_configuration(hostile: Project) -> None:
    base = _base(hostile)
    screened_variants(base, "opencl", root=hostile.root, seed=0, timeout_s=60.0)  # the budget is the check's own
    check = check_proposal(_slow(base), base, root=hostile.root, backend="opencl", sample=0, trial_timeout_s=60.0,
                           tools=ToolPlan(mode="off"), budget=Budget(10.0))
    assert not check.ok and check.stage == "timeout", check.message
    assert "the check ran out of time (the wall-time budget of 10 s is spent)" in check.message, check.message
    assert "of 20 configurations were checked" in check.message and "remained, not checked (A=" in check.message
    assert "hang" not in check.message.replace("this is not a hang", "")
    assert 1 <= len(check.checked) < 20 and check.failures == ()


_HUGE = {"source": SCALE_ADD_CL, "space": {"A": list(range(10)), "B": list(range(10)), "C": list(range(10)),
                                           "D": list(range(16)), "E": list(range(64))},
         "default": {"A": 0, "B": 0, "C": 0, "D": 0, "E": 0}}
_ECHO = {"source": SCALE_ADD_CL, "space": {"BLOCK": [64, 128], "TAG": [API_KEY]},
         "default": {"BLOCK": 64, "TAG": API_KEY}, "launch": {"block": "BLOCK", "grid": "cdiv(n, BLOCK)"}}


def test_ktune_templatize_prints_one_line_per_proposal_refused_at_the_schema(hostile: Project) -> None:
    stream = io.StringIO()
    with StubServer({"scenario": [propose(_HUGE), propose(_ECHO), finish()]}) as server:
        proposer = AgentProposer(ModelSettings(model="scenario", base_url=server.base_url, api_key=API_KEY),
                                 hostile.root)
        templatize(hostile.kernels / "scale_add.cl", "scale_add", root=hostile.root, proposer=proposer,
                   settings=TemplatizeSettings(backend="opencl", sample=0, out=hostile.root / "out", max_rounds=4),
                   stream=stream)
    lines = stream.getvalue().splitlines()
    refused = [ln for ln in lines if ln.startswith("agent proposal rejected at schema: ")]
    assert refused == ["agent proposal rejected at schema: space: 1,024,000 points, more than 100,000",
                       "agent proposal rejected at schema: space.TAG: the value '***' is not 1 to 64 letters, digits "
                       "or _.+-"], lines
    assert lines.index(refused[-1]) < next(i for i, ln in enumerate(lines) if "the agent stopped proposing" in ln)
    hostile.assert_key_nowhere(stream.getvalue())


BROKEN = SCALE_ADD_CL.replace("const int i", "cosnt int i")


def test_the_agent_loop_prints_one_line_per_refusal_naming_the_stage(hostile: Project) -> None:
    stream = io.StringIO()
    tpl = {"source": BROKEN, "space": {"BLOCK": [64, 128]}, "default": {"BLOCK": 64},
           "launch": {"block": "BLOCK", "grid": "cdiv(n, BLOCK)"}}
    with StubServer({"scenario": [propose(_HUGE), propose(tpl), finish()]}) as server:
        model = ModelSettings(model="scenario", base_url=server.base_url, api_key=API_KEY, backoff_s=0.01)
        run_agent(replace(bench(hostile, "scale_add"), progress=stream),
                  AgentSettings(model=model, iterations=4, max_failed_proposals=4))
    lines = stream.getvalue().splitlines()
    refused = [ln for ln in lines if " rejected at " in ln]
    assert len(refused) == 2, lines
    assert refused[0] == "scale_add: agent proposal rejected at schema: space: 1,024,000 points, more than 100,000"
    assert refused[1].startswith("scale_add: agent template rejected at compile: the default BLOCK=64 failed "
                                 "(compile): the compiler says: | "), refused[1]
    assert "cosnt" in refused[1] and str(hostile.top) not in stream.getvalue()
