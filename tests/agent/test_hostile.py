"""The agent stage under a hostile or careless model: one scripted conversation per finding of the
security review, the real openai client against the loopback stub, templates checked on PoCL (and
Oclgrind). Each asserts what a user relies on: nothing outside the output folder changes, nothing
unverified is written, the run ends within its budget, and the API key appears nowhere."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_ktune.agent._budget import resident_bytes
from pytest_ktune.agent._client import ModelSettings
from pytest_ktune.agent._proposer import AgentProposer
from pytest_ktune.agent._templatize import TemplatizeSettings, templatize
from pytest_ktune.testing.openai_stub import Canned, StubServer, completion, tool_call

from ._hostile import (
    API_KEY,
    PARAMS,
    ROWNORM_CL,
    SCALE_ADD_CL,
    TARGETS_PY,
    Project,
    finish,
    need_oclgrind,
    propose,
    run,
)

REPO = Path(__file__).resolve().parents[2]


def _scale_add(source: str, **extra: Any) -> dict[str, Any]:
    return {"source": source, "space": {"BLOCK": [64, 128]}, "default": {"BLOCK": 64},
            "launch": {"block": "BLOCK", "grid": "cdiv(n, BLOCK)"}, **extra}


def _nothing_written(project: Project, before: dict[str, bytes], outcome: Any) -> None:
    assert outcome.result.template is None
    assert project.changed(before) == set()


# -- 1. files outside the project ---------------------------------------------------------------------


def test_1_includes_that_reach_outside_are_refused_before_they_are_read(hostile: Project) -> None:
    (hostile.kernels / "link.clh").symlink_to(hostile.top / "outside" / "secret.txt")
    before = hostile.files()
    escapes = ['#include "../../outside/secret.txt"\n', '#include "/proc/self/environ"\n',
               '#if 0\n#include "../../../../proc/self/environ"\n#endif\n',
               '#define P "/proc/self/environ"\n#include P\n']
    escapes.append('#include "link.clh"\n')
    script = [propose(_scale_add(e + SCALE_ADD_CL), tool="test_template") for e in escapes] + [finish()]
    out = run(hostile, "scale_add", script, iterations=8, max_failed_proposals=10)
    answers = out.tool_answers()
    assert [a["stage"] for a in answers[:5]] == ["sandbox"] * 5
    assert "leads outside the kernel's folder" in answers[4]["message"]
    assert str(hostile.top) not in out.sent_text()  # no path of this machine went to the model
    assert out.result.status == "no-template"
    _nothing_written(hostile, before, out)
    assert not list((hostile.root / ".ktune").rglob("secret.txt")) and not list(
        (hostile.root / ".ktune").rglob("environ"))
    hostile.assert_key_nowhere(out.result.message)


def test_1_a_template_is_written_only_under_its_output_folder(hostile: Project) -> None:
    """A header reached through a link in the output folder, or a name that climbs out, is not written."""
    from pytest_ktune.agent._proposal import Proposal
    from pytest_ktune.agent._sandbox import write_template
    from pytest_ktune.core.discover import import_file

    base = vars(import_file(hostile.kernels / "hostile_targets.py"))["scale_add"]
    good = Proposal.from_json(_scale_add('#include "common.clh"\n' + SCALE_ADD_CL), backend="opencl")
    out = hostile.root / "out"
    out.mkdir()
    (out / "common.clh").symlink_to(hostile.top / "outside" / "written-here.clh")
    before = hostile.files()
    try:
        write_template(good, base, dest=out)
    except Exception as exc:
        assert "would be written outside" in str(exc)
    else:
        raise AssertionError("a header through a link leading out of the folder was written")
    assert hostile.changed(before) == set() and not (hostile.top / "outside" / "written-here.clh").exists()


# -- 2. a data race ---------------------------------------------------------------------------------------

RACY = """__kernel void rownorm(__global float* out, __global const float* x, int H) {
    __local float part[256];
    const int l = get_local_id(0), r = get_group_id(0), nl = get_local_size(0);
    float s = 0.0f;
    for (int i = l; i < H; i += nl) s += x[r * H + i] * x[r * H + i];
    part[l] = s;
    if (l == nl - 1) {  // the last work-item sums the partials: no barrier
        float t = 0.0f;
        for (int i = 0; i < nl; ++i) t += part[i];
        const float inv = rsqrt(t / H + 1e-6f);
        for (int i = 0; i < H; ++i) out[r * H + i] = x[r * H + i] * inv;
    }
}
"""


def test_2_a_data_race_that_passes_on_pocl_is_caught_by_oclgrind(hostile: Project) -> None:
    need_oclgrind()
    before = hostile.files()
    tpl = {"source": RACY, "space": {"WG": [32, 64]}, "default": {"WG": 64}, "launch": {"block": "WG"}}
    out = run(hostile, "rownorm", [propose(tpl), finish()])
    (answer,) = out.tool_answers()[:1]
    assert answer["ok"] is False and answer["stage"] == "tools", answer
    assert "data race" in answer["message"] and "Oclgrind" in answer["message"]
    assert out.result.status == "no-template"
    _nothing_written(hostile, before, out)
    hostile.assert_key_nowhere(out.result.message)


# Reads a partial of the local array that no work-item wrote (part[nl], with nl < 256 work-items), in a test
# whose answer never counts: right on PoCL, and seen only by Oclgrind's uninitialised-value check.
UNINITIALISED = ROWNORM_CL.replace("part[0] = t; }", "if (part[nl] == 12345.0f) t = 0.0f; part[0] = t; }")


def test_2_an_uninitialised_read_that_passes_on_pocl_is_caught_by_oclgrind(hostile: Project) -> None:
    need_oclgrind()
    before = hostile.files()
    bad = {"source": UNINITIALISED, "space": {"WG": [32, 64]}, "default": {"WG": 64}, "launch": {"block": "WG"}}
    honest = {**bad, "source": ROWNORM_CL}
    out = run(hostile, "rownorm", [propose(bad, tool="test_template"), propose(honest, tool="test_template"),
                                   finish()], iterations=4)
    refused, passed = out.tool_answers()[:2]
    assert refused["ok"] is False and refused["stage"] == "tools", refused
    assert "Oclgrind" in refused["message"] and "uninitialized value" in refused["message"], refused
    assert "part[nl] == 12345.0f" in refused["message"], refused
    assert passed["ok"] is True, passed
    _nothing_written(hostile, before, out)


# -- 3. a configuration outside a sample ------------------------------------------------------------------

WRONG_AT_VEC8 = SCALE_ADD_CL.replace("if (i < n) out[i] = 2.0f * x[i] + y[i];",
                                     "if (i < n) out[i] = (VEC == 8 && i == 7) ? 0.0f : 2.0f * x[i] + y[i];")


def test_3_a_value_no_first_points_reach_is_checked(hostile: Project) -> None:
    # 62,500 points, VEC first: enumeration order reaches VEC=8 only after 46,875 others.
    space = {"VEC": [1, 2, 4, 8], **{f"P{i}": [0, 1, 2, 3, 4] for i in range(6)}}
    tpl = {"source": WRONG_AT_VEC8, "space": space, "default": {"VEC": 1, **{f"P{i}": 0 for i in range(6)}}}
    before = hostile.files()
    out = run(hostile, "scale_add", [propose(tpl), finish()])
    (answer,) = out.tool_answers()[:1]
    assert answer["stage"] == "verify" and "VEC=8" in answer["message"], answer
    _nothing_written(hostile, before, out)


WRONG_AT_BLOCK128 = SCALE_ADD_CL.replace("if (i < n) out[i] = 2.0f * x[i] + y[i];",
                                        "if (i < n) out[i] = (BLOCK == 128 ? 1.01f : 1.0f) * (2.0f * x[i] + y[i]);")


def test_3_the_one_configuration_a_constraint_allows_is_checked(hostile: Project) -> None:
    # 2 x 2**15 points; BLOCK=128 only with all fifteen switches on, and wrong there on every shape. Drawn
    # at random, that point is never met; solved, its pairs are feasible and the check runs it.
    switches = {f"S{i}": [0, 1] for i in range(15)}
    tpl = {"source": WRONG_AT_BLOCK128, "space": {"BLOCK": [64, 128], **switches},
           "default": {"BLOCK": 64, **{n: 0 for n in switches}},
           "constraints": ["BLOCK == 64 or (" + " and ".join(f"S{i} == 1" for i in range(15)) + ")"],
           "launch": {"block": "BLOCK", "grid": "cdiv(n, BLOCK)"}}
    before = hostile.files()
    out = run(hostile, "scale_add", [propose(tpl), finish()])
    (answer,) = out.tool_answers()[:1]
    assert answer["ok"] is False and answer["stage"] == "verify", answer
    assert "BLOCK=128" in answer["message"] and "S14=1" in answer["message"], answer
    assert out.result.status == "no-template"
    _nothing_written(hostile, before, out)


# -- 4. values random inputs never take --------------------------------------------------------------------

GATE_CLAMPED = """__kernel void gated(__global float* out, __global const float* x, int T, int I) {
    const int e = get_global_id(0);
    if (e >= T * I) return;
    const int row = e / I, c = e - row * I;
    float g = x[row * 2 * I + c];
    const float u = x[row * 2 * I + I + c];
    if (fabs(g) > 8.0f) g = 0.0f;  // "saturated anyway"
    out[e] = g / (1.0f + exp(-g)) * u;
}
"""
TAIL_DROPPED = """__kernel void scale_add(__global float* out, __global const float* x, __global const float* y,
                        int n) {
    const int v = get_global_id(0);
    if (v < n / VEC) for (int j = 0; j < VEC; ++j) out[v * VEC + j] = 2.0f * x[v * VEC + j] + y[v * VEC + j];
}
"""


def test_4_a_gate_wrong_above_8_fails_on_edge_values(hostile: Project) -> None:
    tpl = {"source": GATE_CLAMPED, "space": {"B": [64]}, "default": {"B": 64}, "launch": {"block": "B"}}
    before = hostile.files()
    out = run(hostile, "gated", [propose(tpl), finish()])
    (answer,) = out.tool_answers()[:1]
    assert answer["stage"] == "verify" and re.search(r"t8~(sweep|large)", answer["message"]), answer
    _nothing_written(hostile, before, out)


def test_4_a_dropped_tail_fails_on_a_shape_that_does_not_divide(hostile: Project) -> None:
    tpl = {"source": TAIL_DROPPED, "space": {"VEC": [1, 4]}, "default": {"VEC": 4},
           "launch": {"block": "64", "grid": "cdiv(cdiv(n, VEC), 64)"}}
    before = hostile.files()
    out = run(hostile, "scale_one", [propose(tpl), finish()])  # its only case, n4096, divides by 4
    (answer,) = out.tool_answers()[:1]
    assert answer["stage"] == "verify" and "n4096~odd(4096->4095)" in answer["message"], answer
    assert "NaN where a value was expected" in answer["message"]
    _nothing_written(hostile, before, out)


# -- 5. out-of-bounds reads ---------------------------------------------------------------------------------

PREFETCH = SCALE_ADD_CL.replace("if (i < n) out[i] = 2.0f * x[i] + y[i];",
                                "if (i < n) { const float next = x[i + 64];  /* the next block, prefetched */\n"
                                "        out[i] = 2.0f * x[i] + y[i] + 0.0f * next; }")


# The same read whose value never counts (compared with a value it never takes): no result shows it.
PREFETCH_UNSEEN = SCALE_ADD_CL.replace("if (i < n) out[i] = 2.0f * x[i] + y[i];",
                                       "if (i < n) { const float next = x[i + 64];\n"
                                       "        out[i] = next == 12345.0f ? 0.0f : 2.0f * x[i] + y[i]; }")


def test_5_a_read_past_the_end_that_no_result_shows_is_caught_by_oclgrind(hostile: Project) -> None:
    need_oclgrind()
    before = hostile.files()
    out = run(hostile, "scale_add", [propose(_scale_add(PREFETCH_UNSEEN)), finish()])
    (answer,) = out.tool_answers()[:1]
    assert answer["ok"] is False and answer["stage"] == "tools", answer
    assert "Invalid read" in answer["message"] and "const float next = x[i + 64];" in answer["message"]
    _nothing_written(hostile, before, out)


def test_5_a_read_past_the_end_is_caught_by_the_guards(hostile: Project) -> None:
    before = hostile.files()
    out = run(hostile, "scale_add", [propose(_scale_add(PREFETCH)), finish()])
    (answer,) = out.tool_answers()[:1]
    assert answer["ok"] is False and answer["stage"] in ("verify", "tools"), answer
    assert "got nan" in answer["message"] or "Invalid read" in answer["message"]
    _nothing_written(hostile, before, out)


# -- 6. unbounded time and memory -----------------------------------------------------------------------------


def test_6_expressions_letters_and_huge_spaces_end_at_once(hostile: Project) -> None:
    before = hostile.files()
    letters = "x" * 1_000_000
    huge = {"source": SCALE_ADD_CL, "space": {"A": list(range(10)), "B": list(range(10)), "C": list(range(10)),
                                              "D": list(range(16)), "E": list(range(64))},
            "default": {"A": 0, "B": 0, "C": 0, "D": 0, "E": 0}}
    script = [propose(_scale_add(SCALE_ADD_CL, constraints=["9 ** 9 ** 9 > BLOCK"]), tool="test_template"),
              Canned(completion(content=letters)),
              propose(_scale_add(SCALE_ADD_CL, notes=letters), tool="test_template"),
              propose(huge, tool="test_template"), finish()]
    memory = resident_bytes()
    out = run(hostile, "scale_add", script, iterations=8, max_failed_proposals=10, max_bad_replies=3)
    assert out.seconds < 60 and resident_bytes() - memory < 500 << 20
    answers = out.tool_answers()
    assert "more than 1024 bits" in answers[0]["message"]
    assert "notes: 1000000 characters, more than 4000" in answers[1]["error"]
    assert "space: 1,024,000 points, more than 100,000" in answers[2]["error"]
    _nothing_written(hostile, before, out)


def test_6_one_wall_time_budget_covers_the_model_calls(hostile: Project) -> None:
    before = hostile.files()
    slow = Canned(completion(content="thinking"), delay_s=30.0)
    started = time.monotonic()
    out = run(hostile, "scale_add", [slow, slow], wall_s=3.0, timeout_s=120.0)
    assert time.monotonic() - started < 15
    assert "the wall-time budget of 3 s is spent" in out.result.message, out.result.message
    _nothing_written(hostile, before, out)


# -- 7. exceptions go back to the model; what verified is kept -------------------------------------------------


def test_7_failing_expressions_and_files_go_back_and_the_verified_rules_template_is_kept(hostile: Project) -> None:
    (hostile.kernels / "sh.clh").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    bad = [_scale_add(SCALE_ADD_CL, constraints=["BLOCK + 'x' > 0"]),
           _scale_add(SCALE_ADD_CL, constraints=["10.0 ** 400 > BLOCK"]),
           _scale_add('#include "/bin/sh"\n' + SCALE_ADD_CL), _scale_add('#include "sh.clh"\n' + SCALE_ADD_CL)]
    script = [propose(t) for t in bad] + [finish()]
    dest = hostile.root / "out"
    before = hostile.files()
    stream = io.StringIO()
    with StubServer({"scenario": script}) as server:
        proposer = AgentProposer(ModelSettings(model="scenario", base_url=server.base_url, api_key=API_KEY),
                                 hostile.root)
        result = templatize(hostile.kernels / "scale_add.cl", "scale_add", root=hostile.root, proposer=proposer,
                            settings=TemplatizeSettings(backend="opencl", sample=0, out=dest, max_rounds=6),
                            stream=stream)
    checks = [c for _, c in result.attempts]
    assert checks[0].ok and [c.stage for c in checks[1:]] == ["space", "space", "sandbox", "sandbox"]
    assert "needs numbers, got str" in checks[1].message and "out of range" in checks[2].message
    assert "not a plain relative name" in checks[3].message and "not a text file" in checks[4].message
    assert result.chosen is not None and result.chosen.origin == "rules"  # the verified rules template stayed
    assert {p.name for p in result.written} == {"scale_add_tpl.cl", "scale_add_tpl.py"}
    assert hostile.changed(before) == {"proj/out/scale_add_tpl.cl", "proj/out/scale_add_tpl.py"}
    assert "VERIFIED = {'configurations'" in (dest / "scale_add_tpl.py").read_text()
    hostile.assert_key_nowhere(stream.getvalue())


# -- 8. echoed secrets ---------------------------------------------------------------------------------------------


def test_8_a_key_the_endpoint_echoes_is_redacted_before_it_is_printed_written_or_stored(hostile: Project) -> None:
    echo = _scale_add(f"// key: {API_KEY}\n" + SCALE_ADD_CL, notes=f"the key is {API_KEY}")
    echo_value = dict(echo, space={"BLOCK": [64, 128], "TAG": [API_KEY]}, default={"BLOCK": 64, "TAG": API_KEY})
    script = [propose(echo_value), propose(echo), finish()]
    dest = hostile.root / "out"
    stream = io.StringIO()
    with StubServer({"scenario": script}) as server:
        proposer = AgentProposer(ModelSettings(model="scenario", base_url=server.base_url, api_key=API_KEY),
                                 hostile.root)
        result = templatize(hostile.kernels / "scale_add.cl", "scale_add", root=hostile.root, proposer=proposer,
                            settings=TemplatizeSettings(backend="opencl", sample=0, out=dest, max_rounds=4),
                            stream=stream)
        refused = server.sent("scenario")[1]["messages"][-1]
    # the echoed value reached the proposal redacted, and was refused as a value
    assert refused["role"] == "tool" and "space.TAG: the value '***' is not" in refused["content"]
    checks = [c for _, c in result.attempts]
    assert len(checks) == 2 and checks[1].ok and result.chosen is not None and result.chosen.origin == "agent"
    written = (dest / "scale_add_tpl.py").read_text()
    assert "the key is ***" in written and "// key: ***" in (dest / "scale_add_tpl.cl").read_text()
    assert list((hostile.root / ".ktune" / "agent").rglob("proposal.json"))  # the stored proposals...
    hostile.assert_key_nowhere(stream.getvalue())  # ...the transcript, the output and the files hold no key


# -- the same through the command line and through pytest ---------------------------------------------------


def _hostile_script(*, verified: bool = True) -> list[Canned]:
    """An include that escapes, then (with ``verified``) a good template whose notes echo the key, then a
    finish whose reason echoes it again."""
    escape = _scale_add('#include "../../outside/secret.txt"\n' + SCALE_ADD_CL)
    echo = _scale_add(SCALE_ADD_CL, notes=f"the key is {API_KEY}")
    done = Canned(completion(tool_calls=[tool_call("plan", {"action": "finish", "reason": f"bye {API_KEY}"})]))
    return [propose(escape), *([propose(echo)] if verified else []), done]


def test_ktune_templatize_with_a_hostile_model_writes_only_what_verified_under_out(hostile: Project) -> None:
    dest = hostile.top / "elsewhere"
    before = hostile.files()
    with StubServer({"scenario": _hostile_script()}) as server:
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": API_KEY,
               "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        res = subprocess.run([sys.executable, "-m", "pytest_ktune.cli", "templatize", "kernels/scale_add.cl",
                              "--target", "scale_add", "--root", str(hostile.root), "--model", "scenario",
                              "--sample", "0", "--out", str(dest), "--wall", "120"], cwd=hostile.root, env=env,
                             capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "rejected at sandbox" in res.stdout and "agent proposal" in res.stdout
    assert hostile.changed(before) == {"elsewhere/scale_add_tpl.cl", "elsewhere/scale_add_tpl.py"}
    assert "the key is ***" in (dest / "scale_add_tpl.py").read_text()
    hostile.assert_key_nowhere(res.stdout, res.stderr)


def test_pytest_ktune_agent_with_a_hostile_model(hostile: Project, pytester: pytest.Pytester,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\n")
    for name in ("scale_add.cl", "common.clh"):
        (pytester.path / name).write_text((hostile.kernels / name).read_text())
    pytester.path.joinpath("kernels.py").write_text(TARGETS_PY.split("scale_one = ")[0])
    pytester.path.joinpath("ktune-params.json").write_text(PARAMS)
    params = pytester.path.joinpath("ktune-params.json").read_bytes()
    with StubServer({"scenario": _hostile_script(verified=False)}) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        result = pytester.runpytest_subprocess("--ktune", "--ktune-tune", "--ktune-agent", "--ktune-model", "scenario",
                                               "--ktune-trials", "2", "--ktune-backend", "opencl", "-k", "tune",
                                               "-p", "no:randomly", timeout=300)
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, text
    result.stdout.fnmatch_lines(["*ktune agent*", "scale_add: agent stopped: the model finished (bye ***)*No template "
                                 "was verified*template rejected (sandbox)*not a plain relative name*"])
    assert pytester.path.joinpath("ktune-params.json").read_bytes() == params  # --ktune-write none: untouched
    assert not list(pytester.path.glob("*_tpl*")) and not list(pytester.path.rglob("secret.txt"))
    assert API_KEY not in text
    leaked = [p for p in pytester.path.rglob("*") if p.is_file() and API_KEY.encode() in p.read_bytes()]
    assert not leaked, leaked
