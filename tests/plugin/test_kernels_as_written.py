"""Kernels as others write them, through the plugin: a space per backend, a source that redefines a -D
macro, compiler warnings, constant and dynamic shared memory, 2-D grids of 1-D blocks, check= and
postprocess=, case ids that clash, GFLOP/s, in-memory sources and tolerances that scale."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

from pytest_ktune.core.includes import source_hash

from ._kit import SCALE_CL, SPLIT, Project, failure_section, lit, scale_target, summary_rows, table_header

# -- a space per backend ------------------------------------------------------------------------


def test_a_backend_drops_the_parameter_it_cannot_take(project: Project) -> None:
    unsplit = scale_target("unsplit", space="BLOCK=[64, 128], read_only=[0, 1]",
                           default="{'BLOCK': 64, 'read_only': 1}")
    project.write(SPLIT, unsplit)
    result = project.run("--ktune-update-baseline", "-v")
    result.assert_outcomes(passed=2, failed=2)
    # Without per_backend, -Dread_only=1 breaks OpenCL's own headers; the hint says what to do.
    text = failure_section(result, "unsplit::correct[small]")
    assert "OpenCL compile failed with -DBLOCK=64 -Dread_only=1" in text
    assert "read_only is an OpenCL C keyword" in text and "per_backend=" in text
    # With it, OpenCL runs its own default, and the params file records its own parameters only.
    (record,) = project.records()
    assert record["target"] == "kernels.py::split"
    assert record["params"] == {"BLOCK": 128} == record["baseline"]["params"]


# -- a define the source overrides; compiler warnings ------------------------------------------

REDEF_CLH = "// the kernel's own tuning constants\n#define BLOCK 128\n"
NOISY_CL = "#define HINT 1\n#define HINT 2\n" + SCALE_CL
WRONG = '''
def scaled_wrongly(x, a):
    return (x.astype(np.float64) * a + 1).astype(np.float32)
'''


def _noisy_project(project: Project) -> None:
    project.write(WRONG, scale_target("redefined", source="redefined.cl"),
                  scale_target("noisy", source="noisy.cl"),
                  scale_target("noisy_wrong", source="noisy.cl", reference="scaled_wrongly"),
                  sources={"redefined": '#include "conf.clh"\n' + SCALE_CL, "noisy": NOISY_CL})
    (project.path / "conf.clh").write_text(REDEF_CLH)


def test_a_source_that_redefines_a_parameter_fails_naming_it_and_the_line(project: Project) -> None:
    _noisy_project(project)
    result = project.run("-m", "ktune_correctness")
    result.assert_outcomes(passed=1, failed=2)
    text = failure_section(result, "redefined::correct[small]")
    assert "target redefined (" in text
    assert "the source redefines the parameter BLOCK, which ktune passes as -DBLOCK=64: " in text
    assert f"{project.path / 'conf.clh'}:2: #define BLOCK 128" in text
    assert "next step: guard the line so that -D wins (#ifndef BLOCK" in text
    # A check that fails carries the compiler's warnings about its build; they are not shown otherwise.
    wrong = failure_section(result, "noisy_wrong::correct[small]")
    assert "the compiler said, building this target:" in wrong
    assert "noisy.cl:2:9: 'HINT' macro redefined" in wrong
    assert "ktune compiler output" not in result.stdout.str()


def test_compiler_output_is_shown_once_when_asked_for(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    _noisy_project(project)
    monkeypatch.setenv("KTUNE_COMPILER_OUTPUT", "1")
    result = project.run("-k", "noisy and not wrong")
    result.assert_outcomes(passed=2)
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if "ktune compiler output" in line)
    section = lines[start + 1:]
    assert section[0].startswith("target noisy (") and section[0].endswith("kernels.py):")
    # Two items, one build each way it was compiled, the warning twice in PoCL's log: shown once.
    assert [line for line in section if "macro redefined" in line] == [
        "  warning: noisy.cl:2:9: 'HINT' macro redefined"]


# -- constant memory, dynamic shared memory, a 2-D grid of 1-D blocks ------------------------

# Each work-group stages its elements in __local memory (dynamic: the last argument) and writes them
# mirrored, so a thread reads what another one staged; the weights are a __constant buffer. Blocks
# are numbered across a 2-D grid of 1-D work-groups.
WEIGH_CL = """\
__kernel void weigh(__global float* out, __global const float* x, __constant float* weights, int n,
                    __local float* stage) {
    const int b = get_group_id(1) * get_num_groups(0) + get_group_id(0);
    const int l = get_local_id(0), size = get_local_size(0);
    const int i = b * size + l;
    stage[l] = i < n ? x[i] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int j = size - 1 - l, k = b * size + j;
    if (k < n) out[k] = stage[j] * weights[k % 4];
}
"""
WEIGH = '''
def weighed(x, w):
    return (x.astype(np.float64) * np.resize(w, x.shape)).astype(np.float32)


def launch_weigh(kernel, x, w, four_d=False):
    n = x.shape[0]
    out = kernel.empty_like(x)
    block = int(kernel["BLOCK"])
    blocks = ktune.cdiv(n, block)
    grid = (1, 1, 1, blocks) if four_d else (ktune.cdiv(blocks, 2), 2)
    kernel.launch(grid=grid, block=block, args=[out, x, kernel.constant("weights", w), np.int32(n)],
                  shared=lambda params: 4 * int(params["BLOCK"]))
    return out


def launch_four_d(kernel, x, w):
    return launch_weigh(kernel, x, w, four_d=True)


CASE = ktune.Case(id="n1000", x=ktune.Tensor((1000,)), w=ktune.Tensor((4,), init="positive"), warm_cache=True)
weigh = ktune.target(name="weigh", kernel="weigh", sources={"opencl": "weigh.cl"},
                     space=ktune.Space(BLOCK=[32, 64, 128]), default={"BLOCK": 64},
                     key=lambda x: {"N": x.shape[0]}, cases=[CASE], reference=weighed)(launch_weigh)
four_d = ktune.target(name="four_d", kernel="weigh", sources={"opencl": "weigh.cl"},
                      space=ktune.Space(BLOCK=[64]), default={"BLOCK": 64}, key=lambda x: {"N": x.shape[0]},
                      cases=[CASE], reference=weighed)(launch_four_d)
'''


def test_constant_and_dynamic_shared_memory_on_a_2d_grid_of_1d_blocks(project: Project) -> None:
    project.write(WEIGH, sources={"weigh": WEIGH_CL})
    # The tune verifies and times every block size, the shared memory following the parameter.
    result = project.run("--ktune-tune", "--ktune-trials", "3", "--ktune-sampler", "grid",
                         "--deselect", "kernels.py::four_d::tune[N1000]")
    result.assert_outcomes(passed=3, failed=2)
    assert set(summary_rows(result)) == {("weigh", "n1000")}
    lines = result.stdout.lines
    at = next(i for i, line in enumerate(lines) if "ktune tuning" in line)
    (row,) = [line.split() for line in lines[at + 3:at + 4]]
    assert row[:3] == ["weigh", "N1000", "3"], row  # three trials, none failed or infeasible
    text = failure_section(result, "four_d::correct[n1000]")
    assert "target four_d (" in text and "a grid or block has 1 to 3 dimensions" in text


# -- check= and postprocess= -------------------------------------------------------------------

# Partial sums, one per work-group; finish adds them up.
SUM_CL = """\
__kernel void partial(__global float* sums, __global const float* x, int n, __local float* part) {
    const int l = get_local_id(0), size = get_local_size(0);
    float acc = 0.0f;
    for (int i = get_global_id(0); i < n; i += get_global_size(0)) acc += x[i];
    part[l] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = size / 2; s > 0; s >>= 1) {
        if (l < s) part[l] += part[l + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (l == 0) sums[get_group_id(0)] = part[0];
}
__kernel void finish(__global float* total, __global const float* sums, int m) {
    float t = 0.0f;
    for (int i = 0; i < m; ++i) t += sums[i];
    total[0] = t;
}
"""
# The output written back to front.
REVERSE_CL = """\
__kernel void scale(__global float* out, __global const float* x, float a, int n) {
    const int i = get_global_id(0);
    if (i < n) out[n - 1 - i] = x[i] * a;
}
"""
CHECKS = '''
def launch_partial(kernel, x):
    block = int(kernel["BLOCK"])
    sums = kernel.empty(8, np.float32)
    kernel.launch(grid=8, block=block, args=[sums, x, np.int32(x.shape[0])], shared=4 * block)
    return sums


def finish(kernel, sums):
    total = kernel.empty(1, np.float32)
    kernel.launch(grid=1, block=1, args=[total, sums, np.int32(sums.shape[0])], name="finish")
    return total


def total(x):
    return np.array([x.astype(np.float64).sum()])


SUM = dict(kernel="partial", sources={"opencl": "sum.cl"}, space=ktune.Space(BLOCK=[64]), default={"BLOCK": 64},
           key=lambda x: {"N": x.shape[0]}, cases=[ktune.Case(id="n65536", x=ktune.Tensor((65536,)))],
           reference=total, tolerance=ktune.Tolerance.for_sum(65536))
summed = ktune.target(name="summed", postprocess=finish, **SUM)(launch_partial)
unfinished = ktune.target(name="unfinished", **SUM)(launch_partial)
'''


def test_postprocess_finishes_on_the_device_and_check_judges_on_the_host(project: Project) -> None:
    reversed_ok = scale_target("reversed_ok", source="reverse.cl",
                               extra="\n    check=lambda out, ref: ktune.assert_close(out[::-1], ref),")
    reversed_bad = scale_target("reversed_bad", source="reverse.cl",
                                extra="\n    check=lambda out, ref: ktune.assert_close(out, ref),")
    project.write(CHECKS, reversed_ok, reversed_bad, sources={"sum": SUM_CL, "reverse": REVERSE_CL})
    result = project.run("-m", "ktune_correctness")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["FAILED kernels.py::reversed_bad::correct*",
                                 "FAILED kernels.py::unfinished::correct*"])
    # Without the device step, the partial sums are not the reference's total.
    assert "output 0 has shape (8,) but the reference's has (1,)" in failure_section(
        result, "unfinished::correct[n65536]")
    bad = failure_section(result, "reversed_bad::correct[small]")
    assert "case small on opencl: check= rejected the outputs (seed " in bad
    assert "elements out of tolerance" in bad


# -- case ids ------------------------------------------------------------------------------------


def test_two_cases_with_one_id_are_a_collection_error(project: Project) -> None:
    # 37 and 64 elements both bucket to N64: one baseline would overwrite the other.
    cases = "ktune.Case(x=ktune.Tensor((37,)), a=2.0), ktune.Case(x=ktune.Tensor((64,)), a=2.0)"
    project.write(scale_target(cases=cases).replace('{"N": x.shape[0]}', '{"N": ktune.bucket(x.shape[0])}'))
    result = project.run()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    out = result.stdout.str()
    assert "ERROR kernels.py::scale" in out
    assert "cases 0, 1 all have the id 'N64-float32'" in out
    assert "ktune.Case(id='N64-float32-0', ...)" in out


# -- GFLOP/s, in-memory sources ------------------------------------------------------------------

GENERATED = '''
SOURCE = ktune.Source("""\\
#include "common.clh"
__kernel void scale(__global float* out, __global const float* x, float a, int n) {
    const int i = get_global_id(0);
    if (i < n) out[i] = MUL(x[i], a);
}
""", name="gen/scale.cl")
generated = ktune.target(
    name="generated", kernel="scale", sources={"opencl": SOURCE}, space=ktune.Space(BLOCK=[64]),
    default={"BLOCK": 64}, key=lambda x: {"N": x.shape[0]},
    cases=[ktune.Case(id="small", x=ktune.Tensor((1 << 16,)), a=2.0)], reference=scaled,
    bytes_moved=lambda x: 2 * x.nbytes, flops=lambda x: x.size,
)(launch_scale)
'''


def test_an_in_memory_source_and_gflops_in_the_summary_junit_and_json(project: Project) -> None:
    project.write(GENERATED)
    (project.path / "gen").mkdir()
    (project.path / "gen" / "common.clh").write_text("#define MUL(a, b) ((a) * (b))\n")
    result = project.run("--ktune-update-baseline", "--ktune-junit=ktune.xml", "--ktune-benchmark-json=bench.json")
    result.assert_outcomes(passed=2)
    # The GFLOP/s columns are a table of their own, under the timed cases'.
    lines = result.stdout.lines
    at = next(i for i in range(table_header(result) + 1, len(lines)) if lines[i].startswith("target "))
    assert re.split(r"\s{2,}", lines[at].strip()) == ["target", "case", "GFLOP/s", "% FMA peak", "bound"]
    target, case_id, gflops, peak, bound = re.split(r"\s{2,}", lines[at + 2].strip())
    assert (target, case_id) == ("generated", "small")
    assert float(gflops) > 0 and peak.endswith("%") and bound == "memory"  # 1 FLOP per 8 bytes

    (record,) = project.records()
    text = (project.path / "kernels.py").read_text()
    body = text[text.index('SOURCE = ktune.Source("""') + len('SOURCE = ktune.Source("""'):]
    body = body[:body.index('""", name=')].replace("\\\n", "")
    assert record["baseline"]["source_path"] == "gen/scale.cl"
    assert record["baseline"]["source_hash"] == source_hash(body)
    assert record["baseline"]["deps_hash"]  # the header it includes, found beside the named file

    root = ET.parse(project.path / "ktune.xml").getroot()
    # Schema-valid JUnit: a testcase's numbers are its suite's properties, named after it.
    suite = next(s for s in root.iter("testsuite") if s.get("name") == "kernels.py::generated")
    props = {p.get("name", "")[len("perf[small]."):]: p.get("value") for p in suite.findall("properties/property")
             if p.get("name", "").startswith("perf[small].")}
    assert float(props["gflops"] or 0) == pytest.approx(float(gflops), abs=0.051)  # the summary shows 1 decimal
    assert 0 < float(props["peak_fraction"] or 0) < 1 and props["bound"] == "memory"
    (bench,) = json.loads((project.path / "bench.json").read_text())["benchmarks"]
    info = bench["extra_info"]
    assert f"{info['gflops']:.2f}" == props["gflops"]  # JUnit writes two decimals
    assert info["flop_per_byte"] == pytest.approx(1 / 8) and info["bound"] == "memory"

    # A changed text is a changed source, as a file's is: slower, it fails, saying why A/B cannot confirm it.
    slow = ("if (i >= n) return; float t = x[i]; for (int r = 0; r < 256; ++r) t = sin(t); "
            "out[i] = t == 12345.0f ? 0.0f : MUL(x[i], a);")
    (project.path / "kernels.py").write_text(text.replace("if (i < n) out[i] = MUL(x[i], a);", slow))
    gated = project.run("-m", "ktune_performance")
    gated.assert_outcomes(failed=1)
    message = failure_section(gated, "generated::perf[small]")
    assert "The source is a ktune.Source held in Python (kernels.py) and changed since the baseline" in message
    assert "could not be confirmed A/B" in message


# -- tolerances ----------------------------------------------------------------------------------

# A reference 1e-4 off, relative: within fp32's elementwise rtol, outside its 1e-5 relative-norm limit,
# as a long sum's rounding is.
TOLERANCES = '''
def scaled_long(x, a):
    return x.astype(np.float64) * a * (1 + 1e-4)


LOOSE = ktune.Tolerance(norm=1e-3, atol=1e-3, rtol=1e-3)
'''


def test_a_tolerance_that_scales_with_the_reduction_or_is_the_cases_own(project: Project) -> None:
    two = "ktune.Case(id='plain', x=ktune.Tensor((4096,)), a=2.0), " \
          "ktune.Case(id='loose', x=ktune.Tensor((4096,)), a=2.0, tolerance=LOOSE)"
    project.write(TOLERANCES,
                  scale_target("strict", reference="scaled_long"),
                  scale_target("scaled", reference="scaled_long",
                               extra="\n    tolerance=lambda x: ktune.Tolerance.for_sum(289),"),
                  scale_target("per_case", reference="scaled_long", cases=two))
    result = project.run("-m", "ktune_correctness")
    result.assert_outcomes(passed=2, failed=2)
    for name in ("strict::correct[small]", "per_case::correct[plain]"):
        assert "relative norm 0.0001 (limit 1e-05)" in failure_section(result, name)
    result.stdout.fnmatch_lines([lit("FAILED kernels.py::per_case::correct[plain]") + "*"])
