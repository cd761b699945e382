"""--ktune-junit and --ktune-benchmark-json: the reports a run writes at its end, from the items' outcomes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ._kit import Project, add_target, case, scale_target

SCHEMA = Path(__file__).resolve().parents[1] / "data" / "junit-10.xsd"

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
    # pytest-benchmark's own plugin (installed here with the dev extra) makes .benchmarks/ in every run;
    # without it, as in a suite that installed only pytest-ktune, the benchmark JSON leaves none.
    result = project.run("--ktune-junit=out/ktune.xml", "--ktune-benchmark-json=out/bench.json", "-p", "no:benchmark")
    result.assert_outcomes(passed=6, failed=2)
    result.stdout.fnmatch_lines(["ktune: wrote the JUnit report to *out/ktune.xml",
                                 "ktune: wrote the benchmark JSON to *out/bench.json"])

    root = ET.parse(project.path / "out" / "ktune.xml").getroot()
    assert root.tag == "testsuites"
    assert {k: root.get(k) for k in ("tests", "failures", "errors")} == {"tests": "8", "failures": "2", "errors": "0"}
    assert sum(int(s.get("skipped", "")) for s in root.findall("testsuite")) == 0
    assert [s.get("name") for s in root.findall("testsuite")] == \
        ["kernels.py::add", "kernels.py::scale", "kernels.py::wrong"]
    cases = {(tc.get("classname"), tc.get("name")): tc for tc in root.iter("testcase")}
    assert set(cases) == {("kernels.add", "correct[n4096]"), ("kernels.add", "perf[n4096]"),
                          ("kernels.scale", "correct[small]"), ("kernels.scale", "perf[small]"),
                          ("kernels.scale", "correct[big]"), ("kernels.scale", "perf[big]"),
                          ("kernels.wrong", "correct[small]"), ("kernels.wrong", "perf[small]")}

    xmlschema = pytest.importorskip("xmlschema", reason="a dev dependency: pip install -e '.[dev]'")
    xmlschema.XMLSchema(str(SCHEMA)).validate(str(project.path / "out" / "ktune.xml"))
    failure = cases[("kernels.wrong", "correct[small]")].find("failure")
    assert failure is not None and failure.text and "out of tolerance" in failure.text
    perf = cases[("kernels.scale", "perf[big]")]
    suite = next(s for s in root.findall("testsuite") if s.get("name") == "kernels.py::scale")
    every = {p.get("name", ""): p.get("value", "") for p in suite.findall("properties/property")}
    props = {k.removeprefix("perf[big]."): v for k, v in every.items() if k.startswith("perf[big].")}
    assert float(props["time_us"] or "0") > 0
    assert props["verdict"] == "no baseline" and every["backend"] == "opencl" and every["device"]
    assert json.loads(props["params"] or "") == {"BLOCK": 64}
    assert float(perf.get("time", "0")) > 0

    doc = json.loads((project.path / "out" / "bench.json").read_text())
    device = doc["machine_info"]["ktune"]["device"]
    names = sorted(b["fullname"] for b in doc["benchmarks"])
    assert device and names == [f"kernels.py::add::perf[n4096] on {device}",
                                f"kernels.py::scale::perf[big] on {device}",
                                f"kernels.py::scale::perf[small] on {device}"]  # the failed item timed nothing
    big = next(b for b in doc["benchmarks"] if b["name"] == f"perf[big] on {device}")
    assert big["stats"]["rounds"] == len(big["stats"]["data"]) > 1
    assert big["stats"]["median"] * 1e6 == big["extra_info"]["time_us"]
    assert doc["machine_info"]["ktune"]["backend"] == "opencl"
    assert not (project.path / ".benchmarks").exists()


def test_installing_pytest_ktune_does_not_switch_pytest_benchmark_on() -> None:
    from importlib import metadata

    required = metadata.requires("pytest-ktune") or []
    unconditional = [r for r in required if "extra ==" not in r]
    assert not [r for r in unconditional if r.lower().startswith("pytest-benchmark")], unconditional
    assert any(r.startswith("pytest-benchmark") and 'extra == "benchmark"' in r for r in required), required


def test_a_report_that_cannot_be_written_is_said(project: Project) -> None:
    project.write(add_target())
    (project.path / "blocked").write_text("a file where a folder should be")
    result = project.run("--ktune-junit=blocked/ktune.xml")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["ktune: JUnit report NOT written to *blocked/ktune.xml: *"])


def test_the_markdown_summary_is_appended_for_the_jobs_page(project: Project,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    project.write(WRONG_REFERENCE + scale_target("wrong", reference="added_wrongly") + add_target())
    page = project.path / "summary.md"
    page.write_text("earlier step\n")
    monkeypatch.setenv("KTUNE_MARKDOWN", str(page))  # as a workflow sets it to $GITHUB_STEP_SUMMARY
    result = project.run()
    result.assert_outcomes(passed=2, failed=2)
    text = page.read_text()
    assert text.startswith("earlier step\n### pytest-ktune: opencl on ")
    assert "**2 check(s) failed** (4 checks)" in text
    assert "| add | n4096 |" in text and "| no baseline |" in text
    assert "| kernels.py::wrong::correct\\[small\\] | " in text
