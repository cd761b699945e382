"""Bad input: each mistake fails its own items with a message naming the target or file and a next
step, while the other targets of the same run still pass."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pytest

from ._kit import Project, add_target, case, failure_section, lit, scale_target

BROKEN_CL = """\
// A typo on line 4.
__kernel void scale(__global float* out, __global const float* x, float a, int n) {
    const int i = get_global_id(0);
    if (i < n) out[i] = x[i] * a * undefined_gain;
}
"""


@dataclass(frozen=True)
class Mistake:
    """A target named ``cramped`` with one mistake, and what its correctness item must say.

    ``expected`` holds fragments of the failure, in order: where (the target and its file, or the
    kernel source for compiler and launch errors, whose failure is titled with the target's item),
    what went wrong, and the next step.
    """

    target: str
    source: str | None
    expected: tuple[str, ...]
    case_id: str = "small"


MISTAKES = {
    "no-valid-point": Mistake(
        scale_target("cramped", cases=case(1000, case_id="odd"),
                     space="BLOCK=[64, 128], constraints=['N % BLOCK == 0']"),
        None,
        ("target cramped (", "kernels.py): the space has no valid point for key N=1000",
         "rule out all 2 configurations",
         "next step: widen the Space, relax a constraint, or drop this case"),
        case_id="odd",
    ),
    "unknown-name-in-constraint": Mistake(
        scale_target("cramped", space="BLOCK=[64, 128], constraints=['N % BLOKC == 0']"),
        None,
        ("target cramped (", "kernels.py): constraint 'N % BLOKC == 0' names BLOKC, which is neither a "
         "parameter (BLOCK) nor a key dimension (N)", "next step: fix the spelling"),
    ),
    "compile-error": Mistake(
        scale_target("cramped", source="broken.cl"),
        BROKEN_CL,
        ("broken.cl: OpenCL compile failed with -DBLOCK=64", "undeclared identifier 'undefined_gain'",
         "broken.cl, line 4:", ">    4 |     if (i < n) out[i] = x[i] * a * undefined_gain;",
         "next step: fix the source at the lines shown"),
    ),
    "block-too-large": Mistake(
        scale_target("cramped", space="BLOCK=[65536]", default="{'BLOCK': 65536}"),
        None,
        ("scale.cl: kernel scale launched with 65536 threads per block; this device allows at most ",
         "next step: use a smaller block"),
    ),
    "reference-shape": Mistake(
        scale_target("cramped", reference="lambda x, a: scaled(x, a)[:-1]"),
        None,
        ("target cramped (", "kernels.py): case small: output 0 has shape (4096,) but the reference's "
         "has (4095,)", "next step: make the reference return arrays shaped like the kernel's outputs"),
    ),
    "reference-dtype": Mistake(
        scale_target("cramped", reference="lambda x, a: scaled(x, a).astype(np.int32)"),
        None,
        ("target cramped (", "kernels.py): case small: output 0 is float32 but the reference's is int32",
         "next step: return the reference in the output's dtype family"),
    ),
}


def assert_in_order(text: str, fragments: tuple[str, ...]) -> None:
    pos = 0
    for fragment in fragments:
        found = text.find(fragment, pos)
        assert found >= 0, f"{fragment!r} not found (in order) in:\n{text}"
        pos = found + len(fragment)


@pytest.mark.parametrize("name", list(MISTAKES))
def test_a_mistake_fails_only_its_own_items(project: Project, name: str) -> None:
    mistake = MISTAKES[name]
    project.write(scale_target(), mistake.target, add_target(),
                  sources={"broken": mistake.source} if mistake.source else None)
    result = project.run("-v")
    result.assert_outcomes(passed=4, failed=2)
    result.stdout.fnmatch_lines(["*::add::perf* PASSED*", "*::scale::perf* PASSED*"], consecutive=False)
    result.stdout.fnmatch_lines(["FAILED kernels.py::cramped::correct*", "FAILED kernels.py::cramped::perf*"])
    correct = failure_section(result, f"cramped::correct[{mistake.case_id}]")
    assert_in_order(correct, mistake.expected)
    # Errors are shown as messages, not as tracebacks through the plugin's code.
    assert "Traceback" not in correct and not re.search(r"\.py:\d+", correct), correct
    perf = failure_section(result, f"cramped::perf[{mistake.case_id}]")
    assert mistake.expected[0] in perf and mistake.expected[-1] in perf


# -- the params file -------------------------------------------------------

def _valid_record(**changes: object) -> dict[str, object]:
    record: dict[str, object] = {
        "target": "kernels.py::scale", "device": "some device [opencl]", "key": {"N": 4096},
        "params": {"BLOCK": 64},
        "baseline": {
            "params": {"BLOCK": 64}, "source_hash": "0123456789abcdef", "source_path": "scale.cl",
            "commit": None, "date": "2024-01-01T00:00:00Z", "ktune_version": "0.1.0",
            "timings": {"small": {"median_us": 10.0, "iqr_us": 1.0, "ci_low_us": 9.5, "ci_high_us": 10.5,
                                  "samples": 20, "gbps": None}},
        },
    }
    record.update(changes)
    return record


def _baseline_with(**changes: object) -> dict[str, object]:
    baseline = _valid_record()["baseline"]
    assert isinstance(baseline, dict)
    return {**baseline, **changes}


def _params_file(*records: dict[str, object]) -> str:
    return json.dumps({"format": "pytest-ktune/1", "records": list(records)}, indent=2)


DAMAGED = {
    # Cut off in the middle, as a bad merge or an editor crash leaves it.
    "invalid-json": (_params_file(_valid_record())[:150], "the params file is not valid JSON: "),
    # Valid JSON, but a field of the wrong type.
    "params-a-list": (_params_file(_valid_record(params=[64])),
                      "the params file is damaged: record 0 has no valid 'params' (expected a dict)"),
    "timing-a-string": (
        _params_file(_valid_record(baseline=_baseline_with(timings={"small": {
            "median_us": "10.0", "iqr_us": 1.0, "ci_low_us": 9.5, "ci_high_us": 10.5, "samples": 20}}))),
        "the params file is damaged: record 0 baseline timing 'small': median_us is '10.0', not a number"),
}


@pytest.mark.parametrize(("damage", "update"), [
    ("invalid-json", False), ("invalid-json", True), ("params-a-list", True),
    ("timing-a-string", False), ("timing-a-string", True),
])
def test_a_damaged_params_file_fails_the_timings_and_is_never_overwritten(
        project: Project, damage: str, update: bool) -> None:
    text, message = DAMAGED[damage]
    project.write(scale_target(), add_target())
    project.params_path.write_text(text)
    before = project.params_path.read_bytes()

    result = project.run("-v", *(["--ktune-update-baseline"] if update else []))
    # Correctness does not need the file: it checks the default configuration.
    result.stdout.fnmatch_lines(["*::add::correct* PASSED*", "*::scale::correct* PASSED*"],
                                consecutive=False)
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["ktune: WARNING *ktune-params.json: " + lit(message) + "*"])
    for title in ("add::perf[n4096]", "scale::perf[small]"):
        section = failure_section(result, title)
        assert_in_order(section, ("ktune-params.json: ", message, "next step: fix the file by hand, or "
                                  "restore the committed one with `git checkout -- ktune-params.json`"))
        assert "Traceback" not in section
    result.stdout.no_fnmatch_line("*wrote * baseline record*")
    assert project.params_path.read_bytes() == before
    assert [p.name for p in project.path.iterdir() if p.name.startswith(".ktune-params.")] == []
