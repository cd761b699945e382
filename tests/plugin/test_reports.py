"""--ktune-junit and --ktune-benchmark-json: the reports a run writes at its end, from the items' outcomes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from ._kit import Project, add_target, case, scale_target

# scale: two cases; wrong: a reference that disagrees with the kernel, so both its items fail.
TARGETS = (scale_target(cases=f"{case(4096, case_id='small')}, {case(8192, case_id='big')}")
           + scale_target("wrong", reference="added_wrongly")
           + add_target())
WRONG_REFERENCE = '''
def added_wrongly(x, a):
    return (x.astype(np.float64) * a + 1).astype(np.float32)
'''


def test_junit_and_benchmark_json_reports(project: Project) -> None:
    project.write(WRONG_REFERENCE + TARGETS)
    (project.path / "out").mkdir()
    result = project.run("--ktune-junit=out/ktune.xml", "--ktune-benchmark-json=out/bench.json")
    result.assert_outcomes(passed=6, failed=2)
    result.stdout.fnmatch_lines(["ktune: wrote the JUnit report to *out/ktune.xml",
                                 "ktune: wrote the benchmark JSON to *out/bench.json"])

    root = ET.parse(project.path / "out" / "ktune.xml").getroot()
    assert root.tag == "testsuites"
    assert {k: root.get(k) for k in ("tests", "failures", "errors", "skipped")} == \
        {"tests": "8", "failures": "2", "errors": "0", "skipped": "0"}
    assert [s.get("name") for s in root.findall("testsuite")] == \
        ["kernels.py::add", "kernels.py::scale", "kernels.py::wrong"]
    cases = {(tc.get("classname"), tc.get("name")): tc for tc in root.iter("testcase")}
    assert set(cases) == {("kernels.add", "correct[n4096]"), ("kernels.add", "perf[n4096]"),
                          ("kernels.scale", "correct[small]"), ("kernels.scale", "perf[small]"),
                          ("kernels.scale", "correct[big]"), ("kernels.scale", "perf[big]"),
                          ("kernels.wrong", "correct[small]"), ("kernels.wrong", "perf[small]")}

    failure = cases[("kernels.wrong", "correct[small]")].find("failure")
    assert failure is not None and failure.text and "out of tolerance" in failure.text
    perf = cases[("kernels.scale", "perf[big]")]
    props = {p.get("name"): p.get("value") for p in perf.findall("properties/property")}
    assert float(props["time_us"] or "0") > 0
    assert props["verdict"] == "no baseline" and props["backend"] == "opencl" and props["device"]
    assert json.loads(props["params"] or "") == {"BLOCK": 64}
    assert float(perf.get("time", "0")) > 0

    doc = json.loads((project.path / "out" / "bench.json").read_text())
    names = sorted(b["fullname"] for b in doc["benchmarks"])
    assert names == ["kernels.py::add::perf[n4096]", "kernels.py::scale::perf[big]",
                     "kernels.py::scale::perf[small]"]  # the failed item timed nothing
    big = next(b for b in doc["benchmarks"] if b["name"] == "perf[big]")
    assert big["stats"]["rounds"] == len(big["stats"]["data"]) > 1
    assert big["stats"]["median"] * 1e6 == big["extra_info"]["time_us"]
    assert doc["machine_info"]["ktune"]["backend"] == "opencl"


def test_a_report_that_cannot_be_written_is_said(project: Project) -> None:
    project.write(add_target())
    (project.path / "blocked").write_text("a file where a folder should be")
    result = project.run("--ktune-junit=blocked/ktune.xml")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["ktune: JUnit report NOT written to *blocked/ktune.xml: *"])
