"""The JUnit XML report: the structure CI readers (Jenkins, GitLab, GitHub test reporters) expect, and the numbers."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

from pytest_ktune.gate.verdict import PerfResult
from pytest_ktune.measure.bench import Measurement
from pytest_ktune.report.junit import build, classname, clean
from pytest_ktune.report.results import ItemOutcome
from pytest_ktune.tuner.outcome import TuneOutcome

TARGET = "kernels/rmsnorm.py::rmsnorm"
DEVICE = "NVIDIA H200"
REGRESSION = ("rmsnorm[T64] on NVIDIA H200 regressed: 13.10 µs against a baseline of 12.50 µs (x1.048, threshold "
              "median:5%); confirmed by same-run A/B: current 13.10 µs vs the baseline's parameters 12.48 µs: "
              "x1.050, p=0.0001.\nFix the kernel, tune it, or accept the new time with --ktune-update-baseline.")


def _outcome(check: str, label: str, outcome: str = "passed", message: str = "", target: str = TARGET,
             **kw: object) -> ItemOutcome:
    return ItemOutcome(nodeid=f"{target}::{check}[{label}]", check=check, target=target,
                       name=target.rpartition("::")[2], label=label, outcome=outcome, duration_s=0.25,
                       message=message, **kw)  # type: ignore[arg-type]


def _perf(case: str, verdict: str, time_us: float, baseline_us: float | None, note: str = "") -> PerfResult:
    return PerfResult(target="rmsnorm", case=case, backend="cuda", device=DEVICE, time_us=time_us,
                      baseline_us=baseline_us, ratio=time_us / baseline_us if baseline_us else None, gbps=812.5,
                      copy_fraction=0.2, verdict=verdict, note=note, target_id=TARGET,
                      params={"BLOCK": 256, "VEC": 4},
                      measurement=Measurement((1e-5, 1.1e-5), repeats=8, flushed=True, rotation=3))


def _tune() -> TuneOutcome:
    return TuneOutcome(target="rmsnorm", key={"T": 64, "H": 4096}, device=f"{DEVICE} [cuda]", study="s", timed=40,
                       infeasible=2, failed=1, default_us=15.0, current_params={"BLOCK": 256, "VEC": 4},
                       current_us=12.5, best_params={"BLOCK": 512, "VEC": 8}, best_us=10.0, accepted=True,
                       decision="x1.250 faster than the current parameters in same-run A/B", report=None,
                       wall_s=30.0, written=True)


def _report() -> ET.Element:
    outcomes = [
        _outcome("correct", "T64"),
        _outcome("perf", "T64", "failed", REGRESSION),
        _outcome("correct", "T1", "failed", "\x1b[31mMismatchError\x1b[0m: 3 of 4096 elements out of tolerance\x07"),
        _outcome("perf", "T1", "skipped", "case declared for cuda only, not opencl"),
        _outcome("tune", "T64-H4096", key={"T": 64, "H": 4096}),
        _outcome("broken", "case2", "failed", "a space with no valid point"),
        _outcome("correct", "n4096", target="kernels/silu.py::silu_and_mul"),
        _outcome("perf", "n4096", "error", "setup failed", target="kernels/silu.py::silu_and_mul"),
    ]
    regression = replace(_perf("T64", "REGRESSION", 13.1, 12.5, note="same-run A/B: ..."), ratio=1.05)  # the A/B's
    results = [regression, _perf("T1", "ok", 3.0, 3.1)]
    text = build(outcomes, results, [_tune()], backend="cuda", device=DEVICE, timestamp="2026-11-30T12:00:00")
    assert text.startswith('<?xml version="1.0" encoding="utf-8"?>\n')
    return ET.fromstring(text)


SCHEMA = Path(__file__).resolve().parents[1] / "data" / "junit-10.xsd"


def _props(root: ET.Element, classname: str, name: str) -> dict[str, str]:
    """A testcase's properties: those of its suite named after it (``perf[T64].time_us``), and the suite's own."""
    suite = next(s for s in root.findall("testsuite") if any(
        tc.get("classname") == classname and tc.get("name") == name for tc in s.findall("testcase")))
    props = {p.get("name", ""): p.get("value", "") for p in suite.findall("properties/property")}
    own = {k[len(name) + 1:]: v for k, v in props.items() if k.startswith(f"{name}.")}
    return {**{k: v for k, v in props.items() if "." not in k and "[" not in k}, **own}


def _case(root: ET.Element, classname: str, name: str) -> ET.Element:
    found = [tc for tc in root.iter("testcase") if tc.get("classname") == classname and tc.get("name") == name]
    assert len(found) == 1, (classname, name)
    return found[0]


def test_the_document_is_valid_against_the_junit_10_schema(tmp_path: Path) -> None:
    import xmlschema

    schema = xmlschema.XMLSchema(str(SCHEMA))
    text = ET.tostring(_report(), encoding="unicode")
    schema.validate(text)  # raises with the first problem
    schema.validate(build([], backend="opencl", device=""))


def test_the_document_has_the_structure_ci_readers_expect() -> None:
    root = _report()
    assert root.tag == "testsuites"
    # An error (a check that could not run to its end) is a failure of type error: the schema has no error element.
    assert {k: root.get(k) for k in ("tests", "failures", "errors")} == {"tests": "8", "failures": "4", "errors": "0"}
    assert root.get("time") == "2.000"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [TARGET, "kernels/silu.py::silu_and_mul"]
    for suite in suites:
        cases = suite.findall("testcase")
        assert suite.get("tests") == str(len(cases))
        for attr in ("failures", "errors", "skipped", "time", "timestamp", "hostname"):
            assert suite.get(attr) is not None, attr
        assert int(suite.get("failures", "")) == sum(1 for c in cases if c.find("failure") is not None)
        assert int(suite.get("skipped", "")) == sum(1 for c in cases if c.find("skipped") is not None)
        suite_props = {p.get("name"): p.get("value") for p in suite.findall("properties/property")}
        assert suite_props["backend"] == "cuda" and suite_props["device"] == DEVICE
        for tc in cases:
            assert tc.get("classname") and tc.get("name")
            assert tc.get("time") == "0.250"  # three decimals, as the schema's time allows
            assert tc.find("properties") is None
            out = tc.find("system-out")
            assert out is not None and "verdict" in (out.text or "")
            el = tc.find("failure")
            if el is not None:
                assert el.get("message") and el.text


def test_names_and_classnames() -> None:
    root = _report()
    names = [(tc.get("classname"), tc.get("name")) for tc in root.iter("testcase")]
    assert names[:6] == [("kernels.rmsnorm.rmsnorm", n) for n in
                         ("correct[T64]", "perf[T64]", "correct[T1]", "perf[T1]", "tune[T64-H4096]", "case2")]
    assert classname("kernels/silu.py::silu_and_mul") == "kernels.silu.silu_and_mul"
    assert classname("kernels.py::scale") == "kernels.scale"


def test_a_regression_is_a_failure_that_carries_the_numbers() -> None:
    root = _report()
    tc = _case(root, "kernels.rmsnorm.rmsnorm", "perf[T64]")
    failure = tc.find("failure")
    assert failure is not None
    assert failure.get("type") == "regression"
    message = failure.get("message", "")
    assert "13.10 µs against a baseline of 12.50 µs" in message and "p=0.0001" in message
    assert failure.text == REGRESSION
    props = _props(root, "kernels.rmsnorm.rmsnorm", "perf[T64]")
    assert props["verdict"] == "REGRESSION"
    assert props["time_us"] == "13.1000" and props["baseline_us"] == "12.5000" and props["ratio"] == "1.0480"
    assert props["ab_ratio"] == "1.0500"  # the A/B's own ratio, beside the one of the two times
    assert json.loads(props["params"]) == {"BLOCK": 256, "VEC": 4}
    assert props["backend"] == "cuda" and props["device"] == DEVICE
    assert props["target"] == TARGET
    assert props["note"] == "same-run A/B: ..."


def test_properties_agree_and_notes_stay_on_their_own_testcase() -> None:
    root = _report()
    for name in ("perf[T64]", "perf[T1]", "tune[T64-H4096]"):
        props = _props(root, "kernels.rmsnorm.rmsnorm", name)
        assert abs(float(props["ratio"]) - float(props["time_us"]) / float(props["baseline_us"])) < 1e-4, name
    correct = _props(root, "kernels.rmsnorm.rmsnorm", "correct[T64]")
    # The correctness check's testcase carries neither the performance item's note nor its numbers.
    assert not {"note", "time_us", "baseline_us", "ratio", "ab_ratio"} & set(correct)
    assert "A/B" not in (_case(root, "kernels.rmsnorm.rmsnorm", "correct[T64]").findtext("system-out") or "")


def test_passing_skipped_and_errored_items() -> None:
    root = _report()
    ok = _props(root, "kernels.rmsnorm.rmsnorm", "correct[T64]")
    assert ok["verdict"] == "ok" and json.loads(ok["params"]) == {"BLOCK": 256, "VEC": 4}
    skipped = _case(root, "kernels.rmsnorm.rmsnorm", "perf[T1]").find("skipped")
    assert skipped is not None and skipped.get("message") == "case declared for cuda only, not opencl"
    error = _case(root, "kernels.silu.silu_and_mul", "perf[n4096]").find("failure")
    assert error is not None and error.get("message") == "setup failed" and error.get("type") == "error"
    assert _props(root, "kernels.silu.silu_and_mul", "correct[n4096]")["device"] == DEVICE


def test_colour_codes_and_control_characters_are_dropped() -> None:
    tc = _case(_report(), "kernels.rmsnorm.rmsnorm", "correct[T1]")
    failure = tc.find("failure")
    assert failure is not None
    assert failure.get("message") == "MismatchError: 3 of 4096 elements out of tolerance"
    assert clean("a\x1b[1;31mb\x00c\x1b[0m") == "abc"


def test_a_tune_item_has_the_best_and_current_times() -> None:
    props = _props(_report(), "kernels.rmsnorm.rmsnorm", "tune[T64-H4096]")
    assert props["verdict"] == "written"
    assert props["time_us"] == "10.0000" and props["baseline_us"] == "12.5000" and props["ratio"] == "0.8000"
    assert json.loads(props["params"]) == {"BLOCK": 512, "VEC": 8}
    assert json.loads(props["key"]) == {"H": 4096, "T": 64}
    assert props["decision"].startswith("x1.250 faster")


def test_an_empty_run_is_a_valid_document(tmp_path: Path) -> None:
    root = ET.fromstring(build([], backend="opencl", device=""))
    assert root.tag == "testsuites" and root.get("tests") == "0" and root.findall("testsuite") == []
