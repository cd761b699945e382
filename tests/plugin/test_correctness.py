"""Correctness items: unwritten outputs and wrong values fail with what is needed to reproduce them."""

from __future__ import annotations

import re

from ._kit import Project, failure_section, lit, scale_target

# Forgets the last three elements: they keep the NaN poison the plugin fills outputs with.
FORGETFUL_CL = """\
__kernel void scale(__global float* out, __global const float* x, float a, int n) {
    const int i = get_global_id(0);
    if (i < n - 3) out[i] = x[i] * a;
}
"""

# Wrong wherever the input is above 1.5, so what fails depends on the inputs drawn.
SLOPPY_CL = """\
__kernel void scale(__global float* out, __global const float* x, float a, int n) {
    const int i = get_global_id(0);
    if (i < n) out[i] = x[i] > 1.5f ? 0.0f : x[i] * a;
}
"""


def test_unwritten_elements_fail_naming_nan_the_worst_index_and_the_seed(project: Project) -> None:
    project.write(scale_target(), scale_target("forgetful", source="forgetful.cl"),
                  sources={"forgetful": FORGETFUL_CL})
    result = project.run("--ktune-seed", "31337")
    # The good target passes; both items of the broken one fail (timing verifies its inputs too).
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines([
        "FAILED kernels.py::forgetful::correct*",
        "FAILED kernels.py::forgetful::perf*",
    ])
    text = failure_section(result, "forgetful::correct[small]")
    assert "target forgetful (" in text and "kernels.py)" in text
    assert "case small on opencl: output disagrees with the reference (seed " in text
    assert "3 of 4096 elements out of tolerance" in text
    assert "worst at index (4093,): got nan" in text
    assert "NaN where a value was expected: the kernel may not write every element" in text
    assert "next step: rerun with --ktune-seed 31337 to draw the same inputs" in text


def _mismatch_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()
            if "(seed " in line or "out of tolerance" in line]


def test_the_printed_seed_reproduces_the_failure(project: Project) -> None:
    project.write(scale_target("sloppy", source="sloppy.cl"), sources={"sloppy": SLOPPY_CL})
    section = "sloppy::correct[small]"

    first = project.run("-m", "ktune_correctness")
    first.assert_outcomes(failed=1)
    first_text = failure_section(first, section)
    m = re.search(r"rerun with --ktune-seed (\d+) ", first_text)
    assert m, first_text
    seed = m.group(1)
    first.stdout.fnmatch_lines([lit(f"ktune: seed {seed} (rerun with --ktune-seed {seed})") + "*"])
    details = _mismatch_lines(first_text)
    assert len(details) == 2 and "worst at index" in details[1], first_text

    again = project.run("-m", "ktune_correctness", "--ktune-seed", seed)
    again.assert_outcomes(failed=1)
    assert _mismatch_lines(failure_section(again, section)) == details

    other = project.run("-m", "ktune_correctness", "--ktune-seed", str(int(seed) + 1))
    other.assert_outcomes(failed=1)
    assert _mismatch_lines(failure_section(other, section)) != details



# Writes one element past the end of its output: the guard after the output sees it.
OVERWRITE_CL = """\
__kernel void scale(__global float* out, __global const float* x, float a, int n) {
    const int i = get_global_id(0);
    if (i <= n) out[i] = (i < n ? x[i] : 1.0f) * a;
}
"""

# Reads the element after its own, past the end of x for the last one, and lets it into the result.
OVERREAD_CL = """\
__kernel void scale(__global float* out, __global const float* x, float a, int n) {
    const int i = get_global_id(0);
    if (i < n) out[i] = x[i] * a + 0.0f * x[i + 1];
}
"""


def test_a_write_past_the_end_of_an_output_fails_naming_the_buffer(project: Project) -> None:
    project.write(scale_target("over", source="over.cl", cases="ktune.Case(id='small', x=ktune.Tensor((4000,)), "
                                                              "a=2.0)"),
                  sources={"over": OVERWRITE_CL})
    result = project.run("-m", "ktune_correctness")
    result.assert_outcomes(failed=1)
    text = failure_section(result, "over::correct[small]")
    assert "case small: the kernel wrote outside its buffers: output 0" in text
    assert "byte(s) written past the end of the buffer, as far as 4 bytes from it" in text


def test_a_result_that_depends_on_a_read_past_the_end_fails(project: Project) -> None:
    project.write(scale_target("peek", source="peek.cl"), sources={"peek": OVERREAD_CL})
    result = project.run("-m", "ktune_correctness")
    result.assert_outcomes(failed=1)
    text = failure_section(result, "peek::correct[small]")
    assert "1 of 4096 elements out of tolerance" in text and "worst at index (4095,): got nan" in text
